//! Writing results to standard output: a closed pipe (`signalql query … | head`) ends the
//! output quietly instead of failing.

use crate::{Error, Result};

/// Writes `text` to stdout and flushes it. A broken pipe is not an error.
pub fn write(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        // A closed pipe (`signalql query … | head`) is not an error of ours.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(|e| Error::io(e.to_string())),
    }
}

/// Writes `v` to stdout as pretty-printed JSON and a newline.
pub fn write_json(v: &impl serde::Serialize) -> Result<()> {
    write(&json_text(v)?)
}

/// `v` as pretty-printed JSON and a newline.
pub fn json_text(v: &impl serde::Serialize) -> Result<String> {
    let mut s = serde_json::to_string_pretty(v).map_err(|e| Error::internal(e.to_string()))?;
    s.push('\n');
    Ok(s)
}
