"""The version policy: a release's version bump must be as large as its changes."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from opmarket.sdk import OpmarketError

__all__ = ["BUMPS", "InvalidVersionError", "VersionVerdict", "check_bump", "required_bump"]

#: Bump levels, smallest first.
BUMPS: tuple[str, ...] = ("none", "patch", "minor", "major")


class InvalidVersionError(OpmarketError, ValueError):
    """A version string that is not a PEP 440 version."""


@dataclass(frozen=True, slots=True)
class VersionVerdict:
    """Whether ``old`` -> ``new`` is an honest bump for the changes found."""

    old: str
    new: str
    required: str  # one of BUMPS, after the below-1.0 shift
    actual: str  # one of BUMPS, or "backwards"
    ok: bool
    suggested: str  # the smallest version that would be honest
    message: str

    def to_json(self) -> dict[str, object]:
        """The verdict as the JSON object of a report's ``version`` field."""
        return {
            "old": self.old,
            "new": self.new,
            "required": self.required,
            "actual": self.actual,
            "ok": self.ok,
            "suggested": self.suggested,
            "message": self.message,
        }


def _parse(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise InvalidVersionError(f"{text!r} is not a valid version (PEP 440)") from None


def required_bump(breaking: bool, changed: bool) -> str:
    """The semantic-versioning level for the changes: breaking -> major, other changes
    (additions, deprecations, ...) -> minor, nothing -> none."""
    return "major" if breaking else "minor" if changed else "none"


def _release(v: Version) -> tuple[int, int, int]:
    r = (*v.release, 0, 0)
    return r[0], r[1], r[2]


def _actual(old: Version, new: Version) -> str:
    if new < old:
        return "backwards"
    if new == old:
        return "none"
    if new.epoch > old.epoch:  # a new epoch restarts the numbering: at least a major bump
        return "major"
    (o_major, o_minor, _), (n_major, n_minor, _) = _release(old), _release(new)
    if n_major > o_major:
        return "major"
    if n_minor > o_minor:
        return "minor"
    return "patch"


def _next(old: Version, level: str) -> str:
    """The smallest version ``level`` above ``old``, in ``old``'s epoch."""
    major, minor, micro = _release(old)
    epoch = f"{old.epoch}!" if old.epoch else ""
    if level == "major":
        return f"{epoch}{major + 1}.0.0"
    if level == "minor":
        return f"{epoch}{major}.{minor + 1}.0"
    if level == "patch":
        return f"{epoch}{major}.{minor}.{micro + 1}"
    return str(old)


#: What needs a bump of each level, for messages.
_CHANGES = {"major": "breaking changes", "minor": "additions", "patch": "changes"}


def check_bump(old: str, new: str, level: str) -> VersionVerdict:
    """Check ``old`` -> ``new`` against the ``level`` the changes need (see required_bump).

    Below 1.0 every level shifts down one: breaking changes need a minor bump, additions a
    patch bump.
    """
    o, n = _parse(old), _parse(new)
    required = level
    if _release(o)[0] == 0 and level != "none":
        required = BUMPS[BUMPS.index(level) - 1]
    actual = _actual(o, n)
    ok = actual != "backwards" and BUMPS.index(actual) >= BUMPS.index(required)
    suggested = _next(o, required)
    # Said of the changes found (level), with the bump they need here (required).
    if level == "none":
        why = "no op changed"
    else:
        bump = "no bump" if required == "none" else f"a {required} bump"
        why = f"{_CHANGES[level]} need {bump}"
        if level != required:
            why += f" below 1.0 ({level} from 1.0 on)"
    if actual == "backwards":
        message = f"{old} -> {new}: the version went backwards; use {suggested} or later"
    elif ok:
        bump = "the same version" if actual == "none" else f"a {actual} bump"
        message = f"{old} -> {new}: ok ({why}; this is {bump})"
    else:
        bump = "the same version" if actual == "none" else f"a {actual} bump"
        message = (
            f"{old} -> {new} is {bump}, too small: {why}; "
            f"the smallest honest version is {suggested}"
        )
    return VersionVerdict(old, new, required, actual, ok, suggested, message)
