//! Embedding signalql in a DataFusion application (README "Embedding"):
//! `signalql::register` adds its functions to the application's own context, so plain SQL
//! can call them; `Engine::with_session` runs SignalQL on that context and its tables.
//!
//!     cargo run --example embed

use datafusion::prelude::{ParquetReadOptions, SessionContext};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sample = signalql::sample_dataset();
    let ctx = SessionContext::new();
    ctx.register_parquet(
        "events",
        sample.join("events").to_string_lossy().as_ref(),
        ParquetReadOptions::default(),
    )
    .await?;

    // signalql's functions from plain SQL.
    signalql::register(&ctx);
    ctx.sql(
        "SELECT properties['platform'] AS platform, stats(properties['amount']) AS amount, \
                percentile(properties['amount'], 0.95) AS p95 \
         FROM events WHERE event_name = 'purchase' GROUP BY 1 ORDER BY 1",
    )
    .await?
    .show()
    .await?;

    // SignalQL on the same context: `events` is the table registered above.
    let engine = signalql::Engine::with_session(ctx, &sample, Default::default())?;
    let envelope = engine
        .query("FROM events WHERE event_name = \"purchase\" DURING LAST 28 d GROUP BY properties.platform RETURN properties.platform, count_distinct(user_id), stats(properties.amount)")
        .await?;
    println!("{}", serde_json::to_string_pretty(&envelope)?);
    Ok(())
}
