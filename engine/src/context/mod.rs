//! `CONTEXT FOR "task"`: context bundles over the object tables (signalql-v0.5-context.md,
//! DESIGN.md §5, docs/context.md).
//!
//! `load` runs the DataFusion plans: the objects live at T at their latest revision, their
//! representations (secret or excluded content is never loaded), lexical-v1 scores from the
//! `lexical_weights` UDF over eligible content, and the graph edges. `select` decides eligibility,
//! expansion, boosts, rank and packing. This module assembles the bundle, its address and the
//! explanation the context store keeps for `EXPLAIN CONTEXT`.

pub(crate) mod build;
pub(crate) mod candidates;
pub(crate) mod exec;
pub(crate) mod find;
pub(crate) mod load;
pub mod render;
pub(crate) mod select;
pub(crate) mod store;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::syntax::ast::{ContextQuery, ExcludeItem, PreferItem, TrustLevel};
use select::{Candidate, Exclusions, RankKey, Reason, boost, expand, ineligible, rank_cmp};

pub use signalql_udfs::scalar::lexical::SCORER;

/// BUDGET when the query gives none (docs/context.md).
pub const DEFAULT_BUDGET: u64 = 8_000;
pub const DEFAULT_MAX_OBJECTS: u64 = 20;
pub const DEFAULT_MAX_DEPTH: u64 = 1;
pub const MAX_BUDGET: u64 = 10_000_000;
pub const MAX_MAX_OBJECTS: u64 = 500;
pub const MAX_MAX_DEPTH: u64 = 16;

/// The spec's limits on BUDGET, MAX OBJECTS and MAX DEPTH, as `limit_exceeded`.
pub fn check_limits(q: &ContextQuery) -> Result<()> {
    let check = |name: &str, v: Option<u64>, lo: u64, hi: u64| -> Result<()> {
        match v {
            Some(v) if v < lo || v > hi => Err(Error::limit(name, hi, v)
                .with_help(format!("{name} must be between {lo} and {hi}"))
                .at(q.span)),
            _ => Ok(()),
        }
    };
    check("budget_tokens", q.budget, 1, MAX_BUDGET)?;
    check("max_objects", q.max_objects, 1, MAX_MAX_OBJECTS)?;
    check("max_depth", q.max_depth, 0, MAX_MAX_DEPTH)
}

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
}

/// A context bundle, with the spec's field names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bundle {
    pub id: String,
    pub task: String,
    pub items: Vec<Item>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Vec<Value>>,
    pub metadata: BundleMetadata,
}

/// What `EXPLAIN CONTEXT` returns for a stored bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    pub context: String,
    pub canonical_query: String,
    pub as_of: Option<String>,
    pub computed_at: String,
    pub scorer: String,
    pub estimators: Vec<String>,
    pub budget: Budget,
    pub phases: BTreeMap<String, u64>,
    pub items: Vec<Value>,
    pub rejected: Vec<Rejection>,
}

/// One object left out of a bundle, and why (`{"object": …, "reason": …}` in JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    pub object: String,
    pub reason: Reason,
}

/// Drops `garbage` on a short-lived thread: freeing 100k candidates or rejections takes tens
/// of milliseconds an answer need not wait for. (If no thread can be started, it is dropped
/// here.)
pub(crate) fn free_in_background<T: Send + 'static>(garbage: T) {
    let _ = std::thread::Builder::new()
        .name("signalql-free".into())
        .spawn(move || drop(garbage));
}

/// The evidence rows of the selected revisions (WITH EVIDENCE).
#[derive(Debug, Clone, Default)]
pub struct Graph {
    /// Per object id: (relation, source id, source revision) of its derivations.
    pub derivations: HashMap<String, Vec<(String, String, i64)>>,
    /// Per object id: (entity_type, entity_id, relation) of its links.
    pub links: HashMap<String, Vec<(String, String, String)>>,
    /// Latest revision (as of T) of every object, live or not, for the evidence's link state.
    pub latest: HashMap<String, i64>,
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
            let (o, r) = parse_object_uri(&i.object).unwrap_or(("", 0));
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
    /// MAX AGE: revisions created before this instant (µs) are out.
    pub min_created: Option<i64>,
    /// COMPRESS, and the task's lexical-v1 terms it keeps sentences for.
    pub compress: bool,
    pub terms: Vec<String>,
}

impl PackParams {
    /// The parameters of `q` evaluated at `t` (µs).
    pub fn of(q: &ContextQuery, t: i64) -> Result<Self> {
        Ok(PackParams {
            budget: q.budget.unwrap_or(DEFAULT_BUDGET),
            max_objects: q.max_objects.unwrap_or(DEFAULT_MAX_OBJECTS),
            max_depth: q.max_depth.unwrap_or(DEFAULT_MAX_DEPTH) as u32,
            exclude_untrusted: q.exclude.contains(&ExcludeItem::Untrusted),
            exclude_stale: q.exclude.contains(&ExcludeItem::Stale),
            prefer: q.prefer.clone(),
            project: q.project.clone(),
            min_created: match &q.max_age {
                Some(d) => Some(t - crate::lower::time::duration_seconds(d)? * 1_000_000),
                None => None,
            },
            compress: q.compress,
            terms: signalql_udfs::scalar::lexical::terms(&q.task),
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
    pub used: u64,
    pub considered: u64,
    pub seeds: u64,
    pub expanded: u64,
}

/// Eligibility, expansion, boosts, rank, MAX OBJECTS and both packing passes.
pub fn decide(p: &PackParams, candidates: &[Candidate], edges: &[select::Edge]) -> Decisions {
    let budget = p.budget;
    let max_objects = p.max_objects as usize;
    let max_depth = p.max_depth;
    let ex = Exclusions {
        untrusted: p.exclude_untrusted,
        stale: p.exclude_stale,
    };
    let preferred_rep = p.prefer.iter().find_map(|p| match p {
        PreferItem::Representation(r) => Some(r.as_str()),
        _ => None,
    });
    let mut rejected: Vec<(String, Reason)> = Vec::new();
    let mut eligible: datafusion::common::HashMap<&str, &Candidate> =
        datafusion::common::HashMap::new();
    for c in candidates {
        match ineligible(c, ex) {
            Some(r) => rejected.push((object_uri(&c.id, c.revision), r)),
            None => {
                eligible.insert(c.id.as_str(), c);
            }
        }
    }
    let seeds: Vec<(String, i64)> = eligible
        .values()
        .filter(|c| c.lexical > 0)
        .map(|c| (c.id.clone(), c.lexical))
        .collect();
    let passable = |id: &str| eligible.contains_key(id);
    let reached = expand(&seeds, edges, max_depth, &passable);

    // Relevance, boosts and the rank key of every relevant eligible object; the details (why,
    // path) only for those MAX OBJECTS keeps.
    let satisfied = |c: &Candidate| -> Vec<String> {
        let mut terms = Vec::new();
        for pr in &p.prefer {
            let (ok, term) = match pr {
                PreferItem::Current => (&*c.state == "current", "CURRENT".to_string()),
                PreferItem::Trust(level) => (trust_at_least(&c.trust, *level), pr.to_string()),
                PreferItem::Representation(_) => (false, String::new()),
            };
            if ok {
                terms.push(term);
            }
        }
        terms
    };
    struct Key<'a> {
        c: &'a Candidate,
        propagated: i64,
        score: i64,
        hops: u32,
    }
    let mut keys: Vec<Key> = Vec::new();
    for c in eligible.values() {
        let (propagated, hops) = reached.score_hops(&c.id).unwrap_or((0, 0));
        let relevance = c.lexical.max(propagated);
        if relevance == 0 {
            continue;
        }
        let hops = if propagated > c.lexical { hops } else { 0 };
        let boosts = if p.prefer.is_empty() {
            0
        } else {
            satisfied(c).len()
        };
        keys.push(Key {
            c,
            propagated,
            score: boost(relevance, boosts),
            hops,
        });
    }
    let order = |a: &Key, b: &Key| {
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
    };
    // Only the first MAX OBJECTS need an order (the rank is total: ids are unique); the rest
    // are rejected, and the rejections are sorted by object URI below.
    if keys.len() > max_objects {
        keys.select_nth_unstable_by(max_objects, order);
    }
    let cut = keys.len().min(max_objects);
    keys[..cut].sort_by(order);
    let expanded = keys.iter().filter(|k| k.propagated > k.c.lexical).count() as u64;
    for k in keys.iter().skip(max_objects) {
        rejected.push((object_uri(&k.c.id, k.c.revision), Reason::MaxObjects));
    }
    keys.truncate(max_objects);

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
            Some(id) => eligible
                .get(id)
                .map(|c| object_uri(id, c.revision))
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
                    let from = eligible
                        .get(r.from.as_str())
                        .map(|s| object_uri(&s.id, s.revision))
                        .unwrap_or_default();
                    why.push(
                        json!({"graph_expansion": {"from": from, "via": r.via, "hops": r.hops}}),
                    );
                    r.path.iter().map(|n| uri_of(n)).collect()
                }
                _ => vec![object_uri(&c.id, c.revision)],
            };
            let boosts = satisfied(c);
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
        let (out, preservation) = select::compress_text(text, &p.terms, left)?;
        let tokens = select::chars_div_4(&out);
        compressed.insert(k, (idx, out, preservation));
        Some(tokens)
    };
    let (chosen, used) =
        select::pack_compressing(&sizes, budget as i64, preferred_rep, &mut compressor);

    let mut items = Vec::new();
    let mut explained = Vec::new();
    for (k, ((r, reps), pick)) in ranked.iter().zip(&reps_of).zip(&chosen).enumerate() {
        let (i, squeezed) = match pick {
            select::Choice::Whole(i) => (*i, None),
            select::Choice::Compressed(_) => match compressed.remove(&k) {
                Some((i, text, preservation)) => (i, Some((text, preservation))),
                None => continue,
            },
            select::Choice::Left => {
                rejected.push((object_uri(&r.c.id, r.c.revision), Reason::Budget));
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
        };
        let item = match squeezed {
            None => item,
            Some((text, preservation)) => Item {
                tokens: select::chars_div_4(&text),
                estimator: select::CHARS_DIV_4.into(),
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
        let mut e = serde_json::to_value(Item {
            content: None,
            ..item.clone()
        })
        .unwrap_or(Value::Null);
        if let Value::Object(m) = &mut e {
            m.insert("terms".into(), json!(r.c.terms(&p.terms)));
            m.insert(
                "score_breakdown".into(),
                json!({"lexical": r.c.lexical, "propagated": r.propagated, "boosts": r.boosts}),
            );
        }
        explained.push(e);
        items.push(item);
    }

    rejected.sort_by(|a, b| select::utf16_cmp(&a.0, &b.0));
    Decisions {
        items,
        explained,
        rejected,
        used: used as u64,
        considered: candidates.len() as u64,
        seeds: seeds.len() as u64,
        expanded,
    }
}

/// The bundle and its explanation from the packer's decisions (items without content; the
/// engine reads the packed content afterwards). `graph` is needed only WITH EVIDENCE.
pub fn assemble(
    q: &ContextQuery,
    as_of: Option<String>,
    evaluated_at: String,
    d: Decisions,
    graph: Option<&Graph>,
) -> (Bundle, Explanation) {
    let canonical = q.to_string();
    let budget = q.budget.unwrap_or(DEFAULT_BUDGET);
    let Decisions {
        items,
        explained,
        rejected,
        used,
        considered,
        seeds,
        expanded,
    } = d;
    let estimators: Vec<String> = items
        .iter()
        .map(|i| i.estimator.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let id = address(&canonical, as_of.as_deref(), &estimators, &items);
    let mut excluded: BTreeMap<String, u64> = Reason::ALL
        .iter()
        .map(|r| (r.as_str().to_string(), 0))
        .collect();
    for (_, reason) in &rejected {
        *excluded.entry(reason.as_str().to_string()).or_default() += 1;
    }
    let truncated = rejected
        .iter()
        .any(|(_, r)| matches!(r, Reason::MaxObjects | Reason::Budget));
    let evidence = match (q.with_evidence, graph) {
        (true, Some(g)) => Some(evidence(&items, g)),
        (true, None) => Some(evidence(&items, &Graph::default())),
        _ => None,
    };
    let budget_out = Budget {
        limit: budget,
        used,
    };
    let phases: BTreeMap<String, u64> = [
        ("candidates", considered),
        ("seeds", seeds),
        ("expanded", expanded),
        ("rejected", rejected.len() as u64),
        ("packed", items.len() as u64),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let explanation = Explanation {
        context: id.clone(),
        canonical_query: canonical.clone(),
        as_of: as_of.clone(),
        computed_at: evaluated_at.clone(),
        scorer: SCORER.into(),
        estimators: estimators.clone(),
        budget: budget_out.clone(),
        phases,
        items: explained,
        rejected: rejected
            .into_iter()
            .map(|(object, reason)| Rejection { object, reason })
            .collect(),
    };
    let bundle = Bundle {
        id,
        task: q.task.clone(),
        items,
        evidence,
        metadata: BundleMetadata {
            canonical_query: canonical,
            budget: budget_out,
            scorer: SCORER.into(),
            estimators,
            as_of,
            evaluated_at,
            considered,
            excluded,
            truncated,
            compression_ratio: None,
        },
    };
    (bundle, explanation)
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

/// WITH EVIDENCE: per item, the derivations recorded from its revision (with the source's
/// latest revision and whether the link is current) and the entities it is linked to.
fn evidence(items: &[Item], graph: &Graph) -> Vec<Value> {
    items
        .iter()
        .map(|i| {
            let id = parse_object_uri(&i.object).map_or("", |(id, _)| id);
            let derivations: Vec<Value> = graph
                .derivations
                .get(id)
                .into_iter()
                .flatten()
                .map(|(rel, src, rev)| {
                    let latest = graph.latest.get(src).copied();
                    let state = match latest {
                        Some(l) if l == *rev => "current",
                        Some(_) => "stale",
                        None => "missing",
                    };
                    json!({"relation": rel, "source": object_uri(src, *rev), "source_latest_revision": latest, "link_state": state})
                })
                .collect();
            let entities: Vec<Value> = graph
                .links
                .get(id)
                .into_iter()
                .flatten()
                .map(|(t, e, rel)| json!({"entity_type": t, "entity_id": e, "relation": rel}))
                .collect();
            json!({"object": i.object, "derivations": derivations, "entities": entities})
        })
        .collect()
}
