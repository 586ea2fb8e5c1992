//! The plan cache of the long-running servers (context-runtime.md §7; docs/runtime.md): a
//! statement planned once (parsed, bound, its tables opened, lowered to a DataFusion logical
//! plan) is reused by a later identical request, and still executed each time.
//!
//! An entry is found by its [`PlanCacheKey`] (the canonical text, the principal and its policy
//! rules, the limits, the parser and planner versions, and `T`, which every plan depends on:
//! windows, AS OF and the validity of traits and signals are resolved against it), then
//! checked against its sources: each table it read must list the same files (paths, sizes and
//! modification times, or ETags on S3) as when it was planned. Any difference is a miss, and
//! the statement is planned again. Plans over tables without a fingerprint (Delta tables, an
//! application's own tables) are not cached (`bypass`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

/// The version of the planner in the key: a plan made by another build is not reused.
pub const PLANNER_VERSION: &str = concat!("signalql-", env!("CARGO_PKG_VERSION"), "+datafusion-55");

/// The version of the parser in the key (the canonical text is its output).
pub const PARSER_VERSION: &str = concat!("signalql-", env!("CARGO_PKG_VERSION"));

/// Entries kept before the least recently used is dropped.
pub const DEFAULT_CAPACITY: usize = 512;

/// What finds an entry (context-runtime.md's PlanCacheKey, as it applies here; the source
/// fingerprint is checked per table of the entry).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PlanCacheKey {
    pub canonical_query: String,
    /// A hash of the principal's rules in policy.toml; `none` without a policy.
    pub policy_fingerprint: String,
    pub principal: Option<String>,
    /// The limits the statement runs under, as JSON.
    pub limits: String,
    pub parser_version: String,
    pub planner_version: String,
    /// `T`, RFC 3339.
    pub t: String,
}

/// The JSON form of an entry (its plan is not serialised: it lives in the server only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanCacheEntry {
    #[serde(default = "crate::forms::runtime_forms")]
    pub spec_version: String,
    pub key: PlanCacheKey,
    /// The tables the plan reads and their fingerprints when it was made.
    pub sources: Vec<SourceFingerprint>,
    pub created_at: String,
    pub hits: u64,
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub unknown: crate::forms::Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceFingerprint {
    pub table: String,
    pub fingerprint: String,
}

/// How a statement's plan was come by (the envelope's `plan_cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Hit,
    Miss,
    Bypass,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Hit => "hit",
            Outcome::Miss => "miss",
            Outcome::Bypass => "bypass",
        }
    }
}

struct Entry<P> {
    form: PlanCacheEntry,
    compiled: Arc<P>,
}

/// A bounded cache of plans `P` (the engine's compiled statements), shared by the engines of
/// one server (one per principal).
pub struct PlanCache<P> {
    capacity: usize,
    inner: Mutex<Inner<P>>,
}

struct Inner<P> {
    entries: HashMap<PlanCacheKey, Entry<P>>,
    /// Keys, least recently used first.
    order: VecDeque<PlanCacheKey>,
}

impl<P> Default for Inner<P> {
    fn default() -> Self {
        Inner {
            entries: HashMap::new(),
            order: VecDeque::new(),
        }
    }
}

impl<P> Inner<P> {
    fn touch(&mut self, key: &PlanCacheKey) {
        if let Some(i) = self.order.iter().position(|k| k == key) {
            self.order.remove(i);
        }
        self.order.push_back(key.clone());
    }
}

impl<P> std::fmt::Debug for PlanCache<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanCache")
            .field("capacity", &self.capacity)
            .field("entries", &self.len())
            .finish()
    }
}

impl<P> Default for PlanCache<P> {
    fn default() -> Self {
        PlanCache::new(DEFAULT_CAPACITY)
    }
}

impl<P> PlanCache<P> {
    pub fn new(capacity: usize) -> PlanCache<P> {
        PlanCache {
            capacity: capacity.max(1),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The entry of `key`: its plan and the sources to check before reusing it.
    pub(crate) fn get(&self, key: &PlanCacheKey) -> Option<(Arc<P>, Vec<SourceFingerprint>)> {
        let mut inner = self.inner.lock().ok()?;
        let found = inner.entries.get(key)?;
        let out = (Arc::clone(&found.compiled), found.form.sources.clone());
        inner.touch(key);
        Some(out)
    }

    /// Counts a reuse of `key`'s plan.
    pub(crate) fn hit(&self, key: &PlanCacheKey) {
        if let Ok(mut inner) = self.inner.lock()
            && let Some(e) = inner.entries.get_mut(key)
        {
            e.form.hits += 1;
        }
    }

    pub(crate) fn remove(&self, key: &PlanCacheKey) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.entries.remove(key);
            inner.order.retain(|k| k != key);
        }
    }

    pub(crate) fn put(&self, key: PlanCacheKey, sources: Vec<SourceFingerprint>, compiled: Arc<P>) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let form = PlanCacheEntry {
            spec_version: crate::forms::runtime_forms(),
            key: key.clone(),
            sources,
            created_at: crate::lower::time::rfc3339(chrono::Utc::now()),
            hits: 0,
            unknown: Default::default(),
        };
        inner.entries.insert(key.clone(), Entry { form, compiled });
        inner.touch(&key);
        while inner.entries.len() > self.capacity {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            inner.entries.remove(&old);
        }
    }

    /// The entries' JSON forms, least recently used first.
    pub fn entries(&self) -> Vec<PlanCacheEntry> {
        self.each(|e| e.form.clone())
    }

    /// The entries' plans, least recently used first.
    pub fn plans(&self) -> Vec<Arc<P>> {
        self.each(|e| Arc::clone(&e.compiled))
    }

    /// `f` of each entry, least recently used first.
    fn each<T>(&self, f: impl Fn(&Entry<P>) -> T) -> Vec<T> {
        let Ok(inner) = self.inner.lock() else {
            return Vec::new();
        };
        inner
            .order
            .iter()
            .filter_map(|k| inner.entries.get(k).map(&f))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.inner.lock().map_or(0, |i| i.entries.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_entry_form_keeps_unknown_fields_and_refuses_a_newer_major() {
        let v = json!({
            "spec_version": "0.4",
            "key": {
                "canonical_query": "FROM events RETURN count()",
                "policy_fingerprint": "none", "principal": null, "limits": "{}",
                "parser_version": "p", "planner_version": "q", "t": "2026-01-01T00:00:00Z"
            },
            "sources": [{"table": "events", "fingerprint": "ab"}],
            "created_at": "2026-01-01T00:00:00Z",
            "hits": 3,
            "ttl_seconds": 60
        });
        let text = serde_json::to_vec(&v).unwrap();
        let e: PlanCacheEntry =
            crate::forms::read("entry", &text, crate::forms::RUNTIME_FORMS).unwrap();
        assert_eq!(e.hits, 3);
        assert_eq!(serde_json::to_value(&e).unwrap(), v);
        let mut newer = v.clone();
        newer["spec_version"] = "1.0".into();
        let err = crate::forms::read::<PlanCacheEntry>(
            "entry",
            &serde_json::to_vec(&newer).unwrap(),
            crate::forms::RUNTIME_FORMS,
        )
        .unwrap_err();
        assert!(err.message.contains("newer major"), "{}", err.message);
    }
}
