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
//! builds its own instance from the table's file list; it is not registered by name.

use std::sync::Arc;

use datafusion::arrow::array::{Array, Int64Array};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExpressionPlacement, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
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
            signature: Signature::uniform(
                1,
                vec![DataType::Utf8, DataType::Utf8View, DataType::LargeUtf8],
                Volatility::Immutable,
            ),
            files,
        }
    }

    fn rank(&self, path: &str) -> i64 {
        let p = normalise(path);
        match self.files.binary_search(&p) {
            Ok(i) | Err(i) => i as i64,
        }
    }
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
        let Some(arg) = args.args.first() else {
            return exec_err!("{NAME} takes one argument");
        };
        match arg {
            ColumnarValue::Scalar(s) => {
                let rank = match s {
                    ScalarValue::Utf8(p) | ScalarValue::Utf8View(p) | ScalarValue::LargeUtf8(p) => {
                        p.as_deref().map(|p| self.rank(p))
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
                            let r = self.rank(p);
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
}
