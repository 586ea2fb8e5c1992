//! `token_estimate(text [, estimator])`: the token count of a text by a named estimator
//! (signalql-v0.5-context.md: "Each item names the estimator that produced its count"). NULL
//! gives NULL.
//!
//! - `chars-div-4-v1` (the default, and the spec's estimate for a representation without a
//!   stored count): `ceil(characters / 4)` with characters counted as Unicode scalar values.
//! - `o200k_base` (also selected as `o200k`): the exact number of tokens of OpenAI's o200k_base
//!   byte-pair encoding (GPT-4o and later), counted by bpe-openai, whose counts equal
//!   tiktoken's (tested against tiktoken-rs below).
//!
//! SQL: `SELECT sum(token_estimate(content, 'o200k')) FROM representations`.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{ArrayRef, Int64Array};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};

use crate::strings::StringColumn;

pub const NAME: &str = "token_estimate";
/// The default estimator's name, as bundles record it.
pub const ESTIMATOR: &str = Estimator::CharsDiv4.name();

/// A token estimator: how a text's token count is computed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Estimator {
    /// `ceil(characters / 4)`.
    #[default]
    CharsDiv4,
    /// Exact o200k_base byte-pair-encoding tokens.
    O200k,
    /// `chars-v1`: one unit per character (Unicode scalar value), so a BUDGET is a budget in
    /// characters, counted exactly (the context-packets API's `max_chars`; docs/context.md,
    /// "Token counts").
    Chars,
}

impl Estimator {
    pub const ALL: [Estimator; 3] = [Estimator::CharsDiv4, Estimator::O200k, Estimator::Chars];

    /// The name bundles record.
    pub const fn name(self) -> &'static str {
        match self {
            Estimator::CharsDiv4 => "chars-div-4-v1",
            Estimator::O200k => "o200k_base",
            Estimator::Chars => "chars-v1",
        }
    }

    /// The estimator a name selects: its recorded name, or `o200k` for `o200k_base`
    /// (ASCII case-insensitive).
    pub fn from_name(name: &str) -> Option<Estimator> {
        let name = name.to_ascii_lowercase();
        Estimator::ALL
            .into_iter()
            .find(|e| e.name() == name)
            .or_else(|| (name == "o200k").then_some(Estimator::O200k))
    }

    /// The names that select an estimator, for error messages.
    pub fn names() -> String {
        Estimator::ALL.map(Estimator::name).join(", ")
    }

    /// The token count of `text`.
    pub fn count(self, text: &str) -> i64 {
        match self {
            Estimator::CharsDiv4 => chars_div_4(text),
            Estimator::O200k => o200k_count(text),
            Estimator::Chars => text.chars().count() as i64,
        }
    }
}

/// o200k_base's pretokenization (tiktoken's pattern), as three patterns searched together at
/// each position, leftmost first: the pattern itself but for its `\s+(?!\S)` alternative,
/// then `\s+\s` standing for that alternative (a lookahead pattern: its last character is
/// not part of the piece), then `\s+`.
const O200K_PATTERNS: [&str; 3] = [
    concat!(
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"|\p{N}{1,3}",
        r"| ?[^\s\p{L}\p{N}]+[\r\n/]*",
        r"|\s*[\r\n]+",
        r"|\s+$",
    ),
    r"\s+\s",
    r"\s+",
];

/// Which of [`O200K_PATTERNS`] end with a lookahead character.
const O200K_LOOKAHEAD: [bool; 3] = [false, true, false];

static O200K_PRE: LazyLock<regex_automata::meta::Regex> = LazyLock::new(|| {
    regex_automata::meta::Regex::new_many(&O200K_PATTERNS).expect("the o200k pattern compiles")
});

thread_local! {
    /// This thread's search cache of [`O200K_PRE`] (the regex's own pool would lock on every
    /// piece from any thread but the first to use it).
    static O200K_CACHE: std::cell::RefCell<regex_automata::meta::Cache> =
        std::cell::RefCell::new(O200K_PRE.create_cache());
}

/// The number of o200k_base tokens of `text`: its pieces (the pretokenization) each encoded
/// by the byte-pair encoding.
fn o200k_count(text: &str) -> i64 {
    use regex_automata::{Anchored, Input};
    let bpe = &bpe_openai::o200k_base().bpe;
    O200K_CACHE.with_borrow_mut(|cache| {
        let (mut last, mut n) = (0usize, 0usize);
        while last < text.len() {
            let input = Input::new(&text[last..]).anchored(Anchored::Yes);
            let Some(m) = O200K_PRE.search_with(cache, &input) else {
                // No piece starts here (it cannot happen: the patterns cover every character);
                // the library's own split counts the rest.
                return (n + bpe_openai::o200k_base().count(&text[last..])) as i64;
            };
            let mut end = last + m.end();
            if O200K_LOOKAHEAD[m.pattern().as_usize()]
                && let Some(c) = text[last..end].chars().next_back()
            {
                end -= c.len_utf8();
            }
            if end == last {
                return (n + bpe_openai::o200k_base().count(&text[last..])) as i64;
            }
            n += bpe.count(&text.as_bytes()[last..end]);
            last = end;
        }
        n as i64
    })
}

/// `ceil(characters / 4)`.
pub fn chars_div_4(text: &str) -> i64 {
    (text.chars().count() as i64 + 3) / 4
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TokenEstimate {
    signature: Signature,
}

impl Default for TokenEstimate {
    fn default() -> Self {
        Self {
            signature: Signature::one_of(
                vec![
                    TypeSignature::String(1),
                    TypeSignature::Exact(vec![DataType::Utf8View, DataType::Utf8]),
                    TypeSignature::Exact(vec![DataType::Utf8, DataType::Utf8]),
                    TypeSignature::Exact(vec![DataType::LargeUtf8, DataType::Utf8]),
                ],
                Volatility::Immutable,
            ),
        }
    }
}

static TOKEN_ESTIMATE: LazyLock<Arc<ScalarUDF>> =
    LazyLock::new(|| Arc::new(ScalarUDF::from(TokenEstimate::default())));

pub fn token_estimate_udf() -> Arc<ScalarUDF> {
    Arc::clone(&TOKEN_ESTIMATE)
}

/// `token_estimate(text)` (chars-div-4-v1) as an [`Expr`].
pub fn token_estimate(text: Expr) -> Expr {
    token_estimate_udf().call(vec![text])
}

/// `token_estimate(text, estimator)` as an [`Expr`].
pub fn token_count(text: Expr, estimator: Estimator) -> Expr {
    token_estimate_udf().call(vec![
        text,
        Expr::Literal(ScalarValue::Utf8(Some(estimator.name().into())), None),
    ])
}

/// The estimator a call's second argument names (a literal), or the default.
fn estimator_arg(args: &[ColumnarValue]) -> Result<Estimator> {
    let Some(arg) = args.get(1) else {
        return Ok(Estimator::default());
    };
    let ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))) = arg else {
        return exec_err!("{NAME}: the estimator must be a text literal");
    };
    match Estimator::from_name(name) {
        Some(e) => Ok(e),
        None => plan_err!(
            "{NAME}: unknown estimator '{name}' (known: {})",
            Estimator::names()
        ),
    }
}

impl ScalarUDFImpl for TokenEstimate {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let (text, estimator) = match args.args.as_slice() {
            [text] | [text, _] => (text, estimator_arg(&args.args)?),
            _ => return exec_err!("{NAME} takes a text and an optional estimator"),
        };
        match text {
            ColumnarValue::Scalar(s) => {
                let s = s.cast_to(&DataType::Utf8)?;
                let ScalarValue::Utf8(v) = s else {
                    return exec_err!("{NAME} takes text");
                };
                Ok(ColumnarValue::Scalar(ScalarValue::Int64(
                    v.as_deref().map(|t| estimator.count(t)),
                )))
            }
            ColumnarValue::Array(arr) => {
                let text = StringColumn::cast_from(arr.as_ref())?;
                let out: Int64Array = text.iter().map(|v| v.map(|t| estimator.count(t))).collect();
                Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_hand() {
        assert_eq!(chars_div_4(""), 0);
        assert_eq!(chars_div_4("abcd"), 1);
        assert_eq!(chars_div_4("abcde"), 2);
        // Four scalar values, eight bytes: one token.
        assert_eq!(chars_div_4("éééé"), 1);
    }

    #[test]
    fn o200k_by_hand() {
        // "hello world" is two o200k tokens ("hello", " world"); the empty text none.
        assert_eq!(Estimator::O200k.count("hello world"), 2);
        assert_eq!(Estimator::O200k.count(""), 0);
        assert_eq!(Estimator::from_name("O200K"), Some(Estimator::O200k));
        assert_eq!(Estimator::from_name("o200k_base"), Some(Estimator::O200k));
        assert_eq!(
            Estimator::from_name("chars-div-4-v1"),
            Some(Estimator::CharsDiv4)
        );
        assert_eq!(Estimator::from_name("cl100k_base"), None);
        // chars-v1 counts characters (Unicode scalar values), not bytes: by hand.
        assert_eq!(Estimator::from_name("CHARS-V1"), Some(Estimator::Chars));
        assert_eq!(Estimator::Chars.count("héllo wörld"), 11);
        assert_eq!(Estimator::Chars.count(""), 0);
    }

    /// The o200k counts equal tiktoken's (tiktoken-rs, the reference implementation's port)
    /// on texts of every kind: words, numbers, punctuation runs, white space runs, line
    /// breaks, contractions, accents, CJK, emoji and arbitrary Unicode.
    #[test]
    fn o200k_counts_equal_tiktokens() {
        use proptest::prelude::*;
        let oracle = tiktoken_rs::o200k_base().unwrap();
        let count = |t: &str| oracle.encode_ordinary(t).len() as i64;
        for text in [
            "The planner runs in the coordinator; it's what you'd expect.",
            "  leading and trailing   ",
            "line one\nline two\r\n\n\ttabbed",
            "1234567 + 89 = 1234656!!! ??? ...",
            "naïve café — Grüße, 東京都の天気は晴れです。 😀👍🏽",
            "CamelCaseWords and SHOUTING and mIxEd",
            "don't WON'T they're I'LL we've",
            "e\u{301} (a combining accent) vs é",
        ] {
            assert_eq!(Estimator::O200k.count(text), count(text), "{text:?}");
        }
        proptest!(ProptestConfig::with_cases(300), |(text in "\\PC{0,200}", ascii in "[ a-zA-Z0-9.,'\n!?-]{0,300}")| {
            prop_assert_eq!(Estimator::O200k.count(&text), count(&text));
            prop_assert_eq!(Estimator::O200k.count(&ascii), count(&ascii));
            // And the library's own split, run the same way.
            prop_assert_eq!(Estimator::O200k.count(&ascii), bpe_openai::o200k_base().count(ascii.as_str()) as i64);
        });
    }
}
