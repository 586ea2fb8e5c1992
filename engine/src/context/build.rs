//! `CONTEXT FOR`, end to end: the packing plan ([`plan`]), run on the engine's one execution
//! path; then the evidence graph (WITH EVIDENCE), the bundle assembled from the decisions, the
//! packed representations' content read, the compression ratio (COMPRESS), and the record kept
//! in the dataset's context store. Every read goes through the [`Executor`].

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use datafusion::logical_expr::LogicalPlan;

use super::pack::Decisions;
use super::parse_object_uri;
use super::resident::{Resident, Standing};
use super::select::Reason;
use super::store::{Pin, Record};
use super::subject::{self, Subject};
use super::{
    Bundle, PackParams, assemble, check_limits, exec, free_in_background, load, reads, store,
};
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
/// Parquet plan run through the packer operator. Also returns which answered, and for an
/// answer from the index to a caller the policy does not restrict, the pin its rejected list
/// is recomputed at (the decisions then count the rejected instead of listing them).
async fn decisions(
    catalog: &dyn Catalog,
    exec: &Executor,
    resident: Option<&Resident>,
    p: &Prepared,
) -> Result<(Decisions, &'static str, Option<Pin>)> {
    let t = micros(p.t);
    if let Some(r) = resident
        && let Some((generation, g, standing)) = r.pinned(exec.session(), catalog, exec).await?
        && g.covers(t)
    {
        let lazy = catalog.access().is_none_or(|a| a.sees_everything());
        if let Some(d) = super::from_index::decide(&g, &p.params, &p.q, t, !lazy)? {
            r.answered_context();
            let pin = lazy.then(|| Pin {
                generation,
                position: standing.position,
                outside: standing.outside,
                t: p.t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                estimator: p.params.estimator.name().to_string(),
            });
            return Ok((d, "resident", pin));
        }
    }
    let plan = load::plan(exec.session(), catalog, &p.q, p.t, &p.params).await?;
    Ok((
        exec::decode(&exec.run(&plan).await?.batches)?,
        "parquet",
        None,
    ))
}

/// The explanation `record` keeps, with its rejected list recomputed at its pin when it has
/// one (DESIGN.md §5, "Scale"): the query is decided again at the pin's T with the rejected
/// listed, from the resident generation it was decided from while that is the tables' (the
/// fast path), else by the Parquet plan over the object tables as they stood at the pin's
/// commit position ([`AtPin`]). The recomputed items must give the stored address. When the
/// tables at the pin cannot be read again (files outside the commit log changed, or a file
/// of the pin was removed), the answer is `unknown_context`: the snapshot is gone.
/// `catalog` must read the tables as the bundle's caller did (unrestricted: only such
/// callers' bundles are pinned).
pub async fn explanation_at_pin(
    catalog: &dyn Catalog,
    exec: &Executor,
    resident: Option<&Resident>,
    record: Record,
) -> Result<super::Explanation> {
    let Some(pin) = &record.pin else {
        return Ok(record.explanation);
    };
    let address = record.bundle.id.as_str();
    let gone = |why: &str| {
        Error::new(
            crate::error::ErrorKind::UnknownContext,
            format!("the explanation of {address} cannot be recomputed: {why}"),
        )
        .with_help(
            "EXPLAIN CONTEXT recomputes a bundle's rejected list from the object tables as \
             they were when it was made; run the CONTEXT FOR query again for a bundle of the \
             tables as they are now",
        )
    };
    let q = match crate::syntax::parse(&record.explanation.canonical_query)? {
        crate::syntax::ast::Statement::ContextTask(q) => q,
        _ => return Err(gone("its stored query is not a CONTEXT FOR")),
    };
    let t = parse_timestamp(&crate::syntax::ast::Timestamp(pin.t.clone()))?;
    let held = match resident {
        Some(r) => r
            .pinned(exec.session(), catalog, exec)
            .await?
            .filter(|(generation, g, _)| *generation == pin.generation && g.covers(micros(t))),
        None => None,
    };
    let d = match held {
        Some((_, g, _)) => {
            let p = prepare(catalog, exec, &q, t).await?;
            super::from_index::decide(&g, &p.params, &p.q, micros(p.t), true)?
                .ok_or_else(|| gone("the index cannot decide its query"))?
        }
        None => {
            let at = AtPin::open(catalog, exec, pin)
                .await?
                .ok_or_else(|| gone("the object tables changed outside the commit log"))?;
            let p = prepare(&at, exec, &q, t).await?;
            let plan = load::plan(exec.session(), &at, &p.q, p.t, &p.params).await?;
            exec::decode(&exec.run(&plan).await?.batches)?
        }
    };
    let mut stored = record.explanation;
    let as_of = stored.as_of.clone();
    let (bundle, x) = assemble(&q, as_of, stored.computed_at.clone(), d, None);
    if bundle.id != address {
        return Err(gone(
            "the object tables at its commit position give other items (a file it was read from is gone)",
        ));
    }
    stored.rejected = x.rejected;
    Ok(stored)
}

/// The object tables as they stood at a pin: each one's files committed in sequence at or
/// before the pin's position, and its other files (outside the commit log, or committed
/// otherwise), which must be the ones the pin fingerprinted. Other tables as `inner` reads
/// them.
struct AtPin<'a> {
    inner: &'a dyn Catalog,
    commits: signalql_catalog::commit::Snapshot,
    position: u64,
}

const OBJECT_TABLES: [&str; 5] = {
    use signalql_catalog::objects::{DERIVATIONS, LINKS, OBJECTS, REPRESENTATIONS, REVISIONS};
    [OBJECTS, REVISIONS, REPRESENTATIONS, LINKS, DERIVATIONS]
};

impl<'a> AtPin<'a> {
    /// `None` when some object table's files outside the sequenced commits are not the pin's.
    async fn open(inner: &'a dyn Catalog, exec: &Executor, pin: &Pin) -> Result<Option<Self>> {
        let commits = signalql_catalog::commit::Snapshot::read(inner.dataset().root())
            .map_err(|e| Error::io(e.to_string()))?;
        let mut tables = Vec::with_capacity(OBJECT_TABLES.len());
        for name in OBJECT_TABLES {
            tables.extend(crate::catalog::optional_table(inner, exec.session(), name).await?);
        }
        if Standing::of(&commits, tables.iter()).outside != pin.outside {
            return Ok(None);
        }
        Ok(Some(AtPin {
            inner,
            commits,
            position: pin.position,
        }))
    }
}

#[async_trait::async_trait]
impl Catalog for AtPin<'_> {
    fn dataset(&self) -> &signalql_catalog::Dataset {
        self.inner.dataset()
    }

    fn access(&self) -> Option<&crate::access::Access> {
        self.inner.access()
    }

    fn unpoliced(&self) -> &dyn Catalog {
        self
    }

    async fn table(
        &self,
        ctx: &datafusion::prelude::SessionContext,
        name: &str,
    ) -> std::result::Result<signalql_catalog::TableInfo, signalql_catalog::DatasetError> {
        let t = self.inner.table(ctx, name).await?;
        if !OBJECT_TABLES.contains(&name) {
            return Ok(t);
        }
        let kept = |l: &str| self.commits.sequence(l).is_none_or(|s| s <= self.position);
        t.only_files(kept)
            .ok_or_else(|| signalql_catalog::DatasetError::MissingTable {
                root: self.inner.dataset().root().display_of(""),
                table: name.to_string(),
            })
    }
}

/// The entity record first (it is what the bundle is about: hops 0), or the last of the
/// rejected (after the objects, by id) for the budget when it does not fit.
fn with_subject(d: &mut Decisions, subject: Option<(Subject, bool)>) {
    let Some((s, fits)) = subject else { return };
    if fits {
        d.used += s.item.tokens.max(0) as u64;
        d.items.insert(0, s.item);
        d.explained.insert(0, s.explained);
    } else if let Some(counted) = d.counted.as_mut() {
        counted[Reason::Budget as usize] += 1;
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
    let (mut decisions, path, pin) = decisions(catalog, exec, resident, &prepared).await?;
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
        pin,
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
