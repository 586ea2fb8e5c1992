//! Packing for `CONTEXT FOR` (signalql-v0.5-context.md steps 7–8): the two passes over objects
//! in rank order within the token budget, and COMPRESS's sentence selection.

/// `ceil(characters / 4)`, characters as Unicode scalar values (chars-div-4-v1): the same
/// function as the `token_estimate` UDF.
pub use signalql_udfs::scalar::token_estimate::Estimator;

use super::select::utf16_cmp;

/// The two packing passes (steps 7–8) over objects in rank order, each with its eligible
/// representations as (name, tokens). Returns, per object, the chosen representation index
/// (None: nothing fit) and the tokens used. (The tests' view of [`pack_compressing`] without
/// compression.)
#[cfg(test)]
pub fn pack(
    objects: &[Vec<(&str, i64)>],
    budget: i64,
    preferred: Option<&str>,
) -> (Vec<Option<usize>>, i64) {
    let (choices, used) = pack_compressing(objects, budget, preferred, &mut |_, _| None);
    let chosen = choices
        .into_iter()
        .map(|c| match c {
            Choice::Whole(i) => Some(i),
            _ => None,
        })
        .collect();
    (chosen, used)
}

/// What pass 1 and 2 gave an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Nothing fit.
    Left,
    /// The representation at this index, whole.
    Whole(usize),
    /// A compressed text of this many tokens (COMPRESS), made by the caller's compressor.
    Compressed(i64),
}

/// [`pack`], where an object for which nothing fits in pass 1 is offered to `compress(object,
/// tokens left)`, which returns the tokens of the compressed text it made, if any. Compressed
/// objects are not upgraded in pass 2.
pub fn pack_compressing(
    objects: &[Vec<(&str, i64)>],
    budget: i64,
    preferred: Option<&str>,
    compress: &mut dyn FnMut(usize, i64) -> Option<i64>,
) -> (Vec<Choice>, i64) {
    let mut used = 0i64;
    let mut chosen: Vec<Choice> = Vec::with_capacity(objects.len());
    // Pass 1 (coverage): the preferred representation if named, present and fitting; else the
    // smallest that fits (ties by name).
    for (k, reps) in objects.iter().enumerate() {
        let left = budget - used;
        let pick = preferred
            .and_then(|p| reps.iter().position(|(n, t)| *n == p && *t <= left))
            .or_else(|| {
                reps.iter()
                    .enumerate()
                    .filter(|(_, (_, t))| *t <= left)
                    .min_by(|(_, a), (_, b)| a.1.cmp(&b.1).then_with(|| utf16_cmp(a.0, b.0)))
                    .map(|(i, _)| i)
            });
        match pick {
            Some(i) => {
                used += reps[i].1;
                chosen.push(Choice::Whole(i));
            }
            None => match compress(k, left) {
                Some(t) if t <= left => {
                    used += t;
                    chosen.push(Choice::Compressed(t));
                }
                _ => chosen.push(Choice::Left),
            },
        }
    }
    // Pass 2 (depth): unless a representation was preferred, upgrade each to its largest that
    // still fits (ties by name).
    if preferred.is_none() {
        for (reps, slot) in objects.iter().zip(chosen.iter_mut()) {
            let Choice::Whole(cur) = *slot else { continue };
            let left = budget - used + reps[cur].1;
            let best = reps
                .iter()
                .enumerate()
                .filter(|(_, (_, t))| *t <= left)
                .max_by(|(_, a), (_, b)| a.1.cmp(&b.1).then_with(|| utf16_cmp(b.0, a.0)))
                .map(|(i, _)| i);
            if let Some(i) = best
                && reps[i].1 > reps[cur].1
            {
                used += reps[i].1 - reps[cur].1;
                *slot = Choice::Whole(i);
            }
        }
    }
    (chosen, used)
}

/// COMPRESS (context-packets.md): `text` shrunk to its task-relevant sentences within
/// `max_tokens` as `estimator` counts them. Sentences end at `.`, `!` or `?` followed by white space, or
/// at a line break. Each is scored by the number of task terms it holds as whole tokens; those
/// with a score are taken best first (ties by position) while they fit, and printed in their
/// original order joined by a space. Returns the text and its preservation: the fraction of the
/// task terms found in `text` that are still in it. None when no relevant sentence fits.
pub fn compress_text(
    text: &str,
    terms: &[String],
    max_tokens: i64,
    estimator: Estimator,
) -> Option<(String, f64)> {
    use signalql_udfs::scalar::lexical::tokens;
    let mut sentences: Vec<&str> = Vec::new();
    for line in text.split('\n') {
        let mut start = 0;
        let b = line.as_bytes();
        for i in 0..b.len() {
            let end_mark = matches!(b[i], b'.' | b'!' | b'?');
            let next_space = i + 1 >= b.len() || b[i + 1].is_ascii_whitespace();
            if end_mark && next_space {
                sentences.push(&line[start..=i]);
                start = i + 1;
            }
        }
        if start < line.len() {
            sentences.push(&line[start..]);
        }
    }
    let sentences: Vec<&str> = sentences
        .into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let has = |s: &str| -> Vec<bool> {
        let toks = tokens(s);
        terms.iter().map(|t| toks.iter().any(|x| x == t)).collect()
    };
    let found: Vec<Vec<bool>> = sentences.iter().map(|s| has(s)).collect();
    let in_text: usize = (0..terms.len())
        .filter(|&j| found.iter().any(|f| f[j]))
        .count();
    let mut order: Vec<usize> = (0..sentences.len())
        .filter(|&i| found[i].iter().any(|&x| x))
        .collect();
    order.sort_by_key(|&i| {
        (
            std::cmp::Reverse(found[i].iter().filter(|&&x| x).count()),
            i,
        )
    });
    let joined = |keep: &[usize]| {
        let mut keep = keep.to_vec();
        keep.sort();
        keep.iter()
            .map(|&i| sentences[i])
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut keep: Vec<usize> = Vec::new();
    let mut chars = 0usize;
    for i in order {
        let extra = sentences[i].chars().count() + usize::from(!keep.is_empty());
        let fits = match estimator {
            // The joined text's characters add up: no need to join it to count them.
            Estimator::CharsDiv4 => (((chars + extra) as i64) + 3) / 4 <= max_tokens,
            Estimator::Chars => ((chars + extra) as i64) <= max_tokens,
            // A byte-pair count depends on the neighbours: count the text as it would be.
            Estimator::O200k => {
                let mut with = keep.clone();
                with.push(i);
                estimator.count(&joined(&with)) <= max_tokens
            }
        };
        if fits {
            chars += extra;
            keep.push(i);
        }
    }
    if keep.is_empty() {
        return None;
    }
    let out = joined(&keep);
    keep.sort();
    let kept = (0..terms.len())
        .filter(|&j| keep.iter().any(|&i| found[i][j]))
        .count();
    let preservation = if in_text == 0 {
        1.0
    } else {
        kept as f64 / in_text as f64
    };
    Some((out, preservation))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_passes() {
        // Budget 100: pass 1 gives A its summary (10) and B its summary (30); pass 2 upgrades A
        // to text (60): 60 + 30 = 90; B's text (80) no longer fits.
        let a = vec![("summary", 10), ("text", 60)];
        let b = vec![("summary", 30), ("text", 80)];
        let (chosen, used) = pack(&[a.clone(), b.clone()], 100, None);
        assert_eq!(chosen, vec![Some(1), Some(0)]);
        assert_eq!(used, 90);
        // PREFER REPRESENTATION text: A gets text (60), B's text does not fit, its summary does;
        // no upgrade pass.
        let (chosen, used) = pack(&[a.clone(), b.clone()], 100, Some("text"));
        assert_eq!(chosen, vec![Some(1), Some(0)]);
        assert_eq!(used, 90);
        // Nothing fits: left out.
        let (chosen, used) = pack(&[vec![("text", 500)]], 100, None);
        assert_eq!(chosen, vec![None]);
        assert_eq!(used, 0);
    }
}

#[cfg(test)]
mod compress_tests {
    use super::*;

    #[test]
    fn keeps_the_relevant_sentences_in_order() {
        let terms = vec!["parquet".to_string(), "budget".to_string()];
        let text =
            "Intro words here. Parquet files are columnar! Nothing else.\nThe budget is small? End";
        // Both relevant sentences fit in 20 tokens: 26 + 1 + 22 = 49 chars → 13 tokens.
        let (out, p) = compress_text(text, &terms, 20, Estimator::CharsDiv4).unwrap();
        assert_eq!(out, "Parquet files are columnar! The budget is small?");
        assert_eq!(p, 1.0);
        // 7 tokens fit one (27 chars): the tie goes to the first; half the terms are kept.
        let (out, p) = compress_text(text, &terms, 7, Estimator::CharsDiv4).unwrap();
        assert_eq!(out, "Parquet files are columnar!");
        assert_eq!(p, 0.5);
        assert!(compress_text(text, &terms, 2, Estimator::CharsDiv4).is_none());
        assert!(compress_text("no match at all.", &terms, 100, Estimator::CharsDiv4).is_none());
    }
}
