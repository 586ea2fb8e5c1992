//! Stable JSON forms (context-runtime.md §8; docs/runtime.md): every JSON object the engine
//! persists or exchanges — bundles and explanations, `EXPLAIN` output, traces, plan-cache
//! entries, estimator statistics — carries `spec_version`, keeps the fields this version does
//! not know when it is read and written back, and is refused when its major version is higher
//! than the one this engine reads.
//!
//! `spec_version` is the version of the document that defines the form: signalql-v0.5-context
//! for bundles and explanations ([`CONTEXT_FORMS`]), context-runtime for the others
//! ([`RUNTIME_FORMS`]).

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// `spec_version` of bundles and explanations (signalql-v0.5-context.md).
pub const CONTEXT_FORMS: &str = "0.5";

/// `spec_version` of EXPLAIN output, traces, plan-cache entries and statistics
/// (context-runtime.md).
pub const RUNTIME_FORMS: &str = "0.1";

/// The fields of a form this version does not know, kept as they were read.
pub type Unknown = Map<String, Value>;

/// The default of a bundle's or explanation's `spec_version`, for records stored before it was
/// written.
pub fn context_forms() -> String {
    CONTEXT_FORMS.to_string()
}

/// The default of a runtime form's `spec_version`.
pub fn runtime_forms() -> String {
    RUNTIME_FORMS.to_string()
}

/// The major version of `MAJOR.MINOR`, if that is what `v` is.
fn major(v: &str) -> Option<u64> {
    let (major, minor) = v.split_once('.').unwrap_or((v, "0"));
    minor.parse::<u64>().ok()?;
    major.parse().ok()
}

/// Checks a form's `spec_version` against the version this engine writes for it: a missing
/// one is the documented default (the current version); a higher major, or one that is not
/// `MAJOR.MINOR`, is refused.
pub fn check_version(what: &str, value: &Value, current: &str) -> Result<()> {
    let Some(v) = value.get("spec_version") else {
        return Ok(());
    };
    let Some(text) = v.as_str() else {
        return Err(Error::io(format!(
            "{what}: spec_version must be a string such as \"{current}\", not {v}"
        )));
    };
    let ours = major(current).unwrap_or(0);
    match major(text) {
        Some(m) if m <= ours => Ok(()),
        Some(_) => Err(Error::io(format!(
            "{what} has spec_version {text}, a newer major version than this signalql reads \
             ({ours}.x)"
        ))
        .with_help("read it with a signalql that implements that version")),
        None => Err(Error::io(format!(
            "{what}: spec_version {text:?} is not MAJOR.MINOR"
        ))),
    }
}

/// Reads a form from JSON text: its version checked, then the form with every unknown field
/// kept (each form has an `unknown` map for them).
pub fn read<T: DeserializeOwned>(what: &str, text: &[u8], current: &str) -> Result<T> {
    let value: Value = serde_json::from_slice(text)
        .map_err(|e| Error::io(format!("{what} is not JSON: {e}")).caused_by(e))?;
    check_version(what, &value, current)?;
    serde_json::from_value(value)
        .map_err(|e| Error::io(format!("{what} is not readable: {e}")).caused_by(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn versions_up_to_the_current_major_are_read_and_higher_ones_refused() {
        for ok in ["0.1", "0.9", "0.10", "0"] {
            check_version("x", &json!({"spec_version": ok}), "0.1").unwrap();
        }
        check_version("x", &json!({}), "0.1").unwrap();
        for bad in ["1.0", "2.3", "1"] {
            let e = check_version("x", &json!({"spec_version": bad}), "0.5").unwrap_err();
            assert_eq!(e.kind.code(), "io_error");
            assert!(e.message.contains("newer major version"), "{}", e.message);
        }
        for bad in [json!("zero"), json!("0.x"), json!(1)] {
            let e = check_version("x", &json!({"spec_version": bad}), "0.5").unwrap_err();
            assert_eq!(e.kind.code(), "io_error");
        }
    }
}
