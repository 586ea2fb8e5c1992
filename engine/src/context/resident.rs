//! The resident context index in the engine (docs/index.md, "The resident context index"):
//! the [`Resident`] holder a long-running engine keeps (the servers, the shell, `signalql
//! bench`, an embedded [`Engine`](crate::Engine)), which builds a
//! [`Generation`] of the object tables as the catalog opens them and keeps it while their
//! files are unchanged, and the FIND OBJECT plans answered from it.
//!
//! A generation stands for the tables only when the Parquet plan would read them as they are:
//! each of `objects`, `revisions` and `representations` a folder of Parquet files with a
//! fingerprint and no mapping, and `T` at or after the generation's horizon. Otherwise the
//! statement keeps the Parquet plan. A caller restricted by the policy gets a generation of
//! its own, built from the tables as it may read them (the restriction's filter and masks
//! applied by the scan), so nothing it may not see is held for it, scored or counted.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::provider_as_source;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, TableType, col, lit};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{DataFrame, SessionContext};
use signalql_catalog::TableInfo;
use signalql_catalog::objects::resident::{
    Builder, DERIVATION_COLUMNS, Find, Generation, LINK_COLUMNS, OBJECT_COLUMNS,
    REPRESENTATION_COLUMNS, REVISION_COLUMNS,
};
use signalql_catalog::objects::{DERIVATIONS, LINKS, OBJECTS, REPRESENTATIONS, REVISIONS};
use tokio::sync::Mutex;

use crate::catalog::{Catalog, optional_table, scan};
use crate::error::Result;
use crate::execute::Executor;
use crate::lower::project;

/// A snapshot file written ([`Resident::write_snapshot`]).
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Its name under the dataset root.
    pub name: String,
    pub bytes: u64,
    pub objects: usize,
    pub terms: usize,
    /// Whether its generation was refreshed from an earlier one (reading only the new files)
    /// rather than built whole or already held.
    pub refreshed: bool,
}

/// The name FIND's plan gives the generation's rows (EXPLAIN shows it).
pub const RESIDENT_OBJECTS: &str = "resident_objects";

/// The generation a long-running engine keeps, with the fingerprints of the tables it was
/// built from. Shared by the engines of one server (`EngineOptions::resident`).
#[derive(Debug, Default)]
pub struct Resident {
    /// The generations held, the most recently used first (at most [`HELD`], and within
    /// the caller's `resident_memory_bytes`).
    held: Mutex<Vec<Held>>,
    /// Only generations read from snapshot files are held, none is built: a one-shot
    /// command, which would build one for a single answer.
    snapshots_only: bool,
    /// CONTEXT FORs decided from a generation.
    contexts: std::sync::atomic::AtomicU64,
    /// Generations made by the incremental refresh ([`refresh`]).
    refreshes: std::sync::atomic::AtomicU64,
}

/// The name of the part of a snapshot file that keeps the representations' key hashes
/// (`ContentFiles::keep`), so a new process reads packed content without reading them.
const KEYS: &str = "content_keys";

/// The name of the part of a snapshot file that keeps the files of each table the generation
/// was built from ([`Files`]), so a later process refreshes it instead of building.
const FILES: &str = "files";

/// Per object table (objects, revisions, representations, links, derivations), the
/// identities of the files a generation was built from (`TableInfo::file_identities`);
/// `None` for a graph table absent or not held.
type Files = Vec<Option<Vec<String>>>;

/// Where snapshot files are, under the dataset root.
pub const SNAPSHOTS: &str = "_signalql/resident";

/// The snapshot file of the generation of the tables `key` names, in this build's format (a
/// file of another format has another name, so writing never meets one).
fn snapshot_name(key: &[String]) -> String {
    format!(
        "{SNAPSHOTS}/{}.snapshot",
        key_hash(key, signalql_catalog::objects::resident::SNAPSHOT_MAGIC)
    )
}

/// The name a bundle's pin gives the generation it was decided from: a hash of its key
/// alone. Not the snapshot file's name, which also hashes the file format, so that a new
/// format (a rebuilt file of the same tables) still recomputes old bundles from the index.
fn generation_name(key: &[String]) -> String {
    format!("generation:{}", key_hash(key, b""))
}

fn key_hash(key: &[String], salt: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(salt);
    for k in key {
        h.update(k.as_bytes());
        h.update([0]);
    }
    hex::encode(&h.finalize()[..16])
}

/// The generation of the snapshot file for `key`, when there is one and it is whole and was
/// written for `key`. A file that cannot be read or is not a snapshot is not used (the
/// statement reads the tables instead); it never gives an answer.
fn load_snapshot(root: &signalql_catalog::Root, key: &[String]) -> Option<Generation> {
    let name = snapshot_name(key);
    // A local file is mapped (only the parts a statement uses are read); S3's is read whole.
    let bytes = match root.local() {
        Some(dir) => signalql_catalog::objects::resident::snapshot::map(&dir.join(&name)).ok()?,
        None => root.read(&name).ok()??.into(),
    };
    let (stored, generation) = Generation::from_snapshot(bytes).ok()?;
    (stored == key).then_some(generation)
}

/// Checks, on a thread of its own, the parts of a generation opened from a snapshot file
/// (or made by a statement) that an answer reads after its first steps — the kept facts and
/// the bitmaps CONTEXT FOR derives from them ([`prepare`](super::from_index::prepare), which
/// also moves to it the buffers of the generation it replaces, `earlier`), and the
/// representations when they are still to be made (a refreshed generation's merge; a
/// snapshot's are checked a block at a time as answers read them) — while the statement
/// that opened it goes on. Each part is made once, by whichever asks first (a `OnceLock`):
/// the statement waits only for a part it reaches while this thread is making it, and never
/// makes one twice. A server's first CONTEXT FOR after the FIND that opened a new snapshot
/// otherwise made all of it on its own (64.9 ms at a million objects, against 24.4 for the
/// next); a process that ends first just ends.
///
/// `facts_first`: the statement is not a CONTEXT FOR, which would derive the facts itself
/// at once. The facts come first then, at the statements' priority (the next CONTEXT FOR
/// waits for them), and the rest at a lower one: it works in the time between statements.
fn check_in_background(g: &Arc<Generation>, earlier: Option<Arc<Generation>>, facts_first: bool) {
    let g = Arc::clone(g);
    // A thread that cannot be started leaves each part to be made when first asked for.
    let _ = std::thread::Builder::new()
        .name("signalql-snapshot".into())
        .spawn(move || {
            let prepare = || super::from_index::prepare(&g, earlier.as_deref());
            if facts_first {
                prepare();
                yield_to_statements();
                g.reps();
            } else {
                g.reps();
                prepare();
            }
        });
}

/// Lowers the calling thread's priority (nice 10: about a tenth of a core's time while the
/// statements' threads want both), so work done ahead does not slow the statement running.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn yield_to_statements() {
    // SAFETY: gettid takes no arguments; setpriority only sets the scheduling priority of
    // this thread (Linux applies PRIO_PROCESS to the thread whose id is given). A failure
    // leaves the priority as it was.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 10);
    }
}

#[cfg(not(target_os = "linux"))]
fn yield_to_statements() {}

/// A generation with its key, where its tables stand in the commit log and their files.
struct Keyed {
    key: Vec<String>,
    generation: Arc<Generation>,
    standing: Standing,
    files: Files,
}

/// Per table of the generation's (those held, in order: objects, revisions, representations,
/// then the graph tables held), which of its files are new since an earlier version of the
/// tables, when that version (`old_key`, `old_files`) can be refreshed into this one
/// (`key`, `files`): every table read under the same restriction, held or not alike, and
/// every earlier file still there, unchanged. `None` when it cannot (a file removed or
/// rewritten, another restriction) or when nothing was added.
fn added(
    key: &[String],
    files: &Files,
    old_key: &[String],
    old_files: &Files,
) -> Option<Vec<Vec<bool>>> {
    if key.len() != old_key.len() || files.len() != old_files.len() || key == old_key {
        return None;
    }
    let mut out = Vec::new();
    for (i, (now, then)) in files.iter().zip(old_files).enumerate() {
        if key[2 * i + 1] != old_key[2 * i + 1] {
            return None;
        }
        match (now, then) {
            (Some(now), Some(then)) => {
                let then: std::collections::HashSet<&String> = then.iter().collect();
                let now_set: std::collections::HashSet<&String> = now.iter().collect();
                if !then.iter().all(|f| now_set.contains(*f)) {
                    return None;
                }
                out.push(now.iter().map(|f| !then.contains(f)).collect());
            }
            (None, None) if key[2 * i] == old_key[2 * i] => {}
            _ => return None,
        }
    }
    out.iter().flatten().any(|&b| b).then_some(out)
}

/// The generation of an earlier version of the tables read from its snapshot file, with the
/// files added since ([`added`]), when one is there.
fn snapshot_base(
    root: &signalql_catalog::Root,
    key: &[String],
    files: &Files,
) -> Option<(Arc<Generation>, Vec<Vec<bool>>)> {
    let names = root.list_names(SNAPSHOTS).ok()?;
    let current = snapshot_name(key);
    names.into_iter().find_map(|(name, _)| {
        let rel = format!("{SNAPSHOTS}/{name}");
        if rel == current || !name.ends_with(".snapshot") {
            return None;
        }
        let bytes = match root.local() {
            Some(dir) => {
                signalql_catalog::objects::resident::snapshot::map(&dir.join(&rel)).ok()?
            }
            None => root.read(&rel).ok()??.into(),
        };
        let (old_key, generation) = Generation::from_snapshot(bytes).ok()?;
        let old_files: Files = serde_json::from_slice(generation.kept(FILES)?).ok()?;
        let added = added(key, files, &old_key, &old_files)?;
        Some((Arc::new(generation), added))
    })
}

/// Generations a [`Resident`] holds at once: one per caller restriction in use (the
/// principals of a server's policy), the least recently used dropped first.
const HELD: usize = 4;

#[derive(Debug)]
struct Held {
    /// The fingerprints of `objects`, `revisions` and `representations`, and the caller's
    /// restriction of each (a restricted caller's generation holds only what it may see).
    key: Vec<String>,
    /// `None`: the tables cannot be held (see [`Builder::new`]), or no snapshot file was
    /// found and none was built.
    generation: Option<Arc<Generation>>,
    /// Whether a build was tried: a key that cannot be held is not tried again while its
    /// tables are unchanged.
    built: bool,
    /// Where the tables of `key` stand in the objects' commit log.
    standing: Standing,
    /// The files the generation was built from (a later version of the tables refreshes it).
    files: Files,
}

/// Where the object tables a generation holds stand in the commit log (a bundle decided from
/// it keeps this in its pin, context/store.rs): the highest sequence number of a file's
/// commit, and per table a fingerprint of its files committed otherwise or outside the log.
/// The tables at that position are the files of sequence at most `position` and those others,
/// unchanged.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Standing {
    pub position: u64,
    pub outside: std::collections::BTreeMap<String, String>,
}

impl Standing {
    /// Where `tables` stand in the commit log `snapshot` reads.
    pub(crate) fn of<'a>(
        snapshot: &signalql_catalog::commit::Snapshot,
        tables: impl Iterator<Item = &'a TableInfo>,
    ) -> Standing {
        let mut standing = Standing::default();
        for t in tables {
            let mut others = Vec::new();
            for (location, size) in &t.files {
                match snapshot.sequence(location) {
                    Some(seq) => standing.position = standing.position.max(seq),
                    None => others.push((location.as_str(), *size)),
                }
            }
            if let Some(f) = outside_fingerprint(&others) {
                standing.outside.insert(t.name.clone(), f);
            }
        }
        standing
    }
}

/// A fingerprint of files (location, size) not committed in sequence; `None` for none.
fn outside_fingerprint(files: &[(&str, u64)]) -> Option<String> {
    use sha2::{Digest, Sha256};
    if files.is_empty() {
        return None;
    }
    let mut h = Sha256::new();
    for (location, size) in files {
        h.update(location.as_bytes());
        h.update([0]);
        h.update(size.to_le_bytes());
    }
    Some(hex::encode(&h.finalize()[..16]))
}

/// Keeps the generations `held` (the most recently used first) within [`HELD`] and `budget`
/// bytes in all: the first is always kept (the caller checked its size), the others while
/// they fit, the least recently used dropped first. A statement still using a dropped
/// generation keeps it until it ends.
fn bound(held: &mut Vec<Held>, budget: u64) {
    held.truncate(HELD);
    let mut used = 0u64;
    let mut first = true;
    held.retain(|h| {
        let bytes = h.generation.as_ref().map_or(0, |g| g.memory_bytes() as u64);
        let keep = first || used.saturating_add(bytes) <= budget;
        if keep {
            used = used.saturating_add(bytes);
        }
        first = false;
        keep
    });
}

impl Resident {
    /// The generation of the object tables as `catalog` opens them now: the one held while
    /// their files are unchanged, else built (once, however many statements ask at once).
    /// `None` when it cannot stand for them.
    pub(crate) async fn generation(
        &self,
        ctx: &SessionContext,
        catalog: &dyn Catalog,
        exec: &Executor,
    ) -> Result<Option<Arc<Generation>>> {
        let build = !self.snapshots_only;
        let keyed = Box::pin(self.keyed(ctx, catalog, exec, build, false, false)).await?;
        Ok(keyed.map(|k| k.generation))
    }

    /// [`generation`](Self::generation) with a name of its key ([`generation_name`]): a
    /// bundle decided from it keeps the name as its pin (context/build.rs).
    pub(crate) async fn pinned(
        &self,
        ctx: &SessionContext,
        catalog: &dyn Catalog,
        exec: &Executor,
    ) -> Result<Option<(String, Arc<Generation>, Standing)>> {
        // CONTEXT FOR reads the representations and the facts: a snapshot opened for it has
        // them checked on another thread meanwhile.
        let build = !self.snapshots_only;
        let keyed = Box::pin(self.keyed(ctx, catalog, exec, build, false, true)).await?;
        Ok(keyed.map(|k| (generation_name(&k.key), k.generation, k.standing)))
    }

    /// [`generation`](Self::generation) with its key; `build`: built when neither held nor in
    /// a snapshot file; `whole`: only a generation every part of which is whole
    /// ([`Generation::whole`]: one to write to a snapshot file), else built; `check`: a
    /// generation opened from a snapshot file has the parts CONTEXT FOR reads checked in the
    /// background ([`check_in_background`]).
    async fn keyed(
        &self,
        ctx: &SessionContext,
        catalog: &dyn Catalog,
        exec: &Executor,
        build: bool,
        whole: bool,
        check: bool,
    ) -> Result<Option<Keyed>> {
        let mut tables = Vec::with_capacity(5);
        let mut key = Vec::with_capacity(10);
        let mut files: Files = Vec::with_capacity(5);
        let mut graph_held = true;
        for (name, columns) in [
            (OBJECTS, &OBJECT_COLUMNS[..]),
            (REVISIONS, &REVISION_COLUMNS[..]),
            (REPRESENTATIONS, &REPRESENTATION_COLUMNS[..]),
            (LINKS, &LINK_COLUMNS[..]),
            (DERIVATIONS, &DERIVATION_COLUMNS[..]),
        ] {
            // The graph tables are optional: without them (or when they cannot be held) the
            // generation still answers FIND, and CONTEXT FOR keeps the Parquet plan.
            let graph = name == LINKS || name == DERIVATIONS;
            let t = match graph {
                true => match optional_table(catalog, ctx, name).await? {
                    Some(t) => t,
                    None => {
                        key.extend(["absent".to_string(), "None".to_string()]);
                        files.push(None);
                        continue;
                    }
                },
                false => catalog.table(ctx, name).await?,
            };
            let plain = t.view.is_none() && t.is_folder();
            let has = |c: &&str| t.schema.field_with_name(c).is_ok();
            match (plain, t.fingerprint.clone(), columns.iter().all(has)) {
                (true, Some(fingerprint), true) => {
                    key.push(fingerprint);
                    key.push(format!("{:?}", t.restriction));
                    files.push(t.file_identities());
                    tables.push((t, columns));
                }
                _ if graph => {
                    graph_held = false;
                    key.extend(["unheld".to_string(), "None".to_string()]);
                    files.push(None);
                }
                _ => return Ok(None),
            }
        }
        let budget = exec.limits().resident_memory_bytes;
        let mut held = self.held.lock().await;
        if let Some(i) = held.iter().position(|h| h.key == key) {
            let h = held.remove(i);
            let (generation, built) = (h.generation.clone(), h.built);
            let (standing, held_files) = (h.standing.clone(), h.files.clone());
            held.insert(0, h);
            bound(&mut held, budget);
            let usable = generation.as_ref().is_none_or(|g| !whole || g.whole());
            if usable && (generation.is_some() || built || !build) {
                return Ok(generation.map(|generation| Keyed {
                    key,
                    generation,
                    standing,
                    files: held_files,
                }));
            }
        }
        let unrestricted = tables.iter().all(|(t, _)| t.restriction.is_none());
        let root = catalog.dataset().root();
        let commits = signalql_catalog::commit::Snapshot::read(root)
            .map_err(|e| crate::error::Error::io(e.to_string()))?;
        let standing = Standing::of(&commits, tables.iter().map(|(t, _)| t));
        // A snapshot stands for the tables as every caller reads them, so only for a caller
        // without restriction.
        // Each part of a file is checked when a statement first uses it; one to be written
        // again (`whole`) must have every part whole, else it is built.
        let snapshot = match unrestricted {
            true => load_snapshot(catalog.dataset().root(), &key).filter(|g| !whole || g.whole()),
            false => None,
        };
        // The generation held for an earlier version of the tables whose files are all still
        // there, with which of their files are new: the one a generation of `key` replaces,
        // and refreshes when no snapshot file stands for `key`.
        let replaced = held.iter().find_map(|h| {
            let g = h.generation.as_ref()?;
            Some((Arc::clone(g), added(&key, &files, &h.key, &h.files)?))
        });
        let earlier = replaced.as_ref().map(|(g, _)| Arc::clone(g));
        let (generation, built) = match snapshot {
            Some(g) => {
                // Where the packed content lies, as the file kept it (the representations'
                // files are in the key, so these are the files it was written for).
                if let Some(kept) = g.kept(KEYS) {
                    catalog.dataset().content_files().adopt_later(kept.clone());
                }
                (Some(Arc::new(g)), false)
            }
            None if !build => (None, false),
            None => {
                // An earlier version of the tables whose files are all still there is
                // refreshed: one held, else (for a caller without restriction) one whose
                // snapshot file is there.
                let base = match (replaced, unrestricted) {
                    (Some(b), _) => Some(b),
                    (None, true) => {
                        let base = snapshot_base(catalog.dataset().root(), &key, &files);
                        // Where content lies in the earlier files, as that file kept it.
                        if let Some(kept) = base.as_ref().and_then(|(g, _)| g.kept(KEYS)) {
                            catalog.dataset().content_files().adopt_later(kept.clone());
                        }
                        base
                    }
                    (None, false) => None,
                };
                let refreshed = match base {
                    Some((base, added)) => {
                        refresh(exec, &tables, &added, graph_held, &base).await?
                    }
                    None => None,
                };
                let generation = match refreshed {
                    Some(g) => {
                        self.refreshes
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        Some(g)
                    }
                    None => build_generation(exec, &tables, graph_held).await?,
                };
                (generation.map(Arc::new), true)
            }
        };
        // A generation larger than the whole budget is not held, and not built again while
        // the tables are unchanged: the Parquet plan answers.
        let (generation, built) = match generation {
            Some(g) if g.memory_bytes() as u64 > budget => (None, true),
            other => (other, built),
        };
        // A generation opened or made here (a held one returned above) has what later
        // statements read of it made meanwhile: by a long-running process whatever the first
        // statement is (a FIND first, the CONTEXT FOR after it would otherwise make it on its
        // path), by a one-shot one only for the CONTEXT FOR that reads it.
        if let Some(g) = &generation
            && (check || !self.snapshots_only)
        {
            check_in_background(g, earlier, !check);
        }
        held.retain(|h| h.key != key);
        held.insert(
            0,
            Held {
                key: key.clone(),
                generation: generation.clone(),
                built,
                standing: standing.clone(),
                files: files.clone(),
            },
        );
        bound(&mut held, budget);
        Ok(generation.map(|generation| Keyed {
            key,
            generation,
            standing,
            files,
        }))
    }

    /// Counts a CONTEXT FOR decided from a generation.
    pub(crate) fn answered_context(&self) {
        self.contexts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The CONTEXT FORs decided from a generation so far (the rest took the Parquet plan).
    pub fn contexts_answered(&self) -> u64 {
        self.contexts.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The generations made so far by refreshing an earlier one (the others were built whole
    /// or read from a snapshot file).
    pub fn refreshes(&self) -> u64 {
        self.refreshes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A holder of generations read from snapshot files only (see [`Resident::write_snapshot`]).
    pub fn snapshots_only() -> Resident {
        Resident {
            snapshots_only: true,
            ..Default::default()
        }
    }

    /// Writes the snapshot file of the generation of the tables as an unrestricted caller
    /// reads them (built unless held), so a new process opens it instead of building it, and
    /// removes the snapshot files of other versions of the tables. `None` when no generation
    /// can stand for the tables (or the caller is restricted); else the file's name under the
    /// root, its bytes and the generation's objects and terms.
    pub(crate) async fn write_snapshot(
        &self,
        ctx: &SessionContext,
        catalog: &dyn Catalog,
        exec: &Executor,
    ) -> Result<Option<Snapshot>> {
        let before = self.refreshes();
        let Some(Keyed {
            key,
            generation,
            files,
            ..
        }) = Box::pin(self.keyed(ctx, catalog, exec, true, true, false)).await?
        else {
            return Ok(None);
        };
        // The key holds each table's fingerprint, then the caller's restriction of it.
        if key.iter().skip(1).step_by(2).any(|r| r != "None") {
            return Ok(None);
        }
        let root = catalog.dataset().root();
        let name = snapshot_name(&key);
        let io = |e: signalql_catalog::StorageError| crate::error::Error::io(e.to_string());
        let names = root.list_names(SNAPSHOTS).map_err(io)?;
        let file = name.strip_prefix(&format!("{SNAPSHOTS}/")).unwrap_or(&name);
        // A file already under the name stands unless it cannot be opened for the key (cut
        // short or damaged): then it is written again.
        let standing = names.iter().find(|(n, _)| n == file).map(|(_, size)| *size);
        let whole = || load_snapshot(root, &key).is_some_and(|g| g.whole());
        let size = match standing.filter(|_| whole()) {
            Some(size) => size,
            None => {
                let facts = super::from_index::kept_facts(&generation);
                let representations = catalog.table(ctx, REPRESENTATIONS).await?;
                let keys = catalog
                    .dataset()
                    .content_files()
                    .keep(&representations.files);
                let mut kept: Vec<(&str, &[u8])> = Vec::new();
                if let Some(f) = &facts {
                    kept.push((super::from_index::FACTS, f));
                }
                if let Some(k) = &keys {
                    kept.push((KEYS, k));
                }
                let files = serde_json::to_vec(&files)
                    .map_err(|e| crate::error::Error::io(e.to_string()))?;
                kept.push((FILES, &files));
                let file = generation.snapshot(&key, &kept)?;
                root.delete(&name).map_err(io)?;
                root.put_new_with(&name, |w| file.write(w)).map_err(io)?;
                file.len()
            }
        };
        for (other, _) in names {
            let rel = format!("{SNAPSHOTS}/{other}");
            if rel != name && other.ends_with(".snapshot") {
                root.delete(&rel).map_err(io)?;
            }
        }
        Ok(Some(Snapshot {
            name,
            bytes: size,
            objects: generation.objects(),
            terms: generation.term_count(),
            refreshed: self.refreshes() > before,
        }))
    }

    /// What is held now: each generation's objects, terms and memory (the most recently
    /// used first), their memory in all, and the CONTEXT FORs decided from one so far; with
    /// `content_files_bytes`, what the dataset keeps to read content by locator.
    pub async fn report(&self, content_files_bytes: u64) -> ResidentReport {
        let held = self.held.lock().await;
        let generations: Vec<HeldGeneration> = held
            .iter()
            .filter_map(|h| h.generation.as_ref())
            .map(|g| HeldGeneration {
                objects: g.objects() as u64,
                terms: g.term_count() as u64,
                memory_bytes: g.memory_bytes() as u64,
            })
            .collect();
        ResidentReport {
            memory_bytes: generations.iter().map(|g| g.memory_bytes).sum(),
            generations,
            content_files_bytes,
            contexts_answered: self.contexts_answered(),
        }
    }
}

/// The resident context index a process holds (`signalql stats`, the MCP `stats` tool;
/// docs/index.md, "Memory").
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ResidentReport {
    /// The generations' memory, in all.
    pub memory_bytes: u64,
    pub generations: Vec<HeldGeneration>,
    /// What the dataset keeps to read packed content by locator (footers and key hashes of
    /// the representations' files).
    pub content_files_bytes: u64,
    pub contexts_answered: u64,
}

/// A generation held: its objects, terms and memory.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HeldGeneration {
    pub objects: u64,
    pub terms: u64,
    pub memory_bytes: u64,
}

/// `columns` of the table `t`, read as the Parquet plan reads it.
fn read(t: &TableInfo, columns: &[&str]) -> Result<LogicalPlan> {
    let b = scan(t, &t.name, vec![])?;
    Ok(project(b, columns.iter().map(|c| col(*c)).collect())?.build()?)
}

/// Every row of `plan`, in one batch.
async fn collect_one(exec: &Executor, plan: &LogicalPlan) -> Result<RecordBatch> {
    let batches = collect(exec, plan).await?;
    let schema: SchemaRef = Arc::new(plan.schema().as_arrow().clone());
    Ok(concat_batches(&schema, &batches)?)
}

/// A generation of `tables` (objects, revisions, representations, then the graph tables
/// that can be held), `None` when it cannot stand for them. Representations are read batch by
/// batch: only their terms and metadata are kept.
async fn build_generation(
    exec: &Executor,
    tables: &[(TableInfo, &[&str])],
    graph_held: bool,
) -> Result<Option<Generation>> {
    let [(objects, oc), (revisions, rc), (reps, pc), graph @ ..] = tables else {
        return Ok(None);
    };
    let objects = collect_one(exec, &read(objects, oc)?).await?;
    let revisions = collect_one(exec, &read(revisions, rc)?).await?;
    let Some(mut builder) = Builder::new(&objects, &revisions)? else {
        return Ok(None);
    };
    let mut standing = true;
    exec.for_each_batch(&read(reps, pc)?, |b| {
        standing = standing && builder.add_representations(b)?;
        Ok(())
    })
    .await?;
    // A graph table that cannot be held leaves no edges.
    if !graph_held {
        builder.no_edges();
    }
    for (t, columns) in graph {
        let links = t.name == LINKS;
        exec.for_each_batch(&read(t, columns)?, |b| {
            builder.add_edges(b, links);
            Ok(())
        })
        .await?;
    }
    match standing {
        true => Ok(Some(builder.finish()?)),
        false => Ok(None),
    }
}

/// The generation of `tables` refreshed from `base`, the generation of an earlier version of
/// them whose files are all still there (`added`: per table, which files are new); `None`
/// when it cannot be (the caller builds the whole). Reads the new files' rows, then the
/// earlier rows of only the objects they name that the earlier files name too, and builds a
/// generation of those objects to merge into the base (catalog
/// `objects/resident/refresh.rs`).
async fn refresh(
    exec: &Executor,
    tables: &[(TableInfo, &[&str])],
    added: &[Vec<bool>],
    graph_held: bool,
    base: &Arc<Generation>,
) -> Result<Option<Generation>> {
    let part = |t: &TableInfo, new: &[bool], which: bool| {
        let locations: std::collections::HashSet<&str> = t
            .files
            .iter()
            .zip(new)
            .filter(|(_, n)| **n == which)
            .map(|((l, _), _)| l.as_str())
            .collect();
        t.only_files(|l| locations.contains(l))
    };
    // The new files' rows, per table.
    let mut fresh: Vec<Vec<RecordBatch>> = Vec::with_capacity(tables.len());
    for ((t, columns), new) in tables.iter().zip(added) {
        fresh.push(match part(t, new, true) {
            Some(t) => collect(exec, &read(&t, columns)?).await?,
            None => Vec::new(),
        });
    }
    let mut touched: std::collections::HashSet<String> = std::collections::HashSet::new();
    for b in fresh.iter().flatten() {
        let Some(ids) = b
            .column_by_name("object_id")
            .and_then(|c| signalql_udfs::strings::StringColumn::try_new(c.as_ref()).ok())
        else {
            return Ok(None);
        };
        touched.extend(
            (0..b.num_rows())
                .filter_map(|r| ids.get(r))
                .map(str::to_string),
        );
    }
    // The earlier rows of the touched objects the earlier files name.
    let mut earlier: Vec<&str> = touched
        .iter()
        .map(String::as_str)
        .filter(|id| base.names(id))
        .collect();
    earlier.sort_unstable();
    let mut rows = fresh;
    if !earlier.is_empty() {
        let list: Vec<Expr> = earlier.iter().map(|id| lit(*id)).collect();
        for (((t, columns), new), rows) in tables.iter().zip(added).zip(rows.iter_mut()) {
            let Some(t) = part(t, new, false) else {
                continue;
            };
            let plan = LogicalPlanBuilder::from(read(&t, columns)?)
                .filter(col("object_id").in_list(list.clone(), false))?
                .build()?;
            rows.extend(collect(exec, &plan).await?);
        }
    }
    let [objects, revisions, reps, graph @ ..] = &rows[..] else {
        return Ok(None);
    };
    let one = |i: usize, batches: &[RecordBatch]| -> Result<RecordBatch> {
        let schema: SchemaRef =
            Arc::new(read(&tables[i].0, tables[i].1)?.schema().as_arrow().clone());
        Ok(concat_batches(&schema, batches)?)
    };
    let Some(mut builder) = Builder::new(&one(0, objects)?, &one(1, revisions)?)? else {
        return Ok(None);
    };
    for b in reps {
        if !builder.add_representations(b)? {
            return Ok(None);
        }
    }
    if !graph_held {
        builder.no_edges();
    }
    for ((t, _), batches) in tables[3..].iter().zip(graph) {
        for b in batches {
            builder.add_edges(b, t.name == LINKS);
        }
    }
    let delta = builder.finish()?;
    Ok(base.refreshed(&Arc::new(delta), &touched)?)
}

/// Every batch of `plan`.
async fn collect(exec: &Executor, plan: &LogicalPlan) -> Result<Vec<RecordBatch>> {
    let mut batches = Vec::new();
    exec.for_each_batch(plan, |b| {
        batches.push(b.clone());
        Ok(())
    })
    .await?;
    Ok(batches)
}

/// FIND OBJECT's rows from a generation, as a table: the top-k is computed when the scan is
/// planned, so a cached plan answers from the generation it was made with (the plan cache
/// checks the tables' files are unchanged).
#[derive(Debug)]
struct FindScan {
    generation: Arc<Generation>,
    terms: Option<Vec<String>>,
    kind: Option<String>,
    t: i64,
    fetch: Option<usize>,
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for FindScan {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let batch = self
            .generation
            .find(&Find {
                terms: self.terms.as_deref(),
                kind: self.kind.as_deref(),
                t: self.t,
                fetch: self.fetch,
            })
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            Arc::clone(&self.schema),
            projection.cloned(),
        )?)
    }
}

/// FIND OBJECT's candidates from `generation` as a data frame of `ctx`: the objects live at
/// `t` (of `kind`), with `about` those scoring above 0 with their `score`; the first `fetch`
/// in the answer's order when given (the caller still sorts and limits).
pub(crate) fn find_frame(
    ctx: &SessionContext,
    generation: Arc<Generation>,
    about: Option<Vec<String>>,
    kind: Option<&str>,
    t: i64,
    fetch: Option<usize>,
) -> Result<DataFrame> {
    let schema = generation.find_schema(about.is_some());
    let scan = FindScan {
        generation,
        terms: about,
        kind: kind.map(str::to_string),
        t,
        fetch,
        schema,
    };
    let plan =
        LogicalPlanBuilder::scan(RESIDENT_OBJECTS, provider_as_source(Arc::new(scan)), None)?
            .build()?;
    Ok(DataFrame::new(ctx.state(), plan))
}
