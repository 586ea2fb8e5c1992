//! The context store: `ROOT/contexts/<ctx_id>.json`, one record per bundle address, created
//! with create-new semantics (`Root::put_new`: locally a temporary file hard-linked to its
//! name, on S3 a PUT with `If-None-Match: *`; both fail if the name exists): the first record
//! written for an address wins and a concurrent writer can neither corrupt nor replace it.

use serde::{Deserialize, Serialize};
use signalql_catalog::Root;

use super::{Bundle, Explanation};
use crate::error::{Error, Result};

/// What the store keeps per address.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub spec_version: String,
    pub bundle: Bundle,
    pub explanation: Explanation,
}

/// `ctx_…` of a `context://ctx_…` address, if it is one (32 lower-case hex digits).
pub fn key(address: &str) -> Option<&str> {
    let k = address.strip_prefix("context://")?;
    let hex = k.strip_prefix("ctx_")?;
    (hex.len() == 32
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
    .then_some(k)
}

fn path(k: &str) -> String {
    format!("contexts/{k}.json")
}

/// Stores `record` under its bundle's address unless one is already there. Returns whether
/// this call wrote it.
pub fn put(root: &Root, record: &Record) -> Result<bool> {
    let Some(k) = key(&record.bundle.id) else {
        return Err(Error::internal(format!(
            "not a bundle address: {}",
            record.bundle.id
        )));
    };
    // Locally, a record already stored is not serialised again (with 100k rejections that
    // is most of the write's cost); `put_new` still decides a race.
    if let Some(dir) = root.local()
        && dir.join(path(k)).exists()
    {
        return Ok(false);
    }
    let text = serde_json::to_vec_pretty(record).map_err(|e| Error::internal(e.to_string()))?;
    Ok(root.put_new(&path(k), text)?)
}

/// The record stored for `address`, or `unknown_context`.
pub fn get(root: &Root, address: &str) -> Result<Record> {
    let unknown = || Error::unknown_context(address);
    let k = key(address).ok_or_else(unknown)?;
    let text = root
        .read(&path(k))
        .map_err(|e| Error::io(format!("{address}: {e}")).caused_by(e))?
        .ok_or_else(unknown)?;
    serde_json::from_slice(&text)
        .map_err(|e| Error::io(format!("stored bundle {address} is unreadable: {e}")).caused_by(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{Budget, BundleMetadata};

    fn record(task: &str) -> Record {
        let metadata = BundleMetadata {
            canonical_query: format!("CONTEXT FOR \"{task}\""),
            budget: Budget { limit: 1, used: 0 },
            scorer: "lexical-v1".into(),
            estimators: vec![],
            as_of: None,
            evaluated_at: "2026-01-01T00:00:00Z".into(),
            considered: 0,
            excluded: Default::default(),
            truncated: false,
            compression_ratio: None,
            skipped_files: Vec::new(),
            stored_in: None,
            not_stored: None,
            access_filtered: false,
        };
        let bundle = Bundle {
            id: "context://ctx_0123456789abcdef0123456789abcdef".into(),
            task: task.into(),
            items: vec![],
            evidence: None,
            metadata,
        };
        let explanation = Explanation {
            context: bundle.id.clone(),
            canonical_query: task.into(),
            as_of: None,
            computed_at: task.into(),
            scorer: "lexical-v1".into(),
            estimators: vec![],
            budget: Budget { limit: 1, used: 0 },
            phases: Default::default(),
            items: vec![],
            rejected: vec![],
        };
        Record {
            spec_version: "0.5".into(),
            bundle,
            explanation,
        }
    }

    #[test]
    fn the_first_write_wins_under_concurrent_writers() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::Local(dir.path().to_path_buf());
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let root = root.clone();
                std::thread::spawn(move || put(&root, &record(&format!("writer {i}"))).unwrap())
            })
            .collect();
        let wrote: Vec<bool> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(wrote.iter().filter(|w| **w).count(), 1, "{wrote:?}");
        let winner = wrote.iter().position(|w| *w).unwrap();
        let got = get(&root, "context://ctx_0123456789abcdef0123456789abcdef").unwrap();
        assert_eq!(got.bundle.task, format!("writer {winner}"));
        // No temporary file is left behind.
        let names: Vec<String> = std::fs::read_dir(dir.path().join("contexts"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["ctx_0123456789abcdef0123456789abcdef.json"]);
        // Malformed and unknown addresses are unknown_context.
        for a in [
            "context://nope",
            "context://ctx_ffffffffffffffffffffffffffffffff",
        ] {
            let e = get(&root, a).unwrap_err();
            assert_eq!(e.to_json()["error"]["code"], "unknown_context");
        }
    }
}
