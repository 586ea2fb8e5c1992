#!/usr/bin/env python3
"""Writes the caller-permission fixtures under tests/data/policy/ (committed, a few KB; run
again only to change them, then `python3 tests/golden/oracle.py tests/golden/policy/*.case`).

    pip install pyarrow duckdb
    python3 tests/data/policy/make.py

- root/: a multi-tenant dataset (events, users, entities, relationships, signals and the object
  tables) with a policy.toml of four principals (docs/policy.md) and a metrics.toml.
- as_acme_agent/, as_masked_analyst/, as_partner_agent/: the same data with each principal's policy applied BY
  HAND, in DuckDB SQL below (rows filtered, hidden columns NULL, rows naming hidden things
  dropped), and no policy.toml. The golden oracles run over these copies; the context tests
  compare the restricted principal's answers over root/ with the unrestricted answers over
  its copy. None of this uses signalql.

The data is built to tempt leaks: user u05 has events of two tenants (a funnel chain may not
cross them), account a1's partner g1 (globex, hidden from acme) is the only bridge to a3,
object o_borealis (a project acme may not read) is the only bridge to o_bridge_end and the
source o_funnels derives from, entity g1 is the only link between o_entity_a and o_entity_b,
o_policy carries the `policy` role acme excludes, and o_retention's newest revision is
untrusted (below acme's floor) while its first is verified. Account a4 moved from globex to
acme (an older globex version of it): it is visible to acme, and so are the `supplies` edges
a1 -> a4 -> a5 through it; partner_agent sees acme's entities and every relation but
`member_of`.
"""
import datetime as dt
import hashlib
import pathlib
import random
import shutil

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE / "root"
UTC = dt.timezone.utc
BASE = dt.datetime(2026, 6, 1, tzinfo=UTC)
US = pa.timestamp("us", tz="UTC")


def token(t):
    return "sha256:" + hashlib.sha256(t.encode()).hexdigest()


POLICY = f"""# Three principals over one multi-tenant dataset (tests/data/policy/make.py).
[principals.acme_agent]
tokens = ["{token('acme-token')}"]
[principals.acme_agent.filters]
events = 'properties.tenant = "acme"'
users = 'traits.tenant = "acme"'
entities = 'attributes.tenant = "acme"'
[principals.acme_agent.columns]
deny = ["events.session_id"]
[principals.acme_agent.context]
projects = ["atlas"]
exclude_roles = ["policy"]
min_trust = "inferred"
[principals.acme_agent.limits]
max_result_rows = 50
max_groups = 40
max_concurrent_requests = 2

[principals.masked_analyst]
tokens = ["{token('masked-token')}"]
tables = ["events", "users"]
[principals.masked_analyst.filters]
events = 'event_name != "internal_audit"'
[principals.masked_analyst.columns]
mask = ["events.user_id"]

[principals.admin]
tokens = ["{token('admin-token')}"]

[principals.partner_agent]
tokens = ["{token('partner-token')}"]
tables = ["entities", "relationships", "signals"]
[principals.partner_agent.filters]
entities = 'attributes.tenant = "acme"'
relationships = 'relation != "member_of"'
"""

METRICS = """[[metric]]
name = "revenue"
version = "1"
unit = "usd"
description = "Purchase revenue"
expression = "sum(properties.amount)"
filter = 'event_name = "purchase"'

[[metric]]
name = "sessions"
version = "1"
description = "Distinct sessions"
expression = "count_distinct(session_id)"

[[metric]]
name = "buyers"
version = "1"
description = "Distinct purchasing users"
expression = "count_distinct(user_id)"
filter = 'event_name = "purchase"'
"""

TENANT = {f"u{i:02d}": ("acme" if i <= 5 else "globex" if i <= 9 else "initech") for i in range(1, 13)}


def write(path, table):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def events():
    rng = random.Random(19)
    rows = []
    paths = ["/home", "/pricing", "/docs", "/admin"]
    for i in range(360):
        user = rng.choice(list(TENANT) + [None])
        tenant = TENANT.get(user, rng.choice(["acme", "globex"]))
        if user == "u05":  # a user of two tenants
            tenant = rng.choice(["acme", "globex"])
        name = rng.choices(["page_view", "signup", "purchase", "internal_audit"], [6, 2, 2, 1])[0]
        t = BASE + dt.timedelta(seconds=rng.randrange(0, 86400 * 10))
        rows.append({
            "event_name": name,
            "user_id": user,
            "session_id": None if user is None else f"s{user}-{rng.randrange(4)}",
            "timestamp": t,
            "properties": {
                "tenant": tenant,
                "path": rng.choice(paths),
                "plan": rng.choice(["free", "pro", None]),
                "amount": round(rng.uniform(5, 120), 2) if name == "purchase" else None,
            },
        })
    rows.sort(key=lambda r: r["timestamp"])
    schema = pa.schema([
        ("event_name", pa.string()), ("user_id", pa.string()), ("session_id", pa.string()),
        ("timestamp", US),
        ("properties", pa.struct([("tenant", pa.string()), ("path", pa.string()),
                                  ("plan", pa.string()), ("amount", pa.float64())])),
    ])
    half = len(rows) // 2
    write(ROOT / "events" / "part-0.parquet", pa.Table.from_pylist(rows[:half], schema=schema))
    write(ROOT / "events" / "part-1.parquet", pa.Table.from_pylist(rows[half:], schema=schema))
    users = [{"user_id": u, "traits": {"tenant": t, "plan": ["free", "pro"][int(u[1:]) % 2],
                                       "company": f"{t}-co"}} for u, t in TENANT.items()]
    write(ROOT / "users" / "part-0.parquet", pa.Table.from_pylist(users, schema=pa.schema([
        ("user_id", pa.string()),
        ("traits", pa.struct([("tenant", pa.string()), ("plan", pa.string()), ("company", pa.string())])),
    ])))


def graph():
    t = BASE - dt.timedelta(days=10)
    ents = [
        ("account", "a1", "acme", "Acme Rockets", "rockets and launch pads"),
        ("account", "a2", "acme", "Acme Anvils", "anvils for cartoons"),
        ("account", "a3", "acme", "Acme Labs", "laboratory rockets research"),
        ("account", "g1", "globex", "Globex Corp", "rockets and world domination"),
        ("account", "g2", "globex", "Globex Hammock", "hammocks"),
        ("ledger", "x1", "internal", "Audit ledger", "internal audit ledger of rockets"),
    ] + [("user", u, ten, f"user {u}", "a user") for u, ten in TENANT.items()] + [
        # Last, so that the signals drawn for the others stay as they were. a4 moved from
        # globex to acme: an older version of it is globex's.
        ("account", "a4", "acme", "Acme Freight", "freight rockets"),
        ("account", "a5", "acme", "Acme Depot", "rocket depot"),
    ]
    older = [("account", "a4", "globex", "Globex Freight", "freight", t - dt.timedelta(days=5))]
    write(ROOT / "entities" / "part-0.parquet", pa.Table.from_pylist([
        {"entity_type": e[0], "entity_id": e[1],
         "attributes": {"tenant": e[2], "name": e[3], "text": e[4]}, "updated_at": t}
        for e in ents
    ] + [
        {"entity_type": e[0], "entity_id": e[1],
         "attributes": {"tenant": e[2], "name": e[3], "text": e[4]}, "updated_at": e[5]}
        for e in older
    ], schema=pa.schema([
        ("entity_type", pa.string()), ("entity_id", pa.string()),
        ("attributes", pa.struct([("tenant", pa.string()), ("name", pa.string()), ("text", pa.string())])),
        ("updated_at", US),
    ])))
    rels = [("account", "a1", "partner_of", "account", "g1"),
            ("account", "g1", "partner_of", "account", "a3"),
            ("account", "a1", "partner_of", "account", "a2"),
            ("account", "g2", "partner_of", "account", "g1"),
            ("ledger", "x1", "audits", "account", "a2"),
            ("account", "a1", "supplies", "account", "a4"),
            ("account", "a4", "supplies", "account", "a5")]
    rels += [("user", u, "member_of", "account", {"acme": "a1", "globex": "g1", "initech": "g2"}[ten])
             for u, ten in TENANT.items()]
    write(ROOT / "relationships" / "part-0.parquet", pa.Table.from_pylist([
        {"src_type": r[0], "src_id": r[1], "relation": r[2], "dst_type": r[3], "dst_id": r[4],
         "created_at": t} for r in rels
    ], schema=pa.schema([
        ("src_type", pa.string()), ("src_id", pa.string()), ("relation", pa.string()),
        ("dst_type", pa.string()), ("dst_id", pa.string()), ("created_at", US),
    ])))
    rng = random.Random(23)
    sigs = []
    for e in ents:
        for day in (0, 3):
            p = round(rng.uniform(0, 1), 3)
            sigs.append({"entity_id": e[1], "name": "churn_risk", "value": "high" if p > 0.5 else "low",
                         "probability": p, "computed_at": BASE + dt.timedelta(days=day)})
    write(ROOT / "signals" / "part-0.parquet", pa.Table.from_pylist(sigs, schema=pa.schema([
        ("entity_id", pa.string()), ("name", pa.string()), ("value", pa.string()),
        ("probability", pa.float64()), ("computed_at", US),
    ])))


def objects():
    t0 = BASE - dt.timedelta(days=20)
    # id, project, kind, title, [(trust, roles, state, text)]
    docs = [
        ("o_funnels", "atlas", "doc", "Funnel conversion guide",
         [("verified", ["data"], "current", "A funnel counts users who convert through each step.")]),
        ("o_policy", "atlas", "doc", "Refund policy for funnels",
         [("authoritative", ["policy"], "current", "Refunds void the funnel conversion of a purchase.")]),
        ("o_retention", "atlas", "note", "Retention cohorts",
         [("verified", ["data"], "current", "Retention cohorts group users by signup week."),
          ("untrusted", ["data"], "current", "Retention cohorts were rewritten by an unknown bot.")]),
        ("o_bridge_end", "atlas", "doc", "Zebra crossing notes",
         [("verified", ["data"], "current", "Zebra crossings are painted white.")]),
        ("o_borealis", "borealis", "doc", "Borealis funnel conversion secrets",
         [("verified", ["data"], "current", "Quantum zeppelin funnel conversion at Borealis.")]),
        ("o_entity_a", "atlas", "doc", "Globex funnel account",
         [("verified", ["data"], "current", "Notes on the Globex funnel conversion account.")]),
        ("o_entity_b", "atlas", "doc", "Hammock review",
         [("inferred", ["data"], "current", "Hammocks reviewed for comfort.")]),
        ("o_low_trust", "atlas", "doc", "Rumoured funnel conversion trick",
         [("unknown", ["data"], "current", "A rumour about funnel conversion tricks.")]),
    ]
    objs, revs, reps = [], [], []
    for i, (oid, project, kind, title, revisions) in enumerate(docs):
        created = t0 + dt.timedelta(days=i)
        objs.append({"object_id": oid, "project": project, "kind": kind, "title": title,
                     "created_at": created, "tombstoned_at": None})
        for r, (trust, roles, state, text) in enumerate(revisions, start=1):
            at = created + dt.timedelta(days=r - 1)
            revs.append({"object_id": oid, "revision": r, "created_at": at, "origin": "import",
                         "trust": trust, "validation": "valid", "roles": roles, "state": state})
            for name, content, rep_roles in (("summary", title, []), ("text", text, [])):
                reps.append({"object_id": oid, "revision": r, "name": name, "media_type": "text/markdown",
                             "content": content, "content_ref": None,
                             "content_hash": "sha256:" + hashlib.sha256(content.encode()).hexdigest(),
                             "tokens": None, "roles": rep_roles})
    # A representation of o_funnels the acme principal may not see (its own `policy` role).
    extra = "Internal escalation policy for funnel conversion disputes."
    reps.append({"object_id": "o_funnels", "revision": 1, "name": "escalation", "media_type": "text/markdown",
                 "content": extra, "content_ref": None,
                 "content_hash": "sha256:" + hashlib.sha256(extra.encode()).hexdigest(),
                 "tokens": None, "roles": ["policy"]})
    write(ROOT / "objects" / "part-0.parquet", pa.Table.from_pylist(objs, schema=pa.schema([
        ("object_id", pa.string()), ("project", pa.string()), ("kind", pa.string()),
        ("title", pa.string()), ("created_at", US), ("tombstoned_at", US),
    ])))
    write(ROOT / "revisions" / "part-0.parquet", pa.Table.from_pylist(revs, schema=pa.schema([
        ("object_id", pa.string()), ("revision", pa.int64()), ("created_at", US), ("origin", pa.string()),
        ("trust", pa.string()), ("validation", pa.string()), ("roles", pa.list_(pa.string())),
        ("state", pa.string()),
    ])))
    write(ROOT / "representations" / "part-0.parquet", pa.Table.from_pylist(reps, schema=pa.schema([
        ("object_id", pa.string()), ("revision", pa.int64()), ("name", pa.string()),
        ("media_type", pa.string()), ("content", pa.large_string()), ("content_ref", pa.string()),
        ("content_hash", pa.string()), ("tokens", pa.int64()), ("roles", pa.list_(pa.string())),
    ])))
    links = [("o_borealis", 1, "object", "o_bridge_end", "mentions"),
             ("o_funnels", 1, "object", "o_borealis", "mentions"),
             ("o_entity_a", 1, "account", "g1", "about"),
             ("o_entity_b", 1, "account", "g1", "about"),
             ("o_funnels", 1, "account", "a1", "about"),
             ("o_retention", 1, "account", "a1", "about")]
    write(ROOT / "links" / "part-0.parquet", pa.Table.from_pylist([
        {"object_id": l[0], "revision": l[1], "entity_type": l[2], "entity_id": l[3], "relation": l[4]}
        for l in links
    ], schema=pa.schema([
        ("object_id", pa.string()), ("revision", pa.int64()), ("entity_type", pa.string()),
        ("entity_id", pa.string()), ("relation", pa.string()),
    ])))
    derivs = [("o_funnels", 1, "summarizes", "o_borealis", 1),
              ("o_retention", 2, "revises", "o_retention", 1)]
    write(ROOT / "derivations" / "part-0.parquet", pa.Table.from_pylist([
        {"object_id": d[0], "revision": d[1], "relation": d[2], "source_object_id": d[3],
         "source_revision": d[4]} for d in derivs
    ], schema=pa.schema([
        ("object_id", pa.string()), ("revision", pa.int64()), ("relation", pa.string()),
        ("source_object_id", pa.string()), ("source_revision", pa.int64()),
    ])))


def copy(principal, tables):
    """The principal's view of root/, made by DuckDB from the SQL in `tables` (table -> query
    over views of root/'s tables)."""
    out = HERE / f"as_{principal}"
    shutil.rmtree(out, ignore_errors=True)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for t in ["events", "users", "entities", "relationships", "signals", "objects", "revisions",
              "representations", "links", "derivations"]:
        con.execute(f"CREATE VIEW raw_{t} AS SELECT * FROM read_parquet('{ROOT / t / '*.parquet'}')")
    for t, sql in tables.items():
        (out / t).mkdir(parents=True)
        con.execute(f"COPY ({sql}) TO '{out / t / 'part-0.parquet'}' (FORMAT parquet)")
    shutil.copy(ROOT / "signalql.toml", out / "signalql.toml")
    shutil.copy(ROOT / "metrics.toml", out / "metrics.toml")


def copies():
    # acme_agent, by hand (docs/policy.md says what each rule hides). A hidden entity is one
    # none of whose rows is acme's (a4 moved to acme: its older globex row does not hide it).
    hidden_entities = ("SELECT entity_type || chr(31) || entity_id AS k FROM raw_entities EXCEPT "
                       "SELECT entity_type || chr(31) || entity_id FROM raw_entities "
                       "WHERE attributes.tenant = 'acme'")
    visible_entity_ids = "SELECT entity_id FROM raw_entities WHERE attributes.tenant = 'acme'"
    hidden_entity_ids = "SELECT entity_id FROM raw_entities WHERE attributes.tenant IS DISTINCT FROM 'acme'"
    visible_revisions = ("SELECT * FROM raw_revisions WHERE trust IN ('inferred', 'verified', 'authoritative') "
                         "AND NOT list_contains(roles, 'policy')")
    hidden_objects = ("SELECT object_id FROM raw_objects WHERE project IS DISTINCT FROM 'atlas' "
                      f"OR object_id NOT IN (SELECT object_id FROM ({visible_revisions}))")
    copy("acme_agent", {
        "events": "SELECT event_name, user_id, CAST(NULL AS VARCHAR) AS session_id, timestamp, properties "
                  "FROM raw_events WHERE properties.tenant = 'acme' ORDER BY timestamp",
        "users": "SELECT * FROM raw_users WHERE traits.tenant = 'acme'",
        "entities": "SELECT * FROM raw_entities WHERE attributes.tenant = 'acme'",
        "relationships": f"SELECT * FROM raw_relationships WHERE src_type || chr(31) || src_id NOT IN ({hidden_entities}) "
                         f"AND dst_type || chr(31) || dst_id NOT IN ({hidden_entities})",
        "signals": f"SELECT * FROM raw_signals WHERE entity_id NOT IN ({hidden_entity_ids}) "
                   f"OR entity_id IN ({visible_entity_ids})",
        "objects": "SELECT * FROM raw_objects WHERE project = 'atlas'",
        "revisions": visible_revisions,
        "representations": "SELECT * FROM raw_representations WHERE NOT list_contains(roles, 'policy')",
        "links": f"SELECT * FROM raw_links WHERE object_id NOT IN ({hidden_objects}) "
                 f"AND NOT (entity_type = 'object' AND entity_id IN ({hidden_objects})) "
                 f"AND entity_type || chr(31) || entity_id NOT IN ({hidden_entities})",
        "derivations": f"SELECT * FROM raw_derivations WHERE object_id NOT IN ({hidden_objects}) "
                       f"AND source_object_id NOT IN ({hidden_objects})",
    })
    # partner_agent: acme's entities, and no member_of edge.
    copy("partner_agent", {
        "entities": "SELECT * FROM raw_entities WHERE attributes.tenant = 'acme'",
        "relationships": f"SELECT * FROM raw_relationships WHERE src_type || chr(31) || src_id NOT IN ({hidden_entities}) "
                         f"AND dst_type || chr(31) || dst_id NOT IN ({hidden_entities}) "
                         "AND relation != 'member_of'",
        "signals": f"SELECT * FROM raw_signals WHERE entity_id NOT IN ({hidden_entity_ids}) "
                   f"OR entity_id IN ({visible_entity_ids})",
    })
    copy("masked_analyst", {
        "events": "SELECT event_name, CAST(NULL AS VARCHAR) AS user_id, session_id, timestamp, properties "
                  "FROM raw_events WHERE event_name != 'internal_audit' ORDER BY timestamp",
        "users": "SELECT * FROM raw_users",
    })


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    events()
    graph()
    objects()
    (ROOT / "signalql.toml").write_text('now = "2026-06-11T00:00:00Z"\n')
    (ROOT / "metrics.toml").write_text(METRICS)
    (ROOT / "policy.toml").write_text(POLICY)
    copies()


if __name__ == "__main__":
    main()
