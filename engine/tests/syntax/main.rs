//! The syntax tests (error positions and the canonical round trip), in one test binary.

mod syntax_errors;
mod syntax_roundtrip;
