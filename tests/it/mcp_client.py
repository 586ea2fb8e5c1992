#!/usr/bin/env python3
"""Drives `signalql mcp` over stdio with the official MCP Python SDK (mcp 2.x), as an agent's
client does: initialize, tools/list, then a call of every tool. The SDK checks each tool's
`structuredContent` against the tool's `outputSchema` itself (a result that does not match
raises); this script also validates each one with jsonschema, and compares it with the text
content. Prints one JSON object; tests/it/mcp.rs runs it and asserts on it. The server is
started with the command line the repository's server.json (the MCP registry's format) gives,
its one required argument, --data, being DATASET_ROOT.

    python3 tests/it/mcp_client.py SIGNALQL_BINARY DATASET_ROOT SERVER_JSON
"""
import asyncio
import json
import sys

import jsonschema
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

BINARY, ROOT, SERVER_JSON = sys.argv[1], sys.argv[2], sys.argv[3]
VIEWS = 'FROM events WHERE event_name = "page_view" DURING LAST 7 d RETURN count'


def launch_args():
    """The arguments server.json's package gives: its positional values, and each required
    named argument (only --data) with ROOT."""
    with open(SERVER_JSON) as f:
        package = json.load(f)["packages"][0]
    args = []
    for a in package["packageArguments"]:
        if a["type"] == "positional":
            args.append(a["value"])
        elif a.get("isRequired"):
            args += [a["name"], ROOT]
    return args


async def main():
    args = launch_args()
    params = StdioServerParameters(command=BINARY, args=args)
    out = {"tools": {}, "calls": [], "args": args}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            schemas = {}
            for t in listed.tools:
                a = t.annotations
                out["tools"][t.name] = {
                    "read_only": a.read_only_hint if a else None,
                    "destructive": a.destructive_hint if a else None,
                    "idempotent": a.idempotent_hint if a else None,
                    "open_world": a.open_world_hint if a else None,
                    "output_schema_type": (t.output_schema or {}).get("type"),
                }
                schemas[t.name] = t.output_schema
                # The schema is not vacuous: an empty object is not an answer.
                try:
                    jsonschema.validate({}, t.output_schema)
                    out["tools"][t.name]["rejects_empty"] = False
                except jsonschema.ValidationError:
                    out["tools"][t.name]["rejects_empty"] = True

            async def call(tool, args):
                r = await session.call_tool(tool, args)
                s = r.structured_content
                entry = {"tool": tool, "is_error": bool(r.is_error), "structured": s is not None}
                if s is not None:
                    jsonschema.validate(s, schemas[tool])
                    entry["valid"] = True
                    entry["text_is_structured"] = json.loads(r.content[0].text) == s
                    entry["keys"] = sorted(s)
                else:
                    entry["text"] = r.content[0].text
                out["calls"].append(entry)
                return s

            # The language, taught: the grammar resource and the primer prompt.
            resources = await session.list_resources()
            out["resources"] = [str(r.uri) for r in resources.resources]
            grammar = await session.read_resource("signalql://grammar")
            text = grammar.contents[0].text
            out["grammar"] = {"chars": len(text), "examples": text.count("```signalql")}
            prompts = await session.list_prompts()
            out["prompts"] = [
                {"name": p.name, "arguments": [a.name for a in (p.arguments or [])]}
                for p in prompts.prompts
            ]
            primer = await session.get_prompt("signalql-primer", {"question": "Top pages?"})
            primer_text = primer.messages[0].content.text
            out["primer"] = {
                "has_reference": text in primer_text,
                "has_question": "Top pages?" in primer_text,
                "has_catalogue": "- events (table)" in primer_text,
            }

            await call("query", {"query": VIEWS})
            await call("query", {"query": "DESCRIBE events"})
            await call("query", {"query": 'FIND OBJECT ABOUT "object storage" LIMIT 3'})
            bundle = await call("query", {"query": 'CONTEXT FOR "object storage" BUDGET 500 TOKENS'})
            await call("query", {"query": f"EXPLAIN CONTEXT {bundle['id']}"})
            await call("query", {"query": f"EXPLAIN {VIEWS}"})
            await call("describe", {"target": "events"})
            b = await call("context", {"task": "object storage", "budget": 400})
            await call("explain_context", {"address": b["id"]})
            await call("explain", {"query": VIEWS, "analyze": True})
            await call("simulate", {"query": VIEWS})
            await call("stats", {})
            await call("format", {"query": "from events return count"})
            await call("watch", {"watch": f"WATCH ({VIEWS}) WHEN count > 0", "max_polls": 1})
            # A failure is a tool error with the engine's error object as its text.
            await call("query", {"query": "FROM events RETURN"})
    print(json.dumps(out))


asyncio.run(main())
