//! Plan nodes built with their output schemas computed here, not by DataFusion's builder.
//!
//! DataFusion 55 derives a node's schema with `Expr::to_field`, which names the field of every
//! sub-expression on the way down (`qualified_name`, a `SchemaDisplay` formatting of the whole
//! subtree, twice under an alias), and a projection's functional dependencies with a `Display`
//! formatting of every aliased expression; its builder also walks the whole input plan once per
//! expression to normalise columns (`using_columns`). Only the top-level names are needed. In
//! a callgrind profile of planning (the criterion `w9` workloads) that was most of the lowering:
//! 63 % of a funnel's instructions under `to_field`, 16 % of W2's in `Expr`'s `Display`.
//!
//! [`project`], [`aggregate`] and [`filter`] build the same nodes as `LogicalPlanBuilder`'s
//! `project`, `aggregate` and `filter` (a debug build checks each against DataFusion's own
//! result), with types and nullability from [`typed`], which follows `to_field` case by case
//! without the names, and columns qualified the way DataFusion's normalisation qualifies them.
//! Anything outside what they handle (a column that is ambiguous or missing, an expression kind
//! not followed here, an error) is left to DataFusion's builder, whose errors stay the errors.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::datatype::FieldExt;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, DFSchemaRef, TableReference};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::binary::BinaryTypeCoercer;
use datafusion::logical_expr::expr::{AggregateFunction, Alias, ScalarFunction};
use datafusion::logical_expr::type_coercion::functions::fields_with_udf;
use datafusion::logical_expr::{
    Aggregate, BinaryExpr, Cast, Expr, ExprSchemable, Filter, LogicalPlan, LogicalPlanBuilder,
    Projection, ReturnFieldArgs, Sort, SortExpr, TryCast,
};

/// `e`'s field over `schema` (its name unspecified): what `to_field` gives, without naming
/// sub-expressions. `None` for an expression this does not follow or an error, which the
/// caller then leaves to DataFusion.
fn typed(e: &Expr, schema: &DFSchema) -> Option<FieldRef> {
    Some(match e {
        Expr::Alias(Alias {
            expr,
            metadata: None,
            ..
        })
        | Expr::Negative(expr) => typed(expr, schema)?,
        Expr::Column(c) => Arc::clone(
            <DFSchema as datafusion::common::ExprSchema>::field_from_column(schema, c).ok()?,
        ),
        Expr::Literal(v, None) => Arc::new(Field::new("", v.data_type(), v.is_null())),
        Expr::IsNull(_) | Expr::IsNotNull(_) => Arc::new(Field::new("", DataType::Boolean, false)),
        // DataFusion's field for these is `Field::new(name, get_type, nullable)`, and neither
        // names sub-expressions (only a function inside them is named, by its own `to_field`).
        Expr::Not(_)
        | Expr::Case(_)
        | Expr::Between(_)
        | Expr::InList(_)
        | Expr::Like(_)
        | Expr::SimilarTo(_) => Arc::new(Field::new(
            "",
            e.get_type(schema).ok()?,
            e.nullable(schema).ok()?,
        )),
        Expr::Cast(Cast { expr, field }) => cast_field(&typed(expr, schema)?, field, false),
        Expr::TryCast(TryCast { expr, field }) => cast_field(&typed(expr, schema)?, field, true),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (l, r) = (typed(left, schema)?, typed(right, schema)?);
            let t = BinaryTypeCoercer::new(l.data_type(), op, r.data_type())
                .get_result_type()
                .ok()?;
            Arc::new(Field::new("", t, l.is_nullable() || r.is_nullable()))
        }
        Expr::ScalarFunction(ScalarFunction { func, args }) => {
            let fields = args
                .iter()
                .map(|a| typed(a, schema))
                .collect::<Option<Vec<_>>>()?;
            let fields = fields_with_udf(&fields, func.as_ref()).ok()?;
            let literals: Vec<_> = args
                .iter()
                .map(|a| match a {
                    Expr::Literal(v, _) => Some(v),
                    _ => None,
                })
                .collect();
            func.return_field_from_args(ReturnFieldArgs {
                arg_fields: &fields,
                scalar_arguments: &literals,
            })
            .ok()?
        }
        Expr::AggregateFunction(AggregateFunction { func, params }) => {
            let fields = params
                .args
                .iter()
                .map(|a| typed(a, schema))
                .collect::<Option<Vec<_>>>()?;
            let fields = fields_with_udf(&fields, func.as_ref()).ok()?;
            func.return_field(&fields).ok()?
        }
        _ => return None,
    })
}

/// The field of a cast of `source` to `target`, as DataFusion 55's `cast_output_field`: a
/// type-only target keeps the source's metadata without extension-type keys, an explicit
/// target field its own metadata; a `TRY_CAST` is nullable.
fn cast_field(source: &FieldRef, target: &FieldRef, try_cast: bool) -> FieldRef {
    // arrow-schema's `extension::EXTENSION_TYPE_{NAME,METADATA}_KEY` (not re-exported by
    // `datafusion::arrow`).
    const EXTENSION_TYPE_NAME_KEY: &str = "ARROW:extension:name";
    const EXTENSION_TYPE_METADATA_KEY: &str = "ARROW:extension:metadata";
    let type_only =
        target.name().is_empty() && target.is_nullable() && target.metadata().is_empty();
    let metadata = if type_only {
        let mut m = source.metadata().clone();
        m.remove(EXTENSION_TYPE_NAME_KEY);
        m.remove(EXTENSION_TYPE_METADATA_KEY);
        m
    } else {
        target.metadata().clone()
    };
    let f = source
        .as_ref()
        .clone()
        .with_data_type(target.data_type().clone())
        .with_metadata(metadata);
    Arc::new(if try_cast { f.with_nullable(true) } else { f })
}

/// `e`'s output field with its qualifier, as `to_field` gives it.
fn output_field(e: &Expr, schema: &DFSchema) -> Option<(Option<TableReference>, FieldRef)> {
    let (relation, name) = match e {
        Expr::Alias(a) => (a.relation.clone(), a.name.clone()),
        Expr::Column(c) => (c.relation.clone(), c.name.clone()),
        _ => e.qualified_name(),
    };
    Some((relation, typed(e, schema)?.renamed(&name)))
}

/// The output fields of `exprs` over `schema`.
fn output_fields<'a>(
    exprs: impl IntoIterator<Item = &'a Expr>,
    schema: &DFSchema,
) -> Option<Vec<(Option<TableReference>, FieldRef)>> {
    exprs.into_iter().map(|e| output_field(e, schema)).collect()
}

/// `exprs` with their unqualified columns qualified as DataFusion's `normalize_col` qualifies
/// them when the plan has no join `USING` columns: a name that one field of `schema` has takes
/// that field's qualifier. `Err` (with `exprs` unchanged) when a name matches no field or
/// several (DataFusion then resolves it through the plan's `USING` joins, or fails). The
/// columns are checked before anything is rewritten, and an expression is rewritten only when
/// one of its columns takes a qualifier, so the common case copies nothing.
fn normalized(exprs: Vec<Expr>, schema: &DFSchema) -> Result<Vec<Expr>, Vec<Expr>> {
    let mut rewrite = vec![false; exprs.len()];
    for (e, rewrite) in exprs.iter().zip(&mut rewrite) {
        let checked = e.apply(|e| {
            if let Expr::Column(c) = e
                && c.relation.is_none()
            {
                match schema
                    .qualified_fields_with_unqualified_name(&c.name)
                    .as_slice()
                {
                    [(qualifier, _)] => *rewrite |= qualifier.is_some(),
                    _ => return Err(DataFusionError::Plan(String::new())),
                }
            }
            Ok(TreeNodeRecursion::Continue)
        });
        if checked.is_err() {
            return Err(exprs);
        }
    }
    Ok(exprs
        .into_iter()
        .zip(rewrite)
        .map(|(e, rewrite)| {
            if !rewrite {
                return e;
            }
            e.transform_up(|e| match e {
                Expr::Column(c) if c.relation.is_none() => {
                    match schema
                        .qualified_fields_with_unqualified_name(&c.name)
                        .as_slice()
                    {
                        [one] => Ok(Transformed::yes(Expr::Column(Column::from(*one)))),
                        // Checked above: one match each.
                        _ => Ok(Transformed::no(Expr::Column(c))),
                    }
                }
                other => Ok(Transformed::no(other)),
            })
            .map_or_else(|_| unreachable!("the rewrite returns no error"), |t| t.data)
        })
        .collect())
}

#[cfg(test)]
thread_local! {
    /// How many nodes this thread built on the fast paths (for the tests).
    static BUILT_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts a node built on a fast path (tests only).
fn built_here() {
    #[cfg(test)]
    BUILT_HERE.with(|n| n.set(n.get() + 1));
}

/// Does `schema` have a qualified field?
fn has_qualified(schema: &DFSchema) -> bool {
    schema.iter().any(|(q, _)| q.is_some())
}

/// A schema of `fields` with `input`'s schema-level metadata.
fn schema_of(
    fields: Vec<(Option<TableReference>, FieldRef)>,
    input: &LogicalPlan,
) -> Option<DFSchema> {
    DFSchema::new_with_metadata(fields, input.schema().metadata().clone()).ok()
}

/// `b.project(exprs)`: DataFusion's projection of `exprs` over `b`, with the schema computed
/// here. Over an input without qualified columns (aggregate outputs, aliases) it is what
/// [`Projection::try_new`] builds, as before this module: normalising and validating the
/// expressions there would change nothing but cost a walk of the whole input per expression.
pub(crate) fn project(b: LogicalPlanBuilder, exprs: Vec<Expr>) -> Result<LogicalPlanBuilder> {
    let input = b.build()?;
    let qualified = has_qualified(input.schema());
    let fallback = |input: LogicalPlan, exprs: Vec<Expr>| {
        if qualified {
            LogicalPlanBuilder::from(input).project(exprs)
        } else {
            Ok(LogicalPlanBuilder::from(LogicalPlan::Projection(
                Projection::try_new(exprs, Arc::new(input))?,
            )))
        }
    };
    let exprs = match normalized(exprs, input.schema()) {
        // Over an aggregate or a window, DataFusion's builder also replaces sub-expressions
        // equal to the input's output expressions by their columns (`columnize_expr`).
        Ok(normal) if !(qualified && reads_own_outputs(&normal, &input)) => normal,
        Ok(exprs) | Err(exprs) => return fallback(input, exprs),
    };
    let schema = (|| {
        let schema = schema_of(output_fields(&exprs, input.schema())?, &input)?;
        let dependencies = projected_dependencies(&exprs, &input)?;
        schema.with_functional_dependencies(dependencies).ok()
    })();
    let Some(schema) = schema else {
        return fallback(input, exprs);
    };
    built_here();
    let input = Arc::new(input);
    #[cfg(debug_assertions)]
    let check = (exprs.clone(), Arc::clone(&input));
    let plan = LogicalPlan::Projection(Projection::try_new_with_schema(
        exprs,
        input,
        Arc::new(schema),
    )?);
    #[cfg(debug_assertions)]
    {
        let (exprs, input) = check;
        let theirs = fallback(Arc::unwrap_or_clone(input), exprs)?.build()?;
        debug_assert_eq!(plan, theirs, "the projection DataFusion builds");
    }
    Ok(LogicalPlanBuilder::from(plan))
}

/// Every column of `b`'s output, in order, as expressions (to project them again with more).
pub(crate) fn columns(b: &LogicalPlanBuilder) -> Vec<Expr> {
    b.schema().columns().into_iter().map(Expr::Column).collect()
}

/// Whether a projection of `exprs` over `input` (an aggregate or a window) has a sub-expression
/// that DataFusion's `columnize_expr` would replace by one of `input`'s output columns: one
/// equal to an output expression other than a plain column (a column stays itself). Also true
/// when the outputs cannot be listed.
fn reads_own_outputs(exprs: &[Expr], input: &LogicalPlan) -> bool {
    if !matches!(input, LogicalPlan::Aggregate(_) | LogicalPlan::Window(_)) {
        return false;
    }
    let Ok(outputs) = input.columnized_output_exprs() else {
        return true;
    };
    let computed: Vec<&Expr> = outputs
        .into_iter()
        .map(|(e, _)| e)
        .filter(|e| !matches!(e, Expr::Column(_)))
        .collect();
    !computed.is_empty()
        && exprs
            .iter()
            .any(|e| e.exists(|sub| Ok(computed.contains(&sub))).unwrap_or(true))
}

/// The functional dependencies of a projection of `exprs` over `input`, as DataFusion 55's
/// `calc_func_dependencies_for_project` derives them: an output keeps an input's dependencies
/// when its expression (under an alias, or not) prints as that input field's name. Without
/// dependencies in the input there is nothing to keep, and nothing is printed.
fn projected_dependencies(
    exprs: &[Expr],
    input: &LogicalPlan,
) -> Option<datafusion::common::FunctionalDependencies> {
    let deps = input.schema().functional_dependencies();
    if deps.is_empty() {
        return Some(deps.clone());
    }
    let names = input.schema().field_names();
    let indices = exprs
        .iter()
        .map(|e| {
            let inner = match e {
                Expr::Alias(a) => a.expr.as_ref(),
                #[expect(deprecated)]
                Expr::Wildcard { .. } => return None,
                e => e,
            };
            let found = match inner {
                Expr::Column(c) => {
                    let name = c.flat_name();
                    names.iter().position(|n| *n == name)
                }
                e => prints_as(e, &names),
            };
            Some(found.unwrap_or(usize::MAX))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(deps.project_functional_dependencies(&indices, exprs.len()))
}

/// The first of `names` that `e` prints as (its `Display`, which DataFusion compares by
/// formatting each expression whole): the printing stops as soon as what it printed so far
/// begins none of them.
fn prints_as(e: &Expr, names: &[String]) -> Option<usize> {
    use std::fmt::Write;
    struct Prefix<'a> {
        names: &'a [String],
        live: Vec<usize>,
        at: usize,
    }
    impl Write for Prefix<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let (names, at, end) = (self.names, self.at, self.at + s.len());
            self.live
                .retain(|&i| names[i].as_bytes().get(at..end) == Some(s.as_bytes()));
            self.at = end;
            if self.live.is_empty() {
                Err(std::fmt::Error)
            } else {
                Ok(())
            }
        }
    }
    let mut w = Prefix {
        names,
        live: (0..names.len()).collect(),
        at: 0,
    };
    write!(w, "{e}").ok()?;
    w.live.into_iter().find(|&i| names[i].len() == w.at)
}

/// `b.aggregate(group, aggregates)` with the schema computed here (the functional
/// dependencies are still DataFusion's: `Aggregate::try_new_with_schema` derives them).
pub(crate) fn aggregate(
    b: LogicalPlanBuilder,
    group: Vec<Expr>,
    aggregates: Vec<Expr>,
) -> Result<LogicalPlanBuilder> {
    let input = b.build()?;
    let fallback = |input: LogicalPlan, group: Vec<Expr>, aggregates: Vec<Expr>| {
        LogicalPlanBuilder::from(input).aggregate(group, aggregates)
    };
    if group.iter().any(|e| matches!(e, Expr::GroupingSet(_))) {
        return fallback(input, group, aggregates);
    }
    let (group, aggregates) = match (
        normalized(group, input.schema()),
        normalized(aggregates, input.schema()),
    ) {
        (Ok(g), Ok(a)) => (g, a),
        (Ok(g) | Err(g), Ok(a) | Err(a)) => return fallback(input, g, a),
    };
    let schema = output_fields(group.iter().chain(&aggregates), input.schema())
        .and_then(|fields| schema_of(fields, &input));
    let Some(schema) = schema else {
        return fallback(input, group, aggregates);
    };
    built_here();
    let input = Arc::new(input);
    #[cfg(debug_assertions)]
    let check = (group.clone(), aggregates.clone(), Arc::clone(&input));
    let plan = LogicalPlan::Aggregate(Aggregate::try_new_with_schema(
        input,
        group,
        aggregates,
        Arc::new(schema),
    )?);
    #[cfg(debug_assertions)]
    {
        let (group, aggregates, input) = check;
        let theirs = fallback(Arc::unwrap_or_clone(input), group, aggregates)?.build()?;
        debug_assert_eq!(plan, theirs, "the aggregate DataFusion builds");
    }
    Ok(LogicalPlanBuilder::from(plan))
}

/// `b.filter(predicate)`, with the predicate's columns qualified here (DataFusion still
/// checks its type).
pub(crate) fn filter(b: LogicalPlanBuilder, predicate: Expr) -> Result<LogicalPlanBuilder> {
    let input = b.build()?;
    let predicate = match normalized(vec![predicate], input.schema()) {
        Ok(mut p) => p.remove(0),
        Err(mut p) => return LogicalPlanBuilder::from(input).filter(p.remove(0)),
    };
    built_here();
    let plan = LogicalPlan::Filter(Filter::try_new(predicate, Arc::new(input))?);
    Ok(LogicalPlanBuilder::from(plan))
}

/// `b.sort_with_limit(exprs, fetch)`, built directly when every key is a plain column of an
/// input without qualified columns: DataFusion's builder would then rewrite the keys through
/// the projection below and normalise them, both changing nothing (about 10 % of a funnel's
/// lowering in a profile of criterion `w9/W7`). Otherwise it is `sort_with_limit` itself.
pub(crate) fn sort(
    b: LogicalPlanBuilder,
    exprs: Vec<SortExpr>,
    fetch: Option<usize>,
) -> Result<LogicalPlanBuilder> {
    let input = b.build()?;
    let schema: &DFSchemaRef = input.schema();
    let plain = schema.iter().all(|(q, _)| q.is_none())
        && exprs.iter().all(|s| match &s.expr {
            Expr::Column(c) => {
                c.relation.is_none() && schema.has_column_with_unqualified_name(&c.name)
            }
            _ => false,
        });
    if !plain {
        return LogicalPlanBuilder::from(input).sort_with_limit(exprs, fetch);
    }
    Ok(LogicalPlanBuilder::from(LogicalPlan::Sort(Sort {
        expr: exprs,
        input: Arc::new(input),
        fetch,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Schema, TimeUnit};
    use datafusion::functions::core::expr_fn::get_field;
    use datafusion::functions_aggregate::expr_fn::{count, max, sum};
    use datafusion::logical_expr::{cast, col, lit, logical_plan::table_scan, try_cast, when};

    /// `prints_as` finds what comparing each whole `to_string` finds, including names the
    /// expression prints a prefix of, or an extension of.
    #[test]
    fn prints_as_compares_whole_names() {
        let names: Vec<String> = ["a", "b + cc", "b + c", "count(x)", "b + c"]
            .map(String::from)
            .to_vec();
        let exprs = [
            col("b") + col("c"),
            col("b") + col("cc"),
            col("b") + col("ccc"),
            col("a"),
            col("b"),
            count(col("x")),
            lit(1) + lit(2),
            when(col("a").is_null(), lit("x")).end().unwrap(),
        ];
        for e in &exprs {
            let whole = e.to_string();
            assert_eq!(
                prints_as(e, &names),
                names.iter().position(|n| *n == whole),
                "{whole}"
            );
        }
        assert_eq!(prints_as(&(col("b") + col("c")), &names), Some(2));
        assert_eq!(prints_as(&(col("b") + col("ccc")), &names), None);
    }

    /// A scan of a table `events` with a struct, a timestamp, text and numbers.
    fn scan() -> LogicalPlanBuilder {
        let props = DataType::Struct(
            vec![
                Field::new("path", DataType::Utf8View, true),
                Field::new("amount", DataType::Float64, true),
            ]
            .into(),
        );
        let schema = Schema::new(vec![
            Field::new("user_id", DataType::Utf8, false),
            Field::new(
                "timestamp",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                false,
            ),
            Field::new("n", DataType::Int32, true),
            Field::new("properties", props, true),
        ]);
        table_scan(Some("events"), &schema, None).unwrap()
    }

    /// The expressions the lowering builds, over the qualified scan and then over an aggregate
    /// (whose output has functional dependencies), give DataFusion's own plans, node by node.
    fn built() -> usize {
        BUILT_HERE.with(|n| n.get())
    }

    #[test]
    fn the_nodes_datafusion_builds() {
        let before = built();
        let path = get_field(col("properties"), "path");
        let amount = get_field(col("properties"), "amount");
        let predicate = col("n")
            .gt(lit(3))
            .and(path.clone().is_not_null())
            .and(col("timestamp").is_not_null());
        let exprs = [
            col("user_id"),
            path.clone().alias("path"),
            cast(col("n"), DataType::Float64).alias("x"),
            try_cast(amount.clone(), DataType::Int64),
            (col("n") + lit(1i64)).alias("n1"),
            !col("n").is_null(),
            -col("n"),
        ];
        let ours = project(filter(scan(), predicate.clone()).unwrap(), exprs.to_vec())
            .unwrap()
            .build()
            .unwrap();
        let theirs = scan()
            .filter(predicate)
            .unwrap()
            .project(exprs.to_vec())
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(ours.schema(), theirs.schema());

        let group = vec![path.alias("path"), col("user_id")];
        let aggs = vec![
            count(col("n")).alias("count"),
            sum(amount.clone()),
            max(col("timestamp")).alias("last"),
        ];
        let ours = aggregate(scan(), group.clone(), aggs.clone())
            .unwrap()
            .build()
            .unwrap();
        let theirs = scan().aggregate(group, aggs).unwrap().build().unwrap();
        assert_eq!(ours, theirs);
        assert!(!ours.schema().functional_dependencies().is_empty());

        // Over an aggregate of unqualified outputs (the lowering aliases its group keys):
        // its functional dependencies carried through the projection.
        let group = vec![get_field(col("properties"), "path").alias("path")];
        let aggs = vec![count(col("n")).alias("count"), sum(amount)];
        let agg = aggregate(scan(), group, aggs).unwrap().build().unwrap();
        let over = vec![
            col("path"),
            col("count").alias("c"),
            (col("count") * lit(2i64)).alias("c2"),
            col("sum(events.properties[amount])"),
        ];
        let ours = project(LogicalPlanBuilder::from(agg), over.clone())
            .unwrap()
            .build()
            .unwrap();
        let LogicalPlan::Projection(p) = &ours else {
            panic!("a projection")
        };
        let theirs = Projection::try_new(over, Arc::clone(&p.input)).unwrap();
        assert!(!theirs.schema.functional_dependencies().is_empty());
        // filter, project, aggregate, aggregate, project: all five on the fast paths.
        assert_eq!(built() - before, 5);
        assert_eq!(p.schema, theirs.schema);
    }

    /// What the fast paths leave to DataFusion keeps DataFusion's errors.
    #[test]
    fn unknown_and_ambiguous_columns_are_datafusions_errors() {
        let before = built();
        let ours = project(scan(), vec![col("nope")]).unwrap_err().to_string();
        let theirs = scan().project(vec![col("nope")]).unwrap_err().to_string();
        assert_eq!(ours, theirs);
        let ours = filter(scan(), col("nope").eq(lit(1)))
            .unwrap_err()
            .to_string();
        let theirs = scan()
            .filter(col("nope").eq(lit(1)))
            .unwrap_err()
            .to_string();
        assert_eq!(ours, theirs);
        let ours = aggregate(scan(), vec![col("n")], vec![sum(col("user_id") + col("x"))])
            .unwrap_err()
            .to_string();
        assert!(ours.contains("x"), "{ours}");
        assert_eq!(built(), before, "none of them on a fast path");
    }
}
