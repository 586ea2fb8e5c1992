"""signalql.connect / Engine.query / Result: the answers equal the CLI's JSON and DuckDB's over
the same files, and the rows reach pyarrow, polars and DuckDB through the Arrow C stream
without a copy."""

from __future__ import annotations

import datetime as dt

import duckdb
import pyarrow as pa
import pytest

import signalql

from conftest import SAMPLE, SAMPLE_NOW, cli_json

STATEMENTS = [
    'FROM events DURING LAST 7 d GROUP BY event_name RETURN event_name, count '
    "ORDER BY count DESC, event_name ASC",
    'FROM events WHERE event_name = "purchase" DURING LAST 30 d RETURN count, '
    "count_distinct(user_id), sum(properties.amount)",
    'FROM events WHERE event_name = "page_view" DURING LAST 7 d GROUP BY properties.path '
    "HAVING count > 100 RETURN properties.path, count ORDER BY count DESC, properties.path ASC "
    "LIMIT 5",
    'FUNNEL "visit" -> "signup" -> "activated" FROM events DURING LAST 28 d WITHIN 7 d',
    "FROM events DURING LAST 14 d BUCKET BY d RETURN count",
    'FIND OBJECT ABOUT "funnels counted" LIMIT 3',
]


def _as_the_cli(engine, root, text, *now):
    """The engine's answer to ``text`` and ``signalql query --format json``'s over ``root``,
    after checking they have the same columns and rows."""
    result = engine.query(text)
    cli = cli_json("query", "--data", str(root), *now, "--format", "json", text)
    assert result.envelope["columns"] == cli["columns"]
    # Sums of doubles may differ in the last bits with the order of summation (two builds).
    assert _same(result.rows, cli["rows"])
    return result, cli


@pytest.mark.parametrize("text", STATEMENTS)
def test_the_envelope_is_the_clis(engine, text):
    result, cli = _as_the_cli(engine, SAMPLE, text, "--now", SAMPLE_NOW)
    assert result.columns == [c["name"] for c in cli["columns"]]
    assert result.metadata["row_count"] == cli["metadata"]["row_count"] == len(result)
    assert result.metadata["as_of"] == SAMPLE_NOW


def _same(a, b) -> bool:
    """Equal, doubles up to 1e-12 relative (the two builds may sum in another order)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and \
            abs(a - b) <= 1e-12 * max(abs(a), abs(b))
    return a == b


def _duckdb_counts(days: int) -> list[tuple[str, int]]:
    end = dt.datetime(2026, 6, 13, tzinfo=dt.timezone.utc)
    start = end - dt.timedelta(days=days)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    return con.execute(
        f"SELECT event_name, count(*) FROM read_parquet('{SAMPLE}/events/*.parquet') "
        "WHERE timestamp >= ? AND timestamp < ? GROUP BY 1 ORDER BY 2 DESC, 1",
        [start, end],
    ).fetchall()


def test_to_arrow_gives_duckdbs_answer(engine):
    result = engine.query(STATEMENTS[0])
    table = result.to_arrow()
    assert isinstance(table, pa.Table)
    assert table.column_names == ["event_name", "count"]
    got = list(zip(table.column("event_name").to_pylist(), table.column("count").to_pylist()))
    assert got == _duckdb_counts(7)


def test_polars_and_duckdb_read_the_stream(engine):
    pl = pytest.importorskip("polars")
    result = engine.query(STATEMENTS[0])
    expected = _duckdb_counts(7)
    # polars reads any Arrow C stream as a struct Series (from_arrow) or a DataFrame.
    assert list(pl.DataFrame(result).iter_rows()) == expected
    assert list(pl.from_arrow(result).struct.unnest().iter_rows()) == expected
    got = duckdb.sql("select event_name, count from result").fetchall()
    assert got == expected


def test_the_rows_are_not_copied(engine):
    """Two tables made from one result share the engine's buffers: the same addresses."""
    result = engine.query("FROM events DURING LAST 30 d RETURN event_name, user_id LIMIT 5000")
    first = pa.table(result)
    second = pa.table(result)
    assert first.num_rows == 5000
    a = [b.address for c in first.columns for ch in c.chunks for b in ch.buffers() if b]
    b = [b.address for c in second.columns for ch in c.chunks for b in ch.buffers() if b]
    assert a and a == b


class _NoEnvelope:
    """A native result that fails the test when its envelope (its JSON rows) is written."""

    def __init__(self, native):
        self._native = native

    def __getattr__(self, name):
        if name == "envelope_json":
            pytest.fail("the envelope's rows were written")
        return getattr(self._native, name)

    def __len__(self):
        return len(self._native)


def test_the_rows_are_written_only_when_asked(engine):
    """len(), columns, metadata and to_arrow() never write the envelope (its JSON rows); the
    envelope written later agrees with them and with the Arrow rows."""
    result = engine.query(
        "FROM events GROUP BY session_id RETURN session_id, count ORDER BY session_id ASC"
    )
    native = result._native
    result._native = _NoEnvelope(native)
    table = result.to_arrow()
    columns, metadata, n = result.columns, result.metadata, len(result)
    result._native = native
    assert (table.num_rows, n, metadata["row_count"], metadata["truncated"]) == (10_000,) * 3 + (True,)
    assert columns == ["session_id", "count"] == table.column_names
    assert metadata == result.envelope["metadata"]
    assert result.rows == [list(r.values()) for r in table.to_pylist()]


def test_params_are_bound_as_literals(engine):
    text = "FROM events WHERE event_name = $name DURING LAST 7 d RETURN count"
    bound = engine.query(text, params={"name": "purchase"})
    literal = engine.query('FROM events WHERE event_name = "purchase" DURING LAST 7 d RETURN count')
    assert bound.rows == literal.rows
    # A value is a literal, never text of the statement.
    injected = engine.query(text, params={"name": 'purchase" OR event_name != "x'})
    assert injected.rows == [[0]]


def test_describe_explain_and_find(engine):
    described = engine.describe("events")
    cli = cli_json("describe", "--data", str(SAMPLE), "--now", SAMPLE_NOW, "--format", "json", "events")
    assert described.rows == cli["rows"]
    assert described.to_arrow().num_rows == len(cli["rows"])
    everything = engine.describe()
    assert len(everything) >= len(described)

    plan = engine.explain("FROM events DURING LAST 7 d RETURN count")
    assert {"canonical_query", "logical_plan", "physical_plan", "sources"} <= plan.keys()
    analyzed = engine.explain("FROM events DURING LAST 7 d RETURN count", analyze=True)
    assert analyzed["actual"]["rows"] >= 1

    found = engine.find("funnels counted", limit=3)
    cli = cli_json("query", "--data", str(SAMPLE), "--now", SAMPLE_NOW, "--format", "json",
                   'FIND OBJECT ABOUT "funnels counted" LIMIT 3')
    assert found.rows == cli["rows"]
    assert found.columns[-1] == "score"


def test_a_context_statement_through_query_is_a_bundle(engine):
    bundle = engine.query('CONTEXT FOR "how are funnels counted" BUDGET 600 TOKENS')
    assert isinstance(bundle, signalql.Bundle)
    assert bundle.id.startswith("context://")
    explanation = engine.query(f"EXPLAIN CONTEXT {bundle.id}")
    assert explanation["context"] == bundle.id
    assert explanation == engine.explain_context(bundle.id)


def test_connect_reads_now_as_a_datetime():
    at = dt.datetime(2026, 6, 13, tzinfo=dt.timezone.utc)
    engine = signalql.connect(SAMPLE, now=at)
    assert engine.query("FROM events DURING LAST 1 d RETURN count").metadata["as_of"] == SAMPLE_NOW


def test_an_empty_answer_keeps_its_columns(engine):
    result = engine.query(
        'FROM events WHERE event_name = "no such event" DURING LAST 7 d GROUP BY event_name '
        "RETURN event_name, count"
    )
    table = result.to_arrow()
    assert (len(result), table.num_rows) == (0, 0)
    assert table.column_names == result.columns == ["event_name", "count"]


GENERATED = [
    "FROM events DURING LAST 30 d GROUP BY event_name RETURN event_name, count, "
    "count_distinct(user_id) ORDER BY event_name",
    'FROM events WHERE event_name = "purchase" DURING LAST 14 d GROUP BY properties.plan '
    "RETURN properties.plan, count, avg(properties.amount) ORDER BY properties.plan",
    'FUNNEL "visit" -> "signup" -> "activated" FROM events DURING LAST 28 d WITHIN 7 d',
    "FROM events DURING LAST 7 d BUCKET BY d RETURN count",
]


@pytest.mark.parametrize("text", GENERATED)
def test_generated_data_answers_as_the_cli(big_events, text):
    result, cli = _as_the_cli(signalql.connect(big_events), big_events, text)
    assert len(result.to_arrow()) == len(cli["rows"]) > 0
