//! Selection for `CONTEXT FOR` (lexical-v1, signalql-v0.5-context.md steps 3, 5 and 6): the
//! candidates and their representations, eligibility with one rejection reason per object,
//! preference boosts and rank. Expansion is in `expand.rs`, packing in `packing.rs`; all are
//! pure functions over loaded rows (the relevance scores come from the plan, see `load.rs`).

use std::cmp::Ordering;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The estimator of a representation without a stored token count.
pub const CHARS_DIV_4: &str = signalql_udfs::scalar::token_estimate::ESTIMATOR;
/// The estimator named for a stored token count.
pub const STORED: &str = "stored";

/// One representation of a candidate's selected revision.
#[derive(Debug, Clone, PartialEq)]
pub struct Rep {
    pub name: Arc<str>,
    pub media_type: Arc<str>,
    /// NULL when not loaded (secret or excluded representations are never read).
    pub content: Option<String>,
    /// Where the content is kept when it is not stored inline.
    pub content_ref: Option<String>,
    pub content_hash: String,
    /// The token estimate and the estimator that produced it.
    pub tokens: i64,
    pub estimator: &'static str,
    /// Effective roles: the revision's and the representation's.
    pub roles: Vec<Arc<str>>,
    pub secret: bool,
    pub role_excluded: bool,
    pub packable: bool,
}

impl Rep {
    /// Usable for packing: packable, not secret, not excluded by role.
    pub fn eligible(&self) -> bool {
        self.packable && !self.secret && !self.role_excluded
    }
}

/// A live object at its selected revision, with what scope and EXCLUDE need.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub id: String,
    pub revision: i64,
    pub in_project: bool,
    pub within_age: bool,
    pub state: Arc<str>,
    pub origin: Arc<str>,
    pub trust: Arc<str>,
    pub validation: Arc<str>,
    pub roles: Vec<Arc<str>>,
    pub reps: Vec<Rep>,
    /// lexical-v1 score (0 unless eligible).
    pub lexical: i64,
    /// Per task term, its lexical-v1 weight (empty unless eligible): the matched terms are
    /// those weighing more than 0 ([`Candidate::terms`]).
    pub weights: Vec<i64>,
    /// Whether a representation of it took the scan path: its content was read and
    /// tokenised (otherwise its relevance came from the text index and its title).
    pub scanned: bool,
}

impl Candidate {
    /// The task terms the object matched, in term order.
    pub fn terms<'a>(&self, task_terms: &'a [String]) -> Vec<&'a str> {
        task_terms
            .iter()
            .zip(&self.weights)
            .filter(|(_, w)| **w > 0)
            .map(|(t, _)| t.as_str())
            .collect()
    }
}

/// Why an object was left out (signalql-v0.5-context.md, EXPLAIN CONTEXT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    OutOfScope,
    MaxAge,
    ExcludedSecret,
    ExcludedTrust,
    ExcludedStale,
    ExcludedRole,
    NoPackableRepresentation,
    MaxObjects,
    Budget,
}

impl Reason {
    pub const ALL: [Reason; 9] = [
        Reason::OutOfScope,
        Reason::MaxAge,
        Reason::ExcludedSecret,
        Reason::ExcludedTrust,
        Reason::ExcludedStale,
        Reason::ExcludedRole,
        Reason::NoPackableRepresentation,
        Reason::MaxObjects,
        Reason::Budget,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            Reason::OutOfScope => "out_of_scope",
            Reason::MaxAge => "max_age",
            Reason::ExcludedSecret => "excluded_secret",
            Reason::ExcludedTrust => "excluded_trust",
            Reason::ExcludedStale => "excluded_stale",
            Reason::ExcludedRole => "excluded_role",
            Reason::NoPackableRepresentation => "no_packable_representation",
            Reason::MaxObjects => "max_objects",
            Reason::Budget => "budget",
        }
    }
}

/// The EXCLUDE items that are object-level.
#[derive(Debug, Clone, Copy, Default)]
pub struct Exclusions {
    pub untrusted: bool,
    pub stale: bool,
}

/// The first reason (in the spec's order) that keeps `c` out before relevance, if any.
pub fn ineligible(c: &Candidate, ex: Exclusions) -> Option<Reason> {
    if !c.in_project {
        return Some(Reason::OutOfScope);
    }
    if !c.within_age {
        return Some(Reason::MaxAge);
    }
    if !c.reps.is_empty() && c.reps.iter().all(|r| r.secret) {
        return Some(Reason::ExcludedSecret);
    }
    if ex.untrusted && &*c.trust == "untrusted" {
        return Some(Reason::ExcludedTrust);
    }
    if ex.stale && (&*c.state == "stale" || &*c.state == "invalid") {
        return Some(Reason::ExcludedStale);
    }
    let open: Vec<&Rep> = c.reps.iter().filter(|r| !r.secret).collect();
    if !open.is_empty() && open.iter().all(|r| r.role_excluded) {
        return Some(Reason::ExcludedRole);
    }
    if !c.reps.iter().any(Rep::eligible) {
        return Some(Reason::NoPackableRepresentation);
    }
    None
}

/// An undirected graph edge between two nodes (`object:<id>` or `<entity_type>:<id>`).
/// It borrows its names (from the edge batches), so reading edges allocates nothing per edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge<'a> {
    pub a: &'a str,
    pub b: &'a str,
    pub relation: &'a str,
}

/// Orders strings by UTF-16 code unit, as the spec's tie-breaks do. Code-unit order is byte
/// order except between U+E000–U+FFFF and the supplementary planes, so the bytes decide when
/// the strings first differ at ASCII bytes (the common case, with no transcoding).
pub fn utf16_cmp(a: &str, b: &str) -> Ordering {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    match x.iter().zip(y).position(|(p, q)| p != q) {
        None => x.len().cmp(&y.len()),
        Some(i) if x[i].is_ascii() && y[i].is_ascii() => x[i].cmp(&y[i]),
        Some(_) => a.encode_utf16().cmp(b.encode_utf16()),
    }
}

/// Multiplies by 5/4, rounded down, once per satisfied PREFER term.
pub fn boost(score: i64, satisfied: usize) -> i64 {
    (0..satisfied).fold(score, |s, _| s * 5 / 4)
}

/// A ranked object: what the rank order uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankKey<'a> {
    pub score: i64,
    pub current: bool,
    pub hops: u32,
    pub id: &'a str,
}

/// Step 6's order: score descending, current first, fewer hops, object id by UTF-16 code unit.
pub fn rank_cmp(a: &RankKey, b: &RankKey) -> Ordering {
    b.score
        .cmp(&a.score)
        .then(b.current.cmp(&a.current))
        .then(a.hops.cmp(&b.hops))
        .then_with(|| utf16_cmp(a.id, b.id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boosts_and_estimates() {
        assert_eq!(boost(1_000_000, 1), 1_250_000);
        assert_eq!(boost(333_333, 2), 520_832); // 416666 then 520832
    }

    #[test]
    fn rank_order() {
        let k = |score, current, hops, id| RankKey {
            score,
            current,
            hops,
            id,
        };
        let mut v = [
            k(5, false, 0, "b"),
            k(5, true, 1, "c"),
            k(5, true, 0, "z"),
            k(9, false, 2, "a"),
            k(5, true, 0, "y"),
        ];
        v.sort_by(rank_cmp);
        let ids: Vec<&str> = v.iter().map(|k| k.id).collect();
        assert_eq!(ids, ["a", "y", "z", "c", "b"]);
    }

    proptest::proptest! {
        /// The fast code-unit order equals transcoding both strings, on strings mixing ASCII,
        /// the BMP's private-use area and the supplementary planes.
        #[test]
        fn utf16_cmp_is_code_unit_order(
            a in "[ab\u{e9}\u{e000}\u{ffff}\u{10000}\u{1f600}]{0,6}",
            b in "[ab\u{e9}\u{e000}\u{ffff}\u{10000}\u{1f600}]{0,6}",
        ) {
            proptest::prop_assert_eq!(utf16_cmp(&a, &b), a.encode_utf16().cmp(b.encode_utf16()));
        }
    }
}
