"""``opmarket worker --gpu``: the GPU conformance step, on a machine with a GPU.

Upload validation runs on machines without a GPU: a file's GPU kernels are recorded as
``gpu: not run`` beside the static checks (``_gpu``), never ``passed``. A GPU worker takes
those files one at a time, validated ones first come first served, runs the sandboxed
harness with the GPU's device files (``validate_wheel(..., gpu=True)``: the plugin's
process then checks its kernels on CPU *and* GPU), and keeps only the per-kernel verdicts
for the GPU: each GPU kernel becomes ``passed`` or ``failed`` with the harness's message.
The file's own status and its CPU verdicts stay as upload validation left them.

A file is taken by turning its ``gpu: not run`` rows into ``gpu: running`` in one UPDATE,
so two GPU workers never take the same file. The taken rows' message says when (``taken
at 2026-11-25T12:00:00Z``): that is the lease. A file whose rows
have been ``gpu: running`` longer than :func:`lease_s` (its worker was killed, or its
machine lost) is taken again by the next worker that looks. Only :func:`run_gpu_file`
needs a GPU; what finds work and records verdicts runs (and is tested) anywhere.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import and_, delete, or_, select, update

from opmarket.web._models import File, FileStatus, KernelEntry
from opmarket.web._state import AppState
from opmarket.web._storage import copy_out

__all__ = [
    "NOT_RUN",
    "claim_gpu_file",
    "gpu_visible",
    "lease_s",
    "record_gpu_kernels",
    "run_gpu_worker",
]

log = logging.getLogger("opmarket.web.gpu")

NOT_RUN = "gpu: not run"
_RUNNING = "gpu: running"


def gpu_visible() -> list[str]:
    """The NVIDIA GPUs the driver shows (``/proc/driver/nvidia/gpus/*``) whose device file
    exists; empty on a machine without one (or without the driver)."""
    gpus = Path("/proc/driver/nvidia/gpus")
    try:
        found = sorted(p.name for p in gpus.iterdir())
    except OSError:
        return []
    return found if any(Path("/dev").glob("nvidia[0-9]*")) else []


_TAKEN = "taken at "
_STAMP = "%Y-%m-%dT%H:%M:%SZ"  # fixed width: stamps compare as strings


def lease_s(state: AppState) -> float:
    """How long a GPU worker holds a file: twice the sandbox's time limit (one harness run
    per file) plus two minutes for the download and the database."""
    return 2 * state.settings.validation_timeout_s + 120


def claim_gpu_file(state: AppState, *, now: datetime | None = None) -> int | None:
    """Take the oldest validated file with GPU kernels not run yet, or whose lease ran out
    (see the module's docstring); its id, or None. ``now``: the clock, for tests."""
    now = now or datetime.now(UTC)
    expired = _TAKEN + (now - timedelta(seconds=lease_s(state))).strftime(_STAMP)
    takeable = or_(
        KernelEntry.status == NOT_RUN,
        and_(
            KernelEntry.status == _RUNNING,
            KernelEntry.message.startswith(_TAKEN),
            KernelEntry.message < expired,
        ),
    )
    mark = _TAKEN + now.strftime(_STAMP)  # public on the catalog: no host names
    with state.db.transaction() as session:
        candidates = session.scalars(
            select(KernelEntry.file_id)
            .join(File)
            .where(takeable, File.status == FileStatus.VALIDATED)
            .order_by(KernelEntry.file_id)
            .distinct()
            .limit(20)
        ).all()
        for file_id in candidates:
            taken = session.execute(
                update(KernelEntry)
                .where(KernelEntry.file_id == file_id, takeable)
                .values(status=_RUNNING, message=mark)
            )
            if getattr(taken, "rowcount", 0):
                return int(file_id)
    return None


def record_gpu_kernels(
    state: AppState, file_id: int, kernels: list[dict[str, Any]], note: str
) -> None:
    """Replace the file's GPU kernel rows that were taken with the verdicts ``kernels``
    (the harness's, device GPU only); a taken kernel it has no verdict for goes back to
    ``gpu: not run``. ``note`` ends the file's log."""
    ran = [k for k in kernels if str(k.get("device", "")).upper() == "GPU"]
    ran_ops = {str(k.get("op", "")) for k in ran}
    with state.db.transaction() as session:
        file = session.get(File, file_id)
        if file is None:
            return
        session.execute(
            delete(KernelEntry).where(
                KernelEntry.file_id == file_id,
                KernelEntry.status == _RUNNING,
                KernelEntry.op.in_(ran_ops),
            )
        )
        session.execute(
            update(KernelEntry)
            .where(KernelEntry.file_id == file_id, KernelEntry.status == _RUNNING)
            .values(status=NOT_RUN, message="")
        )
        for k in ran:
            session.add(
                KernelEntry(
                    file_id=file_id,
                    op=str(k.get("op", "")),
                    device="GPU",
                    dtypes=str(k.get("dtypes", "")),
                    status=str(k.get("status", "")),
                    message=str(k.get("message", "")),
                )
            )
        file.log = file.log.rstrip("\n") + "\n[gpu worker] " + note + "\n"
        project = file.release.project
        project.serial += 1
        normalized = project.normalized
    state.pages.forget(normalized)


def run_gpu_file(state: AppState, file_id: int) -> None:  # pragma: no cover (needs a GPU)
    """The GPU-only branch: run the harness with the GPU for the taken file and record
    its GPU kernels' verdicts."""
    from opmarket.web._pipeline import limits_from, validate_wheel

    with state.db.session() as session:
        file = session.get(File, file_id)
        assert file is not None
        filename, sha256 = file.filename, file.sha256
    limits, wheel_limits = limits_from(state.settings)
    tmp = Path(tempfile.mkdtemp(prefix="opmarket-gpu-job-"))
    try:
        local = copy_out(state.storage, sha256, tmp / filename)
        verdict = validate_wheel(
            local,
            limits=limits,
            wheel_limits=wheel_limits,
            gpu=True,
            private=[state.settings.data_dir.resolve()],
        )
        failed = ", ".join(s.name for s in verdict.failures)
        note = f"GPU conformance on {', '.join(gpu_visible())}" + (
            f"; steps that failed: {failed}" if failed else ""
        )
        record_gpu_kernels(state, file_id, verdict.kernels, note)
    except Exception as exc:  # give the kernels back, say why
        log.exception("%s: GPU conformance could not run", filename)
        record_gpu_kernels(state, file_id, [], f"GPU conformance could not run: {exc}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_gpu_worker(state: AppState, stop: threading.Event) -> None:  # pragma: no cover
    """Take files with GPU kernels not run until ``stop`` is set (GPU machines only)."""
    while not stop.is_set():
        file_id = claim_gpu_file(state)
        if file_id is None:
            stop.wait(5.0)
            continue
        run_gpu_file(state, file_id)
