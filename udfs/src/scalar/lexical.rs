//! lexical-v1 relevance (signalql-v0.5-context.md, "Reference algorithm"), as plain functions
//! and as the UDFs `lexical_score(task, title, summary, text)` (Int64) and
//! `lexical_terms(task, title, summary, text)` (the matched terms, in term order).
//!
//! - Terms: the task lower-cased (full Unicode), split on every character that is not a
//!   letter (general category L*) or a decimal digit (Nd), tokens shorter than two characters
//!   and the stopwords dropped, de-duplicated keeping the first occurrence.
//! - A field contains a term when the term is one of its tokens (same tokenisation).
//! - Each term weighs its heaviest field: title 3, summary 2, any other text 1; the score is
//!   `floor(sum × 1 000 000 / (3 × terms))`, 0 when the task has no term.
//!
//! `text` is every other packable representation's content; several are joined with a line
//! break, which cannot join tokens. NULL fields are empty; a NULL task scores 0.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, Int64Builder, ListBuilder, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use unicode_general_category::{GeneralCategory, get_general_category};

use crate::strings::StringColumn;

pub const SCORE_NAME: &str = "lexical_score";
pub const TERMS_NAME: &str = "lexical_terms";
pub const MATCH_NAME: &str = "lexical_match";
pub const WEIGHTS_NAME: &str = "lexical_weights";

/// The name the bundle reports as its scorer.
pub const SCORER: &str = "lexical-v1";

/// lexical-v1's stopwords.
pub const STOPWORDS: [&str; 22] = [
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "into", "is", "it", "of",
    "on", "or", "that", "the", "this", "to", "with",
];

/// Field weights.
pub const TITLE_WEIGHT: i64 = 3;
pub const SUMMARY_WEIGHT: i64 = 2;
pub const TEXT_WEIGHT: i64 = 1;

fn is_word_char(c: char) -> bool {
    use GeneralCategory::*;
    if c.is_ascii() {
        return c.is_ascii_alphanumeric();
    }
    matches!(
        get_general_category(c),
        UppercaseLetter
            | LowercaseLetter
            | TitlecaseLetter
            | ModifierLetter
            | OtherLetter
            | DecimalNumber
    )
}

/// The tokens of `text`: lower-cased first (as the spec orders it: lower-casing may turn a
/// letter into a letter and a combining mark, as `İ` → `i̇`), then split on every character
/// that is not a letter or decimal digit.
pub fn tokens(text: &str) -> Vec<String> {
    split(&text.to_lowercase()).map(str::to_string).collect()
}

fn split(lower: &str) -> impl Iterator<Item = &str> {
    lower
        .split(|c: char| !is_word_char(c))
        .filter(|t| !t.is_empty())
}

/// The task's terms.
pub fn terms(task: &str) -> Vec<String> {
    let lower = task.to_lowercase();
    let mut out: Vec<String> = Vec::new();
    for t in split(&lower) {
        if t.chars().count() < 2 || STOPWORDS.contains(&t) {
            continue;
        }
        if !out.iter().any(|o| o == t) {
            out.push(t.to_string());
        }
    }
    out
}

/// Whether each byte is an ASCII letter or digit (a token byte in ASCII text).
static ASCII_WORD: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = (i as u8).is_ascii_alphanumeric();
        i += 1;
    }
    t
};

/// A task's terms prepared for matching many fields: each ASCII term with a substring finder.
///
/// An ASCII field is lower-cased once (for ASCII text the spec's full lower-casing is ASCII
/// case folding), and each term is searched for as a substring by `memchr`'s SIMD finder; a
/// hit counts when no ASCII letter or digit touches it on either side, which makes it one of
/// the field's tokens (a non-ASCII term is no token of ASCII text). Other fields are
/// tokenised as the spec says.
#[derive(Debug, Clone)]
pub struct Matcher {
    terms: Vec<String>,
    /// Per term: its finder, or `None` for a term with a non-ASCII character.
    finders: Vec<Option<memchr::memmem::Finder<'static>>>,
    /// Bit n is set when a term is n bytes long (bit 63: 63 bytes or more).
    lengths: u64,
}

impl Matcher {
    pub fn new(terms: Vec<String>) -> Matcher {
        let finders = terms
            .iter()
            .map(|t| {
                (t.is_ascii() && !t.is_empty()).then(|| {
                    memchr::memmem::Finder::new(t.to_ascii_lowercase().as_bytes()).into_owned()
                })
            })
            .collect();
        let lengths = terms.iter().fold(0u64, |m, t| m | 1u64 << t.len().min(63));
        Matcher {
            terms,
            finders,
            lengths,
        }
    }

    /// The task's terms, in order.
    pub fn terms(&self) -> &[String] {
        &self.terms
    }

    /// Per term, the weight of the heaviest field containing it (0 when none).
    pub fn weights(&self, title: &str, summary: &str, text: &str) -> Vec<i64> {
        let mut w = vec![0i64; self.terms.len()];
        let mut lower: Vec<u8> = Vec::new();
        for (field, weight) in [
            (title, TITLE_WEIGHT),
            (summary, SUMMARY_WEIGHT),
            (text, TEXT_WEIGHT),
        ] {
            if w.iter().all(|&x| x >= weight) {
                continue;
            }
            if field.is_ascii() {
                lower.clear();
                lower.extend(field.bytes().map(|c| c.to_ascii_lowercase()));
                for (i, f) in self.finders.iter().enumerate() {
                    if w[i] < weight && f.as_ref().is_some_and(|f| ascii_token_in(f, &lower)) {
                        w[i] = weight;
                    }
                }
            } else {
                let folded = field.to_lowercase();
                for tok in split(&folded) {
                    if self.lengths & (1u64 << tok.len().min(63)) == 0 {
                        continue; // no term has this token's length
                    }
                    for (i, t) in self.terms.iter().enumerate() {
                        if w[i] < weight && t.as_str() == tok {
                            w[i] = weight;
                        }
                    }
                    if w.iter().all(|&x| x >= weight) {
                        break;
                    }
                }
            }
        }
        w
    }
}

/// Whether the finder's (lower-case ASCII) term is a whole token of the lower-cased ASCII
/// text `b`: a hit with no ASCII letter or digit right before or after it.
fn ascii_token_in(f: &memchr::memmem::Finder<'_>, b: &[u8]) -> bool {
    let n = f.needle().len();
    f.find_iter(b).any(|at| {
        let end = at + n;
        (at == 0 || !ASCII_WORD[b[at - 1] as usize])
            && (end == b.len() || !ASCII_WORD[b[end] as usize])
    })
}

/// Per term, the weight of the heaviest field containing it (0 when none). For many fields
/// of one task, build a [`Matcher`] once instead.
pub fn weights(terms: &[String], title: &str, summary: &str, text: &str) -> Vec<i64> {
    Matcher::new(terms.to_vec()).weights(title, summary, text)
}

/// `floor(sum × 1 000 000 / (3 × terms))`, 0 without terms.
pub fn score_of(weights: &[i64]) -> i64 {
    if weights.is_empty() {
        return 0;
    }
    weights.iter().sum::<i64>() * 1_000_000 / (3 * weights.len() as i64)
}

/// The lexical-v1 score of one object.
pub fn score(terms: &[String], title: &str, summary: &str, text: &str) -> i64 {
    score_of(&weights(terms, title, summary, text))
}

macro_rules! lexical_udf {
    ($ty:ident, $name:expr, $static:ident, $ctor:ident, $doc:literal) => {
        #[derive(Debug, PartialEq, Eq, Hash)]
        pub struct $ty {
            signature: Signature,
        }

        impl Default for $ty {
            fn default() -> Self {
                Self {
                    signature: Signature::uniform(
                        4,
                        vec![DataType::Utf8View, DataType::Utf8, DataType::LargeUtf8],
                        Volatility::Immutable,
                    ),
                }
            }
        }

        static $static: LazyLock<Arc<ScalarUDF>> =
            LazyLock::new(|| Arc::new(ScalarUDF::from($ty::default())));

        #[doc = $doc]
        pub fn $ctor() -> Arc<ScalarUDF> {
            Arc::clone(&$static)
        }
    };
}

lexical_udf!(
    LexicalScore,
    SCORE_NAME,
    LEXICAL_SCORE,
    lexical_score_udf,
    "The `lexical_score` UDF."
);
lexical_udf!(
    LexicalMatch,
    MATCH_NAME,
    LEXICAL_MATCH,
    lexical_match_udf,
    "The `lexical_match` UDF."
);
lexical_udf!(
    LexicalWeights,
    WEIGHTS_NAME,
    LEXICAL_WEIGHTS,
    lexical_weights_udf,
    "The `lexical_weights` UDF."
);
lexical_udf!(
    LexicalTerms,
    TERMS_NAME,
    LEXICAL_TERMS,
    lexical_terms_udf,
    "The `lexical_terms` UDF."
);

/// `lexical_score(task, title, summary, text)` as an [`Expr`].
pub fn lexical_score(task: Expr, title: Expr, summary: Expr, text: Expr) -> Expr {
    lexical_score_udf().call(vec![task, title, summary, text])
}

/// `lexical_match(task, title, summary, text)` as an [`Expr`]: `{score, terms}` in one pass.
pub fn lexical_match(task: Expr, title: Expr, summary: Expr, text: Expr) -> Expr {
    lexical_match_udf().call(vec![task, title, summary, text])
}

/// `lexical_weights(task, title, summary, text)` as an [`Expr`]: per task term, the weight of
/// the heaviest field holding it (0 when none), in term order; NULL for a NULL task. The
/// weights of one object's parts combine by element-wise maximum ([`max_weights`]), so an
/// object can be scored from its representations one row at a time.
pub fn lexical_weights(task: Expr, title: Expr, summary: Expr, text: Expr) -> Expr {
    lexical_weights_udf().call(vec![task, title, summary, text])
}

/// Folds `part` into `acc` by element-wise maximum (`acc` grows to `part`'s length).
pub fn max_weights(acc: &mut Vec<i64>, part: &[i64]) {
    if acc.len() < part.len() {
        acc.resize(part.len(), 0);
    }
    for (a, p) in acc.iter_mut().zip(part) {
        *a = (*a).max(*p);
    }
}

/// `lexical_terms(task, title, summary, text)` as an [`Expr`].
pub fn lexical_terms(task: Expr, title: Expr, summary: Expr, text: Expr) -> Expr {
    lexical_terms_udf().call(vec![task, title, summary, text])
}

/// One string argument, read without copying or casting.
enum Col {
    Scalar(Option<String>),
    Array(StringColumn),
}

impl Col {
    fn of(v: &ColumnarValue) -> Result<Col> {
        Ok(match v {
            ColumnarValue::Scalar(
                ScalarValue::Utf8(s) | ScalarValue::Utf8View(s) | ScalarValue::LargeUtf8(s),
            ) => Col::Scalar(s.clone()),
            ColumnarValue::Scalar(ScalarValue::Null) => Col::Scalar(None),
            ColumnarValue::Scalar(other) => {
                return exec_err!("lexical functions take strings, got {other:?}");
            }
            ColumnarValue::Array(a) => match StringColumn::try_new(a.as_ref()) {
                Ok(c) => Col::Array(c),
                Err(_) => {
                    return exec_err!("lexical functions take strings, got {}", a.data_type());
                }
            },
        })
    }

    fn get(&self, i: usize) -> Option<&str> {
        match self {
            Col::Scalar(s) => s.as_deref(),
            Col::Array(c) => c.get(i),
        }
    }
}

/// Calls `f(row, terms, weights)` for every row with a non-NULL task.
fn each_row(
    args: &ScalarFunctionArgs,
    mut f: impl FnMut(usize, Option<(&[String], Vec<i64>)>),
) -> Result<()> {
    // A constant task (the usual case) is prepared once per batch.
    let scalar_task = match &args.args[0] {
        ColumnarValue::Scalar(
            ScalarValue::Utf8(t) | ScalarValue::Utf8View(t) | ScalarValue::LargeUtf8(t),
        ) => Some(t.as_deref().map(|t| Matcher::new(terms(t)))),
        _ => None,
    };
    if args.args.len() != 4 {
        return exec_err!("lexical functions take (task, title, summary, text)");
    }
    let cols = args.args.iter().map(Col::of).collect::<Result<Vec<_>>>()?;
    for i in 0..args.number_rows {
        let owned;
        let m: Option<&Matcher> = match &scalar_task {
            Some(m) => m.as_ref(),
            None => match cols[0].get(i) {
                None => None,
                Some(task) => {
                    owned = Matcher::new(terms(task));
                    Some(&owned)
                }
            },
        };
        match m {
            None => f(i, None),
            Some(m) => {
                let field = |k: usize| cols[k].get(i).unwrap_or("");
                let w = m.weights(field(1), field(2), field(3));
                f(i, Some((m.terms(), w)));
            }
        }
    }
    Ok(())
}

impl ScalarUDFImpl for LexicalScore {
    fn name(&self) -> &str {
        SCORE_NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let mut out = Int64Builder::with_capacity(args.number_rows);
        each_row(&args, |_, r| match r {
            None => out.append_value(0),
            Some((_, w)) => out.append_value(score_of(&w)),
        })?;
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

fn match_fields() -> datafusion::arrow::datatypes::Fields {
    datafusion::arrow::datatypes::Fields::from(vec![
        Field::new("score", DataType::Int64, false),
        Field::new(
            "terms",
            DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
            false,
        ),
    ])
}

impl ScalarUDFImpl for LexicalMatch {
    fn name(&self) -> &str {
        MATCH_NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Struct(match_fields()))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let mut scores = Int64Builder::with_capacity(args.number_rows);
        let mut terms = ListBuilder::new(StringBuilder::new());
        each_row(&args, |_, r| {
            match r {
                None => scores.append_value(0),
                Some((t, w)) => {
                    scores.append_value(score_of(&w));
                    for (term, weight) in t.iter().zip(&w) {
                        if *weight > 0 {
                            terms.values().append_value(term);
                        }
                    }
                }
            }
            terms.append(true);
        })?;
        let arrays: Vec<ArrayRef> = vec![Arc::new(scores.finish()), Arc::new(terms.finish())];
        Ok(ColumnarValue::Array(Arc::new(
            datafusion::arrow::array::StructArray::try_new(match_fields(), arrays, None)?,
        )))
    }
}

impl ScalarUDFImpl for LexicalWeights {
    fn name(&self) -> &str {
        WEIGHTS_NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::List(Arc::new(Field::new_list_field(
            DataType::Int64,
            true,
        ))))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let mut out = ListBuilder::new(Int64Builder::new());
        each_row(&args, |_, r| match r {
            None => out.append(false),
            Some((_, w)) => {
                out.values().append_slice(&w);
                out.append(true);
            }
        })?;
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

impl ScalarUDFImpl for LexicalTerms {
    fn name(&self) -> &str {
        TERMS_NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::List(Arc::new(Field::new_list_field(
            DataType::Utf8,
            true,
        ))))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let mut out = ListBuilder::new(StringBuilder::new());
        each_row(&args, |_, r| {
            if let Some((t, w)) = r {
                for (term, weight) in t.iter().zip(&w) {
                    if *weight > 0 {
                        out.values().append_value(term);
                    }
                }
            }
            out.append(true);
        })?;
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Vec<String> {
        terms(s)
    }

    #[test]
    fn terms_follow_the_spec() {
        // Lower-cased, split on non letters/digits, short tokens and stopwords dropped, de-duplicated.
        assert_eq!(
            t("Design the SignalQL object-storage for a CONTEXT store, design x 2 v0.5"),
            [
                "design", "signalql", "object", "storage", "context", "store", "v0"
            ]
        );
        // `_` separates; digits are kept; a one-letter token is dropped.
        assert_eq!(t("snake_case id_7 ab"), ["snake", "case", "id", "ab"]);
        // Unicode letters and digits; full lower-casing.
        assert_eq!(
            t("Ünïcode ΣΟΦΙΑ ٣٤ café"),
            ["ünïcode", "σοφια", "٣٤", "café"]
        );
        assert_eq!(t("the and of"), Vec::<String>::new());
        // Lower-casing comes first: İ becomes i + U+0307 (a mark), which then splits.
        assert_eq!(t("İstanbul"), ["stanbul"]);
        assert_eq!(tokens("İstanbul x"), ["i", "stanbul", "x"]);
    }

    #[test]
    fn hand_computed_scores() {
        let terms = t("object storage design");
        // title has object (3), summary has storage (2), text has design (1): 6/9.
        assert_eq!(
            score(&terms, "Object model", "How storage works", "we design it"),
            6 * 1_000_000 / 9
        );
        // All three in the title: 9/9.
        assert_eq!(score(&terms, "Object storage design", "", ""), 1_000_000);
        // Whole tokens only: "objects" and "redesign" do not match "object" and "design".
        assert_eq!(score(&terms, "Objects", "redesigned", "storage."), 111_111);
        // floor: one term of three in text = 1/9 → 111111.
        assert_eq!(score(&terms, "", "", "design"), 111_111);
        assert_eq!(score(&[], "anything", "", ""), 0);
    }

    /// The whole-token test done the slow way: tokenise each field and look the term up.
    fn reference(terms: &[String], title: &str, summary: &str, text: &str) -> Vec<i64> {
        terms
            .iter()
            .map(|t| {
                [(title, 3), (summary, 2), (text, 1)]
                    .iter()
                    .filter(|(f, _)| tokens(f).iter().any(|x| x == t))
                    .map(|(_, w)| *w)
                    .max()
                    .unwrap_or(0)
            })
            .collect()
    }

    proptest::proptest! {
        #[test]
        fn fast_paths_match_the_reference(
            task in "[a-ckA-CK\u{212A}éÉ0-2 _.]{0,12}",
            title in "[a-ckA-CK\u{212A}éÉİ _.-]{0,20}",
            summary in "[a-cA-C0-9 ,_]{0,20}",
            text in "[a-ckA-CKéÉ0-2 ]{0,40}",
        ) {
            let t = terms(&task);
            proptest::prop_assert_eq!(weights(&t, &title, &summary, &text), reference(&t, &title, &summary, &text));
        }

        /// An object scored from its parts one at a time (title with each representation,
        /// folded by maximum) equals the object scored whole, its other texts joined by a line
        /// break: what lets CONTEXT FOR score representation rows as they stream.
        #[test]
        fn weights_of_parts_fold_to_the_whole(
            task in "[a-cA-CΣσς _]{0,12}",
            title in "[a-cA-CΣ _.-]{0,12}",
            summary in "[a-cA-CΣσ ,]{0,16}",
            parts in proptest::collection::vec("[a-cA-CΣσ ]{0,16}", 0..4),
        ) {
            let t = terms(&task);
            let whole = weights(&t, &title, &summary, &parts.join("\n"));
            let mut folded = weights(&t, &title, &summary, "");
            for p in &parts {
                max_weights(&mut folded, &weights(&t, &title, "", p));
            }
            proptest::prop_assert_eq!(folded, whole);
        }
    }

    #[tokio::test]
    async fn callable_from_sql() {
        let ctx = datafusion::prelude::SessionContext::new();
        crate::register_all(&ctx);
        let df = ctx
            .sql(
                "SELECT lexical_score('object storage', t, s, x) AS score, \
                 lexical_terms('object storage', t, s, x) AS terms \
                 FROM (VALUES ('Object', NULL, 'storage'), ('none', 'here', 'at all')) AS v(t, s, x)",
            )
            .await
            .unwrap();
        let batches = df.collect().await.unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        // (3 + 1) × 1e6 / 6 = 666666; no match = 0.
        assert!(text.contains("| 666666 | [object, storage] |"), "{text}");
        assert!(text.contains("| 0      | []                |"), "{text}");
        let batches = ctx
            .sql("SELECT lexical_match('object storage', 'Object', NULL, 'storage') AS m")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        assert!(
            text.contains("{score: 666666, terms: [object, storage]}"),
            "{text}"
        );
        // Per term, its heaviest field: object in the title (3), storage in the text (1);
        // a NULL task gives NULL.
        let batches = ctx
            .sql(
                "SELECT lexical_weights('object storage', 'Object', NULL, 'storage') AS w, \
                 lexical_weights(NULL, 'Object', NULL, 'storage') AS n",
            )
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        assert!(text.contains("| [3, 1] |   |"), "{text}");
    }
}
