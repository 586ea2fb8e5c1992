//! The bundle and its explanation assembled from the packer's decisions, with WITH EVIDENCE's
//! graph of the selected revisions.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{Value, json};

use signalql_udfs::scalar::lexical::SCORER;

use super::bundle::{
    Budget, Bundle, BundleMetadata, Explanation, Item, Rejection, address, object_uri,
    parse_object_uri,
};
use super::pack::{DEFAULT_BUDGET, Decisions};
use super::select::Reason;
use crate::syntax::ast::ContextQuery;

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
        counted,
        used,
        considered,
        seeds,
        expanded,
        scanned,
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
    let counted = counted.unwrap_or_else(|| {
        let mut n = [0u64; Reason::ALL.len()];
        for (_, reason) in &rejected {
            n[*reason as usize] += 1;
        }
        n
    });
    for (reason, n) in Reason::ALL.iter().zip(counted) {
        *excluded.entry(reason.as_str().to_string()).or_default() += n;
    }
    let truncated = counted[Reason::MaxObjects as usize] + counted[Reason::Budget as usize] > 0;
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
        ("rejected", counted.iter().sum()),
        ("packed", items.len() as u64),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let explanation = Explanation {
        spec_version: crate::forms::context_forms(),
        context: id.clone(),
        canonical_query: canonical.clone(),
        as_of: as_of.clone(),
        computed_at: evaluated_at.clone(),
        scorer: SCORER.into(),
        estimators: estimators.clone(),
        budget: budget_out.clone(),
        phases,
        scoring: Some(super::bundle::Scoring {
            index: considered - scanned.len() as u64,
            scan: scanned.len() as u64,
            scanned,
        }),
        items: explained,
        rejected: rejected
            .into_iter()
            .map(|(object, reason)| Rejection { object, reason })
            .collect(),
        unknown: Default::default(),
    };
    let bundle = Bundle {
        spec_version: crate::forms::context_forms(),
        id,
        task: match &q.subject {
            Some(e) => e.to_string(),
            None => q.task.clone(),
        },
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
            skipped_files: Vec::new(),
            stored_in: None,
            not_stored: None,
            access_filtered: false,
            unknown: Default::default(),
        },
        unknown: Default::default(),
    };
    (bundle, explanation)
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
