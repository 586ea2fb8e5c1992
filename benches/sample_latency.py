#!/usr/bin/env python3
"""Issue 45 point 6: a statement's fixed cost on the bundled sample, through `signalql serve`
beside `signalql bench` in one process.

Starts `signalql serve` on the sample and sends each statement to POST /v1/query over one
keep-alive connection: WARMUP untimed requests, then RUNS timed ones (the plan cache's hits, so
the kept physical plan). Then `signalql bench --warmup WARMUP --runs RUNS` of the same statement
(also with its plan cache). Prints each median and the difference.

    benches/sample_latency.py --bin target/release/signalql [--runs 300] [--warmup 20]
"""

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(HERE, "..", "data", "sample")
NOW = "2026-06-13T00:00:00Z"
STATEMENTS = {
    "count": 'FROM events WHERE event_name = "purchase" DURING LAST 30 d RETURN count',
    "daily series": "FROM events DURING LAST 30 d BUCKET BY d RETURN timestamp, count ORDER BY timestamp ASC",
    "funnel": 'FUNNEL "visit" -> "signup" -> "activated" FROM events DURING LAST 28 d WITHIN 7 d',
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([args.bin, "serve", "--data", SAMPLE, "--now", NOW,
                               "--listen", f"127.0.0.1:{port}"], stdout=subprocess.PIPE)
    server.stdout.readline()  # "listening on …"
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port)
        for name, q in STATEMENTS.items():
            body = json.dumps({"query": q})
            times, outcomes = [], set()
            for i in range(args.warmup + args.runs):
                t0 = time.perf_counter()
                conn.request("POST", "/v1/query", body, {"Content-Type": "application/json"})
                answer = json.loads(conn.getresponse().read())
                ms = (time.perf_counter() - t0) * 1e3
                if i >= args.warmup:
                    times.append(ms)
                    outcomes.add(answer["metadata"]["plan_cache"])
            bench = json.loads(subprocess.run(
                [args.bin, "bench", "--data", SAMPLE, "--now", NOW, "--warmup", str(args.warmup),
                 "--runs", str(args.runs), q], capture_output=True, check=True).stdout)
            served, in_process = statistics.median(times), bench["median_s"] * 1e3
            print(f"{name:13} serve {served:6.3f} ms ({','.join(sorted(outcomes))})  "
                  f"in process {in_process:6.3f} ms  serve - in process {served - in_process:+.3f} ms",
                  flush=True)
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    sys.exit(main())
