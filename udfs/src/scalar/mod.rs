//! Scalar functions (UDFs), one per file.

pub mod file_rank;
pub mod index_weights;
pub mod json_get;
pub mod lexical;
pub mod month_start;
pub mod text_time;
pub mod token_estimate;

use datafusion::arrow::datatypes::DataType;
use datafusion::logical_expr::{Signature, TypeSignature, Volatility};

/// The types a text argument may have.
pub(crate) fn text_types() -> Vec<DataType> {
    vec![DataType::Utf8, DataType::Utf8View, DataType::LargeUtf8]
}

/// A function of one text argument whose instance holds a per-query parameter
/// ([`text_types`]): one argument.
pub(crate) fn of_text() -> Signature {
    Signature::uniform(1, text_types(), Volatility::Immutable)
}

/// The same function registered by name, which may also take that parameter as a second
/// argument (the form a plan carries to another process).
pub(crate) fn of_text_and_parameter() -> Signature {
    Signature::one_of(
        vec![
            TypeSignature::Uniform(1, text_types()),
            TypeSignature::Any(2),
        ],
        Volatility::Immutable,
    )
}
