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

/// `v` as [`cell`] shows it, with a fractional number rounded for reading: six significant
/// digits, and no fewer than the digits of its integer part (docs/shell.md).
fn cell_for_reading(v: &Value) -> String {
    match v {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => match n.as_f64() {
            Some(x) => round_for_reading(x),
            None => n.to_string(),
        },
        other => cell(other),
    }
}

/// `x` with six significant digits (never fewer than its integer part has), without trailing
/// zeros; in scientific notation below 0.0001 in magnitude.
pub fn round_for_reading(x: f64) -> String {
    if !x.is_finite() || x == 0.0 {
        return x.to_string();
    }
    let magnitude = x.abs();
    if magnitude < 1e-4 {
        let text = format!("{x:.5e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        return format!("{}e{exponent}", without_trailing_zeros(mantissa));
    }
    // Six significant digits: as many decimals as the leading digit's place leaves (none
    // past the sixth digit of the integer part).
    let decimals = (5 - magnitude.log10().floor() as i32).max(0) as usize;
    without_trailing_zeros(&format!("{x:.decimals$}")).to_string()
}

/// `text` (a number) without the zeros that end its fraction, nor a point left bare.
fn without_trailing_zeros(text: &str) -> &str {
    match text.contains('.') {
        true => text.trim_end_matches('0').trim_end_matches('.'),
        false => text,
    }
}

/// An aligned text table with a header, a rule and a closing row count.
pub fn table(env: &Envelope) -> String {
    table_with(env, cell)
}

/// [`table`] with fractional numbers rounded for reading (the shell's; the envelope keeps full
/// precision).
pub fn table_for_reading(env: &Envelope) -> String {
    table_with(env, cell_for_reading)
}

fn table_with(env: &Envelope, cell: fn(&Value) -> String) -> String {
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

#[cfg(test)]
mod tests {
    use super::round_for_reading;

    #[test]
    fn numbers_are_rounded_to_six_significant_digits() {
        assert_eq!(round_for_reading(337.37), "337.37");
        assert_eq!(round_for_reading(1012.1100000000001), "1012.11");
        assert_eq!(round_for_reading(0.123456789), "0.123457");
        assert_eq!(round_for_reading(0.000123456789), "0.000123457");
        assert_eq!(round_for_reading(12345.678912), "12345.7");
        assert_eq!(round_for_reading(1234567.89), "1234568");
        assert_eq!(round_for_reading(-2.5), "-2.5");
        assert_eq!(round_for_reading(0.0000123456), "1.23456e-5");
        assert_eq!(round_for_reading(-0.000012), "-1.2e-5");
        assert_eq!(round_for_reading(0.0), "0");
    }
}
