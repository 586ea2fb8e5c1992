//! The one execution path: every plan the engine runs (analytics, funnels, DESCRIBE's scans,
//! FIND OBJECT, CONTEXT FOR's packing plan, content and evidence reads, the data span of a
//! bucketed query, entity-type checks) goes through [`Executor::run_in`], which applies the
//! timeout and the session's memory pool, maps their errors to `limit_exceeded`, and counts
//! what the scans read. The result-row cap of a lowered query is applied by
//! [`Executor::run_lowered`].

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::datasource::{MemTable, provider_as_source};
use datafusion::execution::SessionState;
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder};
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::{DataFrame, SessionContext};

use crate::error::{Error, ErrorKind, Result};
use crate::limits::Limits;
use crate::lower::{Lowered, Stage};

/// Runs plans in one session under one set of limits.
pub struct Executor {
    ctx: SessionContext,
    limits: Limits,
}

/// An executed plan: its batches, the physical plan that made them, and what its scans read.
pub struct Executed {
    pub batches: Vec<RecordBatch>,
    pub physical: Arc<dyn ExecutionPlan>,
    /// Rows and bytes read by the plan's scans.
    pub scanned: (u64, u64),
}

/// An executed lowered query, cut to its row cap.
pub struct Capped {
    pub executed: Executed,
    /// The rows the envelope shows (at most the cap).
    pub rows: usize,
    /// More rows than the cap were produced.
    pub truncated: bool,
}

impl Executor {
    pub fn new(ctx: SessionContext, limits: Limits) -> Self {
        Executor { ctx, limits }
    }

    pub fn session(&self) -> &SessionContext {
        &self.ctx
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Run `plan` in the engine's session.
    pub async fn run(&self, plan: &LogicalPlan) -> Result<Executed> {
        self.run_in(&self.ctx.state(), plan).await
    }

    /// The batches of a data frame, run in its own session state (a copy of the engine's with
    /// other settings, such as CONTEXT FOR's content lookup with filter pushdown; same runtime
    /// and pool).
    pub async fn collect(&self, frame: DataFrame) -> Result<Vec<RecordBatch>> {
        let (state, plan) = frame.into_parts();
        Ok(self.run_in(&state, &plan).await?.batches)
    }

    /// The one function that runs a plan: plans it physically, runs it under the timeout in
    /// the state's runtime (whose memory pool bounds it) and counts what its scans read. A
    /// timeout of 0 seconds leaves no time at all: every plan fails with the timeout error.
    pub async fn run_in(&self, state: &SessionState, plan: &LogicalPlan) -> Result<Executed> {
        let secs = self.limits.timeout_seconds;
        let timed_out = || {
            Error::limit("timeout_seconds", secs, secs + 1)
                .with_help("the query ran longer than the timeout; narrow the window or filter")
        };
        if secs == 0 {
            return Err(timed_out());
        }
        let physical = state.create_physical_plan(plan).await?;
        let task = state.task_ctx();
        let run = collect(Arc::clone(&physical), task);
        let batches = match tokio::time::timeout(Duration::from_secs(secs), run).await {
            Ok(r) => r.map_err(|e| self.fill_limits(Error::from(e)))?,
            Err(_) => return Err(timed_out()),
        };
        let scanned = scan_metrics(physical.as_ref());
        Ok(Executed {
            batches,
            physical,
            scanned,
        })
    }

    /// Run a lowered query (staged when it says so) and cut it to its row cap.
    pub async fn run_lowered(&self, lowered: &Lowered) -> Result<Capped> {
        let executed = match &lowered.staged {
            None => self.run(&lowered.plan).await?,
            Some(staged) => self.run_staged(staged.as_ref()).await?,
        };
        let total: usize = executed.batches.iter().map(|b| b.num_rows()).sum();
        let cap = lowered.row_cap.map_or(usize::MAX, |c| c as usize);
        Ok(Capped {
            executed,
            rows: total.min(cap),
            truncated: total > cap,
        })
    }

    /// Run a query split at its aggregate: the aggregate once, then the rest of the plan over
    /// its materialised result. What was scanned is the aggregate's scans.
    async fn run_staged(&self, staged: &dyn Stage) -> Result<Executed> {
        let aggregate = self.run(staged.aggregate()).await?;
        staged.check(&aggregate.batches, self.limits.max_groups)?;
        // The materialised aggregate is held in the session's memory pool while the rest runs.
        let bytes: usize = aggregate
            .batches
            .iter()
            .map(RecordBatch::get_array_memory_size)
            .sum();
        let pool = &self.ctx.runtime_env().memory_pool;
        let held = MemoryConsumer::new("staged aggregate").register(pool);
        held.try_grow(bytes)
            .map_err(|e| self.fill_limits(Error::from(e)))?;
        let table = MemTable::try_new(aggregate.physical.schema(), vec![aggregate.batches])?;
        let scan =
            LogicalPlanBuilder::scan("aggregate", provider_as_source(Arc::new(table)), None)?
                .build()?;
        let rest = staged.finish(scan)?;
        let mut executed = self.run(&rest.plan).await?;
        executed.scanned = aggregate.scanned;
        drop(held);
        Ok(executed)
    }

    /// A memory-pool error names the configured pool size.
    fn fill_limits(&self, mut err: Error) -> Error {
        if let ErrorKind::LimitExceeded { limit, max, value } = &mut err.kind
            && limit == "query_memory_bytes"
        {
            *max = self.limits.query_memory_bytes;
            *value = max.saturating_add(1);
        }
        err
    }
}

/// Rows and bytes read by the scans (the leaves) of an executed plan.
fn scan_metrics(plan: &dyn ExecutionPlan) -> (u64, u64) {
    if plan.children().is_empty() {
        return plan.metrics().map_or((0, 0), |m| {
            let rows = m.output_rows().unwrap_or(0) as u64;
            let bytes = m
                .sum_by_name("bytes_scanned")
                .map_or(0, |v| v.as_usize() as u64);
            (rows, bytes)
        });
    }
    plan.children()
        .iter()
        .map(|c| scan_metrics(c.as_ref()))
        .fold((0, 0), |(r, b), (r2, b2)| (r + r2, b + b2))
}
