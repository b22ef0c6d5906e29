"""``opmarket seed``: synthetic projects for benchmarks (opmarket.web's seed), written
straight into a data folder's database."""

from __future__ import annotations

import time
from pathlib import Path

import click

from opmarket.cli._web import data_option, settings_from

__all__ = ["seed_command"]


@click.command("seed")
@click.argument("count", type=click.IntRange(min=1))
@data_option
@click.option("--random-seed", type=int, default=0, show_default=True, help="For the names.")
def seed_command(count: int, data: Path | None, random_seed: int) -> None:
    """Fill a data folder's database with COUNT synthetic projects, for benchmarks.

    Written in bulk through the database (OPMARKET_DATABASE_URL, or SQLite in the data
    folder): releases, files, ops, kernels and mixed statuses, but no file bytes, so
    downloads of seeded files fail. Prints progress to stderr.
    """
    from opmarket.web.catalog._db import Database
    from opmarket.web.catalog._seed import seed_projects

    settings = settings_from(data_dir=data)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = Database(settings.database)
    start = time.monotonic()
    try:
        for done in seed_projects(db, count, random_seed=random_seed):
            click.echo(f"seeded {done}/{count} projects", err=True)
    finally:
        db.dispose()
    click.echo(f"seeded {count} projects in {time.monotonic() - start:.1f} s")
