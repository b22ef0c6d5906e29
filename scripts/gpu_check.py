"""The checks scripts/gpu-check runs: every GPU path opmarket has, one line each.

- each installed GPU companion's kernels (every dtype its manifest names) against the CPU
  kernels of ``opmarket.ops`` on the same inputs;
- the framework bridges' CUDA paths (PyTorch CUDA tensors, JAX's CUDA platform, TensorFlow's
  GPU device), where a bridge has one;
- ``opmarket doctor --format json``: the GPUs it sees, and every companion kernel chosen;
- ``opmarket worker --gpu`` on a companion uploaded to a local index.

Each line is ``gpu-check: NAME: ok|FAIL|skip (DETAIL)``; the last is ``gpu-check: N ok, M
failed, K skipped``. A check that cannot run here (no GPU, no framework, no nvcc) is a skip
with its reason; the exit status is 1 when a check failed, else 0.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
OPMARKET = str(BIN / "opmarket")
POOL = {"ksize": [1, 3, 3, 1], "strides": [1, 2, 1, 1], "padding": "SAME"}
#: Sample inputs and attrs per op, for a dtype.
SAMPLES: dict[str, Callable[[np.dtype[Any]], tuple[list[Any], dict[str, Any]]]] = {
    "Opm>TimeTwo": lambda dt: ([np.arange(-40, 41).astype(dt).reshape(9, 9)], {}),
    "Opm>MedianPool": lambda dt: (
        [np.random.default_rng(0).integers(-50, 50, (2, 17, 13, 3)).astype(dt) / 4],
        POOL,
    ),
}
#: The companions the worker check uploads: (base plugin, companion) folders in plugins/.
UPLOADED = ("time_two", "time_two_cuda13")
TOTALS = {"ok": 0, "FAIL": 0, "skip": 0}


def line(name: str, verdict: str, detail: str) -> None:
    """One check's line."""
    TOTALS[verdict] += 1
    detail = " ".join(detail.split())[:400]
    print(f"gpu-check: {name}: {verdict} ({detail})", flush=True)


def no_gpu_reason() -> str:
    """Why this machine has no NVIDIA GPU ("" when it has one), as the GPU worker decides."""
    from opmarket.web.gpu._worker import gpu_visible

    return (
        ""
        if gpu_visible()
        else "no NVIDIA GPU (none under /proc/driver/nvidia/gpus with a /dev/nvidia* device)"
    )


# --- companions -------------------------------------------------------------------------------


def companions() -> list[tuple[str, Any]]:
    """The installed plugins that declare GPU kernels: (distribution entry name, module)."""
    found = []
    for entry in importlib.metadata.entry_points(group="opmarket"):
        name = entry.value.split(":")[0]
        try:
            manifest = resources.files(name).joinpath("opmarket.opset.json").read_text()
        except (ModuleNotFoundError, FileNotFoundError, OSError):
            continue
        kernels = json.loads(manifest).get("kernels", [])
        if any(str(k.get("device", "")).upper() == "GPU" for k in kernels):
            found.append((entry.name, name))
    return sorted(found)


def check_companions() -> None:
    """Each companion kernel, each dtype, against the CPU kernel."""
    import opmarket
    from opmarket.sdk import as_dtype

    found = companions()
    if not found:
        line(
            "companions",
            "skip",
            "no GPU companion installed (scripts/setup installs them where nvcc is)",
        )
        return
    for entry, module_name in found:
        module = importlib.import_module(module_name)
        status = str(getattr(module, "gpu_status", lambda: "")())
        manifest = json.loads(
            resources.files(module_name).joinpath("opmarket.opset.json").read_text()
        )
        for k in manifest["kernels"]:
            if str(k.get("device", "")).upper() != "GPU":
                continue
            op = k["op"]
            for type_name in next(iter(k.get("constraints", {}).values()), ["float"]):
                name = f"companion {entry} {op} {type_name}"
                dtype = np.dtype(as_dtype(type_name).numpy)
                if no_gpu_reason():
                    line(name, "skip", f"{no_gpu_reason()}; the companion says: {status}")
                    continue
                if op not in SAMPLES:
                    line(name, "skip", "gpu-check has no sample inputs for this op")
                    continue
                inputs, attrs = SAMPLES[op](dtype)
                try:
                    with opmarket.device("GPU"):
                        got = opmarket.ops[op](*inputs, **attrs)
                    with opmarket.device("CPU"):
                        want = opmarket.ops[op](*inputs, **attrs)
                    np.testing.assert_array_equal(got, want)
                except Exception as exc:
                    line(name, "FAIL", f"{type(exc).__name__}: {exc}")
                    continue
                line(name, "ok", f"equal to the CPU kernel on {list(inputs[0].shape)}")


# --- the framework bridges --------------------------------------------------------------------


def _torch_gpu() -> str:
    from opmarket.torch._native import cuda_unavailable

    why = cuda_unavailable()
    return f"opmarket.torch registers no CUDA kernel: {why}" if why else ""


#: The companions' ops and the dtypes each bridge check runs them for.
BRIDGED = {
    "Opm>TimeTwo": (np.float32, np.float64, np.int32, np.int64),
    "Opm>MedianPool": (np.float32, np.float64),
}


def _cpu_reference(op: str, inputs: list[Any], attrs: dict[str, Any]) -> Any:
    import opmarket

    with opmarket.device("CPU"):
        return opmarket.ops[op](*inputs, **attrs)


def _torch_cuda() -> str:
    """Each companion op through torch's CUDA dispatch key (the shim's device-entry kernel)
    against the CPU kernel of opmarket.ops, bit for bit."""
    import torch

    import opmarket.torch as ot

    done = []
    for op, dtypes in BRIDGED.items():
        why = ot.native_reason(op, device="CUDA")
        if why:
            raise AssertionError(f"{op} is not native on CUDA: {why}")
        for dtype in dtypes:
            inputs, attrs = SAMPLES[op](np.dtype(dtype))
            got = ot.torch_op(op)(*[torch.from_numpy(x).cuda() for x in inputs], **attrs)
            torch.cuda.synchronize()
            np.testing.assert_array_equal(got.cpu().numpy(), _cpu_reference(op, inputs, attrs))
            done.append(f"{op} {np.dtype(dtype).name}")
    return f"native CUDA kernels equal to the CPU kernels: {', '.join(done)}"


def _jax_gpu() -> str:
    from opmarket.jax._ffi import cuda_unavailable

    why = cuda_unavailable()
    return f"opmarket.jax registers no CUDA target: {why}" if why else ""


def _jax_cuda() -> str:
    """Each companion op as a jitted call on a CUDA array (the ``opmarket_cuda`` FFI target)
    against the CPU kernel of opmarket.ops, bit for bit."""
    import jax

    import opmarket.jax as oj

    gpu = jax.devices("cuda")[0]
    done = []
    for op, dtypes in BRIDGED.items():
        for dtype in dtypes:
            inputs, attrs = SAMPLES[op](np.dtype(dtype))
            why = oj.native_reason(op, device="CUDA", T=np.dtype(dtype), **attrs)
            if why:
                raise AssertionError(f"{op} {np.dtype(dtype).name} is not native on CUDA: {why}")
            fn = jax.jit(lambda *xs, op=op, attrs=attrs: oj.jax_op(op)(*xs, **attrs))
            got = fn(*[jax.device_put(x, gpu) for x in inputs])
            np.testing.assert_array_equal(np.asarray(got), _cpu_reference(op, inputs, attrs))
            done.append(f"{op} {np.dtype(dtype).name}")
    return f"FFI calls on CUDA equal to the CPU kernels: {', '.join(done)}"


def _tensorflow_gpu() -> str:
    from opmarket.tensorflow._gpu import gpu_unavailable

    why = gpu_unavailable()
    return f"opmarket.tensorflow registers no GPU kernel: {why}" if why else ""


def _tensorflow_cuda() -> str:
    """Each companion op through opmarket.tensorflow on a GPU tensor (the shim's
    synchronizing GPU kernel) against the CPU kernel of opmarket.ops, bit for bit."""
    import tensorflow as tf

    import opmarket.tensorflow as otf

    done = []
    for op, dtypes in BRIDGED.items():
        path = otf.native_path(op, device="GPU")
        if path != "native, synchronizing":
            why = otf.native_reason(op, device="GPU")
            raise AssertionError(f"{op} is {path} on the GPU: {why}")
        for dtype in dtypes:
            inputs, attrs = SAMPLES[op](np.dtype(dtype))
            with tf.device("GPU:0"):
                tensors = [tf.identity(tf.constant(x)) for x in inputs]
                got = otf.ops[op](*tensors, **attrs)
            if "GPU" not in got.device:
                raise AssertionError(f"{op} {np.dtype(dtype).name} ran on {got.device}")
            np.testing.assert_array_equal(got.numpy(), _cpu_reference(op, inputs, attrs))
            done.append(f"{op} {np.dtype(dtype).name}")
    return (
        f"native, synchronizing ({otf.native_reason('Opm>TimeTwo', device='GPU')}): GPU "
        f"kernels equal to the CPU kernels: {', '.join(done)}"
    )


#: Each bridge: its framework module, whether the framework sees a GPU (why not), and the
#: bridge's CUDA check (None: the bridge has no CUDA path).
BRIDGES: dict[str, tuple[str, Callable[[], str], Callable[[], str] | None]] = {
    "torch": ("torch", _torch_gpu, _torch_cuda),
    "jax": ("jax", _jax_gpu, _jax_cuda),
    "tensorflow": ("tensorflow", _tensorflow_gpu, _tensorflow_cuda),
}


def check_bridges() -> None:
    """Each bridge's CUDA path, where the framework has a GPU and the bridge has the path."""
    for bridge, (module, has_gpu, cuda_path) in BRIDGES.items():
        name = f"bridge {bridge} cuda"
        try:
            importlib.import_module(module)
        except ImportError:
            line(name, "skip", f"{module} is not installed")
            continue
        why = has_gpu()
        if why:
            line(name, "skip", why)
        elif cuda_path is None:
            line(name, "skip", f"opmarket.{bridge} registers no CUDA kernels yet")
        else:
            try:
                line(name, "ok", cuda_path())
            except Exception as exc:
                line(name, "FAIL", f"{type(exc).__name__}: {exc}")


# --- opmarket doctor --------------------------------------------------------------------------


def check_doctor() -> None:
    """doctor's JSON: the GPUs it sees, and each installed companion kernel chosen on GPU."""
    done = subprocess.run(
        [OPMARKET, "doctor", "--format", "json"], capture_output=True, text=True, check=False
    )
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        line("doctor", "FAIL", f"no JSON (exit {done.returncode}): {done.stderr[-300:]}")
        return
    machine = report.get("machine", {})
    gpus = machine.get("gpus") or []
    if not gpus:
        line("doctor", "skip", f"it sees no GPU: {machine.get('gpu_note') or 'no reason given'}")
        return
    kernels = [
        (o["op"], k)
        for o in report.get("ops", [])
        for k in o.get("kernels", [])
        if str(k.get("device", "")).upper() == "GPU"
    ]
    refused = [
        f"{op} {k.get('dtypes')}: {k.get('reason')}" for op, k in kernels if not k.get("chosen")
    ]
    names = ", ".join(f"{g.get('name')} (sm {g.get('compute_capability')})" for g in gpus)
    if not kernels:
        line("doctor", "FAIL", f"GPUs {names}, but no GPU kernel is installed")
    elif refused:
        line("doctor", "FAIL", f"GPUs {names}; not chosen: {'; '.join(refused)}")
    else:
        # the framework paths doctor gives them (each bridge's own answer on a GPU machine)
        paths = sorted(
            {
                f"{framework} {found.get('path')}"
                for _, k in kernels
                for framework, found in (k.get("frameworks") or {}).items()
            }
        )
        line(
            "doctor",
            "ok",
            f"GPUs {names}; {len(kernels)} GPU kernel(s) chosen; frameworks: "
            + (", ".join(paths) or "none reported"),
        )


# --- opmarket worker --gpu --------------------------------------------------------------------


#: The line in which ``opmarket serve`` says where it listens, the port it bound included.
SERVING = re.compile(r"^opmarket: serving .+ on (http://\S+?)/$", re.MULTILINE)


def _served_url(proc: subprocess.Popen[bytes], log: Path) -> str | None:
    """The URL ``opmarket serve`` (``proc``, its output in ``log``) said it serves; None
    until it says so; RuntimeError with its last output when it exited."""
    text = log.read_text(errors="replace")
    found = SERVING.search(text)
    if found:
        return found.group(1)
    if proc.poll() is not None:
        raise RuntimeError(f"opmarket serve exited {proc.returncode}: {text.splitlines()[-3:]}")
    return None


def _run(*command: str, timeout: float = 900) -> str:
    """A command's stdout; RuntimeError with its last output when it fails."""
    done = subprocess.run(
        list(command), capture_output=True, text=True, check=False, timeout=timeout
    )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{Path(command[0]).name} {command[1]} exited {done.returncode}: {tail}")
    return done.stdout


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


@contextmanager
def _process(*command: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A background process, stopped with SIGINT (then killed) when the block ends."""
    with log.open("wb") as out:
        proc = subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_for(what: str, ready: Callable[[], Any], timeout: float) -> Any:
    """Poll ``ready`` every second until it returns something true; RuntimeError after
    ``timeout`` seconds naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = ready()
        except OSError:
            found = None
        if found:
            return found
        time.sleep(1.0)
    raise RuntimeError(f"{what}: not within {timeout:.0f} s")


def _gpu_verdicts(url: str, project: str) -> list[dict[str, Any]] | None:
    """The GPU kernels' verdicts of the project's latest file; None while one is pending."""
    kernels = [
        k
        for k in _get_json(f"{url}/api/packages/{project}").get("kernels", [])
        if str(k.get("device", "")).upper() == "GPU"
    ]
    if not kernels or any(str(k.get("status", "")).startswith("gpu:") for k in kernels):
        return None
    return kernels


def check_worker() -> None:
    """Upload TimeTwo and its CUDA 13 companion to a local index and let ``opmarket worker
    --gpu`` run the companion's GPU kernels."""
    import tomllib

    from opmarket.sdk.build import find_nvcc

    name = "worker --gpu"
    why = no_gpu_reason()
    if why:
        line(name, "skip", why)
        return
    if find_nvcc() is None:
        line(name, "skip", "no nvcc here to build the companion's wheel")
        return
    base, companion = (ROOT / "plugins" / p for p in UPLOADED)
    meta = tomllib.loads((companion / "pyproject.toml").read_text())["project"]
    project, version = meta["name"], meta["version"]
    work = Path(tempfile.mkdtemp(prefix="opmarket-gpu-check-"))
    try:
        dist, data = work / "dist", work / "data"
        _run(
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dist),
            str(base),
            str(companion),
        )
        _run(OPMARKET, "users", "add", "gpucheck", "--data", str(data))
        token = _run(OPMARKET, "tokens", "create", "gpucheck", "--data", str(data))
        token = token.strip().splitlines()[-1]
        serve = (
            OPMARKET,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",  # the port it binds is in the line that says where it serves
            "--data",
            str(data),
            "--validation-workers",
            "1",
        )
        with _process(*serve, log=work / "serve.log") as server:
            url = _wait_for("the index", lambda: _served_url(server, work / "serve.log"), 120)
            wheels = [
                sorted(dist.glob(f"{p.name.replace('-', '_')}*.whl")) for p in (base, companion)
            ]
            for found in wheels:
                _run(
                    str(BIN / "twine"),
                    "upload",
                    "--repository-url",
                    f"{url}/legacy/",
                    "-u",
                    "__token__",
                    "-p",
                    token,
                    *map(str, found),
                )
            _run(
                OPMARKET,
                "status",
                f"{project}=={version}",
                "--index-url",
                f"{url}/simple/",
                "--wait",
                "--timeout",
                "900",
            )
            worker = (OPMARKET, "worker", "--gpu", "--data", str(data))
            with _process(*worker, log=work / "worker.log"):
                verdicts = _wait_for(
                    "the GPU worker's verdicts", lambda: _gpu_verdicts(url, project), 900
                )
        failed = [
            f"{k['op']} {k['dtypes']}: {k['message']}" for k in verdicts if k["status"] != "passed"
        ]
        if failed:
            line(name, "FAIL", "; ".join(failed))
        else:
            line(name, "ok", f"{project} {version}: {len(verdicts)} GPU kernel(s) passed")
    except Exception as exc:
        line(name, "FAIL", f"{type(exc).__name__}: {exc} (logs in {work})")
        return
    shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    for check in (check_companions, check_bridges, check_doctor, check_worker):
        try:
            check()
        except Exception as exc:  # one check's failure is its line, not the run's
            line(check.__name__.removeprefix("check_"), "FAIL", f"{type(exc).__name__}: {exc}")
    print(
        f"gpu-check: {TOTALS['ok']} ok, {TOTALS['FAIL']} failed, {TOTALS['skip']} skipped",
        flush=True,
    )
    return 1 if TOTALS["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
