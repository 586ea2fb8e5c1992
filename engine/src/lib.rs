//! The SignalQL language engine: syntax, lowering to DataFusion, execution and the result envelope.

pub mod context;
pub mod describe;
pub mod engine;
pub mod envelope;
pub mod error;
pub mod lower;
pub mod metrics;
pub mod operator;
pub mod syntax;
pub mod watch;

pub use context::{Bundle, Explanation};
pub use engine::{Answer, Compiled, Engine, EngineOptions};
pub use envelope::Envelope;
pub use error::{Error, ErrorKind, Result};
