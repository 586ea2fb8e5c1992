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
    #[serde(default = "crate::forms::context_forms")]
    pub spec_version: String,
    pub bundle: Bundle,
    pub explanation: Explanation,
    /// Where the explanation's `rejected` list is recomputed (DESIGN.md §5, "Scale"): present
    /// on a bundle decided from the resident index, whose record keeps an empty list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin: Option<Pin>,
    /// Fields this version does not know, kept on a round trip (engine/src/forms.rs).
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: crate::forms::Unknown,
}

/// The snapshot a bundle's rejected list is recomputed at (DESIGN.md §5): the resident
/// generation it was decided from (named by its key: every object table's files and the
/// caller's restriction), where those tables stood in the commit log, T and the estimator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pin {
    pub generation: String,
    /// The objects-commit position: the highest sequence number of the commits of the
    /// tables' files.
    pub position: u64,
    /// Per object table, a fingerprint of its files committed otherwise or outside the
    /// commit log (absent: none).
    #[serde(default)]
    pub outside: std::collections::BTreeMap<String, String>,
    /// T, RFC 3339 with microseconds.
    pub t: String,
    pub estimator: String,
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
    let record: Record = crate::forms::read(
        &format!("stored bundle {address}"),
        &text,
        crate::forms::CONTEXT_FORMS,
    )?;
    // The bundle and explanation inside are versioned too.
    for (what, v) in [
        ("bundle", &record.bundle.spec_version),
        ("explanation", &record.explanation.spec_version),
    ] {
        crate::forms::check_version(
            &format!("the {what} stored for {address}"),
            &serde_json::json!({ "spec_version": v }),
            crate::forms::CONTEXT_FORMS,
        )?;
    }
    Ok(record)
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
            unknown: Default::default(),
        };
        let bundle = Bundle {
            spec_version: "0.5".into(),
            id: "context://ctx_0123456789abcdef0123456789abcdef".into(),
            task: task.into(),
            items: vec![],
            evidence: None,
            metadata,
            unknown: Default::default(),
        };
        let explanation = Explanation {
            spec_version: "0.5".into(),
            context: bundle.id.clone(),
            canonical_query: task.into(),
            as_of: None,
            computed_at: task.into(),
            scorer: "lexical-v1".into(),
            estimators: vec![],
            budget: Budget { limit: 1, used: 0 },
            phases: Default::default(),
            scoring: None,
            items: vec![],
            rejected: vec![],
            unknown: Default::default(),
        };
        Record {
            pin: None,
            spec_version: "0.5".into(),
            bundle,
            explanation,
            unknown: Default::default(),
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

    /// A record written by a later 0.x signalql, with fields this version does not know at
    /// every level, is read and written back with them unchanged; a 1.x one is refused.
    #[test]
    fn stored_forms_keep_unknown_fields_and_refuse_a_newer_major() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::Local(dir.path().to_path_buf());
        let address = "context://ctx_0123456789abcdef0123456789abcdef";
        let mut v = serde_json::to_value(record("later")).unwrap();
        v["spec_version"] = "0.7".into();
        v["written_by"] = serde_json::json!({"tool": "signalql 0.9"});
        v["bundle"]["spec_version"] = "0.6".into();
        v["bundle"]["signature"] = "sig".into();
        v["bundle"]["metadata"]["region"] = "eu".into();
        v["bundle"]["items"] = serde_json::json!([{
            "object": "object://a@1", "representation": "body", "media_type": "text/plain",
            "tokens": 3, "estimator": "chars-div-4-v1", "score": 1, "why": [], "path": [],
            "state": "current", "origin": "authored", "trust": "verified",
            "validation": "passed", "roles": ["body"], "content": "abc",
            "content_hash": "h", "freshness": {"days": 2}
        }]);
        v["explanation"]["planner"] = serde_json::json!([1, 2]);
        let text = serde_json::to_vec(&v).unwrap();
        std::fs::create_dir_all(dir.path().join("contexts")).unwrap();
        std::fs::write(dir.path().join(path(key(address).unwrap())), &text).unwrap();
        let got = get(&root, address).unwrap();
        assert_eq!(got.bundle.items[0].unknown["freshness"]["days"], 2);
        assert_eq!(serde_json::to_value(&got).unwrap(), v);
        // A newer major version, of the record or of the bundle inside, is refused.
        for (at, version) in [("record", "1.0"), ("bundle", "2.1")] {
            let mut newer = v.clone();
            match at {
                "record" => newer["spec_version"] = version.into(),
                _ => newer["bundle"]["spec_version"] = version.into(),
            }
            std::fs::write(
                dir.path().join(path(key(address).unwrap())),
                serde_json::to_vec(&newer).unwrap(),
            )
            .unwrap();
            let e = get(&root, address).unwrap_err();
            assert_eq!(e.kind.code(), "io_error");
            assert!(e.message.contains(version), "{}", e.message);
        }
    }
}
