"""A wheel's file name is parsed once (web/wheels/_filename.py) into one value that carries
its PEP 825 variant label; what the index reads of a name comes from it."""

from __future__ import annotations

import pytest
from packaging.utils import InvalidWheelFilename
from packaging.version import Version

from opmarket.web.catalog._models import distribution_key
from opmarket.web.wheels._filename import WheelName
from opmarket.web.wheels._variants import VariantError


def test_a_variant_wheels_name_carries_its_label() -> None:
    wheel = WheelName.parse("Acme_Clip-1.0-2-cp311-abi3-manylinux_2_28_x86_64-cu13.whl")
    assert (wheel.name, wheel.version, wheel.build, wheel.variant) == (
        "acme-clip",
        Version("1.0"),
        (2, ""),
        "cu13",
    )
    assert wheel.base == "Acme_Clip-1.0-2-cp311-abi3-manylinux_2_28_x86_64.whl"
    assert wheel.dist_info == "Acme_Clip-1.0.dist-info"
    assert wheel.tag_parts["platform_tag"] == "manylinux_2_28_x86_64"
    assert distribution_key(wheel.filename) == distribution_key(wheel.filename.lower())
    assert distribution_key(wheel.filename) != distribution_key(wheel.base)


def test_a_plain_wheel_has_no_label() -> None:
    wheel = WheelName.parse("foo-1.0-py3-none-any.whl")
    assert wheel.variant is None and wheel.base == wheel.filename


@pytest.mark.parametrize(
    ("filename", "error"),
    [("foo-1.0.tar.gz", InvalidWheelFilename), ("foo-1.0-py3-none-any-CU13.whl", VariantError)],
)
def test_what_is_not_a_wheels_name_is_a_value_error(filename: str, error: type) -> None:
    with pytest.raises(error, match="foo"):
        WheelName.parse(filename)
    assert issubclass(error, ValueError)
