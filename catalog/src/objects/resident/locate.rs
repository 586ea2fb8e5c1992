//! The content of packed representations read by locator (DESIGN.md §5 "Scale"; docs/index.md,
//! "Content by locator"): a CONTEXT FOR reads the text of the items it packed only, and reads
//! each as the rows of its file that hold it, without planning a query.
//!
//! Per file of the `representations` table (named by its location and size: signalql never
//! rewrites a file in place) the dataset keeps, once read:
//!
//! - the file's footer with its offset index (where each page lies), and
//! - a hash of each row's key (object id, revision, name) with the row's position, sorted by
//!   hash: 12 bytes a row.
//!
//! A lookup finds each wanted key's rows by hash, then reads those rows only: a row selection
//! per row group, so the reader decompresses the pages holding them (with the offset index;
//! without one, the pages before them in their row group too) and no other.
//!
//! The caller asks only for keys the table holds (the packed items of a generation or plan
//! over these files). So when a key's hash is held by one row of the listed files, that row
//! is the key's, and only its `content` column is read. When several rows hold it (the key
//! written twice, or a collision), their keys are read with the content and compared, and the
//! first file's row in listing order is taken.
//!
//! Only local files are read this way; a file this cannot read (on S3, changed since listed,
//! without the key columns, corrupt) makes the whole lookup answer `None`, and the engine reads
//! by its Parquet plan instead, which reports the problem as for any scan.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::hash::Hasher;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::RecordBatch;
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection,
    RowSelector,
};
use datafusion::parquet::file::metadata::PageIndexPolicy;

use super::columns::{integers, read, strings};
use super::keep::{In, Out, Words};

/// A representation's key: object id, revision, name.
pub type RepKey = (String, i64, String);

const KEY_COLUMNS: [&str; 3] = ["object_id", "revision", "name"];

/// The files read by locator so far, by (location, size) (see the module's documentation).
#[derive(Debug, Default)]
pub struct ContentFiles {
    files: Mutex<HashMap<(String, u64), Arc<Keyed>>>,
    /// What [`adopt_later`](ContentFiles::adopt_later) was given, adopted at the first
    /// lookup (a statement that reads no content never reads these files' footers).
    pending: Mutex<Vec<bytes::Bytes>>,
}

/// A file's footer and its rows' key hashes.
#[derive(Debug)]
struct Keyed {
    metadata: ArrowReaderMetadata,
    /// Key hashes, sorted, with the row (in the file) of each: as a snapshot file kept them,
    /// in its mapping ([`ContentFiles::adopt`]), or as read here.
    hashes: Words<u64>,
    rows: Words<u32>,
}

/// A key's hash: XxHash64 (seed 0) of the id's and name's lengths and bytes and the
/// revision, little-endian. A specified function, so hashes kept in a snapshot file by one
/// build are another's ([`ContentFiles::keep`]).
fn key_hash(id: &str, revision: i64, name: &str) -> u64 {
    let mut h = twox_hash::XxHash64::with_seed(0);
    h.write(&(id.len() as u64).to_le_bytes());
    h.write(id.as_bytes());
    h.write(&revision.to_le_bytes());
    h.write(&(name.len() as u64).to_le_bytes());
    h.write(name.as_bytes());
    h.finish()
}

/// The first bytes of [`ContentFiles::keep`]'s form.
const KEPT: &[u8] = b"signalql-keys-2";

impl ContentFiles {
    /// The non-null content of each of `keys` found in the local Parquet `files` (location,
    /// size: a table's files as listed), as the table's scan reads them; `None` when a file
    /// cannot be read by locator. Files of other listings are forgotten.
    pub fn contents(
        &self,
        files: &[(String, u64)],
        keys: &[RepKey],
    ) -> Option<HashMap<RepKey, String>> {
        let mut out = HashMap::new();
        if keys.is_empty() {
            return Some(out);
        }
        self.adopt_pending();
        let keyed = files
            .iter()
            .map(|(location, size)| self.keyed(location, *size))
            .collect::<Option<Vec<_>>>()?;
        let wanted: HashSet<&RepKey> = keys.iter().collect();
        // Per wanted key, the rows holding its hash, per file.
        let mut found: Vec<Vec<(usize, u32)>> = vec![Vec::new(); keys.len()];
        for (k, (id, revision, name)) in keys.iter().enumerate() {
            let h = key_hash(id, *revision, name);
            for (f, file) in keyed.iter().enumerate() {
                let from = file.hashes.partition_point(|x| x < h);
                let to = file.hashes.partition_point(|x| x <= h);
                found[k].extend(file.rows.range(from..to).map(|r| (f, r)));
            }
        }
        // A key's hash held by one row only: the key is in the table (the caller's contract),
        // so that row holds it, and only its content is read. Else the rows' keys are read
        // with it and compared.
        let mut direct: Vec<Vec<(u32, usize)>> = vec![Vec::new(); files.len()];
        let mut checked: Vec<Vec<u32>> = vec![Vec::new(); files.len()];
        for (k, rows) in found.iter().enumerate() {
            match rows.as_slice() {
                [(f, r)] => direct[*f].push((*r, k)),
                _ => rows.iter().for_each(|(f, r)| checked[*f].push(*r)),
            }
        }
        for (f, (location, size)) in files.iter().enumerate() {
            let metadata = &keyed[f].metadata;
            let rows = &mut direct[f];
            rows.sort_unstable();
            rows.dedup_by_key(|(r, _)| *r);
            if !rows.is_empty() {
                let positions: Vec<u32> = rows.iter().map(|(r, _)| *r).collect();
                let batches = read_rows(location, *size, metadata, &positions, &["content"])?;
                let mut next = rows.iter();
                for b in &batches {
                    let content = strings(b, "content")?;
                    for i in 0..b.num_rows() {
                        let (_, k) = next.next()?;
                        if let Some(text) = content.get(i) {
                            out.insert(keys[*k].clone(), text.to_string());
                        }
                    }
                }
            }
            let rows = &mut checked[f];
            rows.sort_unstable();
            rows.dedup();
            if rows.is_empty() {
                continue;
            }
            let columns = ["object_id", "revision", "name", "content"];
            for b in read_rows(location, *size, metadata, rows, &columns)? {
                let (ids, names, content) = (
                    strings(&b, "object_id")?,
                    strings(&b, "name")?,
                    strings(&b, "content")?,
                );
                let revisions = read(&b, "revision", integers)?;
                for (i, revision) in revisions.into_iter().enumerate() {
                    let (Some(id), Some(revision), Some(name), Some(text)) =
                        (ids.get(i), revision, names.get(i), content.get(i))
                    else {
                        continue;
                    };
                    let key = (id.to_string(), revision, name.to_string());
                    if wanted.contains(&key) {
                        out.entry(key).or_insert_with(|| text.to_string());
                    }
                }
            }
        }
        if let Ok(mut m) = self.files.lock() {
            let listed: HashSet<(&str, u64)> =
                files.iter().map(|(l, s)| (l.as_str(), *s)).collect();
            m.retain(|(l, s), _| listed.contains(&(l.as_str(), *s)));
        }
        Some(out)
    }

    /// The memory the files' footers and key hashes take, approximately.
    pub fn memory_bytes(&self) -> usize {
        let Ok(m) = self.files.lock() else {
            return 0;
        };
        m.values()
            .map(|k| k.hashes.len() * 12 + k.metadata.metadata().memory_size())
            .sum()
    }

    /// The key hashes of `files` (location, size), read now where they are not held, in a
    /// form [`adopt`](Self::adopt) takes back in another process (a snapshot file keeps it):
    /// [`KEPT`], then per file its location, size, hashes and rows, in [`keep`](super::keep)'s
    /// sections. `None` when a file cannot be read by locator.
    pub fn keep(&self, files: &[(String, u64)]) -> Option<Vec<u8>> {
        self.adopt_pending();
        let mut out = Out::default();
        out.bytes(KEPT);
        for (location, size) in files {
            let k = self.keyed(location, *size)?;
            out.bytes(location.as_bytes());
            out.u64s([*size]);
            out.u64s(k.hashes.iter());
            out.u32s(k.rows.iter());
        }
        Some(out.into_bytes())
    }

    /// [`adopt`](Self::adopt) at the first lookup that needs content, not now.
    pub fn adopt_later(&self, bytes: bytes::Bytes) {
        if let Ok(mut p) = self.pending.lock() {
            p.push(bytes);
        }
    }

    fn adopt_pending(&self) {
        let pending = match self.pending.lock() {
            Ok(mut p) => std::mem::take(&mut *p),
            Err(_) => return,
        };
        for b in pending {
            self.adopt(&b);
        }
    }

    /// Takes the key hashes [`keep`](Self::keep) wrote, for the files not yet held that are
    /// still there with their size: only their footers are read, and the hashes are used
    /// where they lie in `bytes` (a snapshot file's mapping: at a million objects, 24 MB a
    /// new process does not copy). Bytes not in that form, and a file that cannot be opened,
    /// are passed over (its keys are read when first wanted). The hashes are not checked in
    /// order now: `bytes` are a kept part, given only when its checksum matches (docs/index.md,
    /// "Snapshot files"); a row past the file's end makes the lookup `None` (`read_rows`).
    pub fn adopt(&self, bytes: &bytes::Bytes) {
        let mut r = In::of(bytes);
        if r.bytes() != Some(KEPT) {
            return;
        }
        while !r.is_empty() {
            let (Some(location), Some(size), Some(hashes), Some(rows)) =
                (r.bytes(), r.u64s(), r.words::<u64>(), r.words::<u32>())
            else {
                return;
            };
            let (Ok(location), &[size]) = (std::str::from_utf8(location), &size[..]) else {
                return;
            };
            let name = (location.to_string(), size);
            if self.files.lock().is_ok_and(|m| m.contains_key(&name)) {
                continue;
            }
            let Some(metadata) = open(location, size).and_then(|f| footer(&f)) else {
                continue;
            };
            if let (true, Ok(mut m)) = (hashes.len() == rows.len(), self.files.lock()) {
                m.insert(
                    name,
                    Arc::new(Keyed {
                        metadata,
                        hashes,
                        rows,
                    }),
                );
            }
        }
    }

    fn keyed(&self, location: &str, size: u64) -> Option<Arc<Keyed>> {
        let name = (location.to_string(), size);
        if let Some(k) = self.files.lock().ok()?.get(&name) {
            return Some(k.clone());
        }
        let keyed = Arc::new(key_file(location, size)?);
        self.files.lock().ok()?.insert(name, keyed.clone());
        Some(keyed)
    }
}

/// The local file at `location`, if it still has `size` bytes.
fn open(location: &str, size: u64) -> Option<File> {
    if !location.starts_with('/') {
        return None;
    }
    let file = File::open(location).ok()?;
    (file.metadata().ok()?.len() == size).then_some(file)
}

/// A file's footer with the offset index of its page index (where each page lies: a row
/// selection reads the pages holding its rows by it; the column index, the pages' min/max
/// for pruning by a predicate, is not read: at a million objects it was half of the page
/// index's decoding); `None` when it cannot be read, or the file has more rows than a u32
/// counts.
fn footer(file: &File) -> Option<ArrowReaderMetadata> {
    let options = ArrowReaderOptions::new()
        .with_column_index_policy(PageIndexPolicy::Skip)
        .with_offset_index_policy(PageIndexPolicy::Optional);
    let metadata = ArrowReaderMetadata::load(file, options).ok()?;
    (metadata.metadata().file_metadata().num_rows() <= u32::MAX as i64).then_some(metadata)
}

/// Reads the footer (with the offset index) and the key of every row of a file.
fn key_file(location: &str, size: u64) -> Option<Keyed> {
    let file = open(location, size)?;
    let metadata = footer(&file)?;
    let mask = ProjectionMask::columns(
        metadata.metadata().file_metadata().schema_descr(),
        KEY_COLUMNS,
    );
    let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(file, metadata.clone())
        .with_projection(mask)
        .build()
        .ok()?;
    let mut pairs: Vec<(u64, u32)> = Vec::new();
    let mut row = 0u32;
    for b in reader {
        let b = b.ok()?;
        let (ids, names) = (strings(&b, "object_id")?, strings(&b, "name")?);
        let revisions = read(&b, "revision", integers)?;
        for (i, revision) in revisions.into_iter().enumerate() {
            if let (Some(id), Some(revision), Some(name)) = (ids.get(i), revision, names.get(i)) {
                pairs.push((key_hash(id, revision, name), row));
            }
            row += 1;
        }
    }
    pairs.sort_unstable();
    Some(Keyed {
        metadata,
        hashes: Words::from_values(pairs.iter().map(|&(h, _)| h)),
        rows: Words::from_values(pairs.iter().map(|&(_, r)| r)),
    })
}

/// The `columns` of the `rows` (sorted, distinct) of a file.
fn read_rows(
    location: &str,
    size: u64,
    metadata: &ArrowReaderMetadata,
    rows: &[u32],
    columns: &[&str],
) -> Option<Vec<RecordBatch>> {
    let file = open(location, size)?;
    let md = metadata.metadata();
    let mut groups = Vec::new();
    let mut selectors = Vec::new();
    let mut start = 0u64;
    let mut next = rows.iter().map(|&r| r as u64).peekable();
    for (g, rg) in md.row_groups().iter().enumerate() {
        let end = start + rg.num_rows() as u64;
        let mut at = start;
        while let Some(&r) = next.peek() {
            if r >= end {
                break;
            }
            next.next();
            if r > at {
                selectors.push(RowSelector::skip((r - at) as usize));
            }
            selectors.push(RowSelector::select(1));
            at = r + 1;
        }
        if at > start {
            groups.push(g);
            if end > at {
                selectors.push(RowSelector::skip((end - at) as usize));
            }
        }
        start = end;
    }
    if next.peek().is_some() {
        // A row past the file's end: not a row of it.
        return None;
    }
    let mask = ProjectionMask::columns(md.file_metadata().schema_descr(), columns.iter().copied());
    let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(file, metadata.clone())
        .with_projection(mask)
        .with_row_groups(groups)
        .with_row_selection(RowSelection::from(selectors))
        .build()
        .ok()?;
    reader.collect::<Result<Vec<_>, _>>().ok()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::parquet::arrow::ArrowWriter;
    use datafusion::parquet::file::properties::WriterProperties;

    use super::*;

    type Row = (String, i64, String, Option<String>);

    /// Writes `rows` to `path` in row groups of 50 rows and pages of 8, with the page index.
    fn write(path: &std::path::Path, rows: &[Row]) -> (String, u64) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("object_id", DataType::Utf8, false),
            Field::new("revision", DataType::Int64, false),
            Field::new("name", DataType::Utf8, false),
            Field::new("content", DataType::Utf8, true),
        ]));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.0))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.2))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.3.as_deref()))),
        ];
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(50))
            .set_data_page_row_count_limit(8)
            .set_write_batch_size(8)
            .build();
        let file = File::create(path).unwrap();
        let mut w = ArrowWriter::try_new(file, schema.clone(), Some(props)).unwrap();
        w.write(&RecordBatch::try_new(schema, columns).unwrap())
            .unwrap();
        w.close().unwrap();
        let location = path.canonicalize().unwrap().display().to_string();
        let size = std::fs::metadata(path).unwrap().len();
        (location, size)
    }

    fn row(id: usize, revision: i64, name: &str, content: Option<&str>) -> Row {
        (
            format!("obj-{id:04}"),
            revision,
            name.to_string(),
            content.map(str::to_string),
        )
    }

    #[test]
    fn packed_content_is_read_by_locator() {
        let dir = tempfile::tempdir().unwrap();
        // 240 rows in 5 row groups: two names per object, the second revision of every
        // tenth object, and no content for object 7's body.
        let mut a = Vec::new();
        for id in 0..120 {
            let body = (id != 7).then(|| format!("body of {id}"));
            a.push(row(id, 1, "body", body.as_deref()));
            a.push(row(id, 1, "summary", Some(&format!("summary of {id}"))));
        }
        // A second file: new revisions, and object 3's body written again with other text.
        let mut b: Vec<Row> = (0..120)
            .step_by(10)
            .map(|id| row(id, 2, "body", Some(&format!("body of {id}, revised"))))
            .collect();
        b.push(row(3, 1, "body", Some("a copy")));
        let files = vec![
            write(&dir.path().join("a.parquet"), &a),
            write(&dir.path().join("b.parquet"), &b),
        ];
        let keys: Vec<RepKey> = [
            (5, 1, "body"),
            (7, 1, "body"),
            (7, 1, "summary"),
            (3, 1, "body"),
            (40, 2, "body"),
            (119, 1, "summary"),
            (64, 1, "body"),
        ]
        .iter()
        .map(|(id, r, n)| (format!("obj-{id:04}"), *r, n.to_string()))
        .collect();
        let content = ContentFiles::default();
        let got = content.contents(&files, &keys).unwrap();
        // Expected by hand: the first listed file's row of a key written twice; no entry for
        // NULL content.
        let expected: HashMap<RepKey, String> = [
            (5, 1, "body", "body of 5"),
            (7, 1, "summary", "summary of 7"),
            (3, 1, "body", "body of 3"),
            (40, 2, "body", "body of 40, revised"),
            (119, 1, "summary", "summary of 119"),
            (64, 1, "body", "body of 64"),
        ]
        .iter()
        .map(|(id, r, n, c)| ((format!("obj-{id:04}"), *r, n.to_string()), c.to_string()))
        .collect();
        assert_eq!(got, expected);
        assert!(content.memory_bytes() > 0);
        // Each file's footer is held with where its pages lie, not their statistics.
        for k in content.files.lock().unwrap().values() {
            let m = k.metadata.metadata();
            assert!(m.offset_index().is_some() && m.column_index().is_none());
        }
        // The key hashes kept, as a snapshot file keeps them, and taken back by another
        // holder: both files held at once (only their footers read), the same content. Any
        // cut of the kept bytes, or bytes of another form, are passed over without harm.
        let kept = bytes::Bytes::from(content.keep(&files).unwrap());
        let other = ContentFiles::default();
        other.adopt(&kept);
        assert_eq!(other.files.lock().unwrap().len(), 2);
        assert_eq!(other.contents(&files, &keys).unwrap(), expected);
        for cut in (0..kept.len()).step_by(97) {
            let partial = ContentFiles::default();
            partial.adopt(&kept.slice(..cut));
            assert_eq!(
                partial.contents(&files, &keys).unwrap(),
                expected,
                "cut {cut}"
            );
        }
        let mut wrong = kept.to_vec();
        wrong[20] ^= 0x40;
        ContentFiles::default().adopt(&wrong.into());
        ContentFiles::default().adopt(&bytes::Bytes::from_static(b"not kept keys"));
        // A listing without the second file forgets it.
        let got = content.contents(&files[..1], &keys[3..4]).unwrap();
        assert_eq!(got[&keys[3]], "body of 3");
        assert_eq!(content.files.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_file_that_cannot_be_read_by_locator_answers_none() {
        let dir = tempfile::tempdir().unwrap();
        let (location, size) = write(&dir.path().join("a.parquet"), &[row(1, 1, "body", None)]);
        let keys = vec![("obj-0001".to_string(), 1, "body".to_string())];
        let content = ContentFiles::default();
        // Changed since listed, an object-store key, not Parquet.
        assert!(
            content
                .contents(&[(location.clone(), size + 1)], &keys)
                .is_none()
        );
        assert!(
            content
                .contents(&[("bucket/reps/a.parquet".into(), size)], &keys)
                .is_none()
        );
        std::fs::write(&location, vec![0u8; size as usize]).unwrap();
        assert!(content.contents(&[(location, size)], &keys).is_none());
    }
}
