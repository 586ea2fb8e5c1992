//! `signalql bench`: a query answered `warmup + runs` times on one engine, the counted runs
//! timed one by one.

use crate::{Answer, Engine, Error, Result};

/// What a bench run answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answering {
    /// The answer as `signalql query` makes it (`Engine::answer_with`).
    Whole,
    /// An analytics statement's rows as Arrow batches (`Engine::query_batches_with`: no JSON
    /// row is made); the output has the row count and columns, no rows.
    Arrow,
}

/// Times `text` on `engine`: `warmup` uncounted runs, then `runs` counted ones (each parses
/// and answers; with the engine's plan cache, a run after the first reuses the plan). The
/// answer is one JSON object: the query, the run counts, `times_s` (each counted run,
/// seconds), `median_s`, and the `row_count`, `columns` and `rows` of the last run (a
/// bundle's items, for CONTEXT FOR; no rows for [`Answering::Arrow`]).
pub fn bench(
    engine: &Engine,
    text: &str,
    params: &crate::Params,
    (warmup, runs): (u32, u32),
    answering: Answering,
) -> Result<serde_json::Value> {
    let rt = crate::runtime()?;
    let mut times = Vec::with_capacity(runs as usize);
    let mut last = None;
    for i in 0..warmup + runs {
        let start = std::time::Instant::now();
        // The batches are dropped after the clock stops: freeing them is not answering.
        let (answer, batches) = match answering {
            Answering::Whole => (rt.block_on(engine.answer_with(text, params))?, Vec::new()),
            Answering::Arrow => {
                let (envelope, batches) = rt.block_on(engine.query_batches_with(text, params))?;
                (Answer::Envelope(Box::new(envelope)), batches)
            }
        };
        let took = start.elapsed().as_secs_f64();
        drop(batches);
        if i >= warmup {
            times.push(took);
        }
        last = Some(answer);
    }
    let mut row_count = None;
    let (columns, rows) = match last {
        Some(Answer::Envelope(e)) => {
            row_count = Some(e.metadata.row_count);
            (
                serde_json::to_value(&e.columns).map_err(|e| Error::internal(e.to_string()))?,
                e.rows
                    .into_iter()
                    .map(serde_json::Value::Array)
                    .collect::<Vec<_>>(),
            )
        }
        Some(Answer::Bundle(b)) => (
            serde_json::Value::Null,
            b.items
                .iter()
                .map(|i| serde_json::to_value(i).map_err(|e| Error::internal(e.to_string())))
                .collect::<Result<_>>()?,
        ),
        Some(Answer::Explanation(x)) => (
            serde_json::Value::Null,
            vec![serde_json::to_value(&*x).map_err(|e| Error::internal(e.to_string()))?],
        ),
        Some(Answer::Plan(p)) => (
            serde_json::Value::Null,
            vec![serde_json::to_value(&*p).map_err(|e| Error::internal(e.to_string()))?],
        ),
        None => (serde_json::Value::Null, Vec::new()),
    };
    Ok(serde_json::json!({
        "query": text,
        "warmup": warmup,
        "runs": runs,
        "times_s": times,
        "median_s": median(&times),
        "row_count": row_count.unwrap_or(rows.len() as u64),
        "columns": columns,
        "rows": rows,
    }))
}

/// The median of `times` (the mean of the middle two for an even count; `runs` is at least 1).
fn median(times: &[f64]) -> f64 {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
