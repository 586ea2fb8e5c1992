//! Bind parameters (docs/params.md): `$name` in a statement's text stands for a value given
//! beside the text (MCP `params`, the HTTP body's `params`, `--param name=value`). The text is
//! tokenized first; then each `$name` token becomes one literal token of the value's type (a
//! string, an integer, a decimal or a boolean) before the parser reads the tokens, so a value
//! is never spliced into the text and can only ever be a literal: a string holding `" OR 1=1`
//! is that string. The statement parsed (its canonical text, its plan cache key, a bundle's
//! address) holds the bound values.

use serde_json::Value;

use crate::error::{Error, Result};
use crate::syntax::lexer::{Token, TokenKind};

/// Parameter values by name (without the `$`).
pub type Params = serde_json::Map<String, Value>;

/// Binds every `$name` token of `tokens` to its value in `params`. A `$name` without a value
/// is a parse_error at its position; a value that is not one string, number or boolean a
/// type_error at the position of the `$name` it would bind; a value no `$name` uses a
/// parse_error naming it (it has no position in the text).
pub fn bind(tokens: &mut [Token], params: &Params) -> Result<()> {
    let mut used = std::collections::HashSet::new();
    for token in tokens.iter_mut() {
        if token.kind != TokenKind::Param {
            continue;
        }
        let name = &token.text[1..];
        let Some(value) = params.get(name) else {
            return Err(
                Error::parse(format!("parameter {} has no value", token.text), token.span)
                    .with_help(format!("give it in params, e.g. {{\"{name}\": \"…\"}}")),
            );
        };
        used.insert(name.to_string());
        let (kind, text) = literal(value).ok_or_else(|| {
            Error::type_error(format!(
                "parameter {} is {}: a parameter is one string, number or boolean",
                token.text,
                kind_of(value)
            ))
            .at(token.span)
        })?;
        token.kind = kind;
        token.text = text;
    }
    let mut extra: Vec<String> = params
        .keys()
        .filter(|k| !used.contains(*k))
        .map(|k| format!("${k}"))
        .collect();
    extra.sort();
    let message = match extra.as_slice() {
        [] => return Ok(()),
        [one] => format!("parameter {one} is given but the statement has no {one}"),
        many => format!(
            "parameters {} are given but the statement has none of them",
            many.join(", ")
        ),
    };
    Err(Error::new(crate::error::ErrorKind::Parse, message)
        .with_help("remove it from params, or use it in the statement as $name"))
}

/// The literal token a value binds as, with its source text: `None` for a null, a list or an
/// object.
fn literal(value: &Value) -> Option<(TokenKind, String)> {
    Some(match value {
        Value::String(s) => (TokenKind::Str(s.clone()), crate::syntax::format::quote(s)),
        Value::Bool(b) => (TokenKind::Word, b.to_string()),
        Value::Number(n) if n.is_i64() || n.is_u64() => (TokenKind::Integer, n.to_string()),
        Value::Number(n) => {
            // Rust prints an f64 without an exponent; a whole value gets its `.0` so that it
            // stays a decimal, as the lexer reads `-?[0-9]+.[0-9]+`.
            let mut text = n.as_f64()?.to_string();
            if !text.contains('.') {
                text.push_str(".0");
            }
            (TokenKind::Decimal, text)
        }
        Value::Null | Value::Array(_) | Value::Object(_) => return None,
    })
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
        _ => "a value",
    }
}

/// Parameters given on a command line as `name=value`: a value that reads as a JSON number,
/// `true`, `false` or a JSON string (`"5"`) is that value; any other text is a string. A
/// name given twice, or without `=`, is a type_error.
pub fn from_pairs(pairs: &[String]) -> Result<Params> {
    let mut params = Params::new();
    for pair in pairs {
        let Some((name, value)) = pair.split_once('=') else {
            return Err(Error::type_error(format!(
                "--param {pair:?} is not name=value"
            )));
        };
        let name = name.strip_prefix('$').unwrap_or(name);
        if !is_name(name) {
            return Err(Error::type_error(format!(
                "--param {pair:?}: {name:?} is not a parameter name ([A-Za-z_][A-Za-z0-9_]*)"
            )));
        }
        let value = match serde_json::from_str::<Value>(value) {
            Ok(v @ (Value::Number(_) | Value::Bool(_) | Value::String(_))) => v,
            _ => Value::String(value.to_string()),
        };
        if params.insert(name.to_string(), value).is_some() {
            return Err(Error::type_error(format!("--param {name} is given twice")));
        }
    }
    Ok(params)
}

/// Whether `name` is a parameter's name: what the lexer reads after `$`.
fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syntax::parser::parse_with;
    use serde_json::json;

    fn params(v: Value) -> Params {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn each_value_binds_as_the_literal_written_by_hand() {
        let p = params(json!({"e": "page_view", "n": 7, "x": 2.5, "w": 3.0, "b": true, "neg": -4}));
        let bound = parse_with(
            "FROM events WHERE event_name = $e AND properties.amount > $x AND properties.n != $w \
             AND properties.ok = $b AND properties.d >= $neg DURING LAST $n d RETURN count",
            &p,
        )
        .unwrap();
        let by_hand = crate::syntax::parse(
            "FROM events WHERE event_name = \"page_view\" AND properties.amount > 2.5 AND \
             properties.n != 3.0 AND properties.ok = true AND properties.d >= -4 \
             DURING LAST 7 d RETURN count",
        )
        .unwrap();
        assert_eq!(bound, by_hand);
        assert_eq!(bound.to_string(), by_hand.to_string());
    }

    #[test]
    fn a_value_is_one_literal_whatever_it_holds() {
        let p = params(json!({"e": "x\" OR event_name = \"y"}));
        let bound = parse_with("FROM events WHERE event_name = $e RETURN count", &p).unwrap();
        let text = bound.to_string();
        assert!(
            text.contains(r#"event_name = "x\" OR event_name = \"y""#),
            "{text}"
        );
        // The canonical text parses back to the same statement, with no parameter left.
        assert_eq!(crate::syntax::parse(&text).unwrap(), bound);
    }

    #[test]
    fn missing_extra_and_wrong_values_are_errors_with_positions() {
        let q = "FROM events\nWHERE event_name = $e RETURN count";
        let e = parse_with(q, &Params::new()).unwrap_err();
        assert_eq!(e.code(), "parse_error");
        let span = e.span.unwrap();
        assert_eq!((span.line, span.column), (2, 20));
        assert!(e.to_string().contains("$e"), "{e}");

        let e = parse_with(q, &params(json!({"e": "a", "zz": 1, "yy": 2}))).unwrap_err();
        assert_eq!(e.code(), "parse_error");
        assert!(e.to_string().contains("$yy, $zz"), "{e}");

        for bad in [json!(null), json!([1, 2]), json!({"a": 1})] {
            let e = parse_with(q, &params(json!({ "e": bad }))).unwrap_err();
            assert_eq!(e.code(), "type_error", "{bad}");
            assert_eq!(e.span.map(|s| (s.line, s.column)), Some((2, 20)));
        }
        // A string where a name is expected is a string, and the parser says so there.
        let e = parse_with("FROM $t RETURN count", &params(json!({"t": "events"}))).unwrap_err();
        assert_eq!(e.code(), "parse_error");
        assert_eq!(e.span.map(|s| s.column), Some(6));
    }

    #[test]
    fn command_line_pairs_read_json_scalars_and_else_text() {
        let p = from_pairs(&[
            "a=5".into(),
            "$b=\"5\"".into(),
            "c=page view".into(),
            "d=true".into(),
            "e=1.5".into(),
            "f=[1]".into(),
            "g=".into(),
        ])
        .unwrap();
        assert_eq!(
            Value::Object(p),
            json!({"a": 5, "b": "5", "c": "page view", "d": true, "e": 1.5, "f": "[1]", "g": ""})
        );
        assert!(from_pairs(&["a".into()]).is_err());
        assert!(from_pairs(&["1a=2".into()]).is_err());
        assert!(from_pairs(&["a=1".into(), "a=2".into()]).is_err());
    }
}
