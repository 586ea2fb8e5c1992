//! `ingest_objects`: files into the object tables, checked by reading the Parquet back with
//! DataFusion SQL (not with the catalog's own reader).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use signalql_catalog::objects::ingest::{
    ObjectIngestOptions, ObjectIngestSummary, ingest_objects, object_id,
};

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A folder `notes/` with one file of each kind, and a dataset root.
fn corpus() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let notes = tmp.path().join("notes");
    write(
        &notes,
        "design.md",
        "# Object storage design\n\nObjects are stored as Parquet revisions.\n\nSee [the API](sub/api.md).\n",
    );
    write(&notes, "sub/api.md", "# API\n\nThe API reads bundles.\n");
    write(&notes, "budget.txt", "Plain notes about budgets.\n");
    write(&notes, "main.rs", "// entry point\nfn main() {}\n");
    write(&notes, "data.json", "{\"a\": 1}\n");
    write(
        &notes,
        "chat.jsonl",
        "{\"role\":\"user\",\"content\":\"hello\"}\n{\"role\":\"assistant\",\"content\":\"hi\"}\n",
    );
    write(&notes, ".env", "TOKEN=abc\n");
    write(&notes, ".git/config", "[core]\n");
    std::fs::write(notes.join("blob.bin"), [0u8, 159, 146, 150]).unwrap();
    let root = tmp.path().join("store");
    (tmp, notes, root)
}

fn opts(now: &str) -> ObjectIngestOptions {
    ObjectIngestOptions {
        project: Some("demo".into()),
        now: at(now),
        ..Default::default()
    }
}

fn run(root: &Path, notes: &Path, now: &str) -> ObjectIngestSummary {
    ingest_objects(root, &[notes.to_path_buf()], &opts(now)).unwrap()
}

/// Rows of a query over the tables of `root`, as text.
async fn sql(root: &Path, q: &str) -> Vec<Vec<String>> {
    crate::common::folder_sql(
        root,
        &["objects", "revisions", "representations", "links"],
        q,
    )
    .await
}

/// Every file under `root` with its bytes.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[tokio::test]
async fn a_folder_becomes_objects_with_text_and_summary() {
    let (_tmp, notes, root) = corpus();
    let s = run(&root, &notes, "2026-11-01T00:00:00Z");
    assert_eq!(
        (s.added, s.revised, s.unchanged, s.tombstoned),
        (7, 0, 0, 0)
    );
    assert_eq!(s.secrets, 1);
    assert_eq!(s.skipped.len(), 1, "{:?}", s.skipped); // blob.bin; .git/ is not walked
    // representations, links, revisions, objects, and the text index: index_terms, index_reps,
    // index_files
    assert_eq!(s.written.len(), 7);

    let rows = sql(
        &root,
        "SELECT source_path, kind, title, project FROM objects ORDER BY source_path",
    )
    .await;
    let expect = [
        ["notes/.env", "config", ".env", "demo"],
        ["notes/budget.txt", "document", "budget.txt", "demo"],
        ["notes/chat.jsonl", "messages", "chat.jsonl", "demo"],
        ["notes/data.json", "data", "data.json", "demo"],
        [
            "notes/design.md",
            "document",
            "Object storage design",
            "demo",
        ],
        ["notes/main.rs", "code", "main.rs", "demo"],
        ["notes/sub/api.md", "document", "API", "demo"],
    ];
    assert_eq!(rows, expect.map(|r| r.map(String::from).to_vec()).to_vec());

    let design = object_id(Some("demo"), "notes/design.md");
    let rows = sql(
        &root,
        &format!(
            "SELECT name, media_type, content, content_hash FROM representations \
             WHERE object_id = '{design}' ORDER BY name"
        ),
    )
    .await;
    assert_eq!(rows[0][0], "summary");
    assert_eq!(rows[0][2], "Objects are stored as Parquet revisions.");
    assert_eq!(rows[1][..2], ["text", "text/markdown"]);
    // sha256 of the file's text, computed here independently of the engine.
    use sha2::Digest;
    let text = std::fs::read_to_string(notes.join("design.md")).unwrap();
    assert_eq!(rows[1][2], text);
    assert_eq!(
        rows[1][3],
        hex::encode(sha2::Sha256::digest(text.as_bytes()))
    );

    let chat = sql(
        &root,
        "SELECT r.content FROM representations r JOIN objects o USING (object_id) \
         WHERE o.source_path = 'notes/chat.jsonl'",
    )
    .await;
    assert_eq!(chat, vec![vec!["user: hello\nassistant: hi".to_string()]]);

    let links = sql(
        &root,
        "SELECT object_id, entity_type, entity_id, relation FROM links",
    )
    .await;
    assert_eq!(
        links,
        vec![vec![
            design.clone(),
            "object".into(),
            object_id(Some("demo"), "notes/sub/api.md"),
            "links_to".into()
        ]]
    );

    let roles = sql(
        &root,
        "SELECT o.source_path, array_to_string(r.roles, ',') FROM revisions r \
         JOIN objects o USING (object_id) WHERE o.source_path IN ('notes/.env', 'notes/main.rs') \
         ORDER BY 1",
    )
    .await;
    assert_eq!(roles[0], ["notes/.env", "data,secret"]);
    assert_eq!(roles[1], ["notes/main.rs", "data"]);
}

#[tokio::test]
async fn a_rerun_over_the_same_folder_writes_nothing() {
    let (_tmp, notes, root) = corpus();
    run(&root, &notes, "2026-11-01T00:00:00Z");
    let before = snapshot(&root);
    let s = run(&root, &notes, "2026-11-02T00:00:00Z");
    assert_eq!(
        (s.added, s.revised, s.unchanged, s.tombstoned),
        (0, 0, 7, 0)
    );
    assert!(s.written.is_empty());
    assert_eq!(snapshot(&root), before);
}

#[tokio::test]
async fn changes_add_revisions_deletions_tombstone_and_nothing_is_lost() {
    let (_tmp, notes, root) = corpus();
    run(&root, &notes, "2026-11-01T00:00:00Z");
    let first = snapshot(&root);

    write(
        &notes,
        "budget.txt",
        "Plain notes about budgets.\nNow with more.\n",
    );
    std::fs::remove_file(notes.join("data.json")).unwrap();
    let s = run(&root, &notes, "2026-11-02T00:00:00Z");
    assert_eq!(
        (s.added, s.revised, s.unchanged, s.tombstoned),
        (0, 1, 5, 1)
    );

    // Every file of the first ingest is still there, byte for byte.
    let second = snapshot(&root);
    for (path, bytes) in &first {
        assert_eq!(second.get(path), Some(bytes), "{} changed", path.display());
    }

    let budget = object_id(Some("demo"), "notes/budget.txt");
    let revs = sql(
        &root,
        &format!(
            "SELECT revision, CAST(created_at AS VARCHAR) FROM revisions \
             WHERE object_id = '{budget}' ORDER BY revision"
        ),
    )
    .await;
    assert_eq!(revs.len(), 2);
    assert_eq!(revs[1][0], "2");
    assert!(revs[1][1].starts_with("2026-11-02"), "{revs:?}");

    let data = object_id(Some("demo"), "notes/data.json");
    let recs = sql(
        &root,
        &format!(
            "SELECT CAST(tombstoned_at AS VARCHAR) FROM objects WHERE object_id = '{data}' \
             ORDER BY recorded_at"
        ),
    )
    .await;
    assert_eq!(recs.len(), 2);
    assert!(recs[0][0].is_empty() || recs[0][0] == "NULL", "{recs:?}");
    assert!(recs[1][0].starts_with("2026-11-02"), "{recs:?}");

    // The file comes back unchanged: the object is live again, with no new revision.
    write(&notes, "data.json", "{\"a\": 1}\n");
    let s = run(&root, &notes, "2026-11-03T00:00:00Z");
    assert_eq!((s.added, s.revised, s.restored, s.tombstoned), (0, 0, 1, 0));
    let revs = sql(
        &root,
        &format!("SELECT count(*) FROM revisions WHERE object_id = '{data}'"),
    )
    .await;
    assert_eq!(revs, vec![vec!["1".to_string()]]);
}

#[tokio::test]
async fn secret_detection_can_be_turned_off_and_options_are_checked() {
    let (_tmp, notes, root) = corpus();
    let o = ObjectIngestOptions {
        detect_secrets: false,
        trust: "verified".into(),
        origin: "human".into(),
        roles: vec!["instruction".into()],
        ..opts("2026-11-01T00:00:00Z")
    };
    let s = ingest_objects(&root, std::slice::from_ref(&notes), &o).unwrap();
    assert_eq!(s.secrets, 0);
    let rows = sql(
        &root,
        "SELECT DISTINCT trust, origin, array_to_string(roles, ',') FROM revisions",
    )
    .await;
    assert_eq!(rows, vec![vec!["verified", "human", "instruction"]]);

    for (field, bad) in [("trust", "sure"), ("origin", "alien"), ("role", "boss")] {
        let mut o = opts("2026-11-01T00:00:00Z");
        match field {
            "trust" => o.trust = bad.into(),
            "origin" => o.origin = bad.into(),
            _ => o.roles = vec![bad.into()],
        }
        let err = ingest_objects(&root, std::slice::from_ref(&notes), &o).unwrap_err();
        assert!(err.to_string().contains(bad), "{err}");
    }
}
