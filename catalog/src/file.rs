//! Local files that appear whole: created where nothing is yet, or renamed over their target.
//!
//! Both write a temporary file beside the target and fsync it first. [`replace`] renames it
//! over the target (`--out`, `--plot`); its temporary file is tempfile's `.tmpXXXXXX`, so the
//! file gets tempfile's mode (0600 on Unix), as those files always have.
//!
//! Every local create-new write of a dataset root (Parquet parts, `signalql.toml`,
//! `metrics.toml`, the context store) goes through [`NewFile`]: a hidden temporary file
//! `.{name}.tmp-<pid>-<nanos>-<n>` in the target's folder (so a reader listing `*.parquet`
//! never sees it), fsynced, then hard-linked to the target, which fails if anything is there,
//! even a file a concurrent writer has just made. On a filesystem without hard links the
//! target is checked and the temporary file renamed to it (a narrow race remains). The folder
//! is fsynced after a file is created, and the temporary name is removed on every path.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A file operation that failed, and the file or folder it was on.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct FileError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

impl FileError {
    fn at(path: &Path) -> impl FnOnce(io::Error) -> FileError + '_ {
        move |source| FileError {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A new file being written under a hidden temporary name beside its target. [`publish`]
/// moves it into place unless something is there already; dropped unpublished, the temporary
/// file is removed.
///
/// [`publish`]: NewFile::publish
pub struct NewFile {
    file: File,
    tmp: TempPath,
    target: PathBuf,
}

/// A temporary file's name, removed when dropped (a no-op once it has been renamed away).
struct TempPath(PathBuf);

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The folder `target` is in (`.` for a bare file name).
fn folder(target: &Path) -> &Path {
    match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Whether anything (a file, a folder, a symbolic link, even a dangling one) is at `path`.
fn occupied(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

impl NewFile {
    /// Opens a hidden temporary file beside `target` (whose folder is created if needed).
    pub fn create(target: &Path) -> Result<NewFile, FileError> {
        let dir = folder(target);
        std::fs::create_dir_all(dir).map_err(FileError::at(dir))?;
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.tmp-{}-{nanos}-{n}", std::process::id()));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(FileError::at(&tmp))?;
        Ok(NewFile {
            file,
            tmp: TempPath(tmp),
            target: target.to_path_buf(),
        })
    }

    /// The path the file gets when published.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Fsyncs the file and gives it its target name unless something is there; returns whether
    /// it did (false: the target was left as it was, and what was written is dropped).
    pub fn publish(self) -> Result<bool, FileError> {
        self.publish_with(|from, to| std::fs::hard_link(from, to))
    }

    fn publish_with(
        self,
        link: impl FnOnce(&Path, &Path) -> io::Result<()>,
    ) -> Result<bool, FileError> {
        let NewFile { file, tmp, target } = self;
        file.sync_all().map_err(FileError::at(&tmp.0))?;
        drop(file);
        let created = match link(&tmp.0, &target) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            // Filesystems without hard links: check, then rename (a narrow race remains).
            Err(_) if occupied(&target) => false,
            Err(_) => {
                std::fs::rename(&tmp.0, &target).map_err(FileError::at(&target))?;
                true
            }
        };
        drop(tmp);
        if created {
            sync_dir(folder(&target));
        }
        Ok(created)
    }
}

impl Write for NewFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.file.write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Creates the file `target` with what `write` writes, unless something is there already:
/// then nothing is written and the answer is false. See [`NewFile`].
pub fn create_new(
    target: &Path,
    write: impl FnOnce(&mut NewFile) -> io::Result<()>,
) -> Result<bool, FileError> {
    if occupied(target) {
        return Ok(false);
    }
    let mut file = NewFile::create(target)?;
    if let Err(e) = write(&mut file) {
        return Err(FileError::at(&file.tmp.0)(e));
    }
    file.publish()
}

/// Writes the file `target` with what `write` writes, replacing any file there: a temporary
/// file beside it, fsynced and renamed over it, so `target` is never half-written. Every error
/// names `target`.
pub fn replace(
    target: &Path,
    write: impl FnOnce(&mut File) -> io::Result<()>,
) -> Result<(), FileError> {
    let at = FileError::at(target);
    let dir = folder(target);
    let written = (|| {
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        write(tmp.as_file_mut())?;
        tmp.as_file().sync_all()?;
        tmp.persist(target)
            .map_err(|e| io::Error::new(e.error.kind(), e.to_string()))?;
        Ok(())
    })();
    written.map_err(at)?;
    sync_dir(dir);
    Ok(())
}

/// Makes a new name in `dir` durable (best effort: not every platform can fsync a folder).
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The names in `dir`, sorted (the write tests use it too).
    pub(crate) fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn create_new_writes_the_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("a/b/x.json");
        assert!(create_new(&target, |f| f.write_all(b"one")).unwrap());
        assert_eq!(std::fs::read(&target).unwrap(), b"one");
        assert_eq!(names(target.parent().unwrap()), ["x.json"]);
    }

    #[test]
    fn create_new_leaves_an_existing_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("x.json");
        std::fs::write(&target, "old").unwrap();
        let created = create_new(&target, |_| panic!("nothing is written")).unwrap();
        assert!(!created);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "old");
        assert_eq!(names(dir.path()), ["x.json"]);
    }

    #[test]
    fn a_target_made_while_writing_wins() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("x.json");
        let mut file = NewFile::create(&target).unwrap();
        file.write_all(b"ours").unwrap();
        let during = names(dir.path());
        assert_eq!(during.len(), 1);
        assert!(during[0].starts_with(".x.json.tmp-"), "{during:?}");
        std::fs::write(&target, "theirs").unwrap();
        assert!(!file.publish().unwrap());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "theirs");
        assert_eq!(names(dir.path()), ["x.json"]);
    }

    #[test]
    fn failed_writes_and_drops_remove_the_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("x.json");
        let e = create_new(&target, |f| {
            f.write_all(b"half")?;
            Err(io::Error::other("disk full"))
        })
        .unwrap_err();
        assert!(e.to_string().ends_with(": disk full"), "{e}");
        assert!(names(dir.path()).is_empty());
        drop(NewFile::create(&target).unwrap());
        assert!(names(dir.path()).is_empty());
    }

    #[test]
    fn without_hard_links_the_temporary_is_renamed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("x.json");
        let no_links = |_: &Path, _: &Path| Err(io::Error::from(io::ErrorKind::Unsupported));
        let mut file = NewFile::create(&target).unwrap();
        file.write_all(b"one").unwrap();
        assert!(file.publish_with(no_links).unwrap());
        assert_eq!(std::fs::read(&target).unwrap(), b"one");
        let mut file = NewFile::create(&target).unwrap();
        file.write_all(b"two").unwrap();
        assert!(!file.publish_with(no_links).unwrap());
        assert_eq!(std::fs::read(&target).unwrap(), b"one");
        assert_eq!(names(dir.path()), ["x.json"]);
    }

    #[test]
    fn replace_writes_over_the_target_or_leaves_it_whole() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.svg");
        replace(&target, |f| f.write_all(b"one")).unwrap();
        replace(&target, |f| f.write_all(b"two")).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"two");
        let e = replace(&target, |f| {
            f.write_all(b"th")?;
            Err(io::Error::other("no"))
        })
        .unwrap_err();
        assert_eq!(e.path, target);
        assert_eq!(std::fs::read(&target).unwrap(), b"two");
        assert_eq!(names(dir.path()), ["out.svg"]);
    }
}
