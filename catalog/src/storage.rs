//! Where a dataset lives: a local folder, or an S3 prefix (`s3://bucket/prefix`), and the few
//! operations the catalog needs on it: read a small file, list a table's Parquet files, hand
//! DataFusion a table URL (and the object store behind it), and create a file that must not
//! exist yet. See docs/s3.md.
//!
//! Writes are all-or-nothing on both: a local file is written under a hidden temporary name
//! and hard-linked into place ([`crate::file::create_new`]); an S3 object is one PUT with
//! `If-None-Match: *`, which S3 makes visible whole or not at all and refuses when the key
//! exists.
//!
//! S3 requests run on a small runtime the root owns (the client's connections live there),
//! whichever runtime asks: DataFusion's scans, and the synchronous reads of `signalql.toml`,
//! `metrics.toml` and the context store. Every request has a connect timeout, a request
//! timeout and a bounded number of retries, so a wrong endpoint fails in seconds.

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use datafusion::prelude::SessionContext;
use futures::TryStreamExt;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ClientConfigKey, ObjectStore, ObjectStoreExt, PutMode, PutOptions, RetryConfig,
};

/// A storage operation that failed, and where.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{location}: {message}")]
pub struct StorageError {
    /// The file, object or root involved (`s3://bucket/prefix/events/`, a local path).
    pub location: String,
    pub message: String,
}

impl From<crate::file::FileError> for StorageError {
    fn from(e: crate::file::FileError) -> Self {
        StorageError {
            location: e.path.display().to_string(),
            message: e.source.to_string(),
        }
    }
}

/// A file found under a table folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedFile {
    /// The canonical local path, or the object key.
    pub location: String,
    pub size: u64,
    /// Why the name cannot be read as a file (a dangling symbolic link), if it cannot.
    pub broken: Option<String>,
    /// What changes when the file is rewritten: the modification time locally, the ETag
    /// (else the modification time) on S3. Part of a table's fingerprint.
    pub version: Option<String>,
    /// The modification time (DataFusion's footer cache is checked against it).
    pub modified: Option<chrono::DateTime<chrono::Utc>>,
}

/// S3 settings beyond the environment. The client is configured by the AWS environment
/// variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`,
/// `AWS_ALLOW_HTTP`, …), then by `s3` (an application's own settings), then by `s3_endpoint`.
#[derive(Debug, Clone, Default)]
pub struct StorageOptions {
    /// The S3 endpoint (`--s3-endpoint`); overrides `AWS_ENDPOINT_URL`.
    pub s3_endpoint: Option<String>,
    /// object_store S3 settings by key (`aws_access_key_id`, `aws_allow_http`, …).
    pub s3: Vec<(String, String)>,
}

/// Connect timeout of an S3 request (unless the environment sets `AWS_CONNECT_TIMEOUT`).
pub const S3_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Timeout of one S3 request, connect to last byte (unless `AWS_TIMEOUT` is set).
pub const S3_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Retries of a failed S3 request, and how long retrying may go on in all.
pub const S3_MAX_RETRIES: usize = 3;
pub const S3_RETRY_TIMEOUT: Duration = Duration::from_secs(15);

/// A dataset root.
#[derive(Clone)]
pub enum Root {
    Local(PathBuf),
    S3(Arc<S3Root>),
}

/// An S3 prefix with its client.
pub struct S3Root {
    /// `s3://bucket`
    bucket_url: String,
    /// The key prefix of the dataset, without slashes at either end (may be empty).
    prefix: String,
    store: Arc<dyn ObjectStore>,
    io: IoRuntime,
}

impl fmt::Debug for Root {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

impl From<&Path> for Root {
    fn from(p: &Path) -> Self {
        Root::Local(p.to_path_buf())
    }
}

impl From<&PathBuf> for Root {
    fn from(p: &PathBuf) -> Self {
        Root::Local(p.clone())
    }
}

impl From<&Root> for Root {
    fn from(r: &Root) -> Self {
        r.clone()
    }
}

impl From<PathBuf> for Root {
    fn from(p: PathBuf) -> Self {
        Root::Local(p)
    }
}

impl Root {
    /// A root named by the user: `s3://bucket[/prefix]`, or a local folder. Other URL schemes
    /// are refused rather than read as a relative folder name. Does not touch the storage.
    pub fn parse(text: &str, options: &StorageOptions) -> Result<Root, RootError> {
        if let Some(rest) = text.strip_prefix("s3://") {
            return S3Root::new(rest, options).map(|r| Root::S3(Arc::new(r)));
        }
        if let Some((scheme, _)) = text.split_once("://")
            && !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '+')
        {
            return Err(RootError::Unsupported(format!(
                "{scheme}:// dataset roots are not supported (local folders and s3:// are)"
            )));
        }
        Ok(Root::Local(PathBuf::from(text)))
    }

    /// The root as the user would write it.
    pub fn display(&self) -> String {
        match self {
            Root::Local(p) => p.display().to_string(),
            Root::S3(s) => s.url(""),
        }
    }

    /// `rel` (a `/`-separated path under the root) as the user would write it.
    pub fn display_of(&self, rel: &str) -> String {
        match self {
            Root::Local(p) => p.join(rel).display().to_string(),
            Root::S3(s) => s.url(rel),
        }
    }

    /// The local folder, for a local root.
    pub fn local(&self) -> Option<&Path> {
        match self {
            Root::Local(p) => Some(p),
            Root::S3(_) => None,
        }
    }

    /// Whether the root exists: a folder, or an S3 prefix with at least one object (an error
    /// when the bucket is missing or the endpoint cannot be reached).
    pub fn exists(&self) -> Result<bool, StorageError> {
        match self {
            Root::Local(p) => Ok(p.is_dir()),
            Root::S3(s) => s.block(&s.url(""), {
                let store = Arc::clone(&s.store);
                let prefix = s.key("");
                async move {
                    let mut listing = store.list(Some(&prefix));
                    Ok(listing.try_next().await?.is_some())
                }
            }),
        }
    }

    /// The bytes of the file `rel`, or None when there is none.
    pub fn read(&self, rel: &str) -> Result<Option<Vec<u8>>, StorageError> {
        match self {
            Root::Local(p) => {
                let path = p.join(rel);
                match std::fs::read(&path) {
                    Ok(b) => Ok(Some(b)),
                    // A folder on the way is a file: nothing is stored under it either.
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                        ) =>
                    {
                        Ok(None)
                    }
                    Err(e) => Err(local_error(&path, e)),
                }
            }
            Root::S3(s) => s.block(&s.url(rel), {
                let store = Arc::clone(&s.store);
                let key = s.key(rel);
                async move {
                    match store.get(&key).await {
                        Ok(r) => Ok(Some(r.bytes().await?.to_vec())),
                        Err(object_store::Error::NotFound { .. }) => Ok(None),
                        Err(e) => Err(e),
                    }
                }
            }),
        }
    }

    /// The bytes of a file named by its location, as [`Root::parquet_files`] gives it.
    pub fn read_location(&self, location: &str) -> Result<bytes::Bytes, StorageError> {
        match self {
            Root::Local(_) => std::fs::read(location)
                .map(bytes::Bytes::from)
                .map_err(|e| local_error(Path::new(location), e)),
            Root::S3(s) => s.block(&format!("{}/{location}", s.bucket_url), {
                let store = Arc::clone(&s.store);
                let key = ObjectPath::from(location);
                async move { store.get(&key).await?.bytes().await }
            }),
        }
    }

    /// The Parquet files under the folder `rel` (recursively, so hive partitions work), sorted
    /// by location, or None when the folder does not exist or holds nothing. Names starting
    /// with `.` or `_` (temporaries, markers) are skipped. A location is what a scan reports as
    /// the file's name: the canonical local path, or the object key. A name that cannot be
    /// read as a file (a dangling symbolic link) is listed with why.
    pub fn parquet_files(&self, rel: &str) -> Result<Option<Vec<ListedFile>>, StorageError> {
        let mut out = match self {
            Root::Local(p) => {
                let dir = p.join(rel);
                if !dir.is_dir() {
                    return Ok(None);
                }
                let dir = std::fs::canonicalize(&dir).map_err(|e| local_error(&dir, e))?;
                local_parquet_files(&dir)?
            }
            Root::S3(s) => s.block(&s.url(&format!("{rel}/")), {
                let store = Arc::clone(&s.store);
                let prefix = s.key(rel);
                async move {
                    let objects: Vec<_> = store.list(Some(&prefix)).try_collect().await?;
                    Ok(objects
                        .into_iter()
                        .filter(|m| {
                            let below = m.location.prefix_match(&prefix);
                            let hidden = below.into_iter().flatten().any(|part| {
                                part.as_ref().starts_with('.') || part.as_ref().starts_with('_')
                            });
                            !hidden && m.location.as_ref().ends_with(".parquet")
                        })
                        .map(|m| ListedFile {
                            location: m.location.to_string(),
                            size: m.size,
                            broken: None,
                            version: Some(
                                m.e_tag
                                    .clone()
                                    .unwrap_or_else(|| m.last_modified.to_rfc3339()),
                            ),
                            modified: Some(m.last_modified),
                        })
                        .collect::<Vec<_>>())
                }
            })?,
        };
        out.sort_by(|a, b| a.location.cmp(&b.location));
        Ok((!out.is_empty()).then_some(out))
    }

    /// The names and sizes of the files directly in the folder `rel` (none when it does not
    /// exist), sorted by name.
    pub fn list_names(&self, rel: &str) -> Result<Vec<(String, u64)>, StorageError> {
        let mut out = match self {
            Root::Local(p) => {
                let dir = p.join(rel);
                let entries = match std::fs::read_dir(&dir) {
                    Ok(e) => e,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                    Err(e) => return Err(local_error(&dir, e)),
                };
                let mut out = Vec::new();
                for entry in entries {
                    let entry = entry.map_err(|e| local_error(&dir, e))?;
                    if let Ok(meta) = entry.metadata()
                        && meta.is_file()
                    {
                        out.push((entry.file_name().to_string_lossy().into_owned(), meta.len()));
                    }
                }
                out
            }
            Root::S3(s) => s.block(&s.url(&format!("{rel}/")), {
                let store = Arc::clone(&s.store);
                let prefix = s.key(rel);
                async move {
                    let listing = store.list_with_delimiter(Some(&prefix)).await?;
                    Ok(listing
                        .objects
                        .into_iter()
                        .filter_map(|m| Some((m.location.filename()?.to_string(), m.size)))
                        .collect::<Vec<_>>())
                }
            })?,
        };
        out.sort();
        Ok(out)
    }

    /// Removes the file `rel`; a file that is not there is not an error.
    pub fn delete(&self, rel: &str) -> Result<(), StorageError> {
        match self {
            Root::Local(p) => {
                let path = p.join(rel);
                match std::fs::remove_file(&path) {
                    Ok(()) => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(local_error(&path, e)),
                }
            }
            Root::S3(s) => s.block(&s.url(rel), {
                let store = Arc::clone(&s.store);
                let key = s.key(rel);
                async move {
                    match store.delete(&key).await {
                        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                        Err(e) => Err(e),
                    }
                }
            }),
        }
    }

    /// A location ([`Root::parquet_files`]) relative to the root, `/`-separated, as errors
    /// name a file (`events/part-0.parquet`).
    pub fn relative(&self, location: &str) -> String {
        let below = match self {
            Root::Local(p) => std::fs::canonicalize(p).ok().and_then(|root| {
                Path::new(location)
                    .strip_prefix(&root)
                    .ok()
                    .map(|r| r.to_string_lossy().replace('\\', "/"))
            }),
            Root::S3(s) => {
                let prefix = format!("{}/", s.prefix);
                if s.prefix.is_empty() {
                    Some(location.to_string())
                } else {
                    location.strip_prefix(&prefix).map(str::to_string)
                }
            }
        };
        below.unwrap_or_else(|| location.to_string())
    }

    /// The URL of a location, as DataFusion reads one file (`/abs/path`, `s3://bucket/key`).
    pub fn location_url(&self, location: &str) -> String {
        match self {
            Root::Local(_) => location.to_string(),
            Root::S3(s) => format!("{}/{location}", s.bucket_url),
        }
    }

    /// The URL DataFusion lists the table folder `rel` at (with a trailing `/`).
    pub fn table_url(&self, rel: &str) -> Result<String, StorageError> {
        match self {
            Root::Local(p) => {
                let dir = p.join(rel);
                let dir = std::fs::canonicalize(&dir).map_err(|e| local_error(&dir, e))?;
                Ok(format!("{}/", dir.display()))
            }
            Root::S3(s) => Ok(s.url(&format!("{rel}/"))),
        }
    }

    /// The URL of the folder `rel` for a reader that opens it itself (Delta), and the object
    /// store it is read through on S3 (rooted at the bucket).
    pub fn folder_location(
        &self,
        rel: &str,
    ) -> Result<(String, Option<Arc<dyn ObjectStore>>), StorageError> {
        match self {
            Root::Local(p) => {
                let dir = p.join(rel);
                let dir = std::fs::canonicalize(&dir).map_err(|e| local_error(&dir, e))?;
                Ok((format!("file://{}/", dir.display()), None))
            }
            Root::S3(s) => Ok((s.url(&format!("{rel}/")), Some(Arc::clone(&s.store)))),
        }
    }

    /// The object store of an S3 root; `None` for a local folder.
    pub fn object_store(&self) -> Option<Arc<dyn ObjectStore>> {
        match self {
            Root::Local(_) => None,
            Root::S3(s) => Some(Arc::clone(&s.store)),
        }
    }

    /// Makes the root's object store known to `ctx` (S3 roots; a no-op for local folders).
    pub fn register(&self, ctx: &SessionContext) -> Result<(), StorageError> {
        if let Root::S3(s) = self {
            let url = datafusion::datasource::listing::ListingTableUrl::parse(&s.bucket_url)
                .map_err(|e| s.error("", e))?;
            ctx.register_object_store(url.object_store().as_ref(), Arc::clone(&s.store));
        }
        Ok(())
    }

    /// [`put_new`](Self::put_new) with what `write` writes: on a local root the bytes go to the
    /// file as they are written (never all held at once); on S3 they are gathered, then put.
    pub fn put_new_with(
        &self,
        rel: &str,
        write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> Result<bool, StorageError> {
        match self {
            Root::Local(p) => {
                use std::io::Write;
                let created = crate::file::create_new(&p.join(rel), |f| {
                    let mut buffered = std::io::BufWriter::with_capacity(1 << 20, f);
                    write(&mut buffered)?;
                    buffered.flush()
                })?;
                Ok(created)
            }
            Root::S3(s) => {
                let mut bytes = Vec::new();
                write(&mut bytes).map_err(|e| StorageError {
                    location: s.url(rel),
                    message: e.to_string(),
                })?;
                self.put_new(rel, bytes)
            }
        }
    }

    /// Creates the file `rel` with `bytes` unless it exists; returns whether this call created
    /// it. The file appears whole or not at all, and an existing file is never replaced.
    pub fn put_new(&self, rel: &str, bytes: Vec<u8>) -> Result<bool, StorageError> {
        match self {
            Root::Local(p) => {
                use std::io::Write;
                let created = crate::file::create_new(&p.join(rel), |f| f.write_all(&bytes))?;
                Ok(created)
            }
            Root::S3(s) => s.block(&s.url(rel), {
                let store = Arc::clone(&s.store);
                let key = s.key(rel);
                async move {
                    let opts = PutOptions::from(PutMode::Create);
                    match store.put_opts(&key, bytes.into(), opts).await {
                        Ok(_) => Ok(true),
                        Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
                        Err(e) => Err(e),
                    }
                }
            }),
        }
    }
}

/// Why a root could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    #[error("{0}")]
    Unsupported(String),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl S3Root {
    fn new(rest: &str, options: &StorageOptions) -> Result<S3Root, RootError> {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let url = format!("s3://{rest}");
        let bad = |message: String| StorageError {
            location: url.clone(),
            message,
        };
        if bucket.is_empty() {
            return Err(bad("an S3 root needs a bucket: s3://bucket/prefix".into()).into());
        }
        // The environment, then the explicit options, then our defaults where neither spoke.
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
        for (key, value) in &options.s3 {
            let key: AmazonS3ConfigKey = key
                .to_ascii_lowercase()
                .parse()
                .map_err(|_| bad(format!("unknown S3 option {key:?}")))?;
            builder = builder.with_config(key, value);
        }
        if let Some(endpoint) = &options.s3_endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        let get = |b: &AmazonS3Builder, k: AmazonS3ConfigKey| b.get_config_value(&k);
        let client = |k| AmazonS3ConfigKey::Client(k);
        for (key, value) in [
            (AmazonS3ConfigKey::Region, "us-east-1".to_string()),
            (
                client(ClientConfigKey::ConnectTimeout),
                format!("{}s", S3_CONNECT_TIMEOUT.as_secs()),
            ),
            (
                client(ClientConfigKey::Timeout),
                format!("{}s", S3_REQUEST_TIMEOUT.as_secs()),
            ),
        ] {
            let unset = get(&builder, key).is_none()
                && (key != AmazonS3ConfigKey::Region
                    || get(&builder, AmazonS3ConfigKey::DefaultRegion).is_none());
            if unset {
                builder = builder.with_config(key, value);
            }
        }
        let endpoint = get(&builder, AmazonS3ConfigKey::Endpoint);
        let allow_http =
            get(&builder, client(ClientConfigKey::AllowHttp)).is_some_and(|v| v == "true");
        if let Some(e) = &endpoint
            && e.starts_with("http://")
            && !allow_http
        {
            return Err(bad(format!(
                "the S3 endpoint {e} is plain HTTP: set AWS_ALLOW_HTTP=true to allow it"
            ))
            .into());
        }
        let signed = get(&builder, AmazonS3ConfigKey::SkipSignature).is_none_or(|v| v != "true");
        let has_keys = get(&builder, AmazonS3ConfigKey::AccessKeyId).is_some();
        let other_credentials = [
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        ]
        .iter()
        .any(|k| std::env::var_os(k).is_some());
        if signed && !has_keys && !other_credentials {
            // Without this, the client would go looking for instance-metadata credentials.
            return Err(bad(
                "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
                 (or AWS_SKIP_SIGNATURE=true for a public bucket)"
                    .into(),
            )
            .into());
        }
        let io = IoRuntime::new().map_err(|e| bad(format!("cannot start the S3 client: {e}")))?;
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: S3_MAX_RETRIES,
            retry_timeout: S3_RETRY_TIMEOUT,
        };
        let store = builder
            .with_retry(retry)
            .with_http_connector(object_store::client::SpawnedReqwestConnector::new(
                io.handle(),
            ))
            .build()
            .map_err(|e| bad(e.to_string()))?;
        Ok(S3Root {
            bucket_url: format!("s3://{bucket}"),
            prefix: prefix.trim_matches('/').to_string(),
            store: Arc::new(store),
            io,
        })
    }

    /// `s3://bucket/prefix/rel`
    fn url(&self, rel: &str) -> String {
        let mut out = self.bucket_url.clone();
        for part in [self.prefix.as_str(), rel] {
            if !part.is_empty() {
                out.push('/');
                out.push_str(part);
            }
        }
        out
    }

    /// The object key of `rel`.
    fn key(&self, rel: &str) -> ObjectPath {
        let joined = match (self.prefix.is_empty(), rel.is_empty()) {
            (true, _) => rel.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{rel}", self.prefix),
        };
        ObjectPath::from(joined.trim_matches('/'))
    }

    fn error(&self, location: &str, e: impl fmt::Display) -> StorageError {
        StorageError {
            location: if location.is_empty() {
                self.url("")
            } else {
                location.to_string()
            },
            message: e.to_string(),
        }
    }

    /// Runs `request` on the client's runtime and waits for it (from async code too: the
    /// caller's thread only waits).
    fn block<T: Send + 'static>(
        &self,
        location: &str,
        request: impl Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> Result<T, StorageError> {
        let handle = self.io.handle().spawn(request);
        match futures::executor::block_on(handle) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.error(location, describe(&e))),
            Err(e) => Err(self.error(location, format!("the S3 request failed: {e}"))),
        }
    }
}

/// An object_store error in the words a user needs: the cause first where it can tell (the
/// bucket, the credentials, the endpoint), then the client's message and its sources.
fn describe(e: &object_store::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    let cause = if text.contains("NoSuchBucket") {
        "the bucket does not exist"
    } else if text.contains("InvalidAccessKeyId") || text.contains("SignatureDoesNotMatch") {
        "the credentials were refused"
    } else if ["Connection refused", "tcp connect error", "dns error"]
        .iter()
        .any(|t| text.contains(t))
    {
        "the S3 endpoint cannot be reached"
    } else if text.contains("timed out") {
        "the S3 endpoint did not answer in time"
    } else if text.contains("error sending request") {
        "the S3 endpoint cannot be reached"
    } else {
        return text;
    };
    format!("{cause}: {text}")
}

/// A small runtime for S3 requests, shut down without waiting when the root is dropped (which
/// may happen inside another runtime, where a blocking shutdown is not allowed).
struct IoRuntime(Option<tokio::runtime::Runtime>);

impl IoRuntime {
    fn new() -> std::io::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("signalql-s3")
            .enable_all()
            .build()?;
        Ok(IoRuntime(Some(rt)))
    }

    fn handle(&self) -> tokio::runtime::Handle {
        match &self.0 {
            Some(rt) => rt.handle().clone(),
            None => unreachable!("the S3 runtime lives until the root is dropped"),
        }
    }
}

impl Drop for IoRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

fn local_error(path: &Path, e: std::io::Error) -> StorageError {
    StorageError {
        location: path.display().to_string(),
        message: e.to_string(),
    }
}

/// The Parquet files under the local folder `dir` (canonical), with their sizes. Links are
/// followed, but never into a folder the walk is already inside (a loop), and no file is read
/// twice (through two links, or a link and its target): such a name is listed as broken, with
/// why, so that the table is an `io_error` naming it (or, with `skip_invalid_files`, the name
/// is skipped and listed), never a silently repeated read. Of a file's names, the one reached
/// without a link is read, else the first in order; the others are the repeats.
fn local_parquet_files(dir: &Path) -> Result<Vec<ListedFile>, StorageError> {
    let mut out = Vec::new();
    // Readable Parquet files: (whether a link led to it, the listed file, its identity).
    let mut found: Vec<(bool, ListedFile, String)> = Vec::new();
    let top = std::fs::metadata(dir).map_err(|e| local_error(dir, e))?;
    // Each folder to walk, whether a link led to it, and the identities of the folders it is
    // inside (itself included).
    let mut stack = vec![(dir.to_path_buf(), false, vec![identity(dir, &top)])];
    while let Some((d, linked, inside)) = stack.pop() {
        for entry in std::fs::read_dir(&d)
            .map_err(|e| local_error(&d, e))?
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name.starts_with('_') {
                continue;
            }
            let path = entry.path();
            let location = path.display().to_string();
            let broken = |why: String| ListedFile {
                location: location.clone(),
                size: 0,
                version: None,
                modified: None,
                broken: Some(why),
            };
            let link = linked || entry.file_type().is_ok_and(|t| t.is_symlink());
            match std::fs::metadata(&path) {
                Ok(meta) if meta.is_dir() => {
                    let id = identity(&path, &meta);
                    if inside.contains(&id) {
                        let target = std::fs::canonicalize(&path)
                            .map_or_else(|_| "?".to_string(), |t| t.display().to_string());
                        out.push(broken(format!(
                            "a link to the folder {target}, which this listing is already \
                             inside: following it would read the same files again and again"
                        )));
                    } else {
                        let mut within = inside.clone();
                        within.push(id);
                        stack.push((path, link, within));
                    }
                }
                Ok(meta) if name.ends_with(".parquet") => {
                    let id = identity(&path, &meta);
                    let file = ListedFile {
                        location,
                        size: meta.len(),
                        broken: None,
                        version: meta.modified().ok().and_then(|t| {
                            let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
                            Some(d.as_nanos().to_string())
                        }),
                        modified: meta
                            .modified()
                            .ok()
                            .map(chrono::DateTime::<chrono::Utc>::from),
                    };
                    found.push((link, file, id));
                }
                Ok(_) => {}
                Err(e) if name.ends_with(".parquet") => {
                    let dangling =
                        std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
                    out.push(broken(if dangling {
                        "a symbolic link to a missing file".to_string()
                    } else {
                        format!("cannot read it: {e}")
                    }));
                }
                Err(_) => {}
            }
        }
    }
    // One name a file: the one without a link first, then in order of location.
    found.sort_by(|a, b| (a.0, &a.1.location).cmp(&(b.0, &b.1.location)));
    let mut first: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    for (_, mut file, id) in found {
        match first.get(&id) {
            Some(original) => {
                file.broken = Some(format!(
                    "the same file as {original} (through a link): it would be read twice"
                ));
                file.size = 0;
            }
            None => {
                first.insert(id, file.location.clone());
            }
        }
        out.push(file);
    }
    Ok(out)
}

/// What names one file or folder however it is reached: device and inode.
#[cfg(unix)]
fn identity(_path: &Path, meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!("{}:{}", meta.dev(), meta.ino())
}

/// What names one file or folder however it is reached: its canonical path.
#[cfg(not(unix))]
fn identity(path: &Path, _meta: &std::fs::Metadata) -> String {
    std::fs::canonicalize(path)
        .map_or_else(|_| path.display().to_string(), |p| p.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_parse_by_scheme() {
        let opts = StorageOptions::default();
        assert!(matches!(
            Root::parse("data/x", &opts),
            Ok(Root::Local(p)) if p == Path::new("data/x")
        ));
        let e = Root::parse("gs://bucket/x", &opts).unwrap_err();
        assert!(
            e.to_string()
                .contains("gs:// dataset roots are not supported"),
            "{e}"
        );
        let e = Root::parse("s3://", &opts).unwrap_err();
        assert!(e.to_string().contains("needs a bucket"), "{e}");
    }

    #[test]
    fn local_put_new_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::Local(dir.path().to_path_buf());
        assert!(root.put_new("a/b.json", b"1".to_vec()).unwrap());
        assert!(!root.put_new("a/b.json", b"2".to_vec()).unwrap());
        assert_eq!(root.read("a/b.json").unwrap().unwrap(), b"1");
        assert_eq!(root.read("a/missing.json").unwrap(), None);
        let names: Vec<_> = std::fs::read_dir(dir.path().join("a"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["b.json"], "no temporary file is left behind");
    }
}
