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
