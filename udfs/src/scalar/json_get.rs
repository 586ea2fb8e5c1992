//! `json_get_text(json, key)`: the value of `key` in a JSON-object text column, as text.
//!
//! SignalQL: `properties.plan` when the properties column holds JSON text lowers to
//! `json_get_text(properties, 'plan')`. A string value comes back without quotes, a number or
//! boolean as its JSON text (`49`, `49.5`, `true`), an object or array as compact JSON text (so
//! nested paths chain), and a JSON null, a missing key, a NULL or non-object input as NULL.
//! Malformed JSON reads as NULL rather than failing the query: one bad row must not hide the
//! rest, and a missing key is NULL by the data model.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, StringArray, StringBuilder,
};
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
    let mut text = String::new();
    member(doc, key, true)?.write(&mut text).ok()?;
    Some(text)
}

/// Whether `json_get_text(doc, key)` cast to a double is a number: `None` when that text is
/// NULL, else whether Arrow's cast reads it. A JSON number always does, a string when its
/// text is a number, a boolean, object or array never; the value is classified as it is
/// parsed, without being written out as text (the numeric-key count of docs/mapping.md asks
/// this of every row of a table).
pub fn is_number(doc: &str, key: &str) -> Option<bool> {
    use datafusion::arrow::compute::kernels::cast_utils::Parser;
    use datafusion::arrow::datatypes::Float64Type;
    Some(match member(doc, key, false)? {
        Read::Null => return None,
        Read::Text(s) => Float64Type::parse(&s).is_some(),
        Read::Int(_) | Read::UInt(_) | Read::Float(_) => true,
        Read::Bool(_) | Read::Nested(_) => false,
    })
}

/// `key`'s value in the object `doc`, `None` when the text is not an object or has no such
/// member; an object or array value is built only when `nested`.
fn member<'d>(doc: &'d str, key: &str, nested: bool) -> Option<Read<'d>> {
    use serde::de::DeserializeSeed;
    let mut de = serde_json::Deserializer::from_str(doc);
    let value = Member { key, nested }.deserialize(&mut de).ok()??;
    de.end().ok()?;
    Some(value)
}

/// One JSON value as read: text borrowed from the document where it has no escapes, numbers
/// as serde_json reads them (so they print as a parsed [`Value`] prints them), an object or
/// array as a [`Value`] (when asked for; else `None`).
enum Read<'d> {
    Null,
    Text(std::borrow::Cow<'d, str>),
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
    Nested(Option<Value>),
}

impl Read<'_> {
    /// The value's text as `json_get_text` answers it; an error only for a JSON null (NULL).
    fn write(&self, out: &mut impl std::fmt::Write) -> std::fmt::Result {
        match self {
            Read::Null => Err(std::fmt::Error),
            Read::Text(s) => out.write_str(s),
            Read::Int(i) => write!(out, "{i}"),
            Read::UInt(u) => write!(out, "{u}"),
            Read::Float(f) => write!(out, "{}", Value::from(*f)),
            Read::Bool(b) => write!(out, "{b}"),
            Read::Nested(v) => write!(out, "{}", v.as_ref().unwrap_or(&Value::Null)),
        }
    }
}

/// Reads a JSON object keeping the value of one member: `None` when the object has no such
/// member; an error when the text is not an object.
struct Member<'k> {
    key: &'k str,
    nested: bool,
}

impl<'de> serde::de::DeserializeSeed<'de> for Member<'_> {
    type Value = Option<Read<'de>>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Member<'_> {
    type Value = Option<Read<'de>>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(name) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if name == self.key {
                found = Some(map.next_value_seed(ValueSeed(self.nested))?);
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Reads one value as a [`Read`], building an object or array only when its flag is set.
#[derive(Clone, Copy)]
struct ValueSeed(bool);

impl<'de> serde::de::DeserializeSeed<'de> for ValueSeed {
    type Value = Read<'de>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ValueSeed {
    type Value = Read<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> std::result::Result<Read<'de>, E> {
        Ok(Read::Null)
    }

    fn visit_bool<E>(self, b: bool) -> std::result::Result<Read<'de>, E> {
        Ok(Read::Bool(b))
    }

    fn visit_i64<E>(self, i: i64) -> std::result::Result<Read<'de>, E> {
        Ok(Read::Int(i))
    }

    fn visit_u64<E>(self, u: u64) -> std::result::Result<Read<'de>, E> {
        Ok(Read::UInt(u))
    }

    fn visit_f64<E>(self, f: f64) -> std::result::Result<Read<'de>, E> {
        Ok(Read::Float(f))
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> std::result::Result<Read<'de>, E> {
        Ok(Read::Text(std::borrow::Cow::Borrowed(s)))
    }

    fn visit_str<E>(self, s: &str) -> std::result::Result<Read<'de>, E> {
        Ok(Read::Text(std::borrow::Cow::Owned(s.to_owned())))
    }

    fn visit_string<E>(self, s: String) -> std::result::Result<Read<'de>, E> {
        Ok(Read::Text(std::borrow::Cow::Owned(s)))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        seq: A,
    ) -> std::result::Result<Read<'de>, A::Error> {
        use serde::Deserialize;
        let d = serde::de::value::SeqAccessDeserializer::new(seq);
        Ok(Read::Nested(if self.0 {
            Some(Value::deserialize(d)?)
        } else {
            serde::de::IgnoredAny::deserialize(d)?;
            None
        }))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        map: A,
    ) -> std::result::Result<Read<'de>, A::Error> {
        use serde::Deserialize;
        let d = serde::de::value::MapAccessDeserializer::new(map);
        Ok(Read::Nested(if self.0 {
            Some(Value::deserialize(d)?)
        } else {
            serde::de::IgnoredAny::deserialize(d)?;
            None
        }))
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
        match docs_and_key(NAME, &args.args)? {
            (Docs::Value(d), key) => Ok(ColumnarValue::Scalar(ScalarValue::Utf8(
                d.and_then(|d| extract(d, key)),
            ))),
            (Docs::Column(strings), key) => {
                let mut out = StringBuilder::with_capacity(strings.len(), strings.len() * 8);
                for d in strings.iter() {
                    // Written into the builder in place: no text is made per row.
                    match d.and_then(|d| member(d, key, true)) {
                        None | Some(Read::Null) => out.append_null(),
                        Some(Read::Text(s)) => out.append_value(s),
                        Some(v) => {
                            // Only a null fails to write, and it is matched above.
                            let _ = v.write(&mut out);
                            out.append_value("");
                        }
                    }
                }
                Ok(ColumnarValue::Array(Arc::new(out.finish()) as ArrayRef))
            }
        }
    }
}

/// The documents a JSON-key function reads: one text value, or a column of texts.
enum Docs<'a> {
    Value(Option<&'a str>),
    Column(&'a StringArray),
}

/// The arguments of the JSON-key function `name`: its documents (text) and its key (a text
/// literal); an error naming the function for any others.
fn docs_and_key<'a>(name: &str, args: &'a [ColumnarValue]) -> Result<(Docs<'a>, &'a str)> {
    let [doc, key] = args else {
        return exec_err!("{name} takes two arguments");
    };
    let ColumnarValue::Scalar(ScalarValue::Utf8(Some(key))) = key else {
        return exec_err!("{name}: the key must be a text literal");
    };
    let docs = match doc {
        ColumnarValue::Scalar(ScalarValue::Utf8(d)) => Docs::Value(d.as_deref()),
        ColumnarValue::Scalar(other) => return exec_err!("{name}: unexpected input {other:?}"),
        ColumnarValue::Array(arr) => match arr.as_string_opt::<i32>() {
            Some(strings) => Docs::Column(strings),
            None => return exec_err!("{name} expects utf8, got {}", arr.data_type()),
        },
    };
    Ok((docs, key))
}

/// `json_key_is_number(json, key)`: [`is_number`] over a column, for the numeric-key count
/// of the bind pass (engine/src/bind): the same answer as
/// `try_cast(json_get_text(json, key) AS DOUBLE) IS NOT NULL` where `json_get_text` is not
/// NULL, and NULL where it is, without writing each value out as text and parsing it back.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JsonKeyIsNumber {
    signature: Signature,
}

impl Default for JsonKeyIsNumber {
    fn default() -> Self {
        Self {
            signature: Signature::exact(
                vec![DataType::Utf8, DataType::Utf8],
                Volatility::Immutable,
            ),
        }
    }
}

static JSON_KEY_IS_NUMBER: LazyLock<Arc<ScalarUDF>> =
    LazyLock::new(|| Arc::new(ScalarUDF::from(JsonKeyIsNumber::default())));

pub fn json_key_is_number_udf() -> Arc<ScalarUDF> {
    Arc::clone(&JSON_KEY_IS_NUMBER)
}

/// For `json_get_text(json, key)`, the same call of `json_key_is_number`; `None` for any other
/// expression.
pub fn number_test(expr: &Expr) -> Option<Expr> {
    match expr {
        Expr::ScalarFunction(f) if f.func.name() == NAME => {
            Some(json_key_is_number_udf().call(f.args.clone()))
        }
        _ => None,
    }
}

impl ScalarUDFImpl for JsonKeyIsNumber {
    fn name(&self) -> &str {
        "json_key_is_number"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match docs_and_key(self.name(), &args.args)? {
            (Docs::Value(d), key) => Ok(ColumnarValue::Scalar(ScalarValue::Boolean(
                d.and_then(|d| is_number(d, key)),
            ))),
            (Docs::Column(strings), key) => {
                let out: BooleanArray = strings
                    .iter()
                    .map(|d| d.and_then(|d| is_number(d, key)))
                    .collect();
                Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
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

    /// `try_cast(json_get_text(doc, key) AS DOUBLE) IS NOT NULL`, NULL kept: the test
    /// `is_number` replaces, through the parsed object and Arrow's cast kernel.
    fn cast_reads(doc: &str, key: &str) -> Option<bool> {
        use datafusion::arrow::array::StringArray;
        let text = parsed(doc, key)?;
        let array: ArrayRef = Arc::new(StringArray::from(vec![text]));
        let cast = datafusion::arrow::compute::cast(&array, &DataType::Float64).ok()?;
        Some(cast.is_valid(0))
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL).prop_map(Value::from),
            "[a-c\\\"é ]{0,4}".prop_map(Value::String),
            "[ 0-9.e+-]{0,5}|inf|NaN|true".prop_map(Value::String),
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
            proptest::prop_assert_eq!(is_number(&doc, &key), cast_reads(&doc, &key), "{}", doc);
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
