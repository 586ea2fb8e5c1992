//! `CONTEXT FOR "task"`: context bundles over the object tables (signalql-v0.5-context.md,
//! DESIGN.md §5, docs/context.md).
//!
//! `build` runs a CONTEXT FOR end to end. `load` builds the DataFusion plans: the objects live
//! at T at their latest revision, their representations (`indexed`: from the text index where
//! it covers them; secret or excluded content is never loaded), lexical-v1 term weights of the
//! titles and of the eligible content, and the graph edges; `reads` the packed content and the evidence after packing; `candidates` decodes the packer's input and `exec` is the packer operator.
//! `pack` decides, with `select` (eligibility, boosts, rank), `expand` (graph expansion) and
//! `packing` (the budget passes, COMPRESS), `assemble`
//! makes the bundle and the explanation the context store (`store`) keeps for
//! `EXPLAIN CONTEXT`; `bundle` is their JSON form and address. `find` is FIND OBJECT.

pub(crate) mod assemble;
pub(crate) mod build;
pub(crate) mod bundle;
pub(crate) mod candidates;
pub(crate) mod exec;
pub(crate) mod expand;
pub(crate) mod find;
pub(crate) mod from_index;
pub(crate) mod indexed;
pub(crate) mod load;
pub(crate) mod pack;
pub(crate) mod packing;
pub(crate) mod reads;
pub mod render;
pub mod resident;
pub(crate) mod select;
pub(crate) mod store;
pub(crate) mod subject;
pub(crate) mod visible;

pub use assemble::{Graph, assemble};
pub use bundle::{
    Budget, Bundle, BundleMetadata, Compression, Explanation, Item, Rejection, address,
    canonical_json, object_uri, parse_object_uri,
};
pub use pack::{
    DEFAULT_BUDGET, DEFAULT_MAX_DEPTH, DEFAULT_MAX_OBJECTS, Decisions, MAX_BUDGET, MAX_MAX_DEPTH,
    MAX_MAX_OBJECTS, PackParams, check_limits, decide,
};

pub use signalql_udfs::scalar::lexical::SCORER;

/// context-packets.md's standalone `compress_text(text, task, max_chars)`: `text` as is when it
/// has at most `max_chars` characters, else COMPRESS's extractive summary of it (the sentences
/// holding the most task terms, in their order; docs/context.md, "COMPRESS") within
/// `max_chars` characters, with its preservation (the fraction of the task terms found in
/// `text` it keeps); `None` when no sentence holding a task term fits.
pub fn compress_text(text: &str, task: &str, max_chars: u64) -> Option<(String, f64)> {
    use signalql_udfs::scalar::token_estimate::Estimator;
    if text.chars().count() as u64 <= max_chars {
        return Some((text.to_string(), 1.0));
    }
    let terms = signalql_udfs::scalar::lexical::terms(task);
    let max = i64::try_from(max_chars).unwrap_or(i64::MAX);
    packing::compress_text(text, &terms, max, Estimator::Chars)
}

/// Drops `garbage` on a short-lived thread: freeing 100k candidates or rejections takes tens
/// of milliseconds an answer need not wait for. (If no thread can be started, it is dropped
/// here.)
pub(crate) fn free_in_background<T: Send + 'static>(garbage: T) {
    let _ = std::thread::Builder::new()
        .name("signalql-free".into())
        .spawn(move || drop(garbage));
}
