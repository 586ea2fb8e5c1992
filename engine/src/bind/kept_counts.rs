//! A file's counts of a JSON-text key, kept on disk beside the dataset so that a later
//! process does not read the file again (docs/mapping.md). A key's counts in a file are a fact
//! of that file as written: they are kept by the file's identity (location, size and
//! modification time), so a rewritten file is a new identity and is counted again. Each
//! record is one small file under [`DIR`], created whole or not at all and never replaced, so
//! two processes counting at once write the same record or leave the first.
//!
//! Only a local dataset keeps them (reading a record per file from S3 would cost a request
//! per file), and only counts that took a pass over a file's rows: a file whose dictionary
//! pages settle the key is read from them in this process as cheaply as from a record. A
//! dataset folder that cannot be written is read as before; a record that cannot be read or
//! does not name the same question and file is not used.

use serde::{Deserialize, Serialize};
use signalql_catalog::Root;

/// Where the records are, under the dataset root.
pub const DIR: &str = "_signalql/key_counts";

#[derive(Serialize, Deserialize)]
struct Record {
    question: String,
    file: String,
    values: i64,
    numbers: i64,
}

fn name(question: &str, file: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(question.as_bytes());
    h.update([0]);
    h.update(file.as_bytes());
    format!("{DIR}/{}.json", hex::encode(&h.finalize()[..16]))
}

/// The counts kept for `question` of the file `identity`: its non-null values and numbers.
pub(super) fn read(root: &Root, question: &str, identity: &str) -> Option<(i64, i64)> {
    root.local()?;
    let bytes = root.read(&name(question, identity)).ok()??;
    let r: Record = serde_json::from_slice(&bytes).ok()?;
    (r.question == question && r.file == identity).then_some((r.values, r.numbers))
}

/// Keeps `counts` for `question` of the file `identity`, when the dataset is a local folder
/// that can be written.
pub(super) fn write(root: &Root, question: &str, identity: &str, counts: (i64, i64)) {
    if root.local().is_none() {
        return;
    }
    let record = Record {
        question: question.to_string(),
        file: identity.to_string(),
        values: counts.0,
        numbers: counts.1,
    };
    if let Ok(bytes) = serde_json::to_vec(&record) {
        let _ = root.put_new(&name(question, identity), bytes);
    }
}
