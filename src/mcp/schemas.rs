//! Each MCP tool's `outputSchema`: the JSON Schema (2020-12) its `structuredContent` has.
//! They name what a model reads first (the required fields and their types) and leave every
//! object open to more fields, so a field added to an answer does not break a client that
//! validates. tests/it/mcp_client.py validates every tool's result against these with the
//! official MCP Python SDK, which checks each result against its tool's schema.

use std::sync::Arc;

use rmcp::model::JsonObject;
use serde_json::{Value, json};

fn object(schema: Value) -> Arc<JsonObject> {
    match schema {
        Value::Object(o) => Arc::new(o),
        _ => Arc::new(JsonObject::new()),
    }
}

/// The result envelope: analytics, DESCRIBE, FIND OBJECT.
fn envelope_value() -> Value {
    json!({
        "type": "object",
        "description": "The typed result envelope: columns (name, type, unit), rows as arrays \
                        in column order, and metadata (row_count, truncated, the window, the \
                        cost, the limits)",
        "required": ["columns", "rows", "metadata"],
        "properties": {
            "columns": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name", "type"],
                    "properties": {
                        "name": {"type": "string"},
                        "type": {"type": "string"},
                        "unit": {"type": ["string", "null"]}
                    }
                }
            },
            "rows": {"type": "array", "items": {"type": "array"}},
            "metadata": {
                "type": "object",
                "required": ["row_count", "truncated"],
                "properties": {
                    "row_count": {"type": "integer", "minimum": 0},
                    "truncated": {"type": "boolean"}
                }
            }
        }
    })
}

/// A context bundle (CONTEXT FOR).
fn bundle_value() -> Value {
    json!({
        "type": "object",
        "description": "A context bundle: its address (id), the task, the packed items with \
                        their provenance, optional evidence, and metadata (budget, counts, \
                        exclusions by reason)",
        "required": ["id", "task", "items", "metadata"],
        "properties": {
            "id": {"type": "string", "pattern": "^context://"},
            "task": {"type": "string"},
            "items": {"type": "array", "items": {"type": "object"}},
            "evidence": {"type": "object"},
            "metadata": {
                "type": "object",
                "required": ["budget", "considered", "excluded", "truncated"],
                "properties": {
                    "budget": {"type": "object"},
                    "considered": {"type": "integer", "minimum": 0},
                    "excluded": {"type": "object"},
                    "truncated": {"type": "boolean"}
                }
            }
        }
    })
}

/// The explanation of a stored bundle (EXPLAIN CONTEXT).
fn explanation_value() -> Value {
    json!({
        "type": "object",
        "description": "The explanation of a stored bundle: the phases, the scores of the \
                        items, and every rejected object with its reason",
        "required": ["context", "canonical_query", "computed_at", "scorer", "budget", "phases",
                     "items", "rejected"],
        "properties": {
            "context": {"type": "string", "pattern": "^context://"},
            "canonical_query": {"type": "string"},
            "as_of": {"type": ["string", "null"]},
            "computed_at": {"type": "string"},
            "scorer": {"type": "string"},
            "budget": {"type": "object"},
            "phases": {"type": "object"},
            "items": {"type": "array"},
            "rejected": {"type": "array"}
        }
    })
}

/// The plan of a statement (EXPLAIN, EXPLAIN ANALYZE).
fn plan_value() -> Value {
    json!({
        "type": "object",
        "description": "The plan of a statement: the sources with files, bytes and rows, the \
                        logical and physical plans, the estimate and the limits; with ANALYZE \
                        also operators, pruning and actual figures",
        "required": ["canonical_query", "sources", "logical_plan", "physical_plan", "estimate",
                     "limits"],
        "properties": {
            "canonical_query": {"type": "string"},
            "sources": {"type": "array", "items": {"type": "object"}},
            "logical_plan": {"type": "string"},
            "physical_plan": {"type": "string"},
            "sql": {"type": ["string", "null"]},
            "estimate": {"type": "object"},
            "limits": {"type": "object"},
            "operators": {"type": "array"},
            "actual": {"type": "object"}
        }
    })
}

/// `query`: whichever the statement answers with.
pub fn answer() -> Arc<JsonObject> {
    object(json!({
        "type": "object",
        "description": "An analytics statement, DESCRIBE or FIND OBJECT answers with the result \
                        envelope; CONTEXT FOR with a bundle; EXPLAIN CONTEXT with the \
                        explanation; EXPLAIN with the plan",
        "anyOf": [envelope_value(), bundle_value(), explanation_value(), plan_value()]
    }))
}

pub fn envelope() -> Arc<JsonObject> {
    object(envelope_value())
}

pub fn bundle() -> Arc<JsonObject> {
    object(bundle_value())
}

pub fn explanation() -> Arc<JsonObject> {
    object(explanation_value())
}

pub fn plan() -> Arc<JsonObject> {
    object(plan_value())
}

/// `simulate`.
pub fn simulation() -> Arc<JsonObject> {
    object(json!({
        "type": "object",
        "description": "What a statement would read after pruning (files, row groups, rows, \
                        bytes) and the time expected, learnt from traced runs",
        "required": ["canonical_query", "sources", "based_on_samples"],
        "properties": {
            "canonical_query": {"type": "string"},
            "sources": {"type": "array", "items": {"type": "object"}},
            "files": {"type": ["integer", "null"]},
            "row_groups": {"type": ["integer", "null"]},
            "rows": {"type": ["integer", "null"]},
            "bytes": {"type": ["integer", "null"]},
            "expected_elapsed_ms": {"type": ["object", "null"]},
            "based_on_samples": {"type": "integer", "minimum": 0}
        }
    }))
}

/// `stats`.
pub fn statistics() -> Arc<JsonObject> {
    object(json!({
        "type": "object",
        "description": "Per estimated field, the mean absolute error, the calibration and the \
                        sample count over traced runs",
        "required": ["fields"],
        "properties": {
            "fields": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["field", "mean_absolute_error", "sample_count"],
                    "properties": {
                        "field": {"type": "string"},
                        "mean_absolute_error": {"type": "number"},
                        "sample_count": {"type": "integer", "minimum": 0}
                    }
                }
            }
        }
    }))
}

/// `watch`.
pub fn watch() -> Arc<JsonObject> {
    object(json!({
        "type": "object",
        "description": "The polls run, whether the condition held at the last, and the alert of \
                        the first poll where it held (null when none did)",
        "required": ["polls", "holds", "alert"],
        "properties": {
            "polls": {"type": "integer", "minimum": 1},
            "holds": {"type": "boolean"},
            "alert": {"type": ["object", "null"]}
        }
    }))
}

/// `format`.
pub fn canonical() -> Arc<JsonObject> {
    object(json!({
        "type": "object",
        "description": "The canonical text of the statement",
        "required": ["canonical"],
        "properties": {"canonical": {"type": "string"}}
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every schema is an object schema (MCP requires `type: object` at the top) and names
    /// the fields it requires among its properties.
    #[test]
    fn every_schema_is_an_object_whose_required_fields_are_declared() {
        let all = [
            answer(),
            envelope(),
            bundle(),
            explanation(),
            plan(),
            simulation(),
            statistics(),
            watch(),
            canonical(),
        ];
        for schema in all {
            assert_eq!(schema.get("type"), Some(&json!("object")), "{schema:?}");
            let parts: Vec<&Value> = match schema.get("anyOf") {
                Some(Value::Array(a)) => a.iter().collect(),
                _ => vec![],
            };
            let top = Value::Object((*schema).clone());
            for s in parts.into_iter().chain([&top]) {
                let props = s.get("properties").and_then(Value::as_object);
                for r in s
                    .get("required")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let r = r.as_str().unwrap();
                    assert!(props.is_some_and(|p| p.contains_key(r)), "{r} in {s}");
                }
            }
        }
    }
}
