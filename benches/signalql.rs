//! Criterion benches of signalql (placeholder while being written).
fn main() {}
