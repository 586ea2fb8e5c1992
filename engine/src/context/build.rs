//! `CONTEXT FOR`, end to end: the packing plan ([`plan`]), run on the engine's one execution
//! path; then the evidence graph (WITH EVIDENCE), the bundle assembled from the decisions, the
//! packed representations' content read, the compression ratio (COMPRESS), and the record kept
//! in the dataset's context store. Every read goes through the [`Executor`].

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use datafusion::logical_expr::LogicalPlan;

use super::pack::Decisions;
use super::resident::Resident;
use super::select::Reason;
use super::subject::{self, Subject};
use super::{
    Bundle, PackParams, assemble, check_limits, exec, free_in_background, load, reads, store,
};
use super::{parse_object_uri, store::Record};
use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::execute::Executor;
use crate::lower::time::{micros, parse_timestamp, rfc3339};
use crate::syntax::ast::ContextQuery;
use signalql_udfs::scalar::token_estimate::Estimator;

/// What a CONTEXT FOR is evaluated with: the query (with the budget the limit caps), T,
/// the packer's parameters and, for CONTEXT FOR entity(…), the entity's record item with
/// whether it fits the budget (the packer then has what is left).
struct Prepared {
    q: ContextQuery,
    t: DateTime<Utc>,
    params: PackParams,
    subject: Option<(Subject, bool)>,
}

async fn prepare(
    catalog: &dyn Catalog,
    exec: &Executor,
    q: &ContextQuery,
    now: DateTime<Utc>,
) -> Result<Prepared> {
    let max_budget = exec.limits().max_budget_tokens;
    check_limits(q, max_budget)?;
    if let (Some(access), Some(project)) = (catalog.access(), &q.project) {
        access.check_project(project).map_err(|e| e.at(q.span))?;
    }
    // Without BUDGET, the default budget, or the limit when it is lower (then the canonical
    // query says so).
    let q = if q.budget.is_none() && max_budget < super::DEFAULT_BUDGET {
        ContextQuery {
            budget: Some(max_budget),
            ..q.clone()
        }
    } else {
        q.clone()
    };
    let t = match &q.as_of {
        Some(ts) => parse_timestamp(ts)?,
        None => now,
    };
    let mut params = PackParams::of(&q, micros(t), dataset_estimator(catalog))?;
    let subject = match &q.subject {
        Some(e) => subject::subject(exec, catalog, e, micros(t), params.estimator)
            .await?
            .map(|s| {
                let tokens = s.item.tokens.max(0) as u64;
                let fits = tokens <= params.budget;
                if fits {
                    params.budget -= tokens;
                }
                (s, fits)
            }),
        None => None,
    };
    Ok(Prepared {
        q,
        t,
        params,
        subject,
    })
}

/// The logical plan behind `CONTEXT FOR` evaluated at `now` (opening the object tables;
/// nothing is run): one plan whose result is the packing decisions. Also returns the AS OF
/// time and, for CONTEXT FOR entity(…), the entity's record item with whether it fits the
/// budget (the packer then has what is left).
pub async fn plan(
    catalog: &dyn Catalog,
    exec: &Executor,
    q: &ContextQuery,
    now: DateTime<Utc>,
) -> Result<(LogicalPlan, DateTime<Utc>, Option<(Subject, bool)>)> {
    let p = prepare(catalog, exec, q, now).await?;
    let plan = load::plan(exec.session(), catalog, &p.q, p.t, &p.params).await?;
    Ok((plan, p.t, p.subject))
}

/// The packing decisions: from the resident context index where its generation stands for
/// the tables at T and can answer the query exactly (context/from_index.rs), else from the
/// Parquet plan run through the packer operator. Also returns which answered.
async fn decisions(
    catalog: &dyn Catalog,
    exec: &Executor,
    resident: Option<&Resident>,
    p: &Prepared,
) -> Result<(Decisions, &'static str)> {
    let t = micros(p.t);
    if let Some(r) = resident
        && let Some(g) = r.generation(exec.session(), catalog, exec).await?
        && g.covers(t)
        && let Some(d) = super::from_index::decide(&g, &p.params, &p.q, t)?
    {
        r.answered_context();
        return Ok((d, "resident"));
    }
    let plan = load::plan(exec.session(), catalog, &p.q, p.t, &p.params).await?;
    Ok((exec::decode(&exec.run(&plan).await?.batches)?, "parquet"))
}

/// The entity record first (it is what the bundle is about: hops 0), or the last of the
/// rejected (after the objects, by id) for the budget when it does not fit.
fn with_subject(d: &mut Decisions, subject: Option<(Subject, bool)>) {
    let Some((s, fits)) = subject else { return };
    if fits {
        d.used += s.item.tokens.max(0) as u64;
        d.items.insert(0, s.item);
        d.explained.insert(0, s.explained);
    } else {
        d.rejected.push((s.item.object, Reason::Budget));
    }
}

/// Compute the bundle for `CONTEXT FOR "task" …` at `now` and keep it in the context store
/// (the first record for an address wins; the returned bundle is the one computed now).
pub async fn bundle(
    catalog: &dyn Catalog,
    exec: &Executor,
    resident: Option<&Resident>,
    q: &ContextQuery,
    now: DateTime<Utc>,
) -> Result<Bundle> {
    let as_of = q.as_of.as_ref().map(|ts| ts.0.clone());
    let prepared = crate::record::staged("bind", prepare(catalog, exec, q, now)).await?;
    let (mut decisions, path) = decisions(catalog, exec, resident, &prepared).await?;
    let (t, subject) = (prepared.t, prepared.subject);
    with_subject(&mut decisions, subject);
    let packing = std::time::Instant::now();
    let graph = if q.with_evidence {
        let selected: HashMap<String, i64> = decisions
            .items
            .iter()
            .filter_map(|i| {
                let (id, rev) = parse_object_uri(&i.object)?;
                Some((id.to_string(), rev))
            })
            .collect();
        Some(reads::graph(exec, catalog, &selected, micros(t)).await?)
    } else {
        None
    };
    let (mut bundle, explanation) = assemble(q, as_of, rfc3339(now), decisions, graph.as_ref());
    fill_content(catalog, exec, &mut bundle).await?;
    if q.compress {
        bundle.metadata.compression_ratio = Some(compression_ratio(&bundle));
    }
    let mut attrs = serde_json::Map::new();
    attrs.insert("items".into(), bundle.items.len().into());
    attrs.insert("tokens".into(), bundle.metadata.budget.used.into());
    attrs.insert("decided_from".into(), path.into());
    crate::record::stage("pack", packing, attrs);
    let store = catalog.dataset().context_store();
    bundle.metadata.stored_in = Some(store.display_of("contexts/"));
    let mut record = Record {
        spec_version: "0.5".into(),
        bundle,
        explanation,
        unknown: Default::default(),
    };
    // A store signalql cannot write (a read-only root or lake) still answers: the bundle is
    // returned, and says it was not stored.
    if let Err(e) = store::put(store, &record) {
        record.bundle.metadata.stored_in = None;
        record.bundle.metadata.not_stored = Some(format!(
            "{e}; set [context] store in signalql.toml to a writable folder or S3 prefix \
             to keep bundles for EXPLAIN CONTEXT"
        ));
    }
    free_in_background(record.explanation);
    Ok(record.bundle)
}

/// Read the content of the packed items that carry neither content nor a reference (only the
/// packed representations' content is read, after packing).
async fn fill_content(catalog: &dyn Catalog, exec: &Executor, bundle: &mut Bundle) -> Result<()> {
    let wanted = |i: &&mut super::Item| i.content.is_none() && i.content_ref.is_none();
    let keys: Vec<(String, i64, String)> = bundle
        .items
        .iter_mut()
        .filter(wanted)
        .filter_map(|i| {
            let (id, rev) = parse_object_uri(&i.object)?;
            Some((id.to_string(), rev, i.representation.clone()))
        })
        .collect();
    let mut texts = reads::contents(exec, catalog, &keys).await?;
    for (item, key) in bundle.items.iter_mut().filter(wanted).zip(&keys) {
        item.content = Some(texts.remove(key).ok_or_else(|| {
            Error::io(format!(
                "the content of {} ({}) could not be read",
                item.object, item.representation
            ))
        })?);
    }
    Ok(())
}

/// Characters packed over the characters of the packed items before compression.
fn compression_ratio(bundle: &Bundle) -> f64 {
    let (mut used, mut full) = (0u64, 0u64);
    for item in &bundle.items {
        let n = item
            .content
            .as_deref()
            .map_or(0, |c| c.chars().count() as u64);
        used += n;
        full += item.compression.as_ref().map_or(n, |c| c.original_chars);
    }
    if full == 0 {
        1.0
    } else {
        used as f64 / full as f64
    }
}

/// The dataset's token estimator: `[context] estimator` of signalql.toml (checked when the
/// dataset was opened), else chars-div-4-v1.
fn dataset_estimator(catalog: &dyn Catalog) -> Estimator {
    let name = catalog.dataset().config().context.estimator.as_deref();
    name.and_then(Estimator::from_name).unwrap_or_default()
}
