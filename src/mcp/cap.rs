//! `[mcp] max_result_chars`: every MCP tool answer is at most that many characters of JSON
//! (default 50 000), so that one answer cannot flood a model's context.
//!
//! An answer over the cap is cut where it is a list, keeping the longest prefix that fits:
//!
//! - the result envelope (analytics, DESCRIBE, FIND OBJECT) keeps its first rows:
//!   `metadata.truncated` is true, `metadata.row_count` is the rows it holds,
//!   `metadata.rows_total` the rows the statement answered, and `metadata.narrow` says how to
//!   ask for less;
//! - a bundle keeps its first whole items (an item is never cut): `metadata.truncated`,
//!   `metadata.items_total` and `metadata.narrow`; the stored bundle at its address keeps
//!   every item, so EXPLAIN CONTEXT of it explains the whole;
//! - an explanation keeps the first of its `rejected` objects (sorted by id): `truncated`,
//!   `rejected_total` and `narrow` at its top level.
//!
//! Anything else over the cap, or an answer still over it with its list empty, is a
//! `limit_exceeded` error naming `max_result_chars`.

use serde_json::Value;

use crate::Error;

/// `max_result_chars` when `[mcp]` does not set it.
pub const DEFAULT_MAX_RESULT_CHARS: u64 = 50_000;

/// Characters of `value` as the answer's JSON text.
fn chars(value: &Value) -> usize {
    value.to_string().chars().count()
}

/// Where an answer's list is, and how a cut one is marked.
struct Cut {
    /// The list: `rows`, `items` or `rejected`.
    list: &'static str,
    /// The object the marks go in: `metadata`, or the answer itself (`None`).
    marks_in: Option<&'static str>,
    /// The mark holding the list's whole length.
    total: &'static str,
    /// What it holds, in the sentence of `narrow`.
    noun: &'static str,
    /// How to ask for less.
    advice: &'static str,
}

/// The list an answer of this shape is cut in, if any.
fn cut_of(value: &Value) -> Option<Cut> {
    let has = |k: &str| value.get(k).is_some();
    if has("columns") && has("rows") && has("metadata") {
        return Some(Cut {
            list: "rows",
            marks_in: Some("metadata"),
            total: "rows_total",
            noun: "rows",
            advice: "add LIMIT, narrow the window (DURING LAST …) or filter with WHERE, or \
                     return fewer columns",
        });
    }
    if has("id") && has("items") && has("metadata") {
        return Some(Cut {
            list: "items",
            marks_in: Some("metadata"),
            total: "items_total",
            noun: "items",
            advice: "lower BUDGET or MAX OBJECTS; the stored bundle at its address holds \
                     every item",
        });
    }
    if has("context") && has("rejected") {
        return Some(Cut {
            list: "rejected",
            marks_in: None,
            total: "rejected_total",
            noun: "rejected objects",
            advice: "the rejected list is sorted by object id; ask CONTEXT FOR with a \
                     narrower USING PROJECT or MAX AGE for a shorter one",
        });
    }
    None
}

/// `value` with its list cut to its first `keep` entries and marked so.
fn cut(value: &Value, c: &Cut, keep: usize, total: usize, max: usize) -> Value {
    let mut v = value.clone();
    if let Some(Value::Array(list)) = v.get_mut(c.list) {
        list.truncate(keep);
    }
    let narrow = format!(
        "This answer holds {keep} of {total} {} to stay within [mcp] max_result_chars \
         ({max} characters): {}.",
        c.noun, c.advice
    );
    let marks = match c.marks_in {
        Some(k) => v.get_mut(k),
        None => Some(&mut v),
    };
    if let Some(Value::Object(m)) = marks {
        m.insert("truncated".into(), Value::Bool(true));
        if c.list == "rows" {
            m.insert("row_count".into(), keep.into());
        }
        m.insert(c.total.into(), total.into());
        m.insert("narrow".into(), narrow.into());
    }
    v
}

/// `value` as it is when its JSON is at most `max` characters, else cut to fit (see the
/// module's documentation), or a `limit_exceeded` error when it cannot be.
pub fn cap(value: Value, max: u64) -> crate::Result<Value> {
    let length = chars(&value);
    if length as u64 <= max {
        return Ok(value);
    }
    let max_chars = usize::try_from(max).unwrap_or(usize::MAX);
    let too_long = |length: usize| {
        Error::limit("max_result_chars", max, length as u64).with_help(
            "the answer is longer than [mcp] max_result_chars in signalql.toml allows; ask \
             for less (LIMIT, a narrower window, fewer columns, a smaller BUDGET)",
        )
    };
    let Some(c) = cut_of(&value) else {
        return Err(too_long(length));
    };
    let total = value
        .get(c.list)
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    // The most entries that fit: `fits(0)` is checked first, then a binary search (the length
    // grows with the entries kept).
    let fits = |keep: usize| chars(&cut(&value, &c, keep, total, max_chars)) <= max_chars;
    if !fits(0) {
        return Err(too_long(length));
    }
    let (mut lo, mut hi) = (0, total);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Ok(cut(&value, &c, lo, total, max_chars))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn envelope(rows: usize) -> Value {
        let rows: Vec<Value> = (0..rows)
            .map(|i| json!([format!("path-{i:04}"), i]))
            .collect();
        json!({
            "columns": [{"name": "path", "type": "string"}, {"name": "count", "type": "integer"}],
            "rows": rows,
            "metadata": {"row_count": rows.len(), "truncated": false}
        })
    }

    #[test]
    fn an_answer_within_the_cap_is_unchanged() {
        let v = envelope(10);
        assert_eq!(cap(v.clone(), chars(&v) as u64).unwrap(), v);
    }

    /// The rows kept are the most that fit: one more would not (checked by length, not by
    /// the search that found them).
    #[test]
    fn an_envelope_keeps_the_most_rows_that_fit_and_says_so() {
        let v = envelope(500);
        assert!(chars(&v) > 8_000);
        for max in [400u64, 1_000, 4_321, 7_999] {
            let got = cap(v.clone(), max).unwrap();
            let kept = got["rows"].as_array().unwrap().len();
            assert!(chars(&got) as u64 <= max, "{max}");
            assert_eq!(got["rows"], json!(v["rows"].as_array().unwrap()[..kept]));
            assert_eq!(got["metadata"]["truncated"], true);
            assert_eq!(got["metadata"]["row_count"], kept);
            assert_eq!(got["metadata"]["rows_total"], 500);
            let narrow = got["metadata"]["narrow"].as_str().unwrap();
            assert!(narrow.contains(&format!("{kept} of 500 rows")), "{narrow}");
            assert!(narrow.contains("LIMIT"), "{narrow}");
            let mut one_more = v.clone();
            one_more["rows"] = json!(v["rows"].as_array().unwrap()[..kept + 1]);
            let longer = cut(&one_more, &cut_of(&v).unwrap(), kept + 1, 500, max as usize);
            assert!(
                chars(&longer) as u64 > max,
                "{max}: {kept} + 1 rows would fit"
            );
        }
    }

    #[test]
    fn a_bundle_keeps_whole_items() {
        let items: Vec<Value> = (0..20)
            .map(|i| json!({"object_id": format!("o{i}"), "content": "x".repeat(300)}))
            .collect();
        let b = json!({"id": "context://ctx_1", "task": "t", "items": items,
                       "metadata": {"truncated": false, "considered": 20}});
        let got = cap(b.clone(), 2_000).unwrap();
        let kept = got["items"].as_array().unwrap();
        assert!(!kept.is_empty() && kept.len() < 20);
        assert_eq!(kept[..], b["items"].as_array().unwrap()[..kept.len()]);
        assert_eq!(got["metadata"]["items_total"], 20);
        assert_eq!(got["metadata"]["truncated"], true);
        assert_eq!(got["id"], b["id"]);
    }

    #[test]
    fn an_explanation_keeps_its_first_rejected_objects() {
        let rejected: Vec<Value> = (0..300)
            .map(|i| json!({"object_id": format!("o{i:03}"), "reason": "max_objects"}))
            .collect();
        let x = json!({"context": "context://ctx_1", "phases": {}, "items": [],
                       "rejected": rejected});
        let got = cap(x.clone(), 3_000).unwrap();
        let kept = got["rejected"].as_array().unwrap();
        assert!(!kept.is_empty() && kept.len() < 300);
        assert_eq!(kept[..], x["rejected"].as_array().unwrap()[..kept.len()]);
        assert_eq!(got["rejected_total"], 300);
        assert_eq!(got["truncated"], true);
        assert!(chars(&got) <= 3_000);
    }

    #[test]
    fn what_cannot_be_cut_is_a_limit_error() {
        let plan = json!({"logical_plan": "x".repeat(100)});
        let e = cap(plan, 50).unwrap_err();
        assert_eq!(e.code(), "limit_exceeded");
        // An envelope whose columns alone are over the cap.
        let e = cap(envelope(3), 20).unwrap_err();
        assert_eq!(e.code(), "limit_exceeded");
    }
}
