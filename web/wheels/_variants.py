"""Variant wheels (PEP 825, a draft split from PEP 817): their file names, their metadata,
and the ``{name}-{version}-variants.json`` file an index serves for them.

A variant wheel's name has one more part than PEP 427's, its *variant label*::

    {name}-{version}(-{build})?-{python}-{abi}-{platform}-{label}.whl

``packaging`` refuses such names (a six-part name is read as one with a build tag, which
must start with a digit; seven parts are too many), so they are split here: the label off,
and the rest is an ordinary wheel name for ``packaging`` to check. A python tag never
starts with a digit and a build tag always does, which tells the two six-part forms apart.

The label maps to the wheel's variant properties in ``*.dist-info/variant.json``; its
structure is checked with ``variantlib`` (the reference implementation, 0.2.x: the format
with a ``providers`` table that PEP 817 defined and PEP 825 keeps out of the wheel's
required keys). Whether the property *values* are ones a provider plugin knows
(``nvidia-variant-provider`` and the like) is not checked: those plugins are placeholders,
and the index runs no plugin code outside the sandbox; the validation log says so.
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from opmarket.sdk import OpmarketError

__all__ = [
    "LABEL",
    "MAX_METADATA",
    "MAX_PROPERTIES",
    "MAX_VARIANTS_JSON",
    "MAX_VARIANT_WHEELS",
    "METADATA_FILE",
    "VariantError",
    "VariantsFile",
    "check_consistent",
    "read_variant_metadata",
    "split_variant",
    "variant_note",
    "variants_file",
    "variants_filename",
]

#: PEP 825: 1-16 characters of ``0-9 a-z _ .``
LABEL = re.compile(r"^[0-9a-z_.]{1,16}$", re.ASCII)
#: Where a variant wheel keeps its variant metadata, in its ``.dist-info`` folder.
METADATA_FILE = "variant.json"
#: The largest variant.json the index reads: one label's properties and providers take a
#: few hundred bytes; each upload merges its release's variant.json files.
MAX_METADATA = 64 * 1024
#: The most properties (namespace :: feature :: value) one variant.json may list.
MAX_PROPERTIES = 256
#: The most variant wheels (not rejected) one release may have: labels times platforms
#: times Python versions.
MAX_VARIANT_WHEELS = 256
#: The largest ``{name}-{version}-variants.json`` a release's variant wheels may add up to.
MAX_VARIANTS_JSON = 1024 * 1024


class VariantError(OpmarketError, ValueError):
    """A variant wheel's label or metadata is not what PEP 825 says; the message quotes it."""


def split_variant(filename: str) -> tuple[str, str | None]:
    """``filename`` without its variant label, and the label (None for a plain wheel name).

    ``foo-1.0-py3-none-any-cu13.whl`` -> (``foo-1.0-py3-none-any.whl``, ``cu13``);
    ``foo-1.0-1-py3-none-any.whl`` (a build tag) and anything that is not a six- or
    seven-part ``.whl`` name come back unchanged with None. VariantError for a label that
    is not 1-16 characters of ``0-9 a-z _ .``.
    """
    if not filename.endswith(".whl"):
        return filename, None
    parts = filename[: -len(".whl")].split("-")
    if len(parts) == 6 and parts[2][:1].isdigit():  # name-version-build-py-abi-platform
        return filename, None
    if len(parts) not in (6, 7):
        return filename, None
    label = parts[-1]
    if not LABEL.match(label):
        raise VariantError(
            f"invalid variant label {label!r} in {filename!r}: PEP 825 allows 1-16 "
            "characters of 0-9, a-z, '_' and '.'"
        )
    return "-".join(parts[:-1]) + ".whl", label


def variants_filename(name: str, version: str) -> str:
    """``{name}-{version}-variants.json`` with both parts normalized as in wheel names."""
    return f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-variants.json"


def read_variant_metadata(zf: zipfile.ZipFile, dist_info: str, label: str) -> dict[str, Any]:
    """The variant metadata of the wheel open as ``zf`` whose file name carries ``label``:
    ``{dist_info}/variant.json``, its structure checked by ``variantlib`` and its one
    variant being ``label``. VariantError saying what is wrong."""
    from variantlib.errors import ValidationError
    from variantlib.variant_dist_info import VariantDistInfo

    member = f"{dist_info}/{METADATA_FILE}"
    try:
        info = zf.getinfo(member)
    except KeyError:
        raise VariantError(
            f"the file name has the variant label {label!r} but {member} is missing "
            "(PEP 825: a variant wheel carries its variant metadata)"
        ) from None
    if info.file_size > MAX_METADATA:
        raise VariantError(f"{member} is larger than {MAX_METADATA} bytes")
    raw = zf.read(info)
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise VariantError(f"{member} is not JSON: {exc}") from None
    except RecursionError:  # [[[[...]]]] deeper than the parser's stack
        raise VariantError(f"{member} nests deeper than any variant metadata does") from None
    if not isinstance(data, dict):
        raise VariantError(f"{member} is not a JSON object: {raw[:80]!r}")
    try:
        VariantDistInfo(raw, expected_label=label)
    except (ValidationError, TypeError, ValueError, KeyError, RecursionError) as exc:
        raise VariantError(f"{member} is not valid variant metadata: {exc}") from None
    count = _properties(data)
    if count > MAX_PROPERTIES:
        raise VariantError(
            f"{member} lists {count} variant properties; the index takes at most "
            f"{MAX_PROPERTIES} per variant wheel"
        )
    return data


def _properties(data: dict[str, Any]) -> int:
    """How many properties (a feature without values counts as one) ``data`` lists."""
    labels = data.get("variants")
    return sum(
        max(1, len(values)) if isinstance(values, list) else 1
        for namespaces in (labels.values() if isinstance(labels, dict) else ())
        if isinstance(namespaces, dict)
        for features in namespaces.values()
        if isinstance(features, dict)
        for values in features.values()
    )


def variant_note(label: str, data: dict[str, Any]) -> list[str]:
    """The validation log's lines for a variant wheel (``label``, its parsed file name's):
    its properties, what was checked and what was not (property values, by provider
    plugins)."""
    from importlib.metadata import version

    properties = [
        f"{namespace} :: {feature} :: {value}"
        for namespace, features in sorted(data.get("variants", {}).get(label, {}).items())
        for feature, values in sorted(features.items())
        for value in values
    ]
    providers = data.get("providers", {})
    plugins = sorted(
        {req for p in providers.values() if isinstance(p, dict) for req in p.get("requires", [])}
    )
    return [
        f"variant label {label!r}: " + (", ".join(properties) or "no properties (null variant)"),
        f"{METADATA_FILE}: structure checked with variantlib {version('variantlib')}",
        "property values not validated: provider plugins are placeholders on this index"
        + (f" ({', '.join(plugins)} not run)" if plugins else ""),
    ]


@dataclass(frozen=True, slots=True)
class VariantsFile:
    """A release's ``{name}-{version}-variants.json``: its name, bytes and sha256, and the
    labels it lists."""

    filename: str
    content: bytes
    sha256: str
    labels: tuple[str, ...]


def _merged(items: list[tuple[str, dict[str, Any]]]) -> Any:
    """variantlib's merge of the (file name, variant.json) pairs; its ValidationError when
    one contradicts another."""
    from variantlib.variant_dist_info import VariantDistInfo
    from variantlib.variants_json import VariantsJson

    merged: VariantsJson | None = None
    for filename, data in items:
        info = VariantDistInfo(json.dumps(data), expected_label=split_variant(filename)[1])
        if merged is None:
            merged = VariantsJson(info)
        merged.merge(info)
    return merged


def check_consistent(
    released: Iterable[tuple[str, dict[str, Any]]], filename: str, data: dict[str, Any]
) -> None:
    """VariantError when the variant wheel ``filename`` (its variant.json ``data``)
    contradicts the variant wheels its release has (PEP 825: one label, one set of
    properties; the namespace priorities of one release agree), in the order they came,
    or would be one past :data:`MAX_VARIANT_WHEELS` or make the release's variants.json
    larger than :data:`MAX_VARIANTS_JSON`."""
    from variantlib.errors import ValidationError

    released = list(released)
    if len(released) >= MAX_VARIANT_WHEELS:
        raise VariantError(
            f"{filename}: the release has {len(released)} variant wheels already, the most "
            "the index takes"
        )
    try:
        merged = _merged([*released, (filename, data)])
    except (ValidationError, TypeError, ValueError) as exc:
        raise VariantError(
            f"{filename}: its variant metadata contradicts that of the release's other "
            f"variant wheels: {exc}"
        ) from None
    size = len(merged.to_str().encode()) + 1
    if size > MAX_VARIANTS_JSON:
        raise VariantError(
            f"{filename}: with it the release's variants.json would be {size} bytes; the "
            f"index serves at most {MAX_VARIANTS_JSON}"
        )


def variants_file(
    name: str, version: str, metadata: Iterable[tuple[str, dict[str, Any]]]
) -> VariantsFile | None:
    """The index-level metadata of one release from its variant wheels' (file name,
    variant.json) pairs, merged as PEP 825 says (variantlib's merge: disjoint labels
    together, one label one set of properties, namespace priorities extended, never
    contradicted). A wheel whose metadata contradicts those before it (in the order given:
    the index gives them in the order they were uploaded, so a label keeps the meaning it
    was published with) is left out, so an installer treats it as incompatible; uploads
    are checked with :func:`check_consistent` so that this does not happen. None when
    there are none."""
    from variantlib.errors import ValidationError

    items = list(metadata)
    try:  # uploads are checked to agree: merging them all at once is the usual case
        merged: Any = _merged(items)
    except (ValidationError, TypeError, ValueError):
        kept: list[tuple[str, dict[str, Any]]] = []
        merged = None
        for item in items:
            try:
                merged = _merged([*kept, item])
            except (ValidationError, TypeError, ValueError):
                continue
            kept.append(item)
    if merged is None or not merged.variants:
        return None
    content = (merged.to_str() + "\n").encode()
    return VariantsFile(
        variants_filename(name, version),
        content,
        hashlib.sha256(content).hexdigest(),
        tuple(sorted(merged.variants)),
    )
