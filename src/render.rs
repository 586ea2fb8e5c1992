//! Text renderings of a result envelope: an aligned table for people and CSV for tools.

use serde_json::Value;

use crate::Envelope;

fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// An aligned text table with a header, a rule and a closing row count.
pub fn table(env: &Envelope) -> String {
    let header: Vec<String> = env.columns.iter().map(|c| c.name.clone()).collect();
    let body: Vec<Vec<String>> = env
        .rows
        .iter()
        .map(|r| r.iter().map(cell).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &body {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        format!("{}\n", padded.join(" | ").trim_end())
    };
    let mut out = line(&header);
    out.push_str(&format!(
        "{}\n",
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("-+-")
    ));
    for row in &body {
        out.push_str(&line(row));
    }
    let m = &env.metadata;
    out.push_str(&format!(
        "({} row{}{}; as of {})\n",
        m.row_count,
        if m.row_count == 1 { "" } else { "s" },
        if m.truncated { ", truncated" } else { "" },
        m.as_of
    ));
    if !m.skipped_files.is_empty() {
        out.push_str(&format!(
            "(over part of the data: {} unreadable file{} skipped: {})\n",
            m.skipped_files.len(),
            if m.skipped_files.len() == 1 { "" } else { "s" },
            m.skipped_files
                .iter()
                .map(|f| format!("{} ({})", f.file, f.reason))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// RFC 4180 CSV with a header row; NULL is an empty field, structs are JSON text.
pub fn csv(env: &Envelope) -> String {
    let mut out = String::new();
    let header: Vec<String> = env.columns.iter().map(|c| csv_field(&c.name)).collect();
    out.push_str(&header.join(","));
    out.push_str("\r\n");
    for row in &env.rows {
        let cells: Vec<String> = row.iter().map(|v| csv_field(&cell(v))).collect();
        out.push_str(&cells.join(","));
        out.push_str("\r\n");
    }
    out
}
