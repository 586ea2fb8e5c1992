//! Tests of JSONL/CSV ingest: type inference, exact rows read back, validation, atomicity.

use std::fs::File;
use std::path::{Path, PathBuf};

use datafusion::arrow::array::{Array, AsArray, RecordBatch, StructArray};
use datafusion::arrow::datatypes::{
    DataType, Float64Type, Int64Type, TimeUnit, TimestampMicrosecondType,
};
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use signalql_catalog::error::CatalogError;
use signalql_catalog::ingest::{ingest_events, ingest_events_with_progress};

/// 2026-06-01T12:00:00Z in microseconds (`date -u -d 2026-06-01T12:00:00Z +%s` = 1780315200).
const NOON_US: i64 = 1_780_315_200_000_000;
const MIN_US: i64 = 60_000_000;

const JSONL: &str = r#"{"event_name":"page_view","user_id":"u1","session_id":"s1","timestamp":"2026-06-01T12:00:00Z","properties":{"n":1,"m":5,"nested":{"a":[1,2]},"flag":true}}
{"event_name":"signup","user_id":42,"timestamp":1780315200000,"properties":{"n":2.5,"m":"x","flag":false,"only_null":null}}

{"event_name":"purchase","user_id":null,"session_id":"s2","timestamp":"2026-06-01T14:00:00.123456+02:00","properties":null}
{"event_name":"click","timestamp":"2026-06-01T12:30:00Z","properties":{"list":[1,"a"]}}
"#;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

fn read(path: &Path) -> RecordBatch {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap())
        .unwrap()
        .build()
        .unwrap();
    let batches: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
    datafusion::arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap()
}

fn strings(a: &dyn Array) -> Vec<Option<String>> {
    let a = a.as_string::<i32>();
    (0..a.len())
        .map(|i| a.is_valid(i).then(|| a.value(i).to_string()))
        .collect()
}

fn s(v: &str) -> Option<String> {
    Some(v.to_string())
}

fn field<'a>(props: &'a StructArray, name: &str) -> &'a dyn Array {
    props.column_by_name(name).unwrap().as_ref()
}

#[test]
fn jsonl_types_and_exact_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let input = write(tmp.path(), "events.jsonl", JSONL);
    let root = tmp.path().join("data");
    let summary = ingest_events(&root, std::slice::from_ref(&input)).unwrap();
    assert_eq!(summary.rows, 4);
    assert_eq!(summary.files_read, 1);
    let name = summary
        .written
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        name.starts_with("ingest-") && name.ends_with(".parquet"),
        "{name}"
    );
    assert_eq!(summary.written.parent().unwrap(), root.join("events"));
    assert_eq!(listing(&root.join("events")), vec![name]);
    let want_fields: Vec<(String, String)> = [
        ("flag", "Boolean"),
        ("list", "Utf8"),
        ("m", "Utf8"),
        ("n", "Float64"),
        ("nested", "Utf8"),
        ("only_null", "Utf8"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(summary.properties_fields, want_fields);

    let batch = read(&summary.written);
    let schema = batch.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(
        names,
        [
            "event_name",
            "user_id",
            "session_id",
            "timestamp",
            "properties"
        ]
    );
    assert!(!schema.field(0).is_nullable() && !schema.field(3).is_nullable());
    assert_eq!(
        schema.field(3).data_type(),
        &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
    );

    assert_eq!(
        strings(batch.column(0).as_ref()),
        vec![s("page_view"), s("signup"), s("purchase"), s("click")]
    );
    assert_eq!(
        strings(batch.column(1).as_ref()),
        vec![s("u1"), s("42"), None, None]
    );
    assert_eq!(
        strings(batch.column(2).as_ref()),
        vec![s("s1"), None, s("s2"), None]
    );
    let ts = batch.column(3).as_primitive::<TimestampMicrosecondType>();
    assert_eq!(
        ts.values().to_vec(),
        vec![NOON_US, NOON_US, NOON_US + 123_456, NOON_US + 30 * MIN_US]
    );

    let props = batch.column(4).as_struct();
    // Row 3 had `"properties": null`; the others have a struct.
    assert_eq!(
        (0..4).map(|i| props.is_valid(i)).collect::<Vec<_>>(),
        [true, true, false, true]
    );
    let flag = field(props, "flag").as_boolean();
    assert_eq!(
        (0..4)
            .map(|i| flag.is_valid(i).then(|| flag.value(i)))
            .collect::<Vec<_>>(),
        [Some(true), Some(false), None, None]
    );
    let n = field(props, "n").as_primitive::<Float64Type>();
    assert_eq!(
        (0..4)
            .map(|i| n.is_valid(i).then(|| n.value(i)))
            .collect::<Vec<_>>(),
        [Some(1.0), Some(2.5), None, None]
    );
    assert_eq!(strings(field(props, "m")), vec![s("5"), s("x"), None, None]);
    assert_eq!(
        strings(field(props, "nested")),
        vec![s(r#"{"a":[1,2]}"#), None, None, None]
    );
    assert_eq!(
        strings(field(props, "list")),
        vec![None, None, None, s(r#"[1,"a"]"#)]
    );
    assert_eq!(
        strings(field(props, "only_null")),
        vec![None, None, None, None]
    );
}

#[test]
fn all_integers_stay_int64_and_types_union_across_files() {
    let tmp = tempfile::tempdir().unwrap();
    let a = write(
        tmp.path(),
        "a.ndjson",
        "{\"event_name\":\"e\",\"timestamp\":0,\"properties\":{\"k\":1,\"b\":true}}\n",
    );
    let b = write(
        tmp.path(),
        "b.json",
        "{\"event_name\":\"e\",\"timestamp\":1,\"properties\":{\"k\":-7,\"b\":1}}\r\n",
    );
    let root = tmp.path().join("root");
    let summary = ingest_events(&root, &[a, b]).unwrap();
    assert_eq!(summary.files_read, 2);
    assert_eq!(
        summary.properties_fields,
        vec![("b".into(), "Utf8".into()), ("k".into(), "Int64".into())]
    );
    let batch = read(&summary.written);
    let props = batch.column(4).as_struct();
    assert_eq!(
        field(props, "k")
            .as_primitive::<Int64Type>()
            .values()
            .to_vec(),
        [1, -7]
    );
    assert_eq!(strings(field(props, "b")), vec![s("true"), s("1")]);
    let ts = batch.column(3).as_primitive::<TimestampMicrosecondType>();
    assert_eq!(ts.values().to_vec(), [0, 1000]);
}

#[test]
fn csv_with_json_and_dotted_properties() {
    let tmp = tempfile::tempdir().unwrap();
    let csv = "event_name,user_id,session_id,timestamp,properties,properties.plan,properties.seats\n\
               page_view,u1,s1,2026-06-01T12:00:00Z,\"{\"\"amount\"\": 3}\",pro,2\n\
               checkout,,s1,1780315200000,,\"team,\nannual\",\n\
               \n\
               purchase,u2,,2026-06-01 12:00:01,\"{\"\"amount\"\": 4.5}\",007,10\n";
    let input = write(tmp.path(), "events.CSV", csv);
    let root = tmp.path().join("root");
    let summary = ingest_events(&root, &[input]).unwrap();
    assert_eq!(summary.rows, 3);
    assert_eq!(
        summary.properties_fields,
        vec![
            ("amount".into(), "Float64".into()),
            ("plan".into(), "Utf8".into()),
            ("seats".into(), "Int64".into())
        ]
    );
    let batch = read(&summary.written);
    assert_eq!(
        strings(batch.column(0).as_ref()),
        vec![s("page_view"), s("checkout"), s("purchase")]
    );
    assert_eq!(
        strings(batch.column(1).as_ref()),
        vec![s("u1"), None, s("u2")]
    );
    assert_eq!(
        strings(batch.column(2).as_ref()),
        vec![s("s1"), s("s1"), None]
    );
    let ts = batch.column(3).as_primitive::<TimestampMicrosecondType>();
    assert_eq!(
        ts.values().to_vec(),
        [NOON_US, NOON_US, NOON_US + 1_000_000]
    );
    let props = batch.column(4).as_struct();
    assert_eq!(props.null_count(), 0);
    let amount = field(props, "amount").as_primitive::<Float64Type>();
    assert_eq!(
        (0..3)
            .map(|i| amount.is_valid(i).then(|| amount.value(i)))
            .collect::<Vec<_>>(),
        [Some(3.0), None, Some(4.5)]
    );
    assert_eq!(
        strings(field(props, "plan")),
        vec![s("pro"), s("team,\nannual"), s("007")]
    );
    let seats = field(props, "seats").as_primitive::<Int64Type>();
    assert_eq!(
        (0..3)
            .map(|i| seats.is_valid(i).then(|| seats.value(i)))
            .collect::<Vec<_>>(),
        [Some(2), None, Some(10)]
    );
}

fn bad_line(name: &str, text: &str) -> (u64, String) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    // An earlier ingest, so the events folder exists and holds a file.
    let good = write(tmp.path(), "good.jsonl", JSONL);
    ingest_events(&root, std::slice::from_ref(&good)).unwrap();
    let before = listing(&root.join("events"));
    let bad = write(tmp.path(), name, text);
    let err = ingest_events(&root, &[good, bad.clone()]).unwrap_err();
    assert_eq!(
        listing(&root.join("events")),
        before,
        "events folder changed"
    );
    match err {
        CatalogError::BadInput {
            file,
            line,
            message,
        } => {
            assert_eq!(file, bad.display().to_string());
            (line, message)
        }
        other => panic!("expected BadInput, got {other}"),
    }
}

#[test]
fn bad_lines_stop_the_ingest_and_write_nothing() {
    let ok1 = r#"{"event_name":"a","timestamp":"2026-06-01T12:00:00Z"}"#;
    let ok2 = r#"{"event_name":"b","timestamp":1}"#;
    let cases = [
        (
            r#"{"timestamp":"2026-06-01T12:00:00Z"}"#,
            "missing event_name",
        ),
        (r#"{"event_name":"a"}"#, "missing timestamp"),
        (
            r#"{"event_name":5,"timestamp":1}"#,
            "event_name must be a string",
        ),
        (
            r#"{"event_name":"a","timestamp":"June 1st"}"#,
            "bad timestamp",
        ),
        (r#"{"event_name":"a","timestamp":1.5}"#, "not an integer"),
        (
            r#"{"event_name":"a","timestamp":1,"properties":[1]}"#,
            "properties must be a JSON object",
        ),
        (
            r#"{"event_name":"a","timestamp":1,"user_id":true}"#,
            "user_id must be",
        ),
        (
            r#"{"event_name":"a","timestamp":1,"extra":1}"#,
            "unknown top-level key",
        ),
        (r#"{"event_name":"a","timestamp":1"#, "invalid JSON"),
        (r#"[1,2]"#, "expected a JSON object"),
    ];
    for (line3, want) in cases {
        let (line, message) = bad_line("bad.jsonl", &format!("{ok1}\n{ok2}\n{line3}\n{ok1}\n"));
        assert_eq!(line, 3, "{line3}: {message}");
        assert!(message.contains(want), "{line3}: {message}");
    }
    // Blank lines count: the bad line is line 3.
    let (line, _) = bad_line("bad.jsonl", &format!("{ok1}\n\n{{\n"));
    assert_eq!(line, 3);
}

#[test]
fn bad_csv_records() {
    let header = "event_name,timestamp,properties\n";
    // header = line 1, a = 2, b = 3, c = 4.
    let (line, message) = bad_line("bad.csv", &format!("{header}a,1,\nb,2,{{}}\nc,3,\"[1]\"\n"));
    assert_eq!(line, 4);
    assert!(
        message.contains("properties must be a JSON object"),
        "{message}"
    );
    let (line, message) = bad_line("bad.csv", &format!("{header}a,1,\nb,2\n"));
    assert_eq!(line, 3);
    assert!(message.contains("expected 3 fields"), "{message}");
    let (line, message) = bad_line("bad.csv", &format!("{header}a,1,\n,2,\n"));
    assert_eq!(line, 3);
    assert!(message.contains("missing event_name"), "{message}");
    let (line, message) = bad_line("bad.csv", &format!("{header}a,1,\n\"b,2,\n"));
    assert_eq!(line, 3);
    assert!(message.contains("unterminated"), "{message}");
    let (line, message) = bad_line("bad.csv", "event_name,timestamp,colour\n");
    assert_eq!(line, 1);
    assert!(message.contains("unknown column \"colour\""), "{message}");
    let (line, message) = bad_line("bad.csv", "event_name,user_id\na,b\n");
    assert_eq!(line, 1);
    assert!(message.contains("no timestamp column"), "{message}");
}

#[test]
fn ingesting_twice_adds_a_second_file() {
    let tmp = tempfile::tempdir().unwrap();
    let input = write(tmp.path(), "events.jsonl", JSONL);
    let root = tmp.path().join("root");
    let first = ingest_events(&root, std::slice::from_ref(&input)).unwrap();
    let first_bytes = std::fs::read(&first.written).unwrap();
    let pb = indicatif::ProgressBar::hidden();
    let second =
        ingest_events_with_progress(&root, std::slice::from_ref(&input), Some(&pb)).unwrap();
    assert_eq!(pb.position(), 2 * JSONL.len() as u64);
    assert_ne!(first.written, second.written);
    assert_eq!(listing(&root.join("events")).len(), 2);
    assert_eq!(std::fs::read(&first.written).unwrap(), first_bytes);
    let a = read(&first.written);
    let b = read(&second.written);
    assert_eq!(a.num_rows() + b.num_rows(), 8);
    assert_eq!(a, b);
}

#[test]
fn empty_or_unsupported_inputs_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    assert!(matches!(
        ingest_events(&root, &[]),
        Err(CatalogError::Invalid(_))
    ));
    let txt = write(tmp.path(), "events.txt", "{}\n");
    assert!(matches!(
        ingest_events(&root, &[txt]),
        Err(CatalogError::Invalid(_))
    ));
    let blank = write(tmp.path(), "blank.jsonl", "\n  \n");
    assert!(matches!(
        ingest_events(&root, &[blank]),
        Err(CatalogError::Invalid(_))
    ));
    let missing = tmp.path().join("missing.jsonl");
    assert!(matches!(
        ingest_events(&root, &[missing]),
        Err(CatalogError::Io { .. })
    ));
    assert!(listing(&root.join("events")).is_empty());
}

#[test]
fn no_properties_at_all_omits_the_column() {
    let tmp = tempfile::tempdir().unwrap();
    let input = write(
        tmp.path(),
        "e.jsonl",
        "{\"event_name\":\"a\",\"timestamp\":5}\n",
    );
    let summary = ingest_events(tmp.path().join("root"), &[input]).unwrap();
    assert!(summary.properties_fields.is_empty());
    let batch = read(&summary.written);
    assert_eq!(batch.num_columns(), 4);
    assert_eq!(batch.num_rows(), 1);
}
