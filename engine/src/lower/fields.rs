//! Resolution of field paths against a table schema, and the typing of literals against them.
//!
//! `properties.plan` reads a struct field, a map key or a JSON key, whichever the column is
//! (DESIGN.md §3); a missing key is NULL. Literals take the field's type: a text literal against
//! a numeric field is parsed as a number (`properties.amount = "49"` matches 49 and 49.0), a
//! numeric literal against a text field compares the text cast to a number, a text literal
//! against a timestamp is an RFC 3339 instant.

use chrono::DateTime;
use datafusion::arrow::datatypes::{DataType, TimeUnit as ArrowTimeUnit};
use datafusion::common::{Column, DFSchema, ScalarValue};
use datafusion::functions::core::expr_fn::get_field;
use datafusion::logical_expr::{Expr, ExprSchemable, cast, lit, try_cast};
use signalql_udfs::scalar::json_get::json_get_text;

use crate::error::{Error, Result};
use crate::syntax::ast::{FieldRef, Literal, Span};

/// The type every timestamp is compared and bucketed in.
pub fn ts_type() -> DataType {
    DataType::Timestamp(ArrowTimeUnit::Microsecond, Some("UTC".into()))
}

/// A timestamp literal of [`ts_type`].
pub fn ts_lit(micros: i64) -> Expr {
    lit(ScalarValue::TimestampMicrosecond(
        Some(micros),
        Some("UTC".into()),
    ))
}

/// A column reference by exact name (names may contain dots and parentheses).
pub fn column(name: &str) -> Expr {
    Expr::Column(Column::from_name(name))
}

/// The columns that hold keyed values (struct, map or JSON text), per DESIGN.md §3.
pub const PROPERTY_BAGS: [&str; 3] = ["properties", "traits", "attributes"];

/// A field resolved to an expression and its type.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub expr: Expr,
    pub data_type: DataType,
    /// A value from inside a property bag (struct field, map or JSON key), whose text may
    /// hold numbers: numeric literals and numeric aggregates cast it. A top-level text
    /// column (`user_id`) is text: `user_id = 5` compares with the text "5".
    pub dynamic: bool,
    /// A key of JSON text, whose values have no declared type (docs/mapping.md): whether it
    /// orders as numbers is decided by the table. A struct or map child is of its declared
    /// type.
    pub untyped: bool,
}

/// The dotted text of a field, for messages.
pub fn field_text(f: &FieldRef) -> String {
    match f {
        FieldRef::Path(p) => p.join("."),
        FieldRef::Signal(n) => format!("signal({n})"),
        FieldRef::Probability(n) => format!("probability({n})"),
        FieldRef::SemanticMatch(t) => {
            format!("semantic_match({})", crate::syntax::format::quote(t))
        }
    }
}

/// Resolve `field` against `schema` (the schema of the scanned table).
pub fn resolve(field: &FieldRef, schema: &DFSchema, span: Span) -> Result<Resolved> {
    let path = match field {
        FieldRef::Path(p) => p,
        // Joined in by the lowering (see `enrich::join_signals`) as columns of these names.
        FieldRef::Signal(_) | FieldRef::Probability(_) => {
            let name = field_text(field);
            return match schema.qualified_field_with_unqualified_name(&name) {
                Ok((_, f)) => Ok(Resolved {
                    expr: column(&name),
                    data_type: f.data_type().clone(),
                    dynamic: matches!(field, FieldRef::Signal(_)),
                    untyped: false,
                }),
                Err(_) => Err(Error::capability(&name, "v0.3-extended").at(span)),
            };
        }
        FieldRef::SemanticMatch(text) => return semantic_match(text, schema, span),
    };
    let Some((first, rest)) = path.split_first() else {
        return Err(Error::internal("empty field path").at(span));
    };
    let Some((_, f)) = schema.qualified_field_with_unqualified_name(first).ok() else {
        let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        return Err(Error::unknown_field(format!(
            "unknown field `{}`: the table has no column `{first}` (columns: {})",
            path.join("."),
            names.join(", ")
        ))
        .at(span));
    };
    let mut expr = column(first);
    let mut dt = f.data_type().clone();
    if first == "timestamp" && matches!(dt, DataType::Timestamp(_, _)) && dt != ts_type() {
        expr = cast(expr, ts_type());
        dt = ts_type();
    }
    // Text is read as JSON only under the property-bag columns (where ingest also stores
    // nested objects as JSON text); `event_name.x` is an error, not a silent NULL.
    let json_keys = PROPERTY_BAGS.contains(&first.as_str());
    let mut untyped = false;
    for key in rest {
        (expr, dt) = match &dt {
            DataType::Struct(fields) => match fields.iter().find(|f| f.name() == key) {
                Some(child) => (get_field(expr, key.as_str()), child.data_type().clone()),
                // A key that no file has is NULL, as a missing map or JSON key is.
                None => (lit(ScalarValue::Utf8(None)), DataType::Utf8),
            },
            DataType::Map(entries, _) => {
                let value_type = match entries.data_type() {
                    DataType::Struct(kv) if kv.len() == 2 => kv[1].data_type().clone(),
                    other => {
                        return Err(
                            Error::type_error(format!("unexpected map layout {other}")).at(span)
                        );
                    }
                };
                (get_field(expr, key.as_str()), value_type)
            }
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View if json_keys => {
                let text = if dt == DataType::Utf8 {
                    expr
                } else {
                    cast(expr, DataType::Utf8)
                };
                untyped = true;
                (json_get_text(text, lit(key.as_str())), DataType::Utf8)
            }
            DataType::Null => (lit(ScalarValue::Utf8(None)), DataType::Utf8),
            other => {
                return Err(Error::unknown_field(format!(
                    "unknown field `{}`: `{}` has type {other} and no keys",
                    path.join("."),
                    first
                ))
                .at(span));
            }
        };
    }
    Ok(Resolved {
        expr,
        data_type: dt,
        dynamic: !rest.is_empty(),
        untyped,
    })
}

/// Attribute names read as an entity's title (lexical-v1 weight 3) and summary (weight 2);
/// every text attribute is also its other text (weight 1).
const TITLE_KEYS: [&str; 2] = ["name", "title"];
const SUMMARY_KEYS: [&str; 2] = ["description", "summary"];

/// `semantic_match("text")`: the lexical-v1 relevance of the row's entity attributes to the
/// text, as a number in [0, 1] (the score divided by 1 000 000; docs/entities.md).
fn semantic_match(text: &str, schema: &DFSchema, span: Span) -> Result<Resolved> {
    use datafusion::functions::string::expr_fn::concat_ws;
    use datafusion::functions_nested::expr_fn::{array_to_string, map_values};
    use signalql_udfs::scalar::lexical::lexical_score;
    let is_entity = ["entity_type", "entity_id"]
        .iter()
        .all(|c| schema.qualified_field_with_unqualified_name(c).is_ok());
    let attributes = schema
        .qualified_field_with_unqualified_name("attributes")
        .ok()
        .filter(|_| is_entity);
    let Some((_, attributes)) = attributes else {
        return Err(Error::type_error(
            "semantic_match() scores an entity's text attributes: use it with FROM entity(type)",
        )
        .at(span));
    };
    let bag = column("attributes");
    let join = |parts: Vec<Expr>| {
        if parts.is_empty() {
            lit("")
        } else {
            concat_ws(lit("\n"), parts)
        }
    };
    let (title, summary, other) = match attributes.data_type() {
        DataType::Struct(fields) => {
            let text_keys: Vec<&str> = fields
                .iter()
                .filter(|f| is_text(f.data_type()))
                .map(|f| f.name().as_str())
                .collect();
            let pick = |keys: &[&str]| {
                join(
                    text_keys
                        .iter()
                        .filter(|k| keys.contains(k))
                        .map(|k| get_field(bag.clone(), *k))
                        .collect(),
                )
            };
            (pick(&TITLE_KEYS), pick(&SUMMARY_KEYS), pick(&text_keys))
        }
        DataType::Map(_, _) => {
            let pick = |keys: &[&str]| {
                join(
                    keys.iter()
                        .map(|k| cast(get_field(bag.clone(), *k), DataType::Utf8))
                        .collect(),
                )
            };
            (
                pick(&TITLE_KEYS),
                pick(&SUMMARY_KEYS),
                array_to_string(map_values(bag.clone()), lit("\n")),
            )
        }
        other => {
            return Err(Error::type_error(format!(
                "semantic_match() reads the text attributes of a struct or map `attributes` \
                 column; this one is {other}"
            ))
            .at(span));
        }
    };
    let score = lexical_score(lit(text), title, summary, other);
    Ok(Resolved {
        expr: cast(score, DataType::Float64) / lit(1_000_000.0),
        data_type: DataType::Float64,
        dynamic: false,
        untyped: false,
    })
}

pub fn is_text(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

pub fn is_numeric(dt: &DataType) -> bool {
    dt.is_numeric()
}

fn literal_text(l: &Literal) -> String {
    match l {
        Literal::String(s) => format!("{s:?}"),
        Literal::Integer(i) => i.to_string(),
        Literal::Decimal(d) => format!("{d:?}"),
        Literal::Boolean(b) => b.to_string(),
    }
}

/// Type `value` against a field of type `dt`, returning the (possibly cast) field expression
/// and the literal expression to compare it with.
pub fn coerce_literal(field: &Resolved, value: &Literal, span: Span) -> Result<(Expr, Expr)> {
    let mismatch = |what: &str| {
        Error::type_error(format!(
            "cannot compare a field of type {} with {} ({what})",
            field.data_type,
            literal_text(value)
        ))
        .at(span)
    };
    let dt = &field.data_type;
    let e = field.expr.clone();
    if is_numeric(dt) {
        return match value {
            Literal::Integer(i) => Ok((e, lit(*i))),
            Literal::Decimal(d) => Ok((e, lit(*d))),
            Literal::String(s) => {
                let t = s.trim();
                if let Ok(i) = t.parse::<i64>() {
                    Ok((e, lit(i)))
                } else if let Ok(f) = t.parse::<f64>() {
                    Ok((e, lit(f)))
                } else {
                    Err(mismatch("the text is not a number"))
                }
            }
            Literal::Boolean(_) => Err(mismatch("a boolean is not a number")),
        };
    }
    if is_text(dt) || *dt == DataType::Null {
        return match value {
            Literal::String(s) => Ok((e, lit(s.as_str()))),
            Literal::Integer(i) if field.dynamic => {
                Ok((try_cast(e, DataType::Float64), lit(*i as f64)))
            }
            Literal::Decimal(d) if field.dynamic => Ok((try_cast(e, DataType::Float64), lit(*d))),
            Literal::Integer(i) => Ok((e, lit(i.to_string()))),
            Literal::Decimal(d) => {
                Ok((e, lit(crate::syntax::ast::Literal::Decimal(*d).to_string())))
            }
            Literal::Boolean(b) => Ok((e, lit(if *b { "true" } else { "false" }))),
        };
    }
    match (dt, value) {
        (DataType::Boolean, Literal::Boolean(b)) => Ok((e, lit(*b))),
        (DataType::Boolean, Literal::String(s)) if s == "true" || s == "false" => {
            Ok((e, lit(s == "true")))
        }
        (DataType::Boolean, _) => Err(mismatch("expected true or false")),
        (DataType::Timestamp(_, _), Literal::String(s)) => {
            let micros = parse_instant(s).ok_or_else(|| {
                mismatch("expected an RFC 3339 instant such as \"2026-06-13T00:00:00Z\" or a date")
            })?;
            let e = if *dt == ts_type() {
                e
            } else {
                cast(e, ts_type())
            };
            Ok((e, ts_lit(micros)))
        }
        (DataType::Date32 | DataType::Date64, Literal::String(s)) => {
            Ok((e, cast(lit(s.as_str()), dt.clone())))
        }
        _ => Err(mismatch("unsupported comparison")),
    }
}

/// An RFC 3339 instant, or a date `YYYY-MM-DD` meaning its UTC midnight, in microseconds.
fn parse_instant(s: &str) -> Option<i64> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.timestamp_micros());
    }
    let d = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
    Some(d.and_hms_opt(0, 0, 0)?.and_utc().timestamp_micros())
}

/// The type of `expr` over `schema`, as an engine error.
pub fn type_of(expr: &Expr, schema: &DFSchema) -> Result<DataType> {
    expr.get_type(schema).map_err(Error::from)
}
