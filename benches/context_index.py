"""Issue 46's table for one object store: the resident context index measured end to end, with
tantivy (BM25, the same corpus and terms) as the reference for FIND.

Usage (after `benches/compare` made benches/.venv, which holds duckdb and tantivy):

    benches/.venv/bin/python benches/context_index.py --binary BIN --data ROOT \
        --objects 100000 --vocabulary zipf [--ingest DOCS] [--runs 20]

ROOT is made by `signalql gen objects` when it has no objects table, then indexed (`signalql
index`: the Parquet text index and the resident index's snapshot file). DOCS is a folder of
files `signalql ingest objects` takes (the refresh rows need it).

What is timed (medians; every process on this machine, nothing else running):

* warm, in process: `signalql bench --warmup 3 --runs R` (the second and later answers of one
  process), for FIND OBJECT ABOUT … LIMIT 20 and CONTEXT FOR (the vocabulary's task, BUDGET 8000).
* warm, server: `signalql serve` on loopback, each statement one `POST /v1/query` timed by this
  process (HTTP included): CONTEXT FOR at a new address each time (the budget moves by one
  token, so each answer writes its record), and EXPLAIN CONTEXT of the W8 bundle with its whole
  rejected list.
* CLI: process wall time of `signalql query` (page cache warm: one unmeasured run first).
* memory: the server's resident set before its first statement and after CONTEXT FOR (what the
  resident index adds, with the code the first statement pages in), and of that the index's
  own (its snapshot mapping's resident pages and the anonymous memory added, from
  /proc/PID/smaps); its peak (VmHWM) after CONTEXT FOR and EXPLAIN; the snapshot file and the
  Parquet text index on disk.
* refresh: a copy of ROOT served and warmed, then `ingest objects DOCS` (into the copy, at a
  time before T), then the first FIND and CONTEXT FOR through the warm server: once with the
  snapshot file the ingest writes (the server maps it) and once with `--no-snapshot` (the
  server refreshes its generation from the new files); `--refresh-runs` rounds (a fresh copy
  and server each, the disk synced before each timed query), medians and every round.
* tantivy: an in-memory index of each object's title and representations' text (the selected
  revision's), BM25 top-20 of the same terms, `searcher.search` timed in this process.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

NOW = "2026-06-13T00:00:00Z"
# Ingested objects must be visible at NOW (the generator's T), so they are ingested before it.
INGEST_AT = "2026-06-12T00:00:00Z"
TASKS = {"topical": "parquet storage engine budget", "zipf": "bupu marai chochou bofai"}


def median_ms(xs):
    return round(statistics.median(xs) * 1000, 2)


def du(path):
    total = 0
    for d, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(d, f)) for f in files)
    return total


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def wall(cmd, runs):
    """Median wall time of `cmd` over `runs` runs after one unmeasured run."""
    run(cmd)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run(cmd)
        times.append(time.perf_counter() - t0)
    return median_ms(times)


def cpu_idle(seconds):
    """The fraction of the machine's CPU time idle over the next `seconds` (/proc/stat)."""
    def times():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v)
    idle0, total0 = times()
    time.sleep(seconds)
    idle1, total1 = times()
    return (idle1 - idle0) / max(1, total1 - total0)


SETTLED = []


def settle(limit=180):
    """Lets what an earlier step left behind finish before timing: the disk written back (a
    tantivy build or a store's copies leave gigabytes of dirty pages) and the CPU idle (at
    least 95 % over two seconds, waiting at most `limit` seconds): run right after the 1M
    zipf rows, the 1M topical warm CONTEXT FOR measured 52.8 ms, alone 36.1."""
    t0 = time.perf_counter()
    os.sync()
    idle = cpu_idle(2)
    while idle < 0.95 and time.perf_counter() - t0 < limit:
        idle = cpu_idle(2)
    SETTLED.append({"waited_s": round(time.perf_counter() - t0, 1), "idle": round(idle, 3)})


def bench(binary, root, text, runs):
    out = run([binary, "bench", "--data", root, "--now", NOW, "--warmup", "3", "--runs", str(runs), text])
    return round(json.loads(out.stdout)["median_s"] * 1000, 2)


class Server:
    """`signalql serve` on a free loopback port."""

    def __init__(self, binary, root):
        self.proc = subprocess.Popen([binary, "serve", "--data", root, "--now", NOW, "--listen", "127.0.0.1:0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        self.url = "http://" + line.strip().split("http://", 1)[1] + "/v1/query"

    def query(self, text):
        body = json.dumps({"query": text}).encode()
        req = urllib.request.Request(self.url, body, {"Content-Type": "application/json"})
        t0 = time.perf_counter()
        with urllib.request.urlopen(req) as r:
            body = r.read()
        # The answer's time is the server's, to its last byte; parsing it here is not.
        elapsed = time.perf_counter() - t0
        return elapsed, json.loads(body)

    def memory_kib(self, field):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return 0

    def index_kib(self):
        """What the resident index itself holds in the server, in KiB: the resident pages of its
        snapshot file's mapping, and the process's anonymous memory (whose growth across a
        statement is what the index allocated)."""
        mapped, anonymous, in_snapshot = 0, 0, False
        with open(f"/proc/{self.proc.pid}/smaps") as f:
            for line in f:
                head = line.split()
                if head and not head[0].endswith(":"):
                    in_snapshot = line.rstrip().endswith(".snapshot") and "/_signalql/resident/" in line
                elif head and head[0] == "Rss:" and in_snapshot:
                    mapped += int(head[1])
                elif head and head[0] == "Anonymous:":
                    anonymous += int(head[1])
        return mapped, anonymous

    def close(self):
        self.proc.terminate()
        self.proc.wait()


def tantivy_find(con, root, terms, runs):
    """tantivy BM25 top-20 of `terms` over each object's title and its selected revision's
    representations' text: (median ms, index build s)."""
    import tantivy

    rows = con.execute(f"""
        WITH rev AS (SELECT object_id, max(revision) r FROM read_parquet('{root}/revisions/*.parquet') GROUP BY object_id)
        SELECT o.object_id, any_value(o.title), string_agg(p.content, ' ')
        FROM read_parquet('{root}/objects/*.parquet') o JOIN rev USING (object_id)
        LEFT JOIN read_parquet('{root}/representations/*.parquet') p
          ON p.object_id = rev.object_id AND p.revision = rev.r
        GROUP BY o.object_id""").fetchall()
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("id", stored=True)
    sb.add_text_field("title")
    sb.add_text_field("body")
    schema = sb.build()
    index = tantivy.Index(schema)
    t0 = time.perf_counter()
    w = index.writer()
    for oid, title, body in rows:
        w.add_document(tantivy.Document(id=oid, title=title or "", body=body or ""))
    w.commit()
    index.reload()
    built = time.perf_counter() - t0
    searcher = index.searcher()
    q = index.parse_query(" ".join(terms), ["title", "body"])
    times = []
    for _ in range(runs + 3):
        t0 = time.perf_counter()
        searcher.search(q, 20)
        times.append(time.perf_counter() - t0)
    return median_ms(times[3:]), round(built, 1)


def refresh_rows(binary, root, docs, task, runs):
    """Ingest DOCS into a served copy of ROOT, with and without the snapshot file the ingest
    writes: per variant (ingest s, first FIND ms, first CONTEXT ms, second CONTEXT ms), each
    the median of `runs` rounds (a round measures each once: a fresh copy, a fresh server),
    with every round's figures beside it."""
    tmp = tempfile.mkdtemp(prefix="signalql-refresh-")
    try:
        # A snapshot file names its files by location and modification time, so the copy is
        # indexed once at the path every variant then uses, and restored there (copytree keeps
        # modification times) before each.
        here, pristine = os.path.join(tmp, "root"), os.path.join(tmp, "pristine")
        shutil.copytree(root, here)
        shutil.rmtree(os.path.join(here, "contexts"), ignore_errors=True)
        shutil.rmtree(os.path.join(here, "_signalql", "resident"), ignore_errors=True)
        run([binary, "index", "--data", here])
        shutil.copytree(here, pristine)
        rounds = {"refresh_snapshot": [], "refresh_in_memory": []}
        for _ in range(runs):
            for with_snapshot in (True, False):
                shutil.rmtree(here)
                shutil.copytree(pristine, here)
                # The copy's and the ingest's writes reach the disk before a query is timed,
                # so the kernel's writeback of them is not timed with it.
                os.sync()
                server = Server(binary, here)
                try:
                    server.query(f'CONTEXT FOR "{task}" BUDGET 8000 TOKENS')
                    cmd = [binary, "ingest", "objects", docs, "--data", here, "--now", INGEST_AT]
                    if not with_snapshot:
                        cmd.append("--no-snapshot")
                    t0 = time.perf_counter()
                    run(cmd)
                    ingest = time.perf_counter() - t0
                    os.sync()
                    find, _ = server.query(f'FIND OBJECT ABOUT "{task}" LIMIT 20')
                    first, _ = server.query(f'CONTEXT FOR "{task}" BUDGET 8001 TOKENS')
                    second, _ = server.query(f'CONTEXT FOR "{task}" BUDGET 8002 TOKENS')
                finally:
                    server.close()
                name = "refresh_snapshot" if with_snapshot else "refresh_in_memory"
                rounds[name].append({"ingest_s": ingest, "first_find_ms": find * 1000,
                                     "first_context_ms": first * 1000, "second_context_ms": second * 1000})
        rows = {}
        for name, each in rounds.items():
            rows[name] = {k: round(statistics.median(r[k] for r in each), 2 if k == "ingest_s" else 1)
                          for k in each[0]}
            rows[name]["rounds"] = [{k: round(v, 1) for k, v in r.items()} for r in each]
        return rows
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--objects", type=int, default=100_000)
    ap.add_argument("--vocabulary", choices=["topical", "zipf"], default="zipf")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ingest", help="a folder for `ingest objects` (the refresh rows)")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--refresh-runs", type=int, default=3, help="rounds of the refresh rows (median)")
    ap.add_argument("--no-tantivy", action="store_true")
    args = ap.parse_args()
    binary, root, runs = os.path.abspath(args.binary), os.path.abspath(args.data), args.runs
    task = TASKS[args.vocabulary]
    terms = task.split()
    out = {"objects": args.objects, "vocabulary": args.vocabulary, "load_before": os.getloadavg()}

    if not os.path.isdir(os.path.join(root, "objects")):
        t0 = time.perf_counter()
        run([binary, "gen", "objects", "--objects", str(args.objects), "--seed", str(args.seed),
             "--vocabulary", args.vocabulary, "--out", root])
        out["generate_s"] = round(time.perf_counter() - t0, 1)
    if not os.path.isdir(os.path.join(root, "_signalql", "resident")):
        t0 = time.perf_counter()
        run([binary, "index", "--data", root])
        out["index_s"] = round(time.perf_counter() - t0, 1)
    out["snapshot_bytes"] = du(os.path.join(root, "_signalql", "resident"))
    out["text_index_bytes"] = sum(du(os.path.join(root, t)) for t in ("index_files", "index_reps", "index_terms"))

    find = f'FIND OBJECT ABOUT "{task}" LIMIT 20'
    context = f'CONTEXT FOR "{task}" BUDGET 8000 TOKENS'
    settle()
    out["load_measured"] = os.getloadavg()
    out["find_warm_ms"] = bench(binary, root, find, runs)
    out["context_warm_ms"] = bench(binary, root, context, runs)
    out["find_cli_ms"] = wall([binary, "query", "--data", root, "--now", NOW, find], runs)
    out["context_cli_ms"] = wall([binary, "query", "--data", root, "--now", NOW, context], runs)

    server = Server(binary, root)
    try:
        time.sleep(0.2)
        before = server.memory_kib("VmRSS")
        _, anonymous_before = server.index_kib()
        _, bundle = server.query(context)
        out["resident_rss_added_mib"] = round((server.memory_kib("VmRSS") - before) / 1024, 1)
        # Of that, the index's own: its snapshot's resident pages and the anonymous memory
        # added (the rest is the binary's code and libraries paged in by the first statement).
        mapped, anonymous = server.index_kib()
        out["resident_index_own_mib"] = round((mapped + anonymous - anonymous_before) / 1024, 1)
        addressed = [server.query(f'CONTEXT FOR "{task}" BUDGET {8100 + i} TOKENS')[0] for i in range(runs)]
        out["context_new_address_ms"] = median_ms(addressed)
        explain = f"EXPLAIN CONTEXT {bundle['id']}"
        server.query(explain)
        times = []
        for _ in range(max(3, runs // 4)):
            dt, x = server.query(explain)
            times.append(dt)
        out["explain_ms"] = median_ms(times)
        out["explain_rejected"] = len(x.get("rejected", []))
        out["server_peak_rss_mib"] = round(server.memory_kib("VmHWM") / 1024, 1)
    finally:
        server.close()

    if args.ingest:
        out.update(refresh_rows(binary, root, args.ingest, task, args.refresh_runs))

    if not args.no_tantivy:
        import duckdb
        settle()
        ms, built = tantivy_find(duckdb.connect(), root, terms, runs)
        out["tantivy_find_ms"] = ms
        out["tantivy_build_s"] = built
        out["find_warm_vs_tantivy"] = round(out["find_warm_ms"] / ms, 2) if ms else None
    out["settled"] = SETTLED
    out["load_after"] = os.getloadavg()
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
