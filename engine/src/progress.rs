//! What a running statement has read so far, for a caller that reports progress (the MCP
//! tools' `notifications/progress`, docs/runtime.md): the physical plans the statement has
//! started, whose scans' row counts DataFusion raises as they read. A statement run inside
//! [`watching`] has every plan [`Executor`](crate::execute::Executor) starts registered; any
//! other statement registers nothing and pays one failed task-local lookup per plan.

use std::future::Future;
use std::sync::{Arc, Mutex};

use datafusion::physical_plan::ExecutionPlan;

tokio::task_local! {
    static WATCHED: Arc<Watched>;
}

/// The plans a statement has started.
#[derive(Default)]
pub struct Watched {
    plans: Mutex<Vec<Arc<dyn ExecutionPlan>>>,
}

impl Watched {
    /// The plans started so far, and the rows their scans have read.
    pub fn read(&self) -> (usize, u64) {
        let Ok(plans) = self.plans.lock() else {
            return (0, 0);
        };
        let rows = plans.iter().map(|p| scan_metrics(p.as_ref()).0).sum();
        (plans.len(), rows)
    }
}

/// Runs `statement` with the plans it starts registered in `watched`.
pub async fn watching<F: Future>(watched: Arc<Watched>, statement: F) -> F::Output {
    WATCHED.scope(watched, statement).await
}

/// Registers `plan`, about to run, with the statement's [`Watched`], if it has one.
pub(crate) fn started(plan: &Arc<dyn ExecutionPlan>) {
    let _ = WATCHED.try_with(|w| {
        if let Ok(mut plans) = w.plans.lock() {
            plans.push(Arc::clone(plan));
        }
    });
}

/// Rows and bytes read by the scans (the leaves) of an executed plan, or so far of a running
/// one.
pub(crate) fn scan_metrics(plan: &dyn ExecutionPlan) -> (u64, u64) {
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
