//! The SignalQL language engine: syntax, binding, lowering to DataFusion, execution and the
//! result envelope.

pub mod bind;
pub mod catalog;
pub mod context;
pub mod describe;
pub mod engine;
pub mod envelope;
pub mod error;
pub mod execute;
pub mod limits;
pub mod lower;
pub mod metrics;
pub mod operator;
pub mod session;
pub mod syntax;
pub mod watch;

pub use context::{Bundle, Explanation};
pub use engine::{Answer, Compiled, Engine, EngineOptions};
pub use envelope::Envelope;
pub use error::{Error, ErrorKind, Result};
pub use limits::Limits;
