//! The packer's decisions: the parameters of a CONTEXT FOR (with the spec's limits on them),
//! and [`decide`]: eligibility, expansion, boosts, rank, MAX OBJECTS and both packing passes.

use std::collections::HashMap;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::bundle::{Compression, Item, object_uri};
use super::expand::{Expansion, expand};
use super::packing::{self, Estimator};
use super::select::{self, Candidate, Exclusions, RankKey, Reason, boost, ineligible, rank_cmp};
use crate::error::{Error, Result};
use crate::syntax::ast::{ContextQuery, ExcludeItem, PreferItem, TrustLevel};

/// BUDGET when the query gives none (docs/context.md).
pub const DEFAULT_BUDGET: u64 = 8_000;
pub const DEFAULT_MAX_OBJECTS: u64 = 20;
pub const DEFAULT_MAX_DEPTH: u64 = 1;
pub const MAX_BUDGET: u64 = 10_000_000;
pub const MAX_MAX_OBJECTS: u64 = 500;
pub const MAX_MAX_DEPTH: u64 = 16;

/// The spec's limits on BUDGET (at most `max_budget`, the `max_budget_tokens` limit), MAX
/// OBJECTS and MAX DEPTH, as `limit_exceeded`.
pub fn check_limits(q: &ContextQuery, max_budget: u64) -> Result<()> {
    let check = |name: &str, v: Option<u64>, lo: u64, hi: u64| -> Result<()> {
        match v {
            Some(v) if v < lo || v > hi => Err(Error::limit(name, hi, v)
                .with_help(format!("{name} must be between {lo} and {hi}"))
                .at(q.span)),
            _ => Ok(()),
        }
    };
    check("max_budget_tokens", q.budget, 1, max_budget)?;
    check("max_objects", q.max_objects, 1, MAX_MAX_OBJECTS)?;
    check("max_depth", q.max_depth, 0, MAX_MAX_DEPTH)
}

/// The packer's parameters, fixed per query.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Hash)]
pub struct PackParams {
    pub budget: u64,
    pub max_objects: u64,
    pub max_depth: u32,
    pub exclude_untrusted: bool,
    pub exclude_stale: bool,
    pub prefer: Vec<PreferItem>,
    pub project: Option<String>,
    /// USING KIND: the one object kind in scope.
    pub kind: Option<String>,
    /// MAX AGE: revisions created before this instant (µs) are out.
    pub min_created: Option<i64>,
    /// COMPRESS, and the task's lexical-v1 terms it keeps sentences for.
    pub compress: bool,
    pub terms: Vec<String>,
    /// How representations without a stored count, and compressed texts, are counted.
    pub estimator: Estimator,
    /// CONTEXT FOR entity(…): the entity's node (`type:id`), the expansion's one seed.
    pub subject: Option<String>,
}

/// The seed score of the subject of CONTEXT FOR entity(…): lexical-v1's score of a full match.
pub const SUBJECT_SCORE: i64 = 1_000_000;

impl PackParams {
    /// The parameters of `q` evaluated at `t` (µs), with `estimator` where the query names
    /// none.
    pub fn of(q: &ContextQuery, t: i64, estimator: Estimator) -> Result<Self> {
        Ok(PackParams {
            budget: q.budget.unwrap_or(DEFAULT_BUDGET),
            max_objects: q.max_objects.unwrap_or(DEFAULT_MAX_OBJECTS),
            max_depth: q.max_depth.unwrap_or(DEFAULT_MAX_DEPTH) as u32,
            exclude_untrusted: q.exclude.contains(&ExcludeItem::Untrusted),
            exclude_stale: q.exclude.contains(&ExcludeItem::Stale),
            prefer: q.prefer.clone(),
            project: q.project.clone(),
            kind: q.kind.clone(),
            min_created: match &q.max_age {
                Some(d) => {
                    let too_old = || {
                        let secs =
                            d.n.saturating_mul(crate::lower::time::unit_seconds(d.unit) as u64);
                        Error::limit("max_age_seconds", (i64::MAX / 1_000_000) as u64, secs)
                            .with_help("MAX AGE reaches before year 1; give a shorter age")
                            .at(q.span)
                    };
                    let secs = crate::lower::time::duration_seconds(d).ok_or_else(too_old)?;
                    let micros = secs.checked_mul(1_000_000).ok_or_else(too_old)?;
                    Some(t.checked_sub(micros).ok_or_else(too_old)?)
                }
                None => None,
            },
            compress: q.compress,
            terms: signalql_udfs::scalar::lexical::terms(&q.task),
            estimator: match &q.estimator {
                Some(name) => Estimator::from_name(name).ok_or_else(|| {
                    Error::parse(format!("unknown token estimator \"{name}\""), q.span)
                })?,
                None => estimator,
            },
            subject: q.subject.as_ref().map(|e| e.node()),
        })
    }
}

/// What the packer decided: items in rank order (without content) with their explanation
/// entries, the rejected objects, and the counts the metadata and EXPLAIN report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decisions {
    pub items: Vec<Item>,
    pub explained: Vec<Value>,
    pub rejected: Vec<(String, Reason)>,
    /// When the rejected are counted, not listed (an answer from the resident index, whose
    /// list EXPLAIN CONTEXT recomputes at the stored pin): how many per reason, indexed as
    /// [`Reason::ALL`]. `rejected` is then empty.
    pub counted: Option<[u64; Reason::ALL.len()]>,
    pub used: u64,
    pub considered: u64,
    pub seeds: u64,
    pub expanded: u64,
    /// The candidates that took the scan path ([`Candidate::scanned`]), as object URIs sorted
    /// as the rejected are (by object id).
    pub scanned: Vec<String>,
}

/// Eligibility, expansion, boosts, rank, MAX OBJECTS and both packing passes.
pub fn decide(p: &PackParams, candidates: &[Candidate], edges: &[select::Edge]) -> Decisions {
    let ex = Exclusions {
        untrusted: p.exclude_untrusted,
        stale: p.exclude_stale,
    };
    // The rejected candidates by reference: sorted by id, then formatted once, at the end.
    let mut rejected: Vec<(&str, i64, Reason)> = Vec::new();
    let mut eligible: datafusion::common::HashMap<&str, &Candidate> =
        datafusion::common::HashMap::new();
    for c in candidates {
        match ineligible(c, ex) {
            Some(r) => rejected.push((&c.id, c.revision, r)),
            None => {
                eligible.insert(c.id.as_str(), c);
            }
        }
    }
    let mut seeds: Vec<(String, i64)> = eligible
        .values()
        .filter(|c| c.lexical > 0)
        .map(|c| (format!("object:{}", c.id), c.lexical))
        .collect();
    // CONTEXT FOR entity(…): the entity is the one seed, scoring what a full lexical match
    // would; objects rank by the hops that reach them.
    if let Some(node) = &p.subject {
        seeds.push((node.clone(), SUBJECT_SCORE));
    }
    let passable = |id: &str| eligible.contains_key(id);
    let reached = expand(&seeds, edges, p.max_depth, &passable);

    // Relevance, boosts and the rank key of every relevant eligible object; the details (why,
    // path) only for those MAX OBJECTS keeps.
    let mut keys: Vec<Key> = eligible
        .values()
        .filter_map(|c| {
            let (propagated, hops) = reached.score_hops(&c.id).unwrap_or((0, 0));
            Key::of(p, c, propagated, hops)
        })
        .collect();
    let expanded = keys.iter().filter(|k| k.propagated > k.c.lexical).count() as u64;
    let max_objects = p.max_objects as usize;
    // Only the first MAX OBJECTS need an order (the rank is total: ids are unique); the rest
    // are rejected, and the rejections are sorted by object id below.
    if keys.len() > max_objects {
        keys.select_nth_unstable_by(max_objects, Key::order);
    }
    for k in keys.iter().skip(max_objects) {
        rejected.push((&k.c.id, k.c.revision, Reason::MaxObjects));
    }
    keys.truncate(max_objects);
    keys.sort_by(Key::order);
    let revision_of = |id: &str| eligible.get(id).map(|c| c.revision);
    let packed = pack_ranked(p, keys, &reached, &revision_of);
    let mut scanned: Vec<(&str, i64)> = candidates
        .iter()
        .filter(|c| c.scanned)
        .map(|c| (c.id.as_str(), c.revision))
        .collect();
    sort_by_id(&mut scanned, |s| s.0);
    Decisions {
        scanned: scanned
            .into_iter()
            .map(|(id, rev)| object_uri(id, rev))
            .collect(),
        considered: candidates.len() as u64,
        seeds: seeds.len() as u64,
        expanded,
        ..packed.decisions(rejected)
    }
}

/// Sorts `v` by object id in code-unit order (ids are unique): byte order, unless an id has a
/// supplementary-plane character (a 4-byte UTF-8 sequence, lead byte 0xF0–0xF4), where
/// UTF-16 order differs.
pub(crate) fn sort_by_id<T>(v: &mut [T], id: impl Fn(&T) -> &str) {
    if v.iter().any(|x| id(x).bytes().any(|b| b >= 0xF0)) {
        v.sort_unstable_by(|a, b| select::utf16_cmp(id(a), id(b)));
    } else {
        v.sort_unstable_by(|a, b| id(a).cmp(id(b)));
    }
}

/// The PREFER terms an object of this state and trust satisfies (PREFER REPRESENTATION is
/// the packer's business, not a boost).
pub(crate) fn satisfied(p: &PackParams, state: &str, trust: &str) -> Vec<String> {
    let mut terms = Vec::new();
    for pr in &p.prefer {
        let (ok, term) = match pr {
            PreferItem::Current => (state == "current", "CURRENT".to_string()),
            PreferItem::Trust(level) => (trust_at_least(trust, *level), pr.to_string()),
            PreferItem::Representation(_) => (false, String::new()),
        };
        if ok {
            terms.push(term);
        }
    }
    terms
}

/// A relevant eligible object's rank key.
pub(crate) struct Key<'a> {
    pub c: &'a Candidate,
    pub propagated: i64,
    pub score: i64,
    pub hops: u32,
}

impl<'a> Key<'a> {
    /// The key of `c`, reached by expansion with `propagated` after `hops` (0, 0: not
    /// reached); `None` when its relevance is 0.
    pub fn of(p: &PackParams, c: &'a Candidate, propagated: i64, hops: u32) -> Option<Key<'a>> {
        let relevance = c.lexical.max(propagated);
        if relevance == 0 {
            return None;
        }
        let hops = if propagated > c.lexical { hops } else { 0 };
        let boosts = if p.prefer.is_empty() {
            0
        } else {
            satisfied(p, &c.state, &c.trust).len()
        };
        Some(Key {
            c,
            propagated,
            score: boost(relevance, boosts),
            hops,
        })
    }

    /// Step 6's rank order.
    pub fn order(a: &Key, b: &Key) -> std::cmp::Ordering {
        rank_cmp(
            &RankKey {
                score: a.score,
                current: &*a.c.state == "current",
                hops: a.hops,
                id: &a.c.id,
            },
            &RankKey {
                score: b.score,
                current: &*b.c.state == "current",
                hops: b.hops,
                id: &b.c.id,
            },
        )
    }
}

/// What packing the ranked objects gives: the items and their explanation entries, the
/// objects left out for the budget, and the tokens used.
pub(crate) struct Packed<'a> {
    items: Vec<Item>,
    explained: Vec<Value>,
    over_budget: Vec<&'a Candidate>,
    used: u64,
}

impl<'a> Packed<'a> {
    /// The decisions, with `rejected` (before ranking, and for MAX OBJECTS) and the objects
    /// left out for the budget as the rejected, sorted by object id; the counts are the
    /// caller's.
    /// The decisions with the rejected counted, not listed: `counted` per reason (indexed as
    /// [`Reason::ALL`]) before the budget's.
    pub fn counted(self, mut counted: [u64; Reason::ALL.len()]) -> Decisions {
        counted[Reason::Budget as usize] += self.over_budget.len() as u64;
        Decisions {
            items: self.items,
            explained: self.explained,
            counted: Some(counted),
            used: self.used,
            ..Default::default()
        }
    }

    pub fn decisions(self, mut rejected: Vec<(&'a str, i64, Reason)>) -> Decisions {
        rejected.extend(
            self.over_budget
                .iter()
                .map(|c| (c.id.as_str(), c.revision, Reason::Budget)),
        );
        sort_by_id(&mut rejected, |r| r.0);
        Decisions {
            items: self.items,
            explained: self.explained,
            rejected: rejected
                .into_iter()
                .map(|(id, rev, r)| (object_uri(id, rev), r))
                .collect(),
            used: self.used,
            ..Default::default()
        }
    }
}

/// The ranked objects (`keys`, in rank order, at most MAX OBJECTS) packed: their reasons
/// (`why`, with the expansion path from `reached`; `revision_of` gives an eligible object's
/// selected revision), then both packing passes over each one's eligible representations.
pub(crate) fn pack_ranked<'a>(
    p: &PackParams,
    keys: Vec<Key<'a>>,
    reached: &Expansion,
    revision_of: &dyn Fn(&str) -> Option<i64>,
) -> Packed<'a> {
    let preferred_rep = p.prefer.iter().find_map(|p| match p {
        PreferItem::Representation(r) => Some(r.as_str()),
        _ => None,
    });
    struct Ranked<'a> {
        c: &'a Candidate,
        propagated: i64,
        score: i64,
        path: Vec<String>,
        why: Vec<Value>,
        boosts: Vec<String>,
    }
    let uri_of = |node: &str| -> String {
        match node.strip_prefix("object:") {
            Some(id) => revision_of(id)
                .map(|rev| object_uri(id, rev))
                .unwrap_or_else(|| format!("object://{id}")),
            // An entity: `entity_type:entity_id`.
            None => node.to_string(),
        }
    };
    let ranked: Vec<Ranked> = keys
        .into_iter()
        .map(|k| {
            let c = k.c;
            let mut why = Vec::new();
            if c.lexical > 0 {
                why.push(json!({"lexical_match": {"terms": c.terms(&p.terms)}}));
            }
            let path = match reached.reached(&c.id) {
                Some(r) if r.score > c.lexical => {
                    let from = match revision_of(&r.from) {
                        Some(rev) => object_uri(&r.from, rev),
                        // The subject entity of CONTEXT FOR entity(…), as `type:id`.
                        None => r.from.clone(),
                    };
                    why.push(
                        json!({"graph_expansion": {"from": from, "via": r.via, "hops": r.hops}}),
                    );
                    r.path.iter().map(|n| uri_of(n)).collect()
                }
                _ => vec![object_uri(&c.id, c.revision)],
            };
            let boosts = satisfied(p, &c.state, &c.trust);
            for term in &boosts {
                why.push(json!({"preferred": {"term": term}}));
            }
            Ranked {
                c,
                propagated: k.propagated,
                score: k.score,
                path,
                why,
                boosts,
            }
        })
        .collect();
    // Packing over each object's eligible representations, sorted by name.
    let reps_of: Vec<Vec<&select::Rep>> = ranked
        .iter()
        .map(|r| {
            let mut v: Vec<&select::Rep> = r.c.reps.iter().filter(|x| x.eligible()).collect();
            v.sort_by(|a, b| select::utf16_cmp(&a.name, &b.name));
            v
        })
        .collect();
    let sizes: Vec<Vec<(&str, i64)>> = reps_of
        .iter()
        .map(|v| v.iter().map(|r| (&*r.name, r.tokens)).collect())
        .collect();
    // COMPRESS: an object for which nothing fits gets its preferred (else largest)
    // representation's task-relevant sentences, within what is left.
    let mut compressed: HashMap<usize, (usize, String, f64)> = HashMap::new();
    let mut compressor = |k: usize, left: i64| -> Option<i64> {
        if !p.compress {
            return None;
        }
        let reps = &reps_of[k];
        let idx = preferred_rep
            .and_then(|name| reps.iter().position(|r| &*r.name == name))
            .or_else(|| {
                (0..reps.len()).max_by(|&a, &b| {
                    reps[a]
                        .tokens
                        .cmp(&reps[b].tokens)
                        .then_with(|| select::utf16_cmp(&reps[b].name, &reps[a].name))
                })
            })?;
        let text = reps[idx].content.as_deref()?;
        let (out, preservation) = packing::compress_text(text, &p.terms, left, p.estimator)?;
        let tokens = p.estimator.count(&out);
        compressed.insert(k, (idx, out, preservation));
        Some(tokens)
    };
    let (chosen, used) =
        packing::pack_compressing(&sizes, p.budget as i64, preferred_rep, &mut compressor);

    let mut items = Vec::new();
    let mut explained = Vec::new();
    let mut over_budget = Vec::new();
    for (k, ((r, reps), pick)) in ranked.iter().zip(&reps_of).zip(&chosen).enumerate() {
        let (i, squeezed) = match pick {
            packing::Choice::Whole(i) => (*i, None),
            packing::Choice::Compressed(_) => match compressed.remove(&k) {
                Some((i, text, preservation)) => (i, Some((text, preservation))),
                None => continue,
            },
            packing::Choice::Left => {
                over_budget.push(r.c);
                continue;
            }
        };
        let rep = reps[i];
        let mut roles: Vec<String> = rep.roles.iter().map(|r| r.to_string()).collect();
        roles.sort();
        roles.dedup();
        let item = Item {
            object: object_uri(&r.c.id, r.c.revision),
            representation: rep.name.to_string(),
            media_type: rep.media_type.to_string(),
            tokens: rep.tokens,
            estimator: rep.estimator.to_string(),
            score: r.score,
            why: r.why.clone(),
            path: r.path.clone(),
            state: r.c.state.to_string(),
            origin: r.c.origin.to_string(),
            trust: r.c.trust.to_string(),
            validation: r.c.validation.to_string(),
            roles,
            content: None,
            content_ref: rep.content_ref.clone(),
            content_hash: rep.content_hash.clone(),
            compression: None,
            unknown: Default::default(),
        };
        let item = match squeezed {
            None => item,
            Some((text, preservation)) => Item {
                tokens: p.estimator.count(&text),
                estimator: p.estimator.name().into(),
                content_hash: hex::encode(Sha256::digest(text.as_bytes())),
                compression: Some(Compression {
                    preservation,
                    original_tokens: rep.tokens,
                    original_content_hash: rep.content_hash.clone(),
                    original_chars: rep
                        .content
                        .as_deref()
                        .map_or(0, |c| c.chars().count() as u64),
                }),
                content: Some(text),
                ..item
            },
        };
        explained.push(explained_item(
            &item,
            [
                ("terms", json!(r.c.terms(&p.terms))),
                (
                    "scored_by",
                    json!(if r.c.scanned { "scan" } else { "index" }),
                ),
                (
                    "score_breakdown",
                    json!({"lexical": r.c.lexical, "propagated": r.propagated, "boosts": r.boosts}),
                ),
            ],
        ));
        items.push(item);
    }

    Packed {
        items,
        explained,
        over_budget,
        used: used as u64,
    }
}

/// An item's EXPLAIN CONTEXT entry: the item without its content, plus `extra` fields.
pub(crate) fn explained_item<const N: usize>(item: &Item, extra: [(&str, Value); N]) -> Value {
    let mut e = serde_json::to_value(Item {
        content: None,
        ..item.clone()
    })
    .unwrap_or(Value::Null);
    if let Value::Object(m) = &mut e {
        for (k, v) in extra {
            m.insert(k.into(), v);
        }
    }
    e
}

fn trust_at_least(trust: &str, level: TrustLevel) -> bool {
    const ORDER: [&str; 5] = [
        "untrusted",
        "unknown",
        "inferred",
        "verified",
        "authoritative",
    ];
    let want = match level {
        TrustLevel::Untrusted => 0,
        TrustLevel::Unknown => 1,
        TrustLevel::Inferred => 2,
        TrustLevel::Verified => 3,
        TrustLevel::Authoritative => 4,
    };
    ORDER
        .iter()
        .position(|t| *t == trust)
        .is_some_and(|i| i >= want)
}
