"""A wheel's declared dependencies, for validation: which the warm environment already
provides, and which wheels of this index provide the rest.

Validation runs every plugin in one prepared environment (the worker's interpreter with
opmarket and numpy), read-only, with no installer run per file. A wheel that declares more
(``Requires-Dist``: a GPU companion's base plugin, ``nvidia-cuda-runtime``) gets those
wheels from this index's validated files, resolved here from their stored core metadata,
and unpacked inside the sandbox into the job's own folder beside the wheel itself
(``_probe``); the sandbox stays offline. What neither the environment nor the index has is
named in a failed step, as an installer would fail to install the wheel.
"""

from __future__ import annotations

import functools
import importlib.metadata
from dataclasses import dataclass, field
from email.parser import BytesParser
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import sys_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from opmarket.web.storage._local import copy_out
from opmarket.web.validation._steps import Step, StepStatus, Verdict

if TYPE_CHECKING:
    from opmarket.web._state import AppState

__all__ = ["CatalogSource", "IndexWheel", "Resolution", "requirements_of", "resolve"]


@dataclass(frozen=True, slots=True)
class IndexWheel:
    """A validated wheel of this index that satisfies a requirement."""

    filename: str
    sha256: str
    version: str
    metadata: bytes  # its METADATA, for its own requirements


class WheelSource(Protocol):
    """Where wheels beyond the warm environment come from (this index)."""

    def find(self, req: Requirement) -> IndexWheel | None:
        """The best validated wheel for ``req``, or None."""

    def fetch(self, candidate: IndexWheel, folder: Path) -> Path:
        """Write the candidate's wheel into ``folder``; its path."""

    def projects(self, names: set[str]) -> set[str]:
        """Which of these normalized names are projects here."""


@dataclass(slots=True)
class Resolution:
    """What the job needs beyond the warm environment: wheels to unpack, and what is missing."""

    wheels: list[IndexWheel] = field(default_factory=list)
    provided: list[str] = field(default_factory=list)  # "name version", by the environment
    missing: list[str] = field(default_factory=list)  # requirements nothing satisfies
    invalid: list[str] = field(default_factory=list)  # Requires-Dist lines that do not parse


def requirements_of(metadata: bytes) -> tuple[list[Requirement], list[str]]:
    """The ``Requires-Dist`` entries of a METADATA file that apply here (no extra asked
    for, markers evaluated for this interpreter), and the lines that are not requirements."""
    message = BytesParser().parsebytes(metadata)
    env: dict[str, str] = {**{k: str(v) for k, v in default_environment().items()}, "extra": ""}
    out: list[Requirement] = []
    bad: list[str] = []
    for line in message.get_all("Requires-Dist") or []:
        try:
            req = Requirement(str(line))
        except InvalidRequirement:
            bad.append(str(line))
            continue
        if req.marker is None or req.marker.evaluate(env):
            out.append(req)
    return out, bad


@functools.lru_cache(maxsize=1024)
def _installed(name: str) -> str | None:
    """The version of ``name`` in the validation environment (this interpreter's), read once
    per process as the environment's other facts are (``_owned``): finding a distribution
    searches every folder of the path and parses its METADATA, for each requirement of each
    validation."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def resolve(metadata: bytes, source: WheelSource | None, *, max_wheels: int = 32) -> Resolution:
    """Resolve the requirements of the wheel whose METADATA is ``metadata``, and theirs:
    the warm environment first (this interpreter's distributions), then ``source`` (this
    index; None: no index, as for ``opmarket validate`` on an author's machine). The
    first candidate found for a name is kept (no backtracking); at most ``max_wheels``."""
    result = Resolution()
    own = canonicalize_name(BytesParser().parsebytes(metadata).get("Name") or "")
    todo, bad = requirements_of(metadata)
    result.invalid.extend(bad)
    chosen: dict[str, IndexWheel] = {}
    seen: set[str] = {own}
    while todo:
        req = todo.pop(0)
        name = canonicalize_name(req.name)
        if name in chosen:
            if not req.specifier.contains(chosen[name].version, prereleases=True):
                result.missing.append(f"{req} (this index's {chosen[name].version} chosen)")
            continue
        if name in seen:
            continue
        seen.add(name)
        have = _installed(req.name)
        if have is not None and req.specifier.contains(have, prereleases=True):
            result.provided.append(f"{req.name} {have}")
            continue
        found = source.find(req) if source is not None and len(chosen) < max_wheels else None
        if found is None:
            where = "the validation environment has " + have if have else "not installed"
            result.missing.append(f"{req} ({where}; not on this index)")
            continue
        chosen[name] = found
        result.wheels.append(found)
        more, bad = requirements_of(found.metadata)
        result.invalid.extend(f"{found.filename}: {line}" for line in bad)
        todo.extend(more)
    return result


def _fits(filename: str, tags: frozenset[object]) -> bool:
    try:
        _, _, _, file_tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:  # e.g. a variant wheel's six-part name: not for pip
        return False
    return any(t in tags for t in file_tags)


@functools.cache
def _interpreter_tags() -> frozenset[object]:
    """The wheel tags this interpreter installs: the same for the whole process, and a few
    milliseconds to list, which each validation spent again."""
    return frozenset(sys_tags())


class CatalogSource:
    """This index as a :class:`WheelSource`: the newest validated, unyanked wheel of the
    requirement's project whose version it allows and whose tags this interpreter installs,
    read from the catalog's database and file store."""

    def __init__(self, state: AppState) -> None:
        self.state = state
        self.tags = _interpreter_tags()

    def find(self, req: Requirement) -> IndexWheel | None:
        """The newest fitting validated wheel of ``req``'s project, or None."""
        from sqlalchemy import select

        from opmarket.web._status import FileStatus
        from opmarket.web.catalog._models import File, Project, Release

        with self.state.db.session() as session:
            rows = session.execute(
                select(File.filename, File.sha256, File.metadata_sha256, Release.version)
                .join(Release, File.release_id == Release.id)
                .join(Project, Release.project_id == Project.id)
                .where(
                    Project.normalized == canonicalize_name(req.name),
                    File.status == FileStatus.VALIDATED,
                    File.yanked.is_(False),
                )
            ).all()
        ranked: list[tuple[Version, str, str, str]] = []
        for row in rows:
            try:
                version = Version(row.version)
            except InvalidVersion:
                continue
            if req.specifier.contains(version, prereleases=True) and _fits(row.filename, self.tags):
                ranked.append((version, row.filename, row.sha256, row.metadata_sha256))
        if not ranked:
            return None
        version, filename, sha256, metadata_key = max(ranked)
        metadata = b"".join(self.state.storage.read(metadata_key))
        return IndexWheel(filename, sha256, str(version), metadata)

    def projects(self, names: set[str]) -> set[str]:
        """Which of these normalized names are projects on this index."""
        from sqlalchemy import select

        from opmarket.web.catalog._models import Project

        if not names:
            return set()
        with self.state.db.session() as session:
            found = session.scalars(
                select(Project.normalized).where(Project.normalized.in_(sorted(names)))
            ).all()
        return set(found)

    def fetch(self, candidate: IndexWheel, folder: Path) -> Path:
        """Copy the candidate's blob out of the store as ``folder/filename``."""
        return copy_out(self.state.storage, candidate.sha256, folder / candidate.filename)


def dependency_step(
    verdict: Verdict, metadata: bytes, source: WheelSource | None
) -> list[IndexWheel] | None:
    """Add the ``dependencies`` step to ``verdict``: the wheels to unpack beside the file,
    or None when a requirement cannot be met from ``source`` (the step failed). Without a
    source (``opmarket validate``) what is missing is reported and skipped."""
    found = resolve(metadata, source)
    if not (found.wheels or found.provided or found.missing or found.invalid):
        verdict.steps.append(Step("dependencies", StepStatus.PASSED, ["none declared"]))
        return []
    lines = (
        [f"from the validation environment: {', '.join(found.provided)}"] if found.provided else []
    )
    lines += [f"from this index: {c.filename}" for c in found.wheels]
    lines += [f"not a requirement: {line!r}" for line in found.invalid]
    lines += [f"missing: {m}" for m in found.missing]
    if found.invalid or (found.missing and source is not None):
        verdict.steps.append(Step("dependencies", StepStatus.FAILED, lines))
        return None
    status = StepStatus.SKIPPED if found.missing else StepStatus.PASSED
    if found.missing:
        lines.append("no index to take them from here: the plugin is loaded without them")
    verdict.steps.append(Step("dependencies", status, lines))
    return found.wheels
