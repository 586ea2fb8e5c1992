//! Reading event files (JSONL and CSV) into validated events, with 1-based line numbers.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use chrono::{DateTime, NaiveDateTime};
use serde_json::{Map, Value};

use crate::error::{CatalogError, Result};

/// One validated input event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RawEvent {
    pub event_name: String,
    pub user_id: Option<String>,
    pub session_id: Option<String>,
    /// Microseconds since the Unix epoch, UTC.
    pub timestamp_us: i64,
    pub properties: Option<Map<String, Value>>,
}

/// Input file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    JsonLines,
    Csv,
}

impl Format {
    /// The format of `path` by extension: `.jsonl`, `.json`, `.ndjson` or `.csv` (any case).
    pub fn of(path: &Path) -> Result<Format> {
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase());
        match ext.as_deref() {
            Some("jsonl" | "json" | "ndjson") => Ok(Format::JsonLines),
            Some("csv") => Ok(Format::Csv),
            _ => Err(CatalogError::Invalid(format!(
                "{}: unsupported event file type (expected .jsonl, .json, .ndjson or .csv)",
                path.display()
            ))),
        }
    }
}

/// 64-bit FNV-1a over everything read, to name the output after its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ContentHash(pub u64);

impl Default for ContentHash {
    fn default() -> Self {
        ContentHash(0xcbf2_9ce4_8422_2325)
    }
}

impl ContentHash {
    pub fn update(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= *b as u64;
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// A line reader that hashes what it reads and reports progress in bytes.
struct Lines<'a> {
    reader: BufReader<File>,
    file: String,
    line: u64,
    hash: &'a mut ContentHash,
    progress: Option<&'a indicatif::ProgressBar>,
}

impl Lines<'_> {
    /// The next line without its terminator, or None at the end of the file.
    fn next(&mut self, buf: &mut String) -> Result<Option<u64>> {
        let mut bytes = Vec::new();
        let n = self
            .reader
            .read_until(b'\n', &mut bytes)
            .map_err(|e| CatalogError::io(&self.file, e))?;
        if n == 0 {
            return Ok(None);
        }
        self.line += 1;
        self.hash.update(&bytes);
        if let Some(pb) = self.progress {
            pb.inc(n as u64);
        }
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
        }
        let mut text = String::from_utf8(bytes).map_err(|_| self.bad("invalid UTF-8"))?;
        if self.line == 1 && text.starts_with('\u{feff}') {
            text.remove(0);
        }
        buf.clear();
        buf.push_str(&text);
        Ok(Some(self.line))
    }

    fn bad(&self, message: impl Into<String>) -> CatalogError {
        bad_input(&self.file, self.line, message)
    }
}

fn bad_input(file: &str, line: u64, message: impl Into<String>) -> CatalogError {
    CatalogError::BadInput {
        file: file.to_string(),
        line,
        message: message.into(),
    }
}

/// Reads every event of `path`, calling `f` for each (in file order). Stops at the first
/// invalid line with [`CatalogError::BadInput`].
pub(crate) fn read_events(
    path: &Path,
    hash: &mut ContentHash,
    progress: Option<&indicatif::ProgressBar>,
    f: &mut dyn FnMut(RawEvent) -> Result<()>,
) -> Result<()> {
    let format = Format::of(path)?;
    let file = File::open(path).map_err(|e| CatalogError::io(path, e))?;
    let mut lines = Lines {
        reader: BufReader::with_capacity(1 << 20, file),
        file: path.display().to_string(),
        line: 0,
        hash,
        progress,
    };
    match format {
        Format::JsonLines => read_jsonl(&mut lines, f),
        Format::Csv => read_csv(&mut lines, f),
    }
}

// ---------------------------------------------------------------------------------------------
// JSON lines

const TOP_LEVEL: &str = "event_name, user_id, session_id, timestamp, properties";

fn read_jsonl(lines: &mut Lines<'_>, f: &mut dyn FnMut(RawEvent) -> Result<()>) -> Result<()> {
    let mut buf = String::new();
    while let Some(line) = lines.next(&mut buf)? {
        if buf.trim().is_empty() {
            continue;
        }
        let value: Value =
            serde_json::from_str(&buf).map_err(|e| lines.bad(format!("invalid JSON: {e}")))?;
        let event = json_event(value).map_err(|m| bad_input(&lines.file, line, m))?;
        f(event)?;
    }
    Ok(())
}

fn json_event(value: Value) -> std::result::Result<RawEvent, String> {
    let Value::Object(mut obj) = value else {
        return Err(format!(
            "expected a JSON object (one event per line), found {}",
            kind_name(&value)
        ));
    };
    let event_name = match obj.remove("event_name") {
        Some(Value::String(s)) if !s.is_empty() => s,
        Some(Value::String(_)) => return Err("event_name is empty".into()),
        None | Some(Value::Null) => return Err("missing event_name".into()),
        Some(v) => {
            return Err(format!(
                "event_name must be a string, found {}",
                kind_name(&v)
            ));
        }
    };
    let timestamp_us = match obj.remove("timestamp") {
        None | Some(Value::Null) => return Err("missing timestamp".into()),
        Some(Value::String(s)) => parse_timestamp(&s)?,
        Some(Value::Number(n)) => match n.as_i64() {
            Some(ms) => millis_to_micros(ms)?,
            None => {
                return Err(format!(
                    "timestamp {n} is not an integer number of epoch milliseconds"
                ));
            }
        },
        Some(v) => {
            return Err(format!(
                "timestamp must be an RFC 3339 string or integer epoch milliseconds, found {}",
                kind_name(&v)
            ));
        }
    };
    let user_id = json_id("user_id", obj.remove("user_id"))?;
    let session_id = json_id("session_id", obj.remove("session_id"))?;
    let properties = match obj.remove("properties") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m),
        Some(v) => {
            return Err(format!(
                "properties must be a JSON object, found {}",
                kind_name(&v)
            ));
        }
    };
    if let Some(key) = obj.keys().next() {
        return Err(format!(
            "unknown top-level key {key:?} (an event has {TOP_LEVEL}; put other fields in properties)"
        ));
    }
    check_keys(properties.as_ref())?;
    Ok(RawEvent {
        event_name,
        user_id,
        session_id,
        timestamp_us,
        properties,
    })
}

fn json_id(name: &str, v: Option<Value>) -> std::result::Result<Option<String>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(v) => Err(format!(
            "{name} must be a string, a number or null, found {}",
            kind_name(&v)
        )),
    }
}

fn check_keys(props: Option<&Map<String, Value>>) -> std::result::Result<(), String> {
    if let Some(m) = props
        && m.contains_key("")
    {
        return Err("properties has an empty key".into());
    }
    Ok(())
}

pub(crate) fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

// ---------------------------------------------------------------------------------------------
// Timestamps

fn millis_to_micros(ms: i64) -> std::result::Result<i64, String> {
    ms.checked_mul(1000)
        .ok_or_else(|| format!("timestamp {ms} (epoch milliseconds) is out of range"))
}

/// RFC 3339 (any offset, converted to UTC; digits below the microsecond are truncated), or a
/// date-time without offset (`2026-06-01T12:00:00`, `T` or space), taken as UTC.
pub(crate) fn parse_timestamp(s: &str) -> std::result::Result<i64, String> {
    let t = s.trim();
    if let Ok(dt) = DateTime::parse_from_rfc3339(t) {
        return Ok(dt.timestamp_micros());
    }
    for fmt in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
        if let Ok(dt) = NaiveDateTime::parse_from_str(t, fmt) {
            return Ok(dt.and_utc().timestamp_micros());
        }
    }
    Err(format!(
        "bad timestamp {s:?}: expected RFC 3339 (e.g. 2026-06-01T12:00:00Z) or integer epoch \
         milliseconds"
    ))
}

// ---------------------------------------------------------------------------------------------
// CSV

/// What a CSV column holds.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Column {
    EventName,
    UserId,
    SessionId,
    Timestamp,
    Properties,
    Property(String),
}

/// Reads one RFC 4180 record (quoted fields may span lines; `""` is a quote inside quotes).
/// Returns the line the record starts on, or None at the end of the file.
fn csv_record(lines: &mut Lines<'_>, fields: &mut Vec<String>) -> Result<Option<u64>> {
    let mut buf = String::new();
    let start = loop {
        match lines.next(&mut buf)? {
            None => return Ok(None),
            Some(_) if buf.is_empty() => continue, // blank line
            Some(line) => break line,
        }
    };
    fields.clear();
    let mut field = String::new();
    let mut in_quotes = false;
    let mut after_quote = false; // just closed a quoted field
    loop {
        let mut chars = buf.chars().peekable();
        while let Some(c) = chars.next() {
            if in_quotes {
                if c == '"' {
                    if chars.peek() == Some(&'"') {
                        chars.next();
                        field.push('"');
                    } else {
                        in_quotes = false;
                        after_quote = true;
                    }
                } else {
                    field.push(c);
                }
            } else if c == ',' {
                fields.push(std::mem::take(&mut field));
                after_quote = false;
            } else if after_quote {
                return Err(lines.bad(format!(
                    "unexpected {c:?} after a closing quote (expected , or end of line)"
                )));
            } else if c == '"' && field.is_empty() {
                in_quotes = true;
            } else {
                field.push(c);
            }
        }
        if !in_quotes {
            break;
        }
        // A quoted field continues on the next line.
        field.push('\n');
        if lines.next(&mut buf)?.is_none() {
            return Err(bad_input(
                &lines.file,
                start,
                "unterminated quoted field at the end of the file",
            ));
        }
    }
    fields.push(field);
    Ok(Some(start))
}

fn csv_header(lines: &mut Lines<'_>) -> Result<Vec<Column>> {
    let mut names = Vec::new();
    let Some(line) = csv_record(lines, &mut names)? else {
        return Err(bad_input(
            &lines.file,
            1,
            "empty CSV file (a header row is required)",
        ));
    };
    let mut columns: Vec<Column> = Vec::with_capacity(names.len());
    for name in &names {
        let name = name.trim();
        let col = match name {
            "event_name" => Column::EventName,
            "user_id" => Column::UserId,
            "session_id" => Column::SessionId,
            "timestamp" => Column::Timestamp,
            "properties" => Column::Properties,
            _ => match name.strip_prefix("properties.") {
                Some(key) if !key.is_empty() => Column::Property(key.to_string()),
                _ => {
                    return Err(bad_input(
                        &lines.file,
                        line,
                        format!(
                            "unknown column {name:?} (expected {TOP_LEVEL} or properties.<key>)"
                        ),
                    ));
                }
            },
        };
        if columns.contains(&col) {
            return Err(bad_input(
                &lines.file,
                line,
                format!("duplicate column {name:?}"),
            ));
        }
        columns.push(col);
    }
    for (need, col) in [
        ("event_name", Column::EventName),
        ("timestamp", Column::Timestamp),
    ] {
        if !columns.contains(&col) {
            return Err(bad_input(
                &lines.file,
                line,
                format!("the header has no {need} column"),
            ));
        }
    }
    Ok(columns)
}

/// A `properties.<key>` cell: empty is NULL; a JSON number, `true`, `false` or `null` is that
/// value; anything else is text.
fn csv_scalar(cell: &str) -> Value {
    if cell.is_empty() {
        return Value::Null;
    }
    match serde_json::from_str::<Value>(cell) {
        Ok(v @ (Value::Number(_) | Value::Bool(_) | Value::Null)) if cell.trim() == cell => v,
        _ => Value::String(cell.to_string()),
    }
}

fn read_csv(lines: &mut Lines<'_>, f: &mut dyn FnMut(RawEvent) -> Result<()>) -> Result<()> {
    let columns = csv_header(lines)?;
    let mut fields = Vec::new();
    while let Some(line) = csv_record(lines, &mut fields)? {
        if fields.len() != columns.len() {
            return Err(bad_input(
                &lines.file,
                line,
                format!(
                    "expected {} fields (as in the header), found {}",
                    columns.len(),
                    fields.len()
                ),
            ));
        }
        let event =
            csv_event(&columns, &mut fields).map_err(|m| bad_input(&lines.file, line, m))?;
        f(event)?;
    }
    Ok(())
}

fn csv_event(columns: &[Column], fields: &mut [String]) -> std::result::Result<RawEvent, String> {
    let mut event_name = String::new();
    let mut user_id = None;
    let mut session_id = None;
    let mut timestamp_us = None;
    let mut props: Option<Map<String, Value>> = None;
    let mut dotted: Vec<(&str, Value)> = Vec::new();
    for (col, cell) in columns.iter().zip(fields.iter_mut()) {
        let cell = std::mem::take(cell);
        match col {
            Column::EventName => event_name = cell,
            Column::UserId => user_id = (!cell.is_empty()).then_some(cell),
            Column::SessionId => session_id = (!cell.is_empty()).then_some(cell),
            Column::Timestamp => {
                let t = cell.trim();
                if t.is_empty() {
                    return Err("missing timestamp".into());
                }
                let digits = t.strip_prefix('-').unwrap_or(t);
                timestamp_us = Some(if digits.bytes().all(|b| b.is_ascii_digit()) {
                    let ms = t
                        .parse::<i64>()
                        .map_err(|_| format!("timestamp {t} is out of range"))?;
                    millis_to_micros(ms)?
                } else {
                    parse_timestamp(t)?
                });
            }
            Column::Properties => {
                if cell.trim().is_empty() {
                    continue;
                }
                match serde_json::from_str::<Value>(&cell) {
                    Ok(Value::Object(m)) => props = Some(m),
                    Ok(Value::Null) => {}
                    Ok(v) => {
                        return Err(format!(
                            "properties must be a JSON object, found {}",
                            kind_name(&v)
                        ));
                    }
                    Err(e) => return Err(format!("properties is not valid JSON: {e}")),
                }
            }
            Column::Property(key) => dotted.push((key, csv_scalar(&cell))),
        }
    }
    if event_name.is_empty() {
        return Err("missing event_name".into());
    }
    let Some(timestamp_us) = timestamp_us else {
        return Err("missing timestamp".into());
    };
    if !dotted.is_empty() {
        let map = props.get_or_insert_with(Map::new);
        for (key, value) in dotted {
            if map.contains_key(key) {
                return Err(format!(
                    "property {key:?} is given both in the properties column and in properties.{key}"
                ));
            }
            map.insert(key.to_string(), value);
        }
    }
    check_keys(props.as_ref())?;
    Ok(RawEvent {
        event_name,
        user_id,
        session_id,
        timestamp_us,
        properties: props,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp("1970-01-01T00:00:01Z"), Ok(1_000_000));
        assert_eq!(parse_timestamp("1970-01-01T01:00:01+01:00"), Ok(1_000_000));
        assert_eq!(parse_timestamp("1970-01-01T00:00:00.0000019Z"), Ok(1));
        assert_eq!(parse_timestamp("1970-01-01 00:00:02"), Ok(2_000_000));
        assert!(parse_timestamp("yesterday").is_err());
        assert_eq!(millis_to_micros(1500), Ok(1_500_000));
        assert!(millis_to_micros(i64::MAX).is_err());
    }

    #[test]
    fn csv_scalars() {
        assert_eq!(csv_scalar(""), Value::Null);
        assert_eq!(csv_scalar("5"), serde_json::json!(5));
        assert_eq!(csv_scalar("2.5"), serde_json::json!(2.5));
        assert_eq!(csv_scalar("true"), serde_json::json!(true));
        assert_eq!(csv_scalar("007"), serde_json::json!("007"));
        assert_eq!(csv_scalar(" 5"), serde_json::json!(" 5"));
        assert_eq!(csv_scalar("pro"), serde_json::json!("pro"));
    }
}
