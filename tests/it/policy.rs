//! Caller permissions beyond the analytics the golden corpus covers (tests/golden/policy/):
//! FIND OBJECT, CONTEXT FOR and its expansion, EXPLAIN CONTEXT of bundles other principals
//! built, DESCRIBE, WATCH, and the refusals. The expectation of every answer of the restricted
//! principal `acme_agent` over tests/data/policy/root is the unrestricted answer over
//! tests/data/policy/as_acme_agent, the copy of the data with acme's policy applied by hand in
//! DuckDB (tests/data/policy/make.py): the same rows, the same bundle address. Besides, no
//! answer may name what acme may not see: the ids and words below occur only in hidden rows.

use std::path::{Path, PathBuf};

use serde_json::Value;
use signalql::{Answer, Engine, EngineOptions, Error};

/// Object ids and entity ids acme may not see, and words only hidden text holds.
const HIDDEN: &[&str] = &[
    "o_borealis",
    "o_policy",
    "o_low_trust",
    "Quantum",
    "escalation",
    "rewritten",
    "g1",
    "x1",
    "Globex Corp",
    "Globex Freight",
];

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    copy: PathBuf,
}

/// Both datasets in a temporary folder (their context stores are written).
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/policy");
    let (root, copy) = (dir.path().join("root"), dir.path().join("copy"));
    crate::common::copy_dir(&src.join("root"), &root);
    crate::common::copy_dir(&src.join("as_acme_agent"), &copy);
    Fixture {
        _dir: dir,
        root,
        copy,
    }
}

fn engine(root: &Path, principal: Option<&str>) -> Engine {
    Engine::open_with(
        root,
        EngineOptions {
            principal: principal.map(String::from),
            ..Default::default()
        },
    )
    .unwrap()
}

async fn answer(e: &Engine, q: &str) -> Result<Value, Error> {
    Ok(match e.answer(q).await? {
        Answer::Envelope(x) => serde_json::to_value(&*x).unwrap(),
        Answer::Bundle(b) => serde_json::to_value(&*b).unwrap(),
        Answer::Explanation(x) => serde_json::to_value(&*x).unwrap(),
        Answer::Plan(p) => serde_json::to_value(&*p).unwrap(),
    })
}

/// `v` without what legitimately differs between the two datasets: where the bundle is stored,
/// scan costs, the principal's own limits, the files' declared nullability (DESCRIBE's
/// `nullable` of a top-level column: DuckDB wrote the copy), and `access_filtered` (checked on
/// its own).
fn comparable(mut v: Value) -> Value {
    fn drop_nullable(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("nullable");
                m.values_mut().for_each(drop_nullable);
            }
            Value::Array(a) => a.iter_mut().for_each(drop_nullable),
            _ => {}
        }
    }
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "stored_in",
            "cost_estimate",
            "access_filtered",
            "compiled_sql_digest",
            "limits",
            "limit_applied",
        ] {
            m.remove(k);
        }
    }
    drop_nullable(&mut v);
    v
}

fn assert_no_leak(what: &str, v: &Value) {
    // Where the bundle is stored is the caller's own folder, a temporary one whose random
    // name may hold a hidden token (".tmphx10RL" holds "x1").
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("stored_in");
    }
    let text = v.to_string();
    for h in HIDDEN {
        assert!(!text.contains(h), "{what} names hidden {h:?}: {text}");
    }
}

/// acme over root/ and the unrestricted engine over the copy answer `q` alike.
async fn same_as_copy(f: &Fixture, q: &str) -> Value {
    let acme = answer(&engine(&f.root, Some("acme_agent")), q)
        .await
        .unwrap_or_else(|e| panic!("{q}: {e}"));
    let by_hand = answer(&engine(&f.copy, None), q).await.unwrap();
    assert_eq!(acme["metadata"]["access_filtered"], true, "{q}");
    assert_eq!(comparable(acme.clone()), comparable(by_hand), "{q}");
    assert_no_leak(q, &acme);
    acme
}

#[tokio::test]
async fn find_object_sees_only_visible_objects() {
    let f = fixture();
    // The hidden object's own words find nothing; visible words find only visible objects.
    let q = same_as_copy(&f, r#"FIND OBJECT ABOUT "quantum zeppelin""#).await;
    assert_eq!(q["rows"], serde_json::json!([]));
    let q = same_as_copy(&f, r#"FIND OBJECT ABOUT "funnel conversion""#).await;
    let ids: Vec<&str> = q["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[0].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["o_funnels", "o_entity_a"]);
    // The representation with the excluded role is not read.
    let q = same_as_copy(&f, r#"FIND OBJECT ABOUT "escalation disputes""#).await;
    assert_eq!(q["rows"], serde_json::json!([]));
    // The newest revision is below the trust floor: the verified first one answers.
    let q = same_as_copy(&f, r#"FIND OBJECT ABOUT "retention cohorts""#).await;
    assert_eq!(q["rows"][0][0], "o_retention");
    assert_eq!(q["rows"][0][1], 1);
    same_as_copy(&f, r#"FIND OBJECT ABOUT "rumour tricks""#).await;
    same_as_copy(&f, "FIND OBJECT (doc)").await;
    // The unrestricted principal finds the hidden ones (so the data does tempt).
    let admin = answer(
        &engine(&f.root, Some("admin")),
        r#"FIND OBJECT ABOUT "quantum zeppelin""#,
    )
    .await
    .unwrap();
    assert_eq!(admin["rows"][0][0], "o_borealis");
}

#[tokio::test]
async fn context_for_neither_shows_nor_bridges_through_hidden_objects() {
    let f = fixture();
    for q in [
        // o_bridge_end is reachable only through o_borealis; o_funnels derives from it.
        r#"CONTEXT FOR "funnel conversion" MAX DEPTH 3 WITH EVIDENCE"#,
        // o_entity_b is reachable only through the hidden account g1.
        r#"CONTEXT FOR "Globex funnel account" MAX DEPTH 2 WITH EVIDENCE"#,
        r#"CONTEXT FOR "quantum zeppelin borealis""#,
        r#"CONTEXT FOR "retention cohorts" PREFER VERIFIED"#,
        r#"CONTEXT FOR "refund policy funnels" BUDGET 40 TOKENS"#,
        r#"CONTEXT FOR "zebra crossing" MAX DEPTH 2 WITH EVIDENCE"#,
        // The entity form: a1's record without its partner g1 (hidden), nor what g1 reaches.
        r#"CONTEXT FOR entity(account, "a1") MAX DEPTH 2 WITH EVIDENCE"#,
    ] {
        // The same bundle as over the copy (so no path through a hidden node), naming
        // nothing hidden.
        same_as_copy(&f, q).await;
    }
    // g1 itself has no record for acme and reaches nothing (the answer names g1 only
    // because the query does).
    let q = r#"CONTEXT FOR entity(account, "g1") MAX DEPTH 2"#;
    let acme = answer(&engine(&f.root, Some("acme_agent")), q)
        .await
        .unwrap();
    let by_hand = answer(&engine(&f.copy, None), q).await.unwrap();
    assert_eq!(comparable(acme.clone()), comparable(by_hand));
    assert_eq!(acme["items"], serde_json::json!([]));
    // acme may explain its own entity bundle: it reads the same record.
    let acme = engine(&f.root, Some("acme_agent"));
    let b = answer(&acme, r#"CONTEXT FOR entity(account, "a1") MAX DEPTH 2"#)
        .await
        .unwrap();
    assert_eq!(b["items"][0]["object"], "entity://account/a1", "{b}");
    let id = b["id"].as_str().unwrap();
    let x = answer(&acme, &format!("EXPLAIN CONTEXT {id}"))
        .await
        .unwrap();
    assert_eq!(x["items"][0]["object"], "entity://account/a1");
    assert_no_leak("EXPLAIN CONTEXT of an entity bundle", &x);
    // The unrestricted principal's record of a1 names its partner g1.
    let admin = answer(
        &engine(&f.root, Some("admin")),
        r#"CONTEXT FOR entity(account, "a1") MAX DEPTH 2"#,
    )
    .await
    .unwrap();
    let record = admin["items"][0]["content"].as_str().unwrap();
    assert!(record.contains("account:g1"), "{record}");
    // The unrestricted principal does reach them through the hidden nodes.
    let admin = answer(
        &engine(&f.root, Some("admin")),
        r#"CONTEXT FOR "Globex funnel account" MAX DEPTH 2"#,
    )
    .await
    .unwrap();
    assert!(admin.to_string().contains("account:g1"), "{admin}");
}

#[tokio::test]
async fn using_a_hidden_project_is_refused_and_other_tables_absent() {
    let f = fixture();
    let acme = engine(&f.root, Some("acme_agent"));
    let e = answer(&acme, r#"CONTEXT FOR "funnel" USING PROJECT "borealis""#)
        .await
        .unwrap_err();
    assert_eq!(e.to_json()["error"]["code"], "permission_denied");
    assert!(e.to_string().contains("borealis"), "{e}");
    // Named in FIND OBJECT's WHERE (=, IN, NOT IN, under NOT), and through EXPLAIN, it is
    // refused the same way, at the predicate naming it.
    for (q, column) in [
        (r#"FIND OBJECT WHERE project = "borealis""#, 19),
        (
            r#"FIND OBJECT WHERE kind = "doc" AND NOT project IN ("atlas", "borealis")"#,
            40,
        ),
        (
            r#"FIND OBJECT ABOUT "funnel" WHERE project != "borealis""#,
            34,
        ),
        (r#"EXPLAIN FIND OBJECT WHERE project = "borealis""#, 27),
    ] {
        let e = answer(&acme, q).await.unwrap_err();
        assert_eq!(e.to_json()["error"]["code"], "permission_denied", "{q}");
        assert!(e.to_string().contains("borealis"), "{q}: {e}");
        assert_eq!(
            e.to_json()["error"]["column"],
            column,
            "{q}: {}",
            e.to_json()
        );
    }
    // Its own project is fine, and the unrestricted principal names any.
    answer(&acme, r#"CONTEXT FOR "funnel" USING PROJECT "atlas""#)
        .await
        .unwrap();
    let own = answer(&acme, r#"FIND OBJECT WHERE project = "atlas""#)
        .await
        .unwrap();
    assert!(!own["rows"].as_array().unwrap().is_empty(), "{own}");
    let admin = engine(&f.root, Some("admin"));
    let theirs = answer(&admin, r#"FIND OBJECT WHERE project = "borealis""#)
        .await
        .unwrap();
    assert_eq!(theirs["rows"][0][0], "o_borealis", "{theirs}");
    // masked_analyst reads events and users only.
    let masked = engine(&f.root, Some("masked_analyst"));
    for q in [r#"FIND OBJECT ABOUT "funnel""#, r#"CONTEXT FOR "funnel""#] {
        let e = answer(&masked, q).await.unwrap_err();
        assert_eq!(e.to_json()["error"]["code"], "permission_denied", "{q}");
        assert!(e.to_string().contains("objects"), "{e}");
    }
}

#[tokio::test]
async fn explain_context_shows_only_bundles_the_caller_could_see() {
    let f = fixture();
    let admin = engine(&f.root, Some("admin"));
    let acme = engine(&f.root, Some("acme_agent"));
    // A bundle whose items include hidden objects: for acme it is not there, with the very
    // error of an address never stored.
    let full = answer(&admin, r#"CONTEXT FOR "funnel conversion" MAX DEPTH 3"#)
        .await
        .unwrap();
    let id = full["id"].as_str().unwrap();
    assert!(full.to_string().contains("o_borealis"));
    let hidden = answer(&acme, &format!("EXPLAIN CONTEXT {id}"))
        .await
        .unwrap_err();
    let never = "context://ctx_00000000000000000000000000000000";
    let absent = answer(&acme, &format!("EXPLAIN CONTEXT {never}"))
        .await
        .unwrap_err();
    let shape = |e: &Error, addr: &str| {
        let mut j = e.to_json();
        let m = j["error"]["message"]
            .as_str()
            .unwrap()
            .replace(addr, "ADDR");
        j["error"]["message"] = Value::String(m);
        j
    };
    assert_eq!(shape(&hidden, id), shape(&absent, never));
    assert_eq!(hidden.to_json()["error"]["code"], "unknown_context");
    // admin still sees it whole.
    let x = answer(&admin, &format!("EXPLAIN CONTEXT {id}"))
        .await
        .unwrap();
    assert_eq!(x["context"], id);
    // The stored bundle itself (the MCP `context://` resource) is shown as EXPLAIN CONTEXT is:
    // whole to admin, and to acme with the error of an address never stored.
    let stored = serde_json::to_value(admin.stored_bundle(id).await.unwrap()).unwrap();
    assert_eq!(stored["items"], full["items"]);
    let hidden = acme.stored_bundle(id).await.unwrap_err();
    let absent = acme.stored_bundle(never).await.unwrap_err();
    assert_eq!(shape(&hidden, id), shape(&absent, never));
    // A bundle whose one item acme may see, and whose rejections are mostly hidden objects:
    // acme sees the item and only the visible rejections.
    let one = answer(
        &admin,
        r#"CONTEXT FOR "funnel conversion guide" PREFER REPRESENTATION text MAX OBJECTS 1"#,
    )
    .await
    .unwrap();
    assert_eq!(one["items"][0]["object"], "object://o_funnels@1");
    let id = one["id"].as_str().unwrap();
    let whole = answer(&admin, &format!("EXPLAIN CONTEXT {id}"))
        .await
        .unwrap();
    assert!(whole["rejected"].to_string().contains("o_borealis"));
    let x = answer(&acme, &format!("EXPLAIN CONTEXT {id}"))
        .await
        .unwrap();
    assert_no_leak("EXPLAIN CONTEXT", &x);
    let mine = serde_json::to_value(acme.stored_bundle(id).await.unwrap()).unwrap();
    assert_eq!(mine["items"], one["items"]);
    let rejected: Vec<&str> = x["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["object"].as_str().unwrap())
        .collect();
    // o_bridge_end is an atlas object acme may see (admin reached it through o_borealis).
    assert_eq!(
        rejected,
        ["object://o_bridge_end@1", "object://o_entity_a@1"],
        "{x}"
    );
    assert_eq!(x["phases"], serde_json::json!({"packed": 1, "rejected": 2}));
    // acme's own bundle explains for acme, and equals the one built over the copy.
    let own = same_as_copy(&f, r#"CONTEXT FOR "funnel conversion" MAX DEPTH 3"#).await;
    let x = answer(
        &acme,
        &format!("EXPLAIN CONTEXT {}", own["id"].as_str().unwrap()),
    )
    .await
    .unwrap();
    assert_no_leak("EXPLAIN CONTEXT", &x);
}

#[tokio::test]
async fn describe_shows_only_what_the_caller_may_see() {
    let f = fixture();
    for target in ["entities", "signals", "relationships", "entity(account)"] {
        same_as_copy(&f, &format!("DESCRIBE {target}")).await;
    }
    let acme = engine(&f.root, Some("acme_agent"));
    let events = answer(&acme, "DESCRIBE events").await.unwrap();
    assert_no_leak("DESCRIBE events", &events);
    let text = events.to_string();
    assert!(
        !text.contains("session_id"),
        "a denied column is not described"
    );
    assert!(text.contains("properties.tenant"));
    // Its row count is acme's: 126 events (DuckDB over the copy).
    assert_eq!(events["rows"][0][7], 126, "{}", events["rows"][0]);
    let e = answer(&acme, "DESCRIBE entity(ledger)").await.unwrap_err();
    let missing = answer(&acme, "DESCRIBE entity(spaceship)")
        .await
        .unwrap_err();
    assert_eq!(
        e.to_json()["error"]["code"],
        missing.to_json()["error"]["code"]
    );
    assert!(!e.to_string().contains("ledger,"), "{e}");
    // Every record of the dataset, for a principal of two tables: only events.
    let masked = engine(&f.root, Some("masked_analyst"));
    let all = masked.describe_all().await.unwrap();
    let kinds: Vec<String> = all.rows.iter().map(|r| r[1].to_string()).collect();
    assert!(
        kinds
            .iter()
            .all(|k| k == "\"table\"" || k == "\"event\"" || k == "\"metric\""),
        "{kinds:?}"
    );
    let entities = masked.query("DESCRIBE entities").await.unwrap_err();
    assert_eq!(entities.to_json()["error"]["code"], "permission_denied");
}

#[tokio::test]
async fn watch_alerts_on_visible_rows_only() {
    let f = fixture();
    let q = "WATCH (FROM events DURING LAST 30 d GROUP BY properties.tenant RETURN properties.tenant, count) WHEN count > 100";
    let alert = |e: Engine| async move {
        let signalql::ast::Statement::Watch(w) = signalql::parse(q).unwrap() else {
            panic!("not a WATCH")
        };
        let mut watcher = signalql::watch::Watcher::new(w);
        watcher.poll(&e).await.unwrap()
    };
    // acme has 126 events in the window (DuckDB over the copy): the condition holds on its rows
    // only; globex's 156 and initech's 78 never reach it.
    let p = alert(engine(&f.root, Some("acme_agent"))).await;
    let a = p.alert.expect("the condition holds");
    assert_eq!(
        a.envelope.rows,
        vec![vec![serde_json::json!("acme"), serde_json::json!(126)]]
    );
    assert!(a.envelope.metadata.access_filtered);
    let by_hand = alert(engine(&f.copy, None)).await.alert.unwrap();
    assert_eq!(a.envelope.rows, by_hand.envelope.rows);
}

#[test]
fn a_malformed_policy_is_an_error_at_open() {
    let f = fixture();
    for (text, wanted) in [
        ("[principals.a]\ntables = [\"evnts\"]\n", "unknown table"),
        (
            "[principals.a.filters]\nevents = 'properties.tenant = '\n",
            "filters",
        ),
        ("[principals.a.filters]\nevents = 'count > 3'\n", "filters"),
        ("[principals.a]\ntokens = [\"plain-token\"]\n", "sha256"),
        ("[principals.a\n", "policy.toml"),
    ] {
        std::fs::write(f.root.join("policy.toml"), text).unwrap();
        let e = Engine::open_with(
            &f.root,
            EngineOptions {
                principal: Some("a".into()),
                ..Default::default()
            },
        )
        .err()
        .unwrap_or_else(|| panic!("{text:?} opened"));
        assert!(e.to_string().contains(wanted), "{text:?}: {e}");
        assert!(e.to_string().contains("policy.toml"), "{e}");
    }
    // A filter over a field the table lacks: an error naming the policy when the table opens.
    std::fs::write(
        f.root.join("policy.toml"),
        "[principals.a.filters]\nevents = 'tenant_id = \"acme\"'\n",
    )
    .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let e = rt
        .block_on(engine(&f.root, Some("a")).query("FROM events RETURN count"))
        .unwrap_err();
    assert!(e.to_string().contains("policy.toml"), "{e}");
    assert!(e.to_string().contains("tenant_id"), "{e}");
}

#[test]
fn the_cli_runs_as_the_principal_it_is_given() {
    let f = fixture();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_signalql"))
            .args(args)
            .arg("--data")
            .arg(&f.root)
            .output()
            .unwrap()
    };
    let q =
        "FROM events DURING LAST 30 d GROUP BY properties.tenant RETURN properties.tenant, count";
    let o = run(&["query", "--format", "json", "--principal", "acme_agent", q]);
    assert!(o.status.success());
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["rows"], serde_json::json!([["acme", 126]]));
    assert_eq!(v["metadata"]["cost_estimate"]["scanned_rows"], Value::Null);
    let o = run(&["query", "--format", "json", q]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["code"], "permission_denied");
    let o = run(&["context", "--principal", "acme_agent", "quantum zeppelin"]);
    assert!(o.status.success());
    assert!(!String::from_utf8_lossy(&o.stdout).contains("o_borealis"));
}

/// With the text index (docs/index.md), a restricted caller's answers are still the ones over
/// the copy with the policy applied by hand (which has no index): the index is read under the
/// caller's restriction, its postings only score rows the caller may see, and EXPLAIN CONTEXT
/// says the index path was taken.
#[tokio::test]
async fn the_text_index_keeps_the_callers_view() {
    let f = fixture();
    let root = signalql::catalog::storage::Root::Local(f.root.clone());
    let summary = signalql::catalog::objects::index::index_root(&root).unwrap();
    assert!(summary.files >= 1, "{summary:?}");
    for q in [
        r#"FIND OBJECT ABOUT "quantum zeppelin""#,
        r#"FIND OBJECT ABOUT "funnel conversion""#,
        r#"FIND OBJECT ABOUT "escalation disputes""#,
        r#"FIND OBJECT ABOUT "retention cohorts""#,
        r#"CONTEXT FOR "funnel conversion" MAX DEPTH 3 WITH EVIDENCE"#,
        r#"CONTEXT FOR "quantum zeppelin borealis""#,
        r#"CONTEXT FOR "refund policy funnels" BUDGET 40 TOKENS"#,
    ] {
        same_as_copy(&f, q).await;
    }
    let acme = engine(&f.root, Some("acme_agent"));
    let b = answer(&acme, r#"CONTEXT FOR "funnel conversion""#)
        .await
        .unwrap();
    let x = answer(
        &acme,
        &format!("EXPLAIN CONTEXT {}", b["id"].as_str().unwrap()),
    )
    .await
    .unwrap();
    assert_eq!(x["scoring"]["scan"], 0, "{x}");
    assert!(x["scoring"]["index"].as_u64().unwrap() > 0, "{x}");
    assert_no_leak("EXPLAIN CONTEXT", &x);
}
