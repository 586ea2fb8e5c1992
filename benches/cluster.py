#!/usr/bin/env python3
"""Issue 23's measurement: workloads of benches/workloads.toml run in one process, on one
worker and on two (docs/cluster.md), all on this machine, through `signalql bench`.

    benches/cluster.py --bin target/release/signalql --data DIR [--objects-data DIR]
                       [--rows 10000000] [--objects 100000] [--runs 5] [--only W2 ...]
                       [--bytes-per-task N]

`--data` holds the events (generated with `signalql gen events --rows N --seed 42` when it
does not exist); W8 reads `--objects-data` (generated with `gen objects`, default the
events' folder). Workers are `signalql worker --listen 127.0.0.1:0` processes. "1 worker" gives
the one worker's address twice: datafusion-distributed gives a stage at most one task per
address, so with one address every stage has one task and the statement runs in the
coordinator; with the address twice both tasks of a stage run on that worker. Each setup
prints the median of `--runs` counted runs (after one warm-up), whether EXPLAIN's plan is
distributed, and checks that every setup returns the same rows.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tomllib

NOW = "2026-06-13T00:00:00Z"
HERE = os.path.dirname(os.path.abspath(__file__))


def workloads(only):
    with open(os.path.join(HERE, "workloads.toml"), "rb") as f:
        spec = tomllib.load(f)
    ctx = spec["context"]
    out = []
    for w in spec["workload"]:
        if only and not any(w["name"] == o or w["name"].startswith(o + "_") for o in only):
            continue
        text = w["signalql"].replace("{task}", ctx["task"]).replace("{budget}", str(ctx["budget"]))
        out.append((w["name"], text))
    return out


def start_worker(binary):
    p = subprocess.Popen([binary, "worker", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline().strip()
    prefix = "worker listening on "
    if not line.startswith(prefix):
        raise SystemExit(f"unexpected worker output {line!r}")
    return p, line[len(prefix):]


BYTES_PER_TASK = []


def bench(binary, root, workers, text, runs):
    cmd = [binary]
    if workers:
        cmd += ["--workers", ",".join(workers)] + BYTES_PER_TASK
    cmd += ["bench", "--data", root, "--now", NOW, "--runs", str(runs), "--warmup", "1", "--no-plan-cache", text]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def boundaries(binary, root, workers, text):
    """The network boundaries of the statement's plan over `workers` (0: it runs in the
    coordinator)."""
    if not workers:
        return 0
    cmd = [binary, "--workers", ",".join(workers)] + BYTES_PER_TASK + [
        "query", "--data", root, "--now", NOW, "--format", "json", "EXPLAIN " + text]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    if "DistributedExec" not in out:
        return 0
    return sum(out.count(n) for n in ("NetworkShuffleExec", "NetworkCoalesceExec", "NetworkBroadcastExec"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/signalql")
    ap.add_argument("--data", required=True)
    ap.add_argument("--objects-data")
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--objects", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--bytes-per-task", type=int,
                    help="bytes of files per task of a scan stage on the workers (default 16 MiB)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.bytes_per_task:
        BYTES_PER_TASK.extend(["--bytes-per-task", str(args.bytes_per_task)])
    objects = args.objects_data or args.data
    if not os.path.exists(os.path.join(args.data, "signalql.toml")):
        subprocess.run([args.bin, "gen", "events", "--rows", str(args.rows), "--seed", "42", "--out", args.data],
                       check=True, stdout=subprocess.DEVNULL)
    chosen = workloads(args.only or ["W2", "W3", "W6", "W8"])
    if any(n.startswith("W8") for n, _ in chosen) and not os.path.isdir(os.path.join(objects, "objects")):
        subprocess.run([args.bin, "gen", "objects", "--objects", str(args.objects), "--seed", "42", "--out", objects],
                       check=True, stdout=subprocess.DEVNULL)
    procs = []
    try:
        w1, a1 = start_worker(args.bin)
        w2, a2 = start_worker(args.bin)
        procs = [w1, w2]
        setups = [("local", []), ("1 worker", [a1, a1]), ("2 workers", [a1, a2])]
        results = []
        for name, text in chosen:
            root = objects if name.startswith("W8") else args.data
            row = {"workload": name}
            answers = {}
            for label, workers in setups:
                r = bench(args.bin, root, workers, text, args.runs)
                row[label] = statistics.median(r["times_s"])
                row[label + " boundaries"] = boundaries(args.bin, root, workers, text)
                answers[label] = json.dumps(r.get("rows"), sort_keys=True)
            row["same answer"] = len(set(answers.values())) == 1
            results.append(row)
            print(json.dumps(row), file=sys.stderr)
        print("| workload | local | 1 worker | 2 workers | 1 worker / local | 2 workers / local "
              "| network boundaries | added per boundary (1 worker − local) | same answer |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in results:
            n = r["2 workers boundaries"]
            per = f"{(r['1 worker'] - r['local']) * 1e3 / n:.0f} ms" if n else "—"
            shown = str(n) if n else "0 (runs in the coordinator)"
            print(f"| {r['workload']} | {r['local'] * 1e3:.0f} ms | {r['1 worker'] * 1e3:.0f} ms | "
                  f"{r['2 workers'] * 1e3:.0f} ms | {r['1 worker'] / r['local']:.2f} | "
                  f"{r['2 workers'] / r['local']:.2f} | {shown} | {per} | "
                  f"{'yes' if r['same answer'] else 'NO'} |")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
        if not all(r["same answer"] for r in results):
            raise SystemExit("the setups disagree")
    finally:
        for p in procs:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
