#!/usr/bin/env python3
"""Reads `POST /v1/query` of a running `signalql serve` in each form it answers (DESIGN.md §7,
"HTTP"): JSON, an Arrow IPC stream (pyarrow), CSV and Parquet (pyarrow), and `GET /health`.
Prints one JSON object of what each gave; tests/it/serve.rs starts the server and asserts.

    python3 tests/it/serve_arrow.py http://127.0.0.1:PORT
"""
import csv
import io
import json
import sys
import urllib.error
import urllib.request

import pyarrow as pa
import pyarrow.parquet as pq

BASE = sys.argv[1].rstrip("/")
TOP = ('FROM events WHERE event_name = "page_view" DURING LAST 7 d GROUP BY properties.path '
       'RETURN properties.path, count, avg(properties.amount) ORDER BY count DESC, properties.path ASC LIMIT 5')
NONE = 'FROM events WHERE event_name = "no_such_event" DURING LAST 7 d RETURN count_distinct(user_id)'
EMPTY = ('FROM events WHERE event_name = "no_such_event" DURING LAST 7 d GROUP BY properties.path '
         'RETURN properties.path, count')


def post(query, accept=None, params=None):
    headers = {"Content-Type": "application/json"}
    if accept:
        headers["Accept"] = accept
    body = {"query": query}
    if params is not None:
        body["params"] = params
    req = urllib.request.Request(BASE + "/v1/query", data=json.dumps(body).encode(),
                                 method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, r.headers.get("Content-Type"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read()


def table_rows(table):
    cols = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return [list(r) for r in zip(*cols)]


out = {}
status, _, body = post(TOP)
out["json"] = {"status": status, "body": json.loads(body)}

status, media, body = post(TOP, "application/vnd.apache.arrow.stream")
table = pa.ipc.open_stream(body).read_all()
out["arrow"] = {
    "status": status,
    "media": media,
    "names": table.column_names,
    "types": [str(t) for t in table.schema.types],
    "rows": table_rows(table),
    "signalql": json.loads(table.schema.metadata[b"signalql"]),
}

status, media, body = post(TOP, "application/vnd.apache.parquet")
table = pq.read_table(io.BytesIO(body))
out["parquet"] = {
    "status": status,
    "media": media,
    "names": table.column_names,
    "rows": table_rows(table),
    "has_signalql": b"signalql" in (table.schema.metadata or {}),
}

status, media, body = post(TOP, "text/csv")
out["csv"] = {"status": status, "media": media, "rows": list(csv.reader(io.StringIO(body.decode())))}

for name, q in [("none", NONE), ("empty", EMPTY)]:
    status, _, body = post(q, "application/vnd.apache.arrow.stream")
    table = pa.ipc.open_stream(body).read_all()
    out[name] = {"status": status, "names": table.column_names, "rows": table_rows(table)}

status, _, body = post('FIND OBJECT ABOUT "S3 datasets" LIMIT 3', "application/vnd.apache.arrow.stream")
table = pa.ipc.open_stream(body).read_all() if status == 200 else None
out["find"] = {"status": status, "rows": table.num_rows if table is not None else None,
               "body": None if table is not None else json.loads(body)}
status, _, body = post('CONTEXT FOR "checkout" BUDGET 500 TOKENS', "application/vnd.apache.arrow.stream")
out["bundle_as_arrow"] = {"status": status, "body": json.loads(body)}
status, _, body = post(TOP, "text/html")
out["html"] = {"status": status, "body": json.loads(body)}
status, _, body = post(TOP, "text/html;q=0.9, application/vnd.apache.arrow.stream")
out["listed"] = {"status": status, "media": _}

# TOP with its event, window and limit as $name parameters (docs/params.md).
PARAMETERISED = TOP.replace('"page_view"', "$event").replace("LAST 7 d", "LAST $days d").replace(
    "LIMIT 5", "LIMIT $n")
BOUND = {"event": "page_view", "days": 7, "n": 5}
status, _, body = post(PARAMETERISED, "application/vnd.apache.arrow.stream", BOUND)
table = pa.ipc.open_stream(body).read_all()
out["params_arrow"] = {"status": status, "rows": table_rows(table)}
status, _, body = post(PARAMETERISED, None, BOUND)
out["params_json"] = {"status": status, "body": json.loads(body)}
status, _, body = post(PARAMETERISED, None, {"event": "page_view", "days": 7})
out["params_missing"] = {"status": status, "body": json.loads(body)}

with urllib.request.urlopen(BASE + "/health") as r:
    out["health"] = {"status": r.status, "body": json.loads(r.read())}
print(json.dumps(out))
