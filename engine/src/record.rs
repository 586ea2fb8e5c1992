//! What a statement did, recorded while it runs (in its task): the stages it went through
//! (parse, bind, lower, plan, execute, envelope or pack) with their times, and every physical
//! plan the one execution path ran, with DataFusion's metrics in it. EXPLAIN ANALYZE and the
//! trace of a run ([`crate::trace`]) are read from it. Outside [`recording`] nothing is kept.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use datafusion::physical_plan::ExecutionPlan;
use serde_json::{Map, Value};

tokio::task_local! {
    static RECORD: RefCell<Recording>;
}

/// One stage of a statement.
#[derive(Debug, Clone)]
pub struct Stage {
    pub name: &'static str,
    pub start: DateTime<Utc>,
    pub elapsed_ms: f64,
    /// Rows, bytes, tokens: what the stage produced, where it has a count.
    pub attrs: Map<String, Value>,
}

/// A plan the execution path ran: its physical plan (with the metrics of the run) and how
/// long planning and running it took.
#[derive(Debug, Clone)]
pub struct Run {
    pub physical: Arc<dyn ExecutionPlan>,
    pub plan_ms: f64,
    pub execute_ms: f64,
    /// Rows the plan returned.
    pub rows: u64,
    /// Arrow bytes of the batches it returned.
    pub bytes: u64,
    /// The logical plan, kept for a dry run only (EXPLAIN of a DESCRIBE shows it).
    pub logical: Option<datafusion::logical_expr::LogicalPlan>,
}

#[derive(Debug, Default, Clone)]
pub struct Recording {
    pub stages: Vec<Stage>,
    pub runs: Vec<Run>,
    /// Set for EXPLAIN of a DESCRIBE: plans are made and recorded but not run (each returns
    /// no rows).
    pub dry: bool,
}

/// The peak of a session's memory pool from now on (DataFusion's `PeakRecordingPool`, which
/// the engine's sessions wrap their pool in; an application's session may not).
pub(crate) struct PeakWatch(Arc<dyn datafusion::execution::memory_pool::MemoryPool>);

impl PeakWatch {
    /// Resets the pool's peak to what is reserved now.
    pub(crate) fn start(session: &datafusion::prelude::SessionContext) -> PeakWatch {
        let watch = PeakWatch(Arc::clone(&session.runtime_env().memory_pool));
        if let Some(p) = watch.recorder() {
            p.reset_peak();
        }
        watch
    }

    fn recorder(&self) -> Option<&datafusion::execution::memory_pool::PeakRecordingPool> {
        datafusion::execution::memory_pool::PeakRecordingPool::from_pool(self.0.as_ref())
    }

    /// The peak since [`PeakWatch::start`]; `None` when the pool records none.
    pub(crate) fn peak(&self) -> Option<u64> {
        self.recorder().map(|p| p.peak_reserved() as u64)
    }
}

/// Runs `statement` in this task with what it does recorded.
pub async fn recording<F: Future>(statement: F) -> (F::Output, Recording) {
    recording_with(Recording::default(), statement).await
}

/// [`recording`] starting from `start` (a dry recording, say).
pub async fn recording_with<F: Future>(start: Recording, statement: F) -> (F::Output, Recording) {
    let (out, recorded) = RECORD
        .scope(RefCell::new(start), async {
            let out = statement.await;
            (out, RECORD.with(|r| r.take()))
        })
        .await;
    // A recording around this one (the trace of an EXPLAIN ANALYZE) sees what it saw.
    let _ = RECORD.try_with(|outer| {
        let mut outer = outer.borrow_mut();
        outer.stages.extend(recorded.stages.iter().cloned());
        outer.runs.extend(recorded.runs.iter().cloned());
    });
    (out, recorded)
}

/// Whether a recording is running in this task (a statement inside a traced one is not traced
/// again).
pub(crate) fn active() -> bool {
    RECORD.try_with(|_| ()).is_ok()
}

/// Whether plans are only to be made, not run.
pub(crate) fn dry() -> bool {
    RECORD.try_with(|r| r.borrow().dry).unwrap_or(false)
}

pub(crate) fn run(run: Run) {
    let _ = RECORD.try_with(|r| r.borrow_mut().runs.push(run));
}

/// Records a stage that started at `start` (its wall-clock start is derived from the time it
/// took) and ends now.
pub(crate) fn stage(name: &'static str, start: Instant, attrs: Map<String, Value>) {
    let elapsed = start.elapsed();
    let _ = RECORD.try_with(|r| {
        r.borrow_mut().stages.push(Stage {
            name,
            start: Utc::now() - chrono::Duration::from_std(elapsed).unwrap_or_default(),
            elapsed_ms: elapsed.as_secs_f64() * 1e3,
            attrs,
        })
    });
}

/// Runs `f` as the stage `name`.
pub(crate) async fn staged<T, F: Future<Output = T>>(name: &'static str, f: F) -> T {
    let start = Instant::now();
    let out = f.await;
    stage(name, start, Map::new());
    out
}

/// Runs `f` as the stage `name` (synchronous work).
pub(crate) fn staged_sync<T>(name: &'static str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    stage(name, start, Map::new());
    out
}
