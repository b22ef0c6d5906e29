"""``opmarket env-check``: does this wheel load here? (:mod:`opmarket.registry._envcheck`)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import click

from opmarket.cli._usage import CONTEXT, EXIT_PROBLEM, UsageError, check_index_url

__all__ = ["env_check"]


@click.command(
    "env-check",
    context_settings=CONTEXT,
)
@click.argument("targets", metavar="TARGET...", nargs=-1, required=True)
@click.option(
    "--python",
    "python",
    metavar="PATH",
    help="The interpreter whose environment to check (a virtual environment's python); "
    "default: this one. It is asked its version and tags, importing only packaging.",
)
@click.option(
    "--index-url",
    metavar="URL",
    callback=check_index_url,
    help="Where NAME==VERSION targets come from (default: $PIP_INDEX_URL, else PyPI).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: one line per file, then one per problem; json: the environment and every file.",
)
def env_check(
    targets: tuple[str, ...], python: str | None, index_url: str | None, fmt: str
) -> None:
    """Tell whether each wheel loads in this environment, without loading it.

    TARGET is a wheel file, or NAME==VERSION from the index. Read from the files: the
    wheel's tags against the interpreter's; each native library's needed libraries, symbol
    versions (GLIBC_, GLIBCXX_, CXXABI_) and undefined symbols against what the
    interpreter, the frameworks it uses (TensorFlow, PyTorch, as installed) and this machine
    provide; its CUDA code against the GPUs and driver. Exit code 0 when every file loads,
    1 when one does not, 2 on bad usage.

    \b
    Examples:
      opmarket env-check dist/opmarket_zero_out-0.1.0-cp311-cp311-linux_x86_64.whl
      opmarket env-check my-tf-ops==1.2.0 --python ~/venvs/tf/bin/python --format json
    """
    from opmarket.registry._envcheck import check_wheel, report_json, report_text
    from opmarket.registry._environment import read_environment
    from opmarket.registry._wheelzip import BadWheel, describe

    for target in targets:
        if not target.endswith(".whl") and "==" not in target:
            raise UsageError(f"{target!r}: give a wheel file (.whl) or NAME==VERSION")
        if target.endswith(".whl") and not Path(target).is_file():
            raise UsageError(f"{target}: no such file")
    if python is not None and not Path(python).exists():
        raise UsageError(f"--python {python}: no such file")
    try:
        env = read_environment(python)
    except ValueError as exc:
        raise UsageError(f"--python {exc}" if python else str(exc)) from None
    reports = []
    with tempfile.TemporaryDirectory(prefix="opmarket-env-check-") as tmp:
        for target in targets:
            path = (
                Path(target)
                if target.endswith(".whl")
                else _download(target, index_url, Path(tmp), env.interpreter.tags)
            )
            try:
                reports.append(check_wheel(path, env, target if path.name != target else None))
            except BadWheel as exc:
                raise UsageError(f"{target}: {exc}") from None
            except OSError as exc:
                raise UsageError(f"{target}: cannot read it: {describe(exc)}") from None
    if fmt == "json":
        click.echo(json.dumps(report_json(env, reports), indent=2))
    else:
        click.echo(report_text(reports), nl=False)
    if not all(r.works for r in reports):
        sys.exit(EXIT_PROBLEM)


def _download(requirement: str, index_url: str | None, folder: Path, tags: tuple[str, ...]) -> Path:
    """The wheel of NAME==VERSION that this interpreter would install (the first of its
    tags any file has), else any wheel of that release, downloaded into ``folder``."""
    from packaging.utils import parse_wheel_filename
    from packaging.version import InvalidVersion, Version

    from opmarket._fetch import Fetcher, FetchError, printable
    from opmarket.registry._install import DEFAULT_INDEX, InstallError, project_files

    name, _, version_text = requirement.partition("==")
    try:
        version = Version(version_text)
    except InvalidVersion:
        raise UsageError(
            f"{requirement!r}: not NAME==VERSION ({version_text!r} is no version)"
        ) from None
    index = index_url or os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX
    if index_url is None:
        check_index_url(None, "$PIP_INDEX_URL", index)
    try:
        fetcher = Fetcher()
    except FetchError as exc:
        raise UsageError(str(exc)) from None
    rank = {tag: i for i, tag in enumerate(tags)}
    candidates = []
    try:
        entries = project_files(index, name.strip(), fetcher)
    except InstallError as exc:
        raise UsageError(str(exc)) from None
    for entry in entries:
        try:
            _, found, _, file_tags = parse_wheel_filename(entry.filename)
        except ValueError:
            continue
        if found == version and not entry.yanked:
            best = min((rank.get(str(t), len(rank)) for t in file_tags), default=len(rank))
            candidates.append((best, entry))
    if not candidates:
        raise UsageError(f"{requirement}: no wheel of that release on {index}")
    chosen = min(candidates, key=lambda c: (c[0], c[1].filename))[1]
    out = folder / Path(chosen.filename).name
    try:
        with open(out, "wb") as f:
            fetcher.download(chosen.url, f)
    except FetchError as exc:
        raise UsageError(f"cannot download {printable(chosen.url)}: {exc}") from None
    return out
