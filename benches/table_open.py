#!/usr/bin/env python3
"""Table opens measured (issue 21, docs/scan.md): what a repeated query pays before its scan.

1. Through one MCP server (`signalql mcp --data ROOT`, the official MCP Python SDK over stdio):
   W1 sent RUNS times to the `query` tool; the median of the calls after the first (ms).
2. On S3 (moto's server): ROOT's events uploaded to a bucket, then W1 run by `signalql bench`
   once with `--runs 1` and once with `--runs 1+K` (one process each, no warm-up); the
   difference of moto's request logs over K is what each repeated query sends, by kind
   (LIST, HEAD, GET, other), and the first query's own count is the open's.

Every binary given by --bin LABEL=PATH is measured in the same run, in turn.

    benches/table_open.py --bin before=/tmp/sq-before --bin after=target/release/signalql \\
        --data benches/out/rows10m [--runs 21] [--json FILE]
"""

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
NOW = "2026-06-13T00:00:00Z"


def w1():
    with open(os.path.join(HERE, "workloads.toml"), "rb") as f:
        w = tomllib.load(f)
    return next(x["signalql"] for x in w["workload"] if x["name"].startswith("W1_"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def mcp_times(binary, root, text, runs):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=binary, args=["mcp", "--data", root, "--now", NOW])
    times = []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for _ in range(runs):
                t0 = time.perf_counter()
                r = await session.call_tool("query", {"query": text})
                times.append((time.perf_counter() - t0) * 1e3)
                if r.is_error:
                    raise SystemExit(f"{binary}: the query tool failed: {r.content}")
    return times


class Moto:
    """moto's S3 server on a free port, its request log in a file."""

    def __init__(self):
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline:
                    raise SystemExit("moto did not start (pip install 'moto[server]')")
                time.sleep(0.2)

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def requests(self):
        """The request lines logged so far: (method, path)."""
        with open(self.log.name) as f:
            text = f.read()
        return re.findall(r'"(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/[\d.]+"', text)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        os.unlink(self.log.name)


def kinds(reqs):
    out = {"LIST": 0, "HEAD": 0, "GET": 0, "other": 0}
    for method, path in reqs:
        if method == "GET" and ("list-type=" in path or "prefix=" in path):
            out["LIST"] += 1
        elif method in ("HEAD", "GET"):
            out[method] += 1
        else:
            out["other"] += 1
    return out


def upload(moto, root, bucket):
    import boto3

    s3 = boto3.client("s3", endpoint_url=moto.endpoint, aws_access_key_id="bench",
                      aws_secret_access_key="bench", region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    s3.upload_file(os.path.join(root, "signalql.toml"), bucket, "ds/signalql.toml")
    for name in sorted(os.listdir(os.path.join(root, "events"))):
        if name.endswith(".parquet"):
            s3.upload_file(os.path.join(root, "events", name), bucket, f"ds/events/{name}")


def s3_counts(binary, moto, bucket, text, k):
    env = {k2: v for k2, v in os.environ.items() if not k2.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_REGION="us-east-1",
               AWS_ALLOW_HTTP="true")

    def run(runs):
        before = len(moto.requests())
        out = subprocess.run([binary, "bench", "--warmup", "0", "--runs", str(runs), "--data",
                              f"s3://{bucket}/ds", "--s3-endpoint", moto.endpoint, "--now", NOW, "--no-plan-cache", text],
                             env=env, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"{binary} bench on S3 failed: {out.stdout}{out.stderr}")
        time.sleep(0.5)  # the log is flushed by moto's request thread
        return moto.requests()[before:], json.loads(out.stdout)

    one, _ = run(1)
    many, answer = run(1 + k)
    first = kinds(one)
    total = kinds(many)
    per_query = {key: (total[key] - first[key]) / k for key in total}
    return first, per_query, answer["median_s"] * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append", required=True, help="LABEL=PATH (repeatable)")
    ap.add_argument("--data", required=True)
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--json")
    args = ap.parse_args()
    bins = [b.split("=", 1) for b in args.bin]
    text = w1()
    results = {}
    for label, path in bins:
        times = asyncio.run(mcp_times(path, args.data, text, args.runs))
        results[label] = {"mcp_first_ms": times[0], "mcp_median_ms": statistics.median(times[1:])}
    moto = Moto()
    try:
        upload(moto, args.data, "bench")
        for label, path in bins:
            first, per_query, median = s3_counts(path, moto, "bench", text, args.runs - 1)
            results[label].update(s3_first_query=first, s3_per_query=per_query, s3_median_ms=median)
    finally:
        moto.stop()
    print(f"W1 `{text}` over {args.data}")
    print("| binary | MCP first call ms | MCP repeated call ms (median) | S3 first query requests | "
          "S3 requests per repeated query | S3 bench median ms |")
    print("|---|---|---|---|---|---|")
    for label, r in results.items():
        fmt = lambda d: ", ".join(f"{k} {v:g}" for k, v in d.items() if v)
        print(f"| {label} | {r['mcp_first_ms']:.1f} | {r['mcp_median_ms']:.1f} | {fmt(r['s3_first_query'])} | "
              f"{fmt(r['s3_per_query'])} | {r['s3_median_ms']:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
