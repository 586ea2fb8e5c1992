//! `signalql_file_rank(path)`: the position of a data file in a fixed, sorted list of files,
//! so that `(file rank, row index in file)` orders a table's rows as they are stored.
//!
//! Funnels break timestamp ties by the events' order in the files (DESIGN.md §4); the lowering
//! builds the order key `signalql_file_rank(input_file_name()) · 2^40 + file_row_index()`.
//! DataFusion evaluates `input_file_name()` and `file_row_index()` inside the Parquet scan; this
//! function is cheap and says so ([`ExpressionPlacement::MoveTowardsLeafNodes`]), so it is
//! computed there too, once per file batch.
//!
//! A path not in the list ranks where it would sort, so the order stays consistent. Each query
//! builds its own instance from the table's file list. A plan sent to another process (a
//! cluster's worker, which finds a function by its name) carries the list instead as a second
//! argument, `signalql_file_rank(path, ['a.parquet', …])`, sorted: [`FileRank::travelling`]
//! writes that form and [`file_rank_udf`], registered by name, evaluates it.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, AsArray, Int64Array};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExpressionPlacement, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, lit,
};

use crate::strings::StringColumn;

pub const NAME: &str = "signalql_file_rank";

/// Bits left for the row index in an order key built with [`rank_shift`].
pub const ROW_BITS: u32 = 40;

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FileRank {
    signature: Signature,
    /// Sorted, without a leading `/` (as object-store paths are written).
    files: Vec<String>,
}

impl FileRank {
    pub fn new(files: impl IntoIterator<Item = String>) -> Self {
        let mut files: Vec<String> = files.into_iter().map(|f| normalise(&f)).collect();
        files.sort();
        files.dedup();
        FileRank {
            signature: super::of_text(),
            files,
        }
    }

    /// The same function of `path` with its file list as an argument: the form that keeps its
    /// meaning where the function is found by name.
    pub fn travelling(&self, path: Expr) -> Expr {
        let list = ScalarValue::new_list_nullable(
            &self
                .files
                .iter()
                .map(|f| ScalarValue::Utf8(Some(f.clone())))
                .collect::<Vec<_>>(),
            &DataType::Utf8,
        );
        file_rank_udf().call(vec![path, lit(ScalarValue::List(list))])
    }

    fn rank(&self, path: &str) -> i64 {
        rank_among(&self.files, path)
    }
}

/// The position of `path` among the sorted `files`, or where it would sort.
fn rank_among<S: AsRef<str>>(files: &[S], path: &str) -> i64 {
    let p = path.trim_start_matches('/');
    files.partition_point(|f| f.as_ref() < p) as i64
}

static FILE_RANK: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| {
    Arc::new(ScalarUDF::from(FileRank {
        signature: super::of_text_and_parameter(),
        files: Vec::new(),
    }))
});

/// The instance registered by name: `signalql_file_rank(path, files)`, `files` a sorted list of
/// paths (without a leading `/`).
pub fn file_rank_udf() -> Arc<ScalarUDF> {
    Arc::clone(&FILE_RANK)
}

fn normalise(path: &str) -> String {
    path.trim_start_matches('/').to_string()
}

/// `signalql_file_rank(path)` over `files` as an [`Expr`].
pub fn file_rank(files: impl IntoIterator<Item = String>, path: Expr) -> Expr {
    Arc::new(ScalarUDF::from(FileRank::new(files))).call(vec![path])
}

/// `2^ROW_BITS`: the multiplier of a file rank in an order key.
pub fn rank_shift() -> i64 {
    1i64 << ROW_BITS
}

impl ScalarUDFImpl for FileRank {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn placement(&self, args: &[ExpressionPlacement]) -> ExpressionPlacement {
        let cheap = args.iter().all(|a| {
            matches!(
                a,
                ExpressionPlacement::Literal | ExpressionPlacement::MoveTowardsLeafNodes
            )
        });
        if cheap {
            ExpressionPlacement::MoveTowardsLeafNodes
        } else {
            ExpressionPlacement::KeepInPlace
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match args.args.as_slice() {
            [arg] => rank_column(arg, |p| self.rank(p)),
            [arg, ColumnarValue::Scalar(ScalarValue::List(list))] if list.len() == 1 => {
                let values = list.value(0);
                let Some(files) = values
                    .as_string_opt::<i32>()
                    .filter(|f| f.null_count() == 0)
                else {
                    return exec_err!("{NAME}'s file list must be text without NULLs");
                };
                let files: Vec<&str> = files.iter().flatten().collect();
                rank_column(arg, |p| rank_among(&files, p))
            }
            _ => exec_err!("{NAME} takes a path, and with it a list of files or nothing"),
        }
    }
}

/// The rank (`rank`) of each path in `arg`.
fn rank_column(arg: &ColumnarValue, rank: impl Fn(&str) -> i64) -> Result<ColumnarValue> {
    match arg {
        ColumnarValue::Scalar(s) => {
            let rank = match s {
                ScalarValue::Utf8(p) | ScalarValue::Utf8View(p) | ScalarValue::LargeUtf8(p) => {
                    p.as_deref().map(rank)
                }
                other => return exec_err!("{NAME} takes a path string, got {other:?}"),
            };
            Ok(ColumnarValue::Scalar(ScalarValue::Int64(rank)))
        }
        ColumnarValue::Array(a) => {
            // Consecutive rows usually come from one file: rank each run once.
            let mut last: Option<(String, i64)> = None;
            let mut rank_of = |p: &str| -> i64 {
                match &last {
                    Some((q, r)) if q == p => *r,
                    _ => {
                        let r = rank(p);
                        last = Some((p.to_string(), r));
                        r
                    }
                }
            };
            let Ok(paths) = StringColumn::try_new(a.as_ref()) else {
                return exec_err!("{NAME} takes a path string, got {}", a.data_type());
            };
            let out: Int64Array = paths.iter().map(|p| p.map(&mut rank_of)).collect();
            Ok(ColumnarValue::Array(Arc::new(out) as Arc<dyn Array>))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_follow_path_order() {
        let f = FileRank::new(["/d/b.parquet".to_string(), "/d/a.parquet".to_string()]);
        assert_eq!(f.rank("d/a.parquet"), 0);
        assert_eq!(f.rank("/d/b.parquet"), 1);
        // Unknown paths rank where they sort.
        assert_eq!(f.rank("d/aa.parquet"), 1);
        assert_eq!(f.rank("d/c.parquet"), 2);
    }

    /// The travelling form ranks as the instance it was written from.
    #[test]
    fn the_list_argument_ranks_as_the_instance() {
        use datafusion::arrow::array::StringArray;
        use datafusion::arrow::datatypes::Field;
        use datafusion::config::ConfigOptions;
        let f = FileRank::new(["/d/b.parquet".to_string(), "/d/a.parquet".to_string()]);
        let Expr::ScalarFunction(call) = f.travelling(lit("x")) else {
            panic!("not a call");
        };
        let Expr::Literal(list, _) = &call.args[1] else {
            panic!("no list");
        };
        let paths: Arc<dyn Array> = Arc::new(StringArray::from(vec![
            "d/a.parquet",
            "/d/b.parquet",
            "d/aa.parquet",
            "d/c.parquet",
            "a.parquet",
        ]));
        let args = ScalarFunctionArgs {
            args: vec![
                ColumnarValue::Array(paths),
                ColumnarValue::Scalar(list.clone()),
            ],
            arg_fields: vec![
                Arc::new(Field::new("p", DataType::Utf8, false)),
                Arc::new(Field::new("l", list.data_type(), false)),
            ],
            number_rows: 5,
            return_field: Arc::new(Field::new("r", DataType::Int64, true)),
            config_options: Arc::new(ConfigOptions::default()),
        };
        let ColumnarValue::Array(out) = call.func.invoke_with_args(args).unwrap() else {
            panic!("not an array");
        };
        let out = out.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        assert_eq!(out.values().to_vec(), vec![0, 1, 1, 2, 0]);
    }
}
