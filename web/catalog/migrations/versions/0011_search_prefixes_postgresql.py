"""PostgreSQL: a second GIN index for the search's counts, over every prefix (1 to 12
characters) of every word of a project's text, and its devices.

A search word is a prefix (``conv`` finds ``convgemm``). PostgreSQL's GIN index of 0006
answers ``conv:*`` by merging the lists of each of its words that start with it (60 of them,
19,000 projects, for ``conv`` at 100,000 projects) into a bitmap, one per word, before the
two words of ``conv gemm`` meet: 5 to 6 ms, as long as reading 20,000 rows in turn to find
the 1,001 that the count stops at. Here each prefix is a word of its own, so ``conv gemm``
is two lists read side by side, and the count reads only the rows that match: about 2 ms.

``opmarket_search_prefixes(text, devices)`` gives the tsvector: the prefixes of the words
``to_tsvector('simple', text)`` finds (the words of 0006's column ``search``, the same text),
and each device of ``devices`` with a space in front (`` GPU``), which no word has, so a
count of words and a device meets in the index too. It is an index expression, not a
column: rows stay as wide as they were. Its cost is set high (it is a query per row), so
the planner reads the index rather than computing it per row, and the search uses it only
for its counts; pages stay on 0006's index and the name index.

A search with a device tests the summary's ``devices`` column, where a device name with a
space in it (``MY GPU``) reads as two; the exact test, a lookup per row in
project_kernels, is needed only when such a name exists: the partial index
``ix_project_kernels_spaced`` (empty, as a rule) tells in one lookup.

The index is about 24 MB at 100,000 projects (0006's: 12 MB) and takes changes into its
tree at once (``fastupdate = off``: see 0010). SQLite: nothing changes (FTS5 keeps prefixes
since 0009).

Revision ID: 0011
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None

#: The expression the index is over, as the search writes it (they must be the same).
EXPRESSION = "opmarket_search_prefixes(name || ' ' || summary || ' ' || ops, devices)"

_FUNCTION = """
CREATE FUNCTION opmarket_search_prefixes(doc text, devices text) RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE COST 10000 AS $$
    SELECT coalesce(array_to_tsvector(array_agg(DISTINCT lexeme)), ''::tsvector)
    FROM (
        SELECT left(w, n) AS lexeme
        FROM unnest(tsvector_to_array(to_tsvector('simple'::regconfig, doc))) AS w,
            generate_series(1, least(length(w), 12)) AS n
        UNION ALL
        SELECT ' ' || d FROM unnest(string_to_array(devices, ' ')) AS d WHERE d <> ''
    ) AS lexemes
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_FUNCTION)
    op.execute(
        f"CREATE INDEX ix_project_summaries_prefixes ON project_summaries "
        f"USING GIN ({EXPRESSION}) WITH (fastupdate = off)"
    )
    op.execute(
        "CREATE INDEX ix_project_kernels_spaced ON project_kernels (project_id) "
        "WHERE device LIKE '% %'"
    )
    op.execute("ANALYZE project_summaries")  # the expression's statistics, for the planner


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP INDEX ix_project_kernels_spaced")
    op.execute("DROP INDEX ix_project_summaries_prefixes")
    op.execute("DROP FUNCTION opmarket_search_prefixes(text, text)")
