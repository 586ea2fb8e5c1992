//! The resident context index in the engine (docs/index.md, "The resident context index"):
//! the [`Resident`] holder a long-running engine keeps (the servers, the shell, `signalql
//! bench`, an embedded [`Engine`](crate::Engine)), which builds a
//! [`Generation`] of the object tables as the catalog opens them and keeps it while their
//! files are unchanged, and the FIND OBJECT plans answered from it.
//!
//! A generation stands for the tables only when the Parquet plan would read them as they are:
//! each of `objects`, `revisions` and `representations` a folder of Parquet files with a
//! fingerprint, no mapping and no caller restriction, and `T` at or after the generation's
//! horizon. Otherwise the statement keeps the Parquet plan.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::provider_as_source;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, TableType, col};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{DataFrame, SessionContext};
use signalql_catalog::TableInfo;
use signalql_catalog::objects::resident::{
    Builder, Find, Generation, OBJECT_COLUMNS, REPRESENTATION_COLUMNS, REVISION_COLUMNS,
};
use signalql_catalog::objects::{OBJECTS, REPRESENTATIONS, REVISIONS};
use tokio::sync::Mutex;

use crate::catalog::{Catalog, scan};
use crate::error::Result;
use crate::execute::Executor;
use crate::lower::project;

/// The name FIND's plan gives the generation's rows (EXPLAIN shows it).
pub const RESIDENT_OBJECTS: &str = "resident_objects";

/// The generation a long-running engine keeps, with the fingerprints of the tables it was
/// built from. Shared by the engines of one server (`EngineOptions::resident`).
#[derive(Debug, Default)]
pub struct Resident {
    held: Mutex<Option<Held>>,
}

#[derive(Debug)]
struct Held {
    /// The fingerprints of `objects`, `revisions` and `representations`.
    key: Vec<String>,
    /// `None`: the tables cannot be held (see [`Builder::new`]); not tried again while they
    /// are unchanged.
    generation: Option<Arc<Generation>>,
}

impl Resident {
    /// The generation of the object tables as `catalog` opens them now: the one held while
    /// their files are unchanged, else built (once, however many statements ask at once).
    /// `None` when it cannot stand for them.
    pub(crate) async fn generation(
        &self,
        ctx: &SessionContext,
        catalog: &dyn Catalog,
        exec: &Executor,
    ) -> Result<Option<Arc<Generation>>> {
        let mut tables = Vec::with_capacity(3);
        let mut key = Vec::with_capacity(3);
        for (name, columns) in [
            (OBJECTS, &OBJECT_COLUMNS[..]),
            (REVISIONS, &REVISION_COLUMNS[..]),
            (REPRESENTATIONS, &REPRESENTATION_COLUMNS[..]),
        ] {
            let t = catalog.table(ctx, name).await?;
            let plain = t.view.is_none() && t.restriction.is_none() && t.is_folder();
            let has = |c: &&str| t.schema.field_with_name(c).is_ok();
            let (true, Some(fingerprint), true) =
                (plain, t.fingerprint.clone(), columns.iter().all(has))
            else {
                return Ok(None);
            };
            key.push(fingerprint);
            tables.push((t, columns));
        }
        let mut held = self.held.lock().await;
        if let Some(h) = held.as_ref()
            && h.key == key
        {
            return Ok(h.generation.clone());
        }
        let generation = build(exec, &tables).await?.map(Arc::new);
        *held = Some(Held {
            key,
            generation: generation.clone(),
        });
        Ok(generation)
    }

    /// The memory of the generation held (0 when none).
    pub async fn memory_bytes(&self) -> usize {
        let held = self.held.lock().await;
        held.as_ref()
            .and_then(|h| h.generation.as_ref())
            .map_or(0, |g| g.memory_bytes())
    }
}

/// `columns` of the table `t`, read as the Parquet plan reads it.
fn read(t: &TableInfo, columns: &[&str]) -> Result<LogicalPlan> {
    let b = scan(t, &t.name, vec![])?;
    Ok(project(b, columns.iter().map(|c| col(*c)).collect())?.build()?)
}

/// Every row of `plan`, in one batch.
async fn collect_one(exec: &Executor, plan: &LogicalPlan) -> Result<RecordBatch> {
    let mut batches = Vec::new();
    exec.for_each_batch(plan, |b| {
        batches.push(b.clone());
        Ok(())
    })
    .await?;
    let schema: SchemaRef = Arc::new(plan.schema().as_arrow().clone());
    Ok(concat_batches(&schema, &batches)?)
}

/// A generation of `tables` (objects, revisions, representations), `None` when it cannot
/// stand for them. Representations are read batch by batch: only their terms are kept.
async fn build(exec: &Executor, tables: &[(TableInfo, &[&str])]) -> Result<Option<Generation>> {
    let [(objects, oc), (revisions, rc), (reps, pc)] = tables else {
        return Ok(None);
    };
    let objects = collect_one(exec, &read(objects, oc)?).await?;
    let revisions = collect_one(exec, &read(revisions, rc)?).await?;
    let Some(mut builder) = Builder::new(&objects, &revisions)? else {
        return Ok(None);
    };
    let mut standing = true;
    exec.for_each_batch(&read(reps, pc)?, |b| {
        standing = standing && builder.add_representations(b)?;
        Ok(())
    })
    .await?;
    Ok(standing.then(|| builder.finish()))
}

/// FIND OBJECT's rows from a generation, as a table: the top-k is computed when the scan is
/// planned, so a cached plan answers from the generation it was made with (the plan cache
/// checks the tables' files are unchanged).
#[derive(Debug)]
struct FindScan {
    generation: Arc<Generation>,
    terms: Option<Vec<String>>,
    kind: Option<String>,
    t: i64,
    fetch: Option<usize>,
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for FindScan {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let batch = self
            .generation
            .find(&Find {
                terms: self.terms.as_deref(),
                kind: self.kind.as_deref(),
                t: self.t,
                fetch: self.fetch,
            })
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            Arc::clone(&self.schema),
            projection.cloned(),
        )?)
    }
}

/// FIND OBJECT's candidates from `generation` as a data frame of `ctx`: the objects live at
/// `t` (of `kind`), with `about` those scoring above 0 with their `score`; the first `fetch`
/// in the answer's order when given (the caller still sorts and limits).
pub(crate) fn find_frame(
    ctx: &SessionContext,
    generation: Arc<Generation>,
    about: Option<Vec<String>>,
    kind: Option<&str>,
    t: i64,
    fetch: Option<usize>,
) -> Result<DataFrame> {
    let schema = generation.find_schema(about.is_some());
    let scan = FindScan {
        generation,
        terms: about,
        kind: kind.map(str::to_string),
        t,
        fetch,
        schema,
    };
    let plan =
        LogicalPlanBuilder::scan(RESIDENT_OBJECTS, provider_as_source(Arc::new(scan)), None)?
            .build()?;
    Ok(DataFrame::new(ctx.state(), plan))
}
