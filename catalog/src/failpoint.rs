//! Test hooks, compiled into every build (debug and release, so that the tests that use them
//! run in both profiles). One environment variable, `SIGNALQL_FAILPOINT`, read once per
//! process, selects at most one hook (docs/failpoints.md lists them all):
//!
//! - `execute`: the process's first query panics after planning (engine/src/execute.rs).
//! - `slow_execute`: every plan waits 1.5 s before it runs.
//! - `hold_execute:PATH`: every plan waits while the file PATH exists (at most a minute),
//!   after saying `failpoint: holding a statement` on stderr.
//! - `hold_task`: a worker holds each task it receives for 5 s (engine/src/distributed.rs).
//! - `crash_at_write:N`: the process aborts, as a `kill -9` would end it, at the Nth durable
//!   write step of an ingest ([`write_step`]).
//!
//! Without the variable each hook costs one load of a `OnceLock`.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that selects a hook.
pub const VAR: &str = "SIGNALQL_FAILPOINT";

/// The hook this process runs with, if any.
fn selected() -> Option<&'static str> {
    static SELECTED: OnceLock<Option<String>> = OnceLock::new();
    SELECTED
        .get_or_init(|| std::env::var(VAR).ok().filter(|v| !v.is_empty()))
        .as_deref()
}

/// Whether the hook `name` (one without an argument) is selected.
pub fn is(name: &str) -> bool {
    selected() == Some(name)
}

/// The argument of the hook `name` (`name:ARG`), when it is selected.
pub fn argument(name: &str) -> Option<&'static str> {
    argument_in(selected()?, name)
}

/// The argument of the hook `name` in the variable's value `value`.
fn argument_in<'a>(value: &'a str, name: &str) -> Option<&'a str> {
    value.strip_prefix(name)?.strip_prefix(':')
}

/// Where an ingest is about to make a write durable or visible: each data file, the text
/// index, the commit record and the marker's removal. With `crash_at_write:N`, the Nth call in
/// the process says `failpoint: crash at write N (WHAT)` on stderr and aborts the process
/// before that write happens, so a test can stop an ingest at every step in turn. `what` is
/// formatted only then: without the hook a write pays for no string.
pub fn write_step(what: std::fmt::Arguments<'_>) {
    static STEPS: AtomicU64 = AtomicU64::new(0);
    let Some(n) = argument("crash_at_write").and_then(|n| n.parse::<u64>().ok()) else {
        return;
    };
    let step = STEPS.fetch_add(1, Ordering::SeqCst) + 1;
    if step == n {
        eprintln!("failpoint: crash at write {step} ({what})");
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::argument_in;

    #[test]
    fn arguments_follow_the_name_and_a_colon() {
        assert_eq!(
            argument_in("hold_execute:/tmp/x", "hold_execute"),
            Some("/tmp/x")
        );
        assert_eq!(argument_in("hold_executed", "hold_execute"), None);
        assert_eq!(argument_in("hold_execute", "hold_execute"), None);
        assert_eq!(argument_in("crash_at_write:3", "crash_at_write"), Some("3"));
    }
}
