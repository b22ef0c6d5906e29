"""``opmarket worker --gpu``: the GPU conformance step, on a machine with a GPU.

Upload validation runs on machines without a GPU: a file's GPU kernels are recorded as
``gpu: not run`` beside the static checks (``_gpu``), never ``passed``. A GPU worker takes
those files one at a time, validated ones first come first served, runs the sandboxed
harness with the GPU's device files (``validate_wheel(..., gpu=True)``: the plugin's
process then checks its kernels on CPU *and* GPU), and keeps only the per-kernel verdicts
for the GPU: each GPU kernel becomes ``passed`` or ``failed`` with the harness's message.
The file's own status and its CPU verdicts stay as upload validation left them.

A file is taken by turning its ``gpu: not run`` rows into ``gpu: running`` in one UPDATE,
so two GPU workers never take the same file. The taken rows' message is the lease: when it
was taken or last renewed, and the claim's own token (``taken at 2026-11-25T12:00:00Z
(claim 3f9c...)``). The worker renews it every third of :data:`LEASE_S` while the file runs;
a file whose lease ran out (its worker was killed, or its machine lost) is taken again by
the next worker that looks, and the worker that lost it records nothing: verdicts are
written only over rows that still carry its token. Only :func:`run_gpu_file` needs a GPU;
what finds work, renews and records runs (and is tested) anywhere.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import tempfile
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, delete, or_, select, update

from opmarket.web._state import AppState
from opmarket.web.catalog._models import File, FileStatus, KernelEntry
from opmarket.web.storage._local import copy_out

if TYPE_CHECKING:
    from opmarket.web.validation._steps import KernelRow

__all__ = [
    "LEASE_S",
    "NOT_RUN",
    "GpuClaim",
    "claim_gpu_file",
    "gpu_visible",
    "record_gpu_kernels",
    "renew_gpu_claim",
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
#: How long a GPU worker holds a file without renewing it (it renews every third of this).
LEASE_S = 300.0


@dataclass(frozen=True, slots=True)
class GpuClaim:
    """A file a GPU worker took, and the token its rows carry while it holds them."""

    file_id: int
    token: str

    def mark(self, now: datetime) -> str:
        return f"{_TAKEN}{now.strftime(_STAMP)} (claim {self.token})"

    def held(self) -> Any:
        """The SQL condition: the file's rows this claim still holds."""
        return and_(
            KernelEntry.file_id == self.file_id,
            KernelEntry.status == _RUNNING,
            KernelEntry.message.endswith(f"(claim {self.token})"),
        )


def claim_gpu_file(state: AppState, *, now: datetime | None = None) -> GpuClaim | None:
    """Take the oldest validated file with GPU kernels not run yet, or whose lease ran out
    (see the module's docstring); None when there is none. ``now``: the clock, for tests."""
    now = now or datetime.now(UTC)
    expired = _TAKEN + (now - timedelta(seconds=LEASE_S)).strftime(_STAMP)
    takeable = or_(
        KernelEntry.status == NOT_RUN,
        and_(
            KernelEntry.status == _RUNNING,
            # Rows running with no lease (from before leases) count as expired.
            or_(~KernelEntry.message.startswith(_TAKEN), KernelEntry.message < expired),
        ),
    )
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
            claim = GpuClaim(int(file_id), secrets.token_hex(8))
            taken = session.execute(
                update(KernelEntry)
                .where(KernelEntry.file_id == file_id, takeable)
                .values(status=_RUNNING, message=claim.mark(now))
            )
            if getattr(taken, "rowcount", 0):
                # Its kernels now show "gpu: running": every process's pages must say so.
                project = session.get(File, file_id).release.project  # type: ignore[union-attr]
                project.serial += 1
                normalized = project.normalized
                break
        else:
            return None
    state.pages.forget(normalized)
    return claim


def renew_gpu_claim(state: AppState, claim: GpuClaim, *, now: datetime | None = None) -> bool:
    """Move the claim's lease to ``now``; False when the claim holds no row any more (its
    lease ran out and another worker took the file)."""
    with state.db.transaction() as session:
        done = session.execute(
            update(KernelEntry)
            .where(claim.held())
            .values(message=claim.mark(now or datetime.now(UTC)))
        )
        return bool(getattr(done, "rowcount", 0))


def record_gpu_kernels(
    state: AppState, claim: GpuClaim, kernels: list[KernelRow], note: str
) -> bool:
    """Replace the file's GPU kernel rows the claim still holds with the verdicts
    ``kernels`` (the harness's, device GPU only); a held kernel it has no verdict for goes
    back to ``gpu: not run``. ``note`` ends the file's log. False, recording nothing, when
    the claim holds no row any more (another worker took the file after its lease)."""
    ran = [k for k in kernels if k.device.upper() == "GPU"]
    ran_ops = {k.op for k in ran}
    with state.db.transaction() as session:
        file = session.get(File, claim.file_id)
        held = session.scalar(select(KernelEntry.id).where(claim.held()).limit(1))
        if file is None or held is None:
            return False
        session.execute(delete(KernelEntry).where(claim.held(), KernelEntry.op.in_(ran_ops)))
        session.execute(update(KernelEntry).where(claim.held()).values(status=NOT_RUN, message=""))
        for k in ran:
            session.add(
                KernelEntry(
                    file_id=claim.file_id,
                    op=k.op,
                    device="GPU",
                    dtypes=k.dtypes,
                    status=k.status,
                    message=k.message,
                )
            )
        file.log = file.log.rstrip("\n") + "\n[gpu worker] " + note + "\n"
        project = file.release.project
        project.serial += 1
        normalized = project.normalized
    state.pages.forget(normalized)
    return True


def _renewing(state: AppState, claim: GpuClaim, stop: threading.Event) -> None:
    while not stop.wait(LEASE_S / 3):
        try:
            if not renew_gpu_claim(state, claim):
                log.warning("file %d: GPU lease lost; its verdicts will not be kept", claim.file_id)
                return
        except Exception:  # the database is away: the lease may run out instead
            log.exception("file %d: could not renew the GPU lease", claim.file_id)


def run_gpu_file(state: AppState, claim: GpuClaim) -> None:  # pragma: no cover (needs a GPU)
    """The GPU-only branch: run the harness with the GPU for the claimed file, renewing
    the lease meanwhile, and record its GPU kernels' verdicts."""
    from opmarket.web.validation._pipeline import limits_from, validate_wheel

    with state.db.session() as session:
        file = session.get(File, claim.file_id)
        assert file is not None
        filename, sha256 = file.filename, file.sha256
    limits, wheel_limits = limits_from(state.settings)
    tmp = Path(tempfile.mkdtemp(prefix="opmarket-gpu-job-"))
    stop = threading.Event()
    renewer = threading.Thread(target=_renewing, args=(state, claim, stop), daemon=True)
    renewer.start()
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
        record_gpu_kernels(state, claim, verdict.kernels, note)
    except Exception as exc:  # give the kernels back, say why
        log.exception("%s: GPU conformance could not run", filename)
        record_gpu_kernels(state, claim, [], f"GPU conformance could not run: {exc}")
    finally:
        stop.set()
        shutil.rmtree(tmp, ignore_errors=True)


def run_gpu_worker(state: AppState, stop: threading.Event) -> None:  # pragma: no cover
    """Take files with GPU kernels not run until ``stop`` is set (GPU machines only)."""
    while not stop.is_set():
        claim = claim_gpu_file(state)
        if claim is None:
            stop.wait(5.0)
            continue
        run_gpu_file(state, claim)
