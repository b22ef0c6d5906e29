"""Plugin discovery among many installed distributions: opmarket's cached scan, cold and
warm, against importlib.metadata's ``entry_points(group="opmarket")``.

Sets up a site directory of fake installed distributions (``--dists``, default 2,000), of
which ``--plugins`` (default 200) declare an entry point in the group ``opmarket`` and the
rest declare ``console_scripts`` or nothing, as in a large environment. Its times are set a
minute back, as after an install that happened earlier (a directory changed within the last
two seconds is never cached). Each figure is the best of ``--rounds`` runs in this process:

- cold: no cache file (removed before each run): the scan plus writing the cache;
- warm: the cache file is there and nothing changed: checking it and reading it;
- importlib.metadata scan: ``entry_points(group="opmarket")`` over the same directory.

    python bench/discovery.py [--dists N] [--plugins P] [--rounds R]

Ends with ``discovery: X ms cold, Y ms warm (importlib.metadata scan: Z ms)``; the target
is a warm discovery under 5 ms.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from opmarket.registry._discovery import scan


def make_site(site: Path, dists: int, plugins: int) -> None:
    """Fake installed distributions, as pip leaves them (METADATA, RECORD, entry points)."""
    every = max(dists // max(plugins, 1), 1)
    made = 0
    for i in range(dists):
        name = f"fake_dist_{i:05d}"
        info = site / f"{name}-1.{i % 7}.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: fake-dist-{i:05d}\nVersion: 1.{i % 7}.0\n"
            "Summary: a fake distribution\n\nA long description.\n"
        )
        (info / "RECORD").write_text(f"{name}/__init__.py,,\n{info.name}/METADATA,,\n")
        (info / "INSTALLER").write_text("pip\n")
        if i % every == 0 and made < plugins:
            made += 1
            (info / "entry_points.txt").write_text(
                f"[console_scripts]\nfake-{i} = {name}.cli:main\n\n[opmarket]\nfake_{i} = {name}\n"
            )
        elif i % 3 == 0:
            (info / "entry_points.txt").write_text(f"[console_scripts]\nfake-{i} = {name}:main\n")
    past = time.time() - 60
    for path in [site, *site.rglob("*")]:
        os.utime(path, (past, past))


def best_ms(
    fn: Callable[[], object],
    rounds: int,
    before: Callable[[], None] | None = None,
) -> float:
    best = float("inf")
    for _ in range(rounds):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dists", type=int, default=2000, help="installed distributions")
    parser.add_argument("--plugins", type=int, default=200, help="of which plugins")
    parser.add_argument("--rounds", type=int, default=20, help="runs per figure (best counts)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="opm-bench-discovery-") as tmp:
        site, cache = Path(tmp, "site"), Path(tmp, "cache")
        site.mkdir()
        make_site(site, args.dists, args.plugins)
        os.environ["OPMARKET_CACHE_DIR"] = str(cache)
        paths = [str(site)]

        def clear_cache() -> None:
            shutil.rmtree(cache, ignore_errors=True)

        cold_scan = scan(paths)
        assert not cold_scan.from_cache and len(cold_scan.entries) == args.plugins, cold_scan
        warm_scan = scan(paths)
        assert warm_scan.from_cache and warm_scan.entries == cold_scan.entries, "not cached"

        saved = sys.path[:]
        sys.path[:] = paths  # importlib.metadata searches sys.path
        try:
            found = importlib.metadata.entry_points(group="opmarket")
            assert len(found) == args.plugins, len(found)
            baseline = best_ms(
                lambda: importlib.metadata.entry_points(group="opmarket"), args.rounds
            )
        finally:
            sys.path[:] = saved
        cold = best_ms(lambda: scan(paths), args.rounds, before=clear_cache)
        warm = best_ms(lambda: scan(paths), args.rounds)
        assert scan(paths).from_cache

    print(
        f"{args.dists} installed distributions, {args.plugins} of them plugins; "
        f"best of {args.rounds} runs"
    )
    print(
        f"discovery: {cold:.1f} ms cold, {warm:.2f} ms warm "
        f"(importlib.metadata scan: {baseline:.1f} ms)"
    )


if __name__ == "__main__":
    main()
