//! The SignalQL language engine: syntax, lowering to DataFusion, execution and the result envelope.

pub mod engine;
pub mod envelope;
pub mod error;
pub mod lower;
pub mod syntax;

pub use engine::{Compiled, Engine, EngineOptions};
pub use envelope::Envelope;
pub use error::{Error, ErrorKind, Result};
