"""Run the issue-7 workloads through signalql, DuckDB, chDB, Polars and plain DataFusion SQL on generated Parquet, check that they agree, and print medians and ratios.

Run it through `benches/compare`, which installs the pinned duckdb, datafusion, chdb and polars
Python packages into benches/.venv first:

    benches/compare --rows 2000000 --data benches/out/rows2m
    benches/compare                                   # 10M events, 100k objects, temporary dir
    benches/compare --only W6 --only W7 --runs 9 --json benches/out/funnels.json
    benches/compare --shape flat --users 200000 --data benches/out/flat10m
    benches/compare --layout pyarrow-one-file --data benches/out/rows10m   # also small-files

Workloads: names and SignalQL texts from benches/workloads.toml (which the criterion bench reads
too), the peers' SQL and Polars queries built below (the DataFusion funnel SQL is in
workloads.toml as well). W8 (CONTEXT FOR) has DuckDB and DataFusion scan floors only.

Data: `signalql gen events --rows N --seed S [--shape flat] [--users U] --out ROOT` and `signalql
gen objects --objects M --seed S --out OBJROOT` (OBJROOT is ROOT unless --objects-data says
otherwise), each skipped when the folder already holds that dataset (for events: the rows, seed,
shape and users recorded in ROOT/signalql.toml). Only what the selected workloads read is
generated.

What is timed, per workload: one warm-up round, then --runs rounds. A round runs each engine once,
in turn (signalql, every DuckDB, chDB and Polars formulation, DataFusion SQL), so machine noise
spreads evenly.

* signalql: one `signalql bench --warmup 1 --runs 1 --no-plan-cache --data ROOT --now T QUERY`
  process per round.
  The in-process time is its `times_s[0]`: one whole answer (parse, open the tables, plan,
  execute, build the envelope or bundle) after one warm-up answer in the same process. The
  process's wall time (start, the warm-up answer, the timed answer, JSON output) and its peak RSS
  (`ru_maxrss` from wait4, through a small launcher process: see SPAWN) are recorded too.
* DuckDB: `con.execute(sql).fetchall()` in this Python process on one connection, with views over
  `read_parquet(...)`.
* chDB: `session.query(sql, "ArrowTable")` on one `chdb.session.Session()` in this Python process,
  the SQL reading `file('ROOT/events/*.parquet', Parquet)` (the files are read by every query).
* Polars: `lazy_frame.collect()` in this Python process, the LazyFrame built once per workload
  over `pl.scan_parquet(files)` (the files are read by every collect).
* DataFusion SQL: `ctx.sql(sql).collect()` (datafusion-python) in this Python process on one
  SessionContext with Parquet listing tables registered.
Only signalql's memory is measured: the peers share this process.

The warm-up round's results are compared first, for every selected workload, before anything is
timed: the same column names, the same row count and equal rows after normalising (timestamps to
epoch seconds, numbers to a relative tolerance of 1e-9, structs flattened); every formulation of
every peer is compared. Any disagreement, or an engine or formulation that fails, exits 1 without
timing. W8 (CONTEXT FOR) has no peer answer: its check is that the bundle is non-empty and its
items' token estimates sum to at most the budget, and that the two scans agree.
"""

import argparse
import datetime as dt
import glob
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib

DEFAULT_BIN = os.path.join(
    os.environ.get("CARGO_TARGET_DIR", "/root/.cache/signalql/target"), "release", "signalql"
)

# The generated data ends at T = 2026-06-13T00:00:00Z (signalql.toml `now`); windows are [T-n, T).
NOW = "2026-06-13T00:00:00Z"
T = "2026-06-13 00:00:00"
DAY30 = "2026-05-14 00:00:00"
DAY28 = "2026-05-16 00:00:00"
DAY14 = "2026-05-30 00:00:00"
DAY7 = "2026-06-06 00:00:00"
LAST_DAY = "2026-06-12 00:00:00"


def fill(text, values):
    """`text` with each `{key}` replaced by `values[key]`."""
    for k, v in values.items():
        text = text.replace("{" + k + "}", str(v))
    return text


# The workload texts, CONTEXT FOR's task and budget and the DataFusion funnel SQL, shared with the
# criterion bench (benches/signalql.rs): benches/workloads.toml.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "workloads.toml"), "rb") as _f:
    WORKLOADS = tomllib.load(_f)
CONTEXT_TASK = WORKLOADS["context"]["task"]
CONTEXT_BUDGET = WORKLOADS["context"]["budget"]
# Per workload number ("W1", ..., "X1"): its name and SignalQL text.
WORKLOAD = {
    w["name"].partition("_")[0]: {"name": w["name"], "signalql": fill(w["signalql"], WORKLOADS["context"])}
    for w in WORKLOADS["workload"]
}


def window(dialect, start):
    """`"timestamp"` in [start, T)."""
    if dialect == "duckdb":
        return f"\"timestamp\" >= TIMESTAMPTZ '{start}+00' AND \"timestamp\" < TIMESTAMPTZ '{T}+00'"
    if dialect == "chdb":
        return f"\"timestamp\" >= toDateTime64('{start}', 6, 'UTC') AND \"timestamp\" < toDateTime64('{T}', 6, 'UTC')"
    return f"\"timestamp\" >= TIMESTAMP '{start}+00:00' AND \"timestamp\" < TIMESTAMP '{T}+00:00'"


def prop(dialect, name):
    return f"properties.{name}" if dialect in ("duckdb", "chdb") else f"properties['{name}']"


# --- funnels ----------------------------------------------------------------------------------
#
# FUNNEL "visit" -> "signup" -> "activated" FROM events DURING LAST 28 d WITHIN 7 d [GROUP BY
# properties.plan], docs/funnels.md: per user, the events with a user_id in the window, ordered by
# (timestamp, file path, row in file). A chain from a visit is greedy: the first signup after it,
# then the first activated after that signup, each at most 7 d after the visit (the greedy chain
# reaches the deepest step and each step as early as any chain from that visit can). A user's
# reported chain for step k is the one whose step-k event comes first, the latest visit on ties;
# the group is the plan of the visit of the reported chain of the user's deepest step. Every
# formulation below ends in u(user_id, lv, g, s2, s3): per user the deepest level, the group and
# the seconds of the reported chains for steps 2 and 3; funnel_tail turns that into the rows.
# The DataFusion formulation and funnel_tail's text are workloads.toml's [funnel].

FUNNEL_WITHIN = "INTERVAL '7 days'"


def funnel_grouping(grouped):
    """The values of [funnel]'s `{group}`, `{select_group}` and `{order_group}` (`group` in
    DataFusion's spelling; the DuckDB formulations spell their own)."""
    return WORKLOADS["funnel"]["grouped" if grouped else "ungrouped"]


def funnel_tail(grouped):
    return ",\n" + fill(WORKLOADS["funnel"]["rows"], funnel_grouping(grouped))


def funnel_datafusion_sql(grouped):
    """The window-function formulation in DataFusion SQL, as the criterion bench runs it."""
    return "\n" + fill(WORKLOADS["funnel"]["per_user"], funnel_grouping(grouped)) + funnel_tail(grouped)


def funnel_duckdb_window_sql(grouped):
    """DuckDB window functions, the DataFusion formulation (workloads.toml's [funnel]) in DuckDB's
    dialect: number each user's events, per visit the position of the next signup and of the next
    activated (min over the following rows) and two self-joins on the position; per user the
    deepest level and, per step, the chain ending earliest (latest start on ties)."""
    us = lambda c: f"epoch_us({c})"
    w = FUNNEL_WITHIN
    grp = prop("duckdb", "plan") if grouped else "CAST(NULL AS VARCHAR)"
    frame = "OVER (PARTITION BY user_id ORDER BY pos ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING)"
    return f"""
WITH ev AS (
  SELECT user_id, "timestamp" AS ts, event_name AS name, {grp} AS g,
         row_number() OVER (PARTITION BY user_id ORDER BY "timestamp", filename, file_row_number) AS pos
  FROM events
  WHERE user_id IS NOT NULL AND event_name IN ('visit', 'signup', 'activated')
    AND {window("duckdb", DAY28)}),
w AS (
  SELECT *, min(CASE WHEN name = 'signup' THEN pos END) {frame} AS n2,
            min(CASE WHEN name = 'activated' THEN pos END) {frame} AS n3
  FROM ev),
c AS (
  SELECT v.user_id, v.pos AS p1, v.ts AS t1, v.g,
         CASE WHEN s.ts <= v.ts + {w} THEN s.pos END AS p2,
         CASE WHEN s.ts <= v.ts + {w} THEN s.ts END AS t2,
         CASE WHEN s.ts <= v.ts + {w} AND a.ts <= v.ts + {w} THEN a.pos END AS p3,
         CASE WHEN s.ts <= v.ts + {w} AND a.ts <= v.ts + {w} THEN a.ts END AS t3
  FROM w v
  LEFT JOIN w s ON s.user_id = v.user_id AND s.pos = v.n2
  LEFT JOIN ev a ON a.user_id = v.user_id AND a.pos = s.n3
  WHERE v.name = 'visit'),
l AS (
  SELECT *, CASE WHEN p3 IS NOT NULL THEN 3 WHEN p2 IS NOT NULL THEN 2 ELSE 1 END AS lvl,
         max(CASE WHEN p3 IS NOT NULL THEN 3 WHEN p2 IS NOT NULL THEN 2 ELSE 1 END) OVER (PARTITION BY user_id) AS lv
  FROM c),
r AS (
  SELECT *,
    row_number() OVER (PARTITION BY user_id ORDER BY CASE WHEN p2 IS NULL THEN 1 ELSE 0 END, p2, p1 DESC) AS r2,
    row_number() OVER (PARTITION BY user_id ORDER BY CASE WHEN p3 IS NULL THEN 1 ELSE 0 END, p3, p1 DESC) AS r3,
    row_number() OVER (PARTITION BY user_id ORDER BY CASE lvl = lv WHEN true THEN 0 ELSE 1 END,
                       CASE lv WHEN 3 THEN p3 WHEN 2 THEN p2 ELSE p1 END, p1 DESC) AS rc
  FROM l),
u AS (
  SELECT user_id,
    max(lv) AS lv,
    max(CASE WHEN rc = 1 THEN g END) AS g,
    max(CASE WHEN r2 = 1 AND p2 IS NOT NULL THEN ({us('t2')} - {us('t1')}) / 1e6 END) AS s2,
    max(CASE WHEN r3 = 1 AND p3 IS NOT NULL THEN ({us('t3')} - {us('t1')}) / 1e6 END) AS s3
  FROM r GROUP BY user_id)""" + funnel_tail(grouped)


def funnel_duckdb_keyed_events(grouped, files):
    """DuckDB: the funnel's events with one sortable HUGEINT key per event that orders them as
    the engine does, (timestamp µs, file path rank, row in file), and needs no window; then the
    visits (v), signups (s) and activated events (x) among them."""
    grp = prop("duckdb", "plan") if grouped else "CAST(NULL AS VARCHAR)"
    return f"""
f AS (SELECT file AS filename, row_number() OVER (ORDER BY file) AS fno FROM glob('{files}')),
ev AS (
  SELECT user_id, "timestamp" AS ts, event_name AS name, {grp} AS g,
         epoch_us("timestamp")::HUGEINT * 1099511627776 * 256 + f.fno::HUGEINT * 1099511627776
           + file_row_number AS k
  FROM events JOIN f USING (filename)
  WHERE user_id IS NOT NULL AND event_name IN ('visit', 'signup', 'activated')
    AND {window("duckdb", DAY28)}),
v AS (SELECT user_id, k, ts, g FROM ev WHERE name = 'visit'),
s AS (SELECT user_id, k, ts FROM ev WHERE name = 'signup'),
x AS (SELECT user_id, k, ts FROM ev WHERE name = 'activated')"""


def funnel_per_user(chains):
    """u from per-visit chains (user_id, k1, t1, g, k2, t2, k3, t3; k2/k3 NULL when not reached):
    the reported chain of a step is the min of (end key, -start key), carried in a struct
    (min() over structs compares field by field; the FILTERs keep the chains that reach the step)."""
    sec = lambda a, b: f"(epoch_us({a}) - epoch_us({b})) / 1e6"
    return f""",
u AS (
  SELECT user_id,
    CASE WHEN count(k3) > 0 THEN 3 WHEN count(k2) > 0 THEN 2 ELSE 1 END AS lv,
    CASE WHEN count(k3) > 0 THEN (min({{'e': k3, 's': -k1, 'g': g}}) FILTER (WHERE k3 IS NOT NULL)).g
         WHEN count(k2) > 0 THEN (min({{'e': k2, 's': -k1, 'g': g}}) FILTER (WHERE k2 IS NOT NULL)).g
         ELSE (min({{'e': k1, 'g': g}})).g END AS g,
    (min({{'e': k2, 's': -k1, 'x': {sec('t2', 't1')}}}) FILTER (WHERE k2 IS NOT NULL)).x AS s2,
    (min({{'e': k3, 's': -k1, 'x': {sec('t3', 't1')}}}) FILTER (WHERE k3 IS NOT NULL)).x AS s3
  FROM {chains} GROUP BY user_id)"""


def funnel_duckdb_asof_sql(grouped, files):
    """DuckDB ASOF joins: per visit the next signup (the nearest key above the visit's) and the
    next activated after that signup; per user struct minimums instead of window sorts."""
    w = FUNNEL_WITHIN
    return f"""
WITH {funnel_duckdb_keyed_events(grouped, files).strip()},
c2 AS (
  SELECT v.user_id, v.k AS k1, v.ts AS t1, v.g,
         CASE WHEN s.ts <= v.ts + {w} THEN s.k END AS k2,
         CASE WHEN s.ts <= v.ts + {w} THEN s.ts END AS t2
  FROM v ASOF LEFT JOIN s ON s.user_id = v.user_id AND s.k > v.k),
c AS (
  SELECT c2.user_id, k1, t1, g, k2, t2,
         CASE WHEN x.ts <= t1 + {w} THEN x.k END AS k3,
         CASE WHEN x.ts <= t1 + {w} THEN x.ts END AS t3
  FROM c2 ASOF LEFT JOIN x ON x.user_id = c2.user_id AND x.k > c2.k2)""" + funnel_per_user("c") + funnel_tail(grouped)


def funnel_duckdb_join_sql(grouped, files):
    """DuckDB range joins: each visit joined to its user's signups after it and within 7 d of it
    (an equality hash join plus a filter; users have few signups), the first one by key; then
    that chain joined to the activated events after the signup and within 7 d of the visit, the
    first one by key. Only visits that reach step 2 go through the joins; step 1 (and the group of
    a user who reaches only step 1, the plan of the first visit) comes from the visits alone."""
    w = FUNNEL_WITHIN
    sec = lambda a, b: f"(epoch_us({a}) - epoch_us({b})) / 1e6"
    return f"""
WITH {funnel_duckdb_keyed_events(grouped, files).strip()},
c2 AS (
  SELECT v.user_id, v.k AS k1, v.ts AS t1, v.g, min({{'k': s.k, 't': s.ts}}) AS m2
  FROM v JOIN s ON s.user_id = v.user_id AND s.k > v.k AND s.ts <= v.ts + {w}
  GROUP BY v.user_id, v.k, v.ts, v.g),
c3 AS (
  SELECT c2.user_id, k1, t1, g, m2.k AS k2, m2.t AS t2,
         min({{'k': x.k, 't': x.ts}}) FILTER (WHERE x.k IS NOT NULL) AS m3
  FROM c2 LEFT JOIN x ON x.user_id = c2.user_id AND x.k > m2.k AND x.ts <= t1 + {w}
  GROUP BY c2.user_id, k1, t1, g, m2),
u1 AS (SELECT user_id, min({{'e': k, 'g': g}}).g AS g FROM v GROUP BY user_id),
u23 AS (
  SELECT user_id, count(m3) > 0 AS has3,
    (min({{'e': m3.k, 's': -k1, 'g': g}}) FILTER (WHERE m3 IS NOT NULL)).g AS g3,
    min({{'e': k2, 's': -k1, 'g': g, 'x': {sec('t2', 't1')}}}) AS r2,
    (min({{'e': m3.k, 's': -k1, 'x': {sec('m3.t', 't1')}}}) FILTER (WHERE m3 IS NOT NULL)).x AS s3
  FROM c3 GROUP BY user_id),
u AS (
  SELECT user_id, CASE WHEN has3 THEN 3 WHEN r2 IS NOT NULL THEN 2 ELSE 1 END AS lv,
    CASE WHEN has3 THEN g3 WHEN r2 IS NOT NULL THEN r2.g ELSE u1.g END AS g,
    r2.x AS s2, s3
  FROM u1 LEFT JOIN u23 USING (user_id))""" + funnel_tail(grouped)


def funnel_duckdb_lists_sql(grouped, files):
    """DuckDB list aggregation: per user the names and keys of the events as key-ordered lists;
    per visit (list index i) the next signup j = i + its position in names[i+1:], the next
    activated likewise after j; the chains are unnested once and aggregated as in the ASOF form."""
    w = FUNNEL_WITHIN
    return f"""
WITH {funnel_duckdb_keyed_events(grouped, files).strip()},
l AS (
  SELECT user_id, list(name ORDER BY k) AS n, list(k ORDER BY k) AS ks, list(ts ORDER BY k) AS tss,
         list(g ORDER BY k) AS gs
  FROM ev GROUP BY user_id),
j AS (
  SELECT user_id, n, ks, tss, gs, unnest(list_filter(range(1, len(n) + 1), lambda i: n[i] = 'visit')) AS i
  FROM l),
j2 AS (
  SELECT *, CASE WHEN p2 > 0 THEN i + p2 END AS i2 FROM (
    SELECT *, list_position(n[i + 1:], 'signup') AS p2 FROM j)),
j3 AS (
  SELECT *, CASE WHEN p3 > 0 THEN i2 + p3 END AS i3 FROM (
    SELECT *, CASE WHEN i2 IS NOT NULL THEN list_position(n[i2 + 1:], 'activated') END AS p3 FROM j2)),
c AS (
  SELECT user_id, ks[i] AS k1, tss[i] AS t1, gs[i] AS g,
         CASE WHEN tss[i2] <= tss[i] + {w} THEN ks[i2] END AS k2,
         CASE WHEN tss[i2] <= tss[i] + {w} THEN tss[i2] END AS t2,
         CASE WHEN tss[i2] <= tss[i] + {w} AND tss[i3] <= tss[i] + {w} THEN ks[i3] END AS k3,
         CASE WHEN tss[i2] <= tss[i] + {w} AND tss[i3] <= tss[i] + {w} THEN tss[i3] END AS t3
  FROM j3)""" + funnel_per_user("c") + funnel_tail(grouped)


def duckdb_funnels(grouped, files):
    return {
        "window": funnel_duckdb_window_sql(grouped),
        "asof": funnel_duckdb_asof_sql(grouped, files),
        "lists": funnel_duckdb_lists_sql(grouped, files),
        "join": funnel_duckdb_join_sql(grouped, files),
    }


# --- chDB (in-process ClickHouse) -------------------------------------------------------------
#
# The queries read `file('ROOT/events/*.parquet', Parquet)` (re-read by every query, as
# signalql re-opens its tables; nothing registered). `properties` reads as a named Tuple, so
# `properties.plan` is tuple element access. The funnels order each user's events by
# (timestamp µs, rank of `_file` among the sorted file names, `_row_number`), the engine's
# order; the file names are listed once the data exists (chdb_funnels is called lazily).


def chdb_table(files):
    return f"file('{files}', Parquet)"


def count_distinct_sql(d, x):
    return f"uniqExact({x})" if d == "chdb" else f"count(DISTINCT {x})"


def chdb_daily_active_sql(files):
    """W2 in one aggregation: per platform a map day -> distinct users, then every day of the
    window (ARRAY JOIN over the 30 day numbers; a missing day reads the map's default 0). The
    platforms are those of the window's aggregate, so the series is as dense as the engine's."""
    days = (dt.date.fromisoformat(LAST_DAY[:10]) - dt.date.fromisoformat(DAY30[:10])).days + 1
    return f"""
SELECT toDateTime64(toDateTime('{DAY30}', 'UTC') + toIntervalDay(i), 6, 'UTC') AS "timestamp",
       p AS "properties.platform", m[i] AS "count_distinct(user_id)"
FROM (
  SELECT p, mapFromArrays(groupArray(day), groupArray(n)) AS m
  FROM (
    SELECT toUInt32(dateDiff('day', toDateTime('{DAY30}', 'UTC'), toStartOfDay("timestamp"))) AS day,
           {prop('chdb', 'platform')} AS p, uniqExact(user_id) AS n
    FROM {chdb_table(files)}
    WHERE event_name = 'session_start' AND {window('chdb', DAY30)}
    GROUP BY day, p)
  GROUP BY p)
ARRAY JOIN range({days}) AS i
ORDER BY 1, 2 NULLS LAST"""


CHDB_WITHIN_US = 7 * 86400 * 1_000_000


def chdb_funnel_tail(grouped):
    """u(user_id, lv, g, s2, s3) to the result rows. One pass over the per-group aggregate
    (ARRAY JOIN of the three steps): ClickHouse inlines a CTE at every use, so a UNION ALL of
    three selects would compute the funnel three times."""
    sel, order = ('g AS "properties.plan", ', "g NULLS LAST, ") if grouped else ("", "")
    return f""",
a AS (
  SELECT g, count() AS u1, countIf(lv >= 2) AS u2, countIf(lv >= 3) AS u3,
         quantileExactInclusive(0.5)(s2) AS m2, quantileExactInclusive(0.5)(s3) AS m3
  FROM u GROUP BY g)
SELECT {sel}x.1 AS step, x.2 AS event, x.3 AS users,
       x.3 / nullIf(x.4, 0) AS conversion_rate, x.3 / nullIf(x.5, 0) AS step_conversion_rate,
       x.6 AS median_seconds_to_convert
FROM a
ARRAY JOIN [(1, 'visit', u1, u1, u1, CAST(NULL AS Nullable(Float64))),
            (2, 'signup', u2, u1, u1, m2),
            (3, 'activated', u3, u1, u2, m3)] AS x
ORDER BY {order}step"""


def chdb_funnel_arrays_sql(grouped, files, names, level="arrays"):
    """Per user one sorted array of the funnel's events (key, step code, group); on it, by
    position j: pv[j] the latest visit at or before j and ps[j] the latest signup at or before j
    (`arrayFill` carries the last non-zero position forward). A chain for step 2 ends at the
    signup j with t[j] - t[pv[j]] <= 7 d (the latest visit before j is the best start); one for
    step 3 at the activated j with t[j] - t[pv[ps[j]]] <= 7 d (the latest visit with a signup
    between it and j). The reported chain of a step is the first such j (`arrayFirstIndex`), its
    start that latest visit, which is docs/funnels.md's rule (the chain ending first, the
    latest start on ties).

    level="windowFunnel": the user's level is instead ClickHouse's `windowFunnel` (it returns only
    a level; the seconds and the group still come from the arrays), run by `arrayReduce` over the
    sorted array with a timestamp that carries the position: (µs since the window start) × 2^21 +
    j, window 7 d × 2^21 + 2^21 - 1. Positions only grow along a chain, so a chain's last event is
    within 7 d of its first exactly when its encoded timestamp is within the encoded window (for
    users with fewer than 2^21 funnel events; the check would show it otherwise). On the raw µs
    timestamps windowFunnel orders events of one instant by condition (visit, signup, activated),
    not by position in the files, and counts chains the engine does not (benches/README.md)."""
    grp = prop("chdb", "plan") if grouped else "CAST(NULL AS Nullable(String))"
    wf = level == "windowFunnel"
    start_us = int(_utc(DAY28).timestamp()) * 1_000_000
    wf_col = (f""",
         arrayReduce('windowFunnel({CHDB_WITHIN_US << 21 | ((1 << 21) - 1)})',
                     arrayMap((x, j) -> toUInt64(bitShiftLeft(x - {start_us}, 21) + j), t, i),
                     arrayMap(x -> x = 1, c), arrayMap(x -> x = 2, c), arrayMap(x -> x = 3, c)) AS wf"""
              if wf else "")
    lv = "wf" if wf else "multiIf(j3 > 0, 3, j2 > 0, 2, 1)"
    reached = (lambda k: f"wf >= {k}") if wf else (lambda k: f"j{k} > 0")
    return f"""
WITH ev AS (
  SELECT user_id, toUnixTimestamp64Micro("timestamp") AS us, indexOf({names}, _file) AS fno,
         _row_number AS frow, multiIf(event_name = 'visit', 1, event_name = 'signup', 2, 3) AS c,
         {grp} AS g
  FROM {chdb_table(files)}
  WHERE user_id IS NOT NULL AND event_name IN ('visit', 'signup', 'activated')
    AND {window('chdb', DAY28)}),
l AS (
  SELECT user_id, arraySort(groupArray((us, fno, frow, c, g))) AS e
  FROM ev GROUP BY user_id),
p AS (
  SELECT *, arrayMap(x -> x.1, e) AS t, arrayMap(x -> x.4, e) AS c, arrayMap(x -> x.5, e) AS gs,
         arrayEnumerate(e) AS i{wf_col}
  FROM l),
q AS (
  SELECT *, arrayFill(x -> x > 0, arrayMap((x, j) -> if(x = 1, j, 0), c, i)) AS pv,
            arrayFill(x -> x > 0, arrayMap((x, j) -> if(x = 2, j, 0), c, i)) AS ps
  FROM p WHERE has(c, 1){" AND wf >= 1" if wf else ""}),
r AS (
  SELECT *, arrayFirstIndex(x -> x = 1, c) AS j1,
         arrayFirstIndex((x, j) -> x = 2 AND pv[j] > 0 AND t[j] - t[pv[j]] <= {CHDB_WITHIN_US}, c, i) AS j2,
         arrayFirstIndex((x, j) -> x = 3 AND ps[j] > 0 AND pv[ps[j]] > 0
                                   AND t[j] - t[pv[ps[j]]] <= {CHDB_WITHIN_US}, c, i) AS j3
  FROM q),
u AS (
  SELECT user_id, {lv} AS lv,
         multiIf({reached(3)}, gs[pv[ps[j3]]], {reached(2)}, gs[pv[j2]], gs[j1]) AS g,
         if({reached(2)} AND j2 > 0, (t[j2] - t[pv[j2]]) / 1e6, NULL) AS s2,
         if({reached(3)} AND j3 > 0, (t[j3] - t[pv[ps[j3]]]) / 1e6, NULL) AS s3
  FROM r)""" + chdb_funnel_tail(grouped)


def event_files(files):
    """The events' Parquet files in path order (the engine's file order for timestamp ties)."""
    return sorted(glob.glob(files))


def chdb_funnels(grouped, files):
    """W6/W7's chDB formulations; called once the data exists (they name its files)."""
    names = "[" + ", ".join("'" + os.path.basename(f).replace("'", "\\'") + "'" for f in event_files(files)) + "]"
    return {
        "arrays": chdb_funnel_arrays_sql(grouped, files, names),
        "windowFunnel": chdb_funnel_arrays_sql(grouped, files, names, level="windowFunnel"),
    }


# --- Polars -----------------------------------------------------------------------------------
#
# Lazy queries over `pl.scan_parquet(files)` (the sorted file list: a row index over it then
# orders rows by (file path, row in file), the engine's tie order); `collect()` is timed, so the
# files are read by every query. Each builder takes the polars module and the file list and
# returns a LazyFrame; the column names are signalql's.


def _utc(s):
    return dt.datetime.fromisoformat(s).replace(tzinfo=dt.timezone.utc)


def pl_window(pl, start):
    return pl.col("timestamp").is_between(_utc(start), _utc(T), closed="left")


def pl_prop(pl, name):
    return pl.col("properties").struct.field(name)


def pl_count_distinct(pl, x):
    return pl.col(x).drop_nulls().n_unique()  # count(DISTINCT x): NULL is not a value


def polars_daily_active(pl, files):
    a = (pl.scan_parquet(files)
         .filter((pl.col("event_name") == "session_start") & pl_window(pl, DAY30))
         .group_by(pl.col("timestamp").dt.truncate("1d").alias("d"), pl_prop(pl, "platform").alias("p"))
         .agg(pl_count_distinct(pl, "user_id").alias("n")))
    days = pl.LazyFrame({"d": pl.datetime_range(_utc(DAY30), _utc(LAST_DAY), "1d", time_unit="us",
                                                time_zone="UTC", eager=True)})
    return (days.join(a.select("p").unique(), how="cross")
            .join(a, on=["d", "p"], how="left", nulls_equal=True)
            .select(pl.col("d").alias("timestamp"), pl.col("p").alias("properties.platform"),
                    pl.col("n").fill_null(0).alias("count_distinct(user_id)"))
            .sort(["timestamp", "properties.platform"], nulls_last=True))


def polars_stats(pl, x):
    return pl.struct(n=x.count(), sum=x.sum(), sum_sq=(x * x).sum(), mean=x.mean(), variance=x.var(ddof=1),
                     stddev=x.std(ddof=1), min=x.min(), max=x.max())


PL_WITHIN_US = 7 * 86400 * 1_000_000


def polars_funnel_events(pl, files, grouped):
    """The funnel's events: user, µs timestamp, step code (1 visit, 2 signup, 3 activated),
    group value and the row's position over the sorted files (`frow`)."""
    return (pl.scan_parquet(files, row_index_name="frow")
            .filter(pl.col("user_id").is_not_null()
                    & pl.col("event_name").is_in(["visit", "signup", "activated"])
                    & pl_window(pl, DAY28))
            .select("user_id", pl.col("timestamp").dt.epoch("us").alias("t"), "frow",
                    pl.col("event_name").replace_strict({"visit": 1, "signup": 2, "activated": 3},
                                                        return_dtype=pl.Int8).alias("c"),
                    (pl_prop(pl, "plan") if grouped else pl.lit(None, dtype=pl.String)).alias("g")))


def polars_funnel_tail(pl, u, grouped):
    """u(user_id, lv, g, s2, s3) to the result rows (rates NULL where the denominator is 0)."""
    a = u.group_by("g").agg(pl.len().cast(pl.Int64).alias("u1"),
                            (pl.col("lv") >= 2).sum().cast(pl.Int64).alias("u2"),
                            (pl.col("lv") >= 3).sum().cast(pl.Int64).alias("u3"),
                            pl.col("s2").median().alias("m2"), pl.col("s3").median().alias("m3"))

    def rate(n, d):
        return pl.when(pl.col(d) > 0).then(pl.col(n) / pl.col(d)).otherwise(None)

    def step(k, name, users, prev, m):
        return a.select("g", pl.lit(k, dtype=pl.Int64).alias("step"), pl.lit(name).alias("event"),
                        pl.col(users).alias("users"), rate(users, "u1").alias("conversion_rate"),
                        rate(users, prev).alias("step_conversion_rate"),
                        (pl.col(m) if m else pl.lit(None, dtype=pl.Float64)).alias("median_seconds_to_convert"))

    rows = pl.concat([step(1, "visit", "u1", "u1", None), step(2, "signup", "u2", "u1", "m2"),
                      step(3, "activated", "u3", "u2", "m3")])
    if grouped:
        return rows.sort(["g", "step"], nulls_last=True).rename({"g": "properties.plan"})
    return rows.sort("step").drop("g")


def polars_funnel_window(pl, files, grouped):
    """Window expressions over each user's events in order (sorted by user, timestamp, frow; i the
    position after the sort): pv the latest visit at or before the row (`forward_fill` over the
    user), psv the pv of the latest signup at or before the row. A signup ends a step-2 chain when
    t - t[pv] <= 7 d, an activated a step-3 chain when t - t[psv] <= 7 d (the latest visit with a
    signup between it and the row); per user the first of each is the reported chain, its start
    that visit (as chDB's `arrays`)."""
    ev = (polars_funnel_events(pl, files, grouped)
          .sort(["user_id", "t", "frow"])
          .with_row_index("i")
          .with_columns(pl.when(pl.col("c") == 1).then(pl.col("i")).forward_fill().over("user_id").alias("pv"))
          .with_columns(pl.when(pl.col("c") == 2).then(pl.col("pv")).forward_fill().over("user_id").alias("psv"))
          .with_columns(pl.col("t").gather(pl.col("pv")).alias("t_pv"), pl.col("g").gather(pl.col("pv")).alias("g_pv"),
                        pl.col("t").gather(pl.col("psv")).alias("t_psv"), pl.col("g").gather(pl.col("psv")).alias("g_psv"))
          .with_columns(((pl.col("c") == 2) & (pl.col("t") - pl.col("t_pv") <= PL_WITHIN_US)).fill_null(False).alias("ok2"),
                        ((pl.col("c") == 3) & (pl.col("t") - pl.col("t_psv") <= PL_WITHIN_US)).fill_null(False).alias("ok3")))
    per = (ev.group_by("user_id")
           .agg((pl.col("c") == 1).any().alias("has1"),
                pl.col("g").filter(pl.col("c") == 1).first().alias("g1"),
                pl.col("ok2").any().alias("has2"), pl.col("ok3").any().alias("has3"),
                pl.col("g_pv").filter(pl.col("ok2")).first().alias("g2"),
                pl.col("g_psv").filter(pl.col("ok3")).first().alias("g3"),
                ((pl.col("t") - pl.col("t_pv")) / 1e6).filter(pl.col("ok2")).first().alias("s2"),
                ((pl.col("t") - pl.col("t_psv")) / 1e6).filter(pl.col("ok3")).first().alias("s3"))
           .filter(pl.col("has1")))
    u = per.select("user_id",
                   pl.when(pl.col("has3")).then(3).when(pl.col("has2")).then(2).otherwise(1).alias("lv"),
                   pl.when(pl.col("has3")).then(pl.col("g3")).when(pl.col("has2")).then(pl.col("g2"))
                   .otherwise(pl.col("g1")).alias("g"),
                   "s2", "s3")
    return polars_funnel_tail(pl, u, grouped)


def polars_funnel_asof(pl, files, grouped):
    """As-of joins: the events numbered k in the engine's order (sorted by timestamp, frow); per
    visit the next signup of the user (`join_asof` forward, by user_id), kept when within 7 d;
    from that signup the next activated, kept when within 7 d of the visit (the greedy chain).
    Per user and step the reported chain is the one with the least end key, the latest visit on
    ties (one Int64 key: end key × 2^32 + (2^32 - 1 - start key)); step 1 and the group of a
    user who reaches only step 1 come from the first visit."""
    big = 1 << 32
    ev = (polars_funnel_events(pl, files, grouped).sort(["t", "frow"]).with_row_index("k")
          .with_columns(pl.col("k").cast(pl.Int64)))
    v = ev.filter(pl.col("c") == 1).select("user_id", "k", "t", "g")
    s = ev.filter(pl.col("c") == 2).select("user_id", pl.col("k").alias("k2"), pl.col("t").alias("t2"))
    x = ev.filter(pl.col("c") == 3).select("user_id", pl.col("k").alias("k3"), pl.col("t").alias("t3"))
    c2 = (v.join_asof(s, left_on="k", right_on="k2", by="user_id", strategy="forward", allow_exact_matches=False,
                    check_sortedness=False)
          .filter(pl.col("t2") - pl.col("t") <= PL_WITHIN_US))
    c3 = (c2.sort("k2")
          .join_asof(x, left_on="k2", right_on="k3", by="user_id", strategy="forward", allow_exact_matches=False,
                    check_sortedness=False)
          .with_columns(pl.when(pl.col("t3") - pl.col("t") <= PL_WITHIN_US).then(pl.col("k3")).alias("k3"))
          .with_columns((pl.col("k2") * big + (big - 1 - pl.col("k"))).alias("e2"),
                        (pl.col("k3") * big + (big - 1 - pl.col("k"))).alias("e3")))
    u1 = v.group_by("user_id").agg(pl.col("g").sort_by("k").first().alias("g1"))
    u23 = c3.group_by("user_id").agg(
        pl.col("g").filter(pl.col("e2") == pl.col("e2").min()).first().alias("g2"),
        ((pl.col("t2") - pl.col("t")) / 1e6).filter(pl.col("e2") == pl.col("e2").min()).first().alias("s2"),
        pl.col("e3").is_not_null().any().alias("has3"),
        pl.col("g").filter(pl.col("e3") == pl.col("e3").min()).first().alias("g3"),
        ((pl.col("t3") - pl.col("t")) / 1e6).filter(pl.col("e3") == pl.col("e3").min()).first().alias("s3"))
    u = (u1.join(u23, on="user_id", how="left")
         .select("user_id",
                 pl.when(pl.col("has3")).then(3).when(pl.col("s2").is_not_null()).then(2).otherwise(1).alias("lv"),
                 pl.when(pl.col("has3")).then(pl.col("g3")).when(pl.col("s2").is_not_null()).then(pl.col("g2"))
                 .otherwise(pl.col("g1")).alias("g"),
                 "s2", "s3"))
    return polars_funnel_tail(pl, u, grouped)


def polars_funnels(grouped):
    return {
        "window": lambda pl, files: polars_funnel_window(pl, files, grouped),
        "asof": lambda pl, files: polars_funnel_asof(pl, files, grouped),
    }


# --- workloads --------------------------------------------------------------------------------


def daily_active_sql(d):
    p = prop(d, "platform")
    if d == "duckdb":
        series = f"SELECT d FROM generate_series(TIMESTAMPTZ '{DAY30}+00', TIMESTAMPTZ '{LAST_DAY}+00', INTERVAL 1 DAY) t(d)"
    else:
        series = f"SELECT unnest(generate_series(TIMESTAMP '{DAY30}+00:00', TIMESTAMP '{LAST_DAY}+00:00', INTERVAL '1 day')) AS d"
    # Dense: every day of the window x every platform seen in the window (after WHERE).
    return f"""
WITH a AS (
  SELECT date_trunc('day', "timestamp") AS d, {p} AS p, count(DISTINCT user_id) AS n
  FROM events WHERE event_name = 'session_start' AND {window(d, DAY30)}
  GROUP BY 1, 2),
g AS (SELECT DISTINCT {p} AS p FROM events WHERE event_name = 'session_start' AND {window(d, DAY30)}),
b AS ({series})
SELECT b.d AS "timestamp", g.p AS "properties.platform", coalesce(a.n, 0) AS "count_distinct(user_id)"
FROM b CROSS JOIN g LEFT JOIN a ON a.d = b.d AND a.p IS NOT DISTINCT FROM g.p
ORDER BY 1, 2 NULLS LAST"""


def stats_sql(d, x):
    """stats(x) spelled out with built-in aggregates (no peer has the UDF)."""
    fields = [("n", f"count({x})"), ("sum", f"sum({x})"), ("sum_sq", f"sum({x} * {x})"),
              ("mean", f"avg({x})"), ("variance", f"var_samp({x})"), ("stddev", f"stddev_samp({x})"),
              ("min", f"min({x})"), ("max", f"max({x})")]
    if d == "duckdb":
        return "struct_pack(" + ", ".join(f"{k} := {v}" for k, v in fields) + ")"
    if d == "chdb":
        fields = [(k, v.replace("var_samp", "varSamp").replace("stddev_samp", "stddevSamp")) for k, v in fields]
        types = ", ".join(f"{k} {'UInt64' if k == 'n' else 'Nullable(Float64)'}" for k, _ in fields)
        return "CAST(tuple(" + ", ".join(v for _, v in fields) + f"), 'Tuple({types})')"
    return "named_struct(" + ", ".join(f"'{k}', {v}" for k, v in fields) + ")"


def percentile_sql(d, x, p):
    # signalql's percentile is exact with linear interpolation (PostgreSQL percentile_cont).
    # DuckDB's quantile_cont is the same; DataFusion's percentile_cont rounds the interpolation
    # fraction to 1e-6 (see the tolerance of W5). ClickHouse's quantileExactInclusive is the same
    # interpolation (R7), exact.
    if d == "chdb":
        return f"quantileExactInclusive({p})({x})"
    return f"quantile_cont({x}, {p})" if d == "duckdb" else f"percentile_cont({x}, {p})"


def make_workloads(files):
    """The workloads in run order: name and SignalQL text from workloads.toml, the peers' SQL and
    Polars queries. `duckdb`, `chdb` and `polars` hold one formulation or a dict of them by name
    (`chdb` may be a callable giving either, for SQL that lists the files; a Polars formulation is
    a callable (polars, sorted file list) -> LazyFrame); W8 has neither chDB nor Polars."""
    wl = []

    def ev(d):
        return chdb_table(files) if d == "chdb" else "events"

    def entry(num, duckdb, datafusion, chdb=None, polars=None, **extra):
        wl.append({**WORKLOAD[num], "duckdb": duckdb, "chdb": chdb, "polars": polars, "datafusion": datafusion,
                   **extra})

    def add(num, sql, polars, **extra):
        entry(num, sql("duckdb"), sql("datafusion"), chdb=sql("chdb"), polars=polars, **extra)

    add("W1",
        lambda d: f"SELECT count(*) AS \"count\" FROM {ev(d)} WHERE event_name = 'purchase' AND {window(d, DAY30)}",
        lambda pl, fs: (pl.scan_parquet(fs).filter((pl.col("event_name") == "purchase") & pl_window(pl, DAY30))
                        .select(pl.len().alias("count"))))
    add("W2", lambda d: chdb_daily_active_sql(files) if d == "chdb" else daily_active_sql(d), polars_daily_active)
    add("W3",
        lambda d: f"""
SELECT {prop(d, 'path')} AS "properties.path", count(*) AS "count" FROM {ev(d)}
WHERE event_name = 'page_view' AND {window(d, DAY7)}
GROUP BY 1 HAVING count(*) > 1000 ORDER BY 2 DESC, 1 NULLS LAST LIMIT 10""",
        lambda pl, fs: (pl.scan_parquet(fs).filter((pl.col("event_name") == "page_view") & pl_window(pl, DAY7))
                        .group_by(pl_prop(pl, "path").alias("properties.path")).agg(pl.len().alias("count"))
                        .filter(pl.col("count") > 1000)
                        .sort(["count", "properties.path"], descending=[True, False], nulls_last=True).head(10)))
    add("W4",
        lambda d: f"""
SELECT {prop(d, 'experiment_variant')} AS "properties.experiment_variant",
  {count_distinct_sql(d, 'user_id')} AS "count_distinct(user_id)",
  {stats_sql(d, prop(d, 'amount'))} AS "stats(properties.amount)"
FROM {ev(d)}
WHERE event_name = 'purchase' AND {prop(d, 'amount')} IS NOT NULL AND {window(d, DAY14)}
GROUP BY 1 ORDER BY 1 NULLS LAST""",
        lambda pl, fs: (pl.scan_parquet(fs)
                        .filter((pl.col("event_name") == "purchase") & pl_prop(pl, "amount").is_not_null()
                                & pl_window(pl, DAY14))
                        .group_by(pl_prop(pl, "experiment_variant").alias("properties.experiment_variant"))
                        .agg(pl_count_distinct(pl, "user_id").alias("count_distinct(user_id)"),
                             polars_stats(pl, pl_prop(pl, "amount")).alias("stats(properties.amount)"))
                        .sort("properties.experiment_variant", nulls_last=True)))
    add("W5",
        lambda d: f"""
SELECT {prop(d, 'platform')} AS "properties.platform",
  {percentile_sql(d, prop(d, 'amount'), 0.5)} AS "percentile(properties.amount, 0.5)",
  {percentile_sql(d, prop(d, 'amount'), 0.95)} AS "percentile(properties.amount, 0.95)"
FROM {ev(d)} WHERE event_name = 'purchase' AND {window(d, DAY30)}
GROUP BY 1 ORDER BY 1 NULLS LAST""",
        lambda pl, fs: (pl.scan_parquet(fs).filter((pl.col("event_name") == "purchase") & pl_window(pl, DAY30))
                        .group_by(pl_prop(pl, "platform").alias("properties.platform"))
                        .agg(pl_prop(pl, "amount").quantile(0.5, interpolation="linear")
                             .alias("percentile(properties.amount, 0.5)"),
                             pl_prop(pl, "amount").quantile(0.95, interpolation="linear")
                             .alias("percentile(properties.amount, 0.95)"))
                        .sort("properties.platform", nulls_last=True)),
        # DataFusion rounds the interpolation fraction to 1e-6: an error of at most 5e-7 x the gap
        # between the two neighbouring values; generated amounts lie in [5, 500] USD.
        abs_tol={"datafusion": 1e-3})
    entry("W6", duckdb_funnels(False, files), funnel_datafusion_sql(False),
          chdb=lambda: chdb_funnels(False, files), polars=polars_funnels(False))
    entry("W7", duckdb_funnels(True, files), funnel_datafusion_sql(True),
          chdb=lambda: chdb_funnels(True, files), polars=polars_funnels(True))
    # The peers' figure is the scan floor: reading the representation text column once.
    scan = "SELECT sum(length(content)) AS chars FROM representations"
    entry("W8", scan, scan, context=True, vocabulary="topical")
    entry("W8s", scan, scan, context=True, vocabulary="zipf")
    add("X1",
        lambda d: f"""
SELECT event_name, count(*) AS "count", {count_distinct_sql(d, 'user_id')} AS "count_distinct(user_id)"
FROM {ev(d)} WHERE {window(d, DAY30)} GROUP BY 1 ORDER BY 1 NULLS LAST""",
        lambda pl, fs: (pl.scan_parquet(fs).filter(pl_window(pl, DAY30))
                        .group_by("event_name")
                        .agg(pl.len().alias("count"), pl_count_distinct(pl, "user_id").alias("count_distinct(user_id)"))
                        .sort("event_name", nulls_last=True)))
    return wl


def print_term_shares(con, workloads):
    """Each CONTEXT FOR task term's share of the objects whose `text` holds it (DuckDB, runs of
    letters lower-cased), so a run shows how selective its task is."""
    for w in workloads:
        if not w.get("context"):
            continue
        task = w["signalql"].split('"')[1]
        rows = con.execute(
            "WITH t AS (SELECT object_id, unnest(string_split_regex(lower(content), '[^[:alpha:]]+')) AS w "
            "FROM representations WHERE name = 'text'), "
            "n AS (SELECT count(DISTINCT object_id) AS n FROM representations) "
            "SELECT w, count(DISTINCT object_id) / any_value(n.n) FROM t, n WHERE list_contains(?, w) GROUP BY w",
            [task.lower().split()]).fetchall()
        shares = ", ".join(f"{term} {share:.1%}" for term, share in sorted(rows))
        print(f"{w['name']}: task terms in {shares or 'no object'}", file=sys.stderr)


def selected(workloads, only):
    if not only:
        return workloads
    out = []
    for w in workloads:
        num, _, rest = w["name"].partition("_")
        keys = {w["name"].lower(), num.lower(), rest.lower()}
        if any(o.lower() in keys for o in only):
            out.append(w)
    names = {k for w in workloads for k in (w["name"].lower(), w["name"].split("_")[0].lower(),
                                             w["name"].partition("_")[2].lower())}
    unknown = [o for o in only if o.lower() not in names]
    if unknown:
        raise SystemExit(f"unknown workload {unknown}; known: {', '.join(w['name'] for w in workloads)}")
    return out


# --- data -------------------------------------------------------------------------------------


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000, help="events to generate (default 10M)")
    ap.add_argument("--objects", type=int, default=100_000, help="objects to generate for W8 (default 100k)")
    ap.add_argument("--seed", type=int, default=42, help="generator seed for events and objects (default 42)")
    ap.add_argument("--shape", choices=("sessions", "flat"), default="sessions",
                    help="events generator shape (`signalql gen events --shape`; default sessions)")
    ap.add_argument("--layout", choices=LAYOUTS, default="signalql",
                    help="how the events files are laid out (default signalql: as `signalql gen` writes "
                         "them); pyarrow-one-file: one file as pyarrow writes it by default (row groups of "
                         "1 Mi rows; zstd), rows in time order; small-files: about 300 files of a few MB "
                         "in time order, as streaming writers leave them. Both are written beside the "
                         "generated root, as ROOT-LAYOUT, the other tables linked")
    ap.add_argument("--users", type=int,
                    help="users for the events generator (default: the generator's one per 40 rows for "
                         "sessions, 200000 for flat)")
    ap.add_argument("--runs", type=int, default=5, help="timed rounds per workload, after one warm-up round (default 5)")
    ap.add_argument("--bin", default=DEFAULT_BIN, help=f"signalql binary (default {DEFAULT_BIN})")
    ap.add_argument("--data", help="dataset root to use and keep (default: a temporary directory, removed)")
    ap.add_argument("--objects-data", help="object store root for W8 (default: the --data root)")
    ap.add_argument("--vocabulary", choices=["topical", "zipf"], default="topical",
                    help="`gen objects --vocabulary`: topical runs W8 (its task matches nearly every "
                         "object), zipf runs W8s (a selective task)")
    ap.add_argument("--only", action="append",
                    help="run only this workload: W3, W3_top_paths_having or top_paths_having (repeatable)")
    ap.add_argument("--json", help="also write every measurement to this JSON file")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if args.users is not None and args.users < 1:
        ap.error("--users must be at least 1")
    if args.shape == "flat" and args.users is None:
        args.users = 200_000
    return args


def generated_events(marker):
    """What `signalql gen events` recorded in ROOT/signalql.toml: rows, seed, shape and users,
    from a `[gen]` table if there is one, else from the header comment `# Written by `signalql
    gen` (rows = N, seed = S, days = D[, shape = flat, users = U]).` (shape and users appear only
    when not the defaults: sessions, one user per 40 rows). None for a file not written by it."""
    with open(marker, "rb") as f:
        text = f.read().decode()
    try:
        gen = tomllib.loads(text).get("gen")
    except tomllib.TOMLDecodeError:
        gen = None
    if not isinstance(gen, dict):
        head = text.partition("\n")[0]
        if "signalql gen" not in head:
            return None
        gen = dict(re.findall(r"(\w+) = ([^,()]+)", head))
    try:
        rows = int(gen["rows"])
        return {"rows": rows, "seed": int(gen["seed"]), "shape": str(gen.get("shape", "sessions")).strip('"'),
                "users": int(gen.get("users", rows // 40))}
    except (KeyError, ValueError):
        return None


def generate_events(binary, rows, seed, shape, users, root):
    """`signalql gen events` unless ROOT already holds the same rows, seed, shape and users."""
    marker = os.path.join(root, "signalql.toml")
    want = {"rows": rows, "seed": seed, "shape": shape, "users": rows // 40 if users is None else users}
    if os.path.exists(marker):
        have = generated_events(marker)
        if have == want:
            print(f"reusing events under {root} ({', '.join(f'{k} = {v}' for k, v in have.items())})",
                  file=sys.stderr)
            return
        raise SystemExit(f"{root} holds another dataset ({have or 'not generated by signalql gen'}; wanted {want});"
                         " pick another --data or --rows/--seed/--shape/--users")
    cmd = [binary, "gen", "events", "--rows", str(rows), "--seed", str(seed)]
    if shape != "sessions":
        cmd += ["--shape", shape]
    if users is not None:
        cmd += ["--users", str(users)]
    t0 = time.perf_counter()
    subprocess.run(cmd + ["--out", root], check=True, stdout=subprocess.DEVNULL)
    print(f"generated {rows} events ({shape}{'' if users is None else f', {users} users'}) in "
          f"{time.perf_counter() - t0:.1f} s under {root}", file=sys.stderr)


LAYOUTS = ("signalql", "pyarrow-one-file", "small-files")


def laid_out(root, layout):
    """The dataset at ROOT with its events written as another tool leaves them (`--layout`):
    ROOT-LAYOUT, whose other tables and files are links to ROOT's, reused while ROOT's
    signalql.toml is the one it was made from. The rows are the generated ones, sorted by time."""
    if layout == "signalql":
        return root
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    out = root.rstrip("/") + "-" + layout
    stamp_file = os.path.join(out, ".made-from")
    with open(os.path.join(root, "signalql.toml"), "rb") as f:
        stamp = f.read()
    if os.path.exists(stamp_file):
        with open(stamp_file, "rb") as f:
            if f.read() == stamp:
                print(f"reusing the {layout} layout under {out}", file=sys.stderr)
                return out
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "events"))
    for name in os.listdir(root):
        if name != "events":
            os.symlink(os.path.abspath(os.path.join(root, name)), os.path.join(out, name))
    t0 = time.perf_counter()
    table = pads.dataset(os.path.join(root, "events"), format="parquet").to_table().sort_by("timestamp")
    events = os.path.join(out, "events")
    if layout == "pyarrow-one-file":
        # pyarrow's defaults (row groups of 1 Mi rows), with zstd as the probe's writer used.
        pq.write_table(table, os.path.join(events, "part-0.parquet"), compression="zstd")
    else:
        per_file = max(1, -(-table.num_rows // 300))
        for i, start in enumerate(range(0, table.num_rows, per_file)):
            pq.write_table(table.slice(start, per_file), os.path.join(events, f"part-{i:05d}.parquet"))
    with open(stamp_file, "wb") as f:
        f.write(stamp)
    files = os.listdir(events)
    size = sum(os.path.getsize(os.path.join(events, n)) for n in files)
    print(f"wrote the {layout} layout ({len(files)} files, {size / 1e6:.0f} MB) in "
          f"{time.perf_counter() - t0:.1f} s under {out}", file=sys.stderr)
    return out


def generate_objects(binary, con, n, seed, vocabulary, root):
    """`signalql gen objects` unless ROOT already has an objects table (of N objects: the generator
    records neither seed nor vocabulary, so a store made with others is not detected)."""
    if os.path.isdir(os.path.join(root, "objects")):
        have = con.execute(
            f"SELECT count(*) FROM read_parquet('{os.path.join(root, 'objects', '*.parquet')}')").fetchone()[0]
        if have != n:
            raise SystemExit(f"{root} holds {have} objects, not {n}; pick another --objects-data or --objects")
        print(f"reusing {have} objects under {root}", file=sys.stderr)
        return
    t0 = time.perf_counter()
    subprocess.run([binary, "gen", "objects", "--objects", str(n), "--seed", str(seed),
                    "--vocabulary", vocabulary, "--out", root],
                   check=True, stdout=subprocess.DEVNULL)
    print(f"generated {n} objects in {time.perf_counter() - t0:.1f} s under {root}", file=sys.stderr)


# --- running ----------------------------------------------------------------------------------


# Peak RSS of a process started from this one cannot come from this process's wait4: Linux
# carries the memory high-water mark of the forking process (this Python, with DuckDB and
# DataFusion loaded: hundreds of MiB) across exec into the child's ru_maxrss. So a small Python
# process starts signalql instead: it forks (a copy of itself, a few MiB), the copy execs signalql,
# and it reports that process's wall time and ru_maxrss (KiB on Linux) from wait4 as JSON.
SPAWN = """
import json, os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(sys.argv[1], "w") as f:
    json.dump({"wall_s": wall, "rss_kib": usage.ru_maxrss, "code": os.waitstatus_to_exitcode(status)}, f)
"""


def run_signalql(binary, root, text):
    """One `signalql bench --warmup 1 --runs 1 --no-plan-cache` process (the counted answer
    planned again, as the peers plan theirs): the in-process time of the counted answer, the process's wall time and peak RSS (KiB), and the answer's rows."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r", suffix=".json") as stats:
        spawn = subprocess.run(
            [sys.executable, "-I", "-c", SPAWN, stats.name, os.path.abspath(binary), "bench", "--data", root,
             "--now", NOW, "--warmup", "1", "--runs", "1", "--no-plan-cache", text],
            stdout=out, stderr=err)
        out.seek(0)
        err.seek(0)
        body, errtext = out.read().decode(), err.read().decode()
        st = json.load(stats) if spawn.returncode == 0 else {"code": spawn.returncode}
    if st["code"] != 0:
        raise RuntimeError(f"signalql bench failed ({st['code']}): {body.strip()[:1000]} {errtext.strip()[:1000]}".strip())
    b = json.loads(body)
    return {"in_process_s": b["times_s"][0], "wall_s": st["wall_s"], "rss_kib": st["rss_kib"],
            "rows": b["rows"], "columns": b.get("columns")}


def timed(fn):
    t0 = time.perf_counter()
    r = fn()
    return time.perf_counter() - t0, r


# --- result normalisation -------------------------------------------------------------------


def _scalar(v):
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.timezone.utc)
        return ("t", v.timestamp())
    if isinstance(v, str):
        if len(v) >= 20 and v[4] == "-" and v[10] == "T" and v.endswith("Z"):
            try:
                return ("t", dt.datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp())
            except ValueError:
                pass
        return ("s", v)
    if isinstance(v, bool):
        return ("n", float(v))
    if isinstance(v, (int, float)):
        return ("n", float(v))
    if v is None:
        return ("z", None)
    return ("s", str(v))


def normalise(rows, unordered=False):
    """Rows as flat tuples of tagged scalars (structs flattened in field order)."""
    out = []
    for row in rows:
        flat = []
        for v in (row.values() if isinstance(row, dict) else row):
            if isinstance(v, dict):
                flat.extend(_scalar(x) for x in v.values())
            else:
                flat.append(_scalar(v))
        out.append(tuple(flat))
    if unordered:
        out.sort(key=lambda r: [(tag, "" if x is None else str(x)) for tag, x in r if tag != "n"])
    return out


def checksum(rows):
    return sum(x for row in rows for tag, x in row if tag == "n" and not math.isnan(x))


def same(a, b, abs_tol=1e-9):
    if len(a) != len(b):
        return False, f"row count {len(a)} vs {len(b)}"
    for i, (ra, rb) in enumerate(zip(a, b)):
        if len(ra) != len(rb):
            return False, f"row {i}: {len(ra)} vs {len(rb)} values"
        for (ta, xa), (tb, xb) in zip(ra, rb):
            if ta != tb:
                return False, f"row {i}: {ra} vs {rb}"
            if ta in ("n", "t"):
                if not math.isclose(xa, xb, rel_tol=1e-9, abs_tol=abs_tol):
                    return False, f"row {i}: {xa!r} vs {xb!r} (row {ra} vs {rb})"
            elif xa != xb:
                return False, f"row {i}: {xa!r} vs {xb!r}"
    return True, ""


def check(w, sq, peers):
    """Compare the warm-up answers: signalql against every peer (every DuckDB formulation)."""
    problems = []
    if w.get("context"):
        items = sq["rows"]
        tokens = sum(int(i.get("tokens") or 0) for i in items)
        if not items:
            problems.append("signalql: the bundle has no items")
        if tokens > CONTEXT_BUDGET:
            problems.append(f"signalql: the items' token estimates sum to {tokens} > {CONTEXT_BUDGET}")
        scans = {label: normalise(a["rows"]) for label, a in peers.items()}
        first = next(iter(scans.values()))
        for label, rows in scans.items():
            ok, why = same(first, rows)
            if not ok or not rows or rows[0][0][0] != "n" or rows[0][0][1] <= 0:
                problems.append(f"{label}: scan {rows} vs {first} {why}")
        summary = f"{len(items)} items, {tokens} tokens; scan chars {first[0][0][1] if first and first[0] else None}"
        return problems, summary
    unordered = w.get("unordered", False)
    ns = normalise(sq["rows"], unordered)
    names = [c["name"] for c in sq["columns"] or []]
    sums = [f"signalql {checksum(ns):.9g}"]
    for label, a in peers.items():
        nr = normalise(a["rows"], unordered)
        ok, why = same(ns, nr, w.get("abs_tol", {}).get(label.split(":")[0], 1e-9))
        sums.append(f"{label} {checksum(nr):.9g}")
        if not ok:
            problems.append(f"{label}: {why}")
        if a["names"] != names:
            problems.append(f"{label}: columns {a['names']} vs signalql's {names}")
    return problems, f"{len(ns)} rows; checksums " + ", ".join(sums)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


# --- main -------------------------------------------------------------------------------------


def main():
    args = parse_args()
    import chdb
    import chdb.session
    import datafusion
    import duckdb
    import polars as pl

    if not os.path.exists(args.bin):
        raise SystemExit(f"no signalql binary at {args.bin}; run `cargo build --release` first")
    probe = subprocess.run([args.bin, "bench", "--help"], capture_output=True)
    if probe.returncode != 0:
        raise SystemExit(f"{args.bin} has no `bench` subcommand; rebuild it (`cargo build --release`)")

    load0 = os.getloadavg()
    tmp = None
    root = args.data
    if root is None:
        tmp = tempfile.mkdtemp(prefix="signalql-compare-")
        root = tmp
    objroot = args.objects_data or root
    generated = root
    if args.layout != "signalql":
        root = generated.rstrip("/") + "-" + args.layout
    try:
        files = os.path.join(root, "events", "*.parquet")
        # A CONTEXT FOR workload runs over the corpus of its vocabulary only.
        workloads = [w for w in selected(make_workloads(files), args.only)
                     if w.get("vocabulary", args.vocabulary) == args.vocabulary]
        need_events = any(not w.get("context") for w in workloads)
        need_objects = any(w.get("context") for w in workloads)

        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        ctx = datafusion.SessionContext()
        chs = chdb.session.Session()
        if need_events:
            generate_events(args.bin, args.rows, args.seed, args.shape, args.users, generated)
            root = laid_out(generated, args.layout)
            # filename/file_row_number: the funnels break timestamp ties by position in the files.
            con.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet('{files}', filename = true, file_row_number = true)")
            ctx.register_parquet("events", os.path.join(root, "events") + "/")
        if need_objects:
            os.makedirs(objroot, exist_ok=True)
            generate_objects(args.bin, con, args.objects, args.seed, args.vocabulary, objroot)
            reps = os.path.join(objroot, "representations")
            con.execute(f"CREATE VIEW representations AS SELECT * FROM read_parquet('{os.path.join(reps, '*.parquet')}')")
            print_term_shares(con, workloads)
            ctx.register_parquet("representations", reps + "/")

        def engines(w):
            """(label, callable) in the order of a round."""
            data = objroot if w.get("context") else root
            es = [("signalql", lambda: run_signalql(args.bin, data, w["signalql"]))]
            for peer, run in (("duckdb", run_duckdb), ("chdb", run_chdb), ("polars", run_polars)):
                forms = w.get(peer)
                if forms is None:
                    continue
                if peer == "chdb" and callable(forms):
                    forms = forms()  # SQL that names the files: built now that they exist
                forms = forms if isinstance(forms, dict) else {"": forms}
                for variant, q in forms.items():
                    if peer == "polars":
                        q = q(pl, event_files(files))  # the LazyFrame, built once per engines() call
                    es.append((peer + (f":{variant}" if variant else ""), lambda q=q, run=run: run(q)))
            es.append(("datafusion", lambda: run_datafusion(w["datafusion"])))
            return es

        def run_duckdb(sql):
            cur = con.execute(sql)
            return {"rows": cur.fetchall(), "names": [d[0] for d in cur.description]}

        def run_datafusion(sql):
            df = ctx.sql(sql)
            batches = df.collect()
            return {"batches": batches, "df": df}

        def run_chdb(sql):
            return {"arrow": chs.query(sql, "ArrowTable")}

        def run_polars(lf):
            return {"frame": lf.collect()}

        def peer_answer(r):
            """Rows and column names of a peer's answer (outside the timed call)."""
            if "batches" in r:
                return {"rows": [x for b in r["batches"] for x in b.to_pylist()], "names": r["df"].schema().names}
            if "arrow" in r:
                t = r["arrow"]
                return {"rows": [tuple(row.values()) for row in t.to_pylist()], "names": t.column_names}
            if "frame" in r:
                return {"rows": r["frame"].rows(), "names": r["frame"].columns}
            return r

        # Warm-up round of every workload, and the agreement check, before any timing.
        results = {}
        failures = []
        for w in workloads:
            rec = {"workload": w["name"], "signalql": {"in_process_s": [], "wall_s": [], "rss_kib": []},
                   "peers": {}}
            peer_rows = {}
            errors = []
            for label, fn in engines(w):
                try:
                    t, r = timed(fn)
                except Exception as e:  # a failing engine fails the comparison, reported below
                    errors.append(f"{label}: {type(e).__name__}: {str(e)[:2000]}")
                    continue
                if label == "signalql":
                    sq = r
                    rec["signalql"]["warmup"] = {k: r[k] for k in ("in_process_s", "wall_s", "rss_kib")}
                else:
                    peer_rows[label] = peer_answer(r)
                    rec["peers"][label] = {"warmup_s": t, "times_s": []}
            if errors:
                problems, summary = errors, "engine error"
            else:
                problems, summary = check(w, sq, peer_rows)
                rec["rows_out"] = len(sq["rows"])
            rec["check"] = summary
            rec["agree"] = not problems
            verdict = "agree" if not problems else "FAILED" if errors else "DISAGREE"
            print(f"{w['name']}: {summary}: {verdict}", file=sys.stderr)
            for p in problems:
                print(f"  {p}", file=sys.stderr)
                failures.append(f"{w['name']}: {p}")
            results[w["name"]] = rec
        if failures:
            print("\nthe engines disagree (or one failed); nothing timed:\n  " + "\n  ".join(failures),
                  file=sys.stderr)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"agree": False, "failures": failures, "results": list(results.values())}, f, indent=2)
            return 1

        # Timed rounds: per workload, each round one run of every engine in turn.
        for w in workloads:
            rec = results[w["name"]]
            es = engines(w)
            for _ in range(args.runs):
                for label, fn in es:
                    t, r = timed(fn)
                    if label == "signalql":
                        for k in ("in_process_s", "wall_s", "rss_kib"):
                            rec["signalql"][k].append(r[k])
                    else:
                        rec["peers"][label]["times_s"].append(t)
            s = rec["signalql"]
            s["median_s"] = median(s["in_process_s"])
            s["wall_median_s"] = median(s["wall_s"])
            s["max_rss_kib"] = max(s["rss_kib"] + [s["warmup"]["rss_kib"]])
            for p in rec["peers"].values():
                p["median_s"] = median(p["times_s"])
            # Per peer its fastest formulation (None where the peer has none: chDB and Polars on W8);
            # the fastest peer over every formulation of every peer.
            for peer in ("duckdb", "chdb", "polars", "datafusion"):
                forms = {k: v for k, v in rec["peers"].items() if k.partition(":")[0] == peer}
                best = min(forms, key=lambda k: forms[k]["median_s"]) if forms else None
                if peer != "datafusion":
                    rec[f"{peer}_best"] = best
                rec[f"{peer}_median_s"] = forms[best]["median_s"] if best else None
            fastest = min(rec["peers"], key=lambda k: rec["peers"][k]["median_s"])
            rec["fastest_peer"] = fastest
            rec["fastest_peer_median_s"] = rec["peers"][fastest]["median_s"]
            print(f"{w['name']}: signalql {s['median_s'] * 1e3:.1f} ms, "
                  + ", ".join(f"{k} {v['median_s'] * 1e3:.1f} ms" for k, v in rec["peers"].items()),
                  file=sys.stderr)

        print_table(args, results, objroot)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"rows": args.rows, "shape": args.shape, "layout": args.layout, "users": args.users,
                           "objects": args.objects,
                           "seed": args.seed, "runs": args.runs,
                           "binary": args.bin, "data": root, "objects_data": objroot, "cores": os.cpu_count(),
                           "loadavg_start": load0, "loadavg_end": os.getloadavg(),
                           "duckdb_version": duckdb.__version__, "datafusion_version": datafusion.__version__,
                           "chdb_version": chdb.__version__,
                           "clickhouse_version": str(chs.query("SELECT version()", "CSV")).strip().strip('"'),
                           "polars_version": pl.__version__,
                           "agree": True, "results": list(results.values())}, f, indent=2)
        return 0
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            if root != tmp:
                shutil.rmtree(root, ignore_errors=True)


def print_table(args, results, objroot):
    print()
    shape = args.shape + (f" users={args.users}" if args.users is not None else "") + f" layout={args.layout}"
    print(f"rows={args.rows} shape={shape} objects={args.objects} seed={args.seed} runs={args.runs} (median of "
          f"the rounds after 1 warm-up round); times in ms; cores={os.cpu_count()}; load average "
          f"{os.getloadavg()[1]:.2f} (5 min); all engines agree")
    peers = ("duckdb", "chdb", "polars", "datafusion")
    hdr = ("workload", "signalql", *peers, "fastest peer", *(f"{p}/sq" for p in peers), "fastest/sq",
           "sq process wall", "sq peak RSS MiB", "formulations")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "|".join("---" for _ in hdr) + "|")
    ms = lambda x: "-" if x is None else f"{x * 1e3:.1f}"
    ratio = lambda x, sq: "-" if x is None else f"{x / sq:.2f}"
    for name, r in results.items():
        sq = r["signalql"]["median_s"]
        times = [r[f"{p}_median_s"] for p in peers]
        fastest = f"{ms(r['fastest_peer_median_s'])} ({r['fastest_peer']})"
        # Every formulation of the peers that have several, the fastest first.
        forms = []
        for p in ("duckdb", "chdb", "polars"):
            fs = {k: v["median_s"] for k, v in r["peers"].items() if k.partition(":")[0] == p and ":" in k}
            if fs:
                forms.append(f"{p} " + ", ".join(f"{k.partition(':')[2]} {v * 1e3:.1f}"
                                                 for k, v in sorted(fs.items(), key=lambda kv: kv[1])))
        print(f"| {name} | {sq * 1e3:.1f} | " + " | ".join(ms(t) for t in times) + f" | {fastest} | "
              + " | ".join(ratio(t, sq) for t in times) + f" | {ratio(r['fastest_peer_median_s'], sq)} | "
              f"{r['signalql']['wall_median_s'] * 1e3:.1f} | {r['signalql']['max_rss_kib'] / 1024:.0f} | "
              f"{'; '.join(forms) or '-'} |")
    print("\nsignalql = in-process time of one answer (`signalql bench`, after a warm-up answer in the "
          "same process; parse, open the tables, plan, execute, build the answer). duckdb, chdb, polars and "
          "datafusion run in this Python process: duckdb and datafusion on a warm connection/context with the "
          "tables registered once, chdb (`file(...)`) and polars (`scan_parquet(...).collect()`) reading the "
          "files in every query. Ratios are peer / signalql: above 1 means signalql is faster. Each peer's "
          "figure is its fastest formulation where it has several; 'fastest peer' is the fastest of them all. "
          "'sq process wall' is the whole `signalql bench --warmup 1 --runs 1` process (start, two answers, "
          "JSON output); 'sq peak RSS' its max ru_maxrss over the rounds. Peer memory is not measured.")
    ctxw = [r for n, r in results.items() if n.startswith("W8")]
    for r in ctxw:
        sq = r["signalql"]["median_s"]
        print(f"\nW8 (CONTEXT FOR over {args.objects} objects in {objroot}): duckdb and datafusion are the "
              f"scan floor `SELECT sum(length(content)) FROM representations` (no chdb or polars peer); "
              f"signalql / scan = {sq / r['duckdb_median_s']:.2f} (duckdb), "
              f"{sq / r['datafusion_median_s']:.2f} (datafusion); target at most 1.5.")


if __name__ == "__main__":
    sys.exit(main())
