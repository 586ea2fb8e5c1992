//! The resident context index (engine/src/context/resident.rs) gives FIND OBJECT the answers
//! of the Parquet plan: one property test over random object stores (several records and
//! revisions per object, tombstones before and after T, secret revisions and
//! representations, media that cannot be packed, ids whose byte order is not their UTF-16
//! order, ties the generation refuses, rows after T) and random FIND statements, each run by
//! an engine without the index (the Parquet plan) and one with it, with the path each took
//! asserted from the plan; in some stores under a policy, as an unrestricted and a restricted
//! principal whose engines share one resident index.

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
use signalql::{Answer, Engine, EngineOptions, Resident};

const T: &str = "2026-06-01T00:00:00Z";

/// Object ids: byte order differs from UTF-16 order for the last two (U+FF21 sorts before
/// U+1F600 in bytes, after it in UTF-16), and case matters.
const IDS: [&str; 9] = ["a", "B", "b", "a0", "z", "é", "Z9", "\u{ff21}", "\u{1f600}"];

/// Words of titles and contents: case and Unicode folding, a stopword, digits.
const WORDS: [&str; 9] = [
    "Parquet", "storage", "ENGINE", "funnel", "Straße", "cohort", "the", "x1", "ÉTÉ",
];

fn day(d: i64) -> i64 {
    DateTime::parse_from_rfc3339("2026-05-01T00:00:00Z")
        .unwrap()
        .timestamp_micros()
        + d * 86_400_000_000
}

fn strings(v: Vec<Option<String>>) -> ArrayRef {
    Arc::new(StringArray::from(v))
}

fn ts(v: Vec<Option<i64>>) -> ArrayRef {
    Arc::new(TimestampMicrosecondArray::from(v).with_timezone("UTC"))
}

fn text(words: &[usize]) -> String {
    words
        .iter()
        .map(|&w| WORDS[w % WORDS.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

/// One object record: day recorded, kind, project, title words, tombstone day.
type Record = (i64, usize, usize, Vec<usize>, Option<i64>);
/// One revision: number, day created, secret, trust, state.
type Revision = (i64, i64, bool, usize, usize);
/// One representation: revision, name, media, content words (None: kept by reference),
/// secret, another role (0: none, 1: instruction, 2: untrusted_external), a stored token
/// count.
type Rep = (
    i64,
    usize,
    usize,
    Option<Vec<usize>>,
    bool,
    usize,
    Option<i64>,
);
/// One edge of the object's latest revision (or the one before, `back`): to the object of
/// `IDS[target]` as a link (an `object` entity) or a derivation, or to a topic entity.
type Link = (i64, usize, usize);

#[derive(Debug, Clone)]
struct Object {
    records: Vec<Record>,
    revisions: Vec<Revision>,
    reps: Vec<Rep>,
    links: Vec<Link>,
}

fn object() -> impl Strategy<Value = Object> {
    let record = (
        0i64..25,
        0usize..3,
        0usize..3,
        prop::collection::vec(0usize..9, 0..3),
        prop::option::weighted(0.2, 0i64..40),
    );
    let revision = (0i64..25, prop::bool::weighted(0.15), 0usize..3, 0usize..3);
    // Which revision a representation is of: mostly the latest, else the one before, else
    // one that does not exist.
    let rep = (
        prop::sample::select(vec![0i64, 0, 0, 0, 0, 1, 9]),
        0usize..4,
        prop::sample::select(vec![0usize, 0, 0, 1, 2, 3]),
        prop::option::weighted(0.9, prop::collection::vec(0usize..9, 0..7)),
        prop::bool::weighted(0.1),
        prop::sample::select(vec![0usize, 0, 0, 0, 1, 2]),
        prop::option::weighted(0.15, 0i64..6),
    );
    let link = (
        prop::sample::select(vec![0i64, 0, 0, 1]),
        0usize..4,
        0usize..4,
    );
    (
        prop::collection::vec(record, 1..3),
        prop::collection::vec(revision, 0..4),
        prop::collection::vec(rep, 0..6),
        prop::bool::weighted(0.05),
        prop::collection::vec(link, 0..4),
    )
        .prop_map(|(records, revisions, reps, tie, links)| {
            let n = revisions.len() as i64;
            let revisions: Vec<Revision> = revisions
                .into_iter()
                .enumerate()
                .map(|(i, (d, secret, trust, state))| {
                    // Numbered 1, 2, …; with `tie`, the last two share a number.
                    let number = match tie && i as i64 == n - 1 && n > 1 {
                        true => n - 1,
                        false => i as i64 + 1,
                    };
                    (number, d, secret, trust, state)
                })
                .collect();
            let latest = revisions.iter().map(|r| r.0).max().unwrap_or(1);
            // A revision has one representation of a name (the object tables' key).
            let mut reps: Vec<Rep> = reps
                .into_iter()
                .map(|(back, name, media, content, secret, role, tokens)| {
                    (latest - back, name, media, content, secret, role, tokens)
                })
                .collect();
            let mut seen = std::collections::HashSet::new();
            reps.retain(|r| seen.insert((r.0, r.1 % 3)));
            let links = links
                .into_iter()
                .map(|(back, target, how)| (latest - back, target, how))
                .collect();
            Object {
                records,
                revisions,
                reps,
                links,
            }
        })
}

/// Writes the store: each table in one file, or in two (`split`).
fn write(root: &Path, objects: &[Object], split: bool) {
    let parts = if split { 2 } else { 1 };
    for part in 0..parts {
        let mine: Vec<(usize, &Object)> = objects
            .iter()
            .enumerate()
            .filter(|(i, _)| i % parts == part)
            .collect();
        write_part(root, &format!("part-{part}"), &mine);
    }
}

/// Writes the rows of `objects` (each with its index in [`IDS`]) as one file per table named
/// `stem`.
fn write_part(root: &Path, stem: &str, objects: &[(usize, &Object)]) {
    let mut o: Vec<(String, &Record)> = Vec::new();
    let mut r: Vec<(String, &Revision)> = Vec::new();
    let mut p: Vec<(String, &Rep)> = Vec::new();
    let mut l: Vec<(String, &Link)> = Vec::new();
    for &(i, obj) in objects {
        let id = IDS[i].to_string();
        o.extend(obj.records.iter().map(|x| (id.clone(), x)));
        r.extend(obj.revisions.iter().map(|x| (id.clone(), x)));
        p.extend(obj.reps.iter().map(|x| (id.clone(), x)));
        l.extend(obj.links.iter().map(|x| (id.clone(), x)));
    }
    write_edges(root, stem, &l);
    let b = RecordBatch::try_new(
        objects_schema(),
        vec![
            strings(o.iter().map(|(id, _)| Some(id.clone())).collect()),
            strings(
                o.iter()
                    .map(|(_, x)| ["main", "other", "main"][x.2].into())
                    .map(Some)
                    .collect(),
            ),
            strings(
                o.iter()
                    .map(|(_, x)| Some(["document", "note", "document"][x.1].into()))
                    .collect(),
            ),
            strings(o.iter().map(|(_, x)| Some(text(&x.3))).collect()),
            ts(o.iter().map(|(_, x)| Some(day(x.0))).collect()),
            ts(o.iter().map(|(_, x)| x.4.map(day)).collect()),
            ts(o.iter().map(|(_, x)| Some(day(x.0))).collect()),
            strings(o.iter().map(|_| None).collect()),
        ],
    )
    .unwrap();
    write_parquet_atomic(&root.join("objects"), stem, objects_schema(), &[b]).unwrap();
    let b = RecordBatch::try_new(
        revisions_schema(),
        vec![
            strings(r.iter().map(|(id, _)| Some(id.clone())).collect()),
            Arc::new(Int64Array::from(
                r.iter().map(|(_, x)| x.0).collect::<Vec<_>>(),
            )),
            ts(r.iter().map(|(_, x)| Some(day(x.1))).collect()),
            strings(r.iter().map(|_| Some("import".into())).collect()),
            strings(
                r.iter()
                    .map(|(_, x)| Some(["unknown", "verified", "untrusted"][x.3].into()))
                    .collect(),
            ),
            strings(r.iter().map(|_| Some("none".into())).collect()),
            roles(
                &r.iter()
                    .map(|(_, x)| match x.2 {
                        true => vec!["data", "secret"],
                        false => vec!["data"],
                    })
                    .collect::<Vec<_>>(),
            ),
            strings(
                r.iter()
                    .map(|(_, x)| Some(["current", "stale", "invalid"][x.4].into()))
                    .collect(),
            ),
        ],
    )
    .unwrap();
    write_parquet_atomic(&root.join("revisions"), stem, revisions_schema(), &[b]).unwrap();
    let media = [
        "text/plain",
        "application/json",
        "image/png",
        "text/markdown",
    ];
    let b = RecordBatch::try_new(
        representations_schema(),
        vec![
            strings(p.iter().map(|(id, _)| Some(id.clone())).collect()),
            Arc::new(Int64Array::from(
                p.iter().map(|(_, x)| x.0).collect::<Vec<_>>(),
            )),
            strings(
                p.iter()
                    .map(|(_, x)| Some(["summary", "text", "notes", "summary"][x.1].into()))
                    .collect(),
            ),
            strings(p.iter().map(|(_, x)| Some(media[x.2].into())).collect()),
            Arc::new(LargeStringArray::from(
                p.iter()
                    .map(|(_, x)| x.3.as_ref().map(|w| text(w)))
                    .collect::<Vec<_>>(),
            )),
            strings(
                p.iter()
                    .map(|(_, x)| x.3.is_none().then(|| "s3://b/blob".into()))
                    .collect(),
            ),
            strings(p.iter().map(|_| Some("0".repeat(64))).collect()),
            Arc::new(Int64Array::from(
                p.iter().map(|(_, x)| x.6).collect::<Vec<_>>(),
            )),
            roles(
                &p.iter()
                    .map(|(_, x)| {
                        let mut r = vec![["data", "instruction", "untrusted_external"][x.5]];
                        if x.4 {
                            r.push("secret");
                        }
                        r
                    })
                    .collect::<Vec<_>>(),
            ),
        ],
    )
    .unwrap();
    write_parquet_atomic(
        &root.join("representations"),
        stem,
        representations_schema(),
        &[b],
    )
    .unwrap();
}

/// Writes the edges: links to an object (`how` 0) or a topic (`how` 1), derivations (`how`
/// 2 and 3), each in its own file of `stem`.
fn write_edges(root: &Path, stem: &str, l: &[(String, &Link)]) {
    let links: Vec<&(String, &Link)> = l.iter().filter(|(_, x)| x.2 < 2).collect();
    let b = RecordBatch::try_new(
        links_schema(),
        vec![
            strings(links.iter().map(|(id, _)| Some(id.clone())).collect()),
            Arc::new(Int64Array::from(
                links.iter().map(|(_, x)| x.0).collect::<Vec<_>>(),
            )),
            strings(
                links
                    .iter()
                    .map(|(_, x)| Some(["object", "topic"][x.2].into()))
                    .collect(),
            ),
            strings(
                links
                    .iter()
                    .map(|(_, x)| Some([IDS[x.1], WORDS[x.1 % 3]][x.2].into()))
                    .collect(),
            ),
            strings(links.iter().map(|_| Some("mentions".into())).collect()),
        ],
    )
    .unwrap();
    write_parquet_atomic(&root.join("links"), stem, links_schema(), &[b]).unwrap();
    let derived: Vec<&(String, &Link)> = l.iter().filter(|(_, x)| x.2 >= 2).collect();
    let b = RecordBatch::try_new(
        derivations_schema(),
        vec![
            strings(derived.iter().map(|(id, _)| Some(id.clone())).collect()),
            Arc::new(Int64Array::from(
                derived.iter().map(|(_, x)| x.0).collect::<Vec<_>>(),
            )),
            strings(
                derived
                    .iter()
                    .map(|(_, x)| Some(["derived_from", "cites"][x.2 - 2].into()))
                    .collect(),
            ),
            strings(derived.iter().map(|(_, x)| Some(IDS[x.1].into())).collect()),
            Arc::new(Int64Array::from(vec![1i64; derived.len()])),
        ],
    )
    .unwrap();
    write_parquet_atomic(&root.join("derivations"), stem, derivations_schema(), &[b]).unwrap();
}

/// Whether the generation can stand for the store at `t` (microseconds): no two records of an
/// object at its latest time, no two revisions of it with its latest number, no row after
/// `t`.
fn holdable(objects: &[Object], t: i64) -> bool {
    !tied(objects)
        && objects.iter().all(|o| {
            o.records.iter().all(|r| day(r.0) <= t) && o.revisions.iter().all(|r| day(r.1) <= t)
        })
}

/// Whether an object has two records at its latest time or two revisions with its latest
/// number (every row counted, as at a T after all of them).
fn tied(objects: &[Object]) -> bool {
    let tied = |v: Vec<i64>| {
        let Some(&m) = v.iter().max() else {
            return false;
        };
        v.iter().filter(|&&x| x == m).count() > 1
    };
    objects.iter().any(|o| {
        tied(o.records.iter().map(|r| r.0).collect())
            || tied(o.revisions.iter().map(|r| r.0).collect())
    })
}

/// A policy with an unrestricted `default` principal and a `narrow` one: the `main` project,
/// trust `unknown` or above, no secret revision or representation, titles masked.
const POLICY: &str = r#"
[principals.default]
[principals.narrow.columns]
mask = ["objects.title"]
[principals.narrow.context]
projects = ["main"]
min_trust = "unknown"
exclude_roles = ["secret"]
"#;

fn engine(root: &Path, resident: Option<Arc<Resident>>, principal: Option<&str>) -> Engine {
    let now = DateTime::parse_from_rfc3339(T).unwrap().with_timezone(&Utc);
    Engine::open_with(
        root,
        EngineOptions {
            now: Some(now),
            resident,
            principal: principal.map(str::to_string),
            ..Default::default()
        },
    )
    .unwrap()
}

/// The rows and column names of an answer, or its error.
async fn answer(engine: &Engine, q: &str) -> serde_json::Value {
    match engine.answer(q).await {
        Ok(Answer::Envelope(e)) => serde_json::json!({
            "columns": e.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
            "rows": e.rows,
            "truncated": e.metadata.truncated,
        }),
        Ok(other) => panic!("{q}: {other:?}"),
        Err(e) => serde_json::json!({"error": e.to_json()}),
    }
}

const WHERES: [&str; 6] = [
    "",
    r#" WHERE project = "main""#,
    r#" WHERE trust = "verified" OR state = "stale""#,
    r#" WHERE revision >= 2"#,
    r#" WHERE kind = "note" AND title != """#,
    r#" WHERE colour = "red""#,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn the_resident_index_changes_no_find_answer(
        objects in prop::collection::vec(object(), 1..9),
        split in any::<bool>(),
        governed in prop::bool::weighted(0.4),
        queries in prop::collection::vec(
            (
                prop::option::weighted(0.7, prop::collection::vec(0usize..9, 0..4)),
                prop::sample::select(vec![0usize, 0, 1, 2]),
                prop::sample::select(vec![0usize, 0, 0, 1, 2, 3, 4, 5]),
                prop::option::weighted(0.2, 0i64..40),
                prop::option::of(0u64..6),
                prop::bool::weighted(0.1),
            ),
            6,
        ),
    ) {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &objects, split);
        if governed {
            std::fs::write(dir.path().join("policy.toml"), POLICY).unwrap();
        }
        // The same store read through a mapping, which no generation stands for.
        let mapped_dir = tempfile::tempdir().unwrap();
        mapped_copy(dir.path(), mapped_dir.path());
        let rt = runtime();
        // One resident index for the engines of both principals, as a server has.
        let held: Arc<Resident> = Default::default();
        // The snapshot file `signalql index` writes, and a one-shot engine that reads it.
        let unrestricted = if governed { Some("default") } else { None };
        let written = rt
            .block_on(engine(dir.path(), None, unrestricted).write_resident_snapshot())
            .unwrap();
        prop_assert_eq!(written.is_some(), !tied(&objects));
        let principals: &[Option<&str>] = match governed {
            true => &[Some("default"), Some("narrow")],
            false => &[None],
        };
        for (k, (about, kind, filter, as_of, limit, using)) in queries.into_iter().enumerate() {
            let principal = principals[k % principals.len()];
            let restricted = principal == Some("narrow");
            let scan = engine(dir.path(), None, principal);
            let resident = engine(dir.path(), Some(Arc::clone(&held)), principal);
            let snapshot = engine(dir.path(), Some(Arc::new(Resident::snapshots_only())), principal);
            let mapped = engine(mapped_dir.path(), Some(Arc::clone(&held)), principal);
            let mut q = String::from("FIND OBJECT");
            q.push_str(["", " (document)", " (note)"][kind]);
            if let Some(words) = &about {
                q.push_str(&format!(r#" ABOUT "{}""#, text(words)));
                if using {
                    q.push_str(r#" USING REPRESENTATION "summary""#);
                }
            }
            q.push_str(WHERES[filter]);
            let t = match as_of {
                Some(d) => {
                    let at = DateTime::from_timestamp_micros(day(d)).unwrap();
                    q.push_str(&format!(r#" AS OF "{}""#, at.to_rfc3339()));
                    day(d)
                }
                None => DateTime::parse_from_rfc3339(T).unwrap().timestamp_micros(),
            };
            if let Some(n) = limit {
                q.push_str(&format!(" LIMIT {n}"));
            }
            let mut a = rt.block_on(answer(&scan, &q));
            let mut b = rt.block_on(answer(&resident, &q));
            let mut c = rt.block_on(answer(&snapshot, &q));
            let mut d = rt.block_on(answer(&mapped, &q));
            let expected = holdable(&objects, t) && !(using && about.is_some());
            if !holdable(&objects, t) {
                // Tied records or revisions give an object twice, in either order.
                for v in [&mut a, &mut b, &mut c, &mut d] {
                    if let Some(rows) = v.get_mut("rows").and_then(|r| r.as_array_mut()) {
                        rows.sort_by_key(|r| r.to_string());
                    }
                }
            }
            // With ties, which of an object's two rows a LIMIT keeps is the Parquet plan's
            // choice of the moment (both engines take that plan): not compared.
            if !(tied(&objects) && limit.is_some()) {
                prop_assert_eq!(&a, &b, "{}", q);
                prop_assert_eq!(&a, &c, "{} (from the snapshot file)", q);
                prop_assert_eq!(&a, &d, "{} (mapped)", q);
            }
            // The path each took: the Parquet plan always without the index; with it, the
            // generation wherever it can stand for the store at T (and WHERE names columns).
            let shown = |e: &Engine| match rt.block_on(e.compile(&q)) {
                Ok(c) => Some(c.lowered.plan.display_indent().to_string().contains("resident_objects")),
                Err(_) => None,
            };
            if a.get("error").is_none() {
                prop_assert_eq!(shown(&scan), Some(false), "{}", q);
                prop_assert_eq!(shown(&mapped), Some(false), "{} (mapped)", q);
                // What the narrow principal sees may be held where the whole store is not.
                if !restricted || expected {
                    prop_assert_eq!(shown(&resident), Some(expected), "{} ({:?})", q, principal);
                }
                // A snapshot stands for the unrestricted view only.
                prop_assert_eq!(shown(&snapshot), Some(expected && !restricted), "{} (snapshot)", q);
            }
        }
    }
}

/// A store of three objects with one readable representation each.
fn small_store(root: &Path) -> Vec<Object> {
    let objects: Vec<Object> = (0..3)
        .map(|i| Object {
            records: vec![(i, 0, 0, vec![i as usize], None)],
            revisions: vec![(1, i, false, 0, 0)],
            reps: vec![(1, 1, 0, Some(vec![0, 1, i as usize + 2]), false, 0, None)],
            links: Vec::new(),
        })
        .collect();
    write(root, &objects, false);
    objects
}

/// The store under `root` replaced by `objects` (`split`: as [`write`] takes it).
fn rewrite(root: &Path, objects: &[Object], split: bool) {
    for t in [
        "objects",
        "revisions",
        "representations",
        "links",
        "derivations",
    ] {
        let _ = std::fs::remove_dir_all(root.join(t));
    }
    write(root, objects, split);
}

/// A fourth object for [`small_store`]'s three, so the tables have a new version.
fn fourth(objects: &[Object]) -> Vec<Object> {
    let mut more = objects.to_vec();
    more.push(Object {
        records: vec![(5, 1, 0, vec![3], None)],
        revisions: vec![(1, 5, false, 0, 0)],
        reps: vec![(1, 0, 0, Some(vec![0, 3]), false, 0, None)],
        links: Vec::new(),
    });
    more
}

/// A folder of notes under `tmp` holding "storage.md" and "layout.md", both about object
/// storage, and the folder of the store to ingest them into.
fn notes(tmp: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (notes, root) = (tmp.join("notes"), tmp.join("store"));
    std::fs::create_dir_all(&notes).unwrap();
    std::fs::write(
        notes.join("storage.md"),
        "# Object storage\n\nObjects are Parquet revisions.\n",
    )
    .unwrap();
    std::fs::write(
        notes.join("layout.md"),
        "# Layout\n\nThe object storage layout.\n",
    )
    .unwrap();
    (notes, root)
}

/// Whether `engine` plans the FIND OBJECT `q` over a resident generation.
fn planned_from_index(rt: &tokio::runtime::Runtime, engine: &Engine, q: &str) -> bool {
    rt.block_on(engine.compile(q))
        .unwrap()
        .lowered
        .plan
        .display_indent()
        .to_string()
        .contains("resident_objects")
}

/// A copy of the store at `from` under `to` whose objects table is mapped: its files call
/// `title` `heading`, and signalql.toml maps it back, so the table is read through a view
/// (which the resident index does not hold: the Parquet plan answers).
fn mapped_copy(from: &Path, to: &Path) {
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::parquet::arrow::ArrowWriter;
    use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    crate::common::copy_dir(from, to);
    let _ = std::fs::remove_dir_all(to.join("contexts"));
    for file in std::fs::read_dir(to.join("objects")).unwrap() {
        let path = file.unwrap().path();
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap())
            .unwrap()
            .build()
            .unwrap();
        let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
        let schema = Arc::new(Schema::new(
            objects_schema()
                .fields()
                .iter()
                .map(|f| match f.name().as_str() {
                    "title" => Field::new("heading", f.data_type().clone(), f.is_nullable()),
                    _ => f.as_ref().clone(),
                })
                .collect::<Vec<_>>(),
        ));
        let mut w = ArrowWriter::try_new(
            std::fs::File::create(&path).unwrap(),
            Arc::clone(&schema),
            None,
        )
        .unwrap();
        for b in batches {
            w.write(&RecordBatch::try_new(Arc::clone(&schema), b.columns().to_vec()).unwrap())
                .unwrap();
        }
        w.close().unwrap();
    }
    std::fs::write(
        to.join("signalql.toml"),
        "[tables.objects.columns]\ntitle = \"heading\"\n",
    )
    .unwrap();
}

/// A copy of the store at `from` whose object tables are Delta tables: each table's rows
/// written by deltalake-core as one commit (its own files, under `_delta_log/`), the Parquet
/// files removed. A resident index never stands for a Delta table (docs/index.md): CONTEXT
/// FOR over the copy takes the Parquet plan and must answer as the scan of `from` does.
fn delta_copy(from: &Path, to: &Path, rt: &tokio::runtime::Runtime) {
    use datafusion::arrow::record_batch::RecordBatchReader;
    use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    crate::common::copy_dir(from, to);
    let _ = std::fs::remove_dir_all(to.join("contexts"));
    for table in [
        "objects",
        "revisions",
        "representations",
        "links",
        "derivations",
    ] {
        let dir = to.join(table);
        if !dir.is_dir() {
            continue;
        }
        let mut batches = Vec::new();
        for file in std::fs::read_dir(&dir).unwrap() {
            let path = file.unwrap().path();
            let reader =
                ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap())
                    .unwrap()
                    .build()
                    .unwrap();
            // A file of no rows still gives the table its schema (a write needs a batch).
            batches.push(RecordBatch::new_empty(reader.schema()));
            batches.extend(reader.map(Result::unwrap));
            std::fs::remove_file(&path).unwrap();
        }
        let url = url::Url::from_directory_path(&dir).unwrap();
        rt.block_on(async {
            let table = deltalake_core::DeltaTable::try_from_url(url).await.unwrap();
            table.write(batches).await.unwrap();
        });
        assert!(dir.join("_delta_log").is_dir(), "{table} is a Delta table");
    }
}

/// The runtime a test here blocks on: one thread, the statements' own.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A snapshot file's header length and where the header starts: after the magic (a line,
/// its length changing with the format's number) and the header's length (u64).
fn header_of(file: &[u8]) -> (usize, usize) {
    let magic = file.iter().position(|&b| b == b'\n').unwrap() + 1;
    let len = u64::from_le_bytes(file[magic..magic + 8].try_into().unwrap()) as usize;
    (len, magic + 8)
}

/// The snapshot files under `root`.
fn snapshot_files(root: &Path) -> Vec<std::path::PathBuf> {
    match std::fs::read_dir(root.join("_signalql/resident")) {
        Ok(d) => d.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn a_snapshot_file_answers_a_new_process_until_the_tables_change_and_a_bad_one_never_does() {
    let dir = tempfile::tempdir().unwrap();
    let objects = small_store(dir.path());
    let rt = runtime();
    let q = r#"FIND OBJECT ABOUT "parquet funnel" LIMIT 2"#;
    let scan = engine(dir.path(), None, None);
    let expected = rt.block_on(answer(&scan, q));
    // Titles "Parquet", "storage", "ENGINE"; texts "Parquet storage" and "ENGINE", "funnel",
    // "Straße". Object a holds "parquet" in its title (3): 3 × 1 000 000 / 6; B both terms
    // in its text (1 + 1): 333 333; b "parquet" in its text: 166 666.
    let rows = expected["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{expected}");
    assert_eq!(
        (rows[0][0].as_str(), rows[0][10].as_i64()),
        (Some("a"), Some(500_000))
    );
    assert_eq!(
        (rows[1][0].as_str(), rows[1][10].as_i64()),
        (Some("B"), Some(333_333))
    );
    let one_shot = || engine(dir.path(), Some(Arc::new(Resident::snapshots_only())), None);
    let from_snapshot = |e: &Engine| planned_from_index(&rt, e, q);
    // No snapshot file yet: the one-shot engine reads the tables.
    assert!(!from_snapshot(&one_shot()));
    let written = rt
        .block_on(scan.write_resident_snapshot())
        .unwrap()
        .expect("a snapshot of a store without ties");
    assert_eq!((written.objects, written.terms > 0), (3, true));
    let files = snapshot_files(dir.path());
    assert_eq!(files.len(), 1);
    let e = one_shot();
    assert!(from_snapshot(&e));
    assert_eq!(rt.block_on(answer(&e, q)), expected);

    // Every cut of the file: never used. A flipped byte anywhere: the same answer (the
    // snapshot is not used when the byte is in its header, columns, terms or a bitmap the
    // statement decodes; a bitmap it does not decode is not checked).
    let good = std::fs::read(&files[0]).unwrap();
    let step = (good.len() / 60).max(1);
    for n in (0..good.len()).step_by(step) {
        std::fs::write(&files[0], &good[..n]).unwrap();
        let e = one_shot();
        assert!(!from_snapshot(&e), "a snapshot cut to {n} bytes was used");
        assert_eq!(rt.block_on(answer(&e, q)), expected);
    }
    for at in (0..good.len()).step_by(step).chain([good.len() - 1]) {
        let mut b = good.clone();
        b[at] ^= 0x5a;
        std::fs::write(&files[0], &b).unwrap();
        assert_eq!(
            rt.block_on(answer(&one_shot(), q)),
            expected,
            "byte {at} flipped"
        );
    }
    // A damaged file under the name is replaced by the next `signalql index`.
    std::fs::write(&files[0], &good[..good.len() / 2]).unwrap();
    rt.block_on(scan.write_resident_snapshot())
        .unwrap()
        .unwrap();
    assert_eq!(std::fs::read(&files[0]).unwrap(), good);
    assert!(from_snapshot(&one_shot()));

    // New rows: the snapshot is of an older version of the tables, and is not used; a new
    // one replaces it.
    let more = fourth(&objects);
    rewrite(dir.path(), &more, true);
    let scan = engine(dir.path(), None, None);
    let changed = rt.block_on(answer(&scan, q));
    assert_ne!(changed, expected);
    let e = one_shot();
    assert!(!from_snapshot(&e));
    assert_eq!(rt.block_on(answer(&e, q)), changed);
    rt.block_on(scan.write_resident_snapshot())
        .unwrap()
        .unwrap();
    let files = snapshot_files(dir.path());
    assert_eq!(files.len(), 1, "the old snapshot is removed");
    let e = one_shot();
    assert!(from_snapshot(&e));
    assert_eq!(rt.block_on(answer(&e, q)), changed);
}

/// Building the snapshot file is a maintenance job, not a statement (docs/index.md, "Snapshot
/// files"): with `timeout_seconds = 0`, under which every statement's plan fails at once, the
/// snapshot is still built and written (at a million objects on a busy machine, one plan of
/// the build once ran past the default 60 s and `signalql index` wrote none), and once the
/// limit is lifted a one-shot engine answers from it as the tables do.
#[test]
fn the_snapshot_is_built_whatever_the_statement_timeout() {
    let dir = tempfile::tempdir().unwrap();
    small_store(dir.path());
    let rt = runtime();
    let q = r#"FIND OBJECT ABOUT "parquet funnel" LIMIT 2"#;
    let expected = rt.block_on(answer(&engine(dir.path(), None, None), q));
    assert_eq!(
        expected["rows"].as_array().map(Vec::len),
        Some(2),
        "{expected}"
    );
    let toml = dir.path().join("signalql.toml");
    std::fs::write(&toml, "[limits]\ntimeout_seconds = 0\n").unwrap();
    let timed = engine(dir.path(), None, None);
    let refused = rt.block_on(answer(&timed, q));
    assert_eq!(
        refused["error"]["error"]["code"], "limit_exceeded",
        "statements have no time: {refused}"
    );
    let written = rt
        .block_on(timed.write_resident_snapshot())
        .unwrap()
        .expect("a snapshot of a store without ties");
    assert_eq!(written.objects, 3);
    assert_eq!(snapshot_files(dir.path()).len(), 1);
    std::fs::remove_file(&toml).unwrap();
    let one_shot = engine(dir.path(), Some(Arc::new(Resident::snapshots_only())), None);
    assert!(planned_from_index(&rt, &one_shot, q));
    assert_eq!(rt.block_on(answer(&one_shot, q)), expected);
}

/// The representations' part of a snapshot file is checked when first used: a file whose
/// part is damaged still answers FIND OBJECT (which reads no representations), leaves CONTEXT
/// FOR to the Parquet plan (the same bundle), and is written again by the next `signalql
/// index`, after which CONTEXT FOR answers from it.
/// A generation opened from its snapshot file reports as its memory what it uses of the file
/// (and its own vectors), each byte once. Its Arrow arrays are slices of one mapping, and
/// Arrow's own measure counts each buffer's whole allocation: at a million objects that read
/// 9.1 GB for a 1.25 GB file, over the 2 GiB bound, so the index was never held.
#[test]
fn a_snapshot_generation_counts_its_mapped_bytes_once() {
    use signalql::catalog::objects::resident::{Generation, snapshot};
    let dir = tempfile::tempdir().unwrap();
    small_store(dir.path());
    let rt = runtime();
    rt.block_on(engine(dir.path(), None, None).write_resident_snapshot())
        .unwrap()
        .unwrap();
    let file = snapshot_files(dir.path()).remove(0);
    let len = std::fs::metadata(&file).unwrap().len() as usize;
    let (_, g) = Generation::from_snapshot(snapshot::map(&file).unwrap()).unwrap();
    // Every part decoded: the representations and edges count too.
    assert!(g.whole() && g.reps().is_some() && g.edges().is_some());
    let memory = g.memory_bytes();
    // Besides the file's bytes, a few vectors per object (tombstones, kinds, where each
    // object's representations start) and per representation (its flags).
    let own = g.objects() * 32 + 1024;
    assert!(
        memory <= len + own,
        "{memory} bytes reported for a {len}-byte file"
    );
}

#[test]
fn a_snapshot_with_damaged_representations_answers_find_and_not_context_for() {
    let dir = tempfile::tempdir().unwrap();
    small_store(dir.path());
    let rt = runtime();
    let scan = engine(dir.path(), None, None);
    let find = r#"FIND OBJECT ABOUT "parquet funnel" LIMIT 2"#;
    let context = r#"CONTEXT FOR "parquet funnel""#;
    let expected_find = rt.block_on(answer(&scan, find));
    let expected_context = rt.block_on(bundle(&scan, dir.path(), context));
    rt.block_on(scan.write_resident_snapshot())
        .unwrap()
        .unwrap();
    let file = snapshot_files(dir.path()).remove(0);
    let good = std::fs::read(&file).unwrap();
    // The part's place counts from the first multiple of 64 bytes after the header.
    let (len, start) = header_of(&good);
    let header: serde_json::Value = serde_json::from_slice(&good[start..start + len]).unwrap();
    let part = |k: &str| header["reps"][k].as_u64().unwrap() as usize;
    let at = (start + len).next_multiple_of(64) + part("at") + part("len") / 2;
    let mut bad = good.clone();
    bad[at] ^= 0x5a;
    std::fs::write(&file, &bad).unwrap();
    let held = Arc::new(Resident::snapshots_only());
    let one_shot = engine(dir.path(), Some(Arc::clone(&held)), None);
    assert!(planned_from_index(&rt, &one_shot, find));
    assert_eq!(rt.block_on(answer(&one_shot, find)), expected_find);
    assert_eq!(
        rt.block_on(bundle(&one_shot, dir.path(), context)),
        expected_context
    );
    assert_eq!(held.contexts_answered(), 0, "the Parquet plan answered");
    rt.block_on(scan.write_resident_snapshot())
        .unwrap()
        .unwrap();
    assert_eq!(std::fs::read(&file).unwrap(), good, "written again");
    let held = Arc::new(Resident::snapshots_only());
    let one_shot = engine(dir.path(), Some(Arc::clone(&held)), None);
    assert_eq!(
        rt.block_on(bundle(&one_shot, dir.path(), context)),
        expected_context
    );
    assert_eq!(held.contexts_answered(), 1, "answered from the snapshot");
}

#[test]
fn a_restricted_principal_writes_no_snapshot_file() {
    let dir = tempfile::tempdir().unwrap();
    small_store(dir.path());
    std::fs::write(dir.path().join("policy.toml"), POLICY).unwrap();
    let rt = runtime();
    let narrow = engine(dir.path(), None, Some("narrow"));
    assert!(
        rt.block_on(narrow.write_resident_snapshot())
            .unwrap()
            .is_none()
    );
    assert!(snapshot_files(dir.path()).is_empty());
    let all = engine(dir.path(), None, Some("default"));
    assert!(
        rt.block_on(all.write_resident_snapshot())
            .unwrap()
            .is_some()
    );
    assert_eq!(snapshot_files(dir.path()).len(), 1);
}

/// A CONTEXT FOR's bundle (without where it was stored) and its explanation (without how
/// each item was scored: the scan path's `scan`, the index's `index`), or its error. The
/// stored record is removed after, so the next engine's record is its own.
/// Rejections EXPLAIN CONTEXT listed for records that kept none (their list recomputed at
/// the record's pin), over the tests of this file.
static RECOMPUTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

thread_local! {
    /// The candidates the last [`bundle`] of this thread had scored through the Parquet text
    /// index (EXPLAIN CONTEXT's `scoring.index`).
    static LAST_SCORED_BY_INDEX: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

async fn bundle(engine: &Engine, root: &Path, q: &str) -> serde_json::Value {
    let b = match engine.answer(q).await {
        Ok(Answer::Bundle(b)) => *b,
        Ok(other) => panic!("{q}: {other:?}"),
        Err(e) => return serde_json::json!({"error": e.to_json()}),
    };
    let mut x = serde_json::to_value(engine.explain_context(&b.id).await.unwrap()).unwrap();
    // A record kept with a pin and no list, whose list EXPLAIN recomputed (DESIGN.md §5).
    let key = b.id.trim_start_matches("context://");
    let stored = std::fs::read(root.join("contexts").join(format!("{key}.json")));
    if let Ok(stored) = stored {
        let r: serde_json::Value = serde_json::from_slice(&stored).unwrap();
        let listed = x["rejected"].as_array().map_or(0, Vec::len);
        if r.get("pin").is_some() && r["explanation"]["rejected"] == serde_json::json!([]) {
            RECOMPUTED.fetch_add(listed, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let scored_by_index = x["scoring"]["index"].as_u64().unwrap_or(0);
    LAST_SCORED_BY_INDEX.with(|c| c.set(scored_by_index));
    x.as_object_mut().unwrap().remove("scoring");
    for item in x["items"].as_array_mut().unwrap() {
        item.as_object_mut().unwrap().remove("scored_by");
    }
    let _ = std::fs::remove_dir_all(root.join("contexts"));
    serde_json::json!({"bundle": b, "explanation": x})
}

/// CONTEXT FOR from the resident index gives the Parquet plan's bundles and explanations
/// (addresses, items, counts, rejections): random stores with edges, roles and stored token
/// counts, random clauses, unrestricted and restricted principals sharing one resident index;
/// the path each took is asserted from the index's count of answers, and the cases as a
/// whole must pack items and answer from the index (so the comparison is never vacuous).
#[test]
fn the_resident_index_changes_no_context_answer() {
    let strategy = (
        prop::collection::vec(object(), 1..9),
        any::<bool>(),
        prop::bool::weighted(0.4),
        prop::collection::vec(
            (
                prop::collection::vec(0usize..6, 0..4),
                prop::option::of(prop::sample::select(vec![3u64, 10, 40, 400])),
                prop::option::of(1u64..4),
                prop::option::of(0u64..3),
                (
                    0usize..4,
                    0usize..5,
                    prop::bool::weighted(0.3),
                    prop::bool::weighted(0.15),
                ),
                prop::option::weighted(0.2, 0i64..40),
            ),
            6,
        ),
    );
    let totals = std::cell::Cell::new((0usize, 0usize, 0usize));
    // Answers compared on the mapped copy of each case's store (the Parquet plan's path).
    let mapped_total = std::cell::Cell::new(0usize);
    // Answers compared on the Delta copy (the Parquet plan's path).
    let delta_total = std::cell::Cell::new(0usize);
    // Answers of the text-indexed copy that scored a candidate through the text index.
    let text_index_total = std::cell::Cell::new(0usize);
    // A fixed seed: the counts asserted at the end are then those of these cases.
    let mut runner = proptest::test_runner::TestRunner::new_with_rng(
        ProptestConfig {
            cases: 48,
            failure_persistence: None,
            ..Default::default()
        },
        proptest::test_runner::TestRng::deterministic_rng(
            proptest::test_runner::RngAlgorithm::ChaCha,
        ),
    );
    let run = runner.run(&strategy, |(objects, split, governed, queries)| {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &objects, split);
        if governed {
            std::fs::write(dir.path().join("policy.toml"), POLICY).unwrap();
        }
        let mapped_dir = tempfile::tempdir().unwrap();
        mapped_copy(dir.path(), mapped_dir.path());
        // And with the Parquet text index written (`signalql index`), read without a
        // resident index: the Parquet plan scoring through the text index.
        let indexed_dir = tempfile::tempdir().unwrap();
        crate::common::copy_dir(dir.path(), indexed_dir.path());
        signalql::catalog::objects::index::index_root(&signalql::catalog::storage::Root::Local(
            indexed_dir.path().to_path_buf(),
        ))
        .unwrap();
        let rt = runtime();
        // And with the object tables as Delta tables: the Parquet plan too.
        let delta_dir = tempfile::tempdir().unwrap();
        delta_copy(dir.path(), delta_dir.path(), &rt);
        let held: Arc<Resident> = Default::default();
        // One holder each for the mapped and the Delta copies: they must never answer from a
        // generation.
        let mapped_held: Arc<Resident> = Default::default();
        let delta_held: Arc<Resident> = Default::default();
        let principals: &[Option<&str>] = match governed {
            true => &[Some("default"), Some("narrow")],
            false => &[None],
        };
        let mut from_index = 0;
        let mut items = 0;
        let mut expanded = 0;
        for (k, (words, budget, max_objects, depth, (prefer, exclude, project, age), as_of)) in
            queries.into_iter().enumerate()
        {
            let principal = principals[k % principals.len()];
            let mut q = format!(r#"CONTEXT FOR "{}""#, text(&words));
            if project {
                q.push_str(r#" USING PROJECT "main""#);
            }
            if let Some(b) = budget {
                q.push_str(&format!(" BUDGET {b} TOKENS"));
            }
            q.push_str(
                [
                    "",
                    " PREFER CURRENT",
                    " PREFER VERIFIED",
                    " PREFER CURRENT, VERIFIED",
                ][prefer],
            );
            q.push_str(
                [
                    "",
                    " EXCLUDE UNTRUSTED",
                    " EXCLUDE STALE",
                    " EXCLUDE UNTRUSTED, STALE",
                    " EXCLUDE ROLE INSTRUCTION",
                ][exclude],
            );
            if let Some(n) = max_objects {
                q.push_str(&format!(" MAX OBJECTS {n}"));
            }
            if let Some(d) = depth {
                q.push_str(&format!(" MAX DEPTH {d}"));
            }
            if age {
                q.push_str(" MAX AGE 20 d");
            }
            let t = match as_of {
                Some(d) => {
                    let at = DateTime::from_timestamp_micros(day(d)).unwrap();
                    q.push_str(&format!(r#" AS OF "{}""#, at.to_rfc3339()));
                    day(d)
                }
                None => DateTime::parse_from_rfc3339(T).unwrap().timestamp_micros(),
            };
            let scan = engine(dir.path(), None, principal);
            let resident = engine(dir.path(), Some(Arc::clone(&held)), principal);
            let a = rt.block_on(bundle(&scan, dir.path(), &q));
            let before = held.contexts_answered();
            let b = rt.block_on(bundle(&resident, dir.path(), &q));
            let answered = held.contexts_answered() > before;
            from_index += answered as usize;
            // (A copy's records are stored under its own root.)
            let unstored = |mut v: serde_json::Value| {
                if let Some(m) = v["bundle"]["metadata"].as_object_mut() {
                    m.remove("stored_in");
                }
                v
            };
            // The same store read through a mapping, and as Delta tables: the Parquet plan,
            // the same answer.
            for (copy, copy_held, total, what) in [
                (&mapped_dir, &mapped_held, &mapped_total, "mapped"),
                (&delta_dir, &delta_held, &delta_total, "Delta"),
            ] {
                let e = engine(copy.path(), Some(Arc::clone(copy_held)), principal);
                let c = rt.block_on(bundle(&e, copy.path(), &q));
                prop_assert_eq!(copy_held.contexts_answered(), 0, "{} {}", q, what);
                prop_assert_eq!(
                    unstored(c),
                    unstored(a.clone()),
                    "{} ({:?}), {}",
                    q,
                    principal,
                    what
                );
                total.set(total.get() + 1);
            }
            let text_indexed = engine(indexed_dir.path(), None, principal);
            let d = rt.block_on(bundle(&text_indexed, indexed_dir.path(), &q));
            let through_index = LAST_SCORED_BY_INDEX.with(std::cell::Cell::get);
            prop_assert_eq!(
                unstored(d),
                unstored(a.clone()),
                "{} ({:?}), text index",
                q,
                principal
            );
            text_index_total.set(text_index_total.get() + (through_index > 0) as usize);
            if !holdable(&objects, t) {
                // Tied records or revisions: the generation is not built (what the narrow
                // principal sees may have no tie).
                prop_assert!(!answered || principal == Some("narrow"), "{}", q);
                continue;
            }
            items += a["bundle"]["items"].as_array().map_or(0, Vec::len);
            expanded += (a["explanation"]["phases"]["expanded"].as_u64() > Some(0)) as usize;
            prop_assert_eq!(&a, &b, "{} ({:?})", q, principal);
            // EXCLUDE ROLE INSTRUCTION takes the Parquet plan when some representation has
            // the role; every other query here is answered from the index.
            if exclude != 4 && a.get("error").is_none() {
                prop_assert!(answered, "{} ({:?}) took the Parquet plan", q, principal);
            }
        }
        let (i, f, x) = totals.get();
        totals.set((i + items, f + from_index, x + expanded));
        Ok(())
    });
    if let Err(e) = run {
        panic!("{e}");
    }
    let (items, answered, expanded) = totals.get();
    let recomputed = RECOMPUTED.load(std::sync::atomic::Ordering::Relaxed);
    let mapped = mapped_total.get();
    let delta = delta_total.get();
    let text_indexed = text_index_total.get();
    let counts = format!(
        "{items} items packed, {answered} answers from the index, {expanded} with expansion, \
         {recomputed} rejections recomputed at a pin, {mapped} answers of a mapped store \
         (the Parquet plan) compared, {delta} answers of a Delta store (the Parquet plan) \
         compared, {text_indexed} answers scored through the text index"
    );
    eprintln!("{counts}");
    assert!(
        items >= 40
            && answered >= 150
            && expanded >= 5
            && recomputed >= 100
            && mapped >= 250
            && delta >= 250
            && text_indexed >= 50,
        "{counts}"
    );
}

/// Expansion from the index, by hand: `a` holds "parquet" in a text (1 × 1 000 000 / 3),
/// links to `B` and is derived from `b`, which hold no task term: each is reached at one hop
/// with half of a's score, by the relation of its edge, and ranked after `a` by id.
#[test]
fn context_from_the_index_expands_over_links_and_derivations() {
    let dir = tempfile::tempdir().unwrap();
    let objects: Vec<Object> = (0..3)
        .map(|i| Object {
            records: vec![(i, 0, 0, vec![], None)],
            revisions: vec![(1, i, false, 0, 0)],
            reps: vec![(1, 1, 0, Some(vec![[0, 5, 5][i as usize]]), false, 0, None)],
            links: match i {
                0 => vec![(1, 1, 0), (1, 2, 2)],
                _ => vec![],
            },
        })
        .collect();
    write(dir.path(), &objects, false);
    let rt = runtime();
    let held: Arc<Resident> = Default::default();
    let q = r#"CONTEXT FOR "parquet""#;
    let scan = rt.block_on(bundle(&engine(dir.path(), None, None), dir.path(), q));
    let resident = engine(dir.path(), Some(Arc::clone(&held)), None);
    let got = rt.block_on(bundle(&resident, dir.path(), q));
    assert_eq!(held.contexts_answered(), 1);
    assert_eq!(got, scan);
    // `signalql stats` (and MCP's stats) report what the process holds: one generation of
    // the three objects, its memory, and the content files read by locator for the items.
    let report = rt.block_on(resident.statistics()).resident.unwrap();
    assert_eq!(report.generations.len(), 1);
    assert_eq!(report.generations[0].objects, 3);
    assert!(report.generations[0].terms > 0);
    assert_eq!(report.memory_bytes, report.generations[0].memory_bytes);
    assert!(report.memory_bytes > 0 && report.content_files_bytes > 0);
    assert_eq!(report.contexts_answered, 1);
    let without = rt.block_on(engine(dir.path(), None, None).statistics());
    assert!(without.resident.is_none());
    let items: Vec<(String, i64, String)> = got["bundle"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let why = &i["why"][0];
            let how = match why.get("graph_expansion") {
                Some(g) => format!(
                    "{} via {}",
                    g["from"].as_str().unwrap(),
                    g["via"].as_str().unwrap()
                ),
                None => "lexical".into(),
            };
            (
                i["object"].as_str().unwrap().to_string(),
                i["score"].as_i64().unwrap(),
                how,
            )
        })
        .collect();
    let from = "object://a@1 via ";
    assert_eq!(
        items,
        [
            ("object://a@1".to_string(), 333_333, "lexical".to_string()),
            ("object://B@1".into(), 166_666, format!("{from}mentions")),
            (
                "object://b@1".into(),
                166_666,
                format!("{from}derived_from")
            ),
        ]
    );
    assert_eq!(got["explanation"]["phases"]["expanded"], 2);

    // From the snapshot file a new process maps: the same bundle, decided from the
    // generation. Its graph comes from the facts the file keeps: with the edges' part
    // damaged it still answers from the generation; with the facts' part damaged it derives
    // them from the edges; with both damaged it takes the Parquet plan. Every way, the same
    // bundle.
    rt.block_on(resident.write_resident_snapshot())
        .unwrap()
        .unwrap();
    let file = &snapshot_files(dir.path())[0];
    let good = std::fs::read(file).unwrap();
    let (header_len, start) = header_of(&good);
    let header: serde_json::Value =
        serde_json::from_slice(&good[start..start + header_len]).unwrap();
    let first = (start + header_len).next_multiple_of(64);
    let middle = |part: &serde_json::Value| {
        let p = part;
        first + p["at"].as_u64().unwrap() as usize + p["len"].as_u64().unwrap() as usize / 2
    };
    let (edges, facts) = (middle(&header["edges"]), middle(&header["kept"]["facts"]));
    for (damaged, from_generation) in [
        (vec![], true),
        (vec![edges], true),
        (vec![facts], true),
        (vec![edges, facts], false),
    ] {
        let mut b = good.clone();
        for at in &damaged {
            b[*at] ^= 0x5a;
        }
        std::fs::write(file, &b).unwrap();
        let one_shot = Arc::new(Resident::snapshots_only());
        let e = engine(dir.path(), Some(Arc::clone(&one_shot)), None);
        assert_eq!(rt.block_on(bundle(&e, dir.path(), q)), scan, "{damaged:?}");
        assert_eq!(
            one_shot.contexts_answered(),
            from_generation as u64,
            "{damaged:?}"
        );
    }
    std::fs::write(file, &good).unwrap();
}

/// The lazy explanation (DESIGN.md §5, "Scale"): a bundle decided from the index is stored
/// with a pin and no rejected list; EXPLAIN CONTEXT recomputes the list at the pin and gives
/// the Parquet plan's explanation (three objects holding "parquet", MAX OBJECTS 1: the two
/// after the first, by rank, are rejected for max_objects). Once the object tables change,
/// the snapshot is gone and EXPLAIN says so with `unknown_context`.
#[test]
fn a_pinned_explanation_is_recomputed_while_its_snapshot_lasts() {
    let dir = tempfile::tempdir().unwrap();
    let objects: Vec<Object> = (0..3)
        .map(|i| Object {
            records: vec![(i, 0, 0, vec![], None)],
            revisions: vec![(1, i, false, 0, 0)],
            reps: vec![(1, 1, 0, Some(vec![0]), false, 0, None)],
            links: vec![],
        })
        .collect();
    write(dir.path(), &objects, false);
    let rt = runtime();
    let q = r#"CONTEXT FOR "parquet" MAX OBJECTS 1"#;
    let expected = rt.block_on(bundle(&engine(dir.path(), None, None), dir.path(), q));
    assert_eq!(
        expected["explanation"]["rejected"]
            .as_array()
            .map(|r| r.iter().filter(|x| x["reason"] == "max_objects").count()),
        Some(2),
        "{expected}"
    );
    let held: Arc<Resident> = Default::default();
    let resident = engine(dir.path(), Some(Arc::clone(&held)), None);
    let Answer::Bundle(b) = rt.block_on(resident.answer(q)).unwrap() else {
        panic!("not a bundle")
    };
    assert_eq!(held.contexts_answered(), 1);
    let key = b.id.trim_start_matches("context://");
    let stored = std::fs::read(dir.path().join(format!("contexts/{key}.json"))).unwrap();
    let record: serde_json::Value = serde_json::from_slice(&stored).unwrap();
    assert!(record["pin"]["generation"].is_string(), "{record}");
    assert_eq!(record["explanation"]["rejected"], serde_json::json!([]));
    assert_eq!(record["explanation"]["phases"]["rejected"], 2);
    let _ = std::fs::remove_dir_all(dir.path().join("contexts"));
    let got = rt.block_on(bundle(&resident, dir.path(), q));
    assert_eq!(got, expected);

    // The tables change (one more object): the generation the bundle was decided from is gone.
    let Answer::Bundle(b) = rt.block_on(resident.answer(q)).unwrap() else {
        panic!("not a bundle")
    };
    let mut more = objects.clone();
    more.push(Object {
        records: vec![(3, 0, 0, vec![], None)],
        ..objects[0].clone()
    });
    rewrite(dir.path(), &more, false);
    let e = rt.block_on(resident.explain_context(&b.id)).unwrap_err();
    let e = &e.to_json()["error"];
    assert_eq!(e["code"], "unknown_context", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("cannot be recomputed"),
        "{e}"
    );
}

/// A pinned explanation after the object tables moved on by a commit: EXPLAIN CONTEXT
/// recomputes the list over the tables as they stood at the pin's commit position (the
/// Parquet plan over the files of commits up to it) and gives the explanation the Parquet
/// plan gave before the commit. Two notes hold "object storage", MAX OBJECTS 1 rejects one;
/// a third note ingested later is a candidate of the same query now, not at the pin.
#[test]
fn a_pinned_explanation_is_recomputed_at_its_commit_position() {
    use signalql::catalog::objects::ingest::{ObjectIngestOptions, ingest_objects};
    let tmp = tempfile::tempdir().unwrap();
    let (notes, root) = notes(tmp.path());
    let note = |name: &str, text: &str| std::fs::write(notes.join(name), text).unwrap();
    note("other.md", "# Budgets\n\nNothing of the kind.\n");
    let ingest = || {
        let opts = ObjectIngestOptions {
            now: DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
                .unwrap()
                .with_timezone(&Utc),
            ..Default::default()
        };
        ingest_objects(&root, std::slice::from_ref(&notes), &opts).unwrap();
    };
    ingest();
    let rt = runtime();
    let q = r#"CONTEXT FOR "object storage" MAX OBJECTS 1"#;
    let before = rt.block_on(bundle(&engine(&root, None, None), &root, q));
    assert_eq!(before["explanation"]["phases"]["candidates"], 3, "{before}");
    assert_eq!(
        before["explanation"]["rejected"][0]["reason"], "max_objects",
        "{before}"
    );

    let held: Arc<Resident> = Default::default();
    let resident = engine(&root, Some(Arc::clone(&held)), None);
    let Answer::Bundle(b) = rt.block_on(resident.answer(q)).unwrap() else {
        panic!("not a bundle")
    };
    assert_eq!(held.contexts_answered(), 1);
    let key = b.id.trim_start_matches("context://");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join(format!("contexts/{key}.json"))).unwrap())
            .unwrap();
    assert_eq!(record["pin"]["position"], 1, "{record}");
    assert_eq!(record["explanation"]["rejected"], serde_json::json!([]));

    note(
        "more.md",
        "# More object storage\n\nObject storage again.\n",
    );
    ingest();
    let now = rt.block_on(bundle(&engine(&root, None, None), &root, q));
    assert_eq!(now["explanation"]["phases"]["candidates"], 4, "{now}");
    // bundle() cleared the store after its answer: the pinned record is put back, then
    // explained at its pin.
    std::fs::create_dir_all(root.join("contexts")).unwrap();
    std::fs::write(
        root.join(format!("contexts/{key}.json")),
        serde_json::to_vec(&record).unwrap(),
    )
    .unwrap();
    let mut x =
        serde_json::to_value(rt.block_on(resident.explain_context(&b.id)).unwrap()).unwrap();
    x.as_object_mut().unwrap().remove("scoring");
    for item in x["items"].as_array_mut().unwrap() {
        item.as_object_mut().unwrap().remove("scored_by");
    }
    assert_eq!(x, before["explanation"]);
}

/// `signalql ingest objects` writes the snapshot of the commit it made (DESIGN.md §5), so the
/// next one-shot CONTEXT FOR is decided from it (its record is pinned to that generation),
/// and a later ingest replaces it with the new commit's. Without the file the one-shot
/// command takes the Parquet plan and gives the same items; `--no-snapshot` writes none.
#[test]
fn ingest_objects_writes_the_snapshot_of_its_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let (notes, root) = notes(tmp.path());
    let note = |name: &str, text: &str| std::fs::write(notes.join(name), text).unwrap();
    let run = |args: &[&str]| {
        let o = crate::common::signalql_with_stdin(args, "");
        assert!(o.status.success(), "{args:?}: {o:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    let (notes_arg, root_arg) = (notes.to_str().unwrap(), root.to_str().unwrap());
    let ingest = |extra: &[&str]| {
        let mut args = vec![
            "ingest",
            "objects",
            notes_arg,
            "--data",
            root_arg,
            "--now",
            "2026-01-01T00:00:00Z",
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    // The one-shot answer and the generation its record is pinned to (none: the Parquet plan).
    let context = || {
        let _ = std::fs::remove_dir_all(root.join("contexts"));
        let out = run(&["context", "--data", root_arg, "object storage"]);
        let b: serde_json::Value = serde_json::from_str(&out).unwrap();
        let key = b["id"].as_str().unwrap().trim_start_matches("context://");
        let record: serde_json::Value = serde_json::from_slice(
            &std::fs::read(root.join(format!("contexts/{key}.json"))).unwrap(),
        )
        .unwrap();
        (b["items"].clone(), record["pin"]["generation"].clone())
    };
    let names = || -> Vec<String> {
        snapshot_files(&root)
            .iter()
            .map(|p| {
                format!(
                    "_signalql/resident/{}",
                    p.file_name().unwrap().to_str().unwrap()
                )
            })
            .collect()
    };
    // The name a pin gives the generation of the snapshot file `name`: docs/index.md's hash
    // of the key its header holds (SHA-256 of each part and a NUL, 16 bytes, hex).
    let pin_of = |name: &str| -> serde_json::Value {
        use sha2::{Digest, Sha256};
        let bytes = std::fs::read(root.join(name)).unwrap();
        let magic = bytes.iter().position(|&b| b == b'\n').unwrap() + 1;
        let len = u64::from_le_bytes(bytes[magic..magic + 8].try_into().unwrap()) as usize;
        let header: serde_json::Value =
            serde_json::from_slice(&bytes[magic + 8..magic + 8 + len]).unwrap();
        let mut h = Sha256::new();
        for part in header["key"].as_array().unwrap() {
            h.update(part.as_str().unwrap().as_bytes());
            h.update([0]);
        }
        serde_json::json!(format!("generation:{}", hex::encode(&h.finalize()[..16])))
    };

    let out = ingest(&[]);
    assert!(out.contains("resident index snapshot: 2 objects"), "{out}");
    assert!(!out.contains("refreshed"), "nothing to refresh: {out}");
    let first = names();
    assert_eq!(first.len(), 1, "{first:?}");
    let (items, pinned) = context();
    assert_eq!(pinned, pin_of(&first[0]), "decided from the snapshot");
    assert_eq!(items.as_array().unwrap().len(), 2, "{items}");

    note(
        "more.md",
        "# More object storage\n\nObject storage again.\n",
    );
    let out = ingest(&[]);
    assert!(out.contains("resident index snapshot: 3 objects"), "{out}");
    assert!(out.contains("refreshed from the earlier snapshot"), "{out}");
    let second = names();
    assert_eq!(
        second.len(),
        1,
        "the older commit's file is removed: {second:?}"
    );
    assert_ne!(second, first);
    let (items, pinned) = context();
    assert_eq!(pinned, pin_of(&second[0]));
    std::fs::remove_file(root.join(&second[0])).unwrap();
    let (scanned, unpinned) = context();
    assert!(unpinned.is_null(), "the Parquet plan: {unpinned}");
    assert_eq!(scanned, items);
    assert_eq!(items.as_array().unwrap().len(), 3, "{items}");

    note("last.md", "# Last\n\nObject storage, once more.\n");
    let out = ingest(&["--no-snapshot"]);
    assert!(!out.contains("snapshot"), "{out}");
    assert!(names().is_empty());
}

/// `[limits] resident_memory_bytes` bounds what the resident index holds: a generation larger
/// than it is not held (the Parquet plan answers, the same rows), and under a budget that
/// fits one generation a new version of the tables drops the older one.
#[test]
fn the_resident_index_holds_what_resident_memory_bytes_allows() {
    let dir = tempfile::tempdir().unwrap();
    let objects = small_store(dir.path());
    let rt = runtime();
    let q = r#"FIND OBJECT ABOUT "parquet funnel" LIMIT 2"#;
    let expected = rt.block_on(answer(&engine(dir.path(), None, None), q));
    let indexed = |e: &Engine| planned_from_index(&rt, e, q);
    let limit = |bytes: u64| {
        std::fs::write(
            dir.path().join("signalql.toml"),
            format!("[limits]\nresident_memory_bytes = {bytes}\n"),
        )
        .unwrap()
    };
    let held_bytes = |r: &Resident| -> Vec<u64> {
        rt.block_on(r.report(0))
            .generations
            .iter()
            .map(|g| g.memory_bytes)
            .collect()
    };

    // Unbounded: the generation is held.
    let unbounded: Arc<Resident> = Default::default();
    let e = engine(dir.path(), Some(Arc::clone(&unbounded)), None);
    assert!(indexed(&e));
    assert_eq!(rt.block_on(answer(&e, q)), expected);
    let size = held_bytes(&unbounded)[0];
    assert!(size > 0);

    // One byte less than the generation: none held, the Parquet plan answers the same.
    limit(size - 1);
    let small: Arc<Resident> = Default::default();
    let e = engine(dir.path(), Some(Arc::clone(&small)), None);
    assert!(!indexed(&e));
    assert_eq!(rt.block_on(answer(&e, q)), expected);
    assert!(held_bytes(&small).is_empty());

    // Room for one generation: the tables' next version replaces the older one.
    limit(size * 3 / 2);
    let one: Arc<Resident> = Default::default();
    let e = engine(dir.path(), Some(Arc::clone(&one)), None);
    assert!(indexed(&e));
    assert_eq!(held_bytes(&one), vec![size]);
    let more = fourth(&objects);
    rewrite(dir.path(), &more, false);
    let changed = rt.block_on(answer(&engine(dir.path(), None, None), q));
    let e = engine(dir.path(), Some(Arc::clone(&one)), None);
    assert!(indexed(&e));
    assert_eq!(rt.block_on(answer(&e, q)), changed);
    assert_eq!(held_bytes(&one).len(), 1, "the older generation is dropped");
    // With room for both, both are held.
    let two: Arc<Resident> = Default::default();
    limit(size * 4);
    rewrite(dir.path(), &objects, false);
    let e = engine(dir.path(), Some(Arc::clone(&two)), None);
    assert!(indexed(&e));
    rewrite(dir.path(), &more, false);
    let e = engine(dir.path(), Some(Arc::clone(&two)), None);
    assert!(indexed(&e));
    assert_eq!(held_bytes(&two).len(), 2);
}

/// `o`'s rows divided between two commits by the bits of `bits` (a set bit: the later one),
/// one bit per record, revision, representation and edge in that order.
fn divided(o: &Object, bits: u64) -> (Object, Object) {
    let mut k = 0;
    let mut later = || {
        k += 1;
        bits >> ((k - 1) % 64) & 1 == 1
    };
    fn split<T: Clone>(rows: &[T], later: &mut impl FnMut() -> bool) -> (Vec<T>, Vec<T>) {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for r in rows {
            match later() {
                true => b.push(r.clone()),
                false => a.push(r.clone()),
            }
        }
        (a, b)
    }
    let (records, later_records) = split(&o.records, &mut later);
    let (revisions, later_revisions) = split(&o.revisions, &mut later);
    let (reps, later_reps) = split(&o.reps, &mut later);
    let (links, later_links) = split(&o.links, &mut later);
    (
        Object {
            records,
            revisions,
            reps,
            links,
        },
        Object {
            records: later_records,
            revisions: later_revisions,
            reps: later_reps,
            links: later_links,
        },
    )
}

fn as_refs(v: &[(usize, Object)]) -> Vec<(usize, &Object)> {
    v.iter().map(|(i, o)| (*i, o)).collect()
}

/// The incremental refresh (docs/index.md): a store written in two commits, the second adding
/// new objects and records, revisions, representations and edges of objects the first holds
/// or only names. A resident index that held the first version refreshes it (asserted by its
/// count of refreshes, never vacuously) and answers FIND and CONTEXT FOR as one built whole
/// from the second version does, and as the Parquet plan does; so does a snapshot file
/// written by refreshing the first version's file.
#[test]
fn a_refreshed_generation_answers_as_one_built_whole() {
    let strategy = (
        prop::collection::vec((object(), 0usize..3, any::<u64>()), 1..9),
        prop::bool::weighted(0.3),
        prop::collection::vec(
            (
                prop::collection::vec(0usize..9, 0..4),
                0usize..WHERES.len(),
                prop::option::of(1u64..4),
            ),
            4,
        ),
    );
    let mut runner = proptest::test_runner::TestRunner::new_with_rng(
        ProptestConfig {
            cases: 40,
            failure_persistence: None,
            ..Default::default()
        },
        proptest::test_runner::TestRng::deterministic_rng(
            proptest::test_runner::RngAlgorithm::ChaCha,
        ),
    );
    let refreshed = std::cell::Cell::new((0usize, 0usize, 0usize));
    let run = runner.run(&strategy, |(objects, governed, queries)| {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // Per object: all its rows in the first commit (0), all in the second (1), or
        // divided by `bits` (2).
        let (mut first, mut second, mut whole) = (Vec::new(), Vec::new(), Vec::new());
        for (i, (o, how, bits)) in objects.iter().enumerate() {
            let (a, b) = match how {
                0 => divided(o, 0),
                1 => divided(o, u64::MAX),
                _ => divided(o, *bits),
            };
            first.push((i, a));
            second.push((i, b));
            whole.push(o.clone());
        }
        write_part(root, "part-0", &as_refs(&first));
        if governed {
            std::fs::write(root.join("policy.toml"), POLICY).unwrap();
        }
        let principals: &[Option<&str>] = match governed {
            true => &[Some("default"), Some("narrow")],
            false => &[None],
        };
        let firsts: Vec<Object> = first.iter().map(|(_, o)| o.clone()).collect();
        let t = DateTime::parse_from_rfc3339(T).unwrap().timestamp_micros();
        let rt = runtime();
        let held: Arc<Resident> = Default::default();
        for &p in principals {
            rt.block_on(answer(
                &engine(root, Some(Arc::clone(&held)), p),
                r#"FIND OBJECT ABOUT "x""#,
            ));
        }
        let unrestricted = principals[0];
        let snapshot = rt
            .block_on(engine(root, None, unrestricted).write_resident_snapshot())
            .unwrap();
        prop_assert_eq!(snapshot.is_some(), holdable(&firsts, t));
        // The second commit.
        write_part(root, "part-1", &as_refs(&second));
        let both = holdable(&firsts, t) && holdable(&whole, t);
        // The held generations are refreshed by the first statements after it (before a
        // snapshot file of the second version is there, which they would read instead).
        let before = held.refreshes();
        for &p in principals {
            rt.block_on(answer(
                &engine(root, Some(Arc::clone(&held)), p),
                r#"FIND OBJECT ABOUT "x""#,
            ));
        }
        let n = (held.refreshes() - before) as usize;
        if both {
            prop_assert!(n >= 1, "the held generation was refreshed");
        }
        let written: Arc<Resident> = Default::default();
        let snapshot = rt
            .block_on(
                engine(root, Some(Arc::clone(&written)), unrestricted).write_resident_snapshot(),
            )
            .unwrap();
        prop_assert_eq!(snapshot.is_some(), holdable(&whole, t));
        prop_assert_eq!(
            written.refreshes(),
            both as u64,
            "the snapshot file refreshed"
        );
        for (k, (words, filter, max_objects)) in queries.into_iter().enumerate() {
            let p = principals[k % principals.len()];
            let find = format!(r#"FIND OBJECT ABOUT "{}"{}"#, text(&words), WHERES[filter]);
            let mut context = format!(r#"CONTEXT FOR "{}""#, text(&words));
            if let Some(n) = max_objects {
                context.push_str(&format!(" MAX OBJECTS {n}"));
            }
            let scan = engine(root, None, p);
            let refreshing = engine(root, Some(Arc::clone(&held)), p);
            let whole_build = engine(root, Some(Arc::new(Resident::default())), p);
            let from_file = engine(root, Some(Arc::new(Resident::snapshots_only())), p);
            let a = rt.block_on(answer(&scan, &find));
            if !tied(&whole) {
                prop_assert_eq!(
                    &rt.block_on(answer(&refreshing, &find)),
                    &a,
                    "{} ({:?})",
                    find,
                    p
                );
                prop_assert_eq!(
                    &rt.block_on(answer(&whole_build, &find)),
                    &a,
                    "{} whole",
                    find
                );
                prop_assert_eq!(&rt.block_on(answer(&from_file, &find)), &a, "{} file", find);
                let a = rt.block_on(bundle(&scan, root, &context));
                let b = rt.block_on(bundle(&refreshing, root, &context));
                prop_assert_eq!(&b, &a, "{} ({:?})", context, p);
                let c = rt.block_on(bundle(&from_file, root, &context));
                prop_assert_eq!(&c, &a, "{} file", context);
            }
        }
        let (cases, by_held, by_file) = refreshed.get();
        refreshed.set((
            cases + both as usize,
            by_held + n,
            by_file + written.refreshes() as usize,
        ));
        Ok(())
    });
    if let Err(e) = run {
        panic!("{e}");
    }
    let (cases, by_held, by_file) = refreshed.get();
    eprintln!(
        "{cases} stores refreshable, {by_held} held generations refreshed, {by_file} snapshot files refreshed"
    );
    assert!(
        cases >= 10 && by_held >= cases && by_file == cases,
        "{cases} {by_held} {by_file}"
    );
}
