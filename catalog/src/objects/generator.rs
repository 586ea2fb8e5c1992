//! `signalql gen objects --objects N`: a deterministic synthetic object store for tests and
//! benches (docs/objects.md): N objects in 5 projects, each with a title, a `summary` and a
//! `text`, trust and state varied, 1 % secret, object↔object and object↔topic links and some
//! derivations. The same N, seed and vocabulary always give the same tables.
//!
//! Two vocabularies ([`Vocabulary`]): `topical` (the default; 1 024 words skewed to the start
//! and 16 topical words drawn one word in ten, ~400-word bodies, so that W8's task matches
//! nearly every object), and `zipf` ([`ZIPF_WORDS`] words drawn with Zipf(1) frequencies,
//! titles of 4–12 words, summaries of 1–3 sentences, bodies of 100–1 500 words), where most
//! words are rare and a task of mid-rank words is selective.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use datafusion::arrow::array::{
    ArrayRef, Int64Array, LargeStringArray, ListBuilder, RecordBatch, StringArray, StringBuilder,
    TimestampMicrosecondArray,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::ingest::content_hash;
use super::{
    DERIVATIONS, LINKS, OBJECTS, REPRESENTATIONS, REVISIONS, derivations_schema, links_schema,
    objects_schema, representations_schema, revisions_schema,
};
use crate::error::{CatalogError, Result};
use crate::write::AtomicParquetWriter;

/// Objects per written batch.
const BATCH: usize = 10_000;
/// Words in a `text` body.
pub const BODY_WORDS: usize = 400;

/// Topical words, drawn more often than the rest, so that tasks find matches.
pub const TOPIC_WORDS: [&str; 16] = [
    "parquet", "storage", "engine", "context", "bundle", "query", "budget", "revision", "object",
    "trust", "schema", "index", "token", "graph", "cache", "stream",
];

/// Words of the `zipf` vocabulary.
pub const ZIPF_WORDS: usize = 20_000;

/// How the generator draws the words of titles, summaries and bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Vocabulary {
    /// 1 024 words skewed to the start, and [`TOPIC_WORDS`] one word in ten.
    #[default]
    Topical,
    /// [`ZIPF_WORDS`] words, the word of rank r drawn with probability proportional to 1/r.
    Zipf,
}

impl std::str::FromStr for Vocabulary {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "topical" => Ok(Vocabulary::Topical),
            "zipf" => Ok(Vocabulary::Zipf),
            other => Err(format!("unknown vocabulary {other:?}: topical or zipf")),
        }
    }
}

/// Options of [`generate_objects`].
#[derive(Debug, Clone)]
pub struct ObjectGenOptions {
    pub out: PathBuf,
    pub objects: u64,
    pub seed: u64,
    /// `created_at` of every object and revision.
    pub created_at: DateTime<Utc>,
    pub vocabulary: Vocabulary,
}

impl ObjectGenOptions {
    pub fn new(out: impl AsRef<Path>, objects: u64) -> Self {
        ObjectGenOptions {
            out: out.as_ref().to_path_buf(),
            objects,
            seed: 1,
            created_at: DateTime::parse_from_rfc3339("2026-06-01T00:00:00Z")
                .map(|t| t.with_timezone(&Utc))
                .unwrap_or_default(),
            vocabulary: Vocabulary::Topical,
        }
    }
}

/// A deterministic vocabulary of pronounceable words.
fn vocabulary() -> Vec<String> {
    let cons = [
        "b", "c", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "ch",
    ];
    let vowels = ["a", "e", "i", "o", "u", "ai", "ou", "ea"];
    let mut out = Vec::new();
    for c1 in cons {
        for v1 in vowels {
            for c2 in ["n", "r", "l", "s", "t", "m", "x", "d"] {
                out.push(format!("{c1}{v1}{c2}"));
            }
        }
    }
    out
}

fn word<'a>(rng: &mut ChaCha8Rng, vocab: &'a [String]) -> &'a str {
    if rng.random_range(0..10) == 0 {
        TOPIC_WORDS[rng.random_range(0..TOPIC_WORDS.len())]
    } else {
        // Skewed towards the start of the vocabulary.
        let a = rng.random_range(0..vocab.len());
        let b = rng.random_range(0..vocab.len());
        &vocab[a.min(b)]
    }
}

fn sentence(rng: &mut ChaCha8Rng, vocab: &[String], words: usize) -> String {
    sentence_of(words, || word(rng, vocab))
}

/// `words` words from `next`, the first capitalised, ending with a full stop.
fn sentence_of<'a>(words: usize, mut next: impl FnMut() -> &'a str) -> String {
    let mut s = String::new();
    for i in 0..words {
        let w = next();
        if i == 0 {
            let mut c = w.chars();
            if let Some(f) = c.next() {
                s.extend(f.to_uppercase());
                s.push_str(c.as_str());
            }
        } else {
            s.push(' ');
            s.push_str(w);
        }
    }
    s.push('.');
    s
}

/// The `zipf` vocabulary, most frequent first: [`ZIPF_WORDS`] distinct pronounceable words of
/// two syllables and an optional final consonant, in an order shuffled by a fixed seed (so rank
/// and spelling are unrelated), none of them a [`TOPIC_WORDS`] word.
pub fn zipf_vocabulary() -> Vec<String> {
    let cons = [
        "b", "c", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "ch",
    ];
    let vowels = ["a", "e", "i", "o", "u", "ai", "ou", "ea"];
    let ends = ["", "n", "r", "l", "s", "t", "m", "x"];
    let mut seen = std::collections::HashSet::new();
    let mut words = Vec::new();
    'all: for end in ends {
        for c1 in cons {
            for v1 in vowels {
                for c2 in cons {
                    for v2 in vowels {
                        let w = format!("{c1}{v1}{c2}{v2}{end}");
                        if !TOPIC_WORDS.contains(&w.as_str()) && seen.insert(w.clone()) {
                            words.push(w);
                            if words.len() == ZIPF_WORDS {
                                break 'all;
                            }
                        }
                    }
                }
            }
        }
    }
    let mut rng = ChaCha8Rng::seed_from_u64(0x5A1F);
    for i in (1..words.len()).rev() {
        words.swap(i, rng.random_range(0..=i));
    }
    words
}

/// Draws ranks 0..n with Zipf(1) probabilities (rank r, counted from 1, has weight 1/r).
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(n: usize) -> Zipf {
        let mut total = 0.0;
        let cumulative = (1..=n)
            .map(|r| {
                total += 1.0 / r as f64;
                total
            })
            .collect();
        Zipf { cumulative }
    }

    fn draw(&self, rng: &mut ChaCha8Rng) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let u = rng.random::<f64>() * total;
        self.cumulative
            .partition_point(|c| *c <= u)
            .min(self.cumulative.len() - 1)
    }
}

/// The `zipf` vocabulary's words and sampler.
struct ZipfText {
    words: Vec<String>,
    zipf: Zipf,
}

impl ZipfText {
    fn new() -> ZipfText {
        let words = zipf_vocabulary();
        let zipf = Zipf::new(words.len());
        ZipfText { words, zipf }
    }

    fn sentence(&self, rng: &mut ChaCha8Rng, words: usize) -> String {
        sentence_of(words, || &self.words[self.zipf.draw(rng)])
    }

    /// A title (4–12 words), a summary (1–3 sentences of 10–25 words) and a body that starts
    /// with the summary (100–1 500 words in all, most of them short).
    fn texts(&self, rng: &mut ChaCha8Rng) -> (String, String, String) {
        let title_words = rng.random_range(4..=12);
        let title = self
            .sentence(rng, title_words)
            .trim_end_matches('.')
            .to_string();
        let mut summary = String::new();
        let mut words = 0;
        for k in 0..rng.random_range(1..=3) {
            let len = rng.random_range(10..=25);
            if k > 0 {
                summary.push(' ');
            }
            summary.push_str(&self.sentence(rng, len));
            words += len;
        }
        let u: f64 = rng.random();
        let target = 100 + (u * u * 1400.0) as usize;
        let mut body = summary.clone();
        while words < target {
            let len = rng.random_range(8..=20);
            body.push(' ');
            body.push_str(&self.sentence(rng, len));
            words += len;
        }
        (title, summary, body)
    }
}

/// What [`generate_objects`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectGenSummary {
    pub objects: u64,
    pub representations: u64,
    pub links: u64,
    pub derivations: u64,
}

/// Writes the object tables under `opts.out` (which must not hold an object store yet).
pub fn generate_objects(opts: &ObjectGenOptions) -> Result<ObjectGenSummary> {
    for t in [OBJECTS, REVISIONS, REPRESENTATIONS] {
        if opts.out.join(t).is_dir() {
            return Err(CatalogError::Invalid(format!(
                "{} already holds a {t} table; generate into an empty dataset",
                opts.out.display()
            )));
        }
    }
    let vocab = vocabulary();
    let zipf = (opts.vocabulary == Vocabulary::Zipf).then(ZipfText::new);
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
    let created = opts.created_at.timestamp_micros();
    let projects = ["alpha", "bravo", "charlie", "delta", "echo"];
    let trusts = [
        "unknown",
        "unknown",
        "inferred",
        "verified",
        "authoritative",
        "untrusted",
    ];
    let mut w_obj =
        AtomicParquetWriter::new(&opts.out.join(OBJECTS), "part-00000", objects_schema())?;
    let mut w_rev =
        AtomicParquetWriter::new(&opts.out.join(REVISIONS), "part-00000", revisions_schema())?;
    let mut w_rep = AtomicParquetWriter::new(
        &opts.out.join(REPRESENTATIONS),
        "part-00000",
        representations_schema(),
    )?;
    let mut w_link = AtomicParquetWriter::new(&opts.out.join(LINKS), "part-00000", links_schema())?;
    let mut w_der = AtomicParquetWriter::new(
        &opts.out.join(DERIVATIONS),
        "part-00000",
        derivations_schema(),
    )?;
    let mut summary = ObjectGenSummary {
        objects: 0,
        representations: 0,
        links: 0,
        derivations: 0,
    };
    let n = opts.objects as usize;
    let mut start = 0usize;
    while start < n {
        let end = (start + BATCH).min(n);
        let ids: Vec<String> = (start..end).map(|i| format!("obj{i:07}")).collect();
        let m = ids.len();
        let mut titles = Vec::with_capacity(m);
        let mut proj = Vec::with_capacity(m);
        let mut trust = Vec::with_capacity(m);
        let mut state = Vec::with_capacity(m);
        let mut roles = ListBuilder::new(StringBuilder::new());
        let mut rep_ids = Vec::with_capacity(2 * m);
        let mut rep_names = Vec::with_capacity(2 * m);
        let mut rep_content = Vec::with_capacity(2 * m);
        let (mut l_ids, mut l_type, mut l_ent, mut l_rel) = (vec![], vec![], vec![], vec![]);
        let (mut d_ids, mut d_src) = (vec![], vec![]);
        for (k, id) in ids.iter().enumerate() {
            let i = start + k;
            // The topical texts draw their title first (the tables of a seed stay as they were).
            let mut texts = zipf.as_ref().map(|z| z.texts(&mut rng));
            match &mut texts {
                Some((title, _, _)) => titles.push(std::mem::take(title)),
                None => {
                    let tw = rng.random_range(3..7);
                    titles.push(
                        sentence(&mut rng, &vocab, tw)
                            .trim_end_matches('.')
                            .to_string(),
                    );
                }
            }
            proj.push(projects[rng.random_range(0..projects.len())]);
            trust.push(trusts[rng.random_range(0..trusts.len())]);
            state.push(if rng.random_range(0..20) == 0 {
                "stale"
            } else {
                "current"
            });
            roles.values().append_value("data");
            if rng.random_range(0..100) == 0 {
                roles.values().append_value("secret");
            }
            roles.append(true);
            let (first, body) = match texts {
                Some((_, summary, body)) => (summary, body),
                None => {
                    let first = sentence(&mut rng, &vocab, 20);
                    let mut body = first.clone();
                    let mut words = 20;
                    while words < BODY_WORDS {
                        let len = rng.random_range(8..20);
                        body.push(' ');
                        body.push_str(&sentence(&mut rng, &vocab, len));
                        words += len;
                    }
                    (first, body)
                }
            };
            rep_ids.push(id.clone());
            rep_names.push("summary");
            rep_content.push(first);
            rep_ids.push(id.clone());
            rep_names.push("text");
            rep_content.push(body);
            for _ in 0..2 {
                if i > 0 {
                    let j = rng.random_range(0..i);
                    l_ids.push(id.clone());
                    l_type.push("object".to_string());
                    l_ent.push(format!("obj{j:07}"));
                    l_rel.push("links_to");
                }
            }
            l_ids.push(id.clone());
            l_type.push("topic".to_string());
            l_ent.push(format!("t{}", rng.random_range(0..500)));
            l_rel.push("about");
            if i > 0 && rng.random_range(0..10) == 0 {
                d_ids.push(id.clone());
                d_src.push(format!("obj{:07}", rng.random_range(0..i)));
            }
        }
        let strs = |v: Vec<String>| Arc::new(StringArray::from(v)) as ArrayRef;
        let ts = |n: usize| {
            Arc::new(TimestampMicrosecondArray::from(vec![created; n]).with_timezone("UTC"))
                as ArrayRef
        };
        let ones = |n: usize| Arc::new(Int64Array::from(vec![1i64; n])) as ArrayRef;
        let consts = |s: &str, n: usize| Arc::new(StringArray::from(vec![s; n])) as ArrayRef;
        w_obj.write(&RecordBatch::try_new(
            objects_schema(),
            vec![
                strs(ids.clone()),
                Arc::new(StringArray::from(proj)),
                consts("document", m),
                strs(titles),
                ts(m),
                Arc::new(
                    TimestampMicrosecondArray::from(vec![None::<i64>; m]).with_timezone("UTC"),
                ),
                ts(m),
                Arc::new(StringArray::from(vec![None::<&str>; m])),
            ],
        )?)?;
        w_rev.write(&RecordBatch::try_new(
            revisions_schema(),
            vec![
                strs(ids.clone()),
                ones(m),
                ts(m),
                consts("system", m),
                Arc::new(StringArray::from(trust)),
                consts("none", m),
                Arc::new(roles.finish()),
                Arc::new(StringArray::from(state)),
            ],
        )?)?;
        let r = rep_ids.len();
        let hashes: Vec<String> = rep_content.iter().map(|c| content_hash(c)).collect();
        let mut rep_roles = ListBuilder::new(StringBuilder::new());
        for _ in 0..r {
            rep_roles.append(true);
        }
        w_rep.write(&RecordBatch::try_new(
            representations_schema(),
            vec![
                strs(rep_ids),
                ones(r),
                Arc::new(StringArray::from(rep_names)),
                consts("text/plain", r),
                Arc::new(LargeStringArray::from(rep_content)),
                Arc::new(StringArray::from(vec![None::<&str>; r])),
                strs(hashes),
                Arc::new(Int64Array::from(vec![None::<i64>; r])),
                Arc::new(rep_roles.finish()),
            ],
        )?)?;
        let l = l_ids.len();
        w_link.write(&RecordBatch::try_new(
            links_schema(),
            vec![
                strs(l_ids),
                ones(l),
                strs(l_type),
                strs(l_ent),
                Arc::new(StringArray::from(l_rel)),
            ],
        )?)?;
        let d = d_ids.len();
        w_der.write(&RecordBatch::try_new(
            derivations_schema(),
            vec![
                strs(d_ids),
                ones(d),
                consts("derived_from", d),
                strs(d_src),
                ones(d),
            ],
        )?)?;
        summary.objects += m as u64;
        summary.representations += r as u64;
        summary.links += l as u64;
        summary.derivations += d as u64;
        start = end;
    }
    w_der.finish()?;
    w_link.finish()?;
    w_rep.finish()?;
    w_rev.finish()?;
    w_obj.finish()?;
    Ok(summary)
}
