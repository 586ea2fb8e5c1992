"""Issue 48, point 6: what handing a large answer to Python costs.

One statement answering 10M rows (every event's user, name and time, in that order: a
listing's default order), timed four ways on the same Parquet files, in one run, rounds
interleaved:

* rust: `signalql bench --arrow` (`Engine::query_batches`: the rows as Arrow batches, none made a
  JSON value), its in-process time per answer, after a warm-up answer in the same process;
* python: `engine.query(text).to_arrow()` in this process (the signalql package, built
  `--release`): parse, plan, execute, and the Arrow C stream imported by pyarrow;
* duckdb: `con.sql(sql).arrow()` (read to a `pyarrow.Table` if it gives a reader);
* datafusion: `ctx.sql(sql).to_arrow_table()` (datafusion-python).

Before timing, the four answers are compared: the same row count, and the same count per event
name (pyarrow's group_by on each table). The output is the medians, the ratios to the Rust
figure, and this process's peak RSS (one Python process holds every answer in turn).

    pip install --force-reinstall ./python      # release build
    pip install duckdb==2.0.1 datafusion==55.0.0 pyarrow
    target/release/signalql gen events --rows 10000000 --seed 1 --out /tmp/ev10m
    python3 benches/python_arrow.py --data /tmp/ev10m --bin target/release/signalql --runs 7

The dataset's signalql.toml gets `[limits] max_result_rows = 20000000` (appended when absent):
`max_result_rows` caps Arrow answers as it caps every answer (docs/python.md).
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

QUERY = "FROM events RETURN user_id, event_name, timestamp"
# A listing without ORDER BY is ordered by its returned columns (docs/semantics.md), so the
# peers' SQL orders by them too: the same statement.
SQL = "SELECT user_id, event_name, timestamp FROM events ORDER BY user_id, event_name, timestamp"
ROWS_LIMIT = "[limits]\nmax_result_rows = 20000000\n"


def allow_large_answers(root):
    toml = os.path.join(root, "signalql.toml")
    text = open(toml).read() if os.path.exists(toml) else ""
    if "max_result_rows" not in text:
        with open(toml, "a") as f:
            f.write(("\n" if text and not text.endswith("\n") else "") + ROWS_LIMIT)


def rust_time(binary, root):
    """One `signalql bench --arrow` process: one warm-up answer, one timed (seconds)."""
    out = subprocess.run([binary, "bench", "--arrow", "--warmup", "1", "--runs", "1",
                          "--no-plan-cache", "--data", root, QUERY],
                         check=True, capture_output=True, text=True).stdout
    answer = json.loads(out)
    return answer["times_s"][0], answer["row_count"]


def per_event(table):
    counts = table.group_by("event_name").aggregate([("event_name", "count")])
    return sorted(zip(counts.column(0).cast("string").to_pylist(), counts.column(1).to_pylist()))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--bin", required=True, help="the signalql binary (release)")
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--json", help="write the figures here too")
    args = p.parse_args()

    import datafusion
    import duckdb
    import pyarrow
    import signalql

    root = os.path.abspath(args.data)
    allow_large_answers(root)
    files = os.path.join(root, "events", "*.parquet")
    engine = signalql.connect(root)
    con = duckdb.connect()
    con.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet('{files}')")
    ctx = datafusion.SessionContext()
    ctx.register_parquet("events", os.path.join(root, "events") + "/")

    def py_signalql():
        return engine.query(QUERY).to_arrow()

    def py_duckdb():
        got = con.sql(SQL).arrow()
        return got.read_all() if hasattr(got, "read_all") else got

    def py_datafusion():
        return ctx.sql(SQL).to_arrow_table()

    peers = {"python": py_signalql, "duckdb": py_duckdb, "datafusion": py_datafusion}

    # The answers agree before anything is timed.
    _, rust_rows = rust_time(args.bin, root)
    want = None
    for name, fn in peers.items():
        t = fn()
        got = (t.num_rows, per_event(t))
        print(f"{name}: {t.num_rows} rows, {t.num_columns} columns", file=sys.stderr)
        if want is None:
            want = got
        elif got != want:
            raise SystemExit(f"{name} disagrees: {got[0]} rows vs {want[0]}")
        del t
    if rust_rows != want[0]:
        raise SystemExit(f"signalql bench --arrow answered {rust_rows} rows, python {want[0]}")
    truncated = engine.query(QUERY).metadata["truncated"]
    if truncated:
        raise SystemExit("the answer was truncated: max_result_rows is below the table's rows")

    times = {"rust": []} | {k: [] for k in peers}
    for _ in range(args.runs):
        times["rust"].append(rust_time(args.bin, root)[0])
        for name, fn in peers.items():
            t0 = time.perf_counter()
            t = fn()
            times[name].append(time.perf_counter() - t0)
            del t

    medians = {k: statistics.median(v) for k, v in times.items()}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{want[0]} rows, {args.runs} runs; medians (ms) and ratio to rust (Engine::query_batches):")
    for k, m in medians.items():
        print(f"  {k:<11} {m * 1000:9.1f}  {m / medians['rust']:.2f}x   "
              f"[{', '.join(f'{x * 1000:.0f}' for x in times[k])}]")
    print(f"python process peak RSS {peak:.0f} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": want[0], "times_s": times, "median_s": medians,
                       "python_peak_rss_mib": peak, "pyarrow": pyarrow.__version__,
                       "duckdb": duckdb.__version__, "datafusion": datafusion.__version__}, f, indent=1)


if __name__ == "__main__":
    main()
