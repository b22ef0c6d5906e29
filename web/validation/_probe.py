"""The part of validation that runs inside the sandbox: a harness and the plugin's process.

``python -I -S _probe.py harness JOB_FD RESULT_FD`` is the harness (the standard library
only: no site-packages to start). It makes itself non-dumpable (a process of the same user
can then neither read its memory nor open its file descriptors through /proc, nor ptrace
it) and starts the plugin's process (``_probe.py plugin REPORT_FD --job FD``), which
imports what judges the plugin (numpy, opmarket: :data:`_OWN`) and waits on its own pipe.
Both are started before the job exists, so that a validation worker can start the next
job's sandbox while it is idle (``_harness``); each serves one job and is then gone.

The job comes on JOB_FD, written and closed by the supervisor: one JSON object with the
job's secret, the wheel to unpack, its distribution name, whether a GPU is there and the
dependency wheels found on this index (:func:`read_job`). The harness unpacks the wheel
into ``target`` in its working folder (each dependency into ``deps`` beside it), hands the
plugin's process the folder and the name on its pipe (never the secret: it was started
before the harness read it, and inherits neither JOB_FD nor RESULT_FD), and when that
process ends writes one JSON object to RESULT_FD: the secret, how the plugin's process
ended, and what it reported on its own pipe.

The plugin's process imports the plugin: anything it reports is what the plugin's code says
about itself, and the supervisor treats it so (``_report``). What it prints is the log only.
This file must not import ``opmarket.web`` (the server's dependencies are not the plugin's
business) and runs with the interpreter's standard library and opmarket only.
"""

from __future__ import annotations

import gc
import json
import os
import select
import subprocess
import sys
import traceback
import zipfile
from pathlib import Path
from typing import Any

#: Most bytes of report the harness accepts from the plugin's process.
REPORT_CAP = 8 * 1024 * 1024


def _step(name: str, status: str, *lines: str) -> dict[str, Any]:
    return {"name": name, "status": status, "log": [line for line in lines if line]}


def _signature(op: Any) -> str:
    ins = ", ".join(a.spec for a in op.inputs)
    outs = ", ".join(a.spec for a in op.outputs)
    attrs = "; ".join(a.spec for a in op.attrs)
    return f"{op.name}({ins}) -> ({outs})" + (f" [{attrs}]" if attrs else "")


def unpack(wheel: str, target: Path) -> None:
    """Unpack a wheel whose member names were checked outside (inspect), as an installer
    would: purelib/platlib ``.data`` folders go to the top, other ``.data`` is left out."""
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            parts = info.filename.split("/")
            if len(parts) > 2 and parts[0].endswith(".data") and parts[1] in ("purelib", "platlib"):
                parts = parts[2:]
            elif parts[0].endswith(".data"):
                continue
            if info.is_dir():
                continue
            out = target.joinpath(*parts)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(zf.read(info))


def probe(target: str, dist_name: str, gpu: bool) -> dict[str, Any]:
    """Load the distribution's plugins from ``target`` and say what they register and how
    their kernels compare with their references (run in the plugin's process)."""
    import importlib.metadata

    from packaging.utils import canonicalize_name

    sys.path.insert(0, target)
    steps: list[dict[str, Any]] = []
    out: dict[str, Any] = {"steps": steps}
    dists = [
        d
        for d in importlib.metadata.distributions(path=[target])
        if canonicalize_name(d.metadata["Name"] or "") == canonicalize_name(dist_name)
    ]
    if not dists:
        steps.append(_step("entry point", "failed", f"{dist_name} is not installed in {target}"))
        return out
    dist = dists[0]
    eps = [ep for ep in dist.entry_points if ep.group == "opmarket"]
    if not eps:
        steps.append(
            _step("entry point", "failed", "the wheel declares no entry point in group 'opmarket'")
        )
        return out
    steps.append(_step("entry point", "passed", *(f"{ep.name} = {ep.value}" for ep in eps)))

    from opmarket import registry

    reg = registry.new_registry()
    infos = registry.load_plugins_from([target], registry=reg, distribution=dist_name)
    failed = [i for i in infos if i.status != "loaded"]
    if failed:
        steps.append(_step("load", "failed", *(f"{i.name}: {i.error}" for i in failed)))
        return out
    steps.append(
        _step(
            "load", "passed", *(f"{i.name}: {len(i.ops)} op(s): {', '.join(i.ops)}" for i in infos)
        )
    )
    ops: list[Any] = []
    kernels: list[Any] = []
    for info in infos:
        snap = reg.snapshot(source=info.source)
        ops.extend(snap.ops)
        kernels.extend(snap.kernels)
    from opmarket.sdk import OpSet, opset_to_json

    opset = OpSet.of(
        sorted(ops, key=lambda o: o.name),
        kernels,
        name=str(canonicalize_name(dist_name)),
        version=dist.version,
    )
    out["opset"] = opset_to_json(opset)
    out["ops"] = [
        {"name": o.name, "signature": _signature(o), "summary": o.summary} for o in opset.ops
    ]
    # A plugin may declare no op of its own: a GPU companion registers kernels for its base
    # plugin's ops, and only where a GPU is (the server holds it to its manifest).
    companion = "" if ops else "; no op of its own (kernels for other plugins' ops)"
    steps.append(
        _step(
            "snapshot",
            "passed",
            f"{len(opset.ops)} op(s), {len(opset.kernels)} kernel(s) registered here{companion}",
        )
    )
    names = [o.name for o in opset.ops]
    devices = ["CPU", "GPU"] if gpu else ["CPU"]
    report = registry.check_conformance(names, registry=reg, devices=devices)
    out["kernels"] = [
        {
            "op": r.op,
            "device": r.device,
            "dtypes": ", ".join(f"{k}={v}" for k, v in r.types),
            "status": r.status,
            "message": r.message,
        }
        for r in report.results
    ]
    out["registered_kernels"] = sorted(
        {f"{name}\t{k.device}" for name in names for k in reg.kernels(name)}
    )
    steps.append(
        _step(
            "conformance",
            "failed" if report.failures else "passed",
            *(str(r) for r in report.results),
        )
    )
    return out


#: What the plugin's process imports to judge the plugin: all of it is imported before the
#: wheel or its dependencies are importable, so that none of theirs stands in for it.
_OWN = {
    "importlib.metadata": (),
    "numpy": (),
    "numpy.random": (),  # conformance's generators: loaded while waiting, not per job
    "ml_dtypes": (),  # numpy's types for bfloat16 and the float8s (opmarket.sdk's dtypes)
    "packaging.utils": (),
    "pluggy": (),
    "opmarket.sdk": ("OpSet", "opset_to_json"),  # lazy exports: their modules, loaded now
    "opmarket.registry": ("new_registry", "load_plugins_from", "check_conformance"),
}


def read_job(fd: int, cap: int = 1024 * 1024) -> dict[str, Any]:
    """The JSON object written on ``fd`` until its writer closed it ({} when none came:
    the sandbox was discarded unused, or a writer died)."""
    data = bytearray()
    with os.fdopen(fd, "rb") as pipe:
        while len(data) <= cap and (chunk := pipe.read(65536)):
            data.extend(chunk)
    try:
        job = json.loads(data) if data and len(data) <= cap else {}
    except ValueError:
        return {}
    return job if isinstance(job, dict) else {}


def _plugin(argv: list[str]) -> int:
    import importlib

    report_fd, job_fd = int(argv[0]), int(argv[argv.index("--job") + 1])
    # Imports make many objects and free few: with the collector on, its passes over the
    # young objects would cost a third of the imports' CPU and find almost nothing. What
    # they made is then moved out of the collector's sight (freeze), and the plugin's code
    # runs with a collector as usual.
    gc.disable()
    try:
        for name, exports in _OWN.items():
            module = importlib.import_module(name)
            for export in exports:
                getattr(module, export)
    finally:
        gc.freeze()
        gc.enable()
    job = read_job(job_fd)  # waits here, everything above loaded, until its job comes
    if not job:
        return 0
    if job.get("deps"):  # after the environment's own folders: importable, never in its
        # place (nor scanned for plugins)
        sys.path.append(str(job["deps"]))
    try:
        result = probe(str(job["target"]), str(job["dist"]), bool(job.get("gpu")))
    except BaseException:
        result = {"steps": [_step("load", "failed", traceback.format_exc())]}
    sys.stdout.flush()
    with os.fdopen(report_fd, "w") as report:
        json.dump(result, report)
    return 0


def _non_dumpable() -> bool:
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(4, 0, 0, 0, 0)) == 0  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):
        return False


def _collect(fd: int, child: subprocess.Popen[bytes]) -> bytearray:
    """What the plugin's process wrote on its report pipe, read until it ended (processes
    it forked may hold the pipe open: its end is not waited for) or wrote too much."""
    data = bytearray()
    os.set_blocking(fd, False)
    ended = False
    while len(data) <= REPORT_CAP:
        ready, _, _ = select.select([fd], [], [], 0.05)
        try:
            chunk = os.read(fd, 65536) if ready or ended else None
        except BlockingIOError:
            chunk = b"" if ended else None
        if chunk == b"":
            break
        if chunk:
            data.extend(chunk)
        elif child.poll() is not None:
            ended = True  # read what is left, then stop
    os.close(fd)
    return data


def _start_plugin() -> tuple[subprocess.Popen[bytes], int, int]:
    """The plugin's process, importing what judges the plugin; its report pipe's read end
    and its job pipe's write end."""
    report_r, report_w = os.pipe()
    job_r, job_w = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-I", __file__, "plugin", str(report_w), "--job", str(job_r)],
        pass_fds=(report_w, job_r),
        close_fds=True,
        stdin=subprocess.DEVNULL,
    )
    os.close(report_w)
    os.close(job_r)
    return child, report_r, job_w


def _send(fd: int, job: dict[str, Any]) -> None:
    """Hand the plugin's process its job (it may be gone already: its end says why)."""
    try:
        with os.fdopen(fd, "wb") as pipe:
            pipe.write(json.dumps(job).encode())
    except BrokenPipeError:
        pass


def _harness(argv: list[str]) -> int:
    job_fd, result_fd = int(argv[0]), int(argv[1])
    protected = _non_dumpable()
    child, report_r, job_w = _start_plugin()
    job = read_job(job_fd)  # waits here until the supervisor hands over its job
    if not job:
        child.kill()
        return 0
    result = os.fdopen(result_fd, "w")
    out: dict[str, Any] = {"secret": str(job.get("secret", "")), "protected": protected}
    target = Path("target").absolute()
    deps = [str(d) for d in job.get("deps", [])]
    try:
        unpack(str(job["wheel"]), target)
        for dep in deps:  # its dependencies from this index, beside it (_deps)
            unpack(dep, Path("deps").absolute())
    except (OSError, zipfile.BadZipFile) as exc:
        child.kill()
        out["install_error"] = f"{type(exc).__name__}: {exc}"
        json.dump(out, result)
        result.close()
        return 0
    _send(
        job_w,
        {
            "target": str(target),
            "dist": str(job["dist"]),
            "gpu": bool(job.get("gpu")),
            "deps": str(Path("deps").absolute()) if deps else "",
        },
    )
    data = _collect(report_r, child)
    if len(data) > REPORT_CAP:
        out["report_error"] = f"reported more than {REPORT_CAP} bytes"
        child.kill()
    out["returncode"] = child.wait()
    if "report_error" not in out:
        try:
            out["report"] = json.loads(data) if data else None
        except ValueError as exc:
            out["report_error"] = f"sent a report that is not JSON: {exc}"
    json.dump(out, result)
    result.close()
    return 0


def main(argv: list[str]) -> int:
    """``harness ...`` or ``plugin ...`` (see the module's docstring)."""
    if argv[:1] == ["harness"]:
        return _harness(argv[1:])
    if argv[:1] == ["plugin"]:
        return _plugin(argv[1:])
    print(f"usage: {Path(__file__).name} harness|plugin ...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
