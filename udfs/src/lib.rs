//! DataFusion functions used by signalql, callable from SignalQL and from plain DataFusion SQL.
//!
//! One file per function under `aggregate/` (and `scalar/`), each with a singleton, an `Expr`
//! builder and unit tests; [`register_all`] adds them all to a `SessionContext`.

pub mod aggregate;
pub mod scalar;
pub mod strings;

use std::sync::Arc;

use datafusion::logical_expr::{AggregateUDF, ScalarUDF};
use datafusion::prelude::SessionContext;

/// Every aggregate function this crate provides.
pub fn all_udafs() -> Vec<Arc<AggregateUDF>> {
    vec![
        aggregate::stats::stats_udaf(),
        aggregate::count_distinct::count_distinct_text_udaf(),
        aggregate::percentile::percentile_udaf(),
        aggregate::funnel::funnel_udaf(),
        aggregate::trend::trend_slope_udaf(),
    ]
}

/// Every scalar function this crate provides.
pub fn all_udfs() -> Vec<Arc<ScalarUDF>> {
    vec![
        scalar::json_get::json_get_text_udf(),
        scalar::json_get::json_key_is_number_udf(),
        scalar::lexical::lexical_score_udf(),
        scalar::lexical::lexical_terms_udf(),
        scalar::lexical::lexical_match_udf(),
        scalar::lexical::lexical_weights_udf(),
        scalar::month_start::month_start_udf(),
        scalar::token_estimate::token_estimate_udf(),
        scalar::file_rank::file_rank_udf(),
        scalar::text_time::text_time_udf(),
        scalar::index_weights::index_weights_udf(),
    ]
}

/// Register every signalql function with `ctx`.
pub fn register_all(ctx: &SessionContext) {
    for f in all_udafs() {
        ctx.register_udaf(f.as_ref().clone());
    }
    for f in all_udfs() {
        ctx.register_udf(f.as_ref().clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[tokio::test]
    async fn names_are_unique_and_do_not_shadow_builtins() {
        let ctx = SessionContext::new();
        let state = ctx.state();
        let builtin: HashSet<String> = state
            .aggregate_functions()
            .keys()
            .chain(state.scalar_functions().keys())
            .chain(state.window_functions().keys())
            .cloned()
            .collect();
        let names = all_udafs()
            .iter()
            .map(|f| f.name().to_string())
            .chain(all_udfs().iter().map(|f| f.name().to_string()))
            .collect::<Vec<_>>();
        let mut seen = HashSet::new();
        for name in names {
            assert!(!builtin.contains(&name), "{name} shadows a built-in");
            assert!(seen.insert(name.clone()), "{name} registered twice");
        }
    }

    #[tokio::test]
    async fn stats_is_callable_from_sql() {
        let ctx = SessionContext::new();
        register_all(&ctx);
        let df = ctx
            .sql("SELECT stats(x) AS s FROM (VALUES (1), (2), (3), (NULL)) AS t(x)")
            .await
            .unwrap();
        let batches = df.collect().await.unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        // n 3, sum 6, sum_sq 14, mean 2, variance 1, stddev 1, min 1, max 3
        assert!(text.contains("{n: 3, sum: 6.0, sum_sq: 14.0, mean: 2.0, variance: 1.0, stddev: 1.0, min: 1.0, max: 3.0}"), "{text}");
    }

    #[tokio::test]
    async fn funnel_is_callable_from_sql() {
        let ctx = SessionContext::new();
        register_all(&ctx);
        // u1: a@0 b@10 c@20 within 15 s: reaches b (10 s), not c (20 s from the start).
        // u2: b@0 a@5 b@8 with a tie broken by seq: a then b at 8 → level 2 after 3 s.
        // u3: only c: level 0.
        let sql = "SELECT u, f.level AS level, f.seconds_to_step AS secs, f.group AS g FROM (
              SELECT u, funnel(to_timestamp_seconds(t), s, 15, 'ordered', false, g,
                               e = 'a', e = 'b', e = 'c') AS f
              FROM (VALUES ('u1', 0, 1, 'a', 'x'), ('u1', 10, 2, 'b', 'y'), ('u1', 20, 3, 'c', 'z'),
                           ('u2', 0, 1, 'b', 'p'), ('u2', 8, 3, 'b', 'q'), ('u2', 8, 2, 'a', 'r'),
                           ('u3', 1, 1, 'c', 'w')) AS v(u, t, s, e, g)
              GROUP BY u) ORDER BY u";
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        let expected = [
            "+----+-------+---------------+---+",
            "| u  | level | secs          | g |",
            "+----+-------+---------------+---+",
            "| u1 | 2     | [0.0, 10.0, ] | x |",
            "| u2 | 2     | [0.0, 0.0, ]  | r |",
            "| u3 | 0     | [, , ]        |   |",
            "+----+-------+---------------+---+",
        ]
        .join("\n");
        assert_eq!(text, expected);
    }
}
