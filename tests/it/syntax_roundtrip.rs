//! Syntax round-trip tests: spec examples parse, format canonically and re-parse to the same AST.

use proptest::prelude::*;
use signalql_engine::syntax::ast::*;
use signalql_engine::syntax::keywords::is_reserved;
use signalql_engine::syntax::{canonical_name, parse};

/// Every example query of the v0.3 spec, the v0.1 notes and the v0.5 grammar section.
const EXAMPLES: &[&str] = &[
    // v0.3
    "FROM events\nWHERE event_name = \"checkout\"\nDURING LAST 14 d\nAS OF \"2026-06-13T00:00:00Z\"\nGROUP BY signal(experiment_variant)\nRETURN signal(experiment_variant), count_distinct(user_id), stats(order_value)",
    "FROM metric(analytics.weekly_active_users)\nDURING LAST 12 w\nBUCKET BY w\nRETURN timestamp, metric_value",
    "DESCRIBE entities",
    "DESCRIBE entity(analytics.session)",
    "DESCRIBE metrics",
    "DESCRIBE signals",
    "WATCH (\n  FROM events\n  WHERE event_name = \"error\"\n  DURING LAST 1 h\n  RETURN count\n) WHEN count > 100",
    "FROM events\nWHERE event_name = \"session_start\"\nDURING LAST 30 d\nBUCKET BY d\nGROUP BY properties.platform\nRETURN timestamp, properties.platform, count_distinct(user_id)\nORDER BY timestamp ASC",
    "FROM events\nWHERE event_name = \"page_view\"\nDURING LAST 7 d\nGROUP BY properties.path\nHAVING count > 1000\nRETURN properties.path, count\nORDER BY count DESC\nLIMIT 10",
    "FUNNEL \"visit\" -> \"signup\" -> \"activated\"\nFROM events\nDURING LAST 28 d\nWITHIN 7 d\nGROUP BY properties.plan",
    "FROM events\nWHERE event_name = \"purchase\" AND properties.amount IS NOT NULL\nDURING LAST 14 d\nAS OF \"2026-06-13T00:00:00Z\"\nGROUP BY signal(experiment_variant)\nRETURN signal(experiment_variant), count_distinct(user_id), stats(properties.amount)",
    "FROM events WHERE event_name = \"x\" RETURN count()",
    "FROM events WHERE event_name = \"x\" RETURN count_distinct(user_id)",
    "FUNNEL \"a\" -> \"b\" FROM events DURING LAST 7 d WITHIN 7 d",
    // v0.3 grammar coverage
    "FROM entity(analytics.session) WHERE probability(churn) > 0.5 OR NOT (a IN (1, 2) AND b NOT IN (\"x\")) TRAVERSE owns DEPTH <= 2 DURING BETWEEN \"2026-01-01T00:00:00+01:00\" AND \"2026-02-01T00:00:00Z\" RETURN entity_id, semantic_match(\"refund \\\"now\\\"\") TREND UP OVER 4 WEEKS",
    "FIND sequence WHERE \"login\" -> checkout -> \"pay\" WITHIN 2 HOURS",
    "from events where properties.amount between -1.5 and 10 and properties.name contains \"a\\\\b\" during last 7 days return percentile(properties.amount, 0.95), avg(properties.amount), min(x), max(x), sum(x), variance(x), stddev(x), count(x) order by avg(properties.amount) desc, count() limit 5",
    "FROM events WHERE properties.signal = true AND properties.d = false AND properties.from IS NULL RETURN count",
    "EXPLAIN FROM events RETURN count",
    "EXPLAIN ANALYZE FUNNEL a -> b FROM events WITHIN 1 m",
    // v0.5
    "CONTEXT FOR \"design SignalQL object storage\"\nUSING PROJECT \"SignalQL\"\nBUDGET 32000 TOKENS\nPREFER CURRENT, VERIFIED\nWITH EVIDENCE",
    "EXPLAIN CONTEXT context://ctx_d73247c8d934cd364f4d22f2c10b3cea",
    "FIND OBJECT ABOUT \"pricing strategy\" USING REPRESENTATION \"transcript\"",
    "CONTEXT FOR \"t\" AS OF \"2026-06-13T00:00:00Z\" MAX AGE 30 DAYS EXCLUDE ROLE SECRET, STALE PREFER REPRESENTATION summary MAX OBJECTS 5 EXCLUDE ROLE INSTRUCTION FROM UNTRUSTED_EXTERNAL, UNTRUSTED MAX DEPTH 2 PREFER AUTHORITATIVE, CURRENT, CURRENT",
    "EXPLAIN CONTEXT \"context://ctx_abc\"",
    "FIND OBJECT (document) ABOUT \"x\" WHERE kind = \"doc\" AS OF \"2026-06-13T00:00:00Z\" LIMIT 3",
    "FIND OBJECT",
    // v0.1
    "COUNT events FROM events WHERE event_name = \"signup\" DURING LAST 7 DAYS",
    "COUNT users FROM events WHERE event_name = \"signup\" AND properties.plan = \"pro\" DURING LAST 30 DAYS GROUP BY DAY",
    "count distinct users from Events where traits.country = \"DE\" during between \"2026-01-01T00:00:00Z\" and \"2026-02-01T00:00:00Z\"",
    "COUNT DISTINCT EVENTS FROM events WHERE event_name = \"a\\\" DURING LAST 7DAYS",
    "FUNNEL \"visit\" THEN \"signup\" THEN \"purchase\" FROM events DURING LAST 14 DAYS",
    "FUNNEL \"a\" THEN \"b\" FROM events DURING BETWEEN \"2026-01-01T00:00:00Z\" AND \"2026-01-02T00:30:00Z\"",
];

/// Clears what the canonical text does not carry (the v0.1 `day` time column name).
fn without_v01_trace(mut s: Statement) -> Statement {
    if let Statement::Retrieve(q) = &mut s {
        q.time_column = None;
    }
    s
}

fn roundtrip(query: &str) -> String {
    let ast = parse(query).unwrap_or_else(|e| panic!("{query:?} does not parse: {e}"));
    let text = ast.to_string();
    let again = parse(&text).unwrap_or_else(|e| panic!("canonical {text:?} does not parse: {e}"));
    assert_eq!(
        again,
        without_v01_trace(ast),
        "round trip of {query:?} via {text:?}"
    );
    assert_eq!(
        again.to_string(),
        text,
        "formatting is not idempotent for {query:?}"
    );
    text
}

#[test]
fn all_examples_roundtrip() {
    for q in EXAMPLES {
        roundtrip(q);
    }
}

#[test]
fn canonical_text_of_spec_examples() {
    assert_eq!(
        roundtrip(EXAMPLES[10]),
        "FROM events\nWHERE event_name = \"purchase\" AND properties.amount IS NOT NULL\nDURING LAST 14 d AS OF \"2026-06-13T00:00:00Z\"\nGROUP BY signal(experiment_variant)\nRETURN signal(experiment_variant), count_distinct(user_id), stats(properties.amount)"
    );
    assert_eq!(roundtrip(EXAMPLES[8]), EXAMPLES[8]);
    assert_eq!(roundtrip(EXAMPLES[6]), EXAMPLES[6]);
    assert_eq!(roundtrip(EXAMPLES[9]), EXAMPLES[9]);
    assert_eq!(
        roundtrip("from events during last 7 days where a = 1 order by a return a"),
        "FROM events\nWHERE a = 1\nDURING LAST 7 d\nRETURN a\nORDER BY a ASC"
    );
    assert_eq!(
        roundtrip(EXAMPLES[23]),
        "CONTEXT FOR \"t\" PREFER CURRENT, AUTHORITATIVE, REPRESENTATION \"summary\" EXCLUDE UNTRUSTED, STALE, ROLE INSTRUCTION FROM UNTRUSTED_EXTERNAL, ROLE SECRET MAX OBJECTS 5 MAX DEPTH 2 MAX AGE 30 d AS OF \"2026-06-13T00:00:00Z\""
    );
    assert_eq!(
        roundtrip(EXAMPLES[20]),
        "CONTEXT FOR \"design SignalQL object storage\" USING PROJECT \"SignalQL\" BUDGET 32000 TOKENS PREFER CURRENT, VERIFIED WITH EVIDENCE"
    );
    assert_eq!(roundtrip(EXAMPLES[24]), "EXPLAIN CONTEXT context://ctx_abc");
    assert_eq!(
        roundtrip(
            "FROM events WHERE (a = 1 OR b = 2) AND NOT (c = 3 OR k.e = 4) AND (f = 5 AND g = 6) RETURN x"
        ),
        "FROM events\nWHERE (a = 1 OR b = 2) AND NOT (c = 3 OR k.e = 4) AND (f = 5 AND g = 6)\nRETURN x"
    );
    assert_eq!(
        roundtrip("FROM events WHERE a = 1 OR (b = 2 OR c = 3) RETURN x"),
        "FROM events\nWHERE a = 1 OR (b = 2 OR c = 3)\nRETURN x"
    );
    assert_eq!(
        roundtrip("FROM events WHERE ((a = 1)) OR b = 2 OR c = 3 RETURN x"),
        "FROM events\nWHERE a = 1 OR b = 2 OR c = 3\nRETURN x"
    );
    assert_eq!(
        roundtrip(
            "FROM events DURING BETWEEN \"2026-01-01T01:00:00.25+01:00\" AND \"2026-01-02T00:00:00Z\" RETURN percentile(x, 1)"
        ),
        "FROM events\nDURING BETWEEN \"2026-01-01T00:00:00.250000Z\" AND \"2026-01-02T00:00:00Z\"\nRETURN percentile(x, 1.0)"
    );
}

#[test]
fn v01_queries_format_to_v03() {
    let cases = [
        (
            "COUNT events FROM events WHERE event_name = \"signup\" DURING LAST 7 DAYS",
            "FROM events\nWHERE event_name = \"signup\"\nDURING LAST 7 d\nRETURN count",
        ),
        (
            "COUNT users FROM events WHERE event_name = \"signup\" AND properties.plan = \"pro\" DURING LAST 30 DAYS GROUP BY DAY",
            "FROM events\nWHERE event_name = \"signup\" AND properties.plan = \"pro\"\nDURING LAST 30 d\nBUCKET BY d\nRETURN timestamp, count_distinct(user_id)",
        ),
        (
            "count distinct users from Events where traits.country = \"DE\" during between \"2026-01-01T00:00:00Z\" and \"2026-02-01T00:00:00Z\"",
            "FROM events\nWHERE traits.country = \"DE\"\nDURING BETWEEN \"2026-01-01T00:00:00Z\" AND \"2026-02-01T00:00:00Z\"\nRETURN count_distinct(user_id)",
        ),
        (
            "COUNT DISTINCT EVENTS FROM events WHERE event_name = \"a\\\" DURING LAST 7DAYS",
            "FROM events\nWHERE event_name = \"a\\\\\"\nDURING LAST 7 d\nRETURN count",
        ),
        (
            "FUNNEL \"visit\" THEN \"signup\" THEN \"purchase\" FROM events DURING LAST 14 DAYS",
            "FUNNEL \"visit\" -> \"signup\" -> \"purchase\"\nFROM events\nDURING LAST 14 d\nWITHIN 14 d",
        ),
        (
            "FUNNEL \"a\" THEN \"b\" FROM events DURING BETWEEN \"2026-01-01T00:00:00Z\" AND \"2026-01-02T00:30:00Z\"",
            "FUNNEL \"a\" -> \"b\"\nFROM events\nDURING BETWEEN \"2026-01-01T00:00:00Z\" AND \"2026-01-02T00:30:00Z\"\nWITHIN 25 h",
        ),
        (
            "funnel \"a\\\" then \"b\" from events during between \"2026-01-01\" and \"2026-01-03\"",
            "FUNNEL \"a\\\\\" -> \"b\"\nFROM events\nDURING BETWEEN \"2026-01-01T00:00:00Z\" AND \"2026-01-03T00:00:00Z\"\nWITHIN 48 h",
        ),
    ];
    for (v01, v03) in cases {
        assert_eq!(roundtrip(v01), v03, "{v01}");
    }
    let Statement::Retrieve(q) = parse(cases[1].0).unwrap() else {
        panic!()
    };
    assert_eq!(q.time_column.as_deref(), Some("day"));
    assert_eq!(
        q.window.unwrap().range,
        TimeWindow::Last(Duration {
            n: 30,
            unit: TimeUnit::Day
        })
    );
}

#[test]
fn count_forms() {
    let Statement::Retrieve(q) =
        parse("FROM events GROUP BY a HAVING count > 1 RETURN count, count(), count(a) ORDER BY count, count() DESC, a").unwrap()
    else {
        panic!()
    };
    assert_eq!(
        q.returns,
        vec![
            ReturnItem::Count,
            ReturnItem::Aggregate(Aggregate::CountAll),
            ReturnItem::Aggregate(Aggregate::Standard(
                AggFn::Count,
                FieldRef::Path(vec!["a".into()])
            )),
        ]
    );
    assert!(matches!(
        q.having,
        Some(BoolExpr::Predicate(Predicate {
            lhs: Operand::CountShorthand,
            ..
        }))
    ));
    assert_eq!(q.order_by[0].key, OrderKey::Count);
    assert_eq!(q.order_by[1].key, OrderKey::Aggregate(Aggregate::CountAll));
    assert!(q.order_by[1].descending && !q.order_by[0].descending && !q.order_by[2].descending);
    assert_eq!(q.return_spans.len(), 3);
    assert_eq!((q.return_spans[1].line, q.return_spans[1].column), (1, 55));
}

#[test]
fn canonical_names() {
    let Statement::Retrieve(q) = parse(
        "FROM events RETURN count, count(), count_distinct(user_id), properties.platform, percentile(properties.amount, 0.95), stats(properties.amount), signal(experiment_variant)",
    )
    .unwrap() else {
        panic!()
    };
    let names: Vec<String> = q.returns.iter().map(canonical_name).collect();
    assert_eq!(
        names,
        [
            "count",
            "count",
            "count_distinct(user_id)",
            "properties.platform",
            "percentile(properties.amount, 0.95)",
            "stats(properties.amount)",
            "signal(experiment_variant)"
        ]
    );
}

#[test]
fn ast_serialises_to_json() {
    let ast = parse(EXAMPLES[8]).unwrap();
    let json = serde_json::to_string(&ast).unwrap();
    assert!(json.contains("\"retrieve\""), "{json}");
    // Spans are not serialised, so compare the canonical text of the deserialised AST.
    let back: Statement = serde_json::from_str(&json).unwrap();
    assert_eq!(back.to_string(), ast.to_string());
}

// ----- random ASTs -----

fn ident() -> impl Strategy<Value = String> {
    "[a-zA-Z_][a-zA-Z0-9_]{0,6}".prop_filter("reserved", |s| !is_reserved(s))
}

fn word() -> impl Strategy<Value = String> {
    "[a-zA-Z_][a-zA-Z0-9_]{0,6}"
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z \"\\\\]{0,8}", "\\PC{0,6}", "[a\n\t\"\\\\é💡-]{0,5}"]
}

fn field_ref() -> impl Strategy<Value = FieldRef> {
    prop_oneof![
        4 => (ident(), prop::collection::vec(word(), 0..3)).prop_map(|(first, rest)| {
            FieldRef::Path(std::iter::once(first).chain(rest).collect())
        }),
        1 => ident().prop_map(FieldRef::Signal),
        1 => ident().prop_map(FieldRef::Probability),
        1 => text().prop_map(FieldRef::SemanticMatch),
    ]
}

fn literal() -> impl Strategy<Value = Literal> {
    prop_oneof![
        text().prop_map(Literal::String),
        any::<i64>().prop_map(Literal::Integer),
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(Literal::Decimal),
        (-1000i32..1000, 0u32..100)
            .prop_map(|(a, b)| Literal::Decimal(a as f64 + b as f64 / 100.0)),
        any::<bool>().prop_map(Literal::Boolean),
    ]
}

fn literals() -> impl Strategy<Value = Vec<Literal>> {
    prop::collection::vec(literal(), 1..4)
}

fn comparator() -> impl Strategy<Value = Comparator> {
    prop_oneof![
        Just(Comparator::Eq),
        Just(Comparator::NotEq),
        Just(Comparator::Gt),
        Just(Comparator::Lt),
        Just(Comparator::GtEq),
        Just(Comparator::LtEq),
    ]
}

fn field_op(contains: bool) -> impl Strategy<Value = PredicateOp> {
    let mut ops = vec![
        (comparator(), literal())
            .prop_map(|(c, v)| PredicateOp::Compare(c, v))
            .boxed(),
        literals().prop_map(PredicateOp::In).boxed(),
        literals().prop_map(PredicateOp::NotIn).boxed(),
        (literal(), literal())
            .prop_map(|(a, b)| PredicateOp::Between(a, b))
            .boxed(),
        Just(PredicateOp::IsNull).boxed(),
        Just(PredicateOp::IsNotNull).boxed(),
    ];
    if contains {
        ops.push(text().prop_map(PredicateOp::Contains).boxed());
    }
    prop::strategy::Union::new(ops)
}

fn agg_fn() -> impl Strategy<Value = AggFn> {
    prop_oneof![
        Just(AggFn::Count),
        Just(AggFn::CountDistinct),
        Just(AggFn::Sum),
        Just(AggFn::Avg),
        Just(AggFn::Min),
        Just(AggFn::Max),
        Just(AggFn::Variance),
        Just(AggFn::Stddev),
    ]
}

fn aggregate() -> impl Strategy<Value = Aggregate> {
    prop_oneof![
        Just(Aggregate::CountAll),
        (agg_fn(), field_ref()).prop_map(|(f, x)| Aggregate::Standard(f, x)),
        (field_ref(), 0.0f64..=1.0).prop_map(|(x, p)| Aggregate::Percentile(x, p)),
        (field_ref(), prop_oneof![Just(0.0), Just(0.5), Just(1.0)])
            .prop_map(|(x, p)| Aggregate::Percentile(x, p)),
        field_ref().prop_map(Aggregate::Stats),
    ]
}

fn pred(lhs: Operand, op: PredicateOp) -> BoolExpr {
    BoolExpr::Predicate(Predicate {
        lhs,
        op,
        span: Span::default(),
    })
}

fn bool_tree(leaf: BoxedStrategy<BoolExpr>) -> impl Strategy<Value = BoolExpr> {
    leaf.prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone())
                .prop_map(|(l, r)| BoolExpr::And(Box::new(l), Box::new(r))),
            (inner.clone(), inner.clone())
                .prop_map(|(l, r)| BoolExpr::Or(Box::new(l), Box::new(r))),
            inner.prop_map(|x| BoolExpr::Not(Box::new(x))),
        ]
    })
}

fn where_expr() -> impl Strategy<Value = BoolExpr> {
    bool_tree(
        (field_ref(), field_op(true))
            .prop_map(|(f, op)| pred(Operand::Field(f), op))
            .boxed(),
    )
}

fn having_expr() -> impl Strategy<Value = BoolExpr> {
    let leaf = prop_oneof![
        (field_ref(), field_op(false)).prop_map(|(f, op)| pred(Operand::Field(f), op)),
        (aggregate(), comparator(), literal())
            .prop_map(|(a, c, v)| pred(Operand::Aggregate(a), PredicateOp::Compare(c, v))),
        (comparator(), literal())
            .prop_map(|(c, v)| pred(Operand::CountShorthand, PredicateOp::Compare(c, v))),
    ];
    bool_tree(leaf.boxed())
}

fn time_unit() -> impl Strategy<Value = TimeUnit> {
    prop_oneof![
        Just(TimeUnit::Hour),
        Just(TimeUnit::Day),
        Just(TimeUnit::Week),
        Just(TimeUnit::Month)
    ]
}

fn duration() -> impl Strategy<Value = Duration> {
    (any::<u64>(), time_unit()).prop_map(|(n, unit)| Duration { n, unit })
}

fn format_ts(secs: i64, micros: u32) -> Timestamp {
    let t = chrono::DateTime::from_timestamp(secs, micros * 1000).unwrap();
    Timestamp(if micros == 0 {
        t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
    } else {
        t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
    })
}

const MAX_SECS: i64 = 253_402_300_799; // 9999-12-31T23:59:59Z

fn micros() -> impl Strategy<Value = u32> {
    prop_oneof![Just(0u32), 0u32..1_000_000]
}

fn timestamp() -> impl Strategy<Value = Timestamp> {
    (-62_167_219_200i64..=MAX_SECS, micros()).prop_map(|(s, m)| format_ts(s, m))
}

fn window() -> impl Strategy<Value = Window> {
    let range = prop_oneof![
        duration().prop_map(TimeWindow::Last),
        (0i64..MAX_SECS, micros(), 1i64..100_000_000, micros()).prop_map(|(s, m, d, m2)| {
            TimeWindow::Between {
                start: format_ts(s, m),
                end: format_ts((s + d).min(MAX_SECS), m2.max(m + 1).min(999_999)),
            }
        }),
    ];
    (range, prop::option::of(timestamp())).prop_map(|(range, as_of)| Window {
        range,
        as_of,
        span: Span::default(),
    })
}

fn source() -> impl Strategy<Value = Source> {
    prop_oneof![
        Just(Source::Events),
        prop::collection::vec(word(), 1..3).prop_map(Source::Entity),
        prop::collection::vec(word(), 1..3).prop_map(Source::Metric),
    ]
}

fn return_item() -> impl Strategy<Value = ReturnItem> {
    prop_oneof![
        field_ref().prop_map(ReturnItem::Field),
        Just(ReturnItem::Count),
        aggregate().prop_map(ReturnItem::Aggregate)
    ]
}

fn order_term() -> impl Strategy<Value = OrderTerm> {
    let key = prop_oneof![
        field_ref().prop_map(OrderKey::Field),
        Just(OrderKey::Count),
        aggregate().prop_map(OrderKey::Aggregate)
    ];
    (key, any::<bool>()).prop_map(|(key, descending)| OrderTerm {
        key,
        descending,
        span: Span::default(),
    })
}

fn retrieve() -> impl Strategy<Value = RetrieveQuery> {
    let a = (
        source(),
        prop::option::of(where_expr()),
        prop::option::of(
            (ident(), any::<u64>()).prop_map(|(relation, depth)| Traverse { relation, depth }),
        ),
        prop::option::of(window()),
        prop::option::of(time_unit()),
        prop::collection::vec(field_ref(), 0..3),
    );
    let b = (
        prop::option::of(having_expr()),
        prop::collection::vec(return_item(), 1..4),
        prop::collection::vec(order_term(), 0..3),
        prop::option::of(any::<u64>()),
        prop::option::of(
            (
                prop_oneof![
                    Just(TrendDir::Up),
                    Just(TrendDir::Down),
                    Just(TrendDir::Flat)
                ],
                duration(),
            )
                .prop_map(|(dir, over)| Trend { dir, over }),
        ),
    );
    (a, b).prop_map(
        |(
            (source, filter, traverse, window, bucket, group_by),
            (having, returns, order_by, limit, trend),
        )| {
            RetrieveQuery {
                return_spans: vec![Span::default(); returns.len()],
                group_spans: vec![Span::default(); group_by.len()],
                source,
                filter,
                traverse,
                window,
                bucket,
                group_by,
                having,
                returns,
                order_by,
                limit,
                trend,
                time_column: None,
                span: Span::default(),
            }
        },
    )
}

fn steps() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(prop_oneof![text(), Just("x\" THEN ".to_string())], 2..5)
}

fn funnel() -> impl Strategy<Value = FunnelQuery> {
    (
        steps(),
        source(),
        prop::option::of(where_expr()),
        prop::option::of(window()),
        duration(),
        prop_oneof![
            Just(FunnelOrder::Ordered),
            Just(FunnelOrder::Strict),
            Just(FunnelOrder::Any)
        ],
        prop::collection::vec(text(), 0..3),
        prop::collection::vec(field_ref(), 0..3),
    )
        .prop_map(
            |(steps, source, filter, window, within, order, excluding, group_by)| {
                // The parser rejects an excluded name that is a step and collapses repeats.
                let mut excl: Vec<String> = Vec::new();
                for x in excluding {
                    if !steps.contains(&x) && !excl.contains(&x) {
                        excl.push(x);
                    }
                }
                FunnelQuery {
                    steps,
                    source,
                    filter,
                    window,
                    within,
                    order,
                    excluding: excl,
                    group_by,
                    span: Span::default(),
                }
            },
        )
}

fn sequence() -> impl Strategy<Value = SequenceQuery> {
    (steps(), duration()).prop_map(|(steps, within)| SequenceQuery {
        steps,
        within,
        span: Span::default(),
    })
}

fn watch() -> impl Strategy<Value = WatchQuery> {
    (retrieve(), having_expr()).prop_map(|(q, when)| WatchQuery {
        query: Box::new(q),
        when,
        span: Span::default(),
    })
}

fn describe() -> impl Strategy<Value = DescribeQuery> {
    prop_oneof![
        Just(DescribeTarget::Entities),
        Just(DescribeTarget::Events),
        Just(DescribeTarget::Signals),
        Just(DescribeTarget::Metrics),
        Just(DescribeTarget::Relationships),
        prop::collection::vec(word(), 1..3).prop_map(DescribeTarget::Entity),
    ]
    .prop_map(|target| DescribeQuery {
        target,
        span: Span::default(),
    })
}

fn trust() -> impl Strategy<Value = TrustLevel> {
    prop_oneof![
        Just(TrustLevel::Untrusted),
        Just(TrustLevel::Unknown),
        Just(TrustLevel::Inferred),
        Just(TrustLevel::Verified),
        Just(TrustLevel::Authoritative),
    ]
}

fn role() -> impl Strategy<Value = Role> {
    prop_oneof![
        Just(Role::Data),
        Just(Role::Instruction),
        Just(Role::Prompt),
        Just(Role::Policy),
        Just(Role::Executable),
        Just(Role::Secret),
        Just(Role::UntrustedExternal),
    ]
}

fn context_task() -> impl Strategy<Value = ContextQuery> {
    let prefer = prop::collection::vec(
        prop_oneof![
            Just(PreferItem::Current),
            trust().prop_map(PreferItem::Trust),
            text().prop_map(PreferItem::Representation)
        ],
        0..4,
    );
    let exclude = prop::collection::vec(
        prop_oneof![
            Just(ExcludeItem::Untrusted),
            Just(ExcludeItem::Stale),
            (role(), prop::option::of(role()))
                .prop_map(|(role, from)| ExcludeItem::Role { role, from }),
        ],
        0..4,
    );
    let a = (
        text(),
        prop::option::of(text()),
        prop::option::of(any::<u64>()),
        prefer,
        exclude,
    );
    let b = (
        prop::option::of(any::<u64>()),
        prop::option::of(any::<u64>()),
        prop::option::of(duration()),
        any::<bool>(),
        any::<bool>(),
        prop::option::of(timestamp()),
        prop::option::of(prop_oneof![
            Just("chars-div-4-v1".to_string()),
            Just("o200k_base".to_string())
        ]),
    );
    // The entity form (CONTEXT FOR entity(type, "id")): a type of one or two words, any id.
    let subject = prop::option::of((
        ident().prop_filter("not an entity", |t| !t.eq_ignore_ascii_case("object")),
        prop::option::of(word()),
        text(),
    ));
    (a, b, subject, prop::option::of(text())).prop_map(
        |(
            (task, project, budget, mut prefer, mut exclude),
            (max_objects, max_depth, max_age, with_evidence, compress, as_of, estimator),
            subject,
            kind,
        )| {
            let subject = subject.map(|(t, rest, entity_id)| EntityRef {
                entity_type: match rest {
                    Some(r) => format!("{t}.{r}"),
                    None => t,
                },
                entity_id,
            });
            // The entity form has no task, so no COMPRESS either.
            let (task, compress) = match &subject {
                Some(_) => (String::new(), false),
                None => (task, compress),
            };
            prefer.sort();
            prefer.dedup();
            exclude.sort();
            exclude.dedup();
            ContextQuery {
                task,
                subject,
                project,
                kind,
                budget,
                prefer,
                exclude,
                max_objects,
                max_depth,
                max_age,
                with_evidence,
                compress,
                estimator,
                as_of,
                span: Span::default(),
            }
        },
    )
}

fn explain_context() -> impl Strategy<Value = ExplainContext> {
    prop_oneof![
        "[0-9a-f]{32}".prop_map(|h| format!("context://ctx_{h}")),
        "[a-z \"(),\\\\]{1,6}".prop_map(|s| format!("context://{s}"))
    ]
    .prop_map(|address| ExplainContext {
        address,
        span: Span::default(),
    })
}

fn find_object() -> impl Strategy<Value = FindObjectQuery> {
    (
        prop::option::of(prop_oneof![text(), ident()]),
        prop::option::of((text(), prop::option::of(text()))),
        prop::option::of(where_expr()),
        prop::option::of(timestamp()),
        prop::option::of(any::<u64>()),
    )
        .prop_map(|(name, about, filter, as_of, limit)| FindObjectQuery {
            name,
            representation: about.as_ref().and_then(|a| a.1.clone()),
            about: about.map(|a| a.0),
            filter,
            as_of,
            limit,
            span: Span::default(),
        })
}

fn statement() -> impl Strategy<Value = Statement> {
    let analytics = prop_oneof![
        retrieve().prop_map(Statement::Retrieve),
        funnel().prop_map(Statement::Funnel),
        sequence().prop_map(Statement::Sequence),
        watch().prop_map(Statement::Watch),
    ];
    prop_oneof![
        3 => retrieve().prop_map(Statement::Retrieve),
        1 => funnel().prop_map(Statement::Funnel),
        1 => sequence().prop_map(Statement::Sequence),
        1 => watch().prop_map(Statement::Watch),
        1 => describe().prop_map(Statement::Describe),
        2 => context_task().prop_map(Statement::ContextTask),
        1 => explain_context().prop_map(Statement::ExplainContext),
        1 => find_object().prop_map(Statement::FindObject),
        1 => (any::<bool>(), analytics).prop_map(|(analyze, s)| Statement::Explain(ExplainQuery { analyze, statement: Box::new(s) })),
    ]
}

/// Runs `f` on a thread with a large stack: the nested strategy types of a debug build need
/// more than the default 2 MiB test-thread stack.
fn with_big_stack(f: impl FnOnce() + Send + 'static) {
    let handle = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(f)
        .unwrap();
    if let Err(panic) = handle.join() {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn random_asts_roundtrip() {
    with_big_stack(|| {
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(512));
        let cases = std::sync::atomic::AtomicUsize::new(0);
        let result = runner.run(&statement(), |ast| {
            cases.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let text = ast.to_string();
            let parsed = parse(&text);
            prop_assert!(parsed.is_ok(), "{text}\n{:?}", parsed.err());
            let parsed = parsed.unwrap();
            prop_assert_eq!(&parsed, &ast, "{}", text);
            prop_assert_eq!(parsed.to_string(), text);
            Ok(())
        });
        if let Err(e) = result {
            panic!("{e}");
        }
        assert!(cases.into_inner() >= 512);
    });
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,40}") {
        let _ = parse(&text);
    }

    #[test]
    fn mangled_queries_never_panic(i in 0..EXAMPLES.len(), cut in 0usize..400, junk in "[ ()\"\\\\a-z0-9,.<>=!-]{0,4}") {
        let q = EXAMPLES[i];
        let mut cut = cut.min(q.len());
        while !q.is_char_boundary(cut) {
            cut -= 1;
        }
        let _ = parse(&format!("{}{}{}", &q[..cut], junk, &q[cut..]));
    }
}
