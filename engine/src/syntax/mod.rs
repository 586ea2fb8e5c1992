//! The SignalQL syntax: lexer, parser, AST and canonical formatter. Imports nothing from DataFusion.

pub mod ast;
pub mod format;
pub mod keywords;
pub mod lexer;
pub mod params;
pub mod parser;
pub mod walk;

pub use format::{aggregate_name, canonical_name, field_name};
pub use params::Params;
pub use parser::{parse, parse_metric_expression, parse_predicate, parse_with};
