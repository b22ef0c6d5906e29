"""The catalog's side of the static GPU checks: storing what they found for a file, and the
search filters "built for CUDA major N" and "runs on compute capability X.Y".

The listing code calls :func:`gpu_filter` and adds the predicate it returns to its query of
projects; the filter matches a project with a validated file whose device code has a
target for that CUDA runtime major, or one that runs on a GPU of that compute capability
(SASS for that major at or below its minor, ``sm_XYa`` for exactly X.Y, PTX at or below).
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, or_, select
from sqlalchemy.orm import Session

from opmarket.registry._cuda_rules import RULES, Rule, capability_number, parse_arch
from opmarket.web.catalog._models import File, FileStatus, GpuTarget, ProjectSummary, Release
from opmarket.web.catalog._search import SearchError

__all__ = ["gpu_filter", "store_gpu"]


def store_gpu(session: Session, file: File, gpu: dict[str, Any] | None) -> None:
    """Record the ``gpu`` findings of ``file`` (None: no device code) and its targets."""
    session.execute(delete(GpuTarget).where(GpuTarget.file_id == file.id))
    file.gpu = gpu
    if not gpu:
        return
    cuda = str(gpu.get("cuda") or "")
    first = cuda.split(".", maxsplit=1)[0]
    major = int(first) if first.isdigit() else None
    for kind, key in (("sass", "sass"), ("ptx", "ptx")):
        for arch in gpu.get(key) or []:
            try:
                target = parse_arch(str(arch))
            except ValueError:
                continue
            session.add(
                GpuTarget(
                    file_id=file.id,
                    cuda_major=major,
                    kind=kind,
                    capability=target.capability,
                    suffix=target.suffix,
                )
            )


def gpu_filter(cuda: str = "", compute_capability: str = "") -> ColumnElement[bool] | None:
    """The predicate on projects for the search's ``cuda`` (a CUDA major: ``13``; ``13.0``
    reads as 13) and ``compute_capability`` (``8.6``) parameters; None when both are empty.
    SearchError, quoting the value, for one that is neither."""
    cuda, compute_capability = cuda.strip(), compute_capability.strip()
    if not cuda and not compute_capability:
        return None
    targets = (
        select(Release.project_id)
        .join(File, File.release_id == Release.id)
        .join(GpuTarget, GpuTarget.file_id == File.id)
        .where(File.status == FileStatus.VALIDATED)
    )
    if cuda:
        major = cuda.split(".", 1)[0]
        if not re.fullmatch(r"[0-9]{1,3}", major):  # str.isdigit() also takes "²"
            raise SearchError(f"cuda must be a CUDA major version such as 13, not {cuda[:40]!r}")
        targets = targets.where(GpuTarget.cuda_major == int(major))
    if compute_capability:
        try:
            wanted = capability_number(compute_capability)
        except ValueError as exc:
            raise SearchError(f"compute_capability: {exc}") from None
        targets = targets.where(or_(*(_runs(rule, wanted) for rule in RULES)))
    return ProjectSummary.project_id.in_(targets)


def _runs(rule: Rule, wanted: int) -> ColumnElement[bool]:
    """The targets ``rule`` says run on compute capability ``wanted``, as SQL."""
    where = {
        "exact": GpuTarget.capability == wanted,
        "family": and_(GpuTarget.capability >= wanted // 10 * 10, GpuTarget.capability <= wanted),
        "later": GpuTarget.capability <= wanted,
    }[rule.reach]
    return and_(GpuTarget.kind == rule.kind, GpuTarget.suffix == rule.suffix, where)
