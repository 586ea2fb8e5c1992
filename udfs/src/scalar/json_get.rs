//! `json_get_text(json, key)`: the value of `key` in a JSON-object text column, as text.
//!
//! SignalQL: `properties.plan` when the properties column holds JSON text lowers to
//! `json_get_text(properties, 'plan')`. A string value comes back without quotes, a number or
//! boolean as its JSON text (`49`, `49.5`, `true`), an object or array as compact JSON text (so
//! nested paths chain), and a JSON null, a missing key, a NULL or non-object input as NULL.
//! Malformed JSON reads as NULL rather than failing the query: one bad row must not hide the
//! rest, and a missing key is NULL by the data model.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use serde_json::Value;

pub const NAME: &str = "json_get_text";

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JsonGetText {
    signature: Signature,
}

impl Default for JsonGetText {
    fn default() -> Self {
        Self {
            signature: Signature::exact(
                vec![DataType::Utf8, DataType::Utf8],
                Volatility::Immutable,
            ),
        }
    }
}

static JSON_GET_TEXT: LazyLock<Arc<ScalarUDF>> =
    LazyLock::new(|| Arc::new(ScalarUDF::from(JsonGetText::default())));

pub fn json_get_text_udf() -> Arc<ScalarUDF> {
    Arc::clone(&JSON_GET_TEXT)
}

/// `json_get_text(json, key)` as an [`Expr`].
pub fn json_get_text(json: Expr, key: Expr) -> Expr {
    json_get_text_udf().call(vec![json, key])
}

/// The text of `key` in the JSON object `doc` (see the module docs). The object is read
/// once without being built: every other member is skipped as it is parsed (still checked,
/// so malformed JSON reads as NULL), and only the key's value is made. A key given twice
/// reads its last value, as a parsed object keeps it.
pub fn extract(doc: &str, key: &str) -> Option<String> {
    use serde::de::DeserializeSeed;
    let mut de = serde_json::Deserializer::from_str(doc);
    let value = Member(key).deserialize(&mut de).ok()??;
    de.end().ok()?;
    match value {
        Value::Null => None,
        Value::String(s) => Some(s),
        other => Some(other.to_string()),
    }
}

/// Reads a JSON object keeping the value of one member: `None` when the object has no such
/// member; an error when the text is not an object.
struct Member<'k>(&'k str);

impl<'de> serde::de::DeserializeSeed<'de> for Member<'_> {
    type Value = Option<Value>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Member<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(name) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if name == self.0 {
                found = Some(map.next_value::<Value>()?);
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

impl ScalarUDFImpl for JsonGetText {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [doc, key] = args.args.as_slice() else {
            return exec_err!("json_get_text takes two arguments");
        };
        let key = match key {
            ColumnarValue::Scalar(ScalarValue::Utf8(Some(k))) => k.clone(),
            _ => return exec_err!("json_get_text: the key must be a text literal"),
        };
        match doc {
            ColumnarValue::Scalar(ScalarValue::Utf8(d)) => Ok(ColumnarValue::Scalar(
                ScalarValue::Utf8(d.as_deref().and_then(|d| extract(d, &key))),
            )),
            ColumnarValue::Scalar(other) => exec_err!("json_get_text: unexpected input {other:?}"),
            ColumnarValue::Array(arr) => {
                let Some(strings) = arr.as_string_opt::<i32>() else {
                    return exec_err!("json_get_text expects utf8, got {}", arr.data_type());
                };
                let mut out = StringBuilder::with_capacity(strings.len(), strings.len() * 8);
                for d in strings.iter() {
                    out.append_option(d.and_then(|d| extract(d, &key)));
                }
                Ok(ColumnarValue::Array(Arc::new(out.finish()) as ArrayRef))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::StringArray;
    use datafusion::arrow::datatypes::Field;

    #[test]
    fn extracts_each_kind_of_value() {
        let doc = r#"{"plan":"pro","amount":49.5,"n":3,"ok":true,"nil":null,"nested":{"a":[1,2]}}"#;
        assert_eq!(extract(doc, "plan").as_deref(), Some("pro"));
        assert_eq!(extract(doc, "amount").as_deref(), Some("49.5"));
        assert_eq!(extract(doc, "n").as_deref(), Some("3"));
        assert_eq!(extract(doc, "ok").as_deref(), Some("true"));
        assert_eq!(extract(doc, "nil"), None);
        assert_eq!(extract(doc, "missing"), None);
        assert_eq!(extract(doc, "nested").as_deref(), Some(r#"{"a":[1,2]}"#));
        assert_eq!(extract("not json", "plan"), None);
        assert_eq!(extract("[1,2]", "plan"), None);
    }

    /// The key's text as a whole parsed object gives it (the formulation `extract` replaced).
    fn parsed(doc: &str, key: &str) -> Option<String> {
        let Ok(Value::Object(map)) = serde_json::from_str::<Value>(doc) else {
            return None;
        };
        match map.get(key)? {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            "[a-c\\\"é ]{0,4}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                proptest::collection::vec(("[a-c]{1,2}", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Any document (objects with repeated keys, other JSON, cut-off text) reads as the
        /// parsed object reads.
        #[test]
        fn extract_reads_as_the_parsed_object(
            members in proptest::collection::vec(("[a-c]{1,2}", json_value()), 0..6),
            key in "[a-c]{1,2}",
            cut in proptest::option::of(0usize..64),
            other in json_value(),
        ) {
            // Written by hand, so a key may come twice.
            let body: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{}: {v}", Value::from(k.as_str())))
                .collect();
            let mut doc = format!("{{ {} }}", body.join(", "));
            if let Some(cut) = cut {
                doc.truncate(doc.floor_char_boundary(cut));
            }
            proptest::prop_assert_eq!(extract(&doc, &key), parsed(&doc, &key), "{}", doc);
            let other = other.to_string();
            proptest::prop_assert_eq!(extract(&other, &key), parsed(&other, &key));
        }
    }

    #[test]
    fn array_invocation_keeps_nulls() {
        let input: ArrayRef = Arc::new(StringArray::from(vec![
            Some(r#"{"k":"a"}"#),
            None,
            Some(r#"{"x":1}"#),
        ]));
        let args = ScalarFunctionArgs {
            args: vec![
                ColumnarValue::Array(input),
                ColumnarValue::Scalar(ScalarValue::Utf8(Some("k".into()))),
            ],
            arg_fields: vec![
                Arc::new(Field::new("p", DataType::Utf8, true)),
                Arc::new(Field::new("k", DataType::Utf8, false)),
            ],
            number_rows: 3,
            return_field: Arc::new(Field::new("r", DataType::Utf8, true)),
            config_options: Arc::new(Default::default()),
        };
        let ColumnarValue::Array(out) = JsonGetText::default().invoke_with_args(args).unwrap()
        else {
            panic!("expected an array")
        };
        let out = out.as_string::<i32>();
        assert_eq!(out.iter().collect::<Vec<_>>(), vec![Some("a"), None, None]);
    }
}
