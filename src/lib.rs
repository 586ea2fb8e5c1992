//! signalql: SignalQL over Apache Arrow and DataFusion, for AI agents and the engineers who
//! give them data. This facade re-exports the engine, the catalog and the functions.
//!
//! ```no_run
//! # async fn demo() -> signalql::Result<()> {
//! let engine = signalql::Engine::open(signalql::sample_dataset())?;
//! let envelope = engine.query("FROM events DURING LAST 7 d RETURN count").await?;
//! println!("{}", serde_json::to_string(&envelope).unwrap());
//! # Ok(()) }
//! ```

pub mod bench;
pub mod mcp;
pub mod parquet_out;
pub mod plot;
pub mod render;
pub mod request;
pub mod serve;
pub mod shell;
pub mod stdout;
pub mod watch_loop;

pub use signalql_catalog as catalog;
pub use signalql_engine::context::render::render as render_bundle;
pub use signalql_engine::envelope::{self, ColumnInfo, Envelope, Metadata};
pub use signalql_engine::syntax::{Params, ast, parse, parse_with};
pub use signalql_engine::{
    Answer, Bundle, Compiled, Engine, EngineOptions, Error, ErrorKind, Explanation, Limits,
    PlanCache, Resident, Result, plan_sql,
};
pub use signalql_engine::{describe, distributed, metrics, watch};
pub use signalql_udfs as udfs;

use std::path::PathBuf;

/// Add signalql's functions (`stats`, `json_get_text`, …) to a DataFusion context.
pub fn register(ctx: &datafusion::prelude::SessionContext) {
    signalql_udfs::register_all(ctx);
}

/// The bundled sample dataset: `$SIGNALQL_DATA` if set, else `data/sample` of this checkout.
pub fn sample_dataset() -> PathBuf {
    std::env::var_os("SIGNALQL_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("data")
                .join("sample")
        })
}

/// The multi-thread Tokio runtime the command line runs a command's async work on. Its worker
/// threads get the main thread's 8 MiB of stack (not Tokio's 2 MiB): the MCP and HTTP servers
/// answer on them, and planning a statement at the parser's nesting limits recurses deep.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(8 << 20)
        .build()
        .map_err(|e| Error::internal(format!("cannot start the runtime: {e}")))
}
