"""Uploads per second and upload-to-listed latency, with separate validation workers.

The topology of a deployment on one machine: one ``opmarket serve`` that validates nothing
(``--validation-workers 0``) and 2 ``opmarket worker`` processes sharing its database and
file store, running before uploads come, as in a deployment (the bench waits for each
worker's ``worker ready`` line, its sandbox started: a worker's start, imports and all, is
not an upload's latency). The workload is fixed: 8 clients in a closed loop, each
uploading 10 distinct small pure-Python plugin wheels (80 uploads) with twine's own upload
code (the multipart POST to /legacy/ that ``twine upload`` sends), then polling
``/simple/<project>/`` every 100 ms until the file is listed (listed means validated). A
client uploads its next wheel once the last one is listed. Latency runs from the start of
the upload to the first poll that lists the file; the rate is uploads over the whole run's
wall time. The wheels are written here with zipfile (a real plugin module, its manifest,
entry point and RECORD), not built one by one. Everything binds 127.0.0.1. ``--load``
measures under the fixed background load ``bench/index.py`` uses (``cpu_load``: two
CPU-bound processes for the whole measurement), so that busy-machine figures compare from
run to run. The last line is the result:

    upload: X uploads/s, upload->listed p50 Y s, p99 Z s, 8 clients, 2 workers

    python bench/upload.py [--clients 8] [--uploads 10] [--workers 2] [--load]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import io
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from index import LOAD_PROCESSES, cpu_load, free_port, stop, wait_up  # bench/index.py

BIN = Path(sys.executable).parent
OPMARKET = str(BIN / "opmarket")
QUIET = ("--validation-workers", "0")  # the server only serves

_MODULE = '''\
"""Bench plugin {dist}: {op} doubles its input."""

from opmarket.sdk import hookimpl, input_generator, kernel, op, reference

OP = (op("{op}").input("x: T").output("y: T").attr("T: {{float, int32}}")
      .doc("Doubles x.").build())


@kernel("{op}", constraints={{"T": ["float", "int32"]}})
def double(x):
    return x * 2


@reference("{op}")
def double_reference(x):
    return x + x


@input_generator("{op}")
def double_inputs(rng, types):
    return [rng.integers(-10, 10, size=(3, 4)).astype(types["T"].numpy)], {{}}


@hookimpl
def register(register):
    register(OP, double, double_reference, double_inputs)
'''


def _record_row(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def _manifest(dist: str, op_name: str) -> str:
    """The op-set the module registers, as its ``opmarket.opset.json`` must say."""
    from opmarket.registry import new_registry
    from opmarket.sdk import opset_to_json

    namespace: dict[str, object] = {}
    exec(compile(_MODULE.format(dist=dist, op=op_name), dist, "exec"), namespace)
    items: list[object] = []
    register = namespace["register"]
    assert callable(register)
    register(register=lambda *a: items.extend(a))
    reg = new_registry()
    reg.register(*items, source="manifest")
    return opset_to_json(reg.snapshot(name=dist, version="1.0.0", source="manifest"))


def make_wheel(folder: Path, dist: str, op_name: str) -> Path:
    """A py3-none-any plugin wheel for ``dist`` 1.0.0 with one op."""
    package = dist.replace("-", "_")
    info = f"{package}-1.0.0.dist-info"
    members = {
        f"{package}/__init__.py": _MODULE.format(dist=dist, op=op_name).encode(),
        f"{package}/opmarket.opset.json": _manifest(dist, op_name).encode(),
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0.0\n"
            "Summary: an upload benchmark plugin\nRequires-Python: >=3.11\n"
            "Requires-Dist: opmarket\n"
        ).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
        f"{info}/entry_points.txt": f"[opmarket]\n{package} = {package}\n".encode(),
    }
    record = "".join(_record_row(n, d) for n, d in members.items()) + f"{info}/RECORD,,\n"
    wheel = folder / f"{package}-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        zf.writestr(f"{info}/RECORD", record)
    return wheel


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("OPMARKET_", "TWINE_"))}


def _cli(data: Path, *args: str) -> str:
    done = subprocess.run(
        [OPMARKET, *args, "--data", str(data)],
        capture_output=True,
        text=True,
        env=_env(),
        check=True,
    )
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def _start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=_env(), start_new_session=True
        )


def _ready(proc: subprocess.Popen[bytes], log: Path, timeout: float = 120.0) -> None:
    """Wait for a worker's ``worker ready`` line (its threads' sandboxes started)."""
    deadline = time.monotonic() + timeout
    while b"worker ready" not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"worker not ready: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.05)


def listed(url: str, filename: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return filename.encode() in r.read()
    except urllib.error.HTTPError:
        return False


def client(
    base: str, token: str, wheels: list[Path], latencies: list[float], timeout: float
) -> None:
    """Upload each wheel with twine's code, then wait until /simple/ lists it."""
    from twine.package import PackageFile
    from twine.repository import Repository

    repo = Repository(f"{base}/legacy/", "__token__", token, disable_progress_bar=True)
    try:
        for wheel in wheels:
            project = wheel.name.split("-")[0].replace("_", "-")
            started = time.monotonic()
            answer = repo.upload(PackageFile.from_filename(str(wheel), None))
            if answer.status_code != 200:
                raise SystemExit(f"{wheel.name}: upload answered {answer.status_code}")
            page = f"{base}/simple/{project}/"
            while not listed(page, wheel.name):
                if time.monotonic() - started > timeout:
                    raise SystemExit(f"{wheel.name}: not listed within {timeout} s")
                time.sleep(0.1)
            latencies.append(time.monotonic() - started)
    finally:
        repo.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--uploads", type=int, default=10, help="per client")
    parser.add_argument("--workers", type=int, default=2, help="opmarket worker processes")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per upload")
    parser.add_argument("--keep", type=Path, default=None, help="keep the data and logs here")
    parser.add_argument(
        "--load",
        action="store_true",
        help=f"measure under {LOAD_PROCESSES} CPU-bound background processes",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="opmarket-bench-upload-") as tmp:
        root = Path(tmp) if args.keep is None else args.keep
        root.mkdir(parents=True, exist_ok=True)
        data, wheels_dir = root / "data", root / "wheels"
        wheels_dir.mkdir()
        plan = [
            [
                make_wheel(wheels_dir, f"bench-up-{c:02d}-{i:03d}", "Bench>Double")
                for i in range(args.uploads)
            ]
            for c in range(args.clients)
        ]
        _cli(data, "users", "add", "bench")
        token = _cli(data, "tokens", "create", "bench")
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        procs = []
        try:
            server_log = root / "server.log"
            procs.append(
                _start(
                    [OPMARKET, "serve", "--port", str(port), "--data", str(data), *QUIET],
                    server_log,
                )
            )
            wait_up(f"{base}/simple/", procs[0], server_log)
            for w in range(args.workers):
                procs.append(
                    _start([OPMARKET, "worker", "--data", str(data)], root / f"worker{w}.log")
                )
            for w in range(args.workers):  # running workers, as in a deployment
                _ready(procs[1 + w], root / f"worker{w}.log")
            latencies: list[float] = []
            failures: list[BaseException] = []

            def run(wheels: list[Path]) -> None:
                try:
                    client(base, token, wheels, latencies, args.timeout)
                except BaseException as exc:  # reported below, after the others end
                    failures.append(exc)

            threads = [threading.Thread(target=run, args=(w,)) for w in plan]
            load = cpu_load() if args.load else contextlib.nullcontext()
            with load, contextlib.redirect_stdout(io.StringIO()):  # twine's "Uploading ..."
                started = time.monotonic()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            wall = time.monotonic() - started
        finally:
            for proc in reversed(procs):
                stop(proc)
        if failures:
            for w in range(args.workers):
                print((root / f"worker{w}.log").read_text(errors="replace")[-2000:])
            raise SystemExit(f"{len(failures)} client(s) failed: {failures[0]}")
    total = len(latencies)
    print(
        f"{total} uploads in {wall:.1f} s; latency min {min(latencies):.2f} s, "
        f"max {max(latencies):.2f} s"
        + (f"; under {LOAD_PROCESSES} CPU-bound background processes" if args.load else "")
    )
    print(
        f"upload: {total / wall:.2f} uploads/s, upload->listed p50 "
        f"{percentile(latencies, 0.5):.2f} s, p99 {percentile(latencies, 0.99):.2f} s, "
        f"{args.clients} clients, {args.workers} workers"
    )


if __name__ == "__main__":
    main()
