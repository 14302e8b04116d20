//! History replicated to S3-compatible object storage: the objects a
//! bucket holds (docs/format.md, "Remote object layout"), the client that
//! reads and writes them, pushing sealed checkpoints (`push.rs`),
//! rebuilding one from the bucket alone (`clone.rs`) and checking that
//! every checkpoint a head lists can be (`check.rs`).
//!
//! The client is the `object_store` crate, driven by one small
//! current-thread tokio runtime that each [`Bucket`] owns: nothing else in
//! the crate is async, and nothing on the recording path (FUSE requests,
//! `turn`) ever waits for the network. Credentials and the endpoint come
//! from the environment the usual way (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
//! `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, instance and web-identity
//! credentials) and from the shared files' profile (`AWS_PROFILE`,
//! `~/.aws/credentials`, `~/.aws/config`: `profile.rs`), the environment
//! first; none of them is ever written into the store or a log line.
//!
//! Everything fetched is checked against its blake3 name before use; the
//! one object that is not named by its content, the head, is written last,
//! so a reader never sees a checkpoint whose objects are not all there.

pub mod cache;
pub mod check;
pub mod clone;
pub mod manifest;
pub mod profile;
pub mod push;
pub mod shared;
pub mod show;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{AsErrno, Errno};
use crate::store::ChunkId;

/// Errors of the remote: the address, the object store, what it returned.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("bad remote address {address:?}: {why}")]
    BadAddress { address: String, why: &'static str },
    /// The object store failed; `cause` is said the same way every time
    /// the same thing fails (no timings or request ids), so a failure that
    /// repeats is logged once.
    #[error("remote {remote}: {what}: {cause}")]
    Store { remote: String, what: String, cause: String, reach: Reach },
    #[error("remote {remote}: object {key} does not match its blake3 name (damaged or partial)")]
    Corrupt { remote: String, key: String },
    #[error("remote {remote}: object {key} is missing")]
    Missing { remote: String, key: String },
    #[error("remote {remote}: {what}")]
    Malformed { remote: String, what: String },
    #[error("remote {remote}: {what}")]
    Refused { remote: String, what: String },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("{0}")]
    View(#[from] crate::view::ViewError),
    #[error("{0}")]
    Chunks(#[from] crate::store::StoreError),
}

impl AsErrno for RemoteError {
    fn errno(&self) -> Errno {
        match self {
            RemoteError::BadAddress { .. } | RemoteError::Refused { .. } => Errno(libc::EINVAL),
            RemoteError::Missing { .. } => Errno(libc::ENOENT),
            RemoteError::Store { reach: Reach::Unreachable, .. } => Errno(libc::EHOSTUNREACH),
            RemoteError::Store { reach: Reach::Denied, .. } => Errno(libc::EACCES),
            RemoteError::Store { reach: Reach::NoBucket, .. } => Errno(libc::ENOENT),
            RemoteError::Store { reach: Reach::Failed, .. } => Errno::EIO,
            RemoteError::Corrupt { .. } | RemoteError::Malformed { .. } => Errno::EIO,
            RemoteError::Io { source, .. } => source.raw_os_error().map(Errno).unwrap_or(Errno::EIO),
            RemoteError::View(e) => e.errno(),
            RemoteError::Chunks(e) => e.errno(),
        }
    }
}

pub type RemoteResult<T> = Result<T, RemoteError>;

impl RemoteError {
    /// Whether the server could not be reached at all (as opposed to
    /// answering with an error).
    pub fn unreachable(&self) -> bool {
        matches!(self, RemoteError::Store { reach: Reach::Unreachable, .. })
    }

    /// The failure without the object it met: the same for every object a
    /// push sends while the server fails the same way (objects are sent
    /// several at a time, so which one fails first varies), so that a
    /// failure that repeats is logged once.
    pub fn failure(&self) -> String {
        match self {
            RemoteError::Store { remote, cause, .. } => format!("remote {remote}: {cause}"),
            e => e.to_string(),
        }
    }
}

/// How an object store request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// No connection, or no answer in time.
    Unreachable,
    /// The server refused the credentials or the request (401, 403).
    Denied,
    /// The bucket does not exist.
    NoBucket,
    /// Anything else the server answered.
    Failed,
}

/// What failed, in words that do not change from one attempt to the next:
/// `object_store`'s own text carries the time taken and the retries made.
fn cause(e: &object_store::Error) -> (String, Reach) {
    let mut texts = Vec::new();
    let mut level: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(l) = level {
        texts.push(l.to_string());
        level = l.source();
    }
    // After `Error performing GET <url> in 1.2s, after 3 retries ... - `:
    // the request's own error (object_store's `RequestError`, private).
    let request = texts.iter().position(|t| t.starts_with("Error performing ")).and_then(|i| texts.get(i + 1));
    let all = texts.join(" ");
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let start = all.find(&open)? + open.len();
        let len = all[start..].find("</")?;
        Some(all[start..start + len].trim().to_string())
    };
    let said = match (tag("Code"), tag("Message")) {
        (Some(c), Some(m)) if !m.is_empty() => Some(format!("{c}: {m}")),
        (Some(c), _) => Some(c),
        _ => None,
    };
    if said.as_deref().is_some_and(|s| s.starts_with("NoSuchBucket")) {
        return ("the bucket does not exist".into(), Reach::NoBucket);
    }
    // A bucket at its quota: Garage answers 403 `AccessDenied` ("Bucket
    // size quota is reached"), Ceph's gateway `QuotaExceeded`, MinIO
    // `XMinioAdminBucketQuotaExceeded`. Not a matter of credentials.
    if let Some(said) = said.as_deref().filter(|s| s.to_ascii_lowercase().contains("quota")) {
        return (
            format!("the bucket is full (its quota is reached: raise it or free room in it): {said}"),
            Reach::Failed,
        );
    }
    match e {
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
            let said = said.unwrap_or_else(|| "no reason given".into());
            return (
                format!("access denied (check the credentials and the bucket's permissions): {said}"),
                Reach::Denied,
            );
        }
        _ => {}
    }
    if let Some(said) = said {
        return (format!("the server answered {said}"), Reach::Failed);
    }
    match request {
        // No HTTP answer at all: no connection, or none in time. The
        // innermost cause (`Connection refused`, `timed out`) names it.
        Some(r) if r.starts_with("HTTP error") => {
            let last = texts.last().cloned().unwrap_or_default();
            (format!("the server cannot be reached ({last})"), Reach::Unreachable)
        }
        Some(r) => (r.clone(), Reach::Failed),
        None => (e.to_string(), Reach::Failed),
    }
}

/// `s3://bucket/prefix`: a workspace's history in a bucket. The prefix
/// is the workspace's own; content (`chunks/`) is shared by every
/// workspace of the bucket, so the prefix may not start with `chunks`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteUrl {
    pub bucket: String,
    pub prefix: String,
}

/// The bucket-wide folder of content objects.
pub const CHUNKS: &str = "chunks";

impl RemoteUrl {
    pub fn parse(address: &str) -> RemoteResult<RemoteUrl> {
        let bad = |why| RemoteError::BadAddress { address: address.to_string(), why };
        let rest = address.strip_prefix("s3://").ok_or_else(|| bad("it must start with s3://"))?;
        let (bucket, prefix) = rest.split_once('/').ok_or_else(|| bad("it needs a prefix: s3://bucket/prefix"))?;
        let prefix = prefix.trim_end_matches('/');
        if bucket.is_empty()
            || !bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        {
            return Err(bad("a bucket name is lowercase letters, digits, '-' and '.'"));
        }
        if prefix.is_empty() {
            return Err(bad("it needs a prefix: s3://bucket/prefix"));
        }
        for part in prefix.split('/') {
            if part.is_empty() || part == "." || part == ".." || part.contains('@') {
                return Err(bad("each part of the prefix must be a plain name (no empty part, '.', '..' or '@')"));
            }
        }
        if prefix.split('/').next() == Some(CHUNKS) {
            return Err(bad("the prefix `chunks` is the bucket's shared content"));
        }
        Ok(RemoteUrl { bucket: bucket.to_string(), prefix: prefix.to_string() })
    }

    /// `s3://bucket` (the whole bucket: an empty prefix) or
    /// `s3://bucket/prefix`.
    pub fn parse_bucket(address: &str) -> RemoteResult<RemoteUrl> {
        let bucket = address.strip_prefix("s3://").map(|r| r.trim_end_matches('/'));
        match bucket {
            Some(b) if !b.is_empty() && !b.contains('/') => {
                let url = RemoteUrl::parse(&format!("s3://{b}/x"))
                    .map_err(|_| RemoteError::BadAddress { address: address.to_string(), why: "a bad bucket name" })?;
                Ok(RemoteUrl { prefix: String::new(), ..url })
            }
            _ => RemoteUrl::parse(address),
        }
    }

    /// `s3://bucket/prefix@CHECKPOINT` (the checkpoint may be absent).
    pub fn parse_at(address: &str) -> RemoteResult<(RemoteUrl, Option<String>)> {
        match address.rsplit_once('@') {
            Some((url, at)) if !at.is_empty() => Ok((RemoteUrl::parse(url)?, Some(at.to_string()))),
            _ => Ok((RemoteUrl::parse(address.trim_end_matches('@'))?, None)),
        }
    }

    /// Whether `text` names a remote rather than a local path.
    pub fn is_remote(text: &str) -> bool {
        text.starts_with("s3://")
    }

    pub fn head_key(&self) -> String {
        format!("{}/head.json", self.prefix)
    }

    pub fn manifest_key(&self, id: &ChunkId) -> String {
        format!("{}/manifests/{id}", self.prefix)
    }

    pub fn chunk_key(id: &ChunkId) -> String {
        format!("{CHUNKS}/{id}")
    }
}

impl fmt::Display for RemoteUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefix.is_empty() {
            return write!(f, "s3://{}", self.bucket);
        }
        write!(f, "s3://{}/{}", self.bucket, self.prefix)
    }
}

/// An object a listing found.
#[derive(Clone, Debug)]
pub struct Listed {
    pub key: String,
    pub size: u64,
    /// The server's last-modified time, Unix milliseconds.
    pub modified_ms: i64,
}

/// Version of the head and manifest layout; a reader refuses a newer one.
pub const FORMAT: u32 = 1;

/// `<prefix>/head.json`: the workspace's replicated history. Rewritten
/// after the content and manifest of each checkpoint it adds are in the
/// bucket, so every checkpoint it lists can be read.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Head {
    pub format: u32,
    /// The store that writes this prefix (its `chunks/store-id`): one
    /// writer per workspace history.
    pub store_id: String,
    /// Oldest first.
    pub checkpoints: Vec<RemoteCheckpoint>,
}

/// One replicated checkpoint: what `log` shows and its manifest's name.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RemoteCheckpoint {
    pub checkpoint: i64,
    pub parent: Option<i64>,
    pub message_id: Option<String>,
    pub label: Option<String>,
    pub reason: crate::meta::Reason,
    /// Unix milliseconds.
    pub created_at: i64,
    #[serde(default)]
    pub name: Option<String>,
    /// blake3 of the manifest object.
    pub manifest: String,
    /// Entries and file bytes in the tree.
    pub entries: u64,
    pub bytes: u64,
}

impl Head {
    pub fn newest(&self) -> Option<i64> {
        self.checkpoints.iter().map(|c| c.checkpoint).max()
    }

    /// A checkpoint by number, message id or name.
    pub fn find(&self, reference: &str) -> Option<&RemoteCheckpoint> {
        if let Ok(n) = reference.parse::<i64>() {
            return self.checkpoints.iter().find(|c| c.checkpoint == n);
        }
        self.checkpoints
            .iter()
            .rev()
            .find(|c| c.message_id.as_deref() == Some(reference) || c.name.as_deref() == Some(reference))
    }
}

/// Attempts of one request, and how long they may take together.
const RETRIES: usize = 3;
const RETRY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);
const CONNECT_TIMEOUT: &str = "5s";

/// Objects [`Bucket::put_missing`] sends at once.
const SENDS_IN_FLIGHT: usize = 16;

/// A bucket reached through `object_store`, with the runtime that drives it.
pub struct Bucket {
    url: RemoteUrl,
    store: object_store::aws::AmazonS3,
    rt: tokio::runtime::Runtime,
}

impl Bucket {
    /// The client for `url`, configured from the environment.
    pub fn open(url: &RemoteUrl) -> RemoteResult<Bucket> {
        // A request is retried for seconds, not object_store's default
        // three minutes: the uploader retries whole passes itself, and a
        // command should say soon that the server cannot be reached.
        let retry = object_store::RetryConfig {
            backoff: object_store::BackoffConfig::default(),
            max_retries: RETRIES,
            retry_timeout: RETRY_TIMEOUT,
        };
        let mut builder = object_store::aws::AmazonS3Builder::from_env();
        // What the environment does not say, the shared files' profile may.
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let profile = profile::load(env);
        for (key, var) in profile::KEYS {
            if let (Some(value), None) = (profile.get(key), env(var)) {
                builder = match key {
                    "aws_access_key_id" => builder.with_access_key_id(value),
                    "aws_secret_access_key" => builder.with_secret_access_key(value),
                    "aws_session_token" => builder.with_token(value),
                    "region" => builder.with_region(value),
                    _ => builder.with_endpoint(value),
                };
                if key == "endpoint_url" && value.starts_with("http://") {
                    builder = builder.with_allow_http(true);
                }
            }
        }
        let store = builder
            .with_bucket_name(&url.bucket)
            .with_retry(retry)
            .with_config(
                object_store::aws::AmazonS3ConfigKey::Client(object_store::ClientConfigKey::ConnectTimeout),
                CONNECT_TIMEOUT,
            )
            .build()
            .map_err(|e| {
                let (cause, reach) = cause(&e);
                RemoteError::Store { remote: url.to_string(), what: "cannot configure".into(), cause, reach }
            })?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| RemoteError::Io { what: "cannot start the remote's runtime".into(), source })?;
        Ok(Bucket { url: url.clone(), store, rt })
    }

    pub fn url(&self) -> &RemoteUrl {
        &self.url
    }

    fn failed(&self, what: String) -> impl FnOnce(object_store::Error) -> RemoteError + '_ {
        move |e| {
            let (cause, reach) = cause(&e);
            RemoteError::Store { remote: self.url.to_string(), what, cause, reach }
        }
    }

    /// The object at `key`, or None where there is none.
    pub fn get(&self, key: &str) -> RemoteResult<Option<Vec<u8>>> {
        use object_store::ObjectStore;
        let path = object_store::path::Path::from(key);
        let got = self.rt.block_on(async {
            match self.store.get(&path).await {
                Ok(r) => r.bytes().await.map(Some),
                Err(e @ object_store::Error::NotFound { .. }) if cause(&e).1 == Reach::NoBucket => Err(e),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        });
        got.map(|b| b.map(|b| b.to_vec())).map_err(self.failed(format!("cannot read {key}")))
    }

    /// The object named by `id`, checked against it.
    pub fn get_verified(&self, key: &str, id: &ChunkId) -> RemoteResult<Vec<u8>> {
        let data =
            self.get(key)?.ok_or_else(|| RemoteError::Missing { remote: self.url.to_string(), key: key.into() })?;
        if ChunkId::of(&data) != *id {
            return Err(RemoteError::Corrupt { remote: self.url.to_string(), key: key.into() });
        }
        Ok(data)
    }

    pub fn put(&self, key: &str, data: Vec<u8>) -> RemoteResult<()> {
        use object_store::ObjectStore;
        let path = object_store::path::Path::from(key);
        self.rt
            .block_on(self.store.put(&path, data.into()))
            .map(|_| ())
            .map_err(self.failed(format!("cannot write {key}")))
    }

    /// Sends each object of `objects` the bucket does not hold yet (a HEAD,
    /// then a PUT when it is absent), [`SENDS_IN_FLIGHT`] at a time: one
    /// request at a time leaves a loopback server idle most of the time.
    /// Returns, in order, whether each was sent. Objects are named by their
    /// content, so one sent twice by a retry is the same object.
    pub fn put_missing(&self, objects: Vec<(String, Vec<u8>)>) -> RemoteResult<Vec<bool>> {
        use futures::stream::{StreamExt, TryStreamExt};
        use object_store::ObjectStore;
        let in_flight = if crate::faults::remote_put_armed() { 1 } else { SENDS_IN_FLIGHT };
        let sends = futures::stream::iter(objects.into_iter().enumerate()).map(|(i, (key, data))| async move {
            let path = object_store::path::Path::from(key.as_str());
            match self.store.head(&path).await {
                Ok(_) => return Ok((i, false)),
                Err(e @ object_store::Error::NotFound { .. }) if cause(&e).1 == Reach::NoBucket => {
                    return Err(self.failed(format!("cannot look up {key}"))(e));
                }
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.failed(format!("cannot look up {key}"))(e)),
            }
            crate::faults::remote_put();
            self.store.put(&path, data.into()).await.map_err(self.failed(format!("cannot write {key}")))?;
            Ok((i, true))
        });
        let mut done: Vec<(usize, bool)> =
            self.rt.block_on(sends.buffer_unordered(in_flight).try_collect::<Vec<_>>())?;
        done.sort_unstable();
        Ok(done.into_iter().map(|(_, sent)| sent).collect())
    }

    /// Whether an object is at `key`.
    pub fn exists(&self, key: &str) -> RemoteResult<bool> {
        use object_store::ObjectStore;
        let path = object_store::path::Path::from(key);
        match self.rt.block_on(self.store.head(&path)) {
            Ok(_) => Ok(true),
            Err(e @ object_store::Error::NotFound { .. }) if cause(&e).1 == Reach::NoBucket => {
                Err(self.failed(format!("cannot look up {key}"))(e))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.failed(format!("cannot look up {key}"))(e)),
        }
    }

    /// One level of the bucket under `prefix` ("" for the top): the objects
    /// directly in it, and the folders below it (each without its trailing
    /// slash).
    pub fn list_dir(&self, prefix: &str) -> RemoteResult<(Vec<Listed>, Vec<String>)> {
        use object_store::ObjectStore;
        let path = (!prefix.is_empty()).then(|| object_store::path::Path::from(prefix));
        let listed = self
            .rt
            .block_on(self.store.list_with_delimiter(path.as_ref()))
            .map_err(self.failed(format!("cannot list {prefix}/")))?;
        let objects = listed
            .objects
            .into_iter()
            .map(|o| Listed {
                key: o.location.to_string(),
                size: o.size,
                modified_ms: o.last_modified.timestamp_millis(),
            })
            .collect();
        Ok((objects, listed.common_prefixes.into_iter().map(|p| p.to_string()).collect()))
    }

    /// Deletes the object at `key` (none there is no error).
    pub fn delete(&self, key: &str) -> RemoteResult<()> {
        use object_store::ObjectStore;
        let path = object_store::path::Path::from(key);
        match self.rt.block_on(self.store.delete(&path)) {
            Ok(()) => Ok(()),
            Err(e @ object_store::Error::NotFound { .. }) if cause(&e).1 == Reach::NoBucket => {
                Err(self.failed(format!("cannot delete {key}"))(e))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.failed(format!("cannot delete {key}"))(e)),
        }
    }

    /// The head at `prefix` (any workspace of the bucket), None where there
    /// is none.
    pub fn head_at(&self, prefix: &str) -> RemoteResult<Option<Head>> {
        let url = RemoteUrl { bucket: self.url.bucket.clone(), prefix: prefix.to_string() };
        let Some(bytes) = self.get(&url.head_key())? else { return Ok(None) };
        let head: Head = serde_json::from_slice(&bytes).map_err(|e| RemoteError::Malformed {
            remote: url.to_string(),
            what: format!("{} cannot be read: {e}", url.head_key()),
        })?;
        if head.format > FORMAT {
            return Err(RemoteError::Malformed {
                remote: url.to_string(),
                what: format!("head.json has format {}, newer than this rewindfs ({FORMAT}); upgrade", head.format),
            });
        }
        Ok(Some(head))
    }

    /// The workspace's head, None when nothing was pushed yet.
    pub fn head(&self) -> RemoteResult<Option<Head>> {
        self.head_at(&self.url.prefix)
    }

    pub fn put_head(&self, head: &Head) -> RemoteResult<()> {
        let bytes = serde_json::to_vec_pretty(head)
            .map_err(|e| RemoteError::Malformed { remote: self.url.to_string(), what: e.to_string() })?;
        self.put(&self.url.head_key(), bytes)
    }

    /// A manifest by name, checked and decoded.
    pub fn manifest(&self, name: &str) -> RemoteResult<manifest::Manifest> {
        self.manifest_at(&self.url.prefix, name)
    }

    /// A manifest of the workspace at `prefix`, checked and decoded.
    pub fn manifest_at(&self, prefix: &str, name: &str) -> RemoteResult<manifest::Manifest> {
        let bad = |what: String| RemoteError::Malformed { remote: self.url.to_string(), what };
        let id = ChunkId::parse_hex(name).ok_or_else(|| bad(format!("bad manifest name {name:?}")))?;
        let key = RemoteUrl { bucket: self.url.bucket.clone(), prefix: prefix.to_string() }.manifest_key(&id);
        let packed = self.get_verified(&key, &id)?;
        let json = zstd::decode_all(&packed[..]).map_err(|e| bad(format!("{key}: {e}")))?;
        let manifest: manifest::Manifest = serde_json::from_slice(&json).map_err(|e| bad(format!("{key}: {e}")))?;
        if manifest.format > FORMAT {
            return Err(bad(format!(
                "{key} has format {}, newer than this rewindfs ({FORMAT}); upgrade",
                manifest.format
            )));
        }
        Ok(manifest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let u = RemoteUrl::parse("s3://bkt/team/ws1/").unwrap();
        assert_eq!((u.bucket.as_str(), u.prefix.as_str()), ("bkt", "team/ws1"));
        assert_eq!(u.to_string(), "s3://bkt/team/ws1");
        assert_eq!(u.head_key(), "team/ws1/head.json");
        let (u, at) = RemoteUrl::parse_at("s3://bkt/ws@12").unwrap();
        assert_eq!((u.prefix.as_str(), at.as_deref()), ("ws", Some("12")));
        for bad in
            ["bkt/ws", "s3://bkt", "s3://bkt/", "s3://Bkt/ws", "s3://bkt/a//b", "s3://bkt/../x", "s3://bkt/chunks"]
        {
            assert!(RemoteUrl::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(RemoteUrl::parse_bucket("s3://bkt/").unwrap().to_string(), "s3://bkt");
        assert_eq!(RemoteUrl::parse_bucket("s3://bkt/a/b").unwrap().prefix, "a/b");
        assert!(RemoteUrl::parse_bucket("s3://Bkt").is_err());
    }

    /// A server's refusal as `object_store` reports it: the answer's XML
    /// in the error's source.
    fn refusal(xml: &str, denied: bool) -> object_store::Error {
        let source: Box<dyn std::error::Error + Send + Sync> =
            format!("Client error with status 403 Forbidden: {xml}").into();
        if denied {
            object_store::Error::PermissionDenied { path: "chunks/ab".into(), source }
        } else {
            object_store::Error::Generic { store: "S3", source }
        }
    }

    #[test]
    fn a_bucket_at_its_quota_is_full_not_denied() {
        // Garage 2.5 (garage_api_s3 put.rs `check_quotas`): 403 AccessDenied.
        let garage = "<Error><Code>AccessDenied</Code><Message>Forbidden: Bucket size quota is reached, maximum \
                      total size of objects for this bucket: 1048576.</Message></Error>";
        let (text, reach) = cause(&refusal(garage, true));
        assert_eq!(reach, Reach::Failed, "{text}");
        assert!(text.starts_with("the bucket is full") && text.contains("quota is reached"), "{text}");
        let ceph = "<Error><Code>QuotaExceeded</Code><Message></Message></Error>";
        let (text, reach) = cause(&refusal(ceph, false));
        assert_eq!(
            (reach, text.as_str()),
            (Reach::Failed, "the bucket is full (its quota is reached: raise it or free room in it): QuotaExceeded")
        );
        // Refused credentials stay a refusal.
        let denied = "<Error><Code>AccessDenied</Code><Message>Forbidden: No such key: GK01</Message></Error>";
        let (text, reach) = cause(&refusal(denied, true));
        assert_eq!(reach, Reach::Denied, "{text}");
        assert!(text.starts_with("access denied (check the credentials"), "{text}");
    }
}
