#!/usr/bin/env python3
"""Drives a running `signalql serve` the way its clients do: plain HTTP (http.client, urllib)
and the official MCP Python SDK (mcp 2.x) over streamable HTTP. Prints one JSON object of what
each call got; tests/it/serve.rs starts the server over tests/data/policy/root and asserts on it.

    python3 tests/it/serve_client.py http://127.0.0.1:PORT
"""
import asyncio
import http.client
import json
import sys
import urllib.error
import urllib.parse
import urllib.request

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

BASE = sys.argv[1].rstrip("/")
TOKENS = {"acme": "acme-token", "admin": "admin-token", "masked": "masked-token"}
COUNT = "FROM events DURING LAST 30 d GROUP BY properties.tenant RETURN properties.tenant, count"


def post(path, body, token=None, headers=None):
    h = {"Content-Type": "application/json"}
    if token:
        h["Authorization"] = f"Bearer {token}"
    h.update(headers or {})
    req = urllib.request.Request(BASE + path, data=body, method="POST", headers=h)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return {"status": r.status, "body": json.loads(r.read())}
    except urllib.error.HTTPError as e:
        raw = e.read()
        return {"status": e.code, "body": json.loads(raw) if raw else None}


def query(text, token=None):
    return post("/v1/query", json.dumps({"query": text}).encode(), token)


def declared_oversize(path, token):
    """Headers announcing an 11 MiB body, and no body: the answer comes from the header."""
    url = urllib.parse.urlparse(BASE)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    conn.putrequest("POST", path)
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Authorization", f"Bearer {token}")
    conn.putheader("Content-Length", str(11 << 20))
    conn.endheaders()
    r = conn.getresponse()
    out = {"status": r.status, "body": json.loads(r.read() or b"null")}
    conn.close()
    return out


async def concurrent(requests):
    """`requests` (text, token) at once, each on its own thread."""
    return await asyncio.gather(*(asyncio.to_thread(query, q, t) for q, t in requests))


async def mcp_session(token, calls):
    """One MCP client session with `token`: the tool list, then each (tool, arguments)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with create_mcp_http_client(headers=headers) as client:
        async with streamable_http_client(BASE + "/mcp", http_client=client) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = sorted(t.name for t in (await session.list_tools()).tools)
                results = []
                for name, args in calls:
                    r = await session.call_tool(name, args)
                    text = r.content[0].text if r.content else None
                    results.append({"is_error": bool(r.is_error), "json": json.loads(text) if text else None})
                return {"tools": tools, "results": results}


async def mcp_refused(token):
    """An MCP session with a bad token: what the client raised."""
    try:
        await mcp_session(token, [])
        return {"raised": None}
    except BaseException as e:  # the SDK raises an exception group around the HTTP error
        return {"raised": type(e).__name__, "text": repr(e)[:2000]}


async def main():
    out = {}
    out["no_token"] = query(COUNT)
    out["bad_token"] = query(COUNT, "not-a-token")
    out["acme"] = query(COUNT, TOKENS["acme"])
    out["admin"] = query(COUNT, TOKENS["admin"])
    out["admin_again"] = query(COUNT, TOKENS["admin"])
    out["masked"] = query("FROM events DURING LAST 30 d RETURN count_distinct(user_id)", TOKENS["masked"])
    out["acme_denied"] = query("FROM events DURING LAST 30 d GROUP BY session_id RETURN session_id, count", TOKENS["acme"])
    out["acme_parse_error"] = query("FROM events RETURN", TOKENS["acme"])
    out["bad_body"] = post("/v1/query", b'{"q": 1}', TOKENS["acme"])
    out["not_json"] = post("/v1/query", b"FROM events RETURN count", TOKENS["acme"])
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "serve_client", "version": "1"}}}
    out["mcp_http_no_token"] = post("/mcp", json.dumps(initialize).encode(), None,
                                    {"Accept": "application/json, text/event-stream"})
    out["oversize_declared"] = declared_oversize("/v1/query", TOKENS["acme"])
    out["oversize_mcp"] = declared_oversize("/mcp", TOKENS["acme"])
    out["context"] = query('CONTEXT FOR "funnel conversion" MAX DEPTH 3', TOKENS["acme"])
    # Two principals at once: acme (max_concurrent_requests = 2) sends four, admin two.
    burst = [(COUNT, TOKENS["acme"])] * 4 + [(COUNT, TOKENS["admin"])] * 2
    out["burst"] = await concurrent(burst)
    out["after_burst"] = query(COUNT, TOKENS["acme"])
    out["mcp_acme"] = await mcp_session(TOKENS["acme"], [
        ("query", {"query": COUNT}),
        ("describe", {"target": "events"}),
        ("context", {"task": "funnel conversion", "clauses": "MAX DEPTH 3"}),
        ("query", {"query": "FROM events RETURN count_distinct(session_id)"}),
    ])
    out["mcp_admin"] = await mcp_session(TOKENS["admin"], [("query", {"query": COUNT})])
    out["mcp_bad_token"] = await mcp_refused("not-a-token")
    out["mcp_no_token"] = await mcp_refused(None)
    out["still_serving"] = query(COUNT, TOKENS["admin"])
    print(json.dumps(out))


asyncio.run(main())
