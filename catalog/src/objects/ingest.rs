//! `signalql ingest objects PATH…`: files into the object tables (docs/objects.md).
//!
//! Each file is an object whose id is derived from `(project, source path)`; its content is a
//! revision with a `text` representation (the content) and a `summary` (the first paragraph).
//! A file whose content changed since the last ingest gets a new revision; an unchanged file
//! adds nothing; a file gone from an ingested folder is tombstoned. Every run appends at most
//! one new Parquet file per table, all of them made visible at once by the run's commit record
//! ([`crate::commit`]): a reader sees the whole run or none of it, and a run killed before
//! its commit leaves files that no reader reads and the next ingest removes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use datafusion::arrow::array::{
    ArrayRef, Int64Array, LargeStringArray, ListBuilder, RecordBatch, StringArray, StringBuilder,
    TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::SchemaRef;
use sha2::{Digest, Sha256};

use super::index::{CoveredFile, IndexWriter, RepText};
use super::text::{file_type, looks_secret, markdown_links, render_messages, summary, title};
use super::{
    KnownObject, LINKS, OBJECTS, ORIGINS, REPRESENTATIONS, REVISIONS, ROLES, TRUST_LEVELS,
    known_objects, links_schema, objects_schema, representations_schema, revisions_schema,
};
use crate::commit::Ingest;
use crate::error::{CatalogError, Result};
use crate::storage::Root;
use crate::write::put_parquet_new;

/// Options of an object ingest.
#[derive(Debug, Clone)]
pub struct ObjectIngestOptions {
    /// The project label of every object ingested (`--project`).
    pub project: Option<String>,
    /// Trust of the new revisions (`--trust`, default `unknown`).
    pub trust: String,
    /// Origin of the new revisions (`--origin`, default `import`).
    pub origin: String,
    /// Roles of the new revisions (`--role`, repeated; default `data`).
    pub roles: Vec<String>,
    /// Give files that look like secrets the `secret` role (default on).
    pub detect_secrets: bool,
    /// The ingest time: `created_at` of new revisions and objects.
    pub now: DateTime<Utc>,
}

impl Default for ObjectIngestOptions {
    fn default() -> Self {
        ObjectIngestOptions {
            project: None,
            trust: "unknown".into(),
            origin: "import".into(),
            roles: vec!["data".into()],
            detect_secrets: true,
            now: Utc::now(),
        }
    }
}

/// What an object ingest did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectIngestSummary {
    pub files_seen: usize,
    /// New objects.
    pub added: usize,
    /// New revisions of known objects.
    pub revised: usize,
    pub unchanged: usize,
    /// Objects made live again (a deleted file that came back unchanged).
    pub restored: usize,
    pub tombstoned: usize,
    /// Objects given the secret role by detection.
    pub secrets: usize,
    /// Files not ingested, with why.
    pub skipped: Vec<(PathBuf, String)>,
    /// The Parquet files written.
    pub written: Vec<PathBuf>,
}

/// The object id of `source_path` in `project`: `o_` and 24 hex digits of SHA-256.
pub fn object_id(project: Option<&str>, source_path: &str) -> String {
    let mut h = Sha256::new();
    h.update(project.unwrap_or("").as_bytes());
    h.update([0u8]);
    h.update(source_path.as_bytes());
    format!("o_{}", &hex::encode(h.finalize())[..24])
}

/// SHA-256 of `text`, lower-case hex.
pub fn content_hash(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

fn check(value: &str, allowed: &[&str], what: &str) -> Result<()> {
    if allowed.contains(&value) {
        Ok(())
    } else {
        Err(CatalogError::Invalid(format!(
            "unknown {what} `{value}`; expected one of {}",
            allowed.join(", ")
        )))
    }
}

/// One input file, as found by the walk.
struct Input {
    path: PathBuf,
    /// Path relative to the parent of the ingested folder, `/`-separated.
    source_path: String,
}

/// The files under `paths`: a folder recursively (hidden folders such as `.git` skipped,
/// hidden files kept so `.env` is seen), a file as itself. Returns the files and, per folder,
/// the source-path prefix it covers (for tombstones).
fn walk(paths: &[PathBuf]) -> Result<(Vec<Input>, Vec<String>)> {
    let mut inputs = Vec::new();
    let mut scopes = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| CatalogError::io(p, e))?;
        let base = p
            .canonicalize()
            .map_err(|e| CatalogError::io(p, e))?
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if meta.is_file() {
            inputs.push(Input {
                path: p.clone(),
                source_path: base,
            });
            continue;
        }
        scopes.push(format!("{base}/"));
        let mut stack = vec![p.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).map_err(|e| CatalogError::io(&dir, e))? {
                let entry = entry.map_err(|e| CatalogError::io(&dir, e))?;
                let path = entry.path();
                let name = entry.file_name().to_string_lossy().into_owned();
                let ft = entry.file_type().map_err(|e| CatalogError::io(&path, e))?;
                if ft.is_dir() {
                    if !name.starts_with('.') {
                        stack.push(path);
                    }
                } else if ft.is_file() {
                    let rel = path.strip_prefix(p).unwrap_or(&path);
                    inputs.push(Input {
                        source_path: format!("{base}/{}", slash_path(rel)),
                        path,
                    });
                }
            }
        }
    }
    inputs.sort_by(|a, b| a.source_path.cmp(&b.source_path));
    inputs.dedup_by(|a, b| a.source_path == b.source_path);
    Ok((inputs, scopes))
}

fn slash_path(p: &Path) -> String {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// `target` (a relative link in the file at `from`) as a source path, `..` resolved.
fn resolve_link(from: &str, target: &str) -> Option<String> {
    let mut parts: Vec<&str> = from.split('/').collect();
    parts.pop();
    for seg in target.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s),
        }
    }
    Some(parts.join("/"))
}

/// Rows collected for one run.
#[derive(Default)]
struct Rows {
    objects: Vec<(String, String, String, i64, Option<i64>, String)>, // id, kind, title, created, tombstoned, source
    revisions: Vec<(String, i64, Vec<String>)>,
    reps: Vec<(String, i64, &'static str, String, String, String)>, // id, rev, name, media, content, hash
    links: Vec<(String, i64, String)>,                              // id, rev, target id
}

/// Ingests the files under `paths` into the object tables of the dataset at `root`.
pub fn ingest_objects(
    root: impl Into<Root>,
    paths: &[PathBuf],
    opts: &ObjectIngestOptions,
) -> Result<ObjectIngestSummary> {
    ingest_objects_with_progress(root, paths, opts, None)
}

/// [`ingest_objects`] with a progress bar: its length is the number of files found, and it
/// advances as each is read; its message then says the tables (and the text index) are being
/// written.
pub fn ingest_objects_with_progress(
    root: impl Into<Root>,
    paths: &[PathBuf],
    opts: &ObjectIngestOptions,
    progress: Option<&indicatif::ProgressBar>,
) -> Result<ObjectIngestSummary> {
    check(&opts.trust, &TRUST_LEVELS, "trust level")?;
    check(&opts.origin, &ORIGINS, "origin")?;
    for r in &opts.roles {
        check(r, &ROLES, "role")?;
    }
    if paths.is_empty() {
        return Err(CatalogError::Invalid(
            "no files or folders to ingest".into(),
        ));
    }
    let project = opts.project.as_deref();
    let now = opts.now.timestamp_micros();
    let (inputs, scopes) = walk(paths)?;
    let root: Root = root.into();
    // One ingest: every table's file is visible from its commit on, all or none. Beginning it
    // cleans up what interrupted runs left, even when this run turns out to add nothing (its
    // commit then records nothing).
    let mut ingest = Ingest::begin(&root)?;
    let mut base = ObjectIngestSummary {
        files_seen: inputs.len(),
        ..Default::default()
    };

    // Read every file first.
    if let Some(pb) = progress {
        pb.set_length(inputs.len() as u64);
        pb.set_message("read");
    }
    let mut parsed = Vec::new();
    for input in inputs {
        if let Some(pb) = progress {
            pb.inc(1);
        }
        let Some(ft) = file_type(&input.path) else {
            base.skipped
                .push((input.path, "unsupported file type".into()));
            continue;
        };
        let bytes = std::fs::read(&input.path).map_err(|e| CatalogError::io(&input.path, e))?;
        let Ok(raw) = String::from_utf8(bytes) else {
            base.skipped.push((input.path, "not UTF-8 text".into()));
            continue;
        };
        let secret = opts.detect_secrets && looks_secret(&input.path, &raw);
        let text = if ft.kind == "messages" {
            render_messages(&raw)
        } else {
            raw
        };
        parsed.push(Parsed {
            id: object_id(project, &input.source_path),
            input,
            kind: ft.kind,
            media_type: ft.media_type,
            text,
            secret,
        });
    }

    // Read the tables, decide what is new, write it, and commit after the position read. A
    // conflict is another object ingest committed in between: this one's files go, and it
    // reads the tables again (crate::commit).
    if let Some(pb) = progress {
        pb.set_message("read; writing the tables and the text index");
    }
    ingest.commit_in_sequence(|snapshot, ingest| {
        let known = known_objects(&root, snapshot)?;
        let mut summary = base.clone();
        let rows = classify(&parsed, &known, &scopes, opts, &mut summary);
        summary.written = write_rows(&root, ingest, &rows, opts, now)?;
        Ok(summary)
    })
}

/// A file read and classified: its object id, kind, media type, text, and secret-ness.
struct Parsed {
    input: Input,
    id: String,
    kind: &'static str,
    media_type: String,
    text: String,
    secret: bool,
}

/// The rows an ingest of `parsed` adds to the tables as `known` holds them, counted in
/// `summary`: new objects and revisions, restored objects, tombstones of files gone from the
/// ingested folders (`scopes`).
fn classify(
    parsed: &[Parsed],
    known: &HashMap<String, KnownObject>,
    scopes: &[String],
    opts: &ObjectIngestOptions,
    summary: &mut ObjectIngestSummary,
) -> Rows {
    let project = opts.project.as_deref();
    let now = opts.now.timestamp_micros();
    let by_source: HashMap<&str, &str> = parsed
        .iter()
        .map(|p| (p.input.source_path.as_str(), p.id.as_str()))
        .collect();

    let mut rows = Rows::default();
    let empty = KnownObject::default();
    for p in parsed {
        let k = known.get(&p.id).unwrap_or(&empty);
        let hash = content_hash(&p.text);
        let file_title = title(&p.input.path, &p.text, &p.media_type);
        let live = k.record.as_ref().is_some_and(|r| r.live);
        let created = k.record.as_ref().map_or(now, |r| r.created_at);
        let same = k
            .latest
            .as_ref()
            .is_some_and(|(_, h)| h.as_deref() == Some(&hash));
        if same {
            if live {
                summary.unchanged += 1;
            } else {
                summary.restored += 1;
                rows.objects.push((
                    p.id.clone(),
                    p.kind.into(),
                    file_title,
                    created,
                    None,
                    p.input.source_path.clone(),
                ));
            }
            continue;
        }
        let rev = k.latest.as_ref().map_or(1, |(r, _)| r + 1);
        if k.latest.is_some() {
            summary.revised += 1;
        } else {
            summary.added += 1;
        }
        let mut roles: Vec<String> = opts.roles.clone();
        if p.secret {
            summary.secrets += 1;
            roles.push("secret".into());
        }
        roles.sort_by_key(|r| ROLES.iter().position(|x| x == r));
        roles.dedup();
        rows.revisions.push((p.id.clone(), rev, roles));
        rows.reps.push((
            p.id.clone(),
            rev,
            "text",
            p.media_type.clone(),
            p.text.clone(),
            hash,
        ));
        if let Some(s) = summary_of(p.kind, &p.text) {
            let h = content_hash(&s);
            rows.reps
                .push((p.id.clone(), rev, "summary", "text/plain".into(), s, h));
        }
        if p.media_type == "text/markdown" {
            let mut targets: Vec<&str> = markdown_links(&p.text)
                .iter()
                .filter_map(|t| resolve_link(&p.input.source_path, t))
                .filter_map(|s| by_source.get(s.as_str()).copied())
                .filter(|t| *t != p.id)
                .collect();
            targets.sort();
            targets.dedup();
            for t in targets {
                rows.links.push((p.id.clone(), rev, t.to_string()));
            }
        }
        let title_changed = k.record.as_ref().is_none_or(|r| r.title != file_title);
        if !live || title_changed {
            rows.objects.push((
                p.id.clone(),
                p.kind.into(),
                file_title,
                created,
                None,
                p.input.source_path.clone(),
            ));
        }
    }

    // Tombstones: live objects of this project under an ingested folder whose file is gone.
    let present: HashSet<&str> = parsed.iter().map(|p| p.id.as_str()).collect();
    let mut gone: BTreeMap<&str, (&str, &str, &str, i64)> = BTreeMap::new();
    for (id, k) in known {
        let Some(r) = &k.record else { continue };
        let Some(src) = r.source_path.as_deref() else {
            continue;
        };
        if r.live
            && r.project.as_deref() == project
            && !present.contains(id.as_str())
            && scopes.iter().any(|s| src.starts_with(s.as_str()))
        {
            gone.insert(id, (r.kind.as_str(), r.title.as_str(), src, r.created_at));
        }
    }
    for (id, (kind, t, src, created)) in gone {
        summary.tombstoned += 1;
        rows.objects.push((
            id.to_string(),
            kind.to_string(),
            t.to_string(),
            created,
            Some(now),
            src.to_string(),
        ));
    }

    rows
}

/// The summary representation's text (none for data, config and message files).
fn summary_of(kind: &str, text: &str) -> Option<String> {
    match kind {
        "document" | "code" => summary(text),
        _ => None,
    }
}

fn roles_array(all: impl Iterator<Item = Vec<String>>) -> ArrayRef {
    let mut b = ListBuilder::new(StringBuilder::new());
    for roles in all {
        for r in roles {
            b.values().append_value(r);
        }
        b.append(true);
    }
    Arc::new(b.finish())
}

/// Writes the non-empty tables as files of `ingest`, representations first and objects last.
fn write_rows(
    root: &Root,
    ingest: &mut Ingest,
    rows: &Rows,
    opts: &ObjectIngestOptions,
    now: i64,
) -> Result<Vec<PathBuf>> {
    let project = opts.project.as_deref();
    let stem = ingest.stem();
    let ts =
        |v: Vec<i64>| Arc::new(TimestampMicrosecondArray::from(v).with_timezone("UTC")) as ArrayRef;
    let strs = |v: Vec<&str>| Arc::new(StringArray::from(v)) as ArrayRef;
    let ints = |v: Vec<i64>| Arc::new(Int64Array::from(v)) as ArrayRef;
    let mut written = Vec::new();
    let mut put = |table: &str, schema: SchemaRef, cols: Vec<ArrayRef>| -> Result<()> {
        let batch = RecordBatch::try_new(schema.clone(), cols)?;
        written.push(put_parquet_new(root, table, &stem, schema, &[batch])?);
        ingest.wrote(table);
        Ok(())
    };
    if !rows.reps.is_empty() {
        let r = &rows.reps;
        let nulls: Vec<Option<&str>> = vec![None; r.len()];
        put(
            REPRESENTATIONS,
            representations_schema(),
            vec![
                strs(r.iter().map(|x| x.0.as_str()).collect()),
                ints(r.iter().map(|x| x.1).collect()),
                strs(r.iter().map(|x| x.2).collect()),
                strs(r.iter().map(|x| x.3.as_str()).collect()),
                Arc::new(LargeStringArray::from(
                    r.iter().map(|x| x.4.as_str()).collect::<Vec<_>>(),
                )),
                Arc::new(StringArray::from(nulls)),
                strs(r.iter().map(|x| x.5.as_str()).collect()),
                Arc::new(Int64Array::from(vec![None::<i64>; r.len()])),
                roles_array(r.iter().map(|_| Vec::new())),
            ],
        )?;
    }
    if !rows.links.is_empty() {
        let l = &rows.links;
        put(
            LINKS,
            links_schema(),
            vec![
                strs(l.iter().map(|x| x.0.as_str()).collect()),
                ints(l.iter().map(|x| x.1).collect()),
                strs(vec!["object"; l.len()]),
                strs(l.iter().map(|x| x.2.as_str()).collect()),
                strs(vec!["links_to"; l.len()]),
            ],
        )?;
    }
    if !rows.revisions.is_empty() {
        let v = &rows.revisions;
        let n = v.len();
        // Origin and trust are the run's options, the same for every revision.
        put(
            REVISIONS,
            revisions_schema(),
            vec![
                strs(v.iter().map(|x| x.0.as_str()).collect()),
                ints(v.iter().map(|x| x.1).collect()),
                ts(vec![now; n]),
                strs(vec![opts.origin.as_str(); n]),
                strs(vec![opts.trust.as_str(); n]),
                strs(vec!["none"; n]),
                roles_array(v.iter().map(|x| x.2.clone())),
                strs(vec!["current"; n]),
            ],
        )?;
    }
    if !rows.objects.is_empty() {
        let o = &rows.objects;
        let n = o.len();
        put(
            OBJECTS,
            objects_schema(),
            vec![
                strs(o.iter().map(|x| x.0.as_str()).collect()),
                Arc::new(StringArray::from(vec![project; n])),
                strs(o.iter().map(|x| x.1.as_str()).collect()),
                strs(o.iter().map(|x| x.2.as_str()).collect()),
                ts(o.iter().map(|x| x.3).collect()),
                Arc::new(
                    TimestampMicrosecondArray::from(o.iter().map(|x| x.4).collect::<Vec<_>>())
                        .with_timezone("UTC"),
                ),
                ts(vec![now; n]),
                strs(o.iter().map(|x| x.5.as_str()).collect()),
            ],
        )?;
    }
    written.extend(write_index(root, ingest, rows, &stem)?);
    Ok(written)
}

/// The text index of the representations this ingest wrote (crate::objects::index), covering
/// its `representations` file, under the same commit. Secret-ness is the new revision's roles
/// (the representations' own are empty).
fn write_index(root: &Root, ingest: &mut Ingest, rows: &Rows, stem: &str) -> Result<Vec<PathBuf>> {
    if rows.reps.is_empty() {
        return Ok(Vec::new());
    }
    let secret: HashMap<(&str, i64), bool> = rows
        .revisions
        .iter()
        .map(|(id, rev, roles)| ((id.as_str(), *rev), roles.iter().any(|r| r == "secret")))
        .collect();
    // Every representation written belongs to a revision written with it; were one not to,
    // the file would be left for `signalql index` rather than indexed without its roles.
    if !rows
        .reps
        .iter()
        .all(|r| secret.contains_key(&(r.0.as_str(), r.1)))
    {
        return Ok(Vec::new());
    }
    let rel = format!("{REPRESENTATIONS}/{stem}.parquet");
    let Some(listed) = root
        .parquet_files(REPRESENTATIONS)?
        .unwrap_or_default()
        .into_iter()
        .find(|f| root.relative(&f.location) == rel)
    else {
        return Err(CatalogError::Invalid(format!(
            "{} was written but is not listed",
            root.display_of(&rel)
        )));
    };
    let mut writer = IndexWriter::new(root, stem)?;
    for r in &rows.reps {
        // As written above: no reference, no stored count, no roles of its own.
        writer.add(RepText {
            file: 0,
            object_id: &r.0,
            revision: r.1,
            name: r.2,
            media_type: &r.3,
            content: Some(&r.4),
            content_ref: None,
            content_hash: Some(&r.5),
            tokens: None,
            roles: Some(Vec::new()),
            secret: secret.get(&(r.0.as_str(), r.1)).copied().unwrap_or(true),
        })?;
    }
    writer.finish(ingest, &[CoveredFile::of(root, &listed)])
}
