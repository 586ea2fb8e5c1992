//! `CONTEXT FOR` against the requirements of signalql-v0.5-context.md, on object stores written
//! here row by row, with lexical-v1 scores computed by hand in the comments.

use std::path::Path;
use std::sync::Arc;

use crate::common::roles;
use chrono::{DateTime, Utc};
use datafusion::arrow::array::{
    ArrayRef, Int64Array, LargeStringArray, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use proptest::prelude::*;
use signalql::catalog::objects::{
    derivations_schema, links_schema, objects_schema, representations_schema, revisions_schema,
};
use signalql::catalog::write::write_parquet_atomic;
use signalql::{Answer, Bundle, Engine, EngineOptions};

const T: &str = "2026-06-01T00:00:00Z";

fn at(s: &str) -> i64 {
    DateTime::parse_from_rfc3339(s).unwrap().timestamp_micros()
}

#[derive(Clone, Debug)]
struct Rep {
    name: &'static str,
    media: &'static str,
    content: String,
    roles: Vec<&'static str>,
    tokens: Option<i64>,
    /// Kept by reference: NULL content and this `content_ref`.
    by_ref: Option<&'static str>,
}

fn rep(name: &'static str, content: &str) -> Rep {
    Rep {
        name,
        media: "text/plain",
        content: content.into(),
        roles: vec![],
        tokens: None,
        by_ref: None,
    }
}

#[derive(Clone, Debug)]
struct Obj {
    id: String,
    revision: i64,
    project: &'static str,
    kind: &'static str,
    title: String,
    created: &'static str,
    trust: &'static str,
    state: &'static str,
    roles: Vec<&'static str>,
    reps: Vec<Rep>,
}

fn obj(id: &str, title: &str, reps: Vec<Rep>) -> Obj {
    Obj {
        id: id.into(),
        revision: 1,
        project: "main",
        kind: "document",
        title: title.into(),
        created: "2026-05-20T00:00:00Z",
        trust: "unknown",
        state: "current",
        roles: vec!["data"],
        reps,
    }
}

type Link = (&'static str, &'static str, &'static str, &'static str); // object, entity_type, entity_id, relation
/// object, relation, source object, source revision (of the object's revision 1).
type Derivation = (&'static str, &'static str, &'static str, i64);

fn strings(v: Vec<String>) -> ArrayRef {
    Arc::new(StringArray::from(v))
}

fn ts(v: Vec<i64>) -> ArrayRef {
    Arc::new(TimestampMicrosecondArray::from(v).with_timezone("UTC"))
}

/// Writes the store; `split` puts every row in its own file (named in reverse order) to vary
/// the file layout.
fn write_store(
    root: &Path,
    objs: &[Obj],
    links: &[Link],
    derivs: &[(&str, &str, &str, i64)],
    split: bool,
) {
    std::fs::create_dir_all(root).unwrap();
    let groups: Vec<Vec<&Obj>> = if split {
        objs.iter().rev().map(|o| vec![o]).collect()
    } else {
        vec![objs.iter().collect()]
    };
    for (n, g) in groups.iter().enumerate() {
        let stem = format!("part-{:05}", groups.len() - n);
        let cols: Vec<ArrayRef> = vec![
            strings(g.iter().map(|o| o.id.clone()).collect()),
            strings(g.iter().map(|o| o.project.to_string()).collect()),
            strings(g.iter().map(|o| o.kind.to_string()).collect()),
            strings(g.iter().map(|o| o.title.clone()).collect()),
            ts(g.iter().map(|o| at(o.created)).collect()),
            Arc::new(
                TimestampMicrosecondArray::from(vec![None::<i64>; g.len()]).with_timezone("UTC"),
            ),
            ts(g.iter().map(|o| at(o.created)).collect()),
            strings(g.iter().map(|o| format!("{}.txt", o.id)).collect()),
        ];
        let b = RecordBatch::try_new(objects_schema(), cols).unwrap();
        write_parquet_atomic(&root.join("objects"), &stem, objects_schema(), &[b]).unwrap();
        let cols: Vec<ArrayRef> = vec![
            strings(g.iter().map(|o| o.id.clone()).collect()),
            Arc::new(Int64Array::from(
                g.iter().map(|o| o.revision).collect::<Vec<_>>(),
            )),
            ts(g.iter().map(|o| at(o.created)).collect()),
            strings(g.iter().map(|_| "import".to_string()).collect()),
            strings(g.iter().map(|o| o.trust.to_string()).collect()),
            strings(g.iter().map(|_| "none".to_string()).collect()),
            roles(&g.iter().map(|o| o.roles.clone()).collect::<Vec<_>>()),
            strings(g.iter().map(|o| o.state.to_string()).collect()),
        ];
        let b = RecordBatch::try_new(revisions_schema(), cols).unwrap();
        write_parquet_atomic(&root.join("revisions"), &stem, revisions_schema(), &[b]).unwrap();
        let reps: Vec<(&Obj, &Rep)> = g
            .iter()
            .flat_map(|o| o.reps.iter().map(move |r| (*o, r)))
            .collect();
        if reps.is_empty() {
            continue;
        }
        use sha2::Digest;
        let cols: Vec<ArrayRef> = vec![
            strings(reps.iter().map(|(o, _)| o.id.clone()).collect()),
            Arc::new(Int64Array::from(
                reps.iter().map(|(o, _)| o.revision).collect::<Vec<_>>(),
            )),
            strings(reps.iter().map(|(_, r)| r.name.to_string()).collect()),
            strings(reps.iter().map(|(_, r)| r.media.to_string()).collect()),
            Arc::new(LargeStringArray::from(
                reps.iter()
                    .map(|(_, r)| r.by_ref.is_none().then_some(r.content.as_str()))
                    .collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                reps.iter().map(|(_, r)| r.by_ref).collect::<Vec<_>>(),
            )),
            strings(
                reps.iter()
                    .map(|(_, r)| hex::encode(sha2::Sha256::digest(r.content.as_bytes())))
                    .collect(),
            ),
            Arc::new(Int64Array::from(
                reps.iter().map(|(_, r)| r.tokens).collect::<Vec<_>>(),
            )),
            roles(
                &reps
                    .iter()
                    .map(|(_, r)| r.roles.clone())
                    .collect::<Vec<_>>(),
            ),
        ];
        let b = RecordBatch::try_new(representations_schema(), cols).unwrap();
        write_parquet_atomic(
            &root.join("representations"),
            &stem,
            representations_schema(),
            &[b],
        )
        .unwrap();
    }
    if !links.is_empty() {
        let rev = |id: &str| objs.iter().find(|o| o.id == id).map_or(1, |o| o.revision);
        let cols: Vec<ArrayRef> = vec![
            strings(links.iter().map(|l| l.0.to_string()).collect()),
            Arc::new(Int64Array::from(
                links.iter().map(|l| rev(l.0)).collect::<Vec<_>>(),
            )),
            strings(links.iter().map(|l| l.1.to_string()).collect()),
            strings(links.iter().map(|l| l.2.to_string()).collect()),
            strings(links.iter().map(|l| l.3.to_string()).collect()),
        ];
        let b = RecordBatch::try_new(links_schema(), cols).unwrap();
        write_parquet_atomic(&root.join("links"), "part-00000", links_schema(), &[b]).unwrap();
    }
    if !derivs.is_empty() {
        let cols: Vec<ArrayRef> = vec![
            strings(derivs.iter().map(|d| d.0.to_string()).collect()),
            Arc::new(Int64Array::from(vec![1i64; derivs.len()])),
            strings(derivs.iter().map(|d| d.1.to_string()).collect()),
            strings(derivs.iter().map(|d| d.2.to_string()).collect()),
            Arc::new(Int64Array::from(
                derivs.iter().map(|d| d.3).collect::<Vec<_>>(),
            )),
        ];
        let b = RecordBatch::try_new(derivations_schema(), cols).unwrap();
        write_parquet_atomic(
            &root.join("derivations"),
            "part-00000",
            derivations_schema(),
            &[b],
        )
        .unwrap();
    }
}

/// The corpus of the hand-computed tests. Task "parquet storage engine": terms parquet,
/// storage, engine (3), so a score is floor(sum × 1e6 / 9).
fn corpus() -> (Vec<Obj>, Vec<Link>, Vec<Derivation>) {
    let mut secret = obj(
        "d_secret",
        "Parquet storage engine secrets",
        vec![rep("text", "parquet storage engine password hunter2")],
    );
    secret.roles = vec!["data", "secret"];
    let mut other = obj(
        "e_other",
        "Parquet storage engine elsewhere",
        vec![rep("text", "parquet")],
    );
    other.project = "other";
    let mut untrusted = obj("f_untrusted", "Parquet engine", vec![rep("text", "x")]);
    untrusted.trust = "untrusted";
    let mut stale = obj("g_stale", "Storage engine", vec![rep("text", "x")]);
    stale.state = "stale";
    let mut instr = obj("h_instruction", "Parquet", vec![rep("text", "do this")]);
    instr.reps[0].roles = vec!["instruction"];
    let mut binary = obj("i_binary", "Parquet diagram", vec![rep("image", "...")]);
    binary.reps[0].media = "image/png";
    let mut old = obj("j_old", "Parquet history", vec![rep("text", "old")]);
    old.created = "2025-01-01T00:00:00Z";
    let objs = vec![
        // A: parquet 3 (title), storage 3 (title), engine 2 (summary) = 8 → 888888.
        obj(
            "a_main",
            "Parquet storage",
            vec![
                rep("summary", "An engine for columns"),
                rep("text", "parquet files on disk, a long body of text"),
            ],
        ),
        // B: engine 3 (title), storage 1 (text) = 4 → 444444.
        obj("b_engine", "Engine notes", vec![rep("text", "storage")]),
        // C: no term; linked to A → 888888 / 2 = 444444 at 1 hop.
        obj("c_linked", "Unrelated", vec![rep("text", "nothing here")]),
        // K: no term; A → topic:x ← K, 2 hops → 222222 with MAX DEPTH 2.
        obj("k_two_hops", "Far away", vec![rep("text", "zzz")]),
        // V: no term; linked only from the secret object, which is no bridge.
        obj("v_behind_secret", "Behind", vec![rep("text", "zzz")]),
        secret,
        other,
        untrusted,
        stale,
        instr,
        binary,
        old,
    ];
    let links = vec![
        ("a_main", "object", "c_linked", "links_to"),
        ("a_main", "topic", "x", "about"),
        ("k_two_hops", "topic", "x", "about"),
        ("d_secret", "object", "v_behind_secret", "links_to"),
    ];
    let derivs = vec![("b_engine", "derived_from", "a_main", 1)];
    (objs, links, derivs)
}

fn engine(root: &Path) -> Engine {
    let now = DateTime::parse_from_rfc3339(T).unwrap().with_timezone(&Utc);
    Engine::open_with(
        root,
        EngineOptions {
            now: Some(now),
            ..Default::default()
        },
    )
    .unwrap()
}

async fn bundle(root: &Path, q: &str) -> Bundle {
    match engine(root).answer(q).await {
        Ok(Answer::Bundle(b)) => *b,
        Ok(other) => panic!("{q}: not a bundle: {other:?}"),
        Err(e) => panic!("{q}: {e}"),
    }
}

fn store() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let (o, l, d) = corpus();
    write_store(dir.path(), &o, &l, &d, false);
    dir
}

fn ids(b: &Bundle) -> Vec<String> {
    b.items.iter().map(|i| i.object.clone()).collect()
}

#[tokio::test]
async fn hand_computed_scores_expansion_and_rank() {
    let dir = store();
    // The excluded objects (hand-scored below, they would rank between these) stay out.
    let q = r#"CONTEXT FOR "parquet storage engine" USING PROJECT "main" EXCLUDE UNTRUSTED, STALE, ROLE INSTRUCTION MAX DEPTH 2 MAX AGE 60 d"#;
    let b = bundle(dir.path(), q).await;
    let got: Vec<(String, i64)> = b
        .items
        .iter()
        .map(|i| (i.object.clone(), i.score))
        .collect();
    assert_eq!(
        got,
        vec![
            ("object://a_main@1".to_string(), 888_888),
            // B (own 444444, and 444444 from A over the derivation) ranks before C (hops 1).
            ("object://b_engine@1".to_string(), 444_444),
            ("object://c_linked@1".to_string(), 444_444),
            ("object://k_two_hops@1".to_string(), 222_222),
        ]
    );
    assert_eq!(b.metadata.scorer, "lexical-v1");
    let k = &b.items[3];
    assert_eq!(
        k.path,
        ["object://a_main@1", "topic:x", "object://k_two_hops@1"]
    );
    assert_eq!(k.why[0]["graph_expansion"]["hops"], serde_json::json!(2));
    // Terms reported for the lexical match.
    assert_eq!(
        b.items[0].why[0]["lexical_match"]["terms"],
        serde_json::json!(["parquet", "storage", "engine"])
    );
    // MAX DEPTH 1 (the default) does not reach K.
    let b = bundle(dir.path(), &q.replace(" MAX DEPTH 2", "")).await;
    assert!(!ids(&b).contains(&"object://k_two_hops@1".to_string()));
    // Without the exclusions: f (title parquet, engine: 6/9) before g (same score, stale),
    // h and j (title parquet: 3/9, ids in order) after C.
    let b = bundle(
        dir.path(),
        r#"CONTEXT FOR "parquet storage engine" USING PROJECT "main" MAX DEPTH 2"#,
    )
    .await;
    let got: Vec<(String, i64)> = b
        .items
        .iter()
        .map(|i| (i.object.clone(), i.score))
        .collect();
    let want: Vec<(String, i64)> = [
        ("a_main", 888_888),
        ("f_untrusted", 666_666),
        ("g_stale", 666_666),
        ("b_engine", 444_444),
        ("c_linked", 444_444),
        ("h_instruction", 333_333),
        ("j_old", 333_333),
        ("k_two_hops", 222_222),
    ]
    .iter()
    .map(|(id, s)| (format!("object://{id}@1"), *s))
    .collect();
    assert_eq!(got, want);
}

#[tokio::test]
async fn every_rejection_reason_is_reached_once_per_object() {
    let dir = store();
    let b = bundle(
        dir.path(),
        r#"CONTEXT FOR "parquet storage engine" USING PROJECT "main" BUDGET 10 TOKENS EXCLUDE UNTRUSTED, STALE, ROLE INSTRUCTION MAX OBJECTS 2 MAX AGE 60 d"#,
    )
    .await;
    let x = engine(dir.path()).explain_context(&b.id).await.unwrap();
    let reason = |id: &str| -> Vec<String> {
        x.rejected
            .iter()
            .filter(|r| r.object == format!("object://{id}@1"))
            .map(|r| r.reason.as_str().to_string())
            .collect()
    };
    assert_eq!(reason("e_other"), ["out_of_scope"]);
    assert_eq!(reason("j_old"), ["max_age"]);
    assert_eq!(reason("d_secret"), ["excluded_secret"]);
    assert_eq!(reason("f_untrusted"), ["excluded_trust"]);
    assert_eq!(reason("g_stale"), ["excluded_stale"]);
    assert_eq!(reason("h_instruction"), ["excluded_role"]);
    assert_eq!(reason("i_binary"), ["no_packable_representation"]);
    // Rank A, B, C: MAX OBJECTS 2 cuts C; a budget of 10 fits A's summary (ceil(21/4) = 6)
    // but not B's text (ceil(7/4) = 2 fits: 6 + 2 = 8), so both A and B are packed…
    assert_eq!(reason("c_linked"), ["max_objects"]);
    assert_eq!(ids(&b), ["object://a_main@1", "object://b_engine@1"]);
    // …and a budget of 5 leaves A out for the budget.
    let b = bundle(
        dir.path(),
        r#"CONTEXT FOR "parquet storage engine" USING PROJECT "main" BUDGET 5 TOKENS"#,
    )
    .await;
    let x = engine(dir.path()).explain_context(&b.id).await.unwrap();
    assert!(
        x.rejected
            .iter()
            .any(|r| r.object == "object://a_main@1" && r.reason.as_str() == "budget")
    );
    // Every object appears at most once among items and rejections.
    let mut seen: Vec<String> = x.rejected.iter().map(|r| r.object.clone()).collect();
    seen.extend(ids(&b));
    let n = seen.len();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), n);
    // In rank order with 5 tokens: A (summary 6) no; f "x" 1; g "x" 1; B "storage" 2; C
    // "nothing here" 3 > 1 left, no; h "do this" 2 > 1, no; j "old" 1. Three left out.
    assert_eq!(b.metadata.excluded["budget"], 3);
    assert_eq!(
        ids(&b),
        [
            "object://f_untrusted@1",
            "object://g_stale@1",
            "object://b_engine@1",
            "object://j_old@1"
        ]
    );
    assert_eq!(b.metadata.budget.used, 5);
    assert!(b.metadata.truncated);
}

#[tokio::test]
async fn secret_words_never_change_a_score_or_the_bundle() {
    let a = store();
    let (mut objs, l, d) = corpus();
    for o in &mut objs {
        if o.id == "d_secret" {
            o.reps[0].content = "nothing relevant at all".into();
            o.title = "Plain".into();
        }
    }
    let b = tempfile::tempdir().unwrap();
    write_store(b.path(), &objs, &l, &d, false);
    let q = r#"CONTEXT FOR "parquet storage engine password hunter2" MAX DEPTH 3"#;
    let x = bundle(a.path(), q).await;
    let y = bundle(b.path(), q).await;
    assert_eq!(x.id, y.id);
    assert_eq!(x.items, y.items);
    for i in &x.items {
        assert!(!i.content.as_deref().unwrap_or("").contains("hunter2"));
        assert!(!i.object.contains("d_secret"));
        // The object behind the secret is not reached through it.
        assert!(!i.object.contains("v_behind_secret"));
    }
}

#[tokio::test]
async fn packing_prefers_and_upgrades_representations() {
    let dir = store();
    // Without PREFER REPRESENTATION, pass 2 upgrades A to its largest fitting representation.
    let b = bundle(
        dir.path(),
        r#"CONTEXT FOR "parquet storage engine" USING PROJECT "main" BUDGET 100 TOKENS"#,
    )
    .await;
    assert_eq!(b.items[0].representation, "text");
    // With it, A keeps the summary.
    let b = bundle(
        dir.path(),
        r#"CONTEXT FOR "parquet storage engine" USING PROJECT "main" BUDGET 100 TOKENS PREFER REPRESENTATION summary"#,
    )
    .await;
    assert_eq!(b.items[0].representation, "summary");
    // PREFER CURRENT boosts by 5/4: 888888 → 1111110.
    let b = bundle(
        dir.path(),
        r#"CONTEXT FOR "parquet storage engine" USING PROJECT "main" PREFER CURRENT"#,
    )
    .await;
    assert_eq!(b.items[0].score, 1_111_110);
    assert_eq!(b.items[0].why[1]["preferred"]["term"], "CURRENT");
}

#[tokio::test]
async fn the_address_is_stable_and_tracks_revisions() {
    let q = r#"CONTEXT FOR "parquet storage engine" USING PROJECT "main" MAX DEPTH 2"#;
    let (o, l, d) = corpus();
    let one = tempfile::tempdir().unwrap();
    write_store(one.path(), &o, &l, &d, false);
    let split = tempfile::tempdir().unwrap();
    write_store(split.path(), &o, &l, &d, true);
    std::fs::write(
        split.path().join("signalql.toml"),
        "[datafusion]\n\"datafusion.execution.target_partitions\" = \"7\"\n",
    )
    .unwrap();
    let a = bundle(one.path(), q).await;
    let again = bundle(one.path(), q).await;
    let b = bundle(split.path(), q).await;
    assert_eq!(a.id, again.id, "same run twice");
    assert_eq!(a.id, b.id, "other file layout and thread count");
    assert!(a.id.starts_with("context://ctx_") && a.id.len() == "context://ctx_".len() + 32);
    // The first record stored wins: the store still explains the first bundle.
    let x = engine(one.path()).explain_context(&a.id).await.unwrap();
    assert_eq!(x.context, a.id);

    // A new revision of an included object changes the address.
    let mut o2 = o.clone();
    for x in &mut o2 {
        if x.id == "b_engine" {
            x.revision = 2;
            x.reps[0].content = "storage, revised".into();
        }
    }
    let c = tempfile::tempdir().unwrap();
    write_store(c.path(), &o2, &l, &d, false);
    assert_ne!(bundle(c.path(), q).await.id, a.id);
}

#[tokio::test]
async fn items_name_estimators_and_unknown_addresses_are_errors() {
    let (mut o, l, d) = corpus();
    o[1].reps[0].tokens = Some(3);
    let dir = tempfile::tempdir().unwrap();
    write_store(dir.path(), &o, &l, &d, false);
    let b = bundle(
        dir.path(),
        r#"CONTEXT FOR "parquet storage engine" USING PROJECT "main""#,
    )
    .await;
    for i in &b.items {
        assert!(!i.estimator.is_empty());
    }
    let bi = b
        .items
        .iter()
        .find(|i| i.object == "object://b_engine@1")
        .unwrap();
    assert_eq!((bi.tokens, bi.estimator.as_str()), (3, "stored"));
    assert_eq!(b.metadata.estimators, ["chars-div-4-v1", "stored"]);
    let err = engine(dir.path())
        .answer("EXPLAIN CONTEXT context://ctx_0123456789abcdef0123456789abcdef")
        .await
        .unwrap_err();
    assert_eq!(err.to_json()["error"]["code"], "unknown_context");
}

/// USING KIND (docs/context.md): only objects of that kind; the others are rejected as
/// out_of_scope, and the kind is part of the canonical query (so of the address). By hand:
/// three objects on the task, one a note.
#[tokio::test]
async fn using_kind_keeps_one_object_kind() {
    let a = obj("a", "Parquet notes", vec![rep("text", "parquet one")]);
    let mut b = obj("b", "Parquet notes", vec![rep("text", "parquet two")]);
    b.kind = "note";
    let c = obj("c", "Parquet notes", vec![rep("text", "parquet three")]);
    let dir = tempfile::tempdir().unwrap();
    write_store(dir.path(), &[a, b, c], &[], &[], false);
    let ids = |b: &Bundle| -> Vec<String> { b.items.iter().map(|i| i.object.clone()).collect() };
    let all = bundle(dir.path(), r#"CONTEXT FOR "parquet""#).await;
    assert_eq!(ids(&all), ["object://a@1", "object://b@1", "object://c@1"]);
    let notes = bundle(dir.path(), r#"CONTEXT FOR "parquet" USING KIND "note""#).await;
    assert_eq!(ids(&notes), ["object://b@1"]);
    assert_eq!(notes.metadata.excluded.get("out_of_scope"), Some(&2));
    assert_eq!(
        notes.metadata.canonical_query,
        r#"CONTEXT FOR "parquet" USING KIND "note""#
    );
    let docs = bundle(
        dir.path(),
        r#"CONTEXT FOR "parquet" USING KIND "document" USING PROJECT "main""#,
    )
    .await;
    assert_eq!(ids(&docs), ["object://a@1", "object://c@1"]);
    assert_eq!(
        docs.metadata.canonical_query,
        r#"CONTEXT FOR "parquet" USING PROJECT "main" USING KIND "document""#
    );
    let none = bundle(dir.path(), r#"CONTEXT FOR "parquet" USING KIND "email""#).await;
    assert_eq!(ids(&none), Vec::<String>::new());
    // EXPLAIN CONTEXT gives the two others out_of_scope.
    let x = engine(dir.path()).explain_context(&notes.id).await.unwrap();
    assert_eq!(
        serde_json::to_value(&x.rejected).unwrap(),
        serde_json::json!([
            {"object": "object://a@1", "reason": "out_of_scope"},
            {"object": "object://c@1", "reason": "out_of_scope"}
        ])
    );
    // Given twice: a parse error.
    let err = engine(dir.path())
        .answer(r#"CONTEXT FOR "parquet" USING KIND "a" USING KIND "b""#)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "parse_error");
}

/// The store of the estimator tests: three objects titled "Parquet notes": `a` (id and text
/// given), `b_stored` (the text given, with a stored token count) and `c_ref` (content kept by
/// reference, 7 stored tokens).
fn estimator_store(a: (&str, &str), b: (&str, i64)) -> tempfile::TempDir {
    let a = obj(a.0, "Parquet notes", vec![rep("text", a.1)]);
    let (b_text, b_tokens) = b;
    let mut b = obj("b_stored", "Parquet notes", vec![rep("text", b_text)]);
    b.reps[0].tokens = Some(b_tokens);
    let mut c = obj("c_ref", "Parquet notes", vec![rep("text", "")]);
    c.reps[0].by_ref = Some("s3://bucket/c.txt");
    c.reps[0].tokens = Some(7);
    let dir = tempfile::tempdir().unwrap();
    write_store(dir.path(), &[a, b, c], &[], &[], false);
    dir
}

/// Each item's object address, token count and estimator.
fn counts(b: &Bundle) -> Vec<(String, i64, String)> {
    b.items
        .iter()
        .map(|i| (i.object.clone(), i.tokens, i.estimator.clone()))
        .collect()
}

/// chars-v1 (docs/context.md, "Token counts"): a unit per character, so BUDGET is a budget in
/// characters, exact. Counted by hand: characters, not bytes (é is one); a stored `tokens`
/// count is not used (it does not say how many characters there are), so content kept by
/// reference only is not packed; a budget of exactly an item's characters packs it, one less
/// does not; COMPRESS fits the shrunk text in characters.
#[tokio::test]
async fn chars_v1_is_a_budget_in_characters() {
    let accented = "Parquet café notes: déjà vu."; // 28 characters, 31 bytes
    let short = "Parquet is columnar. Filler words, here and there.";
    assert_eq!((accented.chars().count(), accented.len()), (28, 31));
    let dir = estimator_store(("a_accented", accented), (short, 3));
    let item = |o: &str, t: i64| (format!("object://{o}@1"), t, "chars-v1".to_string());
    let q = r#"CONTEXT FOR "parquet" USING ESTIMATOR "chars-v1""#;
    let all = bundle(dir.path(), q).await;
    assert_eq!(counts(&all), [item("a_accented", 28), item("b_stored", 50)]);
    assert_eq!(all.metadata.budget.used, 78);
    assert_eq!(all.metadata.estimators, ["chars-v1"]);
    let exact = bundle(dir.path(), &format!("{q} BUDGET 28 TOKENS")).await;
    assert_eq!(counts(&exact), [item("a_accented", 28)]);
    let under = bundle(dir.path(), &format!("{q} BUDGET 27 TOKENS")).await;
    assert_eq!(counts(&under), []);
    // COMPRESS: b's first sentence (20 characters) is what fits in 21.
    let squeezed = bundle(
        dir.path(),
        r#"CONTEXT FOR "parquet columnar" USING ESTIMATOR "chars-v1" BUDGET 21 TOKENS MAX OBJECTS 1 PREFER REPRESENTATION "text" COMPRESS"#,
    )
    .await;
    let [i] = squeezed.items.as_slice() else {
        panic!("one compressed item: {:?}", counts(&squeezed))
    };
    assert_eq!(i.content.as_deref(), Some("Parquet is columnar."));
    assert_eq!((i.tokens, i.estimator.as_str()), (20, "chars-v1"));
}

/// o200k_base token counts (docs/context.md, "Token counts"), against tiktoken's own counts:
/// inline content is counted exactly (a stored count then stands only for content kept by
/// reference), every item and the metadata name the estimator (so the address differs), the
/// budget holds the exact counts, and a dataset selects it in signalql.toml.
#[tokio::test]
async fn o200k_counts_tokens_as_tiktoken_does() {
    let tiktoken = tiktoken_rs::o200k_base().unwrap();
    let o200k = |t: &str| tiktoken.encode_ordinary(t).len() as i64;
    let div4 = |t: &str| (t.chars().count() as i64 + 3) / 4;
    // Long words: fewer o200k tokens than characters / 4.
    let long = "internationalization counterrevolutionaries incomprehensibilities parquet";
    let short = "Parquet is columnar. Filler words, here and there: 1 2 3 4.";
    assert!(o200k(long) < div4(long), "the case needs o200k < chars/4");
    let dir = estimator_store(("a_long", long), (short, 999));
    let item = |o: &str, t: i64, e: &str| (format!("object://{o}@1"), t, e.to_string());

    let default = bundle(dir.path(), r#"CONTEXT FOR "parquet""#).await;
    assert_eq!(
        counts(&default),
        [
            item("a_long", div4(long), "chars-div-4-v1"),
            item("b_stored", 999, "stored"),
            item("c_ref", 7, "stored"),
        ]
    );
    let q = r#"CONTEXT FOR "parquet" USING ESTIMATOR "o200k""#;
    let exact = bundle(dir.path(), q).await;
    assert_eq!(
        counts(&exact),
        [
            item("a_long", o200k(long), "o200k_base"),
            item("b_stored", o200k(short), "o200k_base"),
            item("c_ref", 7, "stored"),
        ]
    );
    assert_eq!(exact.metadata.estimators, ["o200k_base", "stored"]);
    assert_eq!(
        exact.metadata.canonical_query,
        r#"CONTEXT FOR "parquet" USING ESTIMATOR "o200k_base""#
    );
    assert_ne!(exact.id, default.id);

    // A budget of exactly a_long's o200k count: it fits (then nothing else does); counted as
    // chars / 4 it does not, and c_ref's 7 stored tokens are what fits.
    let budget = o200k(long);
    assert!(budget >= 7 && budget < div4(long) && budget < o200k(short) + 7);
    let exact = bundle(dir.path(), &format!("{q} BUDGET {budget} TOKENS")).await;
    assert_eq!(counts(&exact), [item("a_long", budget, "o200k_base")]);
    let rough = bundle(
        dir.path(),
        &format!(r#"CONTEXT FOR "parquet" BUDGET {budget} TOKENS"#),
    )
    .await;
    assert_eq!(counts(&rough), [item("c_ref", 7, "stored")]);

    // COMPRESS counts the shrunk text with the same estimator.
    let squeezed = bundle(
        dir.path(),
        r#"CONTEXT FOR "parquet columnar" USING ESTIMATOR "o200k" BUDGET 9 TOKENS MAX OBJECTS 1 PREFER REPRESENTATION "text" COMPRESS"#,
    )
    .await;
    assert!(o200k(short) > 9, "b_stored must not fit whole");
    let [i] = squeezed.items.as_slice() else {
        panic!("one compressed item: {:?}", counts(&squeezed))
    };
    assert!(i.compression.is_some());
    assert_eq!(i.content.as_deref(), Some("Parquet is columnar."));
    assert_eq!(
        (i.tokens, i.estimator.as_str()),
        (o200k("Parquet is columnar."), "o200k_base")
    );

    // The dataset's default: the same items as the query naming it.
    std::fs::write(
        dir.path().join("signalql.toml"),
        "[context]\nestimator = \"o200k_base\"\n",
    )
    .unwrap();
    let by_dataset = bundle(dir.path(), r#"CONTEXT FOR "parquet""#).await;
    assert_eq!(by_dataset.items, bundle(dir.path(), q).await.items);
    // An unknown name is an error naming where it was given.
    let err = engine(dir.path())
        .answer(r#"CONTEXT FOR "parquet" USING ESTIMATOR "gpt2""#)
        .await
        .unwrap_err()
        .to_json();
    assert_eq!(err["error"]["code"], "parse_error");
    assert_eq!(err["error"]["column"], 39);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("o200k_base")
    );
    std::fs::write(
        dir.path().join("signalql.toml"),
        "[context]\nestimator = \"gpt2\"\n",
    )
    .unwrap();
    let err = Engine::open(dir.path())
        .err()
        .expect("a bad estimator is refused");
    assert!(err.to_string().contains("[context] estimator"), "{err}");
}

/// `entities` (JSON attributes) and `relationships` rows for the entity-form tests.
fn write_entities(
    root: &Path,
    entities: &[(&str, &str, &str, &str)],
    rels: &[(&str, &str, &str, &str, &str, &str)],
) {
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    let t = || DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let s = |n: &str| Field::new(n, DataType::Utf8, false);
    let schema = Arc::new(Schema::new(vec![
        s("entity_type"),
        s("entity_id"),
        s("attributes"),
        Field::new("updated_at", t(), false),
    ]));
    let col = |i: usize| {
        strings(
            entities
                .iter()
                .map(|e| [e.0, e.1, e.2][i].to_string())
                .collect(),
        )
    };
    let b = RecordBatch::try_new(
        schema.clone(),
        vec![
            col(0),
            col(1),
            col(2),
            ts(entities.iter().map(|e| at(e.3)).collect()),
        ],
    )
    .unwrap();
    write_parquet_atomic(&root.join("entities"), "part-00000", schema, &[b]).unwrap();
    let schema = Arc::new(Schema::new(vec![
        s("src_type"),
        s("src_id"),
        s("relation"),
        s("dst_type"),
        s("dst_id"),
        Field::new("created_at", t(), false),
    ]));
    let col = |i: usize| {
        strings(
            rels.iter()
                .map(|r| [r.0, r.1, r.2, r.3, r.4][i].to_string())
                .collect(),
        )
    };
    let b = RecordBatch::try_new(
        schema.clone(),
        vec![
            col(0),
            col(1),
            col(2),
            col(3),
            col(4),
            ts(rels.iter().map(|r| at(r.5)).collect()),
        ],
    )
    .unwrap();
    write_parquet_atomic(&root.join("relationships"), "part-00000", schema, &[b]).unwrap();
}

/// CONTEXT FOR entity(type, "id") (docs/context.md, "CONTEXT FOR entity(…)"), by hand: the
/// entity's record first, then the objects around it ranked by hops (1 000 000 halved per
/// hop), through links, derivations and relationships, within MAX DEPTH, EXCLUDE, BUDGET and
/// AS OF, with the task form's provenance, address and EXPLAIN CONTEXT.
#[tokio::test]
async fn context_for_an_entity_packs_its_record_and_its_neighbourhood() {
    let text = |w: &str| format!("{w} {}", "x".repeat(39 - w.len())); // 40 chars: 10 tokens
    let mk = |id: &str| obj(id, "Notes", vec![rep("text", &text(id))]);
    let mut untrusted = mk("o_untrusted");
    untrusted.trust = "untrusted";
    let objs = vec![
        mk("o_direct"),
        mk("o_acct"),
        mk("o_derived"),
        mk("o_alone"),
        untrusted,
    ];
    let links: Vec<Link> = vec![
        ("o_direct", "user", "u1", "about"),
        ("o_untrusted", "user", "u1", "mentions"),
        ("o_acct", "account", "a1", "about"),
    ];
    let derivs = vec![("o_derived", "derived_from", "o_direct", 1)];
    let dir = tempfile::tempdir().unwrap();
    write_store(dir.path(), &objs, &links, &derivs, false);
    write_entities(
        dir.path(),
        &[
            ("user", "u1", r#"{"plan": "free"}"#, "2026-04-01T00:00:00Z"),
            ("user", "u1", r#"{"plan": "pro"}"#, "2026-05-01T00:00:00Z"),
            ("user", "u1", r#"{"plan": "team"}"#, "2026-07-01T00:00:00Z"),
            (
                "account",
                "a1",
                r#"{"tier": "gold"}"#,
                "2026-05-01T00:00:00Z",
            ),
        ],
        &[
            (
                "user",
                "u1",
                "member_of",
                "account",
                "a1",
                "2026-05-02T00:00:00Z",
            ),
            (
                "user",
                "u2",
                "referred",
                "user",
                "u1",
                "2026-05-03T00:00:00Z",
            ),
            (
                "user",
                "u1",
                "member_of",
                "account",
                "a9",
                "2026-07-01T00:00:00Z",
            ),
        ],
    );
    let div4 = |t: &str| (t.chars().count() as i64 + 3) / 4;
    let order = |b: &Bundle| -> Vec<(String, i64)> {
        b.items
            .iter()
            .map(|i| (i.object.clone(), i.score))
            .collect()
    };
    let o = |id: &str, score: i64| (format!("object://{id}@1"), score);
    let record = |score: i64| ("entity://user/u1".to_string(), score);

    let q = r#"CONTEXT FOR entity(user, "u1") MAX DEPTH 2"#;
    let b = bundle(dir.path(), q).await;
    assert_eq!(b.task, r#"entity(user, "u1")"#);
    assert_eq!(b.metadata.canonical_query, q);
    // The record, then hop 1 (500 000; ties by id), then hop 2 (250 000): o_acct through
    // the relationship to account:a1, o_derived through its derivation. o_alone is not reached.
    assert_eq!(
        order(&b),
        [
            record(1_000_000),
            o("o_direct", 500_000),
            o("o_untrusted", 500_000),
            o("o_acct", 250_000),
            o("o_derived", 250_000),
        ]
    );
    let r = &b.items[0];
    assert_eq!(
        (r.representation.as_str(), r.media_type.as_str()),
        ("record", "application/json")
    );
    let content = r.content.as_deref().unwrap();
    assert_eq!(
        (r.tokens, r.estimator.as_str()),
        (div4(content), "chars-div-4-v1")
    );
    use sha2::Digest;
    assert_eq!(
        r.content_hash,
        hex::encode(sha2::Sha256::digest(content.as_bytes()))
    );
    let rec: serde_json::Value = serde_json::from_str(content).unwrap();
    // The row updated last before T, and the relationships created before T, either way.
    assert_eq!(rec["attributes"], serde_json::json!({"plan": "pro"}));
    assert!(
        rec["updated_at"]
            .as_str()
            .unwrap()
            .starts_with("2026-05-01")
    );
    let rels: Vec<(&str, &str, &str)> = rec["relationships"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["direction"].as_str().unwrap(),
                r["relation"].as_str().unwrap(),
                r["entity"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rels,
        [
            ("out", "member_of", "account:a1"),
            ("in", "referred", "user:u2")
        ]
    );
    let acct = &b.items[3];
    assert_eq!(
        acct.why,
        [serde_json::json!({"graph_expansion": {"from": "user:u1", "via": "about", "hops": 2}})]
    );
    assert_eq!(acct.path, ["user:u1", "account:a1", "object://o_acct@1"]);
    assert_eq!(b.metadata.budget.used, (div4(content) + 4 * 10) as u64);
    // Stable address; EXPLAIN CONTEXT shows the record first.
    assert_eq!(bundle(dir.path(), q).await.id, b.id);
    let x = engine(dir.path()).explain_context(&b.id).await.unwrap();
    assert_eq!(x.items[0]["object"], "entity://user/u1");
    assert_eq!(x.items[0]["score_breakdown"]["propagated"], 1_000_000);

    // MAX DEPTH 1 (the default): the record and hop 1 only. EXCLUDE UNTRUSTED: a rejection.
    let b = bundle(
        dir.path(),
        r#"CONTEXT FOR entity(user, "u1") EXCLUDE UNTRUSTED"#,
    )
    .await;
    assert_eq!(order(&b), [record(1_000_000), o("o_direct", 500_000)]);
    assert_eq!(b.metadata.excluded["excluded_trust"], 1);

    // BUDGET: the record first, then what is left; a record that does not fit is left out
    // for the budget and the objects share the whole budget.
    let rt = div4(content);
    let b = bundle(
        dir.path(),
        &format!(
            r#"CONTEXT FOR entity(user, "u1") BUDGET {} TOKENS MAX DEPTH 2"#,
            rt + 15
        ),
    )
    .await;
    assert_eq!(order(&b), [record(1_000_000), o("o_direct", 500_000)]);
    assert!(b.metadata.truncated);
    assert_eq!(b.metadata.budget.used, (rt + 10) as u64);
    let b = bundle(
        dir.path(),
        r#"CONTEXT FOR entity(user, "u1") BUDGET 25 TOKENS"#,
    )
    .await;
    assert!(rt > 25);
    assert_eq!(
        order(&b),
        [o("o_direct", 500_000), o("o_untrusted", 500_000)]
    );
    let x = engine(dir.path()).explain_context(&b.id).await.unwrap();
    assert!(
        x.rejected
            .iter()
            .any(|r| r.object == "entity://user/u1" && r.reason.as_str() == "budget")
    );

    // AS OF before the objects and the relationships: the record as it was, alone.
    let b = bundle(
        dir.path(),
        r#"CONTEXT FOR entity(user, "u1") AS OF "2026-04-15T00:00:00Z""#,
    )
    .await;
    assert_eq!(order(&b), [record(1_000_000)]);
    let rec: serde_json::Value =
        serde_json::from_str(b.items[0].content.as_deref().unwrap()).unwrap();
    assert_eq!(rec["attributes"], serde_json::json!({"plan": "free"}));
    assert_eq!(rec["relationships"], serde_json::json!([]));

    // An entity with no record: only what links reach (here nothing).
    let b = bundle(dir.path(), r#"CONTEXT FOR entity(user, "nobody")"#).await;
    assert!(b.items.is_empty());

    // The syntax: canonical text, and what the form refuses.
    let e = engine(dir.path());
    let canonical = signalql::parse(r#"context for ENTITY(user, "u1") max depth 2"#).unwrap();
    assert_eq!(canonical.to_string(), q);
    for (bad, column) in [
        (r#"CONTEXT FOR entity(user, "u1") COMPRESS"#, 32),
        (r#"CONTEXT FOR entity(object, "o_direct")"#, 20),
        (r#"CONTEXT FOR entity(user)"#, 24),
    ] {
        let err = e.answer(bad).await.unwrap_err().to_json();
        assert_eq!(err["error"]["code"], "parse_error", "{bad}");
        assert_eq!(err["error"]["column"], column, "{bad}: {err}");
    }
}

/// EXPLAIN CONTEXT's rejected list is sorted by object id in code units (docs/context.md):
/// `doc` before `doc1` (address order would put `object://doc1@1` first, '1' < '@'), and
/// U+10000 (the surrogates D800 DC00) before U+E000 (byte order would not: F0… > EE…).
#[tokio::test]
async fn rejections_are_sorted_by_object_id() {
    let names = ["doc1", "doc", "\u{10000}x", "\u{e000}x", "a"];
    let objs: Vec<Obj> = names
        .iter()
        .map(|id| obj(id, "Parquet notes", vec![rep("text", "parquet")]))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    write_store(dir.path(), &objs, &[], &[], true);
    // All score alike: MAX OBJECTS 1 keeps the first id ("a") and rejects the others.
    let b = bundle(dir.path(), r#"CONTEXT FOR "parquet" MAX OBJECTS 1"#).await;
    assert_eq!(ids(&b), ["object://a@1"]);
    let x = engine(dir.path()).explain_context(&b.id).await.unwrap();
    let got: Vec<&str> = x.rejected.iter().map(|r| r.object.as_str()).collect();
    assert_eq!(
        got,
        [
            "object://doc@1",
            "object://doc1@1",
            "object://\u{10000}x@1",
            "object://\u{e000}x@1"
        ]
    );
    // Without a supplementary-plane id (the byte-order path): the same for doc, doc1.
    let dir = tempfile::tempdir().unwrap();
    write_store(dir.path(), &objs[..2], &[], &[], true);
    let b = bundle(dir.path(), r#"CONTEXT FOR "parquet" MAX OBJECTS 1"#).await;
    let x = engine(dir.path()).explain_context(&b.id).await.unwrap();
    assert_eq!(ids(&b), ["object://doc@1"]);
    assert_eq!(x.rejected[0].object, "object://doc1@1");
    let mut more = objs[..2].to_vec();
    more.push(obj("a", "Parquet notes", vec![rep("text", "parquet")]));
    let dir = tempfile::tempdir().unwrap();
    write_store(dir.path(), &more, &[], &[], true);
    let b = bundle(dir.path(), r#"CONTEXT FOR "parquet" MAX OBJECTS 1"#).await;
    let x = engine(dir.path()).explain_context(&b.id).await.unwrap();
    let got: Vec<&str> = x.rejected.iter().map(|r| r.object.as_str()).collect();
    assert_eq!(got, ["object://doc@1", "object://doc1@1"]);
}

#[tokio::test]
async fn limits_are_enforced() {
    let dir = store();
    for q in [
        r#"CONTEXT FOR "x" BUDGET 0 TOKENS"#,
        r#"CONTEXT FOR "x" BUDGET 10000001 TOKENS"#,
        r#"CONTEXT FOR "x" MAX OBJECTS 501"#,
        r#"CONTEXT FOR "x" MAX DEPTH 17"#,
    ] {
        let err = engine(dir.path()).answer(q).await.unwrap_err();
        assert_eq!(err.to_json()["error"]["code"], "limit_exceeded", "{q}");
    }
}

// Random corpora and budgets never break requirements 1–3: EXCLUDE/scope/secret, the budget,
// one representation per object.
proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn random_corpora_keep_the_requirements(
        spec in prop::collection::vec((0usize..4, 0usize..3, 0usize..3, 0usize..2, 1usize..200, 0usize..3), 1..12),
        budget in 1u64..120,
        exclude_untrusted in any::<bool>(),
    ) {
        let words = ["parquet", "storage", "engine", "other"];
        let trusts = ["untrusted", "unknown", "verified"];
        let projects = ["main", "other", "main"];
        let mut objs = Vec::new();
        for (i, (w, t, p, secret, len, roles)) in spec.iter().enumerate() {
            let mut o = obj(&format!("o{i:02}"), words[*w], vec![
                rep("text", &format!("{} {}", words[(w + 1) % 4], "x".repeat(*len))),
                rep("summary", words[(w + 2) % 4]),
            ]);
            o.trust = trusts[*t];
            o.project = projects[*p];
            if *secret == 1 { o.roles = vec!["data", "secret"]; }
            if *roles == 1 { o.reps[0].roles = vec!["instruction"]; }
            objs.push(o);
        }
        let links: Vec<Link> = vec![];
        let dir = tempfile::tempdir().unwrap();
        write_store(dir.path(), &objs, &links, &[], false);
        let q = format!(
            r#"CONTEXT FOR "parquet storage engine" USING PROJECT "main" BUDGET {budget} TOKENS EXCLUDE ROLE INSTRUCTION{}"#,
            if exclude_untrusted { ", UNTRUSTED" } else { "" }
        );
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let b = rt.block_on(bundle(dir.path(), &q));
        let mut seen = std::collections::HashSet::new();
        let used: i64 = b.items.iter().map(|i| i.tokens).sum();
        prop_assert!(used <= budget as i64);
        prop_assert_eq!(used as u64, b.metadata.budget.used);
        for item in &b.items {
            let id = item.object.trim_start_matches("object://").split('@').next().unwrap().to_string();
            prop_assert!(seen.insert(id.clone()), "two representations of {}", id);
            let o = objs.iter().find(|o| o.id == id).unwrap();
            prop_assert_eq!(o.project, "main");
            prop_assert!(!o.roles.contains(&"secret"));
            prop_assert!(!(exclude_untrusted && o.trust == "untrusted"));
            prop_assert!(!item.roles.contains(&"instruction".to_string()));
        }
    }
}

#[tokio::test]
async fn find_object_about_ranks_by_lexical_score() {
    let dir = store();
    let env = engine(dir.path())
        .query(r#"FIND OBJECT ABOUT "parquet storage engine" WHERE project = "main""#)
        .await
        .unwrap();
    let names: Vec<&str> = env.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "object_id",
            "revision",
            "project",
            "kind",
            "title",
            "created_at",
            "state",
            "trust",
            "origin",
            "validation",
            "score"
        ]
    );
    let got: Vec<(String, i64)> = env
        .rows
        .iter()
        .map(|r| (r[0].as_str().unwrap().to_string(), r[10].as_i64().unwrap()))
        .collect();
    // Hand-scored above; objects without a readable (packable, non-secret) representation
    // (the secret, the binary) are not scored; zero scores are dropped.
    let want: Vec<(String, i64)> = [
        ("a_main", 888_888),
        ("f_untrusted", 666_666),
        ("g_stale", 666_666),
        ("b_engine", 444_444),
        ("h_instruction", 333_333),
        ("j_old", 333_333),
    ]
    .iter()
    .map(|(id, s)| (id.to_string(), *s))
    .collect();
    assert_eq!(got, want);
    assert!(env.metadata.ordered);

    // USING REPRESENTATION summary: only A has one ("An engine for columns": engine, 2/9).
    let env = engine(dir.path())
        .query(r#"FIND OBJECT ABOUT "parquet storage engine" USING REPRESENTATION summary LIMIT 3"#)
        .await
        .unwrap();
    assert_eq!(env.rows.len(), 1);
    assert_eq!(env.rows[0][10], serde_json::json!(222_222));

    // Kind and WHERE filters; an unknown column is unknown_field.
    let env = engine(dir.path())
        .query(r#"FIND OBJECT (document) WHERE trust = "untrusted" OR state = "stale""#)
        .await
        .unwrap();
    let ids: Vec<&str> = env.rows.iter().map(|r| r[0].as_str().unwrap()).collect();
    assert_eq!(ids, ["f_untrusted", "g_stale"]);
    let err = engine(dir.path())
        .query(r#"FIND OBJECT WHERE colour = "red""#)
        .await
        .unwrap_err();
    assert_eq!(err.to_json()["error"]["code"], "unknown_field");
}

#[tokio::test]
async fn with_evidence_lists_derivations_and_entities() {
    let dir = store();
    let q = r#"CONTEXT FOR "parquet storage engine" USING PROJECT "main" EXCLUDE UNTRUSTED, STALE, ROLE INSTRUCTION MAX AGE 60 d WITH EVIDENCE"#;
    let b = bundle(dir.path(), q).await;
    let ev = b.evidence.expect("WITH EVIDENCE");
    assert_eq!(ev.len(), b.items.len());
    let of = |o: &str| ev.iter().find(|e| e["object"] == o).unwrap().clone();
    let be = of("object://b_engine@1");
    assert_eq!(
        be["derivations"],
        serde_json::json!([{"relation": "derived_from", "source": "object://a_main@1", "source_latest_revision": 1, "link_state": "current"}])
    );
    let ae = of("object://a_main@1");
    assert_eq!(
        ae["entities"],
        serde_json::json!([
            {"entity_type": "object", "entity_id": "c_linked", "relation": "links_to"},
            {"entity_type": "topic", "entity_id": "x", "relation": "about"}
        ])
    );
    // Without WITH EVIDENCE there is no evidence member.
    let b = bundle(dir.path(), &q.replace(" WITH EVIDENCE", "")).await;
    assert!(b.evidence.is_none());
}

#[tokio::test]
async fn compress_shrinks_what_does_not_fit_and_render_fences_instructions() {
    let text = "Intro line. Parquet storage is columnar. Unrelated filler sentence here. The engine reads it.";
    let mut notes = obj("n_notes", "Notes", vec![rep("text", text)]);
    notes.reps[0].roles = vec!["instruction"];
    let dir = tempfile::tempdir().unwrap();
    write_store(dir.path(), &[notes], &[], &[], false);
    // Whole text: 93 chars = 24 tokens > 10. Without COMPRESS it is left out for the budget.
    let q = r#"CONTEXT FOR "parquet storage engine" BUDGET 10 TOKENS"#;
    let b = bundle(dir.path(), q).await;
    assert!(b.items.is_empty());
    assert_eq!(b.metadata.excluded["budget"], 1);
    // With it: the sentence with two terms (28 chars, 7 tokens) fits; adding the one with one
    // term would make 49 chars (13 tokens). Two of the three terms in the text are kept.
    let b = bundle(dir.path(), &format!("{q} COMPRESS")).await;
    assert_eq!(b.metadata.canonical_query, format!("{q} COMPRESS"));
    assert_eq!(b.items.len(), 1);
    let item = &b.items[0];
    assert_eq!(
        item.content.as_deref(),
        Some("Parquet storage is columnar.")
    );
    assert_eq!(
        (item.tokens, item.estimator.as_str()),
        (7, "chars-div-4-v1")
    );
    let c = item.compression.as_ref().unwrap();
    assert!((c.preservation - 2.0 / 3.0).abs() < 1e-12);
    assert_eq!(c.original_tokens, 24);
    assert_eq!(b.metadata.compression_ratio, Some(28.0 / 93.0));
    use sha2::Digest;
    assert_eq!(
        item.content_hash,
        hex::encode(sha2::Sha256::digest(b"Parquet storage is columnar."))
    );

    // Render: provenance header, and the instruction content fenced.
    let text = signalql::render_bundle(&b);
    assert!(text.contains(&b.id));
    assert!(text.contains("## [1] object://n_notes@1 (text, text/plain)"));
    let open = text
        .find("<<<BEGIN QUOTED CONTENT roles=data,instruction")
        .unwrap();
    let body = text.find("Parquet storage is columnar.").unwrap();
    let close = text.find("<<<END QUOTED CONTENT>>>").unwrap();
    assert!(open < body && body < close);
}

// The spec's selection requirements, one test each, on the hand-made corpus with every kind of
// object in play (no EXCLUDE, so the filters that remain are scope and the secret rule).
const ALL: &str = r#"CONTEXT FOR "parquet storage engine password" USING PROJECT "main" MAX DEPTH 3 BUDGET 30 TOKENS"#;

#[tokio::test]
async fn requirement_1_scope_exclude_and_secret_are_never_violated() {
    let dir = store();
    let q = r#"CONTEXT FOR "parquet storage engine password" USING PROJECT "main" EXCLUDE UNTRUSTED, STALE, ROLE INSTRUCTION MAX DEPTH 3"#;
    let b = bundle(dir.path(), q).await;
    assert!(!b.items.is_empty());
    for i in &b.items {
        for banned in [
            "e_other",
            "d_secret",
            "f_untrusted",
            "g_stale",
            "h_instruction",
            "v_behind_secret",
        ] {
            assert!(!i.object.contains(banned), "{} in the bundle", i.object);
        }
        assert!(!i.roles.contains(&"secret".to_string()));
    }
}

#[tokio::test]
async fn requirement_2_the_token_sum_never_exceeds_the_budget() {
    let dir = store();
    let b = bundle(dir.path(), ALL).await;
    let sum: i64 = b.items.iter().map(|i| i.tokens).sum();
    assert!(sum <= 30, "{sum}");
    assert_eq!(sum as u64, b.metadata.budget.used);
    assert_eq!(b.metadata.budget.limit, 30);
}

#[tokio::test]
async fn requirement_3_at_most_one_representation_per_object() {
    let dir = store();
    let b = bundle(dir.path(), &ALL.replace("BUDGET 30", "BUDGET 1000")).await;
    let mut objects: Vec<&str> = b.items.iter().map(|i| i.object.as_str()).collect();
    let n = objects.len();
    objects.sort();
    objects.dedup();
    assert_eq!(objects.len(), n);
}

#[tokio::test]
async fn requirement_4_every_item_names_its_estimator() {
    let dir = store();
    let b = bundle(dir.path(), ALL).await;
    assert!(!b.items.is_empty());
    for i in &b.items {
        assert_eq!(i.estimator, "chars-div-4-v1");
        // chars-div-4-v1 is ceil(characters / 4) of the packed content.
        let chars = i.content.as_deref().unwrap().chars().count() as i64;
        assert_eq!(i.tokens, (chars + 3) / 4);
    }
    assert_eq!(b.metadata.estimators, ["chars-div-4-v1"]);
}

#[tokio::test]
async fn requirement_5_the_bundle_names_its_scorer() {
    let dir = store();
    let b = bundle(dir.path(), ALL).await;
    assert_eq!(b.metadata.scorer, "lexical-v1");
    let x = engine(dir.path()).explain_context(&b.id).await.unwrap();
    assert_eq!(x.scorer, "lexical-v1");
}

#[tokio::test]
async fn as_of_selects_revisions_and_liveness_at_that_time() {
    let (mut o, l, d) = corpus();
    // a_main gets a second revision on 2026-05-25 whose text no longer matches, and an object
    // created after the AS OF instant.
    let mut a2 = o[0].clone();
    a2.revision = 2;
    a2.created = "2026-05-25T00:00:00Z";
    a2.title = "Renamed".into();
    a2.reps = vec![rep("text", "nothing")];
    let mut late = obj(
        "l_late",
        "Parquet storage engine",
        vec![rep("text", "late")],
    );
    late.created = "2026-05-28T00:00:00Z";
    o.push(a2);
    o.push(late);
    let dir = tempfile::tempdir().unwrap();
    write_store(dir.path(), &o, &l, &d, true);
    let q = |as_of: &str| {
        format!(
            r#"CONTEXT FOR "parquet storage engine" USING PROJECT "main" EXCLUDE UNTRUSTED, STALE, ROLE INSTRUCTION MAX AGE 60 d AS OF "{as_of}""#
        )
    };
    // Before revision 2: a_main@1 leads; l_late does not exist yet.
    let before = bundle(dir.path(), &q("2026-05-24T00:00:00Z")).await;
    assert_eq!(
        before.metadata.as_of.as_deref(),
        Some("2026-05-24T00:00:00Z")
    );
    assert_eq!(before.items[0].object, "object://a_main@1");
    assert!(!ids(&before).iter().any(|i| i.contains("l_late")));
    // After: l_late leads with 9/9; a_main@2 ("Renamed", "nothing") matches nothing and its
    // links were recorded for revision 1, so only b_engine's derivation reaches it:
    // 444444 / 2 = 222222; c_linked and k_two_hops are no longer reached.
    let after = bundle(dir.path(), &q("2026-05-30T00:00:00Z")).await;
    let got: Vec<(String, i64)> = after
        .items
        .iter()
        .map(|i| (i.object.clone(), i.score))
        .collect();
    assert_eq!(
        got,
        vec![
            ("object://l_late@1".to_string(), 1_000_000),
            ("object://b_engine@1".to_string(), 444_444),
            ("object://a_main@2".to_string(), 222_222),
        ]
    );
    assert_eq!(
        after.items[2].why[0]["graph_expansion"]["from"],
        "object://b_engine@1"
    );
    assert_ne!(before.id, after.id);
}

#[tokio::test]
async fn content_kept_by_reference_is_packed_by_reference() {
    let mut stored = obj("r_stored", "Parquet storage engine", vec![rep("text", "")]);
    stored.reps[0].by_ref = Some("s3://bucket/r_stored.txt");
    stored.reps[0].tokens = Some(5);
    let mut unsized_ = obj("r_unsized", "Parquet storage engine", vec![rep("text", "")]);
    unsized_.reps[0].by_ref = Some("s3://bucket/r_unsized.txt");
    let dir = tempfile::tempdir().unwrap();
    write_store(dir.path(), &[stored, unsized_], &[], &[], false);
    let b = bundle(dir.path(), r#"CONTEXT FOR "parquet storage engine""#).await;
    assert_eq!(b.items.len(), 1);
    let i = &b.items[0];
    assert_eq!(i.object, "object://r_stored@1");
    assert_eq!(i.content, None);
    assert_eq!(i.content_ref.as_deref(), Some("s3://bucket/r_stored.txt"));
    assert_eq!((i.tokens, i.estimator.as_str()), (5, "stored"));
    // Without content or a stored estimate there is nothing to count: not packable.
    let x = engine(dir.path()).explain_context(&b.id).await.unwrap();
    assert_eq!(x.rejected[0].object, "object://r_unsized@1");
    assert_eq!(x.rejected[0].reason.as_str(), "no_packable_representation");
}

/// The packed-content lookup runs on a copy of the session with its own config; the copy
/// must share the session's catalogs, not replace them: a table the user registered in the
/// engine's session is still there after a CONTEXT FOR (it once vanished).
#[tokio::test]
async fn context_for_keeps_the_sessions_registered_tables() {
    let dir = store();
    let engine = engine(dir.path());
    let reps = engine
        .dataset()
        .table(engine.session(), "representations")
        .await
        .unwrap();
    engine
        .session()
        .register_table("my_reps", reps.provider)
        .unwrap();
    let q = r#"CONTEXT FOR "parquet storage engine" BUDGET 4000 TOKENS"#;
    for _ in 0..2 {
        match engine.answer(q).await {
            Ok(Answer::Bundle(b)) => assert!(!b.items.is_empty()),
            other => panic!("not a bundle: {other:?}"),
        }
        let n = engine
            .session()
            .sql("SELECT count(*) FROM my_reps")
            .await
            .expect("the registered table is still there")
            .count()
            .await
            .unwrap();
        assert_eq!(n, 1);
    }
}

/// The words of the random corpora of [`the_index_changes_no_answer`]: mixed case, a non-ASCII
/// one and a stopword, so the tokeniser's folding is part of what the index must repeat.
const WORDS: [&str; 7] = [
    "Parquet", "storage", "ENGINE", "funnel", "Straße", "cohort", "the",
];

/// Rewrites the file at `path` in place with the same bytes: a new version (modification
/// time), so an index that covered it no longer does.
fn rewrite(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(10));
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The answer of `q` in a form the paths must agree on: a bundle without its evaluation
/// time and store fields (its address included), or a FIND OBJECT envelope's rows.
async fn comparable(root: &Path, q: &str) -> serde_json::Value {
    match engine(root).answer(q).await {
        Ok(Answer::Bundle(b)) => serde_json::json!({
            "id": b.id,
            "items": b.items,
            "evidence": b.evidence,
            "considered": b.metadata.considered,
            "excluded": b.metadata.excluded,
            "truncated": b.metadata.truncated,
            "used": b.metadata.budget.used,
            "estimators": b.metadata.estimators,
        }),
        Ok(Answer::Envelope(e)) => serde_json::json!(e.rows),
        Ok(other) => panic!("{q}: {other:?}"),
        Err(e) => serde_json::json!({"error": e.to_json()}),
    }
}

// The text index changes no answer (docs/index.md, "Queries"): over random corpora (second
// revisions, secret revisions and representations, instruction roles, untrusted and stale
// objects, two projects, stored token counts, content kept by reference, binary media, links),
// every CONTEXT FOR (each clause: USING PROJECT, BUDGET, PREFER, EXCLUDE, MAX OBJECTS, DEPTH
// and AGE, WITH EVIDENCE, COMPRESS, AS OF, USING ESTIMATOR) and FIND OBJECT ABOUT gives the same bundle (its address, items, evidence and counts) and the
// same rows with the index covering every representations file, covering some (the others
// rewritten since it was written), and with no index at all.
proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    #[test]
    fn the_index_changes_no_answer(
        spec in prop::collection::vec(
            (0usize..7, 0usize..7, 0usize..7, 0usize..3, 0usize..4, 0usize..4, 0usize..4, any::<bool>()),
            1..9,
        ),
        queries in prop::collection::vec(
            (0usize..7, 0usize..7, 1u64..400, 1u32..6, 0u32..3, 0u16..8192),
            4,
        ),
    ) {
        let mut objs = Vec::new();
        let mut links: Vec<Link> = Vec::new();
        let ids: Vec<&'static str> = ["o0", "o1", "o2", "o3", "o4", "o5", "o6", "o7", "o8"].to_vec();
        for (i, &(t, a, b, trust, roles, media, second, link)) in spec.iter().enumerate() {
            let text = format!("{} and {}-x{} {}", WORDS[a], WORDS[(a + b) % 7], i, "y ".repeat(i * 7));
            let mut o = obj(ids[i], &format!("{} notes", WORDS[t]), vec![
                rep("text", &text),
                rep("summary", &format!("About {}.", WORDS[b])),
            ]);
            o.trust = ["unknown", "untrusted", "verified"][trust];
            if i % 3 == 1 {
                o.project = "other";
            }
            if i % 4 == 2 {
                o.state = "stale";
            }
            // o0 is never secret, so that every corpus has a candidate.
            match if i == 0 { 0 } else { roles } {
                1 => o.roles = vec!["data", "secret"],
                2 => o.reps[0].roles = vec!["instruction"],
                3 => o.reps[1].roles = vec!["secret"],
                _ => {}
            }
            match media {
                1 => o.reps[0].media = "image/png",
                2 => o.reps[1].tokens = Some(5),
                3 => o.reps[0].by_ref = Some("s3://bucket/blob"),
                _ => {}
            }
            if link && i > 0 {
                links.push((ids[i], "object", ids[i - 1], "links_to"));
            }
            objs.push(o.clone());
            if second > 1 {
                // A later revision: other words, a title that changed.
                let mut r2 = o;
                r2.revision = 2;
                r2.created = "2026-05-25T00:00:00Z";
                r2.title = format!("{} revised", WORDS[(t + second) % 7]);
                r2.reps[0].content = format!("{} {}", WORDS[(a + 3) % 7], WORDS[(b + 5) % 7]);
                objs.push(r2);
            }
        }
        let scan = tempfile::tempdir().unwrap();
        write_store(scan.path(), &objs, &links, &[], true);
        let full = tempfile::tempdir().unwrap();
        crate::common::copy_dir(scan.path(), full.path());
        let root = signalql::catalog::storage::Root::Local(full.path().to_path_buf());
        let summary = signalql::catalog::objects::index::index_root(&root).unwrap();
        prop_assert!(summary.files >= 1);
        let part = tempfile::tempdir().unwrap();
        crate::common::copy_dir(full.path(), part.path());
        let mut reps: Vec<_> = std::fs::read_dir(part.path().join("representations"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        reps.sort();
        for p in reps.iter().step_by(2) {
            rewrite(p);
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        for &(w1, w2, budget, max_objects, depth, flags) in &queries {
            let task = format!("{} {} the", WORDS[w1], WORDS[w2].to_lowercase());
            let mut q = format!(r#"CONTEXT FOR "{task}""#);
            if flags & 128 != 0 {
                q.push_str(r#" USING PROJECT "main""#);
            }
            if flags & 4096 != 0 {
                q.push_str(r#" USING ESTIMATOR "o200k""#);
            }
            q.push_str(&format!(" BUDGET {budget} TOKENS"));
            let mut prefer = Vec::new();
            if flags & 256 != 0 { prefer.push("CURRENT"); }
            if flags & 512 != 0 { prefer.push("VERIFIED"); }
            if flags & 1 != 0 { prefer.push(r#"REPRESENTATION "summary""#); }
            if !prefer.is_empty() {
                q.push_str(&format!(" PREFER {}", prefer.join(", ")));
            }
            let mut ex = Vec::new();
            if flags & 2 != 0 { ex.push("UNTRUSTED"); }
            if flags & 1024 != 0 { ex.push("STALE"); }
            if flags & 4 != 0 { ex.push("ROLE INSTRUCTION"); }
            if !ex.is_empty() {
                q.push_str(&format!(" EXCLUDE {}", ex.join(", ")));
            }
            q.push_str(&format!(" MAX OBJECTS {max_objects} MAX DEPTH {depth}"));
            if flags & 2048 != 0 { q.push_str(" MAX AGE 10 d"); }
            if flags & 8 != 0 { q.push_str(" WITH EVIDENCE"); }
            if flags & 64 != 0 { q.push_str(" COMPRESS"); }
            let as_of = if flags & 16 != 0 { r#" AS OF "2026-05-22T00:00:00Z""# } else { "" };
            q.push_str(as_of);
            let using = if flags & 32 != 0 { r#" USING REPRESENTATION "summary""# } else { "" };
            let find = format!(r#"FIND OBJECT ABOUT "{task}"{using}{as_of}"#);
            let context = q.clone();
            for q in [q, find] {
                let a = rt.block_on(comparable(scan.path(), &q));
                let b = rt.block_on(comparable(full.path(), &q));
                let c = rt.block_on(comparable(part.path(), &q));
                prop_assert_eq!(&a, &b, "{} (index covering every file)", q);
                prop_assert_eq!(&a, &c, "{} (index covering some files)", q);
            }
            // Over the store the index covers whole, every candidate is scored from it
            // (COMPRESS reads every candidate's text: docs/index.md, "When the index is not
            // used"); over the store without one, none is.
            if flags & 64 == 0 {
                let b = rt.block_on(bundle(full.path(), &context));
                let (index, scanned) = rt.block_on(scoring(full.path(), &b.id));
                prop_assert_eq!((index, scanned), (b.metadata.considered, 0), "{}", context);
                let b = rt.block_on(bundle(scan.path(), &context));
                let (index, scanned) = rt.block_on(scoring(scan.path(), &b.id));
                prop_assert_eq!((index, scanned), (0, b.metadata.considered), "{}", context);
            }
        }
        // A task of every word the corpus is made of (each text and summary holds some), so
        // that there are candidates and the postings are read: the index scores them all.
        let task = format!(r#"CONTEXT FOR "{}""#, WORDS.join(" "));
        let b = rt.block_on(bundle(full.path(), &task));
        prop_assert!(b.metadata.considered > 0, "{:?}", b.metadata);
        let (index, scanned) = rt.block_on(scoring(full.path(), &b.id));
        prop_assert!(index > 0 && scanned == 0, "index {} scan {}", index, scanned);
        let b = rt.block_on(bundle(scan.path(), &task));
        let (index, scanned) = rt.block_on(scoring(scan.path(), &b.id));
        prop_assert!(index == 0 && scanned > 0, "index {} scan {}", index, scanned);
    }
}

/// How many candidates of the bundle `id` were scored from the text index, and how many by
/// reading their text (EXPLAIN CONTEXT's `scoring`).
async fn scoring(root: &Path, id: &str) -> (u64, u64) {
    match engine(root).answer(&format!("EXPLAIN CONTEXT {id}")).await {
        Ok(Answer::Explanation(x)) => {
            let s = x
                .scoring
                .expect("EXPLAIN CONTEXT says how candidates were scored");
            (s.index, s.scan)
        }
        other => panic!("EXPLAIN CONTEXT {id}: {other:?}"),
    }
}
