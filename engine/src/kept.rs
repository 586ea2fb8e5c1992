//! A physical plan kept with a statement the plan cache holds, so that running the statement
//! again skips DataFusion's optimisation and physical planning (docs/runtime.md, "Plan
//! cache"). Each run executes a copy of the kept plan whose operators are new: their metrics,
//! their execution state and their scans' metrics start empty, as a plan made for the run
//! would. The kept plan itself never runs.
//!
//! Only a plan every node of which can be so copied is kept: no dynamic filter but a sort's own
//! (a TopK's or a join's bound pushed into a scan is state the copies would share), no
//! distributed stage, and leaves that are Parquet scans, empty relations or placeholder rows.
//! A Parquet scan's source is rebuilt from its parts, because `ParquetSource` keeps its
//! metrics in itself and offers no way to renew them; the rebuilt source is checked, when the
//! plan is kept, to print as the planned one does but for its metrics, and a plan whose scan
//! does not is run as planned and not kept.

use std::sync::{Arc, Mutex};

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::physical_plan::{FileSource, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::placeholder_row::PlaceholderRowExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan, ReplaceChildrenOptions};

/// The physical plan kept for one cached statement.
#[derive(Default)]
pub struct KeptPlan {
    slot: Mutex<Slot>,
}

#[derive(Default)]
enum Slot {
    /// Not planned yet.
    #[default]
    Empty,
    /// Planned, and not one that can be run again.
    Refused,
    Kept(Arc<dyn ExecutionPlan>),
}

impl std::fmt::Debug for KeptPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.slot.lock().as_deref() {
            Ok(Slot::Empty) => "empty",
            Ok(Slot::Refused) => "refused",
            Ok(Slot::Kept(_)) => "kept",
            Err(_) => "poisoned",
        };
        f.debug_struct("KeptPlan").field("slot", &state).finish()
    }
}

impl KeptPlan {
    /// A copy of the kept plan to run, or `None` when no plan is kept.
    pub(crate) fn copy(&self) -> Option<Arc<dyn ExecutionPlan>> {
        let kept = match &*self.slot.lock().ok()? {
            Slot::Kept(plan) => Arc::clone(plan),
            _ => return None,
        };
        copied(&kept, false)
    }

    /// Whether a physical plan is kept.
    pub fn is_kept(&self) -> bool {
        matches!(self.slot.lock().as_deref(), Ok(Slot::Kept(_)))
    }

    /// Whether a plan was made for this statement already (kept or refused).
    pub(crate) fn planned(&self) -> bool {
        !matches!(self.slot.lock().as_deref(), Ok(Slot::Empty))
    }

    /// Keeps a copy of `planned`, a plan just made for this statement and not yet run, when
    /// it can be run again; else remembers that it cannot.
    pub(crate) fn keep(&self, planned: &Arc<dyn ExecutionPlan>) {
        let slot = match copied(planned, true) {
            Some(copy) => Slot::Kept(copy),
            None => Slot::Refused,
        };
        if let Ok(mut s) = self.slot.lock() {
            *s = slot;
        }
    }
}

/// A copy of `plan` with every operator new, or `None` when some node cannot be copied so.
/// With `check`, each rebuilt scan source is compared with the planned one.
fn copied(plan: &Arc<dyn ExecutionPlan>, check: bool) -> Option<Arc<dyn ExecutionPlan>> {
    if check && !copyable(plan) {
        return None;
    }
    copy_node(plan, check)
}

/// No distributed stage, and no dynamic filter but a sort's own: a TopK's bound, which the
/// sort renews in `reset_state` and which no other node reads. A filter another node reads
/// (pushed into a scan) is shared state the copy would inherit.
fn copyable(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let shared = plan.exists(|node| {
        if node.is::<datafusion_distributed::DistributedExec>() {
            return Ok(true);
        }
        let produced = node.dynamic_expressions_produced();
        if !produced.is_empty() && !node.is::<SortExec>() {
            return Ok(true);
        }
        let mut read = false;
        node.apply_expressions(&mut |expr| {
            expr.apply(|e| {
                let foreign = e.downcast_ref::<DynamicFilterPhysicalExpr>().is_some()
                    && !produced
                        .iter()
                        .any(|p| std::ptr::addr_eq(Arc::as_ptr(p), Arc::as_ptr(e)));
                read |= foreign;
                Ok(match foreign {
                    true => TreeNodeRecursion::Stop,
                    false => TreeNodeRecursion::Continue,
                })
            })
        })?;
        Ok(read)
    });
    !shared.unwrap_or(true)
}

fn copy_node(plan: &Arc<dyn ExecutionPlan>, check: bool) -> Option<Arc<dyn ExecutionPlan>> {
    let children = plan.children();
    if children.is_empty() {
        return copy_leaf(plan, check);
    }
    let children = children
        .into_iter()
        .map(|c| copy_node(c, check))
        .collect::<Option<Vec<_>>>()?;
    // Built-in operators give the copy new metrics and state; `reset_state` then renews what
    // only it does (a sort's filter).
    Arc::clone(plan)
        .replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Keep),
        )
        .and_then(|p| p.reset_state())
        .ok()
}

fn copy_leaf(plan: &Arc<dyn ExecutionPlan>, check: bool) -> Option<Arc<dyn ExecutionPlan>> {
    if plan.is::<EmptyExec>() || plan.is::<PlaceholderRowExec>() {
        return Some(Arc::clone(plan));
    }
    let exec = plan.downcast_ref::<DataSourceExec>()?;
    let (config, source) = exec.downcast_to_file_source::<ParquetSource>()?;
    let fresh = rebuilt(source);
    if check && !same_but_metrics(source, &fresh) {
        return None;
    }
    let copy = crate::scan_predicate::reading_through(exec, config, fresh);
    if check && format!("{:?}", copy.properties()) != format!("{:?}", exec.properties()) {
        return None;
    }
    Some(Arc::new(copy))
}

/// `source` made again from its parts, as the planner made it (catalog/src/folder.rs, then
/// `ParquetFormat::create_physical_plan`, then the optimizer's projection and filter
/// pushdown), with new metrics.
fn rebuilt(source: &ParquetSource) -> ParquetSource {
    let options = source.table_parquet_options();
    let mut fresh = ParquetSource::new(source.table_schema().clone())
        .with_table_parquet_options(options.clone());
    if let Some(factory) = source.parquet_file_reader_factory() {
        fresh = fresh.with_parquet_file_reader_factory(Arc::clone(factory));
    }
    if let Some(hint) = options.global.metadata_size_hint {
        fresh = fresh.with_metadata_size_hint(hint);
    }
    if let Some(predicate) = FileSource::filter(source) {
        fresh = fresh.with_predicate(predicate);
    }
    if let Some(projection) = source.projection()
        && let Ok(Some(projected)) = fresh.try_pushdown_projection(projection)
        && let Some(p) = projected.downcast_ref::<ParquetSource>()
    {
        fresh = p.clone();
    }
    fresh
}

/// Whether `a` and `b` print the same once their metrics are left out.
fn same_but_metrics(a: &ParquetSource, b: &ParquetSource) -> bool {
    let without = |s: &ParquetSource| {
        let metrics = format!("{:?}", FileSource::metrics(s));
        format!("{s:?}").replace(&metrics, "")
    };
    without(a) == without(b)
}
