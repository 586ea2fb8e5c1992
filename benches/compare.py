"""Run the same SignalQL workloads through the signalql CLI, DuckDB and datafusion-python on generated Parquet and print the ratios.

Usage (from the repository root, after `cargo build --release`):

    python3 benches/compare.py --rows 2000000
    python3 benches/compare.py --rows 10000000 --runs 5 --bin /root/.cache/signalql/target/release/signalql

What is timed, per workload (median of --runs runs after one warm-up run):

* signalql: one `signalql query --data ROOT --format json QUERY` process, wall clock. This
  includes process start, opening the dataset (listing the Parquet files, reading their
  footers), planning, execution and JSON rendering. A baseline process running a query that
  reads no rows (`... DURING BETWEEN <before the data> ...`) is timed the same way, and
  "signalql - base" subtracts it as an estimate of the query alone.
* duckdb: `con.execute(sql).fetchall()` in this Python process on one connection, over a view
  on `read_parquet('ROOT/events/*.parquet')`.
* datafusion-python: `ctx.sql(sql).collect()` in this Python process on one SessionContext with
  `events` registered as a Parquet listing table over `ROOT/events/`.

The in-process engines pay no process start; the criterion bench (`cargo bench --bench
signalql`, group `end_to_end`) gives signalql's in-process time next to DataFusion SQL.

Before timing, the three results of each workload are compared: same row count, and the rows
equal after normalising (timestamps to epoch seconds, floats to a relative tolerance of 1e-9,
structs flattened); a per-engine checksum (sum of all numbers) is printed too.
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

DEFAULT_BIN = os.path.join(
    os.environ.get("CARGO_TARGET_DIR", "/root/.cache/signalql/target"), "release", "signalql"
)

# The generated data ends at T = 2026-06-13T00:00:00Z (signalql.toml `now`); windows are [T-n, T).
T = "2026-06-13 00:00:00"
DAY30 = "2026-05-14 00:00:00"
DAY14 = "2026-05-30 00:00:00"
DAY7 = "2026-06-06 00:00:00"
LAST_DAY = "2026-06-12 00:00:00"
DAY28 = "2026-05-16 00:00:00"


def funnel_sql(dialect, grouped):
    """A 3-step funnel (visit -> signup -> activated, WITHIN 7 d, LAST 28 d) with window functions:
    per visit, the first signup after it and the first activated after that signup (the greedy
    chain, which reaches the deepest step and each step earliest for that start); per user the
    deepest level, and per step the chain ending earliest (latest start on ties)."""
    duck = dialect == "duckdb"
    ts_lit = (lambda t: f"TIMESTAMPTZ '{t}+00'") if duck else (lambda t: f"TIMESTAMP '{t}+00:00'")
    plan = "properties.plan" if duck else "properties['plan']"
    fileorder = "filename, file_row_number" if duck else "fname, frow"
    source = "events" if duck else (
        "(SELECT *, input_file_name() AS fname, file_row_index() AS frow FROM events) e")
    us = (lambda c: f"epoch_us({c})") if duck else (lambda c: f"CAST({c} AS BIGINT)")
    w = "INTERVAL '7 days'"
    grp = f"{plan}" if grouped else "CAST(NULL AS VARCHAR)"
    frame = "OVER (PARTITION BY user_id ORDER BY pos ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING)"
    sel_g = 'g AS "properties.plan", ' if grouped else ""
    order_g = "g NULLS LAST, " if grouped else ""
    return f"""
WITH ev AS (
  SELECT user_id, "timestamp" AS ts, event_name AS name, {grp} AS g,
         row_number() OVER (PARTITION BY user_id ORDER BY "timestamp", {fileorder}) AS pos
  FROM {source}
  WHERE user_id IS NOT NULL AND event_name IN ('visit', 'signup', 'activated')
    AND "timestamp" >= {ts_lit(DAY28)} AND "timestamp" < {ts_lit(T)}),
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
  FROM r GROUP BY user_id),
a AS (
  SELECT g, count(*) AS u1, sum(CASE WHEN lv >= 2 THEN 1 ELSE 0 END) AS u2,
         sum(CASE WHEN lv >= 3 THEN 1 ELSE 0 END) AS u3, median(s2) AS m2, median(s3) AS m3
  FROM u GROUP BY g)
SELECT {sel_g}step, event, users,
       CAST(users AS DOUBLE) / nullif(base, 0) AS conversion_rate,
       CAST(users AS DOUBLE) / nullif(prev, 0) AS step_conversion_rate,
       m AS median_seconds_to_convert
FROM (
  SELECT g, 1 AS step, 'visit' AS event, u1 AS users, u1 + 0 AS base, u1 - 0 AS prev, CAST(NULL AS DOUBLE) AS m FROM a
  UNION ALL SELECT g, 2, 'signup', u2, u1 AS base, u1 AS prev, m2 FROM a
  UNION ALL SELECT g, 3, 'activated', u3, u1 AS base, u2 AS prev, m3 FROM a) x
ORDER BY {order_g}step"""

FUNNEL = """FUNNEL "visit" -> "signup" -> "activated"
FROM events
DURING LAST 28 d
WITHIN 7 d"""

# Each workload: SignalQL text, DuckDB SQL, DataFusion SQL (datafusion-python has no `stats`
# UDF, so the A/B read spells it out with built-in aggregates; DuckDB does the same).
WORKLOADS = [
    {
        "name": "daily_active_by_platform",
        "signalql": """FROM events
WHERE event_name = "session_start"
DURING LAST 30 d
BUCKET BY d
GROUP BY properties.platform
RETURN timestamp, properties.platform, count_distinct(user_id)
ORDER BY timestamp ASC""",
        "duckdb": f"""
WITH a AS (
  SELECT date_trunc('day', "timestamp") AS d, properties.platform AS p, count(DISTINCT user_id) AS n
  FROM events
  WHERE event_name = 'session_start'
    AND "timestamp" >= TIMESTAMPTZ '{DAY30}+00' AND "timestamp" < TIMESTAMPTZ '{T}+00'
  GROUP BY 1, 2),
g AS (
  SELECT DISTINCT properties.platform AS p FROM events
  WHERE event_name = 'session_start'
    AND "timestamp" >= TIMESTAMPTZ '{DAY30}+00' AND "timestamp" < TIMESTAMPTZ '{T}+00'),
b AS (SELECT d FROM generate_series(TIMESTAMPTZ '{DAY30}+00', TIMESTAMPTZ '{LAST_DAY}+00', INTERVAL 1 DAY) t(d))
SELECT b.d AS "timestamp", g.p AS "properties.platform", coalesce(a.n, 0) AS "count_distinct(user_id)"
FROM b CROSS JOIN g LEFT JOIN a ON a.d = b.d AND a.p IS NOT DISTINCT FROM g.p
ORDER BY 1, 2 NULLS LAST""",
        "datafusion": f"""
WITH a AS (
  SELECT date_trunc('day', "timestamp") AS d, properties['platform'] AS p, count(DISTINCT user_id) AS n
  FROM events
  WHERE event_name = 'session_start'
    AND "timestamp" >= TIMESTAMP '{DAY30}+00:00' AND "timestamp" < TIMESTAMP '{T}+00:00'
  GROUP BY 1, 2),
g AS (
  SELECT DISTINCT properties['platform'] AS p FROM events
  WHERE event_name = 'session_start'
    AND "timestamp" >= TIMESTAMP '{DAY30}+00:00' AND "timestamp" < TIMESTAMP '{T}+00:00'),
b AS (SELECT unnest(generate_series(TIMESTAMP '{DAY30}+00:00', TIMESTAMP '{LAST_DAY}+00:00', INTERVAL '1 day')) AS d)
SELECT b.d AS "timestamp", g.p AS "properties.platform", coalesce(a.n, 0) AS "count_distinct(user_id)"
FROM b CROSS JOIN g LEFT JOIN a ON a.d = b.d AND a.p IS NOT DISTINCT FROM g.p
ORDER BY 1, 2 NULLS LAST""",
    },
    {
        "name": "top_paths_having",
        "signalql": """FROM events
WHERE event_name = "page_view"
DURING LAST 7 d
GROUP BY properties.path
HAVING count > 1000
RETURN properties.path, count
ORDER BY count DESC
LIMIT 10""",
        "duckdb": f"""
SELECT properties.path AS "properties.path", count(*) AS "count" FROM events
WHERE event_name = 'page_view'
  AND "timestamp" >= TIMESTAMPTZ '{DAY7}+00' AND "timestamp" < TIMESTAMPTZ '{T}+00'
GROUP BY 1 HAVING count(*) > 1000 ORDER BY 2 DESC, 1 NULLS LAST LIMIT 10""",
        "datafusion": f"""
SELECT properties['path'] AS "properties.path", count(*) AS "count" FROM events
WHERE event_name = 'page_view'
  AND "timestamp" >= TIMESTAMP '{DAY7}+00:00' AND "timestamp" < TIMESTAMP '{T}+00:00'
GROUP BY 1 HAVING count(*) > 1000 ORDER BY 2 DESC, 1 NULLS LAST LIMIT 10""",
    },
    {
        "name": "ab_stats_by_variant",
        "signalql": """FROM events
WHERE event_name = "purchase" AND properties.amount IS NOT NULL
DURING LAST 14 d
AS OF "2026-06-13T00:00:00Z"
GROUP BY properties.experiment_variant
RETURN properties.experiment_variant, count_distinct(user_id), stats(properties.amount)""",
        "duckdb": f"""
SELECT properties.experiment_variant AS "properties.experiment_variant",
  count(DISTINCT user_id) AS "count_distinct(user_id)",
  struct_pack(n := count(properties.amount), sum := sum(properties.amount),
    sum_sq := sum(properties.amount * properties.amount), mean := avg(properties.amount),
    variance := var_samp(properties.amount), stddev := stddev_samp(properties.amount),
    min := min(properties.amount), max := max(properties.amount)) AS "stats(properties.amount)"
FROM events
WHERE event_name = 'purchase' AND properties.amount IS NOT NULL
  AND "timestamp" >= TIMESTAMPTZ '{DAY14}+00' AND "timestamp" < TIMESTAMPTZ '{T}+00'
GROUP BY 1 ORDER BY 1 NULLS LAST""",
        "datafusion": f"""
SELECT properties['experiment_variant'] AS "properties.experiment_variant",
  count(DISTINCT user_id) AS "count_distinct(user_id)",
  named_struct('n', count(properties['amount']), 'sum', sum(properties['amount']),
    'sum_sq', sum(properties['amount'] * properties['amount']), 'mean', avg(properties['amount']),
    'variance', var_samp(properties['amount']), 'stddev', stddev_samp(properties['amount']),
    'min', min(properties['amount']), 'max', max(properties['amount'])) AS "stats(properties.amount)"
FROM events
WHERE event_name = 'purchase' AND properties['amount'] IS NOT NULL
  AND "timestamp" >= TIMESTAMP '{DAY14}+00:00' AND "timestamp" < TIMESTAMP '{T}+00:00'
GROUP BY 1 ORDER BY 1 NULLS LAST""",
    },
    {
        "name": "events_by_name_30d",
        "signalql": """FROM events
DURING LAST 30 d
GROUP BY event_name
RETURN event_name, count, count_distinct(user_id)""",
        "duckdb": f"""
SELECT event_name, count(*) AS "count", count(DISTINCT user_id) AS "count_distinct(user_id)"
FROM events
WHERE "timestamp" >= TIMESTAMPTZ '{DAY30}+00' AND "timestamp" < TIMESTAMPTZ '{T}+00'
GROUP BY 1""",
        "datafusion": f"""
SELECT event_name, count(*) AS "count", count(DISTINCT user_id) AS "count_distinct(user_id)"
FROM events
WHERE "timestamp" >= TIMESTAMP '{DAY30}+00:00' AND "timestamp" < TIMESTAMP '{T}+00:00'
GROUP BY 1""",
        "unordered": True,
    },
    {
        "name": "funnel_3step",
        "signalql": FUNNEL,
        "duckdb": funnel_sql("duckdb", False),
        "datafusion": funnel_sql("datafusion", False),
    },
    {
        "name": "funnel_3step_by_plan",
        "signalql": FUNNEL + "\nGROUP BY properties.plan",
        "duckdb": funnel_sql("duckdb", True),
        "datafusion": funnel_sql("datafusion", True),
    },
]

# Reads no rows (the window ends before the data starts): process start + dataset open + plan.
BASELINE = 'FROM events DURING BETWEEN "2000-01-01T00:00:00Z" AND "2000-01-02T00:00:00Z" RETURN count'


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000, help="events to generate (default 10M)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--runs", type=int, default=5, help="timed runs per workload (median reported)")
    ap.add_argument("--bin", default=DEFAULT_BIN, help=f"signalql binary (default {DEFAULT_BIN})")
    ap.add_argument("--data", help="dataset root to use/keep (default: a temporary directory)")
    ap.add_argument("--only", action="append", help="run only the named workload (repeatable)")
    ap.add_argument("--json", help="also write the measurements to this JSON file")
    return ap.parse_args()


def generate(binary, rows, seed, root):
    """Generate the dataset with the CLI unless ROOT already holds the same rows and seed."""
    marker = os.path.join(root, "signalql.toml")
    if os.path.exists(marker):
        with open(marker) as f:
            head = f.readline()
        if f"rows = {rows}," in head and f"seed = {seed}," in head:
            print(f"reusing {root} ({head.strip()[2:]})", file=sys.stderr)
            return
        raise SystemExit(f"{root} holds another dataset ({head.strip()}); pick another --data")
    t0 = time.perf_counter()
    subprocess.run(
        [binary, "gen", "events", "--rows", str(rows), "--seed", str(seed), "--out", root],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    print(f"generated {rows} rows in {time.perf_counter() - t0:.1f} s under {root}", file=sys.stderr)


def run_signalql(binary, root, text):
    out = subprocess.run(
        [binary, "query", "--data", root, "--format", "json", text],
        check=False,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise RuntimeError(f"signalql failed ({out.returncode}): {out.stdout[:500]} {out.stderr[:500]}")
    env = json.loads(out.stdout)
    return env["rows"]


def timed(fn, runs):
    """One warm-up call, then `runs` timed calls; returns (median seconds, all times, result)."""
    result = fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, result


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


def same(a, b):
    if len(a) != len(b):
        return False, f"row count {len(a)} vs {len(b)}"
    for i, (ra, rb) in enumerate(zip(a, b)):
        if len(ra) != len(rb):
            return False, f"row {i}: {len(ra)} vs {len(rb)} values"
        for (ta, xa), (tb, xb) in zip(ra, rb):
            if ta != tb:
                return False, f"row {i}: {ra} vs {rb}"
            if ta in ("n", "t"):
                if not math.isclose(xa, xb, rel_tol=1e-9, abs_tol=1e-9):
                    return False, f"row {i}: {xa} vs {xb}"
            elif xa != xb:
                return False, f"row {i}: {xa!r} vs {xb!r}"
    return True, ""


# --- main -----------------------------------------------------------------------------------


def main():
    args = parse_args()
    import datafusion
    import duckdb

    if not os.path.exists(args.bin):
        raise SystemExit(f"no signalql binary at {args.bin}; run `cargo build --release` first")
    tmp = None
    root = args.data
    if root is None:
        tmp = tempfile.mkdtemp(prefix="signalql-compare-")
        root = tmp
    try:
        generate(args.bin, args.rows, args.seed, root)
        files = os.path.join(root, "events", "*.parquet")

        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        # filename/file_row_number: the funnels break timestamp ties by position in the files.
        con.execute(
            f"CREATE VIEW events AS SELECT * FROM read_parquet('{files}', filename = true, file_row_number = true)"
        )
        ctx = datafusion.SessionContext()
        ctx.register_parquet("events", os.path.join(root, "events") + "/")

        base, base_times, _ = timed(lambda: run_signalql(args.bin, root, BASELINE), args.runs)
        print(
            f"signalql process baseline (start + open {root} + plan, no rows read): "
            f"median {base * 1000:.1f} ms",
            file=sys.stderr,
        )

        results = []
        ok_all = True
        for w in WORKLOADS:
            if args.only and w["name"] not in args.only:
                continue
            name = w["name"]
            unordered = w.get("unordered", False)
            sq, sq_times, sq_rows = timed(lambda: run_signalql(args.bin, root, w["signalql"]), args.runs)
            dk, dk_times, dk_rows = timed(lambda: con.execute(w["duckdb"]).fetchall(), args.runs)
            df, df_times, df_batches = timed(lambda: ctx.sql(w["datafusion"]).collect(), args.runs)
            df_rows = [r for b in df_batches for r in b.to_pylist()]

            ns, nd, nf = (normalise(r, unordered) for r in (sq_rows, dk_rows, df_rows))
            ok1, why1 = same(ns, nd)
            ok2, why2 = same(ns, nf)
            ok_all &= ok1 and ok2
            agree = "yes" if ok1 and ok2 else f"NO ({'duckdb: ' + why1 if not ok1 else ''} {'datafusion: ' + why2 if not ok2 else ''})"
            print(
                f"{name}: rows {len(ns)}/{len(nd)}/{len(nf)} checksum "
                f"{checksum(ns):.6g}/{checksum(nd):.6g}/{checksum(nf):.6g} agree: {agree}",
                file=sys.stderr,
            )
            results.append(
                {
                    "workload": name,
                    "rows_out": len(ns),
                    "agree": ok1 and ok2,
                    "signalql_s": sq,
                    "signalql_minus_base_s": sq - base,
                    "duckdb_s": dk,
                    "datafusion_python_s": df,
                    "times": {"signalql": sq_times, "duckdb": dk_times, "datafusion_python": df_times},
                }
            )

        print()
        print(
            f"rows={args.rows} seed={args.seed} runs={args.runs} (median after 1 warm-up); "
            f"times in ms; cores={os.cpu_count()}"
        )
        hdr = ("workload", "signalql", "sq-base", "duckdb", "df-python", "sq/duckdb", "sq-base/duckdb", "sq/df", "sq-base/df", "agree")
        print("| " + " | ".join(hdr) + " |")
        print("|" + "|".join("---" for _ in hdr) + "|")
        for r in results:
            sq, sb, dk, df = r["signalql_s"], r["signalql_minus_base_s"], r["duckdb_s"], r["datafusion_python_s"]
            print(
                f"| {r['workload']} | {sq * 1e3:.1f} | {sb * 1e3:.1f} | {dk * 1e3:.1f} | {df * 1e3:.1f} | "
                f"{sq / dk:.2f} | {sb / dk:.2f} | {sq / df:.2f} | {sb / df:.2f} | {'yes' if r['agree'] else 'NO'} |"
            )
        print(
            f"\nsignalql = wall time of one `signalql query --format json` process (includes process "
            f"start, dataset open, planning and JSON output); sq-base = that minus the median of a "
            f"no-rows query process ({base * 1e3:.1f} ms), an estimate of the query alone. duckdb and "
            f"df-python run in this Python process on a warm connection/context."
        )
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"rows": args.rows, "seed": args.seed, "runs": args.runs, "baseline_s": base,
                           "baseline_times": base_times, "results": results}, f, indent=2)
        return 0 if ok_all else 1
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
