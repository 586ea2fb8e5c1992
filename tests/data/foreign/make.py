#!/usr/bin/env python3
"""Writes the foreign datasets under tests/data/foreign/: Parquet files laid out and typed the
way other tools write them, not as signalql's ingest does. They are committed (a few KB); run
this again only to change them, then `python3 tests/golden/oracle.py` for the expectations.

    pip install pyarrow duckdb
    python3 tests/data/foreign/make.py

- segment/: a Segment-style wide export of `tracks` in raw/tracks/, two files: columns
  `event`, `received_at` (int64 epoch ms), `anonymous_id`, `context_session_id`, one column
  per property, and the client's own `timestamp` as text (not the event time). Mapped in
  signalql.toml with `properties = "*"`.
- texttime/: events whose time is RFC 3339 text with offsets (`ts`), properties a struct;
  two files whose `event_name` is Utf8 in one and a dictionary in the other.
- objects/: the object tables exactly as DESIGN.md §3 lists them (no `recorded_at`,
  `source_path` or `tombstoned_at`), times as timestamp(ns) without a zone.
- hive/: `events` partitioned by pyarrow's hive flavour, `dt=YYYY-MM-DD/platform=…/`, five
  days; `dt` typed as a date in signalql.toml and named as the time partition.
- jsontext/: `events` whose properties are JSON text: `amount` numbers (2.33 < 10.64, which
  text order reverses), `code` numbers and strings mixed.
- drift/: two files of `events` a year apart in spirit: timestamp(ms, UTC) then timestamp(us)
  without a zone, event_name Utf8 then LargeUtf8, properties.amount int64 then float64 with a
  `plan` field added, and a `session_id` column only in the newer file.
- delta/: `events` as a Delta table written by the `deltalake` package (pip install deltalake)
  in three commits, then a DELETE that rewrote a file: the removed file stays on disk and
  must not be read.
"""
import datetime as dt
import pathlib
import random

import pyarrow as pa
import pyarrow.parquet as pq

HERE = pathlib.Path(__file__).resolve().parent
UTC = dt.timezone.utc
BASE = dt.datetime(2026, 6, 1, tzinfo=UTC)


def write(path, table, **kw):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, **kw)


def segment():
    rng = random.Random(7)
    events = ["page", "signup", "purchase"]
    plans = ["free", "pro", None]
    platforms = ["ios", "web"]
    for part in range(2):
        rows = []
        for i in range(40):
            t = BASE + dt.timedelta(hours=rng.randrange(0, 24 * 10), seconds=rng.randrange(3600))
            ev = rng.choice(events)
            rows.append({
                "event": ev,
                "received_at": int(t.timestamp() * 1000) + rng.randrange(1000),
                "anonymous_id": f"anon{rng.randrange(12):02d}",
                "context_session_id": f"s{rng.randrange(30):02d}",
                "plan": rng.choice(plans),
                "amount": round(rng.uniform(1, 90), 2) if ev == "purchase" else None,
                "platform": rng.choice(platforms),
                "timestamp": (t - dt.timedelta(seconds=5)).isoformat(),
            })
        schema = pa.schema([
            ("event", pa.string()), ("received_at", pa.int64()), ("anonymous_id", pa.string()),
            ("context_session_id", pa.string()), ("plan", pa.string()), ("amount", pa.float64()),
            ("platform", pa.string()), ("timestamp", pa.string()),
        ])
        write(HERE / "segment" / "raw" / "tracks" / f"part-{part}.parquet",
              pa.Table.from_pylist(rows, schema=schema))
    (HERE / "segment" / "signalql.toml").write_text('''now = "2026-06-11T00:00:00Z"

[tables.events]
path = "raw/tracks"
[tables.events.columns]
event_name = "event"
timestamp = "received_at"
user_id = "anonymous_id"
session_id = "context_session_id"
properties = "*"
[tables.events.time]
epoch_unit = "ms"
''')


def texttime():
    rng = random.Random(11)
    offsets = [0, 2, -5, 9]
    for part in range(2):
        rows = []
        for i in range(30):
            t = BASE + dt.timedelta(minutes=rng.randrange(0, 60 * 24 * 5))
            tz = dt.timezone(dt.timedelta(hours=rng.choice(offsets)))
            rows.append({
                "event_name": rng.choice(["open", "close"]),
                "ts": t.astimezone(tz).isoformat(),
                "user_id": f"u{rng.randrange(6)}",
                "properties": {"country": rng.choice(["de", "fr", "us"]),
                               "n": rng.randrange(100)},
            })
        table = pa.Table.from_pylist(rows)
        if part == 1:
            table = table.set_column(0, "event_name", table.column(0).dictionary_encode())
        write(HERE / "texttime" / "events" / f"part-{part}.parquet", table)
    (HERE / "texttime" / "signalql.toml").write_text('''now = "2026-06-06T00:00:00Z"

[tables.events.columns]
timestamp = "ts"
''')


def objects():
    ns = pa.timestamp("ns")
    t0 = dt.datetime(2026, 5, 1)
    docs = [
        ("doc-a", "atlas", "note", "Parquet storage layout",
         "Parquet files hold the event tables; storage is columnar and compressed."),
        ("doc-b", "atlas", "note", "Funnel counting",
         "A funnel counts users who reach each step within the window."),
        ("doc-c", "zephyr", "runbook", "Rotating keys",
         "Rotate the storage keys every quarter; never paste them in chat."),
    ]
    write(HERE / "objects" / "objects" / "part-0.parquet", pa.table({
        "object_id": [d[0] for d in docs],
        "project": [d[1] for d in docs],
        "kind": [d[2] for d in docs],
        "title": [d[3] for d in docs],
        "created_at": pa.array([t0 + dt.timedelta(days=i) for i in range(3)], ns),
    }))
    write(HERE / "objects" / "revisions" / "part-0.parquet", pa.table({
        "object_id": [d[0] for d in docs],
        "revision": pa.array([1, 1, 1], pa.int64()),
        "created_at": pa.array([t0 + dt.timedelta(days=i) for i in range(3)], ns),
        "origin": ["import", "import", "import"],
        "trust": ["verified", "verified", "inferred"],
        "validation": ["valid", "valid", "valid"],
        "roles": pa.array([["data"], ["data"], ["data"]], pa.list_(pa.string())),
        "state": ["current", "current", "current"],
    }))
    import hashlib
    write(HERE / "objects" / "representations" / "part-0.parquet", pa.table({
        "object_id": [d[0] for d in docs],
        "revision": pa.array([1, 1, 1], pa.int64()),
        "name": ["text", "text", "text"],
        "media_type": ["text/markdown"] * 3,
        "content": pa.array([d[4] for d in docs], pa.large_string()),
        "content_hash": ["sha256:" + hashlib.sha256(d[4].encode()).hexdigest() for d in docs],
    }))
    (HERE / "objects" / "signalql.toml").write_text('now = "2026-06-01T00:00:00Z"\n')


def delta():
    import shutil
    from deltalake import DeltaTable, write_deltalake
    path = HERE / "delta" / "events"
    shutil.rmtree(path, ignore_errors=True)
    rng = random.Random(3)
    schema = pa.schema([
        ("event_name", pa.string()), ("user_id", pa.string()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("properties", pa.struct([("plan", pa.string()), ("amount", pa.float64())])),
    ])
    for commit in range(3):
        rows = []
        for i in range(25):
            t = BASE + dt.timedelta(hours=rng.randrange(0, 24 * 7), minutes=rng.randrange(60))
            ev = rng.choice(["view", "buy", "junk"])
            rows.append({"event_name": ev, "user_id": f"u{rng.randrange(8)}", "timestamp": t,
                         "properties": {"plan": rng.choice(["free", "pro"]),
                                        "amount": round(rng.uniform(1, 50), 2) if ev == "buy" else None}})
        write_deltalake(str(path), pa.Table.from_pylist(rows, schema=schema), mode="append")
    DeltaTable(str(path)).delete("event_name = 'junk'")
    (HERE / "delta" / "signalql.toml").write_text('now = "2026-06-08T00:00:00Z"\n')


def hive():
    import shutil
    import pyarrow.dataset as ds
    path = HERE / "hive" / "events"
    shutil.rmtree(path, ignore_errors=True)
    rng = random.Random(5)
    rows = []
    for i in range(120):
        t = BASE + dt.timedelta(minutes=rng.randrange(0, 60 * 24 * 5))
        rows.append({"event_name": rng.choice(["open", "pay"]), "user_id": f"u{rng.randrange(9)}",
                     "timestamp": t, "properties": {"amount": round(rng.uniform(1, 20), 2)},
                     "dt": t.date().isoformat(), "platform": rng.choice(["ios", "web"])})
    schema = pa.schema([
        ("event_name", pa.string()), ("user_id", pa.string()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("properties", pa.struct([("amount", pa.float64())])),
        ("dt", pa.string()), ("platform", pa.string()),
    ])
    table = pa.Table.from_pylist(rows, schema=schema)
    ds.write_dataset(table, path, format="parquet", partitioning=["dt", "platform"],
                     partitioning_flavor="hive", basename_template="part-{i}.parquet")
    (HERE / "hive" / "signalql.toml").write_text(
        'now = "2026-06-06T00:00:00Z"\n\n[tables.events.partitions]\ndt = "date"\n'
        '[tables.events.time]\npartition = "dt"\n')


def jsontext():
    import json
    rows = [
        ("buy", "u1", 0, {"amount": 10.64, "plan": "pro", "code": 5}),
        ("buy", "u2", 1, {"amount": 2.33, "plan": "free", "code": "x5"}),
        ("buy", "u1", 2, {"amount": 9.5, "plan": "team", "code": 40}),
        ("view", "u3", 3, {"plan": "pro"}),
        ("buy", "u3", 4, {"amount": 100, "plan": "free", "code": 7}),
    ]
    table = pa.table({
        "event_name": [r[0] for r in rows],
        "user_id": [r[1] for r in rows],
        "timestamp": pa.array([BASE + dt.timedelta(hours=r[2]) for r in rows],
                              pa.timestamp("us", tz="UTC")),
        "properties": [json.dumps(r[3]) for r in rows],
    })
    write(HERE / "jsontext" / "events" / "part-0.parquet", table)
    (HERE / "jsontext" / "signalql.toml").write_text('now = "2026-06-02T00:00:00Z"\n')


def drift():
    ts_ms = pa.timestamp("ms", tz="UTC")
    ts_us = pa.timestamp("us")
    old = pa.table({
        "event_name": pa.array(["a", "b", "a"], pa.string()),
        "user_id": ["u1", "u2", "u1"],
        "timestamp": pa.array([BASE, BASE + dt.timedelta(hours=1), BASE + dt.timedelta(hours=2)], ts_ms),
        "properties": pa.array([{"amount": 1}, {"amount": 2}, {"amount": 3}],
                               pa.struct([("amount", pa.int64())])),
    })
    new = pa.table({
        "event_name": pa.array(["a", "c"], pa.large_string()),
        "user_id": ["u3", "u1"],
        "timestamp": pa.array([(BASE + dt.timedelta(hours=3)).replace(tzinfo=None),
                               (BASE + dt.timedelta(hours=4)).replace(tzinfo=None)], ts_us),
        "properties": pa.array([{"amount": 2.5, "plan": "pro"}, {"amount": 4.25, "plan": None}],
                               pa.struct([("amount", pa.float64()), ("plan", pa.string())])),
        "session_id": ["s1", "s2"],
    })
    write(HERE / "drift" / "events" / "part-0.parquet", old)
    write(HERE / "drift" / "events" / "part-1.parquet", new)
    (HERE / "drift" / "signalql.toml").write_text('now = "2026-06-02T00:00:00Z"\n')


segment()
texttime()
objects()
hive()
jsontext()
drift()
delta()
