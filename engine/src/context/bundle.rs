//! A context bundle's JSON form (context-packets.md, signalql-v0.5-context.md): its items,
//! metadata and explanation, `object://` URIs, and the content address of a bundle.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use signalql_udfs::scalar::lexical::SCORER;

use super::select::Reason;

/// `object://id@rev`.
pub fn object_uri(id: &str, rev: i64) -> String {
    format!("object://{id}@{rev}")
}

/// The id and revision of an `object://id@rev` address.
pub fn parse_object_uri(uri: &str) -> Option<(&str, i64)> {
    let (id, rev) = uri.strip_prefix("object://")?.rsplit_once('@')?;
    Some((id, rev.parse().ok()?))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    pub limit: u64,
    pub used: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    pub object: String,
    pub representation: String,
    pub media_type: String,
    pub tokens: i64,
    pub estimator: String,
    pub score: i64,
    pub why: Vec<Value>,
    pub path: Vec<String>,
    pub state: String,
    pub origin: String,
    pub trust: String,
    pub validation: String,
    pub roles: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Where to fetch the content when the representation keeps it by reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_ref: Option<String>,
    pub content_hash: String,
    /// Present on an item COMPRESS shrank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
    /// Fields this version does not know, kept on a round trip (engine/src/forms.rs).
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: crate::forms::Unknown,
}

/// How COMPRESS shrank an item: the fraction of the task terms in the representation that the
/// compressed text keeps, and the whole representation's size and hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compression {
    pub preservation: f64,
    pub original_tokens: i64,
    pub original_content_hash: String,
    pub original_chars: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BundleMetadata {
    pub canonical_query: String,
    pub budget: Budget,
    pub scorer: String,
    pub estimators: Vec<String>,
    pub as_of: Option<String>,
    pub evaluated_at: String,
    pub considered: u64,
    pub excluded: BTreeMap<String, u64>,
    pub truncated: bool,
    /// With COMPRESS: characters of the packed content over those of the whole representations
    /// (1.0 when nothing was compressed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression_ratio: Option<f64>,
    /// Files the object tables were read without (`skip_invalid_files`): when any is listed,
    /// the bundle was packed from part of the store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_files: Vec<signalql_catalog::SkippedFile>,
    /// The context store the bundle is kept in for `EXPLAIN CONTEXT` (`ROOT/contexts/`, or
    /// `[context] store`); null when it could not be written there (a root signalql may only
    /// read, without a writable store configured), with `not_stored` saying why.
    #[serde(default)]
    pub stored_in: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_stored: Option<String>,
    /// The caller's policy filtered what the bundle was built from (docs/policy.md).
    #[serde(default)]
    pub access_filtered: bool,
    /// Fields this version does not know, kept on a round trip (engine/src/forms.rs).
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: crate::forms::Unknown,
}

/// A context bundle, with the spec's field names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bundle {
    /// The version of signalql-v0.5-context.md the bundle's form follows.
    #[serde(default = "crate::forms::context_forms")]
    pub spec_version: String,
    pub id: String,
    pub task: String,
    pub items: Vec<Item>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Vec<Value>>,
    pub metadata: BundleMetadata,
    /// Fields this version does not know, kept on a round trip (engine/src/forms.rs).
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: crate::forms::Unknown,
}

/// What `EXPLAIN CONTEXT` returns for a stored bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    /// The version of signalql-v0.5-context.md the explanation's form follows.
    #[serde(default = "crate::forms::context_forms")]
    pub spec_version: String,
    pub context: String,
    pub canonical_query: String,
    pub as_of: Option<String>,
    pub computed_at: String,
    pub scorer: String,
    pub estimators: Vec<String>,
    pub budget: Budget,
    pub phases: BTreeMap<String, u64>,
    /// Which path each candidate's relevance took (a signalql extension; docs/index.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scoring: Option<Scoring>,
    pub items: Vec<Value>,
    pub rejected: Vec<Rejection>,
    /// Fields this version does not know, kept on a round trip (engine/src/forms.rs).
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: crate::forms::Unknown,
}

/// How the candidates were scored: `index` of them from the text index and their titles
/// alone, `scan` by reading and tokenising the content of at least one representation (those
/// listed in `scanned`, as object URIs sorted as `rejected` is).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scoring {
    pub index: u64,
    pub scan: u64,
    pub scanned: Vec<String>,
}

/// One object left out of a bundle, and why (`{"object": …, "reason": …}` in JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    pub object: String,
    pub reason: Reason,
}

/// The canonical JSON of `v`: keys sorted, no whitespace.
pub fn canonical_json(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                let mut out = serde_json::Map::new();
                for k in keys {
                    out.insert(k.clone(), sorted(&m[k]));
                }
                Value::Object(out)
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    serde_json::to_string(&sorted(v)).unwrap_or_default()
}

/// The bundle address: `context://ctx_` + 32 hex of SHA-256 over the canonical JSON preimage.
pub fn address(
    canonical_query: &str,
    as_of: Option<&str>,
    estimators: &[String],
    items: &[Item],
) -> String {
    let items: Vec<Value> = items
        .iter()
        .map(|i| {
            // An entity record (CONTEXT FOR entity(…)) is named by its whole address; its
            // content hash changes with the record.
            let (o, r) = parse_object_uri(&i.object).unwrap_or((i.object.as_str(), 0));
            json!({"o": o, "r": r, "rep": i.representation, "t": i.tokens, "h": i.content_hash})
        })
        .collect();
    let pre = json!({
        "v": "0.5",
        "q": canonical_query,
        "as_of": as_of,
        "scorer": SCORER,
        "estimators": estimators,
        "items": items,
    });
    let digest = hex::encode(Sha256::digest(canonical_json(&pre).as_bytes()));
    format!("context://ctx_{}", &digest[..32])
}
