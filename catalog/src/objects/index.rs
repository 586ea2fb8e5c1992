//! The text index of the object tables (docs/index.md): lexical-v1's whole tokens of every
//! readable representation, stored as Parquet beside the tables, so that CONTEXT FOR and FIND
//! OBJECT ABOUT can find the representations containing a task's terms without reading or
//! tokenising their content.
//!
//! Three tables, written together under one commit record ([`crate::commit`]):
//!
//! - `index_terms`: `term` and `reps`, the ordinals (`index_reps.rep` of the file with the
//!   same name) of the representations that contain it as a whole token. The rows are sorted
//!   by term in runs (one per [`FLUSH_POSTINGS`] postings; a term has one row per run), in
//!   row groups of [`TERM_ROW_GROUP_ROWS`] terms, so a lookup of a task's terms reads the
//!   row groups whose term statistics hold them and nothing else.
//! - `index_reps`: one row per representation of a covered file: `rep` (its ordinal in the
//!   file), `object_id`, `revision`, `name`, `weight` (lexical-v1's field weight: 2 for the
//!   `summary` representation, 1 for any other), `content_hash`, `chars` (the content's
//!   Unicode scalar values, for chars-div-4-v1; NULL when the content is not indexable),
//!   `o200k` (its exact o200k_base token count, for the `o200k_base` estimator; NULL likewise)
//!   and `indexed` (whether its terms are in `index_terms`). An `index_reps` file without
//!   `o200k` is of the first format (before 2026-12-03): queries do not use its index write.
//! - `index_files`: the `representations` files the index covers: `file` (the location
//!   relative to the root), `size` and `version` (the modification time locally, the ETag on
//!   S3). A file is covered while a row names it with its current size and version.
//!
//! A representation's content is indexed when its media type is packable (`text/*`,
//! `application/json`) and neither its roles nor its revision's include `secret`: secret
//! content is never tokenised into the index (signalql-v0.5-context.md, "EXCLUDE"). The
//! revision's roles are those of the `revisions` table, append-only like every object table,
//! so a representation's secret-ness never changes; a file with a representation whose
//! revision is not visible yet is left uncovered (a later `signalql index` covers it).
//!
//! The tokeniser is lexical-v1's own ([`signalql_udfs::scalar::lexical::tokens`]): letters and
//! decimal digits after full lower-casing. Only tokens that can be a task's term are kept (two
//! characters or more, not a stopword), each once per representation.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, ListArray, RecordBatch, StringArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use signalql_udfs::scalar::lexical::{STOPWORDS, SUMMARY_WEIGHT, TEXT_WEIGHT, tokens};
use signalql_udfs::scalar::token_estimate::Estimator;

use super::{REPRESENTATIONS, REVISIONS, scan, scan_file};
use crate::commit::{Ingest, Snapshot};
use crate::error::{CatalogError, Result};
use crate::storage::{ListedFile, Root};
use crate::write::{NewParquet, writer_properties};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::parquet::basic::{Compression, ZstdLevel};
use datafusion::parquet::file::properties::{EnabledStatistics, WriterProperties};

pub const INDEX_TERMS: &str = crate::commit::INDEX_TABLES[0];
pub const INDEX_REPS: &str = crate::commit::INDEX_TABLES[1];
pub const INDEX_FILES: &str = crate::commit::INDEX_TABLES[2];

/// The `index_reps` column of the o200k_base token counts.
pub const O200K_COLUMN: &str = "o200k";

/// The representation name that weighs 2 (lexical-v1's summary field).
const SUMMARY: &str = "summary";

/// `index_terms`.
pub fn index_terms_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("term", DataType::Utf8, false),
        Field::new(
            "reps",
            DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true))),
            false,
        ),
    ]))
}

/// `index_reps`.
pub fn index_reps_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("rep", DataType::Int64, false),
        Field::new("file", DataType::Int64, false),
        Field::new("object_id", DataType::Utf8, false),
        Field::new("revision", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("media_type", DataType::Utf8, false),
        Field::new("content_ref", DataType::Utf8, true),
        Field::new("content_hash", DataType::Utf8, true),
        Field::new("tokens", DataType::Int64, true),
        Field::new(
            "roles",
            DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
            true,
        ),
        Field::new("weight", DataType::Int64, false),
        Field::new("chars", DataType::Int64, true),
        Field::new(O200K_COLUMN, DataType::Int64, true),
        Field::new("indexed", DataType::Boolean, false),
    ]))
}

/// `index_files`.
pub fn index_files_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("file", DataType::Utf8, false),
        Field::new("size", DataType::Int64, false),
        Field::new("version", DataType::Utf8, true),
    ]))
}

/// Whether `media_type` is packable text (`text/*` or `application/json`), as CONTEXT FOR
/// decides it.
pub fn packable(media_type: &str) -> bool {
    media_type.starts_with("text/") || media_type == "application/json"
}

/// Calls `f` with every token of `content` that can be a task's term (two characters or more,
/// not a stopword), in order, repeats included.
pub fn for_each_index_token(content: &str, mut f: impl FnMut(&str)) {
    let keep = |t: &str| t.chars().nth(1).is_some() && !STOPWORDS.contains(&t);
    if content.is_ascii() {
        // ASCII: full lower-casing is ASCII folding and the word characters are [0-9a-z].
        let lower = content.to_ascii_lowercase();
        for t in lower.split(|c: char| !c.is_ascii_alphanumeric()) {
            if !t.is_empty() && keep(t) {
                f(t);
            }
        }
    } else {
        for t in tokens(content) {
            if keep(&t) {
                f(&t);
            }
        }
    }
}

/// The tokens of `content` that can be a task's term, each once, sorted.
pub fn index_tokens(content: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for_each_index_token(content, |t| {
        out.insert(t.to_string());
    });
    out
}

/// One representation to index.
#[derive(Debug, Clone)]
pub struct RepText<'a> {
    /// The `representations` file holding it: its position among the files the index write
    /// covers (the rows of its `index_files` file).
    pub file: usize,
    pub object_id: &'a str,
    pub revision: i64,
    pub name: &'a str,
    pub media_type: &'a str,
    pub content: Option<&'a str>,
    pub content_ref: Option<&'a str>,
    pub content_hash: Option<&'a str>,
    pub tokens: Option<i64>,
    /// Its own roles (`None`: the file has no `roles` column).
    pub roles: Option<Vec<&'a str>>,
    /// Whether its effective roles (its own and its revision's) include `secret`.
    pub secret: bool,
}

/// An `index_reps` row: the representation's columns but its content, and what the index
/// adds (`chars`, `indexed`).
#[derive(Debug)]
struct RepRow {
    file: i64,
    object_id: String,
    revision: i64,
    name: String,
    media_type: String,
    content_ref: Option<String>,
    content_hash: Option<String>,
    tokens: Option<i64>,
    roles: Option<Vec<String>>,
    chars: Option<i64>,
    o200k: Option<i64>,
    indexed: bool,
}

/// The rows of `index_terms` and `index_reps` for some representations, built in memory:
/// per term the ordinals of the representations containing it, in `index_reps` order.
#[derive(Debug, Default)]
pub struct IndexRows {
    postings: HashMap<String, Vec<i64>>,
    /// Postings held (term, representation pairs).
    held: usize,
    reps: Vec<RepRow>,
    /// The ordinal of the next representation added (counts on across [`take_batches`]).
    ///
    /// [`take_batches`]: IndexRows::take_batches
    next: i64,
}

impl IndexRows {
    /// Adds `rep`: its terms when its content is indexable, and its `index_reps` row; returns
    /// how many (term, representation) pairs it added, `None` when its content is not
    /// indexable.
    pub fn add(&mut self, rep: RepText<'_>) -> Option<usize> {
        let ordinal = self.next;
        self.next += 1;
        let indexable = packable(rep.media_type) && !rep.secret;
        let content = rep.content.filter(|_| indexable);
        let mut added = 0;
        if let Some(text) = content {
            for_each_index_token(text, |term| {
                let list = match self.postings.get_mut(term) {
                    Some(list) => list,
                    None => self.postings.entry(term.to_string()).or_default(),
                };
                // Ordinals only grow: a repeated token of this representation is the last.
                if list.last() != Some(&ordinal) {
                    list.push(ordinal);
                    added += 1;
                }
            });
        }
        self.held += added;
        self.reps.push(RepRow {
            file: rep.file as i64,
            object_id: rep.object_id.to_string(),
            revision: rep.revision,
            name: rep.name.to_string(),
            media_type: rep.media_type.to_string(),
            content_ref: rep.content_ref.map(str::to_string),
            content_hash: rep.content_hash.map(str::to_string),
            tokens: rep.tokens,
            roles: rep
                .roles
                .as_ref()
                .map(|r| r.iter().map(|x| x.to_string()).collect()),
            chars: content.map(|t| t.chars().count() as i64),
            o200k: content.map(|t| Estimator::O200k.count(t)),
            indexed: content.is_some(),
        });
        content.map(|_| added)
    }

    /// How many (term, representation) pairs are held.
    pub fn held(&self) -> usize {
        self.held
    }

    /// The `index_terms` batch (one row per term, sorted, with its postings) and the
    /// `index_reps` batch of the representations added since the last call; the rows held
    /// are taken.
    pub fn take_batches(&mut self) -> Result<(RecordBatch, RecordBatch)> {
        let mut terms: Vec<(String, Vec<i64>)> =
            std::mem::take(&mut self.postings).into_iter().collect();
        terms.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        self.held = 0;
        let first = self.next - self.reps.len() as i64;
        let reps = std::mem::take(&mut self.reps);
        let strs = |v: Vec<&str>| Arc::new(StringArray::from(v)) as ArrayRef;
        let opt_strs = |v: Vec<Option<&str>>| Arc::new(StringArray::from(v)) as ArrayRef;
        let postings = ListArray::from_iter_primitive::<Int64Type, _, _>(
            terms
                .iter()
                .map(|(_, list)| Some(list.iter().map(|&o| Some(o)))),
        );
        let t = RecordBatch::try_new(
            index_terms_schema(),
            vec![
                strs(terms.iter().map(|r| r.0.as_str()).collect()),
                Arc::new(postings),
            ],
        )?;
        let r = RecordBatch::try_new(
            index_reps_schema(),
            vec![
                Arc::new(Int64Array::from_iter_values(
                    first..first + reps.len() as i64,
                )),
                Arc::new(Int64Array::from_iter_values(reps.iter().map(|r| r.file))),
                strs(reps.iter().map(|r| r.object_id.as_str()).collect()),
                Arc::new(Int64Array::from_iter_values(
                    reps.iter().map(|r| r.revision),
                )),
                strs(reps.iter().map(|r| r.name.as_str()).collect()),
                strs(reps.iter().map(|r| r.media_type.as_str()).collect()),
                opt_strs(reps.iter().map(|r| r.content_ref.as_deref()).collect()),
                opt_strs(reps.iter().map(|r| r.content_hash.as_deref()).collect()),
                Arc::new(Int64Array::from(
                    reps.iter().map(|r| r.tokens).collect::<Vec<_>>(),
                )),
                Arc::new(roles_list(reps.iter().map(|r| r.roles.as_deref()))),
                Arc::new(Int64Array::from_iter_values(reps.iter().map(|r| {
                    if r.name == SUMMARY {
                        SUMMARY_WEIGHT
                    } else {
                        TEXT_WEIGHT
                    }
                }))),
                Arc::new(Int64Array::from(
                    reps.iter().map(|r| r.chars).collect::<Vec<_>>(),
                )),
                Arc::new(Int64Array::from(
                    reps.iter().map(|r| r.o200k).collect::<Vec<_>>(),
                )),
                Arc::new(BooleanArray::from(
                    reps.iter().map(|r| r.indexed).collect::<Vec<_>>(),
                )),
            ],
        )?;
        Ok((t, r))
    }
}

/// A list of roles per row (NULL where `None`).
fn roles_list<'a>(rows: impl Iterator<Item = Option<&'a [String]>>) -> ListArray {
    let mut b =
        datafusion::arrow::array::ListBuilder::new(datafusion::arrow::array::StringBuilder::new());
    for roles in rows {
        match roles {
            Some(roles) => {
                for r in roles {
                    b.values().append_value(r);
                }
                b.append(true);
            }
            None => b.append(false),
        }
    }
    b.finish()
}

/// A `representations` file as `index_files` records it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CoveredFile {
    /// The location relative to the root (`representations/…`).
    pub file: String,
    pub size: u64,
    pub version: Option<String>,
}

impl CoveredFile {
    /// Whether this `index_files` entry covers the file `now` (as listed now): the same file
    /// and size, and the same version, except for a file signalql wrote under a commit
    /// (`ingest-<id>.parquet`), which is never rewritten: its name and size name it, so a
    /// copy of the dataset (whose files get new modification times or ETags) stays covered.
    pub fn covers(&self, now: &CoveredFile) -> bool {
        let name = self.file.rsplit('/').next().unwrap_or(&self.file);
        self.file == now.file
            && self.size == now.size
            && (self.version == now.version || crate::commit::ingest_id(name).is_some())
    }

    pub fn of(root: &Root, listed: &ListedFile) -> CoveredFile {
        CoveredFile {
            file: root.relative(&listed.location),
            size: listed.size,
            version: listed.version.clone(),
        }
    }
}

/// The `index_files` batch for `files`.
pub fn files_batch(files: &[CoveredFile]) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(
        index_files_schema(),
        vec![
            Arc::new(StringArray::from(
                files.iter().map(|f| f.file.as_str()).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from_iter_values(
                files.iter().map(|f| f.size as i64),
            )),
            Arc::new(StringArray::from(
                files
                    .iter()
                    .map(|f| f.version.as_deref())
                    .collect::<Vec<_>>(),
            )),
        ],
    )?)
}

/// Postings held in memory before the terms are sorted and written as one run.
const FLUSH_POSTINGS: usize = 32 * 1024 * 1024;

/// Rows (terms) per row group of `index_terms`: the unit a term lookup reads (with the page
/// index within it).
const TERM_ROW_GROUP_ROWS: usize = 16 * 1024;

/// The three index files of one ingest, written as representations are added: term rows are
/// sorted and written in runs of at most [`FLUSH_POSTINGS`] postings.
pub struct IndexWriter {
    terms: NewParquet,
    reps: NewParquet,
    files: NewParquet,
    rows: IndexRows,
    /// Representations added, those whose content was indexed, and their postings.
    representations: usize,
    indexed: usize,
    postings: usize,
}

impl IndexWriter {
    /// The writers of `ROOT/index_*/<stem>.parquet`.
    pub fn new(root: &Root, stem: &str) -> Result<IndexWriter> {
        let terms_props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
            .set_max_row_group_row_count(Some(TERM_ROW_GROUP_ROWS))
            .set_statistics_enabled(EnabledStatistics::Page)
            .build();
        Ok(IndexWriter {
            terms: NewParquet::new(root, INDEX_TERMS, stem, index_terms_schema(), terms_props)?,
            reps: NewParquet::new(
                root,
                INDEX_REPS,
                stem,
                index_reps_schema(),
                writer_properties(&index_reps_schema()),
            )?,
            files: NewParquet::new(
                root,
                INDEX_FILES,
                stem,
                index_files_schema(),
                writer_properties(&index_files_schema()),
            )?,
            rows: IndexRows::default(),
            representations: 0,
            indexed: 0,
            postings: 0,
        })
    }

    /// Adds one representation.
    pub fn add(&mut self, rep: RepText<'_>) -> Result<()> {
        self.representations += 1;
        if let Some(postings) = self.rows.add(rep) {
            self.indexed += 1;
            self.postings += postings;
        }
        if self.rows.held() >= FLUSH_POSTINGS {
            self.flush()?;
        }
        Ok(())
    }

    /// Representations added so far, those whose content was indexed, and their (term,
    /// representation) pairs.
    pub fn counts(&self) -> (usize, usize, usize) {
        (self.representations, self.indexed, self.postings)
    }

    fn flush(&mut self) -> Result<()> {
        let (terms, reps) = self.rows.take_batches()?;
        self.terms.write(&terms)?;
        self.reps.write(&reps)
    }

    /// Writes what is held and `files` as the files covered, finishes the three files and
    /// records them in `ingest` (which the caller commits).
    pub fn finish(
        mut self,
        ingest: &mut Ingest,
        files: &[CoveredFile],
    ) -> Result<Vec<std::path::PathBuf>> {
        self.flush()?;
        self.files.write(&files_batch(files)?)?;
        let mut written = Vec::new();
        for (table, file) in [
            (INDEX_TERMS, self.terms),
            (INDEX_REPS, self.reps),
            (INDEX_FILES, self.files),
        ] {
            written.push(file.finish()?);
            ingest.wrote(table);
        }
        Ok(written)
    }
}

/// The `representations` files the committed index covers, as `index_files` names them.
pub fn covered_files(root: &Root, snapshot: &Snapshot) -> Result<HashSet<CoveredFile>> {
    let mut covered = HashSet::new();
    scan(root, snapshot, INDEX_FILES, FILES_COLUMNS, |b| {
        covered.extend(covered_rows(b));
        Ok(())
    })?;
    Ok(covered)
}

/// The `representations` files one index write covers: the rows of its `index_files` file at
/// `location`.
pub fn covered_by(root: &Root, location: &str) -> Result<Vec<CoveredFile>> {
    let mut covered = Vec::new();
    scan_file(root, INDEX_FILES, location, FILES_COLUMNS, |b| {
        covered.extend(covered_rows(b));
        Ok(())
    })?;
    Ok(covered)
}

const FILES_COLUMNS: &[&str] = &["file", "size", "version"];

fn covered_rows(b: &RecordBatch) -> Vec<CoveredFile> {
    let files = b.column(0).as_string::<i32>();
    let sizes = b.column(1).as_primitive::<Int64Type>();
    let versions = b.column(2).as_string::<i32>();
    (0..b.num_rows())
        .map(|i| CoveredFile {
            file: files.value(i).to_string(),
            size: sizes.value(i) as u64,
            version: (!versions.is_null(i)).then(|| versions.value(i).to_string()),
        })
        .collect()
}

/// The location of the file of the index table `table` written together with the index file
/// at `location`: the file of the same name in the sibling folder.
pub fn sibling(location: &str, table: &str) -> String {
    let (dir, name) = location.rsplit_once('/').unwrap_or(("", location));
    match dir.rsplit_once('/') {
        Some((parent, _)) => format!("{parent}/{table}/{name}"),
        None => format!("{table}/{name}"),
    }
}

/// Calls `f(term, rep)` for every representation ordinal listed under one of `terms` (`term`
/// is its position in `terms`) in the `index_terms` file at `location`. Only the row groups
/// whose term statistics can hold one of the terms are read, the `term` column first; then
/// only the matching rows' postings (the page index lets the reader skip the rest).
pub fn postings(
    root: &Root,
    location: &str,
    terms: &[String],
    f: impl FnMut(usize, i64),
) -> Result<()> {
    if terms.is_empty() {
        return Ok(());
    }
    match root.local() {
        Some(_) => postings_in(
            || std::fs::File::open(location).map_err(|e| CatalogError::io(location, e)),
            location,
            terms,
            f,
        ),
        None => {
            let bytes = root.read_location(location)?;
            postings_in(|| Ok(bytes.clone()), location, terms, f)
        }
    }
}

fn postings_in<R: datafusion::parquet::file::reader::ChunkReader + 'static>(
    open: impl Fn() -> Result<R>,
    location: &str,
    terms: &[String],
    mut f: impl FnMut(usize, i64),
) -> Result<()> {
    use datafusion::parquet::arrow::ProjectionMask;
    use datafusion::parquet::arrow::arrow_reader::{
        ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection,
        RowSelector,
    };
    let in_file = |e: &dyn std::fmt::Display| CatalogError::Invalid(format!("{location}: {e}"));
    let options = ArrowReaderOptions::new()
        .with_page_index_policy(datafusion::parquet::file::metadata::PageIndexPolicy::Optional);
    let meta = ArrowReaderMetadata::load(&open()?, options).map_err(|e| in_file(&e))?;
    let schema = meta.parquet_schema();
    let leaf = |name: &str| {
        (0..schema.num_columns())
            .find(|&i| schema.column(i).path().parts()[0] == name)
            .ok_or_else(|| in_file(&format!("no column `{name}`")))
    };
    let term_leaf = leaf("term")?;
    let term_mask = ProjectionMask::leaves(schema, [term_leaf]);
    let reps_mask = ProjectionMask::leaves(schema, [leaf("reps")?]);
    let wanted: HashMap<&[u8], usize> = terms
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_bytes(), i))
        .collect();
    // Row groups whose [min, max] term range holds a wanted term (all, without statistics).
    let groups: Vec<usize> = meta
        .metadata()
        .row_groups()
        .iter()
        .enumerate()
        .filter(|(_, g)| {
            let st = g.column(term_leaf).statistics();
            let (lo, hi) = match st.map(|s| (s.min_bytes_opt(), s.max_bytes_opt())) {
                Some((Some(lo), Some(hi))) => (lo, hi),
                _ => return true,
            };
            wanted.keys().any(|t| *t >= lo && *t <= hi)
        })
        .map(|(i, _)| i)
        .collect();
    if groups.is_empty() {
        return Ok(());
    }
    // The matching rows of those row groups, and which term each one is.
    let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(open()?, meta.clone())
        .with_row_groups(groups.clone())
        .with_projection(term_mask)
        .build()
        .map_err(|e| in_file(&e))?;
    let mut selectors: Vec<RowSelector> = Vec::new();
    let mut matched: Vec<usize> = Vec::new();
    let mut push = |select: bool| match selectors.last_mut() {
        Some(last) if last.skip != select => last.row_count += 1,
        _ => selectors.push(if select {
            RowSelector::select(1)
        } else {
            RowSelector::skip(1)
        }),
    };
    for batch in reader {
        let batch = batch.map_err(|e| in_file(&e))?;
        let col = cast(batch.column(0), &DataType::Binary)?;
        let col = col.as_binary::<i32>();
        for i in 0..col.len() {
            match (!col.is_null(i))
                .then(|| wanted.get(col.value(i)))
                .flatten()
            {
                Some(&t) => {
                    matched.push(t);
                    push(true);
                }
                None => push(false),
            }
        }
    }
    if matched.is_empty() {
        return Ok(());
    }
    let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(open()?, meta)
        .with_row_groups(groups)
        .with_row_selection(RowSelection::from(selectors))
        .with_projection(reps_mask)
        .build()
        .map_err(|e| in_file(&e))?;
    let mut next = matched.into_iter();
    for batch in reader {
        let batch = batch.map_err(|e| in_file(&e))?;
        let lists = batch.column(0).as_list::<i32>();
        let values = cast(lists.values(), &DataType::Int64)?;
        let values = values.as_primitive::<Int64Type>();
        let offsets = lists.value_offsets();
        for i in 0..lists.len() {
            let term = next
                .next()
                .ok_or_else(|| in_file(&"more posting lists than terms"))?;
            for j in offsets[i] as usize..offsets[i + 1] as usize {
                if values.is_valid(j) {
                    f(term, values.value(j));
                }
            }
        }
    }
    Ok(())
}

/// What `signalql index` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexSummary {
    /// `representations` files indexed by this run.
    pub files: usize,
    /// Files left uncovered because a representation's revision is not visible yet.
    pub waiting: usize,
    /// Files the index already covered.
    pub already: usize,
    /// Representations read, and those whose terms were indexed.
    pub representations: usize,
    pub indexed: usize,
    /// (term, representation) pairs written.
    pub postings: usize,
}

/// `signalql index`: indexes every `representations` file of `root` the index does not cover
/// yet (files other tools wrote included) and commits the index of them in sequence with the
/// object ingests, all or nothing.
pub fn index_root(root: &Root) -> Result<IndexSummary> {
    let mut ingest = Ingest::begin(root)?;
    ingest.commit_in_sequence(|snapshot, ingest| index_uncovered(root, snapshot, ingest))
}

/// Writes the index of the `representations` files visible in `snapshot` that it does not
/// cover yet, as `ingest`'s files (nothing when there are none).
fn index_uncovered(root: &Root, snapshot: &Snapshot, ingest: &mut Ingest) -> Result<IndexSummary> {
    let covered = covered_files(root, snapshot)?;
    let mut summary = IndexSummary::default();
    let secret_revisions = revision_secrets(root, snapshot)?;
    let mut writer: Option<IndexWriter> = None;
    let mut files = Vec::new();
    for listed in root.parquet_files(REPRESENTATIONS)?.unwrap_or_default() {
        if !snapshot.visible(&listed.location) || listed.broken.is_some() {
            continue;
        }
        let file = CoveredFile::of(root, &listed);
        if covered.iter().any(|c| c.covers(&file)) {
            summary.already += 1;
            continue;
        }
        // A file whose every representation's revision is visible, or none of it.
        let mut complete = true;
        scan_file(
            root,
            REPRESENTATIONS,
            &listed.location,
            &["object_id", "revision"],
            |b| {
                let ids = b.column(0).as_string::<i32>();
                let revs = b.column(1).as_primitive::<Int64Type>();
                complete &= (0..b.num_rows()).all(|i| {
                    secret_revisions.contains_key(&(ids.value(i).to_string(), revs.value(i)))
                });
                Ok(())
            },
        )?;
        if !complete {
            summary.waiting += 1;
            continue;
        }
        let w = match writer.as_mut() {
            Some(w) => w,
            None => writer.insert(IndexWriter::new(root, &ingest.stem())?),
        };
        scan_file(root, REPRESENTATIONS, &listed.location, REP_COLUMNS, |b| {
            let cols = RepColumns::of(b)?;
            for i in 0..b.num_rows() {
                let (id, rev) = (cols.ids.value(i), cols.revs.value(i));
                let rev_secret = secret_revisions
                    .get(&(id.to_string(), rev))
                    .copied()
                    .unwrap_or(true);
                let roles = cols.roles.as_ref().and_then(|l| {
                    (!l.is_null(i)).then(|| {
                        let v = l.value(i);
                        let v = v.as_string::<i32>();
                        v.iter().flatten().map(str::to_string).collect::<Vec<_>>()
                    })
                });
                w.add(RepText {
                    file: files.len(),
                    object_id: id,
                    revision: rev,
                    name: cols.names.value(i),
                    media_type: cols.medias.value(i),
                    content: (!cols.contents.is_null(i)).then(|| cols.contents.value(i)),
                    content_ref: cols
                        .refs
                        .as_ref()
                        .and_then(|a| (!a.is_null(i)).then(|| a.value(i))),
                    content_hash: (!cols.hashes.is_null(i)).then(|| cols.hashes.value(i)),
                    tokens: cols
                        .tokens
                        .as_ref()
                        .and_then(|a| (!a.is_null(i)).then(|| a.value(i))),
                    roles: roles
                        .as_ref()
                        .map(|r| r.iter().map(String::as_str).collect()),
                    secret: rev_secret || cols.secret_role(i),
                })?;
            }
            Ok(())
        })?;
        summary.files += 1;
        files.push(file);
    }
    if let Some(w) = writer {
        (summary.representations, summary.indexed, summary.postings) = w.counts();
        w.finish(ingest, &files)?;
    }
    Ok(summary)
}

/// The columns of `representations` the index reads.
const REP_COLUMNS: &[&str] = &[
    "object_id",
    "revision",
    "name",
    "media_type",
    "content",
    "content_hash",
    "?content_ref",
    "?tokens",
    OPTIONAL_ROLES,
];

/// A representation's own roles: a column other tools may leave out (then none; `?`: see
/// [`scan`]).
const OPTIONAL_ROLES: &str = "?roles";

/// Those columns of one batch, in the types [`scan`] reads them as (other tools' Utf8View,
/// LargeUtf8, Int32 … cast there; a column a file lacks is NULL).
struct RepColumns {
    ids: StringArray,
    revs: Int64Array,
    names: StringArray,
    medias: StringArray,
    contents: datafusion::arrow::array::LargeStringArray,
    hashes: StringArray,
    refs: Option<StringArray>,
    tokens: Option<Int64Array>,
    roles: Option<ListArray>,
}

impl RepColumns {
    fn of(b: &RecordBatch) -> Result<RepColumns> {
        let col = |name: &str| {
            b.column_by_name(name)
                .ok_or_else(|| CatalogError::Invalid(format!("no column `{name}`")))
        };
        let s = |name: &str| -> Result<StringArray> { Ok(col(name)?.as_string::<i32>().clone()) };
        Ok(RepColumns {
            ids: s("object_id")?,
            revs: col("revision")?.as_primitive::<Int64Type>().clone(),
            names: s("name")?,
            medias: s("media_type")?,
            contents: col("content")?.as_string::<i64>().clone(),
            hashes: s("content_hash")?,
            refs: b
                .column_by_name("content_ref")
                .map(|c| c.as_string::<i32>().clone()),
            tokens: b
                .column_by_name("tokens")
                .map(|c| c.as_primitive::<Int64Type>().clone()),
            roles: b
                .column_by_name("roles")
                .map(|c| c.as_list::<i32>().clone()),
        })
    }

    /// Whether row `i`'s own roles include `secret`.
    fn secret_role(&self, i: usize) -> bool {
        self.roles.as_ref().is_some_and(|l| has_secret(l, i))
    }
}

fn has_secret(roles: &ListArray, i: usize) -> bool {
    if roles.is_null(i) {
        return false;
    }
    let v = roles.value(i);
    let v = v.as_string::<i32>();
    v.iter().any(|r| r == Some("secret"))
}

/// Per visible revision (`object_id`, `revision`): whether its roles include `secret`.
fn revision_secrets(root: &Root, snapshot: &Snapshot) -> Result<HashMap<(String, i64), bool>> {
    let mut out: HashMap<(String, i64), bool> = HashMap::new();
    scan(
        root,
        snapshot,
        REVISIONS,
        &["object_id", "revision", "roles"],
        |b| {
            let ids = b.column(0).as_string::<i32>();
            let revs = b.column(1).as_primitive::<Int64Type>();
            let roles = b.column(2).as_list::<i32>();
            for i in 0..b.num_rows() {
                // A revision written twice is identical; were it not, secret wins.
                let secret = has_secret(roles, i);
                *out.entry((ids.value(i).to_string(), revs.value(i)))
                    .or_insert(false) |= secret;
            }
            Ok(())
        },
    )?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_that_can_be_terms_each_once() {
        let got: Vec<String> =
            index_tokens("The Funnel, the FUNNEL and a 2-step Straße İstanbul x_y ab")
                .into_iter()
                .collect();
        // "the", "and", "a" are stopwords; "2", "x", "y" are shorter than two characters;
        // `_` separates; full lower-casing turns İ into i and U+0307 (a combining mark, not a
        // letter), which separates "i" (too short) from "stanbul".
        assert_eq!(got, vec!["ab", "funnel", "stanbul", "step", "straße"]);
    }

    #[test]
    fn secret_and_binary_content_is_not_tokenised() {
        let mut rows = IndexRows::default();
        let rep = |name, media, content, secret| RepText {
            file: 0,
            object_id: "o1",
            revision: 1,
            name,
            media_type: media,
            content: Some(content),
            content_ref: None,
            content_hash: Some("h"),
            tokens: None,
            roles: Some(vec!["data"]),
            secret,
        };
        rows.add(rep(
            "text",
            "text/markdown",
            "Pricing strategy; pricing",
            false,
        ));
        rows.add(rep("summary", "text/plain", "pricing", false));
        rows.add(rep("key", "text/plain", "password hunter2", true));
        rows.add(rep("blob", "image/png", "notatoken", false));
        let (terms, reps) = rows.take_batches().unwrap();
        let term = terms.column(0).as_string::<i32>();
        let lists = terms.column(1).as_list::<i32>();
        let got: Vec<(&str, Vec<i64>)> = (0..terms.num_rows())
            .map(|i| {
                let l = lists.value(i);
                (
                    term.value(i),
                    l.as_primitive::<Int64Type>().values().to_vec(),
                )
            })
            .collect();
        assert_eq!(got, vec![("pricing", vec![0, 1]), ("strategy", vec![0])]);
        let col = |n: &str| {
            reps.column_by_name(n)
                .unwrap()
                .as_primitive::<Int64Type>()
                .clone()
        };
        let (ordinal, weight, chars) = (col("rep"), col("weight"), col("chars"));
        let indexed = reps.column_by_name("indexed").unwrap().as_boolean();
        let got: Vec<(i64, i64, Option<i64>, bool)> = (0..4)
            .map(|i| {
                let c = chars.is_valid(i).then(|| chars.value(i));
                (ordinal.value(i), weight.value(i), c, indexed.value(i))
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (0, 1, Some(25), true),
                (1, 2, Some(7), true),
                (2, 1, None, false),
                (3, 1, None, false)
            ]
        );
        // o200k counts of the indexable contents, as tiktoken counts them; none for the rest.
        let tiktoken = tiktoken_rs::o200k_base().unwrap();
        let o200k = col("o200k");
        let counted: Vec<Option<i64>> = (0..4)
            .map(|i| o200k.is_valid(i).then(|| o200k.value(i)))
            .collect();
        let want = |t: &str| Some(tiktoken.encode_ordinary(t).len() as i64);
        assert_eq!(
            counted,
            vec![
                want("Pricing strategy; pricing"),
                want("pricing"),
                None,
                None
            ]
        );
        // Ordinals count on across batches of one file.
        rows.add(rep("text", "text/plain", "more", false));
        let (terms, reps) = rows.take_batches().unwrap();
        assert_eq!(reps.column(0).as_primitive::<Int64Type>().value(0), 4);
        assert_eq!(
            terms
                .column(1)
                .as_list::<i32>()
                .value(0)
                .as_primitive::<Int64Type>()
                .value(0),
            4
        );
    }
}
