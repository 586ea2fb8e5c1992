//! How a folder table's Parquet files are scanned (docs/scan.md): strings inside structs are
//! decoded as `Utf8View`, in files signalql wrote and in files pyarrow and DuckDB wrote; a
//! window that keeps some row groups of one file is split over the partitions by the bytes
//! of those row groups alone.

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::logical_expr::{col, lit};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;
use datafusion::scalar::ScalarValue;
use signalql::catalog::Dataset;
use signalql::{Engine, EngineOptions};

/// Every batch of a full scan of `root`'s events table through the table's own provider.
async fn scan_events(root: &Path) -> Vec<RecordBatch> {
    let engine = Engine::open_with(root, EngineOptions::default()).unwrap();
    let ctx: &SessionContext = engine.session();
    let dataset: &Dataset = engine.dataset();
    let table = dataset.table(ctx, "events").await.unwrap();
    let state = ctx.state();
    let plan = table.provider.scan(&state, None, &[], None).await.unwrap();
    datafusion::physical_plan::collect(plan, ctx.task_ctx())
        .await
        .unwrap()
}

/// The values of the string child `child` of `properties` in every file of `root/events`,
/// read by the Parquet reader alone (no hint: as the file declares them), as text.
fn plain_values(root: &Path, child: &str) -> Vec<Option<String>> {
    let mut files: Vec<_> = std::fs::read_dir(root.join("events"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(f).unwrap())
            .unwrap()
            .build()
            .unwrap();
        for batch in reader {
            let batch = batch.unwrap();
            let props = batch.column_by_name("properties").unwrap().as_struct();
            let values = cast(props.column_by_name(child).unwrap(), &DataType::Utf8).unwrap();
            let values = values.as_string::<i32>();
            out.extend(
                (0..values.len()).map(|i| values.is_valid(i).then(|| values.value(i).to_string())),
            );
        }
    }
    out
}

/// Asserts that the scan yields `properties.<child>` as `Utf8View` with the same values as
/// the plain reader (compared sorted: the scan's partitions may interleave the files). With
/// `decoded`, also that the Parquet reader decoded the views itself, pointing into the
/// dictionary pages: their data buffers hold fewer bytes than a quarter of the long
/// (non-inlined, over 12 bytes) values they view. Strings read as `Utf8` and cast to views
/// afterwards keep every value's bytes in their buffer, so that fails (checked by hand with
/// the hint removed from catalog::folder).
fn assert_views(root: &Path, child: &str, decoded: bool) {
    let batches = crate::common::rt().block_on(scan_events(root));
    assert!(!batches.is_empty());
    let mut got = Vec::new();
    let (mut long_bytes, mut buffer_bytes) = (0usize, 0usize);
    for b in &batches {
        let props = b.column_by_name("properties").unwrap().as_struct();
        let values = props.column_by_name(child).unwrap();
        assert_eq!(
            values.data_type(),
            &DataType::Utf8View,
            "properties.{child} under {}",
            root.display()
        );
        let values = values.as_string_view();
        buffer_bytes += values.data_buffers().iter().map(|d| d.len()).sum::<usize>();
        long_bytes += (0..values.len())
            .filter(|i| values.is_valid(*i) && values.value(*i).len() > 12)
            .map(|i| values.value(i).len())
            .sum::<usize>();
        got.extend(
            (0..values.len()).map(|i| values.is_valid(i).then(|| values.value(i).to_string())),
        );
    }
    let mut want = plain_values(root, child);
    got.sort();
    want.sort();
    assert_eq!(got, want);
    assert!(want.iter().any(|v| v.is_some()));
    if decoded {
        assert!(
            buffer_bytes * 4 < long_bytes,
            "properties.{child}: {buffer_bytes} buffer bytes for {long_bytes} bytes of long values"
        );
    }
}

#[test]
fn nested_strings_decode_as_views_in_generated_files() {
    let dir = tempfile::tempdir().unwrap();
    let opts = signalql::catalog::generator::GenOptions {
        rows: 5_000,
        ..signalql::catalog::generator::GenOptions::new(dir.path())
    };
    signalql::catalog::generator::generate_events(&opts, None).unwrap();
    assert_views(dir.path(), "path", true);
    assert_views(dir.path(), "platform", false);
}

#[test]
fn nested_strings_decode_as_views_in_pyarrow_files() {
    // tests/data/foreign/texttime: written by pyarrow (tests/data/foreign/make.py), with
    // `properties: struct<country: string, n: int64>` in two files.
    let tmp = tempfile::tempdir().unwrap();
    crate::common::copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/foreign/texttime"),
        tmp.path(),
    );
    assert_views(tmp.path(), "country", false);
}

#[test]
fn nested_strings_decode_as_views_in_duckdb_files() {
    crate::common::python_package("duckdb", "duckdb==2.0.1");
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("events")).unwrap();
    std::fs::write(
        tmp.path().join("signalql.toml"),
        "now = \"2026-06-13T00:00:00Z\"\n",
    )
    .unwrap();
    let out = tmp.path().join("events/part-0.parquet");
    let script = format!(
        "import duckdb\n\
         duckdb.sql(\"\"\"COPY (SELECT 'e' || (i % 3) AS event_name, 'u' || (i % 7) AS user_id, \
         TIMESTAMPTZ '2026-06-01 00:00:00+00' + i * INTERVAL 1 MINUTE AS timestamp, \
         {{'plan': CASE WHEN i % 5 = 0 THEN NULL ELSE 'a-longer-plan-name-' || (i % 4) END, 'n': i}} AS properties \
         FROM range(3000) t(i)) TO '{}' (FORMAT parquet)\"\"\")\n",
        out.display()
    );
    let status = std::process::Command::new("python3")
        .args(["-c", &script])
        .status()
        .unwrap();
    assert!(status.success());
    assert_views(tmp.path(), "plan", true);
}

/// 2026-06-01T00:00:00Z in microseconds, and a minute.
const START: i64 = 1_780_272_000_000_000;
const MINUTE: i64 = 60_000_000;

/// An events file of `n` rows in row groups of 1 000, one row per minute from [`START`], `n`
/// the row's number, and the timestamp of row `null_at` NULL.
fn write_minutes(path: &Path, n: i64, null_at: Option<i64>) {
    let ts: Vec<Option<i64>> = (0..n)
        .map(|i| (Some(i) != null_at).then_some(START + i * MINUTE))
        .collect();
    let columns: Vec<(&str, ArrayRef)> = vec![
        (
            "event_name",
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("e{}", i % 3)),
            )),
        ),
        (
            "user_id",
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("u{}", i % 11)),
            )),
        ),
        (
            "timestamp",
            Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
        ),
        ("n", Arc::new(Int64Array::from_iter_values(0..n))),
    ];
    let props = datafusion::parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(1_000))
        .build();
    crate::common::write_parquet(path, columns, Some(props));
}

/// Eight row groups of 1 000 rows, one row per minute from 2026-06-01T00:00Z; a window over
/// the last 2 500 minutes keeps the last three row groups (5 000..8 000: the sixth holds
/// minute 5 500, the first in the window). With two partitions and no minimum size for
/// splitting, the scan is split into byte ranges that all lie inside those three row groups,
/// each row group in one of them and at least two of them holding a row group (the two
/// parts, the window tested and not, are each split in two), and the count is 2 500.
#[test]
fn a_window_inside_one_file_is_split_over_the_partitions() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("signalql.toml"),
        "now = \"2026-06-13T00:00:00Z\"\n[datafusion]\n\
         \"datafusion.execution.target_partitions\" = \"2\"\n\
         \"datafusion.optimizer.repartition_file_min_size\" = \"0\"\n",
    )
    .unwrap();
    let start = START;
    write_minutes(&tmp.path().join("events/part-0.parquet"), 8_000, None);
    let from = start + 5_500 * 60_000_000;
    let (ranges, count) = crate::common::rt().block_on(async {
        let engine = Engine::open_with(tmp.path(), EngineOptions::default()).unwrap();
        let ctx = engine.session();
        let table = engine.dataset().table(ctx, "events").await.unwrap();
        let df = ctx
            .read_table(table.provider.clone())
            .unwrap()
            .filter(
                col("timestamp").gt_eq(lit(ScalarValue::TimestampMicrosecond(
                    Some(from),
                    Some("UTC".into()),
                ))),
            )
            .unwrap()
            .aggregate(
                vec![],
                vec![datafusion::functions_aggregate::count::count_all()],
            )
            .unwrap();
        let plan = df.clone().create_physical_plan().await.unwrap();
        let ranges = scan_ranges(plan.as_ref());
        let batches = df.collect().await.unwrap();
        let count = batches[0]
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
            .value(0);
        (ranges, count)
    });
    assert_eq!(count, 2_500);
    // The byte offsets of the row groups, from the footer.
    let file = std::fs::File::open(tmp.path().join("events/part-0.parquet")).unwrap();
    let meta = ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .metadata()
        .clone();
    let offsets: Vec<i64> = meta
        .row_groups()
        .iter()
        .map(|g| {
            let c = g.column(0);
            c.dictionary_page_offset().unwrap_or(c.data_page_offset())
        })
        .collect();
    assert_eq!(offsets.len(), 8);
    assert!(ranges.len() >= 2, "{ranges:?}");
    for (s, e) in &ranges {
        assert!(
            *s >= offsets[5],
            "{ranges:?} starts before row group 5 ({offsets:?})"
        );
        assert!(s < e);
    }
    // Each of the three kept row groups starts in exactly one range, and both ranges hold one.
    let starts_in = |o: i64| ranges.iter().filter(|(s, e)| *s <= o && o < *e).count();
    assert!(
        offsets[5..].iter().all(|o| starts_in(*o) == 1),
        "{ranges:?} {offsets:?}"
    );
    let holding = ranges
        .iter()
        .filter(|(s, e)| offsets[5..].iter().any(|o| s <= o && o < e))
        .count();
    assert!(holding >= 2, "{ranges:?} {offsets:?}");
}

/// The byte ranges of every file the plan's scans read, one per partition's piece.
fn scan_ranges(plan: &dyn ExecutionPlan) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    if let Some(exec) = plan.downcast_ref::<DataSourceExec>()
        && let Some(config) = exec.data_source().downcast_ref::<FileScanConfig>()
    {
        for group in &config.file_groups {
            for f in group.iter() {
                let r = f.range.as_ref().expect("a narrowed file has a range");
                out.push((r.start, r.end));
            }
        }
    }
    for c in plan.children() {
        out.extend(scan_ranges(c.as_ref()));
    }
    out
}

/// The physical plans under `plan` of one kind, by name.
fn nodes<'a>(plan: &'a dyn ExecutionPlan, name: &str, out: &mut Vec<&'a dyn ExecutionPlan>) {
    if plan.name() == name {
        out.push(plan);
    }
    for c in plan.children() {
        nodes(c.as_ref(), name, out);
    }
}

/// Ten row groups of 1 000 rows, one row per minute from 2026-06-01T00:00Z, `n` = the row's
/// number, the timestamp of row 6 500 NULL. The window [minute 5 500, minute 8 500) keeps row
/// groups 5 to 8: 5 needs its lower bound tested, 8 its upper bound, 6 both (its NULL keeps its
/// statistics from proving either), and 7 neither. The scan is four parts, row group 7's
/// reading no timestamp at all; every answer is the one computed by hand and the one plain
/// DataFusion gives over the same file, and `file_row_index()` still reads inside the parts.
#[test]
fn row_groups_a_window_covers_are_read_without_testing_it() {
    use datafusion::functions::core::expr_fn::file_row_index;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("signalql.toml"),
        "now = \"2026-06-13T00:00:00Z\"\n",
    )
    .unwrap();
    let (start, minute) = (START, MINUTE);
    let file = tmp.path().join("events/part-0.parquet");
    write_minutes(&file, 10_000, Some(6_500));
    let at = |m: i64| {
        lit(ScalarValue::TimestampMicrosecond(
            Some(start + m * minute),
            Some("UTC".into()),
        ))
    };
    let window = col("timestamp")
        .gt_eq(at(5_500))
        .and(col("timestamp").lt(at(8_500)));
    // By hand: the rows 5 500 .. 8 500 but the NULL one.
    let rows: Vec<i64> = (5_500..8_500).filter(|i| *i != 6_500).collect();
    let by_hand = (rows.len() as i64, rows.iter().sum::<i64>());
    let (parts, free_projection, ours, plain, indices) = crate::common::rt().block_on(async {
        let engine = Engine::open_with(tmp.path(), EngineOptions::default()).unwrap();
        let ctx = engine.session();
        let table = engine.dataset().table(ctx, "events").await.unwrap();
        let sum_n = |df: datafusion::dataframe::DataFrame| {
            df.aggregate(
                vec![],
                vec![
                    datafusion::functions_aggregate::count::count_all(),
                    datafusion::functions_aggregate::sum::sum(col("n")),
                ],
            )
            .unwrap()
        };
        let df = sum_n(
            ctx.read_table(table.provider.clone())
                .unwrap()
                .filter(window.clone())
                .unwrap(),
        );
        let plan = df.clone().create_physical_plan().await.unwrap();
        let mut found = Vec::new();
        nodes(plan.as_ref(), "ScanPartsExec", &mut found);
        assert_eq!(found.len(), 1, "no ScanPartsExec in the plan");
        let parts = found[0].children().len();
        // The part of row group 7 alone needs no filter: its scan has no predicate and
        // reads `n` only.
        let mut scans = Vec::new();
        nodes(found[0], "DataSourceExec", &mut scans);
        let free: Vec<String> = scans
            .iter()
            .filter_map(|s| s.downcast_ref::<DataSourceExec>())
            .filter_map(|s| s.data_source().downcast_ref::<FileScanConfig>())
            .filter(|c| c.file_source().filter().is_none())
            .map(|c| {
                let schema = c.projected_schema().unwrap();
                schema
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        let total = |batches: Vec<RecordBatch>| {
            let b = &batches[0];
            (
                b.column(0)
                    .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                    .value(0),
                b.column(1)
                    .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                    .value(0),
            )
        };
        let ours = total(df.collect().await.unwrap());
        // Plain DataFusion over the same file: its own listing table, the filter above it.
        let plain_ctx = SessionContext::new();
        plain_ctx
            .register_parquet(
                "plain",
                file.to_str().unwrap(),
                datafusion::prelude::ParquetReadOptions::default(),
            )
            .await
            .unwrap();
        let plain = total(
            sum_n(
                plain_ctx
                    .table("plain")
                    .await
                    .unwrap()
                    .filter(window.clone())
                    .unwrap(),
            )
            .collect()
            .await
            .unwrap(),
        );
        // file_row_index() evaluated inside the parts: each row's index in the file is `n`.
        let batches = ctx
            .read_table(table.provider.clone())
            .unwrap()
            .filter(window.clone())
            .unwrap()
            .select(vec![col("n"), file_row_index().alias("row")])
            .unwrap()
            .collect()
            .await
            .unwrap();
        let mut indices = Vec::new();
        for b in &batches {
            let n = b
                .column(0)
                .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
            let row = cast(b.column(1), &DataType::Int64).unwrap();
            let row = row.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
            for i in 0..b.num_rows() {
                indices.push((n.value(i), row.value(i)));
            }
        }
        indices.sort();
        (parts, free, ours, plain, indices)
    });
    assert_eq!(ours, by_hand);
    assert_eq!(plain, by_hand);
    assert_eq!(parts, 4);
    assert_eq!(free_projection, vec!["n".to_string()]);
    assert_eq!(indices.len(), rows.len());
    assert!(
        indices
            .iter()
            .zip(&rows)
            .all(|((n, row), want)| n == want && row == want)
    );
}

/// A float column's statistics leave NaN out (min = max = 1 over [1, NaN]): a comparison on
/// it is not applied by the table, so the NaN row stays out of `x < 10` as in plain
/// DataFusion, and the scan is one plain scan.
#[test]
fn float_statistics_do_not_prove_a_comparison() {
    use datafusion::arrow::array::Float64Array;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("signalql.toml"),
        "now = \"2026-06-13T00:00:00Z\"\n",
    )
    .unwrap();
    let start = 1_780_272_000_000_000i64;
    let columns: Vec<(&str, ArrayRef)> = vec![
        (
            "event_name",
            Arc::new(StringArray::from_iter_values(["e", "e"])),
        ),
        (
            "user_id",
            Arc::new(StringArray::from_iter_values(["u", "u"])),
        ),
        (
            "timestamp",
            Arc::new(TimestampMicrosecondArray::from(vec![start, start + 1]).with_timezone("UTC")),
        ),
        ("x", Arc::new(Float64Array::from(vec![1.0, f64::NAN]))),
    ];
    crate::common::write_parquet(&tmp.path().join("events/part-0.parquet"), columns, None);
    let (count, parts) = crate::common::rt().block_on(async {
        let engine = Engine::open_with(tmp.path(), EngineOptions::default()).unwrap();
        let ctx = engine.session();
        let table = engine.dataset().table(ctx, "events").await.unwrap();
        let df = ctx
            .read_table(table.provider.clone())
            .unwrap()
            .filter(col("x").lt(lit(10.0)))
            .unwrap()
            .aggregate(
                vec![],
                vec![datafusion::functions_aggregate::count::count_all()],
            )
            .unwrap();
        let plan = df.clone().create_physical_plan().await.unwrap();
        let mut found = Vec::new();
        nodes(plan.as_ref(), "ScanPartsExec", &mut found);
        let batches = df.collect().await.unwrap();
        let count = batches[0]
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
            .value(0);
        (count, found.len())
    });
    assert_eq!(count, 1);
    assert_eq!(parts, 0);
}

/// The first batch of the jsontext dataset's events file.
fn first_batch(root: &Path) -> RecordBatch {
    let file = std::fs::File::open(root.join("events/part-0.parquet")).unwrap();
    let mut reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    reader.next().unwrap().unwrap()
}

/// The columns of `batch`'s first row, `n` times.
fn first_row_repeated(batch: &RecordBatch, n: usize) -> Vec<ArrayRef> {
    let zeros = datafusion::arrow::array::UInt32Array::from(vec![0u32; n]);
    batch
        .columns()
        .iter()
        .map(|c| datafusion::arrow::compute::take(c.as_ref(), &zeros, None).unwrap())
        .collect()
}

/// The plans `query` ran in `engine`, and its rows.
async fn runs_of(engine: &Engine, query: &str) -> (usize, serde_json::Value) {
    let (answer, recorded) =
        signalql_engine::record::recording(Box::pin(engine.query(query))).await;
    let envelope = answer.unwrap_or_else(|e| panic!("{query}: {e}"));
    (recorded.runs.len(), serde_json::json!(envelope.rows))
}

/// No statement reads data it does not need (issue 45): ordering ties by a struct child of
/// text runs the statement's one plan, with no pass over the table to learn whether the
/// child holds numbers (its type is declared). A JSON-text key is decided from the files'
/// dictionary pages where they hold every value (tests/data/foreign/jsontext was written by
/// pyarrow, which dictionary-encodes it): no pass either. A file written without a
/// dictionary is counted by a pass over its rows, once per table as opened, the answer kept
/// with the table for later statements; a table version that adds a file reads only it.
#[tokio::test]
async fn ordering_by_a_property_runs_one_plan_and_a_json_key_is_probed_once() {
    let sample = Engine::open_with(signalql::sample_dataset(), EngineOptions::default()).unwrap();
    let top = "FROM events WHERE event_name = \"page_view\" DURING LAST 7 d GROUP BY properties.path \
               RETURN properties.path, count ORDER BY count DESC, properties.path ASC LIMIT 5";
    let (runs, rows) = runs_of(&sample, top).await;
    assert_eq!(runs, 1, "one plan: {rows}");
    assert_eq!(rows.as_array().map(Vec::len), Some(5));

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/foreign/jsontext");
    let order = "FROM events WHERE event_name = \"buy\" RETURN user_id, properties.amount \
                 ORDER BY properties.amount DESC LIMIT 3";
    // As numbers (tests/golden/foreign/json_order.case): 100 > 10.64 > 9.5.
    let numeric = serde_json::json!([["u3", "100"], ["u1", "10.64"], ["u1", "9.5"]]);
    // With a file whose amount is "x7", the key is text, ordered as text:
    // "x7" > "9.5" > "2.33" > "100" > "10.64".
    let text = serde_json::json!([["u4", "x7"], ["u1", "9.5"], ["u2", "2.33"]]);
    let json = Engine::open_with(&root, EngineOptions::default()).unwrap();
    assert_eq!(
        runs_of(&json, order).await,
        (1, numeric.clone()),
        "decided from the dictionary pages"
    );

    let batch = first_batch(&root);
    let write = |path: std::path::PathBuf, batch: &RecordBatch, dictionary: bool| {
        let props = datafusion::parquet::file::properties::WriterProperties::builder()
            .set_dictionary_enabled(dictionary)
            .build();
        let out = std::fs::File::create(path).unwrap();
        let mut writer = ArrowWriter::try_new(out, batch.schema(), Some(props)).unwrap();
        writer.write(batch).unwrap();
        writer.close().unwrap();
    };
    let mut columns = batch.slice(4, 1).columns().to_vec();
    columns[1] = Arc::new(StringArray::from(vec!["u4"]));
    columns[3] = Arc::new(StringArray::from(vec![r#"{"amount": "x7"}"#]));
    let added = RecordBatch::try_new(batch.schema(), columns).unwrap();

    for dictionary in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        crate::common::copy_dir(&root, tmp.path());
        write(tmp.path().join("events/part-0.parquet"), &batch, dictionary);
        let copy = Engine::open_with(tmp.path(), EngineOptions::default()).unwrap();
        let passes = usize::from(!dictionary);
        let (runs, rows) = runs_of(&copy, order).await;
        assert_eq!(
            (runs, &rows),
            (1 + passes, &numeric),
            "dictionary {dictionary}"
        );
        assert_eq!(
            runs_of(&copy, order).await.0,
            1,
            "decided once for the table as opened"
        );
        write(tmp.path().join("events/part-1.parquet"), &added, dictionary);
        let (runs, first) = probe_rows(&copy, order).await;
        assert_eq!(
            runs,
            1 + passes,
            "dictionary {dictionary}: only the added file"
        );
        if !dictionary {
            assert_eq!(first, 1, "the pass counted one file");
        }
        assert_eq!(runs_of(&copy, order).await, (1, text.clone()));
        // A caller who may not see u4's row: the dictionaries hold its "x7" too, so its
        // table is counted by a pass over the rows it may see, and the key is numeric there.
        std::fs::write(
            tmp.path().join("policy.toml"),
            "[principals.default]\n[principals.default.filters]\nevents = 'user_id != \"u4\"'\n",
        )
        .unwrap();
        let restricted = Engine::open_with(tmp.path(), EngineOptions::default()).unwrap();
        assert_eq!(
            runs_of(&restricted, order).await,
            (2, numeric.clone()),
            "dictionary {dictionary}: counted over the rows the caller may see"
        );
    }
}

/// A JSON-text key that holds text is decided by the first rows that show it (issue 45): the
/// pass over a file written without dictionaries (plain pages, where no dictionary settles
/// the key) stops at the first batch in which the key meets a value that is not a number, so
/// ordering by a path reads a few thousand of the table's 100 000 rows before the statement,
/// and the decision is kept: a table version that adds a file does not pass again.
#[tokio::test]
async fn a_text_key_is_decided_by_the_first_rows_that_show_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/foreign/jsontext");
    let first = first_batch(&root);
    const ROWS: usize = 100_000;
    let mut columns = first_row_repeated(&first, ROWS);
    columns[1] = Arc::new(StringArray::from_iter_values(
        (0..ROWS).map(|i| format!("u{i}")),
    ));
    columns[3] = Arc::new(StringArray::from_iter_values(
        (0..ROWS).map(|i| format!(r#"{{"path": "/p{:03}"}}"#, i % 1000)),
    ));
    let batch = RecordBatch::try_new(first.schema(), columns).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    crate::common::copy_dir(&root, tmp.path());
    let write = |name: &str, batch: &RecordBatch| {
        let props = datafusion::parquet::file::properties::WriterProperties::builder()
            .set_dictionary_enabled(false)
            .set_max_row_group_row_count(Some(4_000))
            .build();
        let out = std::fs::File::create(tmp.path().join("events").join(name)).unwrap();
        let mut writer = ArrowWriter::try_new(out, batch.schema(), Some(props)).unwrap();
        writer.write(batch).unwrap();
        writer.close().unwrap();
    };
    write("part-0.parquet", &batch);
    let engine = Engine::open_with(tmp.path(), EngineOptions::default()).unwrap();
    let order = "FROM events RETURN properties.path ORDER BY properties.path DESC LIMIT 1";
    let (answer, recorded) =
        signalql_engine::record::recording(Box::pin(engine.query(order))).await;
    // By hand: the paths are "/p000" … "/p999".
    assert_eq!(
        serde_json::json!(answer.unwrap().rows),
        serde_json::json!([["/p999"]])
    );
    assert_eq!(recorded.runs.len(), 2, "the pass, then the statement");
    let mut scans = Vec::new();
    nodes(
        recorded.runs[0].physical.as_ref(),
        "DataSourceExec",
        &mut scans,
    );
    let read: usize = scans
        .iter()
        .filter_map(|s| s.metrics().and_then(|m| m.output_rows()))
        .sum();
    assert!(
        (1..ROWS / 2).contains(&read),
        "the pass stops early: {read} of {ROWS} rows read"
    );

    // A table version with one more file: the key is text whatever the new file holds.
    write("part-1.parquet", &batch.slice(0, 10));
    assert_eq!(
        runs_of(&engine, order).await.0,
        1,
        "no pass for the added file"
    );
}

/// A numeric JSON-text key on plain pages needs a pass over every row to decide (docs/mapping.md),
/// and a pass's counts are kept on disk by file identity (engine/src/bind/kept_counts.rs): a
/// later process (a new engine) orders by the key with no pass, and a file rewritten in place
/// is a new identity, counted again.
#[tokio::test]
async fn a_files_key_counts_outlive_the_process_until_the_file_changes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/foreign/jsontext");
    let first = first_batch(&root);
    let tmp = tempfile::tempdir().unwrap();
    crate::common::copy_dir(&root, tmp.path());
    let write = |amounts: &[String]| {
        let mut columns = first_row_repeated(&first, amounts.len());
        columns[3] = Arc::new(StringArray::from_iter_values(
            amounts.iter().map(|a| format!(r#"{{"amount": {a}}}"#)),
        ));
        let batch = RecordBatch::try_new(first.schema(), columns).unwrap();
        let props = datafusion::parquet::file::properties::WriterProperties::builder()
            .set_dictionary_enabled(false)
            .build();
        let events = tmp.path().join("events");
        for f in std::fs::read_dir(&events).unwrap() {
            std::fs::remove_file(f.unwrap().path()).unwrap();
        }
        let out = std::fs::File::create(events.join("part-0.parquet")).unwrap();
        let mut writer = ArrowWriter::try_new(out, batch.schema(), Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
    };
    // 0 … 19 999: the largest as a number is 19999, as text "9999".
    let mut amounts: Vec<String> = (0..20_000).map(|i| i.to_string()).collect();
    write(&amounts);
    let order = "FROM events RETURN properties.amount ORDER BY properties.amount DESC LIMIT 1";
    let open = || Engine::open_with(tmp.path(), EngineOptions::default()).unwrap();
    assert_eq!(
        runs_of(&open(), order).await,
        (2, serde_json::json!([["19999"]])),
        "the pass, then the statement"
    );
    let kept = tmp.path().join("_signalql/key_counts");
    assert_eq!(
        std::fs::read_dir(&kept).unwrap().count(),
        1,
        "one file, one key"
    );
    assert_eq!(
        runs_of(&open(), order).await,
        (1, serde_json::json!([["19999"]])),
        "a new engine reads the kept counts"
    );
    // The file rewritten with one text value: the key is text now ("x7" sorts last).
    amounts.push("\"x7\"".into());
    write(&amounts);
    assert_eq!(
        runs_of(&open(), order).await,
        (2, serde_json::json!([["x7"]])),
        "the rewritten file is counted again"
    );
}

/// The plans `query` ran in `engine`, and the rows its first plan (the counting pass, when
/// there are two) returned.
async fn probe_rows(engine: &Engine, query: &str) -> (usize, u64) {
    let (answer, recorded) =
        signalql_engine::record::recording(Box::pin(engine.query(query))).await;
    answer.unwrap_or_else(|e| panic!("{query}: {e}"));
    (recorded.runs.len(), recorded.runs[0].rows)
}

/// A window inside one row group is read in slices, one per partition (docs/scan.md, "A row
/// group cut into slices"). The sample's events are one row group of 150 000 rows; a copy
/// with 4 partitions reads a 30-day window in 2 slices and the whole table in 4. The answers
/// are plain DataFusion SQL's over the same file, and a funnel (whose ties are broken by the
/// row's position in its file) gives the rows of the same statement read in one partition.
#[tokio::test]
async fn a_row_group_read_in_slices_gives_the_same_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let partitions = |n: usize| {
        let root = tmp.path().join(format!("p{n}"));
        crate::common::copy_dir(&signalql::sample_dataset(), &root);
        let toml = root.join("signalql.toml");
        let mut text = std::fs::read_to_string(&toml).unwrap();
        text.push_str(&format!(
            "\n[datafusion]\n\"datafusion.execution.target_partitions\" = \"{n}\"\n"
        ));
        std::fs::write(&toml, text).unwrap();
        Engine::open_with(&root, EngineOptions::default()).unwrap()
    };
    let (four, one) = (partitions(4), partitions(1));
    let rows = |e: &signalql::Envelope| serde_json::to_value(&e.rows).unwrap();

    // Plain DataFusion SQL over the same file.
    let ctx = SessionContext::new();
    let file = signalql::sample_dataset().join("events/part-00000.parquet");
    ctx.register_parquet("ev", file.to_str().unwrap(), Default::default())
        .await
        .unwrap();
    let sql = |q: &'static str| {
        let ctx = ctx.clone();
        async move {
            let b = ctx.sql(q).await.unwrap().collect().await.unwrap();
            let b = &b[0];
            (
                b.column(0)
                    .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                    .value(0),
                b.column(1)
                    .as_primitive::<datafusion::arrow::datatypes::Float64Type>()
                    .value(0),
            )
        }
    };
    let (count, sum) = sql(
        "SELECT count(*), sum(properties['amount']) FROM ev WHERE event_name = 'purchase' \
         AND \"timestamp\" >= TIMESTAMP '2026-05-14T00:00:00Z' \
         AND \"timestamp\" < TIMESTAMP '2026-06-13T00:00:00Z'",
    )
    .await;
    let q = r#"FROM events WHERE event_name = "purchase" DURING LAST 30 d RETURN count, sum(properties.amount)"#;
    assert_eq!((slices(&four, q).await, slices(&one, q).await), (2, 0));
    let got = rows(&four.query(q).await.unwrap());
    assert_eq!(got[0][0], count, "{got}");
    let s = got[0][1].as_f64().unwrap();
    assert!((s - sum).abs() <= 1e-9 * sum.abs(), "{s} vs {sum}");
    let (all, users) =
        sql("SELECT count(*), CAST(count(DISTINCT user_id) AS DOUBLE) FROM ev").await;
    let q = "FROM events DURING LAST 90 d RETURN count, count_distinct(user_id)";
    assert_eq!(slices(&four, q).await, 4);
    let got = rows(&four.query(q).await.unwrap());
    assert_eq!(
        (got[0][0].as_i64(), got[0][1].as_f64()),
        (Some(all), Some(users)),
        "{got}"
    );

    let funnel = r#"FUNNEL "visit" -> "signup" -> "activated" FROM events DURING LAST 28 d WITHIN 7 d GROUP BY properties.plan"#;
    assert_eq!(
        rows(&four.query(funnel).await.unwrap()),
        rows(&one.query(funnel).await.unwrap())
    );
}

/// How many file ranges of `q`'s scans read a slice of a row group (EXPLAIN ANALYZE).
async fn slices(engine: &Engine, q: &str) -> u64 {
    let signalql::Answer::Plan(p) = engine
        .answer(&format!("EXPLAIN ANALYZE {q}"))
        .await
        .unwrap()
    else {
        panic!("EXPLAIN ANALYZE answered no plan");
    };
    serde_json::to_value(&*p).unwrap()["pruning"]["row_group_slices"]
        .as_u64()
        .unwrap_or(0)
}

/// The JSON-text key of a table on S3 is decided from its file's dictionary pages too: the
/// ranged read of the dictionary goes through the bucket's object store, and the statement
/// runs its one plan.
#[test]
fn a_json_key_on_s3_is_decided_from_the_dictionary_pages() {
    use crate::common::s3::S3Server;
    let s3 = S3Server::start();
    s3.create_bucket("lake");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/foreign/jsontext");
    s3.upload_dir(&root, "lake", "jsontext");
    let options = EngineOptions {
        storage: s3.storage(),
        ..Default::default()
    };
    let order = "FROM events WHERE event_name = \"buy\" RETURN user_id, properties.amount \
                 ORDER BY properties.amount DESC LIMIT 3";
    let engine = Engine::open_with("s3://lake/jsontext", options).unwrap();
    let got = crate::common::rt().block_on(runs_of(&engine, order));
    assert_eq!(
        got,
        (
            1,
            serde_json::json!([["u3", "100"], ["u1", "10.64"], ["u1", "9.5"]])
        )
    );
}
