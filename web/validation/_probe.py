"""The part of validation that runs inside the sandbox: a harness and the plugin's process.

``python -I -S _probe.py harness SECRET_FD RESULT_FD WHEEL DIST [--gpu] [--dep WHEEL]...`` is
the harness (the standard library only: no site-packages to start). It reads the job's
secret from SECRET_FD (a pipe the supervisor wrote and closed), makes itself non-dumpable
(a process of the same user can then neither read its memory nor open its file descriptors
through /proc, nor ptrace it), unpacks the wheel into ``target`` in its working folder (and
each ``--dep`` wheel, the dependencies found on this index, into ``deps`` beside it), and
starts the plugin's process (``_probe.py plugin ...``), which inherits neither the secret
nor RESULT_FD. When that process ends the harness writes one JSON object to RESULT_FD: the
secret, how the plugin's process ended, and what it reported on its own pipe.

The plugin's process imports the plugin: anything it reports is what the plugin's code says
about itself, and the supervisor treats it so (``_report``). What it prints is the log only.
This file must not import ``opmarket.web`` (the server's dependencies are not the plugin's
business) and runs with the interpreter's standard library and opmarket only.
"""

from __future__ import annotations

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
    "packaging.utils": (),
    "pluggy": (),
    "opmarket.sdk": ("OpSet", "opset_to_json"),  # lazy exports: their modules, loaded now
    "opmarket.registry": ("new_registry", "load_plugins_from", "check_conformance"),
}


def _plugin(argv: list[str]) -> int:
    import importlib

    report_fd, target, dist_name = int(argv[0]), argv[1], argv[2]
    for name, exports in _OWN.items():
        module = importlib.import_module(name)
        for export in exports:
            getattr(module, export)
    if "--deps" in argv:  # after the environment's own folders: importable, never in its
        # place (nor scanned for plugins)
        sys.path.append(argv[argv.index("--deps") + 1])
    try:
        result = probe(target, dist_name, "--gpu" in argv)
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


def _dep_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split ``--dep WHEEL`` pairs (the dependencies to unpack) from the other options."""
    extra: list[str] = []
    deps: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg == "--dep":
            deps.append(next(it, ""))
        else:
            extra.append(arg)
    return extra, [d for d in deps if d]


def _harness(argv: list[str]) -> int:
    secret_fd, result_fd, wheel, dist_name = int(argv[0]), int(argv[1]), argv[2], argv[3]
    with os.fdopen(secret_fd, "rb") as f:
        secret = f.read(256).decode("ascii", errors="replace")
    result = os.fdopen(result_fd, "w")
    out: dict[str, Any] = {"secret": secret, "protected": _non_dumpable()}
    target = Path("target").absolute()
    extra, deps = _dep_args(argv[4:])
    try:
        unpack(wheel, target)
        for dep in deps:  # its dependencies from this index, beside it (_deps)
            unpack(dep, Path("deps").absolute())
    except (OSError, zipfile.BadZipFile) as exc:
        out["install_error"] = f"{type(exc).__name__}: {exc}"
        json.dump(out, result)
        result.close()
        return 0
    read_end, write_end = os.pipe()
    child = subprocess.Popen(
        [
            sys.executable,
            "-I",
            __file__,
            "plugin",
            str(write_end),
            str(target),
            dist_name,
            *extra,
            *(["--deps", str(Path("deps").absolute())] if deps else []),
        ],
        pass_fds=(write_end,),
        close_fds=True,
        stdin=subprocess.DEVNULL,
    )
    os.close(write_end)
    data = _collect(read_end, child)
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
