//! The SignalQL language engine: syntax, binding, lowering to DataFusion, execution and the
//! result envelope. The public surface is [`Engine`] and what its answers are made of (the
//! envelope, bundles, DESCRIBE records, errors, the syntax tree); binding, lowering, execution
//! and the session are the engine's own.

pub mod access;
mod bind;
pub(crate) mod catalog;
pub mod context;
pub mod describe;
pub mod distributed;
mod engine;
pub mod envelope;
pub mod error;
pub(crate) mod execute;
pub mod explain;
pub(crate) mod file_exprs;
pub(crate) mod footprint;
pub mod forms;
pub(crate) mod funnel_phase;
pub(crate) mod group_cap;
pub mod kept;
pub(crate) mod large_fetch;
mod limits;
pub(crate) mod lower;
pub mod metrics;
pub(crate) mod operator;
pub mod otlp;
pub mod plan_cache;
pub(crate) mod policed;
pub mod progress;
pub mod record;
pub(crate) mod rewrite;
pub(crate) mod scan_predicate;
pub(crate) mod session;
pub mod syntax;
pub mod trace;
mod unparse;
pub(crate) mod view_eq;
pub mod watch;

pub use bind::{Needs, Table, needs};
pub use context::{Bundle, Explanation};
pub use engine::{Answer, Answered, Compiled, Engine, EngineOptions, PlanCache, Resident};
pub use envelope::Envelope;
pub use error::{Error, ErrorKind, Result};
pub use limits::Limits;
pub use lower::{Interval, Lowered, OutColumn, Stage, UnitSource};
pub use unparse::plan_sql;
