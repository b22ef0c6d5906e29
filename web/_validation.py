"""The validation job: run the pipeline on a stored wheel and record the verdict."""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version
from sqlalchemy import delete, select

from opmarket.web._models import File, KernelEntry, OpEntry, Release, utcnow
from opmarket.web._pipeline import Previous, Step, Verdict, limits_from, validate_wheel
from opmarket.web._state import AppState

__all__ = ["previous_release", "record", "run_validation", "validation_handler"]

log = logging.getLogger("opmarket.web.validation")


def _vkey(v: str) -> Version | None:
    try:
        return Version(v)
    except InvalidVersion:
        return None


def previous_release(state: AppState, project_id: int, version: str) -> Previous | None:
    """The op-set of the project's newest validated release older than ``version``."""
    mine = _vkey(version)
    with state.db.session() as session:
        rows = session.execute(
            select(File.filename, File.opset, Release.version).join(Release)
            .where(Release.project_id == project_id, File.status == "validated",
                   File.opset != "")
        ).all()  # fmt: skip
    older = [(v, r) for r in rows if (v := _vkey(r.version)) is not None and mine is not None
             and v < mine]
    if not older:
        return None
    _, best = max(older, key=lambda pair: pair[0])
    return Previous(label=best.filename, opset=best.opset)


def validation_handler(state: AppState) -> Any:
    """The job handler for kind ``validate``: ``{"file_id": N}``."""

    def handle(payload: dict[str, Any]) -> None:
        run_validation(state, int(payload["file_id"]))

    return handle


def run_validation(state: AppState, file_id: int) -> Verdict | None:
    """Validate the stored file ``file_id`` if it is pending; its verdict."""
    with state.db.session() as session:
        file = session.get(File, file_id)
        if file is None or file.status != "pending":
            return None
        filename, sha256 = file.filename, file.sha256
        project_id, version = file.release.project_id, file.release.version
    limits, wheel_limits = limits_from(state.settings)
    tmp = Path(tempfile.mkdtemp(prefix="opmarket-job-"))
    try:
        local = tmp / filename
        with open(local, "wb") as out:
            for chunk in state.storage.read(sha256):
                out.write(chunk)
        verdict = validate_wheel(local, previous=previous_release(state, project_id, version),
                                 limits=limits, wheel_limits=wheel_limits,
                                 gpu=state.settings.gpu_available)
    except Exception as exc:  # never leave a file pending for ever: say why it failed
        log.exception("%s: validation could not run", filename)
        verdict = Verdict(filename, steps=[Step("validation", "failed", [
            f"the marketplace could not validate this file: {type(exc).__name__}: {exc}",
            "upload the same file again to retry",
        ])])  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    record(state, file_id, verdict)
    log.info("%s: %s", filename, verdict.status)
    return verdict


def record(state: AppState, file_id: int, verdict: Verdict) -> None:
    """Store the verdict, the ops and kernels; bump the project's serial (the index shows
    the file from now on when it was validated)."""
    with state.db.transaction() as session:
        file = session.get(File, file_id)
        assert file is not None
        session.execute(delete(OpEntry).where(OpEntry.file_id == file_id))
        session.execute(delete(KernelEntry).where(KernelEntry.file_id == file_id))
        file.status = verdict.status
        file.log = verdict.log_text()
        file.result = verdict.to_json()
        file.opset = verdict.opset
        file.validated = utcnow()
        for op in verdict.ops:
            session.add(OpEntry(file_id=file_id, op=str(op.get("name", "")),
                                signature=str(op.get("signature", "")),
                                summary=str(op.get("summary", ""))))
        for k in verdict.kernels:
            session.add(KernelEntry(file_id=file_id, op=str(k.get("op", "")),
                                    device=str(k.get("device", "")),
                                    dtypes=str(k.get("dtypes", "")),
                                    status=str(k.get("status", "")),
                                    message=str(k.get("message", ""))))
        project = file.release.project
        project.serial += 1
        normalized = project.normalized
    state.pages.forget(normalized)
