"""One table says which CUDA code runs on which GPU (``registry/_cuda_rules.py``): ``opmarket
doctor``, the index's static check and the catalog's ``compute_capability`` filter in SQL
agree with it on every case, the ones where their three copies disagreed included
(family- and architecture-specific PTX, which doctor said ran nowhere)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select

from opmarket.registry._cuda_rules import RULES, capability_number, code_runs_on, parse_arch
from opmarket.registry._doctor import gpu_fit
from opmarket.registry._gpubinary import DeviceCode
from opmarket.registry._machine import Gpu, Machine
from opmarket.web.catalog._db import Database
from opmarket.web.catalog._models import File, FileStatus, ProjectSummary, Release
from opmarket.web.catalog._seed import seed
from opmarket.web.gpu._checks import runs_on
from opmarket.web.gpu._index import gpu_filter, store_gpu

from .conftest import Backend

# (device code, compute capability, runs there)
CASES = [
    ("sm_80", "8.0", True),
    ("sm_80", "8.6", True),
    ("sm_80", "9.0", False),
    ("sm_80", "7.5", False),
    ("sm_90a", "9.0", True),
    ("sm_90a", "10.0", False),
    ("sm_100f", "10.3", True),
    ("sm_100f", "12.0", False),
    ("compute_75", "7.5", True),
    ("compute_75", "12.0", True),
    ("compute_75", "7.0", False),
    # doctor's copy said family- and architecture-specific PTX ran nowhere
    ("compute_100f", "10.0", True),
    ("compute_100f", "10.3", True),
    ("compute_100f", "12.0", False),
    ("compute_100f", "9.0", False),
    ("compute_90a", "9.0", True),
    ("compute_90a", "10.0", False),
]
CODES = sorted({code for code, _, _ in CASES})
CAPABILITIES = sorted({cc for _, cc, _ in CASES}, key=capability_number)


def test_the_table_has_one_rule_per_kind_and_suffix() -> None:
    assert sorted((r.kind, r.suffix) for r in RULES) == [
        (kind, suffix) for kind in ("ptx", "sass") for suffix in ("", "a", "f")
    ]
    assert parse_arch("compute_100f").rule.reach == "family"
    with pytest.raises(ValueError, match="'sm_x' is not a GPU architecture"):
        parse_arch("sm_x")
    assert not code_runs_on("sm_x", 80)


@pytest.mark.parametrize(("code", "cc", "runs"), CASES)
def test_doctor_and_the_index_agree_with_the_table(code: str, cc: str, runs: bool) -> None:
    assert code_runs_on(code, capability_number(cc)) is runs
    sass, ptx = ([code], []) if code.startswith("sm_") else ([], [code])
    assert runs_on(sass, ptx, capability_number(cc)) is runs
    major, minor = cc.split(".")
    machine = Machine(gpus=(Gpu(0, "a GPU", (int(major), int(minor))),))
    fits, why = gpu_fit(machine, [DeviceCode(sass=tuple(sass), ptx=tuple(ptx))])
    assert fits is runs, why


@pytest.fixture(scope="module")
def catalog(
    tmp_path_factory: pytest.TempPathFactory, database: Backend
) -> Iterator[tuple[Database, dict[int, str]]]:
    """A seeded catalog in which one project per code of CODES has one validated file that
    carries it, with which project that is."""
    url = database.new_url("cuda")
    db = Database(url or f"sqlite:///{tmp_path_factory.mktemp('cuda') / 'c.sqlite3'}")
    seed(db, len(CODES), random_seed=3)
    carrier: dict[int, str] = {}
    with db.transaction() as session:
        files = session.scalars(select(File).join(Release).order_by(File.id)).all()
        firsts = {f.release.project_id: f for f in reversed(files)}
        for code, (project, file) in zip(CODES, sorted(firsts.items()), strict=True):
            file.status = FileStatus.VALIDATED
            key = "sass" if code.startswith("sm_") else "ptx"
            store_gpu(session, file, {"cuda": "13.0", key: [code]})
            carrier[project] = code
    yield db, carrier
    db.dispose()


@pytest.mark.parametrize("cc", CAPABILITIES)
def test_the_sql_filter_agrees_with_the_table(
    catalog: tuple[Database, dict[int, str]], cc: str
) -> None:
    db, carrier = catalog
    with db.session() as session:
        projects = session.scalars(
            select(ProjectSummary.project_id).where(gpu_filter(compute_capability=cc))
        ).all()
    assert sorted(carrier[p] for p in projects) == [
        code for code in CODES if code_runs_on(code, capability_number(cc))
    ]
