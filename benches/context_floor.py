"""What CONTEXT FOR must read per answer under the decided semantics, timed with DuckDB.

The bundle's `considered` and `excluded` counts and EXPLAIN CONTEXT's rejected list cover every
live object (signalql-v0.5-context.md, "Scope" and "EXPLAIN CONTEXT"), so an answer reads, for
every object: its latest revision as of T (trust, dependency state), whether it is tombstoned,
and whether it has a packable representation; lexical-v1 also tests every title (titles are not
indexed). This script times that read alone, and separately the postings of W8's task terms and
the links, on a `signalql gen objects` corpus indexed by `signalql index`.

Usage: benches/.venv/bin/python benches/context_floor.py ROOT   (after benches/compare made it)
"""
import statistics
import sys
import time

import duckdb

root = sys.argv[1]
T = "2026-06-13T00:00:00Z"
TERMS = ["parquet", "storage", "engine", "budget"]  # workloads.toml [context] task


def metadata(with_titles: bool) -> str:
    title = (
        f"sum(CASE WHEN regexp_matches(lower(l.title), '\\b({'|'.join(TERMS)})\\b') THEN 1 ELSE 0 END),"
        if with_titles
        else ""
    )
    return f"""
WITH rev AS (
  SELECT object_id, max(revision) r FROM '{root}/revisions/*.parquet'
  WHERE created_at <= TIMESTAMPTZ '{T}' GROUP BY object_id),
live AS (
  SELECT o.object_id, rev.r, o.title FROM '{root}/objects/*.parquet' o JOIN rev USING (object_id)
  WHERE o.tombstoned_at IS NULL OR o.tombstoned_at > TIMESTAMPTZ '{T}'),
r AS (
  SELECT v.object_id, v.trust, v.state FROM '{root}/revisions/*.parquet' v JOIN live l
  ON v.object_id = l.object_id AND v.revision = l.r),
p AS (
  SELECT object_id, revision,
    bool_or(media_type LIKE 'text/%' AND NOT list_contains(roles, 'secret')) packable
  FROM '{root}/index_reps/*.parquet' GROUP BY ALL)
SELECT r.trust, r.state, p.packable, {title} count(*)
FROM live l JOIN r USING (object_id) LEFT JOIN p ON p.object_id = l.object_id AND p.revision = l.r
GROUP BY ALL
"""


queries = {
    "metadata of every live object": metadata(False),
    "the same, with every title tested": metadata(True),
    "postings of the task's terms": f"""SELECT count(*) FROM (SELECT unnest(reps)
        FROM '{root}/index_terms/*.parquet' WHERE term IN ({', '.join(f"'{t}'" for t in TERMS)}))""",
    "links (the expansion's edges)": f"""SELECT count(*) FROM (SELECT DISTINCT object_id, entity_id
        FROM '{root}/links/*.parquet')""",
}
con = duckdb.connect()
for name, q in queries.items():
    times = []
    for _ in range(6):
        t0 = time.perf_counter()
        rows = con.execute(q).fetchall()
        times.append(time.perf_counter() - t0)
    print(f"{name}: median {statistics.median(times[1:]) * 1000:.1f} ms over 5 runs "
          f"(after 1 warm-up), {sum(r[-1] for r in rows)} rows counted")
