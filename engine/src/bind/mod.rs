//! The bind pre-pass between parsing and lowering, in the spirit of DataFusion's
//! `resolve_table_references` + `ContextProvider`. [`needs`] lists, without any I/O, what a
//! statement reads: its tables, signals, metrics, whether it reads v0.1 `traits.K`, the entity
//! type it names and whether its dense series needs the data span. A [`Binder`] then opens
//! those through a [`Catalog`], applies the statement-level checks and desugarings (a funnel's
//! and a sequence's retrieve view, `FROM metric(m)` over the metric's source), and hands
//! lowering a [`Bound`] whose tables are there by construction: lowering cannot meet a
//! TRAVERSE without its relationships or a `signal()` without the signals table.
//!
//! Caller permissions (policy.toml) are to be applied here, before any evidence is read:
//! [`needs`] names every table a statement reads before anything is opened, so a table the
//! principal may not read is refused with `permission_denied` first; and every table a
//! [`Binder`] opens comes from one [`Catalog`], so wrapping that catalog in the principal's
//! row filters and column masks makes every plan built from a [`Bound`] (funnels, joins,
//! TRAVERSE, signals) read only the rows and columns the principal may see.

mod kept_counts;
mod views;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::TimestampMicrosecondType;
use datafusion::logical_expr::Expr;
use datafusion::prelude::SessionContext;
use signalql_catalog::TableInfo;
use signalql_udfs::strings::StringColumn;

use crate::catalog::{self, Catalog};
use crate::error::{Error, Result};
use crate::execute::Executor;
use crate::lower::scan::data_span_plan;
use crate::lower::source::entity_type;
use crate::lower::{Interval, LowerInput, Signals, SourceTables, Traversal};
use crate::metrics::Registry;
use crate::syntax::ast::{
    FieldRef, FunnelQuery, RetrieveQuery, SequenceQuery, Source, Span, Statement,
};
use crate::syntax::walk::{metric_names, reads_traits, signal_names, signal_names_in_filter};

/// The alias of the table the bind pass's own counting plans read.
const PROBE: &str = "__probe";
/// The column of a counting plan that names each row's file ([`TableInfo::with_file_ordinal`]).
const FILE: &str = "__file";

pub use views::{funnel_view, metric_view, sequence_view};

/// A table a statement reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Table {
    Events,
    Entities,
    Relationships,
    /// v0.1 `traits.K`, read only when events has no `traits` column of its own.
    Users,
    Signals,
    Objects,
    Revisions,
    Representations,
    Links,
    Derivations,
}

impl Table {
    /// The table's folder name under the dataset root.
    pub fn name(self) -> &'static str {
        match self {
            Table::Events => "events",
            Table::Entities => "entities",
            Table::Relationships => "relationships",
            Table::Users => "users",
            Table::Signals => "signals",
            Table::Objects => "objects",
            Table::Revisions => "revisions",
            Table::Representations => "representations",
            Table::Links => "links",
            Table::Derivations => "derivations",
        }
    }
}

/// What a statement reads, found from its text alone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Needs {
    pub tables: BTreeSet<Table>,
    /// The signals read by `signal(name)` / `probability(name)`, sorted.
    pub signals: Vec<String>,
    /// The governed metrics named (a metric's own tables are known once its record is read).
    pub metrics: Vec<String>,
    /// The query reads v0.1 `traits.K`.
    pub traits: bool,
    /// `FROM entity(type)`: the type, which must exist.
    pub entity_type: Option<String>,
    /// A bucketed query without DURING: its dense series spans the data it reads.
    pub data_span: bool,
}

/// What `statement` reads, without opening anything.
pub fn needs(statement: &Statement) -> Needs {
    let object_tables = |extra: &[Table]| Needs {
        tables: [Table::Objects, Table::Revisions, Table::Representations]
            .into_iter()
            .chain(extra.iter().copied())
            .collect(),
        ..Needs::default()
    };
    match statement {
        Statement::Retrieve(q) => retrieve_needs(q),
        Statement::Funnel(q) => retrieve_needs(&funnel_view(q)),
        Statement::Sequence(q) => retrieve_needs(&sequence_view(q)),
        Statement::Watch(w) => retrieve_needs(&w.query),
        Statement::FindObject(_) => object_tables(&[]),
        // The packer's graph edges and WITH EVIDENCE read links and derivations.
        Statement::ContextTask(_) => object_tables(&[Table::Links, Table::Derivations]),
        Statement::Describe(_) | Statement::ExplainContext(_) | Statement::Explain(_) => {
            Needs::default()
        }
    }
}

fn retrieve_needs(q: &RetrieveQuery) -> Needs {
    let mut n = Needs {
        signals: signal_names(q),
        metrics: metric_names(q),
        traits: reads_traits(q),
        data_span: q.bucket.is_some() && q.window.is_none(),
        ..Needs::default()
    };
    match &q.source {
        Source::Events => {
            n.tables.insert(Table::Events);
            if n.traits {
                n.tables.insert(Table::Users);
            }
        }
        Source::Entity(name) => {
            n.tables.insert(Table::Entities);
            n.entity_type = Some(entity_type(name));
            if q.traverse.is_some() {
                n.tables.insert(Table::Relationships);
            }
        }
        Source::Metric(_) => {}
    }
    if !n.signals.is_empty() {
        n.tables.insert(Table::Signals);
    }
    n
}

/// A retrieve query as lowering reads it (the query itself, or a funnel's, a sequence's or a
/// metric's view) with everything it reads opened.
pub struct Bound {
    pub view: RetrieveQuery,
    pub source: SourceTables,
    pub signals: Option<Signals>,
    /// The metric registry (`metrics.toml`), read when the query names a metric; else empty.
    pub registry: Registry,
    /// The metrics the query names (for `metadata.metrics`).
    pub metrics: Vec<String>,
    /// The time column when it is not the source's (a metric's `time_column`).
    pub time_column: Option<String>,
    pub now: DateTime<Utc>,
    pub data_span: Option<Interval>,
    /// The JSON (or map) properties the query orders by value whose every value it reads is
    /// a number: `min`, `max` and ORDER BY read them as numbers (docs/mapping.md).
    pub numeric_keys: Vec<FieldRef>,
}

impl Bound {
    /// What lowering receives.
    pub fn input<'a>(&'a self, limits: &'a crate::limits::Limits) -> LowerInput<'a> {
        LowerInput {
            source: &self.source,
            signals: self.signals.as_ref(),
            metrics: &self.registry,
            time_column: self.time_column.as_deref(),
            now: self.now,
            limits,
            data_span: self.data_span,
            numeric_keys: &self.numeric_keys,
        }
    }
}

/// Binds statements against one catalog, in one session, at one `T`.
pub struct Binder<'a> {
    pub catalog: &'a dyn Catalog,
    pub exec: &'a Executor,
    pub now: DateTime<Utc>,
}

impl Binder<'_> {
    fn ctx(&self) -> &SessionContext {
        self.exec.session()
    }

    /// A retrieve query; `FROM metric(m)` becomes a query over the metric's source, and any
    /// named metric brings the registry.
    pub async fn retrieve(&self, q: &RetrieveQuery) -> Result<Bound> {
        let names = metric_names(q);
        if names.is_empty() {
            return self.view(q.clone(), Registry::default(), None).await;
        }
        let registry = Registry::load(self.catalog.dataset().root()).map_err(|e| e.at(q.span))?;
        let (view, time_column) = match &q.source {
            Source::Metric(name) => {
                let m = registry.get(name, q.span)?;
                (metric_view(q, name, &m.source), m.def.time_column.clone())
            }
            _ => (q.clone(), None),
        };
        let mut bound = self.view(view, registry, time_column).await?;
        bound.metrics = names;
        Ok(bound)
    }

    /// A funnel: it follows users through events.
    pub async fn funnel(&self, q: &FunnelQuery) -> Result<Bound> {
        if q.source != Source::Events {
            return Err(Error::type_error(format!(
                "FUNNEL follows users through events: use FROM events, not FROM {}",
                q.source
            ))
            .at(q.span));
        }
        self.view(funnel_view(q), Registry::default(), None).await
    }

    pub async fn sequence(&self, q: &SequenceQuery) -> Result<Bound> {
        self.view(sequence_view(q), Registry::default(), None).await
    }

    /// Open what the retrieve query `q` reads, check it, and compute its data span if needed.
    async fn view(
        &self,
        q: RetrieveQuery,
        registry: Registry,
        time_column: Option<String>,
    ) -> Result<Bound> {
        if q.traverse.is_some() && q.source == Source::Events {
            return Err(Error::type_error(
                "TRAVERSE follows relationships between entities: use it with FROM entity(type)",
            )
            .at(q.span));
        }
        let needs = retrieve_needs(&q);
        let ctx = self.ctx();
        let at = |e: Error| e.at(q.span);
        let source = match &q.source {
            Source::Entity(name) => {
                let entities = catalog::open(self.catalog, ctx, "entities")
                    .await
                    .map_err(at)?;
                let entity_type = entity_type(name);
                self.check_entity_type(&entities, &entity_type, q.span)
                    .await?;
                let traversal = match &q.traverse {
                    Some(clause) => Some(Traversal {
                        clause: clause.clone(),
                        relationships: catalog::open(self.catalog, ctx, "relationships")
                            .await
                            .map_err(at)?,
                    }),
                    None => None,
                };
                SourceTables::Entities {
                    entity_type,
                    entities,
                    traversal,
                }
            }
            Source::Events => {
                // A table with a time partition opens only the window's days (docs/mapping.md).
                let days = q.window.as_ref().and_then(|w| {
                    let as_of = crate::lower::time::anchor(Some(w), self.now).ok()?;
                    let max = self.exec.limits().max_window_days;
                    let i = crate::lower::time::window_interval(w, as_of, max).ok()?;
                    let last = (i.end - chrono::Duration::microseconds(1)).date_naive();
                    Some((i.start.date_naive(), last.succ_opt()?))
                });
                let events = self.catalog.table_during(ctx, "events", days).await?;
                // v0.1 `traits.K` reads the users table unless events carries its own.
                let users = if needs.traits && events.schema.field_with_name("traits").is_err() {
                    Some(self.catalog.table(ctx, Table::Users.name()).await?)
                } else {
                    None
                };
                SourceTables::Events { events, users }
            }
            Source::Metric(_) => {
                return Err(Error::internal(
                    "FROM metric(…) reached binding without its registry record",
                )
                .at(q.span));
            }
        };
        self.check_columns(&q, &source, &registry)?;
        let signals = if needs.signals.is_empty() {
            None
        } else {
            let table = self
                .catalog
                .table(ctx, Table::Signals.name())
                .await
                .map_err(|e| Error::from(e).at(q.span))?;
            // With TRAVERSE, only the signals WHERE reads are joined before it; every signal
            // is joined to the reached entities after it.
            let (before, after) = match &q.traverse {
                Some(_) => (signal_names_in_filter(&q), needs.signals.clone()),
                None => (needs.signals.clone(), Vec::new()),
            };
            Some(Signals {
                table,
                before,
                after,
            })
        };
        let mut bound = Bound {
            view: q,
            source,
            signals,
            registry,
            metrics: Vec::new(),
            time_column,
            now: self.now,
            data_span: None,
            numeric_keys: Vec::new(),
        };
        if needs.data_span {
            bound.data_span = self.data_span(&bound).await?;
        }
        bound.numeric_keys = self.numeric_keys(&bound).await?;
        Ok(bound)
    }

    /// A field the caller's policy denies (`[columns] deny`), named by `q` or by a metric it
    /// uses, is `permission_denied` naming it.
    fn check_columns(
        &self,
        q: &RetrieveQuery,
        source: &SourceTables,
        registry: &Registry,
    ) -> Result<()> {
        let Some(access) = self.catalog.access() else {
            return Ok(());
        };
        let (table, users) = match source {
            SourceTables::Events { events, users } => (events, users.as_ref()),
            SourceTables::Entities { entities, .. } => (entities, None),
        };
        // Each field with the place to point at: its predicate in WHERE or HAVING, else the
        // statement.
        let mut fields: Vec<(FieldRef, Span)> = crate::syntax::walk::located_fields(q)
            .into_iter()
            .map(|(f, span)| (f.clone(), span.unwrap_or(q.span)))
            .collect();
        for name in metric_names(q) {
            fields.extend(registry.fields(&name).into_iter().map(|f| (f, q.span)));
        }
        for (f, span) in &fields {
            let FieldRef::Path(p) = f else { continue };
            let Some(first) = p.first() else { continue };
            for t in std::iter::once(table).chain(users.filter(|_| first == "traits")) {
                if t.restriction
                    .as_ref()
                    .is_some_and(|r| r.denied.contains(first))
                {
                    return Err(access.refuse_column(&t.name, first).at(*span));
                }
            }
        }
        Ok(())
    }

    /// `entity(type)` must name a type the entities table has.
    async fn check_entity_type(&self, table: &TableInfo, wanted: &str, span: Span) -> Result<()> {
        let types = entity_types(self.exec, table).await?;
        if types.iter().any(|t| t == wanted) {
            return Ok(());
        }
        Err(unknown_entity_type(wanted, &types).at(span))
    }

    /// Of the properties `bound` orders by value, the JSON-text keys whose every non-null value
    /// in the source table is a number (docs/mapping.md). A struct or map child is of its
    /// declared type and is never probed. Decided once per table version and caller
    /// restriction, kept with the table: the first statement ordering such a key counts its
    /// values in the files no statement asked before ([`TableInfo::counted`]), later ones read
    /// the answer.
    async fn numeric_keys(&self, bound: &Bound) -> Result<Vec<FieldRef>> {
        use crate::lower::fields::{is_text, resolve};
        let table = match &bound.source {
            SourceTables::Events { events, .. } => events,
            SourceTables::Entities { entities, .. } => entities,
        };
        let fields = crate::syntax::walk::ordered_fields(&bound.view);
        if fields.is_empty() {
            return Ok(Vec::new());
        }
        let schema = crate::catalog::scan(table, PROBE, vec![])?.schema().clone();
        let mut asked = Vec::new();
        let mut numeric = Vec::new();
        let key_of = |field: &FieldRef| format!("{:?}\u{1f}{field}", table.restriction);
        for field in fields {
            let Ok(r) = resolve(field, &schema, bound.view.span) else {
                continue;
            };
            if !(r.untyped && is_text(&r.data_type)) {
                continue;
            }
            let known = table
                .decided
                .lock()
                .ok()
                .and_then(|d| d.get(&key_of(field)).copied());
            match known {
                Some(true) => numeric.push(field.clone()),
                Some(false) => {}
                None => asked.push((field.clone(), key_of(field), r.expr)),
            }
        }
        if asked.is_empty() {
            return Ok(numeric);
        }
        // Boxed: the counting plans' futures would otherwise sit inside every bind's.
        let counts = Box::pin(self.count_numbers(table, &asked)).await?;
        let mut decided = table.decided.lock().ok();
        for ((field, key, _), (values, numbers)) in asked.into_iter().zip(counts) {
            let is_numeric = values > 0 && values == numbers;
            if let Some(d) = decided.as_mut() {
                d.insert(key, is_numeric);
            }
            if is_numeric {
                numeric.push(field);
            }
        }
        Ok(numeric)
    }

    /// For each asked key (field, question, the value's expression over [`PROBE`]): its
    /// non-null values in `table` and how many of them are numbers. A folder of Parquet files
    /// read without a view is counted per file, and only the files no earlier opening counted
    /// are read ([`TableInfo::counted`]); any other table is counted whole.
    async fn count_numbers(
        &self,
        table: &TableInfo,
        asked: &[(FieldRef, String, Expr)],
    ) -> Result<Vec<(i64, i64)>> {
        if table.view.is_none() && !table.files.is_empty() {
            // Decided by the counts kept: every file counted, or a file holding a non-number.
            if let Some(sums) = summed(table, asked) {
                return Ok(sums);
            }
            // Or with those an earlier process kept on disk.
            let identities = file_identities(table);
            self.read_kept_counts(table, asked, &identities);
            if let Some(sums) = summed(table, asked) {
                return Ok(sums);
            }
            let uncounted = uncounted(table, asked);
            let settled = self.count_dictionaries(table, asked, &uncounted).await?;
            let missing: HashSet<&str> = uncounted
                .iter()
                .map(|(l, _)| l.as_str())
                .filter(|l| !settled.contains(*l))
                .collect();
            // None when every file's counts are kept (no file is left).
            let probed = table
                .only_files(|l| missing.contains(l))
                .and_then(|sub| sub.with_file_ordinal(FILE));
            if let Some(sub) = probed {
                let scan = crate::catalog::scan(&sub, PROBE, vec![])?;
                let tally = self.count_plan(scan, asked, true).await?;
                let root = self.catalog.dataset().root();
                let mut got = Vec::new();
                for (i, (location, size)) in sub.files.iter().enumerate() {
                    for (j, (_, q, _)) in asked.iter().enumerate() {
                        if let Some(c) = tally.kept(i as i64, j) {
                            if let Some(identity) = identities.get(bare(location)) {
                                kept_counts::write(root, q, identity, c);
                            }
                            got.push(((q.clone(), location.clone(), *size), c));
                        }
                    }
                }
                if let Ok(mut counted) = table.counted.lock() {
                    counted.extend(got);
                }
            }
            if let Some(sums) = summed(table, asked) {
                return Ok(sums);
            }
        }
        let tally = self
            .count_plan(crate::catalog::scan(table, PROBE, vec![])?, asked, false)
            .await?;
        Ok(tally
            .counts
            .into_values()
            .next()
            .unwrap_or_else(|| vec![(0, 0); asked.len()]))
    }

    /// Adds to [`TableInfo::counted`] the counts an earlier process kept on disk for the
    /// files not counted yet ([`uncounted`]), by their identities ([`file_identities`]).
    fn read_kept_counts(
        &self,
        table: &TableInfo,
        asked: &[(FieldRef, String, Expr)],
        identities: &HashMap<String, String>,
    ) {
        let root = self.catalog.dataset().root();
        let mut found = Vec::new();
        for (location, size) in uncounted(table, asked) {
            let Some(identity) = identities.get(bare(&location)) else {
                continue;
            };
            for (_, q, _) in asked {
                if let Some(c) = kept_counts::read(root, q, identity) {
                    found.push(((q.clone(), location.clone(), size), c));
                }
            }
        }
        if let Ok(mut counted) = table.counted.lock() {
            for (key, c) in found {
                counted.entry(key).or_insert(c);
            }
        }
    }

    /// Counts the asked keys of the files `files` of `table` from their dictionary pages where
    /// those hold every value of the key's column (docs/mapping.md): the keys' distinct values
    /// and how many of them are numbers, which decide as the rows' counts do (a key is numeric
    /// when it has values and all are numbers). Each key's expression is evaluated over the
    /// values in this process, with no plan; a column's dictionaries are read once for all
    /// the keys read from it. The counts are kept in [`TableInfo::counted`];
    /// returns the files so counted, the others are left to a pass over their rows. Not used
    /// when the caller's restriction filters rows or hides the column (the dictionaries hold
    /// the values of every row), nor for a key read from more than one column.
    async fn count_dictionaries(
        &self,
        table: &TableInfo,
        asked: &[(FieldRef, String, Expr)],
        files: &[(String, u64)],
    ) -> Result<HashSet<String>> {
        use datafusion::arrow::array::RecordBatch;
        use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
        use datafusion::common::DFSchema;
        let mut settled = HashSet::new();
        let mut columns = Vec::with_capacity(asked.len());
        for (_, _, expr) in asked {
            match expr.column_refs().into_iter().collect::<Vec<_>>()[..] {
                [c] => columns.push(c.name.clone()),
                _ => return Ok(settled),
            }
        }
        if let Some(r) = &table.restriction
            && (r.filter.is_some() || columns.iter().any(|c| r.hides(c)))
        {
            return Ok(settled);
        }
        let state = self.ctx().state();
        let dataset = self.catalog.dataset();
        // Per column the keys read from, its schema; per asked key, its expression over it.
        let mut read: Vec<(&str, SchemaRef)> = Vec::new();
        let mut evaluators = Vec::with_capacity(asked.len());
        for ((_, _, expr), column) in asked.iter().zip(&columns) {
            let c = match read.iter().position(|(name, _)| name == column) {
                Some(c) => c,
                None => {
                    let data_type = table
                        .schema
                        .field_with_name(column)
                        .map(|f| f.data_type().clone())
                        .unwrap_or(DataType::Utf8);
                    let field = Field::new(column, data_type, true);
                    read.push((column, Arc::new(Schema::new(vec![field]))));
                    read.len() - 1
                }
            };
            let qualified = DFSchema::try_from_qualified_schema(PROBE, &read[c].1)?;
            evaluators.push((c, state.create_physical_expr(expr.clone(), &qualified)?));
        }
        'files: for (location, size) in files {
            // Each column's dictionaries read once, as a batch of its values.
            let mut batches = Vec::with_capacity(read.len());
            for (column, schema) in &read {
                let got = dataset
                    .file_text_dictionary(&state, &table.name, (location, *size), column)
                    .await;
                // A failed read is left to the pass over the rows, which names the file.
                let Ok(Some(values)) = got else {
                    continue 'files;
                };
                let values =
                    datafusion::arrow::compute::cast(&values, schema.field(0).data_type())?;
                batches.push(RecordBatch::try_new(Arc::clone(schema), vec![values])?);
            }
            let mut got = Vec::with_capacity(asked.len());
            for (c, physical) in &evaluators {
                let batch = &batches[*c];
                let key = physical.evaluate(batch)?.into_array(batch.num_rows())?;
                let numbers = datafusion::arrow::compute::cast(&key, &DataType::Float64)?;
                let present = |a: &dyn Array| (a.len() - a.null_count()) as i64;
                got.push((present(key.as_ref()), present(numbers.as_ref())));
            }
            if let Ok(mut counted) = table.counted.lock() {
                for ((_, q, _), c) in asked.iter().zip(got) {
                    counted.insert((q.clone(), location.clone(), *size), c);
                }
                settled.insert(location.clone());
            }
        }
        Ok(settled)
    }

    /// One pass over `scan` (a table under the alias [`PROBE`]) counting each asked key's
    /// non-null values and numbers, by the [`FILE`] column when `by_file` (else under the one
    /// group 0). The pass stops at the first batch after which every asked key has met a value
    /// that is not a number: each is then text whatever the other rows hold, so a key such as
    /// a path is decided by the first rows read, and only a key that is numeric (or absent)
    /// costs a pass over every row. The tally says whether every row was counted.
    async fn count_plan(
        &self,
        scan: datafusion::logical_expr::LogicalPlanBuilder,
        asked: &[(FieldRef, String, Expr)],
        by_file: bool,
    ) -> Result<Tally> {
        use crate::lower::fields::column;
        use datafusion::arrow::array::BooleanArray;
        use datafusion::arrow::datatypes::{DataType, Int64Type};
        use datafusion::logical_expr::try_cast;
        let mut values = Vec::new();
        let mut flags = Vec::new();
        let mut any_value: Option<Expr> = None;
        for (i, (_, _, expr)) in asked.iter().enumerate() {
            let v = format!("__v{i}");
            let present = column(&v).is_not_null();
            // A JSON key's value is classified as it is parsed (no text made and cast).
            let number = match signalql_udfs::scalar::json_get::number_test(expr) {
                Some(test) => {
                    values.push(test.alias(&v));
                    column(&v).is_true()
                }
                None => {
                    values.push(expr.clone().alias(&v));
                    try_cast(column(&v), DataType::Float64).is_not_null()
                }
            };
            flags.push(present.clone().alias(format!("__n{i}")));
            flags.push(number.alias(format!("__x{i}")));
            any_value = Some(match any_value {
                Some(e) => e.or(present),
                None => present,
            });
        }
        if by_file {
            values.push(column(FILE));
            flags.push(column(FILE));
        }
        // The values under internal names first: DataFusion 55's leaf-projection push-down
        // fails on field accesses straight over the scan.
        let mut plan = scan.project(values)?;
        if let Some(any) = any_value {
            plan = plan.filter(any)?;
        }
        let plan = plan.project(flags)?.build()?;
        let mut counts: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
        let mut text = vec![false; asked.len()];
        let whole = self
            .exec
            .run_while(&plan, |batch| {
                let flag = |c: usize| batch.column(c).as_any().downcast_ref::<BooleanArray>();
                let files = by_file
                    .then(|| {
                        batch
                            .column(2 * asked.len())
                            .as_primitive_opt::<Int64Type>()
                    })
                    .flatten();
                for j in 0..asked.len() {
                    let (Some(n), Some(x)) = (flag(2 * j), flag(2 * j + 1)) else {
                        continue;
                    };
                    for row in 0..batch.num_rows() {
                        let (is_value, is_number) = (n.value(row), x.value(row));
                        if !is_value {
                            continue;
                        }
                        let group = files.map_or(0, |f| f.value(row));
                        let c = counts
                            .entry(group)
                            .or_insert_with(|| vec![(0, 0); asked.len()]);
                        c[j].0 += 1;
                        c[j].1 += i64::from(is_number);
                        text[j] |= !is_number;
                    }
                }
                Ok(!text.iter().all(|t| *t))
            })
            .await?;
        Ok(Tally { counts, whole })
    }

    /// The span `[min, max]` of the rows a bucketed query without DURING reads.
    async fn data_span(&self, bound: &Bound) -> Result<Option<Interval>> {
        let plan = data_span_plan(&bound.view, &bound.input(self.exec.limits()))?;
        let batches = self.exec.run(&plan).await?.batches;
        let Some(batch) = batches.first() else {
            return Ok(None);
        };
        let col = |i: usize| {
            batch
                .column(i)
                .as_primitive_opt::<TimestampMicrosecondType>()
                .cloned()
        };
        let (Some(lo), Some(hi)) = (col(0), col(1)) else {
            return Ok(None);
        };
        if lo.is_empty() || lo.is_null(0) || hi.is_null(0) {
            return Ok(None);
        }
        let at = |v: i64| DateTime::<Utc>::from_timestamp_micros(v);
        match (at(lo.value(0)), at(hi.value(0) + 1)) {
            (Some(start), Some(end)) => Ok(Some(Interval { start, end })),
            _ => Ok(None),
        }
    }
}

/// The files of `table` some asked key has no counts for yet ([`TableInfo::counted`]).
fn uncounted(table: &TableInfo, asked: &[(FieldRef, String, Expr)]) -> Vec<(String, u64)> {
    let Ok(counted) = table.counted.lock() else {
        return Vec::new();
    };
    table
        .files
        .iter()
        .filter(|(location, size)| {
            asked
                .iter()
                .any(|(_, q, _)| !counted.contains_key(&(q.clone(), location.clone(), *size)))
        })
        .cloned()
        .collect()
}

/// Each file of `table` by location (without a leading `/`, as object-store paths are
/// written): its identity (location, size, modification time), which names the counts kept
/// on disk ([`kept_counts`]).
fn file_identities(table: &TableInfo) -> HashMap<String, String> {
    table
        .file_identities()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|id| Some((bare(id.split('\0').next()?).to_string(), id)))
        .collect()
}

/// A file's location as an object-store path writes it: without a leading `/`.
fn bare(location: &str) -> &str {
    location.trim_start_matches('/')
}

/// What a pass over the rows counted of each asked key ([`Binder::count_plan`]): per group
/// (a file ordinal, or 0 for the whole table) the non-null values and how many are numbers.
struct Tally {
    counts: HashMap<i64, Vec<(i64, i64)>>,
    /// Every row was counted; else the pass stopped once every key had met a value that is
    /// not a number, and a group's counts are whole only where they show one.
    whole: bool,
}

impl Tally {
    /// Key `j`'s counts in `group`, when they can be kept: a group the pass read whole, or
    /// one where the key met a value that is not a number (which decides it as text).
    fn kept(&self, group: i64, j: usize) -> Option<(i64, i64)> {
        let got = self.counts.get(&group).map_or((0, 0), |c| c[j]);
        (self.whole || got.0 != got.1).then_some(got)
    }
}

/// Each asked key's counts summed over the files of `table` ([`TableInfo::counted`]); `None`
/// when some file's counts are not kept and no kept file decides the key as text. A key some
/// kept file holds a non-number in is text whatever the others hold: it sums to one value and
/// no number.
fn summed(table: &TableInfo, asked: &[(FieldRef, String, Expr)]) -> Option<Vec<(i64, i64)>> {
    let counted = table.counted.lock().ok()?;
    let mut sums = Vec::with_capacity(asked.len());
    for (_, q, _) in asked {
        let (mut sum, mut missing, mut text) = ((0, 0), false, false);
        for (location, size) in &table.files {
            match counted.get(&(q.clone(), location.clone(), *size)) {
                Some((values, numbers)) => {
                    sum = (sum.0 + values, sum.1 + numbers);
                    text |= values != numbers;
                }
                None => missing = true,
            }
        }
        sums.push(match (missing, text) {
            (false, _) => sum,
            (true, true) => (1, 0),
            (true, false) => return None,
        });
    }
    Some(sums)
}

/// The distinct `entity_type`s of the entities table, sorted.
pub(crate) async fn entity_types(exec: &Executor, table: &TableInfo) -> Result<Vec<String>> {
    let plan = crate::catalog::scan(table, "entities", vec![])?
        .aggregate(
            vec![crate::lower::fields::column("entity_type")],
            Vec::<Expr>::new(),
        )?
        .build()?;
    let mut out = Vec::new();
    for b in &exec.run(&plan).await?.batches {
        let c = StringColumn::try_new(b.column(0).as_ref())?;
        out.extend(c.iter().flatten().map(str::to_string));
    }
    out.sort();
    Ok(out)
}

/// `entity(wanted)` names no type of the entities table, whose types are `types`.
pub(crate) fn unknown_entity_type(wanted: &str, types: &[String]) -> Error {
    Error::unknown_field(format!(
        "unknown entity type `{wanted}`: the entities table has {}",
        if types.is_empty() {
            "no entities".to_string()
        } else {
            types.join(", ")
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syntax::parse;

    fn tables(text: &str) -> Vec<&'static str> {
        needs(&parse(text).unwrap())
            .tables
            .into_iter()
            .map(Table::name)
            .collect()
    }

    #[test]
    fn needs_lists_the_tables_each_statement_kind_reads() {
        assert_eq!(tables("FROM events RETURN count"), ["events"]);
        assert_eq!(
            tables("FROM events RETURN traits.plan, count GROUP BY traits.plan"),
            ["events", "users"]
        );
        assert_eq!(
            tables(
                "FROM entity(analytics.account) TRAVERSE member_of DEPTH <= 2 \
                 RETURN entity_id, signal(account_health)"
            ),
            ["entities", "relationships", "signals"]
        );
        assert_eq!(
            tables("FUNNEL \"page_view\" -> \"purchase\" FROM events DURING LAST 30 d WITHIN 7 d"),
            ["events"]
        );
        assert_eq!(
            tables("FIND OBJECT ABOUT \"parquet\""),
            ["objects", "revisions", "representations"]
        );
        assert!(tables("DESCRIBE events").is_empty());
    }

    #[test]
    fn needs_names_signals_metrics_entity_type_and_the_data_span() {
        let n = needs(
            &parse(
                "FROM entity(analytics.user) WHERE signal(churn_risk) > 0.5 BUCKET BY d \
                 RETURN timestamp, count",
            )
            .unwrap(),
        );
        assert_eq!(n.signals, ["churn_risk"]);
        assert_eq!(n.entity_type.as_deref(), Some("analytics.user"));
        assert!(n.data_span);
        let n = needs(&parse("FROM metric(revenue) DURING LAST 7 d RETURN metric_value").unwrap());
        assert_eq!(n.metrics, ["revenue"]);
        assert!(
            n.tables.is_empty(),
            "a metric's tables come from its record"
        );
        assert!(!n.data_span);
    }
}
