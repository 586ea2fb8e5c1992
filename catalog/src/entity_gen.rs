//! Deterministic synthetic `entities`, `relationships`, extra `signals` and `metrics.toml`
//! written next to generated events (the extended tier's tables, DESIGN.md §3).
//!
//! Drawn from their own ChaCha8 stream (seeded from the events seed), so adding them never
//! changes the generated events. The model:
//! - `analytics.user`: every user seen in the events, with `plan`, `country`,
//!   `experiment_variant` and `account`; about one free user in six upgrades to `pro` later
//!   (a second, newer row), so "latest as of T" matters.
//! - `analytics.account`: one account per ~60 users, with a `name`, an `industry`, a text
//!   `description`, a `region` and `seats`.
//! - relationships `member_of` (user → account), `referred` (user → user, always an earlier
//!   user, so chains but no cycles), `parent_of` (account → later account: a forest) and
//!   `partner_of` (account ↔ account, with a 5-cycle and 2-cycles).
//! - signals `churn_risk` (per user, computed twice) and `account_health` (per account, some
//!   recomputed), both with probabilities.

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Float64Builder, Int64Builder, StringBuilder, StructArray, TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{CatalogError, Result};
use crate::write::write_parquet_atomic;

/// A user seen in the generated events, as the entity generator needs it.
pub(crate) struct SeenUser {
    /// The user's index (`entity_id` is `u` + six digits).
    pub index: usize,
    pub plan: Option<&'static str>,
    pub country: &'static str,
    pub variant: &'static str,
    /// The start of the user's first session.
    pub first_ts: i64,
}

const DAY_US: i64 = 86_400_000_000;

const NAME_A: [&str; 16] = [
    "Northwind",
    "Blue Harbor",
    "Cedar",
    "Summit",
    "Lumen",
    "Ironbridge",
    "Sparrow",
    "Granite",
    "Orchid",
    "Vantage",
    "Meridian",
    "Pioneer",
    "Silverline",
    "Redwood",
    "Atlas",
    "Kestrel",
];
const NAME_B: [&str; 8] = [
    "Labs", "Systems", "Group", "Works", "Partners", "Digital", "Holdings", "Co",
];
/// Industries with the phrases their descriptions are made of.
const INDUSTRIES: [(&str, [&str; 4]); 6] = [
    (
        "retail",
        [
            "runs an online storefront with seasonal checkout peaks",
            "tracks basket size and repeat purchase rates",
            "sells outdoor gear through web and mobile shops",
            "measures promotion lift on cart conversion",
        ],
    ),
    (
        "logistics",
        [
            "plans freight routes across regional warehouses",
            "monitors delivery delays and carrier performance",
            "optimizes warehouse picking with shipment forecasts",
            "tracks fleet utilization for last mile delivery",
        ],
    ),
    (
        "healthcare",
        [
            "schedules patient appointments for outpatient clinics",
            "analyzes claims processing times for insurers",
            "supports telehealth visits with secure messaging",
            "reports on clinical trial enrollment",
        ],
    ),
    (
        "finance",
        [
            "detects payment fraud in card transactions",
            "forecasts cash flow for small business lending",
            "reconciles invoices across accounting ledgers",
            "scores credit risk for consumer loans",
        ],
    ),
    (
        "education",
        [
            "hosts online courses with weekly assignments",
            "measures student engagement in virtual classrooms",
            "builds tutoring schedules for exam preparation",
            "tracks course completion and certificate issuance",
        ],
    ),
    (
        "media",
        [
            "streams video to subscribers on smart tvs",
            "recommends podcasts from listening history",
            "analyzes newsletter open rates and subscriber churn",
            "publishes sports coverage with live match updates",
        ],
    ),
];
const REGIONS: [&str; 4] = ["na", "emea", "apac", "latam"];

/// The schema of the `entities` table: one attributes struct for every entity type (a key that
/// does not apply to a type is NULL).
pub fn entities_schema() -> SchemaRef {
    let attributes = Fields::from(vec![
        Field::new("account", DataType::Utf8, true),
        Field::new("country", DataType::Utf8, true),
        Field::new("description", DataType::Utf8, true),
        Field::new("experiment_variant", DataType::Utf8, true),
        Field::new("industry", DataType::Utf8, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("plan", DataType::Utf8, true),
        Field::new("region", DataType::Utf8, true),
        Field::new("seats", DataType::Int64, true),
    ]);
    Arc::new(Schema::new(vec![
        Field::new("entity_type", DataType::Utf8, false),
        Field::new("entity_id", DataType::Utf8, false),
        Field::new("attributes", DataType::Struct(attributes), true),
        Field::new("updated_at", ts_type(), false),
    ]))
}

/// The schema of the `relationships` table (DESIGN.md §3).
pub fn relationships_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("src_type", DataType::Utf8, false),
        Field::new("src_id", DataType::Utf8, false),
        Field::new("relation", DataType::Utf8, false),
        Field::new("dst_type", DataType::Utf8, false),
        Field::new("dst_id", DataType::Utf8, false),
        Field::new("created_at", ts_type(), false),
    ]))
}

fn ts_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// One `entities` row before it is built into arrays.
#[derive(Default)]
struct EntityRow {
    entity_type: &'static str,
    entity_id: String,
    account: Option<String>,
    country: Option<&'static str>,
    description: Option<String>,
    variant: Option<&'static str>,
    industry: Option<&'static str>,
    name: Option<String>,
    plan: Option<&'static str>,
    region: Option<&'static str>,
    seats: Option<i64>,
    updated_at: i64,
}

struct Account {
    id: String,
    created: i64,
}

struct Edge {
    src: (&'static str, String),
    relation: &'static str,
    dst: (&'static str, String),
    created_at: i64,
}

struct SignalRow {
    entity_id: String,
    name: &'static str,
    value: &'static str,
    probability: f64,
    computed_at: i64,
}

const USER: &str = "analytics.user";
const ACCOUNT: &str = "analytics.account";

fn user_id(i: usize) -> String {
    format!("u{i:06}")
}

/// Writes `entities/`, `relationships/`, `signals/part-00001.parquet` and (if absent)
/// `metrics.toml` under `out` for the users seen in the events of the span `[begin, end)`.
pub(crate) fn write_graph(
    out: &Path,
    users: &[SeenUser],
    begin: i64,
    end: i64,
    seed: u64,
) -> Result<()> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_e17e_5000_0001);
    let n_accounts = (users.len() / 60).max(8);
    let mut accounts = Vec::with_capacity(n_accounts);
    let mut entities = Vec::new();
    for k in 0..n_accounts {
        let (industry, phrases) = INDUSTRIES[rng.random_range(0..INDUSTRIES.len())];
        let name = format!(
            "{} {}",
            NAME_A[k % NAME_A.len()],
            NAME_B[(k / NAME_A.len() + rng.random_range(0..2)) % NAME_B.len()]
        );
        let first = rng.random_range(0..phrases.len());
        let second = (first + 1 + rng.random_range(0..phrases.len() - 1)) % phrases.len();
        let description = format!("{name} {} and {}.", phrases[first], phrases[second]);
        let created = begin - rng.random_range(30..400) * DAY_US;
        let id = format!("a{k:04}");
        entities.push(EntityRow {
            entity_type: ACCOUNT,
            entity_id: id.clone(),
            description: Some(description),
            industry: Some(industry),
            name: Some(name),
            region: Some(REGIONS[rng.random_range(0..REGIONS.len())]),
            seats: Some(rng.random_range(1..=40) * 5),
            updated_at: created,
            ..Default::default()
        });
        accounts.push(Account { id, created });
    }

    let mut edges = Vec::new();
    for u in users {
        // Small accounts are more common: a skewed pick.
        let r: f64 = rng.random();
        let account = &accounts[((r * r) * n_accounts as f64) as usize % n_accounts];
        let row = |plan: Option<&'static str>, updated_at: i64| EntityRow {
            entity_type: USER,
            entity_id: user_id(u.index),
            account: Some(account.id.clone()),
            country: Some(u.country),
            variant: Some(u.variant),
            plan,
            updated_at,
            ..Default::default()
        };
        entities.push(row(u.plan, u.first_ts));
        if u.plan == Some("free") && rng.random::<f64>() < 1.0 / 6.0 {
            let at = u.first_ts + rng.random_range(1..=60) * DAY_US;
            if at < end {
                entities.push(row(Some("pro"), at));
            }
        }
        edges.push(Edge {
            src: (USER, user_id(u.index)),
            relation: "member_of",
            dst: (ACCOUNT, account.id.clone()),
            created_at: u.first_ts,
        });
    }
    // Referrals: a user may have been referred by an earlier user (no cycles).
    for (i, u) in users.iter().enumerate().skip(1) {
        if rng.random::<f64>() < 0.2 {
            let by = &users[rng.random_range(0..i)];
            edges.push(Edge {
                src: (USER, user_id(by.index)),
                relation: "referred",
                dst: (USER, user_id(u.index)),
                created_at: u.first_ts,
            });
        }
    }
    // Account hierarchy: a forest, parents always earlier accounts.
    for k in 1..n_accounts {
        if rng.random::<f64>() < 0.5 {
            let parent = rng.random_range(0..k);
            edges.push(Edge {
                src: (ACCOUNT, accounts[parent].id.clone()),
                relation: "parent_of",
                dst: (ACCOUNT, accounts[k].id.clone()),
                created_at: accounts[k].created.max(accounts[parent].created),
            });
        }
    }
    // Partnerships: a ring over the first five accounts, and mutual pairs (2-cycles).
    for k in 0..5.min(n_accounts) {
        let next = (k + 1) % 5.min(n_accounts);
        edges.push(Edge {
            src: (ACCOUNT, accounts[k].id.clone()),
            relation: "partner_of",
            dst: (ACCOUNT, accounts[next].id.clone()),
            created_at: begin,
        });
    }
    for _ in 0..n_accounts / 4 {
        let a = rng.random_range(5.min(n_accounts - 1)..n_accounts);
        let b = rng.random_range(0..n_accounts);
        if a == b {
            continue;
        }
        let at = begin + rng.random_range(0..60) * DAY_US;
        for (x, y) in [(a, b), (b, a)] {
            edges.push(Edge {
                src: (ACCOUNT, accounts[x].id.clone()),
                relation: "partner_of",
                dst: (ACCOUNT, accounts[y].id.clone()),
                created_at: at,
            });
        }
    }

    let mut signals = Vec::new();
    for u in users {
        for at in [30, 60] {
            let p = (rng.random::<f64>() * 1000.0).round() / 1000.0;
            signals.push(SignalRow {
                entity_id: user_id(u.index),
                name: "churn_risk",
                value: risk_label(p),
                probability: p,
                computed_at: begin + at * DAY_US,
            });
        }
    }
    for a in &accounts {
        let times: &[i64] = if rng.random::<f64>() < 0.5 {
            &[45, 75]
        } else {
            &[45]
        };
        for at in times {
            let p = (rng.random::<f64>() * 1000.0).round() / 1000.0;
            signals.push(SignalRow {
                entity_id: a.id.clone(),
                name: "account_health",
                value: if p >= 0.66 {
                    "green"
                } else if p >= 0.33 {
                    "amber"
                } else {
                    "red"
                },
                probability: p,
                computed_at: begin + at * DAY_US,
            });
        }
    }

    write_entities(&out.join("entities"), &entities)?;
    write_relationships(&out.join("relationships"), &edges)?;
    write_extra_signals(&out.join("signals"), &signals)?;
    write_metrics(out)
}

fn risk_label(p: f64) -> &'static str {
    if p >= 0.7 {
        "high"
    } else if p >= 0.3 {
        "medium"
    } else {
        "low"
    }
}

fn ts_array(values: Vec<i64>) -> ArrayRef {
    Arc::new(TimestampMicrosecondArray::from(values).with_timezone("UTC"))
}

fn write_entities(dir: &Path, rows: &[EntityRow]) -> Result<()> {
    let schema = entities_schema();
    let DataType::Struct(fields) = schema.field(2).data_type().clone() else {
        return Err(CatalogError::Invalid(
            "entities: attributes is not a struct".into(),
        ));
    };
    let mut et = StringBuilder::new();
    let mut id = StringBuilder::new();
    let mut account = StringBuilder::new();
    let mut country = StringBuilder::new();
    let mut description = StringBuilder::new();
    let mut variant = StringBuilder::new();
    let mut industry = StringBuilder::new();
    let mut name = StringBuilder::new();
    let mut plan = StringBuilder::new();
    let mut region = StringBuilder::new();
    let mut seats = Int64Builder::new();
    let mut updated = Vec::with_capacity(rows.len());
    for r in rows {
        et.append_value(r.entity_type);
        id.append_value(&r.entity_id);
        account.append_option(r.account.as_deref());
        country.append_option(r.country);
        description.append_option(r.description.as_deref());
        variant.append_option(r.variant);
        industry.append_option(r.industry);
        name.append_option(r.name.as_deref());
        plan.append_option(r.plan);
        region.append_option(r.region);
        seats.append_option(r.seats);
        updated.push(r.updated_at);
    }
    let attributes = StructArray::try_new(
        fields,
        vec![
            Arc::new(account.finish()) as ArrayRef,
            Arc::new(country.finish()),
            Arc::new(description.finish()),
            Arc::new(variant.finish()),
            Arc::new(industry.finish()),
            Arc::new(name.finish()),
            Arc::new(plan.finish()),
            Arc::new(region.finish()),
            Arc::new(seats.finish()),
        ],
        None,
    )?;
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(et.finish()),
            Arc::new(id.finish()),
            Arc::new(attributes),
            ts_array(updated),
        ],
    )?;
    write_parquet_atomic(dir, "part-00000", schema, &[batch])?;
    Ok(())
}

fn write_relationships(dir: &Path, edges: &[Edge]) -> Result<()> {
    let schema = relationships_schema();
    let mut cols: [StringBuilder; 5] = Default::default();
    let mut created = Vec::with_capacity(edges.len());
    for e in edges {
        cols[0].append_value(e.src.0);
        cols[1].append_value(&e.src.1);
        cols[2].append_value(e.relation);
        cols[3].append_value(e.dst.0);
        cols[4].append_value(&e.dst.1);
        created.push(e.created_at);
    }
    let mut arrays: Vec<ArrayRef> = cols
        .iter_mut()
        .map(|b| Arc::new(b.finish()) as ArrayRef)
        .collect();
    arrays.push(ts_array(created));
    let batch = RecordBatch::try_new(Arc::clone(&schema), arrays)?;
    write_parquet_atomic(dir, "part-00000", schema, &[batch])?;
    Ok(())
}

/// The schema of the `signals` table (DESIGN.md §3).
pub fn signals_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("entity_id", DataType::Utf8, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("value", DataType::Utf8, true),
        Field::new("probability", DataType::Float64, true),
        Field::new(
            "computed_at",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
    ]))
}

fn write_extra_signals(dir: &Path, rows: &[SignalRow]) -> Result<()> {
    let schema = signals_schema();
    let mut entity = StringBuilder::new();
    let mut name = StringBuilder::new();
    let mut value = StringBuilder::new();
    let mut probability = Float64Builder::new();
    let mut computed = Vec::with_capacity(rows.len());
    for r in rows {
        entity.append_value(&r.entity_id);
        name.append_value(r.name);
        value.append_value(r.value);
        probability.append_value(r.probability);
        computed.push(r.computed_at);
    }
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(entity.finish()),
            Arc::new(name.finish()),
            Arc::new(value.finish()),
            Arc::new(probability.finish()),
            ts_array(computed),
        ],
    )?;
    write_parquet_atomic(dir, "part-00001", schema, &[batch])?;
    Ok(())
}

/// The governed metrics of generated data (docs/metrics.md), written only if absent.
const METRICS_TOML: &str = r#"# Governed metrics (docs/metrics.md). Written by `signalql gen`.

[[metric]]
name = "analytics.weekly_active_users"
version = "1.4.0"
description = "Distinct users who started a session"
unit = "users"
expression = "count_distinct(user_id)"
filter = 'event_name = "session_start"'

[[metric]]
name = "analytics.revenue"
version = "2.0.0"
description = "Purchase amounts"
unit = "USD"
expression = "sum(properties.amount)"
filter = 'event_name = "purchase"'

[[metric]]
name = "analytics.purchasers"
version = "1.0.0"
description = "Distinct users who purchased"
unit = "users"
expression = "count_distinct(user_id)"
filter = 'event_name = "purchase"'

[[metric]]
name = "analytics.revenue_per_purchaser"
version = "1.1.0"
description = "Revenue divided by purchasers"
unit = "USD"
expression = "metric(analytics.revenue) / metric(analytics.purchasers)"

[[metric]]
name = "analytics.error_rate"
version = "0.2.0"
description = "Errors per session start"
expression = "count() / metric(analytics.sessions)"
filter = 'event_name = "error"'

[[metric]]
name = "analytics.sessions"
version = "1.0.0"
description = "Session starts"
unit = "sessions"
expression = "count()"
filter = 'event_name = "session_start"'
"#;

fn write_metrics(out: &Path) -> Result<()> {
    crate::write::write_new_file(&out.join("metrics.toml"), METRICS_TOML)
}
