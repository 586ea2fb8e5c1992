#!/usr/bin/env python3
"""Recompute the `--- expected` section of golden cases from their `--- oracle` DuckDB SQL.

The oracle is a second, independent formulation of each query, written by hand in plain SQL and
run by DuckDB over the same data, so expectations never come from the engine under test.

    pip install duckdb            # once
    python3 tests/golden/oracle.py [CASE...]   # all cases with an oracle by default
    python3 tests/golden/oracle.py --check     # exit 1 if any expectation is out of date

Datasets: `data: sample` is data/sample/events/*.parquet; `data: tiny` is
tests/data/tiny/events.jsonl read with explicit types; `data: funnel` is
tests/data/funnel/events-*.jsonl with a column `ord`, each event's position in the files. Sessions
run in UTC.
"""
import datetime as dt
import decimal
import json
import math
import os
import pathlib
import sys

import duckdb

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Oracles may name files relative to the repository root (parquet_schema('data/sample/…')).
os.chdir(ROOT)

TINY_COLUMNS = (
    "{'event_name': 'VARCHAR', 'user_id': 'VARCHAR', 'session_id': 'VARCHAR', "
    "'timestamp': 'TIMESTAMPTZ', 'properties': "
    "'STRUCT(amount DOUBLE, message VARCHAR, path VARCHAR, plan VARCHAR, platform VARCHAR)'}"
)

FUNNEL_COLUMNS = (
    "{'event_name': 'VARCHAR', 'user_id': 'VARCHAR', 'timestamp': 'TIMESTAMPTZ', "
    "'properties': 'STRUCT(plan VARCHAR)'}"
)


POLICY_TABLES = ("events", "users", "entities", "relationships", "signals")


def connect(data, principal=None):
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    if data == "sample":
        path = ROOT / "data" / "sample" / "events" / "*.parquet"
        # `ord`: each event's position in the files (by file name, then row), as for funnels.
        con.execute(
            f"CREATE VIEW events AS SELECT * EXCLUDE (filename, file_row_number), "
            "row_number() OVER (ORDER BY filename, file_row_number) AS ord "
            f"FROM read_parquet('{path}', union_by_name = true, filename = true, file_row_number = true)"
        )
        signals = ROOT / "data" / "sample" / "signals" / "*.parquet"
        con.execute(f"CREATE VIEW signals AS SELECT * FROM read_parquet('{signals}')")
        # The raw entities (every version) and relationships tables.
        for table in ("entities", "relationships"):
            files = ROOT / "data" / "sample" / table / "*.parquet"
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{files}')")
    elif data == "tiny":
        path = ROOT / "tests" / "data" / "tiny" / "events.jsonl"
        con.execute(
            f"CREATE VIEW events AS SELECT *, row_number() OVER () AS ord FROM read_json('{path}', "
            f"format = 'newline_delimited', columns = {TINY_COLUMNS})"
        )
        users = ROOT / "tests" / "data" / "tiny" / "users.jsonl"
        con.execute(
            f"CREATE VIEW users AS SELECT * FROM read_json('{users}', format = 'newline_delimited', "
            "columns = {'user_id': 'VARCHAR', 'traits': 'STRUCT(company VARCHAR, plan VARCHAR)'})"
        )
        signals = ROOT / "tests" / "data" / "tiny" / "signals.jsonl"
        con.execute(
            f"CREATE VIEW signals AS SELECT * FROM read_json('{signals}', format = 'newline_delimited', "
            "columns = {'entity_id': 'VARCHAR', 'name': 'VARCHAR', 'value': 'VARCHAR', "
            "'probability': 'DOUBLE', 'computed_at': 'TIMESTAMPTZ'})"
        )
    elif data == "funnel":
        # Both files, each read in order; `ord` is the event's position in the files (file by
        # file, as ingested), the tie-break for equal timestamps.
        parts = []
        for i, name in enumerate(["events-1.jsonl", "events-2.jsonl"]):
            path = ROOT / "tests" / "data" / "funnel" / name
            parts.append(
                f"SELECT *, {i} AS file_no, row_number() OVER () AS row_no FROM read_json('{path}', "
                f"format = 'newline_delimited', columns = {FUNNEL_COLUMNS})"
            )
        con.execute(
            "CREATE VIEW events AS SELECT *, row_number() OVER (ORDER BY file_no, row_no) AS ord "
            f"FROM ({' UNION ALL '.join(parts)})"
        )
    elif data == "segment":
        # The raw export as Segment writes it: times are epoch milliseconds.
        path = ROOT / "tests" / "data" / "foreign" / "segment" / "raw" / "tracks" / "*.parquet"
        con.execute(f"CREATE VIEW tracks AS SELECT * FROM read_parquet('{path}', union_by_name = true)")
    elif data == "texttime":
        path = ROOT / "tests" / "data" / "foreign" / "texttime" / "events" / "*.parquet"
        con.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet('{path}', union_by_name = true)")
    elif data == "hive":
        path = ROOT / "tests" / "data" / "foreign" / "hive" / "events" / "**" / "*.parquet"
        con.execute(
            f"CREATE VIEW events AS SELECT * FROM read_parquet('{path}', hive_partitioning = true, "
            "hive_types = {'dt': DATE, 'platform': VARCHAR})"
        )
    elif data == "jsontext":
        path = ROOT / "tests" / "data" / "foreign" / "jsontext" / "events" / "*.parquet"
        con.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet('{path}')")
    elif data == "drift":
        path = ROOT / "tests" / "data" / "foreign" / "drift" / "events" / "*.parquet"
        con.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet('{path}', union_by_name = true)")
    elif data == "delta":
        # The table's current snapshot, as the `deltalake` package reads it.
        from deltalake import DeltaTable

        path = ROOT / "tests" / "data" / "foreign" / "delta" / "events"
        con.register("events", DeltaTable(str(path)).to_pyarrow_table())
    elif data == "policy":
        # A principal's view is the copy of the data with its policy applied by hand
        # (tests/data/policy/make.py); `admin` reads everything, as root/ holds it. `ord`: each
        # event's position in the files, as for funnels.
        base = ROOT / "tests" / "data" / "policy"
        folder = base / (f"as_{principal}" if principal not in (None, "admin") else "root")
        for table in POLICY_TABLES:
            files = folder / table
            if not files.exists():
                continue
            if table == "events":
                con.execute(
                    "CREATE VIEW events AS SELECT * EXCLUDE (filename, file_row_number), "
                    "row_number() OVER (ORDER BY filename, file_row_number) AS ord "
                    f"FROM read_parquet('{files}/*.parquet', filename = true, file_row_number = true)"
                )
            else:
                con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{files}/*.parquet')")
    else:
        raise SystemExit(f"unknown dataset {data}")
    return con


def to_json(v):
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, (int,)):
        return v
    if isinstance(v, float):
        return None if math.isnan(v) or math.isinf(v) else v
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, dt.datetime):
        v = v.astimezone(dt.timezone.utc)
        base = v.strftime("%Y-%m-%dT%H:%M:%S")
        us = v.microsecond
        if us == 0:
            frac = ""
        elif us % 1000 == 0:
            frac = f".{us // 1000:03d}"
        else:
            frac = f".{us:06d}"
        return f"{base}{frac}Z"
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, dict):
        return {k: to_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [to_json(x) for x in v]
    return str(v)


def parse_case(path):
    header, sections, order, current = [], {}, [], None
    for line in path.read_text().splitlines():
        if line.startswith("--- "):
            current = line[4:].strip()
            sections[current] = []
            order.append(current)
        elif current is None:
            header.append(line)
        else:
            sections[current].append(line)
    return header, sections, order


def header_value(header, key, default):
    for line in header:
        if not line.startswith("#") and ":" in line:
            k, v = line.split(":", 1)
            if k.strip() == key:
                return v.strip()
    return default


def expected_for(path):
    header, sections, _ = parse_case(path)
    con = connect(header_value(header, "data", "sample"), header_value(header, "principal", None))
    cur = con.execute("\n".join(sections["oracle"]))
    columns = [d[0] for d in cur.description]
    rows = [[to_json(v) for v in row] for row in cur.fetchall()]
    return {"columns": columns, "rows": rows}


def render(path, expected):
    header, sections, order = parse_case(path)
    previous = {}
    if "expected" in sections and "".join(sections["expected"]).strip():
        previous = json.loads("\n".join(sections["expected"]))
    for flag in ("truncated", "ordered", "row_count"):
        if flag in previous:
            expected[flag] = previous[flag]
    sections["expected"] = [json.dumps(expected, ensure_ascii=False)]
    if "expected" not in order:
        order.append("expected")
    out = list(header)
    for name in order:
        out.append(f"--- {name}")
        out.extend(sections[name])
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv):
    check = "--check" in argv
    names = [a for a in argv if not a.startswith("--")]
    paths = [pathlib.Path(n) for n in names] or sorted((ROOT / "tests" / "golden").rglob("*.case"))
    stale = 0
    for path in paths:
        if "oracle" not in parse_case(path)[1]:
            continue
        new_text = render(path, expected_for(path))
        if new_text != path.read_text():
            stale += 1
            if check:
                print(f"out of date: {path}")
            else:
                path.write_text(new_text)
                print(f"updated: {path}")
    if check and stale:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
