//! The commit log: what makes an ingest visible in one atomic step across every table it
//! writes, on a local folder and on S3 (docs/ingest.md).
//!
//! An ingest has an id, `<UTC time>-<16 hex digits>`. It first creates a pending marker
//! `_signalql/pending/<id>.json` (who is writing: host, process, start time), then writes each
//! of its data files as `ROOT/<table>/ingest-<id>.parquet` (each one whole: a hard-linked
//! temporary file locally, one conditional PUT on S3), then creates the commit record
//! `_signalql/commits/<id>.json` listing them, with create-new semantics (`PutMode::Create` on
//! S3). Creating that record is the commit. A reader takes the set of commit records first,
//! then lists the table folders, and reads a file named `ingest-<id>.parquet` with such an id
//! only when the id is committed; every other Parquet file (written by other tools, by
//! `signalql gen`, or by signalql before the commit log) is read as it is. Because the
//! record is made after every file of the ingest exists, a reader that saw the record sees
//! all of them, in every table; one that did not sees none.
//!
//! Object ingests also commit in sequence. Each reads what the object tables hold (to know
//! which files are new revisions and which objects are gone) at a position, the highest
//! sequence number among the records named `objects-<seq>.json`, and commits by creating
//! `objects-<position + 1>.json`. Of two object ingests that read the same position, one
//! creates that record and the other finds it there: a conflict, after which the loser
//! removes its files, reads the tables again and writes what is still new. So concurrent
//! object ingests of the same files add each revision once, not once per writer. Event
//! ingests only append, and commit under their id (`<id>.json`) without a sequence.
//!
//! A SIGKILL before the record leaves files no reader reads. The next ingest into the root
//! cleans them up: a pending marker without a commit whose writer is gone (same host, the
//! process no longer running; on another host or on S3, older than [`STALE_AFTER`]) has its
//! files removed, then the marker. Each ingest has a new id, so re-running an interrupted
//! ingest never collides with what the killed run left.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{CatalogError, Result};
use crate::storage::{Root, StorageError};

/// Where the commit records are, under the root.
pub const COMMITS: &str = "_signalql/commits";
/// Where the pending markers are, under the root.
pub const PENDING: &str = "_signalql/pending";
/// A pending marker whose writer cannot be checked (another host, an S3 root) is taken as
/// abandoned after this long.
pub const STALE_AFTER: Duration = Duration::from_secs(24 * 3600);

/// The text index's table folders (crate::objects::index), written by object ingests and
/// `signalql index` under the same commit records as the tables.
pub const INDEX_TABLES: [&str; 3] = ["index_terms", "index_reps", "index_files"];

/// Every data table folder an ingest may write to (the index's are [`INDEX_TABLES`]).
pub const TABLES: [&str; 10] = [
    "events",
    "users",
    "signals",
    "entities",
    "relationships",
    "objects",
    "revisions",
    "representations",
    "derivations",
    "links",
];

/// The ingest id of a data file name written under the commit log (`ingest-<id>.parquet`
/// with `<id>` = `YYYYMMDDTHHMMSSffffffZ-` and 16 lower-case hex digits), or None for any
/// other name, which is read without a commit.
pub fn ingest_id(file_name: &str) -> Option<&str> {
    let id = file_name
        .strip_prefix("ingest-")?
        .strip_suffix(".parquet")?;
    let (stamp, hex) = id.split_once('-')?;
    let b = stamp.as_bytes();
    let stamp_ok = b.len() == 22
        && b[8] == b'T'
        && b[21] == b'Z'
        && b[..8].iter().chain(&b[9..21]).all(u8::is_ascii_digit);
    let hex_ok = hex.len() == 16 && hex.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
    (stamp_ok && hex_ok).then_some(id)
}

/// How many times a writer of the object tables reads them again after a conflicting commit
/// ([`Ingest::commit_in_sequence`]).
pub const MAX_ATTEMPTS: usize = 16;

/// The name prefix of sequenced commit records (object ingests).
const SEQUENCED: &str = "objects-";

fn sequenced_name(seq: u64) -> String {
    format!("{SEQUENCED}{seq:020}.json")
}

/// The sequence number of a sequenced record's name (`objects-` and 20 digits).
fn sequence_of(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(SEQUENCED)?.strip_suffix(".json")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The ingest id a sequenced record commits: read from the record, once per process (records
/// never change once created).
fn sequenced_id(root: &Root, name: &str) -> std::result::Result<String, StorageError> {
    static IDS: std::sync::Mutex<BTreeMap<String, String>> = std::sync::Mutex::new(BTreeMap::new());
    let rel = format!("{COMMITS}/{name}");
    let key = root.display_of(&rel);
    if let Some(id) = IDS.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(id.clone());
    }
    let bad = |message: String| StorageError {
        location: key.clone(),
        message,
    };
    let raw = root
        .read(&rel)?
        .ok_or_else(|| bad("the commit record was listed but cannot be read".into()))?;
    let record: Record =
        serde_json::from_slice(&raw).map_err(|e| bad(format!("not a commit record: {e}")))?;
    IDS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, record.id.clone());
    Ok(record.id)
}

/// The committed ingest ids of a root, read before its table folders are listed, and the
/// position of its object tables (the highest sequenced commit; 0 before the first).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    committed: HashSet<String>,
    position: u64,
    /// The sequence number of each ingest id committed in sequence.
    sequence: HashMap<String, u64>,
}

impl Snapshot {
    pub fn read(root: &Root) -> std::result::Result<Snapshot, StorageError> {
        let mut snapshot = Snapshot::default();
        for (name, _) in root.list_names(COMMITS)? {
            if let Some(seq) = sequence_of(&name) {
                snapshot.position = snapshot.position.max(seq);
                let id = sequenced_id(root, &name)?;
                snapshot.sequence.insert(id.clone(), seq);
                snapshot.committed.insert(id);
            } else if let Some(id) = name.strip_suffix(".json") {
                snapshot.committed.insert(id.to_string());
            }
        }
        Ok(snapshot)
    }

    /// The object tables' position: the sequence number a sequenced commit follows.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Whether a reader reads the file at `location` (a path or key ending in its name).
    pub fn visible(&self, location: &str) -> bool {
        ingest_id(file_name(location)).is_none_or(|id| self.committed.contains(id))
    }

    /// The sequence number of the commit that made the file at `location` visible, when a
    /// sequenced commit (an object ingest) did; `None` for a file outside the commit log or
    /// committed otherwise. The object tables as they were at position `p` are the files of
    /// sequence at most `p` and those others.
    pub fn sequence(&self, location: &str) -> Option<u64> {
        ingest_id(file_name(location)).and_then(|id| self.sequence.get(id).copied())
    }
}

/// The name of the file at `location` (a path or key).
fn file_name(location: &str) -> &str {
    location.rsplit(['/', '\\']).next().unwrap_or(location)
}

/// Who is writing an ingest: the pending marker's content.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Marker {
    host: String,
    /// The kernel boot and process namespace the pid is in ([`machine`]); empty in markers
    /// written before it was recorded, or where it cannot be read.
    #[serde(default)]
    machine: String,
    pid: u32,
    started_at: DateTime<Utc>,
}

/// The commit record: what the ingest added.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    id: String,
    committed_at: DateTime<Utc>,
    /// Table → the file names it added there.
    files: BTreeMap<String, Vec<String>>,
}

/// An ingest in progress: its id, its marker, the files it wrote. Committed by
/// [`Ingest::commit`]; dropped uncommitted, it removes what it wrote (a SIGKILL leaves that to
/// the next ingest's clean-up).
pub struct Ingest {
    root: Root,
    id: String,
    files: BTreeMap<String, Vec<String>>,
    done: bool,
}

impl Ingest {
    /// Cleans up what interrupted ingests left, then starts a new ingest with a pending marker.
    pub fn begin(root: &Root) -> Result<Ingest> {
        cleanup(root)?;
        let now = Utc::now();
        let id = format!(
            "{}-{:016x}",
            now.format("%Y%m%dT%H%M%S%6fZ"),
            rand::random::<u64>()
        );
        let marker = Marker {
            host: host(),
            machine: machine(),
            pid: std::process::id(),
            started_at: now,
        };
        let text = serde_json::to_vec(&marker).map_err(|e| CatalogError::Invalid(e.to_string()))?;
        crate::failpoint::write_step(format_args!("pending marker {PENDING}/{id}.json"));
        if !root.put_new(&format!("{PENDING}/{id}.json"), text)? {
            return Err(CatalogError::Invalid(format!(
                "ingest id {id} is already in use; retry"
            )));
        }
        Ok(Ingest {
            root: root.clone(),
            id,
            files: BTreeMap::new(),
            done: false,
        })
    }

    /// The stem of this ingest's data file in every table: `ingest-<id>`.
    pub fn stem(&self) -> String {
        format!("ingest-{}", self.id)
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Records that `table/<stem>.parquet` was written.
    pub fn wrote(&mut self, table: &str) {
        let name = format!("{}.parquet", self.stem());
        self.files.entry(table.to_string()).or_default().push(name);
    }

    /// Makes everything written visible at once: creates the commit record `<id>.json`, then
    /// removes the marker. An ingest that wrote nothing commits nothing.
    pub fn commit(mut self) -> Result<()> {
        let name = format!("{}.json", self.id);
        if !self.create_record(&name)? {
            return Err(CatalogError::Invalid(format!(
                "the commit record of ingest {} already exists",
                self.id
            )));
        }
        self.finish()
    }

    /// Commits in sequence after `position` (the [`Snapshot::position`] the ingest read the
    /// object tables at): creates `objects-<position + 1>.json`, then removes the marker.
    /// `Ok(false)` is a conflict: another ingest committed after that position, nothing of
    /// this one is visible, and its files are still there ([`Ingest::discard`] removes them
    /// before the tables are read again). An ingest that wrote nothing commits nothing.
    pub fn commit_after(&mut self, position: u64) -> Result<bool> {
        if !self.create_record(&sequenced_name(position + 1))? {
            return Ok(false);
        }
        self.finish()?;
        Ok(true)
    }

    /// Writes with `write` what the object tables call for at the position read, then commits
    /// in sequence after that position ([`Ingest::commit_after`]). On a conflict (another
    /// object-table writer committed in between) the files written go and `write` runs again
    /// over the tables as they are then, at most [`MAX_ATTEMPTS`] times. Nothing written
    /// commits nothing.
    pub fn commit_in_sequence<T>(
        &mut self,
        mut write: impl FnMut(&Snapshot, &mut Ingest) -> Result<T>,
    ) -> Result<T> {
        for _ in 0..MAX_ATTEMPTS {
            let snapshot = Snapshot::read(&self.root)?;
            let out = write(&snapshot, self)?;
            if self.commit_after(snapshot.position())? {
                return Ok(out);
            }
            self.discard()?;
        }
        Err(CatalogError::Invalid(format!(
            "{MAX_ATTEMPTS} other object ingests committed while this one was writing, each time \
             after it read the tables; nothing of it is visible; run it again"
        )))
    }

    /// Removes every file this ingest wrote, keeping its id and marker, to write again.
    pub fn discard(&mut self) -> Result<()> {
        for (table, names) in std::mem::take(&mut self.files) {
            for name in names {
                self.root.delete(&format!("{table}/{name}"))?;
            }
        }
        Ok(())
    }

    /// Creates the commit record `name` listing the files written, if any were; false when a
    /// record of that name exists.
    fn create_record(&mut self, name: &str) -> Result<bool> {
        if self.files.is_empty() {
            return Ok(true);
        }
        let record = Record {
            id: self.id.clone(),
            committed_at: Utc::now(),
            files: self.files.clone(),
        };
        let text =
            serde_json::to_vec_pretty(&record).map_err(|e| CatalogError::Invalid(e.to_string()))?;
        crate::failpoint::write_step(format_args!("commit record {COMMITS}/{name}"));
        Ok(self.root.put_new(&format!("{COMMITS}/{name}"), text)?)
    }

    /// After the commit: nothing to remove on drop, and the marker goes.
    fn finish(&mut self) -> Result<()> {
        self.done = true;
        self.files.clear();
        crate::failpoint::write_step(format_args!("marker removal {PENDING}/{}.json", self.id));
        self.root.delete(&format!("{PENDING}/{}.json", self.id))?;
        Ok(())
    }
}

impl Drop for Ingest {
    fn drop(&mut self) {
        if !self.done {
            let _ = remove_ingest(&self.root, &self.id);
        }
    }
}

/// Removes an uncommitted ingest's data files, then its marker (in that order: while the
/// marker is there, a later clean-up still finds the files).
fn remove_ingest(root: &Root, id: &str) -> std::result::Result<(), StorageError> {
    for table in TABLES.iter().chain(&INDEX_TABLES) {
        root.delete(&format!("{table}/ingest-{id}.parquet"))?;
    }
    root.delete(&format!("{PENDING}/{id}.json"))
}

/// Cleans up after interrupted ingests: markers of committed ingests are removed; markers of
/// uncommitted ones whose writer is gone are removed with their files. Local temporary files
/// of writers that are gone are removed too.
pub fn cleanup(root: &Root) -> Result<()> {
    cleanup_after(root, &Snapshot::read(root)?)
}

/// [`cleanup`] with the commit records as `committed` read them. They may predate a commit:
/// a writer commits, removes its marker and exits, and a marker read before that removal
/// belongs to a writer that is gone by the time it is looked up. So an ingest whose writer is
/// gone has its files removed only if the commit records read after its death do not name it
/// (a writer that is gone commits nothing more); otherwise only its marker goes.
fn cleanup_after(root: &Root, committed: &Snapshot) -> Result<()> {
    let now = Utc::now();
    for (name, _) in root.list_names(PENDING)? {
        let Some(id) = name.strip_suffix(".json") else {
            continue;
        };
        if committed.committed.contains(id) {
            root.delete(&format!("{PENDING}/{name}"))?;
            continue;
        }
        let Some(raw) = root.read(&format!("{PENDING}/{name}"))? else {
            continue;
        };
        let Ok(marker) = serde_json::from_slice::<Marker>(&raw) else {
            continue;
        };
        if abandoned(&marker, root.local().is_some(), now) {
            if Snapshot::read(root)?.committed.contains(id) {
                root.delete(&format!("{PENDING}/{name}"))?;
            } else {
                remove_ingest(root, id)?;
            }
        }
    }
    if let Some(local) = root.local() {
        for table in TABLES
            .iter()
            .chain(&INDEX_TABLES)
            .copied()
            .chain(["_signalql/commits", PENDING])
        {
            remove_dead_temporaries(&local.join(table));
        }
    }
    Ok(())
}

/// Whether the writer of `marker` is gone. Its process can be looked up when it ran in this
/// kernel boot and process namespace, wherever the root is (a local folder or S3); a marker
/// without that record (an older one) is looked up on a local root of the same host name.
fn abandoned(marker: &Marker, local: bool, now: DateTime<Utc>) -> bool {
    let here = if marker.machine.is_empty() {
        local && marker.host == host()
    } else {
        marker.machine == machine()
    };
    if here && process_table_exists() {
        return !process_alive(marker.pid);
    }
    let age = now.signed_duration_since(marker.started_at);
    age.to_std().is_ok_and(|a| a > STALE_AFTER)
}

/// This machine's name (empty when it cannot be read).
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// This kernel boot and process namespace (`<boot id>/<pid namespace>`), in which a pid
/// names one process; empty when either cannot be read. Host names can repeat across machines
/// and containers; these do not.
fn machine() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id");
    let ns = std::fs::read_link("/proc/self/ns/pid");
    match (boot, ns) {
        (Ok(b), Ok(n)) => format!("{}/{}", b.trim(), n.display()),
        _ => String::new(),
    }
}

fn process_table_exists() -> bool {
    std::path::Path::new("/proc/self").exists()
}

fn process_alive(pid: u32) -> bool {
    pid == std::process::id() || std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes `.{name}.tmp-<pid>-…` files ([`crate::file::NewFile`]) in `dir` whose process is
/// gone.
fn remove_dead_temporaries(dir: &std::path::Path) {
    if !process_table_exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((_, rest)) = name.split_once(".tmp-") else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if name.starts_with('.')
            && let Some(pid) = pid
            && !process_alive(pid)
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_commit_log_names_need_a_commit() {
        let id = "20260101T000000000000Z-0123456789abcdef";
        assert_eq!(ingest_id(&format!("ingest-{id}.parquet")), Some(id));
        for legacy in [
            "ingest-20260101T000000000000Z-0123456789ab.parquet",
            "ingest-20260101T000000000000Z-0123456789ab-2.parquet",
            "part-00000.parquet",
            "ingest-20260101T000000000000Z-0123456789ABCDEF.parquet",
        ] {
            assert_eq!(ingest_id(legacy), None, "{legacy}");
        }
    }

    #[test]
    fn files_appear_at_the_commit_and_leftovers_of_dead_writers_go() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::Local(dir.path().to_path_buf());
        let mut ingest = Ingest::begin(&root).unwrap();
        let file = format!("events/{}.parquet", ingest.stem());
        root.put_new(&file, b"x".to_vec()).unwrap();
        ingest.wrote("events");
        assert!(!Snapshot::read(&root).unwrap().visible(&file));
        ingest.commit().unwrap();
        assert!(Snapshot::read(&root).unwrap().visible(&file));
        assert!(root.list_names(PENDING).unwrap().is_empty());

        // A writer that died before its commit (no process has the largest pid).
        let id = "20260101T000000000000Z-00000000000000aa";
        let marker = Marker {
            host: host(),
            machine: machine(),
            pid: u32::MAX,
            started_at: Utc::now(),
        };
        let left = format!("events/ingest-{id}.parquet");
        root.put_new(
            &format!("{PENDING}/{id}.json"),
            serde_json::to_vec(&marker).unwrap(),
        )
        .unwrap();
        root.put_new(&left, b"half".to_vec()).unwrap();
        assert!(!Snapshot::read(&root).unwrap().visible(&left));
        cleanup(&root).unwrap();
        assert_eq!(root.read(&left).unwrap(), None);
        assert!(root.list_names(PENDING).unwrap().is_empty());
        assert_eq!(root.read(&file).unwrap().unwrap(), b"x");
    }

    /// The race of eight concurrent event ingests (tests/it/crash.rs) made deterministic: a
    /// clean-up read the commit records before a writer committed, then found the writer's
    /// marker with the writer gone (it had committed, was about to remove its marker, and
    /// exited). Its committed files stay.
    #[test]
    fn a_commit_after_the_cleanups_snapshot_keeps_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::Local(dir.path().to_path_buf());
        let before = Snapshot::read(&root).unwrap();
        let mut ingest = Ingest::begin(&root).unwrap();
        let id = ingest.id().to_string();
        let file = format!("events/{}.parquet", ingest.stem());
        root.put_new(&file, b"x".to_vec()).unwrap();
        ingest.wrote("events");
        assert!(ingest.create_record(&format!("{id}.json")).unwrap());
        // Its marker, as the writer left it until its last step, now naming a writer that is
        // gone (no process has the largest pid).
        let marker = Marker {
            host: host(),
            machine: machine(),
            pid: u32::MAX,
            started_at: Utc::now(),
        };
        root.delete(&format!("{PENDING}/{id}.json")).unwrap();
        root.put_new(
            &format!("{PENDING}/{id}.json"),
            serde_json::to_vec(&marker).unwrap(),
        )
        .unwrap();
        ingest.done = true;
        drop(ingest);
        assert!(!before.visible(&file), "the snapshot predates the commit");
        cleanup_after(&root, &before).unwrap();
        assert_eq!(root.read(&file).unwrap().unwrap(), b"x");
        assert!(Snapshot::read(&root).unwrap().visible(&file));
        assert!(root.list_names(PENDING).unwrap().is_empty());
    }

    #[test]
    fn of_two_sequenced_commits_after_one_position_one_wins() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::Local(dir.path().to_path_buf());
        let position = Snapshot::read(&root).unwrap().position();
        assert_eq!(position, 0);
        let (mut a, mut b) = (Ingest::begin(&root).unwrap(), Ingest::begin(&root).unwrap());
        for i in [&mut a, &mut b] {
            root.put_new(&format!("objects/{}.parquet", i.stem()), b"x".to_vec())
                .unwrap();
            i.wrote("objects");
        }
        let (fa, fb) = (
            format!("objects/{}.parquet", a.stem()),
            format!("objects/{}.parquet", b.stem()),
        );
        assert!(a.commit_after(position).unwrap());
        assert!(
            !b.commit_after(position).unwrap(),
            "the same position again"
        );
        let s = Snapshot::read(&root).unwrap();
        assert_eq!(s.position(), 1);
        assert!(s.visible(&fa) && !s.visible(&fb));
        // The loser writes again after the new position.
        b.discard().unwrap();
        assert_eq!(root.read(&fb).unwrap(), None);
        root.put_new(&fb, b"y".to_vec()).unwrap();
        b.wrote("objects");
        assert!(b.commit_after(s.position()).unwrap());
        let s = Snapshot::read(&root).unwrap();
        assert_eq!(s.position(), 2);
        assert!(s.visible(&fa) && s.visible(&fb));
        drop((a, b));
        assert!(root.list_names(PENDING).unwrap().is_empty());
        assert_eq!(root.read(&fb).unwrap().unwrap(), b"y");
    }

    #[test]
    fn a_dropped_ingest_removes_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::Local(dir.path().to_path_buf());
        let ingest = Ingest::begin(&root).unwrap();
        let file = format!("objects/{}.parquet", ingest.stem());
        root.put_new(&file, b"x".to_vec()).unwrap();
        drop(ingest);
        assert_eq!(root.read(&file).unwrap(), None);
        assert!(root.list_names(PENDING).unwrap().is_empty());
    }
}
