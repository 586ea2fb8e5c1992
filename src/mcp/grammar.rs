//! The language, taught to a model: the `signalql://grammar` resource (grammar.md, a compact
//! reference with worked examples, and the reserved words from the parser's own table) and
//! the `signalql-primer` prompt (that reference, the served dataset's catalogue from
//! DESCRIBE, and the model's question when it gives one).
//!
//! The reference cannot drift from the parser unnoticed: a unit test fails when a word the
//! parser accepts (its reserved words, and every keyword its source matches) or an error
//! code the engine gives is missing from the hand-written text, and tests/it/mcp.rs runs
//! every example on the bundled sample dataset.

use serde_json::Value;
use signalql_engine::syntax::keywords::RESERVED;

use crate::Engine;
use crate::request::DescribeRequest;

/// The resource's address.
pub const GRAMMAR_URI: &str = "signalql://grammar";
/// The prompt's name.
pub const PRIMER: &str = "signalql-primer";

/// The hand-written reference.
const REFERENCE: &str = include_str!("grammar.md");

/// The reference as the resource gives it: the hand-written text, then the reserved words.
pub fn reference() -> String {
    let words: Vec<String> = RESERVED.iter().map(|w| format!("`{w}`")).collect();
    format!(
        "{REFERENCE}\n## Reserved words\n\nNot a bare field name (qualify it as a dotted path): \
         {}.\n",
        words.join(", ")
    )
}

/// The statements of the reference's examples (each a fenced `signalql` block), in order.
pub fn examples() -> Vec<String> {
    let mut out = Vec::new();
    let mut block: Option<Vec<&str>> = None;
    for line in REFERENCE.lines() {
        match (&mut block, line.trim()) {
            (None, "```signalql") => block = Some(Vec::new()),
            (Some(lines), "```") => {
                out.push(lines.join("\n"));
                block = None;
            }
            (Some(lines), _) => lines.push(line),
            (None, _) => {}
        }
    }
    out
}

/// The primer: the reference, the catalogue of `engine`'s dataset, and `question`.
pub async fn primer(engine: &Engine, question: Option<&str>) -> crate::Result<String> {
    let catalogue = DescribeRequest { target: None }.run(engine).await?;
    let catalogue = serde_json::to_value(&catalogue)
        .map_err(|e| crate::Error::internal(format!("DESCRIBE did not serialise: {e}")))?;
    let mut text = format!(
        "You will answer questions about a dataset with SignalQL, a query language for evidence \
         and context, through the signalql MCP tools (`query` runs any statement, `context` \
         builds a context bundle, `describe` lists the catalogue). Write SignalQL, not SQL. \
         The reference:\n\n{}\n# This dataset\n\n{}",
        reference(),
        summary(&catalogue)
    );
    if let Some(q) = question.filter(|q| !q.trim().is_empty()) {
        text.push_str(&format!(
            "\n# The question\n\n{q}\n\nAnswer it with SignalQL statements run through the \
             tools; cite the rows or bundle items your answer rests on.\n"
        ));
    }
    Ok(text)
}

/// DESCRIBE's records as lines: identifier, kind, description, fields with their types and
/// units, and row counts.
fn summary(envelope: &Value) -> String {
    let columns: Vec<&str> = envelope["columns"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    let at = |row: &Value, name: &str| -> Value {
        let value = columns
            .iter()
            .position(|c| *c == name)
            .map_or(Value::Null, |i| row[i].clone());
        // Nested records may arrive as JSON text.
        match &value {
            Value::String(s) if s.starts_with('[') || s.starts_with('{') => {
                serde_json::from_str(s).unwrap_or(value)
            }
            _ => value,
        }
    };
    let mut out = String::new();
    for row in envelope["rows"].as_array().into_iter().flatten() {
        let id = at(row, "identifier");
        let kind = at(row, "kind");
        out.push_str(&format!(
            "- {} ({})",
            id.as_str().unwrap_or("?"),
            kind.as_str().unwrap_or("?")
        ));
        if let Some(d) = at(row, "description").as_str().filter(|d| !d.is_empty()) {
            out.push_str(&format!(": {d}"));
        }
        let fields: Vec<String> = at(row, "fields")
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| {
                let name = f["name"].as_str().unwrap_or("?");
                let ty = f["type"].as_str().unwrap_or("?");
                match f["unit"].as_str() {
                    Some(u) => format!("{name} {ty} ({u})"),
                    None => format!("{name} {ty}"),
                }
            })
            .collect();
        if !fields.is_empty() {
            out.push_str(&format!("; fields: {}", fields.join(", ")));
        }
        if let Some(n) = at(row, "row_count").as_i64() {
            out.push_str(&format!("; {n} rows"));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `text` holds `word` as a whole word, ignoring case.
    fn mentions(text: &str, word: &str) -> bool {
        let text = text.to_ascii_lowercase();
        let word = word.to_ascii_lowercase();
        let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
        text.match_indices(&word).any(|(i, _)| {
            let before = text[..i].chars().next_back();
            let after = text[i + word.len()..].chars().next();
            !before.is_some_and(is_word) && !after.is_some_and(is_word)
        })
    }

    /// The keywords the parser's source matches: the words in `eat_kw`, `expect_kw`,
    /// `is_kw` and `is_kw_at` calls, and every all-capitals word literal (its match arms).
    fn parser_keywords() -> Vec<String> {
        let sources = [
            include_str!("../../engine/src/syntax/parser/mod.rs"),
            include_str!("../../engine/src/syntax/parser/retrieve.rs"),
            include_str!("../../engine/src/syntax/parser/context.rs"),
            include_str!("../../engine/src/syntax/parser/expr.rs"),
            include_str!("../../engine/src/syntax/parser/v01.rs"),
        ];
        let mut words = Vec::new();
        for source in sources {
            for literal in source.split('"').skip(1).step_by(2) {
                let capitals = !literal.is_empty()
                    && literal.split(' ').all(|w| {
                        !w.is_empty() && w.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                    });
                if capitals {
                    words.extend(literal.split(' ').map(str::to_string));
                }
            }
            for call in ["eat_kw(\"", "expect_kw(\"", "is_kw(\"", "is_kw_at(\""] {
                for (i, _) in source.match_indices(call) {
                    let rest = &source[i + call.len()..];
                    if let Some(end) = rest.find('"') {
                        words.push(rest[..end].to_string());
                    }
                }
            }
        }
        words.sort();
        words.dedup();
        words
    }

    /// Every reserved word and every keyword the parser matches is in the hand-written
    /// reference (not only in the generated list of reserved words).
    #[test]
    fn every_word_the_parser_accepts_is_in_the_reference() {
        let keywords = parser_keywords();
        assert!(keywords.len() > 60, "{keywords:?}");
        for k in [
            "CONTEXT",
            "EXCLUDING",
            "strict",
            "UNTRUSTED_EXTERNAL",
            "estimator",
        ] {
            assert!(
                keywords.iter().any(|w| w == k),
                "{k} not found in the parser"
            );
        }
        let missing: Vec<&str> = RESERVED
            .iter()
            .copied()
            .chain(keywords.iter().map(String::as_str))
            .filter(|w| !mentions(REFERENCE, w))
            .collect();
        assert!(missing.is_empty(), "not in src/mcp/grammar.md: {missing:?}");
        assert!(!mentions(REFERENCE, "frobnicate"));
    }

    /// Every error code the engine gives is in the reference's table of what to do.
    #[test]
    fn every_error_code_is_in_the_reference() {
        let source = include_str!("../../engine/src/error.rs");
        let codes: Vec<&str> = source
            .lines()
            .filter_map(|l| l.trim().strip_prefix("ErrorKind::"))
            .filter_map(|l| l.split("=> \"").nth(1))
            .filter_map(|l| l.split('"').next())
            .collect();
        assert!(codes.len() >= 8, "{codes:?}");
        for code in codes {
            assert!(REFERENCE.contains(&format!("| `{code}` |")), "{code}");
        }
    }

    #[test]
    fn examples_are_the_fenced_blocks() {
        let ex = examples();
        assert!(ex.len() >= 15);
        assert!(ex[0].starts_with("FROM events WHERE event_name = \"page_view\""));
        assert!(ex.iter().all(|e| !e.contains("```")));
        assert!(reference().contains("`from`, `where`"));
    }
}
