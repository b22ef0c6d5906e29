"""A wheel's file name, parsed once into one value: name, version, build tag, compatibility
tags and, for a PEP 825 variant wheel, its label; what the rest of the index reads of a file
name it reads here instead of splitting the name again."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.tags import Tag
from packaging.utils import BuildTag, NormalizedName, parse_wheel_filename
from packaging.version import Version

from opmarket.web.wheels._variants import split_variant

__all__ = ["WheelName"]


@dataclass(frozen=True, slots=True)
class WheelName:
    """``foo-1.0-py3-none-any-cu13.whl`` as its parts; :meth:`parse` makes one."""

    filename: str
    name: NormalizedName
    version: Version
    build: BuildTag
    tags: frozenset[Tag]
    variant: str | None  # the PEP 825 label, None for a plain wheel
    parts: tuple[str, ...]  # the name without its label and ``.whl``, split at ``-``

    @classmethod
    def parse(cls, filename: str) -> WheelName:
        """The parts of ``filename``; packaging's InvalidWheelFilename or VariantError (both
        ValueError) quoting it when it is not a wheel's name."""
        base, label = split_variant(filename)
        name, version, build, tags = parse_wheel_filename(base)
        parts = tuple(base.removesuffix(".whl").split("-"))
        return cls(filename, name, version, build, tags, label, parts)

    @property
    def base(self) -> str:
        """The file name without its variant label: a plain wheel's name."""
        return "-".join(self.parts) + ".whl"

    @property
    def dist_info(self) -> str:
        """The ``.dist-info`` folder the archive must hold, as the file name spells it."""
        return f"{self.parts[0]}-{self.parts[1]}.dist-info"

    @property
    def tag_parts(self) -> dict[str, str]:
        """The Python, ABI and platform tags as the name writes them (each may be a
        ``.``-joined set, e.g. ``cp311.cp312``)."""
        python, abi, platform = self.parts[-3:]
        return {"python_tag": python, "abi_tag": abi, "platform_tag": platform}
