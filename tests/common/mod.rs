//! Helpers shared by integration tests (each test binary uses some of them).
#![allow(dead_code)]

pub mod s3;

/// A dataset that links the sample's events and fixes T at 2026-06-13T00:00:00Z, to which a
/// test adds its own files.
pub fn sample_events_dataset() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let events = std::fs::canonicalize(signalql::sample_dataset().join("events")).unwrap();
    std::os::unix::fs::symlink(events, root.path().join("events")).unwrap();
    std::fs::write(
        root.path().join("signalql.toml"),
        "now = \"2026-06-13T00:00:00Z\"\n",
    )
    .unwrap();
    root
}

/// Write `files` (name, text) to a temporary folder and ingest them as objects into `root`,
/// at 2026-01-01T00:00:00Z.
pub fn ingest_docs(root: &std::path::Path, files: &[(&str, &str)]) {
    let docs = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(docs.path().join(name), text).unwrap();
    }
    let options = signalql::catalog::objects::ingest::ObjectIngestOptions {
        now: chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc),
        ..Default::default()
    };
    signalql::catalog::objects::ingest::ingest_objects(
        root,
        &[docs.path().to_path_buf()],
        &options,
    )
    .unwrap();
}
