#!/usr/bin/env python3
"""The plan cache measured through one server (issue 20, docs/runtime.md).

Starts `signalql serve` on ROOT and sends each workload of benches/workloads.toml to
POST /v1/query: once cold (the server's first sight of it: tables opened, the plan made and
cached, `plan_cache: miss`), then RUNS more times warm (`hit`). Beside them, `signalql bench`
in one process runs the same statement RUNS times with no plan cache (`bypass`): warm tables and
OS caches, but every run parses, binds and plans again. Prints medians (ms) and the ratios.

    benches/server_cache.py --bin target/release/signalql --data ROOT [--runs 9] [--json FILE]

ROOT is made by `signalql gen events --rows N --out ROOT` and `signalql gen objects --out ROOT`
(W8 needs the objects; workloads whose tables ROOT lacks are skipped).
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import tomllib
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def workloads():
    with open(os.path.join(HERE, "workloads.toml"), "rb") as f:
        w = tomllib.load(f)
    ctx = w["context"]
    out = []
    for item in w["workload"]:
        text = item["signalql"].replace("{task}", ctx["task"]).replace("{budget}", str(ctx["budget"]))
        out.append((item["name"], text))
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, query):
    body = json.dumps({"query": query}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/query", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        answer = json.loads(r.read())
    return (time.perf_counter() - t0) * 1e3, answer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--now", default="2026-06-13T00:00:00Z")
    ap.add_argument("--json")
    args = ap.parse_args()
    port = free_port()
    server = subprocess.Popen([args.bin, "serve", "--data", args.data, "--now", args.now,
                               "--listen", f"127.0.0.1:{port}"], stdout=subprocess.PIPE)
    server.stdout.readline()  # "listening on …"
    rows = []
    try:
        for name, q in workloads():
            if "CONTEXT FOR" in q and not os.path.isdir(os.path.join(args.data, "objects")):
                continue
            cold, a = post(port, q)
            outcome = a.get("metadata", {}).get("plan_cache", "bypass")
            warm, outcomes = [], set()
            for _ in range(args.runs):
                ms, a = post(port, q)
                warm.append(ms)
                outcomes.add(a.get("metadata", {}).get("plan_cache", "bypass"))
            bench = json.loads(subprocess.run(
                [args.bin, "bench", "--data", args.data, "--now", args.now, "--runs", str(args.runs),
                 "--warmup", "1", "--no-plan-cache", q], check=True, capture_output=True).stdout)
            bypass = bench["median_s"] * 1e3
            row = {"workload": name, "cold_ms": cold, "cold_outcome": outcome,
                   "warm_ms": statistics.median(warm), "warm_outcomes": sorted(outcomes),
                   "in_process_no_cache_ms": bypass}
            rows.append(row)
            print(f"{name:36} cold {cold:8.1f} ({outcome})  warm {row['warm_ms']:8.1f} "
                  f"({','.join(sorted(outcomes))})  no-cache in-process {bypass:8.1f}  "
                  f"warm/cold {row['warm_ms'] / cold:5.2f}  warm/no-cache {row['warm_ms'] / bypass:5.2f}",
                  flush=True)
    finally:
        server.terminate()
        server.wait()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
