//! The text index of the object tables (catalog/src/objects/index.rs, docs/index.md): written
//! by `ingest objects` under its commit and by `signalql index` for tables other tools wrote;
//! read back with plain DataFusion SQL (not the catalog's reader) and checked against terms
//! worked out by hand.

use std::path::Path;

use signalql_catalog::objects::index::{IndexSummary, index_root};
use signalql_catalog::objects::ingest::{ObjectIngestOptions, ingest_objects};
use signalql_catalog::storage::Root;

/// Rows of `q` over the index tables of `root` (and its representations), as text.
async fn sql(root: &Path, q: &str) -> Vec<Vec<String>> {
    crate::common::folder_sql(
        root,
        &[
            "index_terms",
            "index_reps",
            "index_files",
            "representations",
        ],
        q,
    )
    .await
}

/// (term, object_id, representation name, weight) for every posting, sorted.
const POSTINGS: &str = "SELECT t.term, r.object_id, r.name, r.weight \
     FROM (SELECT term, unnest(reps) AS rep FROM index_terms) t \
     JOIN index_reps r ON r.rep = t.rep ORDER BY 1, 2, 3";

fn row(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// pyarrow's object tables (tests/data/foreign/objects, no `roles` column in
/// `representations`, timestamps in ns): every whole token of two characters or more that is
/// not a stopword, as worked out by hand from the three texts of make.py.
#[test]
fn index_covers_tables_other_tools_wrote_once() {
    let tmp = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/foreign/objects");
    crate::common::copy_dir(&src, tmp.path());
    let root = Root::Local(tmp.path().to_path_buf());
    let s = index_root(&root).unwrap();
    assert_eq!(
        s,
        IndexSummary {
            files: 1,
            waiting: 0,
            already: 0,
            representations: 3,
            indexed: 3,
            postings: 26,
        }
    );
    let rt = crate::common::rt();
    let terms = rt.block_on(sql(tmp.path(), POSTINGS));
    let by_hand = [
        // doc-a: "Parquet files hold the event tables; storage is columnar and compressed."
        ("columnar", "doc-a"),
        ("compressed", "doc-a"),
        ("event", "doc-a"),
        ("files", "doc-a"),
        ("hold", "doc-a"),
        ("parquet", "doc-a"),
        ("storage", "doc-a"),
        ("tables", "doc-a"),
        // doc-b: "A funnel counts users who reach each step within the window."
        ("counts", "doc-b"),
        ("each", "doc-b"),
        ("funnel", "doc-b"),
        ("reach", "doc-b"),
        ("step", "doc-b"),
        ("users", "doc-b"),
        ("who", "doc-b"),
        ("window", "doc-b"),
        ("within", "doc-b"),
        // doc-c: "Rotate the storage keys every quarter; never paste them in chat."
        ("chat", "doc-c"),
        ("every", "doc-c"),
        ("keys", "doc-c"),
        ("never", "doc-c"),
        ("paste", "doc-c"),
        ("quarter", "doc-c"),
        ("rotate", "doc-c"),
        ("storage", "doc-c"),
        ("them", "doc-c"),
    ];
    let mut expected: Vec<Vec<String>> = by_hand
        .iter()
        .map(|(t, o)| row(&[t, o, "text", "1"]))
        .collect();
    expected.sort();
    assert_eq!(terms, expected);
    // chars-div-4-v1 needs the content's length in Unicode scalar values: the same figure
    // DataFusion's character_length gives over the content itself.
    let chars = rt.block_on(sql(
        tmp.path(),
        "SELECT i.object_id, i.chars = character_length(r.content) FROM index_reps i \
         JOIN representations r ON r.object_id = i.object_id ORDER BY 1",
    ));
    assert_eq!(
        chars,
        vec![
            row(&["doc-a", "true"]),
            row(&["doc-b", "true"]),
            row(&["doc-c", "true"])
        ]
    );
    // The file is covered with its size; a second run finds nothing new.
    let rep_file = tmp.path().join("representations/part-0.parquet");
    let size = std::fs::metadata(&rep_file).unwrap().len().to_string();
    let files = rt.block_on(sql(tmp.path(), "SELECT file, size FROM index_files"));
    assert_eq!(files, vec![row(&["representations/part-0.parquet", &size])]);
    let again = index_root(&root).unwrap();
    assert_eq!((again.files, again.already, again.postings), (0, 1, 0));

    // A representations file whose revisions are not visible is left for a later run (the
    // covered one stays covered).
    let orphan = tmp.path().join("representations/part-1.parquet");
    std::fs::copy(&rep_file, &orphan).unwrap();
    std::fs::copy(
        tmp.path().join("revisions/part-0.parquet"),
        tmp.path().join("keep-revisions.parquet"),
    )
    .unwrap();
    std::fs::remove_file(tmp.path().join("revisions/part-0.parquet")).unwrap();
    let waiting = index_root(&root).unwrap();
    assert_eq!((waiting.files, waiting.waiting, waiting.already), (0, 1, 1));
    std::fs::rename(
        tmp.path().join("keep-revisions.parquet"),
        tmp.path().join("revisions/part-0.parquet"),
    )
    .unwrap();
    let later = index_root(&root).unwrap();
    assert_eq!((later.files, later.already), (1, 1));
}

/// `ingest objects` indexes what it writes under the same commit: the postings of its
/// representations (summary weight 2, text 1), none of a file detected as a secret, and the
/// coverage of its own representations file.
#[test]
fn ingest_indexes_its_representations_but_never_secret_content() {
    let tmp = tempfile::tempdir().unwrap();
    let notes = tmp.path().join("notes");
    std::fs::create_dir_all(&notes).unwrap();
    std::fs::write(
        notes.join("plan.md"),
        "Pricing plan\n\nSecond paragraph here.\n",
    )
    .unwrap();
    std::fs::write(notes.join(".env"), "TOKEN=hunter22\n").unwrap();
    let root = tmp.path().join("store");
    let s = ingest_objects(
        root.as_path(),
        std::slice::from_ref(&notes),
        &ObjectIngestOptions::default(),
    )
    .unwrap();
    assert_eq!(s.secrets, 1, "the .env file is taken as a secret");
    let rt = crate::common::rt();
    let terms = rt.block_on(sql(&root, POSTINGS));
    let got: Vec<(String, String, String)> = terms
        .iter()
        .map(|r| (r[0].clone(), r[2].clone(), r[3].clone()))
        .collect();
    // plan.md: text "Pricing plan\n\nSecond paragraph here.\n", summary its first paragraph.
    let expected: Vec<(String, String, String)> = [
        ("here", "text", "1"),
        ("paragraph", "text", "1"),
        ("plan", "summary", "2"),
        ("plan", "text", "1"),
        ("pricing", "summary", "2"),
        ("pricing", "text", "1"),
        ("second", "text", "1"),
    ]
    .iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    .collect();
    assert_eq!(got, expected);
    let never = rt.block_on(sql(
        &root,
        "SELECT count(*) FROM index_terms WHERE term IN ('token', 'hunter22')",
    ));
    assert_eq!(never, vec![row(&["0"])]);
    // The secret file's representations are covered (listed) but not indexed.
    let reps = rt.block_on(sql(
        &root,
        "SELECT count(*), sum(CASE WHEN indexed THEN 1 ELSE 0 END), count(chars) FROM index_reps",
    ));
    let total = rt.block_on(sql(&root, "SELECT count(*) FROM representations"));
    assert_eq!(reps[0][0], total[0][0]);
    assert_eq!(
        reps[0][1], reps[0][2],
        "chars only where the text is indexed"
    );
    let covered = rt.block_on(sql(&root, "SELECT file FROM index_files"));
    let rep_files: Vec<String> = std::fs::read_dir(root.join("representations"))
        .unwrap()
        .map(|e| {
            format!(
                "representations/{}",
                e.unwrap().file_name().to_string_lossy()
            )
        })
        .collect();
    assert_eq!(covered, vec![rep_files]);
}

/// Another tool's column order (`revision` before `object_id`, content as a view): the index
/// reads columns by name, so the postings are pyarrow's file's.
#[test]
fn columns_are_read_by_name_in_any_order() {
    let tmp = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/foreign/objects");
    crate::common::copy_dir(&src, tmp.path());
    let rt = crate::common::rt();
    let reps = tmp.path().join("representations");
    let reordered = tmp.path().join("reordered.parquet");
    rt.block_on(async {
        let ctx = datafusion::prelude::SessionContext::new();
        ctx.register_parquet("r", reps.to_str().unwrap(), Default::default())
            .await
            .unwrap();
        ctx.sql(
            "SELECT revision, arrow_cast(content, 'Utf8View') AS content, name, object_id, \
             media_type, content_hash FROM r",
        )
        .await
        .unwrap()
        .write_parquet(reordered.to_str().unwrap(), Default::default(), None)
        .await
        .unwrap();
    });
    std::fs::remove_file(reps.join("part-0.parquet")).unwrap();
    std::fs::rename(&reordered, reps.join("part-0.parquet")).unwrap();
    let s = index_root(&Root::Local(tmp.path().to_path_buf())).unwrap();
    assert_eq!((s.files, s.waiting, s.indexed, s.postings), (1, 0, 3, 26));
    let storage = rt.block_on(sql(
        tmp.path(),
        "SELECT r.object_id FROM (SELECT unnest(reps) AS rep FROM index_terms \
         WHERE term = 'storage') t JOIN index_reps r ON r.rep = t.rep ORDER BY 1",
    ));
    assert_eq!(storage, vec![row(&["doc-a"]), row(&["doc-c"])]);
}

/// A copy of a dataset gives its files new versions (modification times, ETags). The files
/// signalql wrote under a commit (`ingest-<id>.parquet`) are never rewritten, so the copied
/// index still covers them: `signalql index` finds nothing to do and CONTEXT FOR takes the
/// index path. A file another tool wrote and that is rewritten is uncovered again
/// (tests/it/context.rs, `the_index_changes_no_answer`).
#[test]
fn a_copied_dataset_keeps_the_coverage_of_signalqls_own_files() {
    let (tmp, root, now) = two_notes();
    let copy = tmp.path().join("copy");
    crate::common::copy_dir(&root, &copy);
    // A new modification time even on a file system that keeps whole seconds.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    for e in std::fs::read_dir(copy.join("representations")).unwrap() {
        let p = e.unwrap().path();
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, bytes).unwrap();
    }
    let s = index_root(&Root::Local(copy.clone())).unwrap();
    assert_eq!((s.files, s.already), (0, 1), "{s:?}");
    let engine = signalql::Engine::open_with(
        &copy,
        signalql::EngineOptions {
            now: Some(now),
            ..Default::default()
        },
    )
    .unwrap();
    let rt = crate::common::rt();
    let b = match rt
        .block_on(engine.answer(r#"CONTEXT FOR "parquet storage""#))
        .unwrap()
    {
        signalql::Answer::Bundle(b) => b,
        other => panic!("{other:?}"),
    };
    assert_eq!(b.items.len(), 1, "{b:?}");
    let x = match rt
        .block_on(engine.answer(&format!("EXPLAIN CONTEXT {}", b.id)))
        .unwrap()
    {
        signalql::Answer::Explanation(x) => x,
        other => panic!("{other:?}"),
    };
    let scoring = x.scoring.expect("scoring");
    assert_eq!((scoring.index, scoring.scan), (2, 0), "{scoring:?}");
}

/// Two notes ingested (and so indexed) by signalql into `store/` of a temporary folder, and
/// the T the tests query them at.
fn two_notes() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    chrono::DateTime<chrono::Utc>,
) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    crate::common::ingest_docs(
        &root,
        &[
            ("a.md", "# Parquet storage\n\nColumns on disk.\n"),
            ("b.md", "# Funnels\n\nSteps in order.\n"),
        ],
    );
    let now = chrono::DateTime::parse_from_rfc3339("2026-06-01T00:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    (tmp, root, now)
}

/// An `index_reps` file without the `o200k` column (the first index format) covers nothing:
/// its files are scanned, with the answers the current index gives (docs/index.md).
#[test]
fn an_index_of_the_first_format_covers_nothing() {
    use datafusion::parquet::arrow::ArrowWriter;
    use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let (_tmp, root, now) = two_notes();
    let rt = crate::common::rt();
    let answer = |q: &str| {
        let engine = signalql::Engine::open_with(
            &root,
            signalql::EngineOptions {
                now: Some(now),
                ..Default::default()
            },
        )
        .unwrap();
        rt.block_on(engine.answer(q)).unwrap()
    };
    let q = r#"CONTEXT FOR "parquet storage" USING ESTIMATOR "o200k""#;
    let scoring = |id: &str| match answer(&format!("EXPLAIN CONTEXT {id}")) {
        signalql::Answer::Explanation(x) => {
            let s = x.scoring.expect("scoring");
            (s.index, s.scan)
        }
        other => panic!("{other:?}"),
    };
    let bundle = |q: &str| match answer(q) {
        signalql::Answer::Bundle(b) => b,
        other => panic!("{other:?}"),
    };
    let current = bundle(q);
    assert_eq!(current.items.len(), 1);
    assert_eq!(scoring(&current.id), (2, 0));
    // Drop `o200k` from every index_reps file, as the first format wrote them.
    for e in std::fs::read_dir(root.join("index_reps")).unwrap() {
        let p = e.unwrap().path();
        let reader =
            ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&p).unwrap()).unwrap();
        let batches: Vec<_> = reader.build().unwrap().map(|b| b.unwrap()).collect();
        let keep: Vec<usize> = (0..batches[0].num_columns())
            .filter(|&i| batches[0].schema().field(i).name() != "o200k")
            .collect();
        let batches: Vec<_> = batches.iter().map(|b| b.project(&keep).unwrap()).collect();
        let mut w = ArrowWriter::try_new(
            std::fs::File::create(&p).unwrap(),
            batches[0].schema(),
            None,
        )
        .unwrap();
        for b in &batches {
            w.write(b).unwrap();
        }
        w.close().unwrap();
    }
    // Another budget, so another address: the store keeps the first record of an address.
    let old = bundle(&format!("{q} BUDGET 7999 TOKENS"));
    assert_eq!(old.items, current.items);
    assert_eq!(scoring(&old.id), (0, 2));
}
