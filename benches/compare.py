"""Run the issue-7 workloads through signalql, DuckDB and plain DataFusion SQL on generated Parquet, check that they agree, and print medians and ratios.

Run it through `benches/compare`, which installs the pinned duckdb and datafusion Python packages
into benches/.venv first:

    benches/compare --rows 2000000 --data benches/out/rows2m
    benches/compare                                   # 10M events, 100k objects, temporary dir
    benches/compare --only W6 --only W7 --runs 9 --json benches/out/funnels.json

Workloads: names and SignalQL texts from benches/workloads.toml (which the criterion bench reads
too), the peers' SQL built below (the DataFusion funnel SQL is in workloads.toml as well).

Data: `signalql gen events --rows N --seed S --out ROOT` and `signalql gen objects --objects M
--seed S --out OBJROOT` (OBJROOT is ROOT unless --objects-data says otherwise), each skipped when
the folder already holds that dataset. Only what the selected workloads read is generated.

What is timed, per workload: one warm-up round, then --runs rounds. A round runs each engine once,
in turn (signalql, every DuckDB formulation, DataFusion SQL), so machine noise spreads evenly.

* signalql: one `signalql bench --warmup 1 --runs 1 --data ROOT --now T QUERY` process per round.
  The in-process time is its `times_s[0]`: one whole answer (parse, open the tables, plan,
  execute, build the envelope or bundle) after one warm-up answer in the same process. The
  process's wall time (start, the warm-up answer, the timed answer, JSON output) and its peak RSS
  (`ru_maxrss` from wait4, through a small launcher process: see SPAWN) are recorded too.
* DuckDB: `con.execute(sql).fetchall()` in this Python process on one connection, with views over
  `read_parquet(...)`.
* DataFusion SQL: `ctx.sql(sql).collect()` (datafusion-python) in this Python process on one
  SessionContext with Parquet listing tables registered.

The warm-up round's results are compared first, for every selected workload, before anything is
timed: the same column names, the same row count and equal rows after normalising (timestamps to
epoch seconds, numbers to a relative tolerance of 1e-9, structs flattened). Any disagreement, or an
engine that fails, exits 1 without timing. W8 (CONTEXT FOR) has no peer answer: its check is that
the bundle is non-empty and its items' token estimates sum to at most the budget, and that the
two scans agree.
"""

import argparse
import datetime as dt
import json
import math
import os
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
    return f"\"timestamp\" >= TIMESTAMP '{start}+00:00' AND \"timestamp\" < TIMESTAMP '{T}+00:00'"


def prop(dialect, name):
    return f"properties.{name}" if dialect == "duckdb" else f"properties['{name}']"


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
    """stats(x) spelled out with built-in aggregates (neither peer has the UDF)."""
    fields = [("n", f"count({x})"), ("sum", f"sum({x})"), ("sum_sq", f"sum({x} * {x})"),
              ("mean", f"avg({x})"), ("variance", f"var_samp({x})"), ("stddev", f"stddev_samp({x})"),
              ("min", f"min({x})"), ("max", f"max({x})")]
    if d == "duckdb":
        return "struct_pack(" + ", ".join(f"{k} := {v}" for k, v in fields) + ")"
    return "named_struct(" + ", ".join(f"'{k}', {v}" for k, v in fields) + ")"


def percentile_sql(d, x, p):
    # signalql's percentile is exact with linear interpolation (PostgreSQL percentile_cont).
    # DuckDB's quantile_cont is the same; DataFusion's percentile_cont rounds the interpolation
    # fraction to 1e-6 (see the tolerance of W5).
    return f"quantile_cont({x}, {p})" if d == "duckdb" else f"percentile_cont({x}, {p})"


def make_workloads(files):
    """The workloads in run order: name and SignalQL text from workloads.toml, the peers' SQL."""
    wl = []

    def entry(num, duckdb, datafusion, **extra):
        wl.append({**WORKLOAD[num], "duckdb": duckdb, "datafusion": datafusion, **extra})

    def add(num, sql, **extra):
        entry(num, sql("duckdb"), sql("datafusion"), **extra)

    add("W1",
        lambda d: f"SELECT count(*) AS \"count\" FROM events WHERE event_name = 'purchase' AND {window(d, DAY30)}")
    add("W2", daily_active_sql)
    add("W3",
        lambda d: f"""
SELECT {prop(d, 'path')} AS "properties.path", count(*) AS "count" FROM events
WHERE event_name = 'page_view' AND {window(d, DAY7)}
GROUP BY 1 HAVING count(*) > 1000 ORDER BY 2 DESC, 1 NULLS LAST LIMIT 10""")
    add("W4",
        lambda d: f"""
SELECT {prop(d, 'experiment_variant')} AS "properties.experiment_variant",
  count(DISTINCT user_id) AS "count_distinct(user_id)",
  {stats_sql(d, prop(d, 'amount'))} AS "stats(properties.amount)"
FROM events
WHERE event_name = 'purchase' AND {prop(d, 'amount')} IS NOT NULL AND {window(d, DAY14)}
GROUP BY 1 ORDER BY 1 NULLS LAST""")
    add("W5",
        lambda d: f"""
SELECT {prop(d, 'platform')} AS "properties.platform",
  {percentile_sql(d, prop(d, 'amount'), 0.5)} AS "percentile(properties.amount, 0.5)",
  {percentile_sql(d, prop(d, 'amount'), 0.95)} AS "percentile(properties.amount, 0.95)"
FROM events WHERE event_name = 'purchase' AND {window(d, DAY30)}
GROUP BY 1 ORDER BY 1 NULLS LAST""",
        # DataFusion rounds the interpolation fraction to 1e-6: an error of at most 5e-7 x the gap
        # between the two neighbouring values; generated amounts lie in [5, 500] USD.
        abs_tol={"datafusion": 1e-3})
    entry("W6", duckdb_funnels(False, files), funnel_datafusion_sql(False))
    entry("W7", duckdb_funnels(True, files), funnel_datafusion_sql(True))
    # The peers' figure is the scan floor: reading the representation text column once.
    scan = "SELECT sum(length(content)) AS chars FROM representations"
    entry("W8", scan, scan, context=True)
    add("X1",
        lambda d: f"""
SELECT event_name, count(*) AS "count", count(DISTINCT user_id) AS "count_distinct(user_id)"
FROM events WHERE {window(d, DAY30)} GROUP BY 1 ORDER BY 1 NULLS LAST""")
    return wl


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
    ap.add_argument("--runs", type=int, default=5, help="timed rounds per workload, after one warm-up round (default 5)")
    ap.add_argument("--bin", default=DEFAULT_BIN, help=f"signalql binary (default {DEFAULT_BIN})")
    ap.add_argument("--data", help="dataset root to use and keep (default: a temporary directory, removed)")
    ap.add_argument("--objects-data", help="object store root for W8 (default: the --data root)")
    ap.add_argument("--only", action="append",
                    help="run only this workload: W3, W3_top_paths_having or top_paths_having (repeatable)")
    ap.add_argument("--json", help="also write every measurement to this JSON file")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    return args


def generate_events(binary, rows, seed, root):
    """`signalql gen events` unless ROOT already holds the same rows and seed."""
    marker = os.path.join(root, "signalql.toml")
    if os.path.exists(marker):
        with open(marker) as f:
            head = f.readline()
        if f"rows = {rows}," in head and f"seed = {seed}," in head:
            print(f"reusing events under {root} ({head.strip()[2:]})", file=sys.stderr)
            return
        raise SystemExit(f"{root} holds another dataset ({head.strip()}); pick another --data or --rows/--seed")
    t0 = time.perf_counter()
    subprocess.run([binary, "gen", "events", "--rows", str(rows), "--seed", str(seed), "--out", root],
                   check=True, stdout=subprocess.DEVNULL)
    print(f"generated {rows} events in {time.perf_counter() - t0:.1f} s under {root}", file=sys.stderr)


def generate_objects(binary, con, n, seed, root):
    """`signalql gen objects` unless ROOT already has an objects table (of N objects: the generator
    records no seed, so a store made with another seed is not detected)."""
    if os.path.isdir(os.path.join(root, "objects")):
        have = con.execute(
            f"SELECT count(*) FROM read_parquet('{os.path.join(root, 'objects', '*.parquet')}')").fetchone()[0]
        if have != n:
            raise SystemExit(f"{root} holds {have} objects, not {n}; pick another --objects-data or --objects")
        print(f"reusing {have} objects under {root}", file=sys.stderr)
        return
    t0 = time.perf_counter()
    subprocess.run([binary, "gen", "objects", "--objects", str(n), "--seed", str(seed), "--out", root],
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
    """One `signalql bench --warmup 1 --runs 1` process: the in-process time of the counted
    answer, the process's wall time and peak RSS (KiB), and the answer's rows."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r", suffix=".json") as stats:
        spawn = subprocess.run(
            [sys.executable, "-I", "-c", SPAWN, stats.name, os.path.abspath(binary), "bench", "--data", root,
             "--now", NOW, "--warmup", "1", "--runs", "1", text],
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
    import datafusion
    import duckdb

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
    try:
        files = os.path.join(root, "events", "*.parquet")
        workloads = selected(make_workloads(files), args.only)
        need_events = any(not w.get("context") for w in workloads)
        need_objects = any(w.get("context") for w in workloads)

        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        ctx = datafusion.SessionContext()
        if need_events:
            generate_events(args.bin, args.rows, args.seed, root)
            # filename/file_row_number: the funnels break timestamp ties by position in the files.
            con.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet('{files}', filename = true, file_row_number = true)")
            ctx.register_parquet("events", os.path.join(root, "events") + "/")
        if need_objects:
            os.makedirs(objroot, exist_ok=True)
            generate_objects(args.bin, con, args.objects, args.seed, objroot)
            reps = os.path.join(objroot, "representations")
            con.execute(f"CREATE VIEW representations AS SELECT * FROM read_parquet('{os.path.join(reps, '*.parquet')}')")
            ctx.register_parquet("representations", reps + "/")

        def engines(w):
            """(label, callable) in the order of a round."""
            data = objroot if w.get("context") else root
            es = [("signalql", lambda: run_signalql(args.bin, data, w["signalql"]))]
            dk = w["duckdb"] if isinstance(w["duckdb"], dict) else {"": w["duckdb"]}
            for variant, sql in dk.items():
                es.append(("duckdb" + (f":{variant}" if variant else ""), lambda sql=sql: run_duckdb(sql)))
            es.append(("datafusion", lambda: run_datafusion(w["datafusion"])))
            return es

        def run_duckdb(sql):
            cur = con.execute(sql)
            return {"rows": cur.fetchall(), "names": [d[0] for d in cur.description]}

        def run_datafusion(sql):
            df = ctx.sql(sql)
            batches = df.collect()
            return {"batches": batches, "df": df}

        def peer_answer(r):
            """Rows and column names of a peer's answer (outside the timed call)."""
            if "batches" in r:
                return {"rows": [x for b in r["batches"] for x in b.to_pylist()], "names": r["df"].schema().names}
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
            duck = {k: v for k, v in rec["peers"].items() if k.startswith("duckdb")}
            best = min(duck, key=lambda k: duck[k]["median_s"])
            rec["duckdb_best"] = best
            rec["duckdb_median_s"] = duck[best]["median_s"]
            rec["datafusion_median_s"] = rec["peers"]["datafusion"]["median_s"]
            print(f"{w['name']}: signalql {s['median_s'] * 1e3:.1f} ms, "
                  + ", ".join(f"{k} {v['median_s'] * 1e3:.1f} ms" for k, v in rec["peers"].items()),
                  file=sys.stderr)

        print_table(args, results, objroot)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"rows": args.rows, "objects": args.objects, "seed": args.seed, "runs": args.runs,
                           "binary": args.bin, "data": root, "objects_data": objroot, "cores": os.cpu_count(),
                           "loadavg_start": load0, "loadavg_end": os.getloadavg(),
                           "duckdb_version": duckdb.__version__, "datafusion_version": datafusion.__version__,
                           "agree": True, "results": list(results.values())}, f, indent=2)
        return 0
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def print_table(args, results, objroot):
    print()
    print(f"rows={args.rows} objects={args.objects} seed={args.seed} runs={args.runs} (median of the "
          f"rounds after 1 warm-up round); times in ms; cores={os.cpu_count()}; load average "
          f"{os.getloadavg()[1]:.2f} (5 min); all engines agree")
    hdr = ("workload", "signalql", "duckdb", "datafusion", "duckdb/sq", "datafusion/sq",
           "sq process wall", "sq peak RSS MiB", "duckdb form")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "|".join("---" for _ in hdr) + "|")
    for name, r in results.items():
        sq, dk, df = r["signalql"]["median_s"], r["duckdb_median_s"], r["datafusion_median_s"]
        form = r["duckdb_best"].partition(":")[2] or "-"
        if len(r["peers"]) > 2:
            form += " (" + ", ".join(f"{k.partition(':')[2]} {v['median_s'] * 1e3:.1f}"
                                     for k, v in r["peers"].items() if k.startswith("duckdb")) + ")"
        print(f"| {name} | {sq * 1e3:.1f} | {dk * 1e3:.1f} | {df * 1e3:.1f} | {dk / sq:.2f} | {df / sq:.2f} | "
              f"{r['signalql']['wall_median_s'] * 1e3:.1f} | {r['signalql']['max_rss_kib'] / 1024:.0f} | {form} |")
    print("\nsignalql = in-process time of one answer (`signalql bench`, after a warm-up answer in the "
          "same process; parse, open the tables, plan, execute, build the answer). duckdb and datafusion "
          "run in this Python process on a warm connection/context with the tables registered once. "
          "Ratios are peer / signalql: above 1 means signalql is faster. duckdb is the fastest "
          "formulation where there are several. 'sq process wall' is the whole `signalql bench --warmup 1 "
          "--runs 1` process (start, two answers, JSON output); 'sq peak RSS' its max ru_maxrss over the rounds.")
    ctxw = [r for n, r in results.items() if n.startswith("W8")]
    for r in ctxw:
        sq = r["signalql"]["median_s"]
        print(f"\nW8 (CONTEXT FOR over {args.objects} objects in {objroot}): duckdb and datafusion are the "
              f"scan floor `SELECT sum(length(content)) FROM representations`; signalql / scan = "
              f"{sq / r['duckdb_median_s']:.2f} (duckdb), {sq / r['datafusion_median_s']:.2f} (datafusion); "
              f"target at most 1.5.")


if __name__ == "__main__":
    sys.exit(main())
