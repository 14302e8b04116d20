//! A checkpoint's tree as the bucket keeps it: every path with its
//! attributes and, for a file, the chunks of its content, read through the
//! checkpoint's view; and sending the content a manifest names.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use fastcdc::v2020::StreamCDC;
use serde::{Deserialize, Serialize};

use super::{Bucket, RemoteError, RemoteResult, RemoteUrl};
use crate::store::chunker::{AVG_CHUNK, ChunkSpan, MAX_CHUNK, MIN_CHUNK};
use crate::store::{ChunkId, ChunkStore};
use crate::view::{Content, Node, NodeState, TreeView};
use crate::workspace::Kind;

/// One checkpoint's whole tree, parents before their children; the first
/// entry is the root (path "").
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub checkpoint: i64,
    pub entries: Vec<Entry>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl EntryKind {
    fn of(code: u8) -> EntryKind {
        match Kind::from_code(code) {
            Kind::File => EntryKind::File,
            Kind::Dir => EntryKind::Dir,
            Kind::Symlink => EntryKind::Symlink,
            Kind::Fifo => EntryKind::Fifo,
            Kind::Socket => EntryKind::Socket,
            Kind::CharDevice => EntryKind::CharDevice,
            Kind::BlockDevice => EntryKind::BlockDevice,
        }
    }
}

/// A path of the tree and the object it names.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Entry {
    #[serde(with = "crate::name_json")]
    pub path: PathBuf,
    pub kind: EntryKind,
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime_ns: i64,
    #[serde(default)]
    pub size: u64,
    /// blake3 of a file's whole content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chunks: Vec<Span>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "crate::name_json::option")]
    pub target: Option<OsString>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xattrs: Vec<Xattr>,
    /// A further name of a hard-linked file: the index of its first entry
    /// (which carries the content and attributes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<usize>,
}

/// One chunk of a file: its blake3 name and length.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Span {
    pub id: String,
    pub len: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Xattr {
    #[serde(with = "crate::name_json")]
    pub name: OsString,
    /// base64 (RFC 4648, padded).
    pub value: String,
}

/// What a push sent and skipped.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sent {
    pub chunks_sent: u64,
    pub bytes_sent: u64,
    pub chunks_present: u64,
}

/// The key of a live file's content, for not reading it again while it has
/// not changed (as git's index does): its handle, size, mtime and ctime.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct LiveKey(Vec<u8>, u64, i64, i64);

/// What one uploader remembers between checkpoints: the chunks the bucket
/// is known to hold, and the chunk lists of live files read already.
#[derive(Default)]
pub struct Memory {
    present: HashSet<ChunkId>,
    live: HashMap<LiveKey, (ChunkId, Vec<ChunkSpan>)>,
}

/// Builds the manifest of `view`'s checkpoint and sends the content it
/// names that the bucket lacks (chunks first: a manifest in the bucket
/// never names a missing chunk).
pub fn push_tree(
    view: &TreeView<'_>,
    store: &dyn ChunkStore,
    bucket: &Bucket,
    memory: &mut Memory,
    sent: &mut Sent,
) -> RemoteResult<Manifest> {
    let checkpoint = view.checkpoint().unwrap_or(-1);
    let mut entries = Vec::new();
    let mut first_name: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut stack: Vec<(PathBuf, Node)> = vec![(PathBuf::new(), view.root()?)];
    while let Some((path, node)) = stack.pop() {
        let state = view.state(&node)?;
        let kind = EntryKind::of(state.kind);
        if kind != EntryKind::Dir && state.nlink > 1 {
            let key = match (state.id, &node.handle) {
                (Some(id), _) => format!("id:{}", id.0).into_bytes(),
                (None, Some(h)) => h.to_bytes(),
                (None, None) => Vec::new(),
            };
            if !key.is_empty() {
                if let Some(&first) = first_name.get(&key) {
                    entries.push(link_entry(path, &entries[first], first));
                    continue;
                }
                first_name.insert(key, entries.len());
            }
        }
        let mut entry = Entry {
            path: path.clone(),
            kind,
            perm: state.perm,
            uid: state.uid,
            gid: state.gid,
            mtime_ns: state.mtime_ns,
            size: 0,
            hash: None,
            chunks: Vec::new(),
            target: state.target.clone().map(|t| OsString::from(std::ffi::OsStr::from_bytes(&t))),
            xattrs: state
                .xattrs
                .iter()
                .map(|(n, v)| Xattr {
                    name: std::ffi::OsStr::from_bytes(n).to_os_string(),
                    value: crate::name_json::base64_encode(v),
                })
                .collect(),
            link: None,
        };
        if kind == EntryKind::File {
            let (hash, spans) = file_content(view, &state, store, bucket, memory, sent)?;
            entry.size = spans.iter().map(|s| s.len as u64).sum();
            entry.hash = Some(hash.to_string());
            entry.chunks = spans.iter().map(|s| Span { id: s.id.to_string(), len: s.len }).collect();
        }
        entries.push(entry);
        if kind == EntryKind::Dir {
            let mut children = view.list(&node)?;
            // Popped in name order.
            children.sort_by(|a, b| b.0.cmp(&a.0));
            for (name, child) in children {
                stack.push((path.join(name), child));
            }
        }
    }
    Ok(Manifest { format: super::FORMAT, checkpoint, entries })
}

fn link_entry(path: PathBuf, first: &Entry, index: usize) -> Entry {
    Entry { path, link: Some(index), chunks: Vec::new(), hash: None, xattrs: Vec::new(), ..first.clone() }
}

/// A file's whole hash and chunks, every chunk in the bucket once this
/// returns.
fn file_content(
    view: &TreeView<'_>,
    state: &NodeState,
    store: &dyn ChunkStore,
    bucket: &Bucket,
    memory: &mut Memory,
    sent: &mut Sent,
) -> RemoteResult<(ChunkId, Vec<ChunkSpan>)> {
    match &state.content {
        Content::Stored(c) => {
            for span in &c.chunks {
                send_chunk(bucket, memory, sent, &span.id, || Ok(store.get(&span.id)?))?;
            }
            Ok((c.hash, c.chunks.clone()))
        }
        Content::Live(h) => {
            let key = live_key(view, h);
            if let Some(known) = key.as_ref().and_then(|k| memory.live.get(k))
                && known.1.iter().all(|s| memory.present.contains(&s.id))
            {
                return Ok(known.clone());
            }
            let mut reader = ViewReader { view, state, offset: 0, hasher: blake3::Hasher::new() };
            let mut spans = Vec::new();
            let mut stream = StreamCDC::new(&mut reader, MIN_CHUNK as usize, AVG_CHUNK as usize, MAX_CHUNK as usize);
            for chunk in &mut stream {
                let chunk = chunk
                    .map_err(|e| RemoteError::Io { what: "cannot read a file to send".into(), source: e.into() })?;
                let id = ChunkId::of(&chunk.data);
                send_chunk(bucket, memory, sent, &id, || Ok(chunk.data.clone()))?;
                spans.push(ChunkSpan { id, len: u32::try_from(chunk.length).unwrap_or(u32::MAX) });
            }
            drop(stream);
            let hash = ChunkId::from_bytes(*reader.hasher.finalize().as_bytes());
            if let Some(key) = key {
                memory.live.insert(key, (hash, spans.clone()));
            }
            Ok((hash, spans))
        }
        Content::None => Ok((ChunkId::of(b""), Vec::new())),
    }
}

/// The cache key of a live file, None while its ctime is too recent to
/// trust (a change in the same clock tick would leave it unchanged).
fn live_key(view: &TreeView<'_>, handle: &crate::sys::FileHandle) -> Option<LiveKey> {
    let fd = view.live_tree().backing().open_handle(handle, libc::O_PATH).ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?.as_secs() as i64;
    if st.st_ctime >= now - 1 {
        return None;
    }
    let ns = |s: i64, n: i64| s.saturating_mul(1_000_000_000).saturating_add(n);
    Some(LiveKey(
        handle.to_bytes(),
        st.st_size as u64,
        ns(st.st_mtime, st.st_mtime_nsec as i64),
        ns(st.st_ctime, st.st_ctime_nsec as i64),
    ))
}

/// Sends chunk `id` unless the bucket holds it already.
fn send_chunk(
    bucket: &Bucket,
    memory: &mut Memory,
    sent: &mut Sent,
    id: &ChunkId,
    data: impl FnOnce() -> RemoteResult<Vec<u8>>,
) -> RemoteResult<()> {
    if memory.present.contains(id) {
        return Ok(());
    }
    let key = RemoteUrl::chunk_key(id);
    if bucket.exists(&key)? {
        sent.chunks_present += 1;
    } else {
        let data = data()?;
        sent.chunks_sent += 1;
        sent.bytes_sent += data.len() as u64;
        bucket.put(&key, data)?;
    }
    memory.present.insert(*id);
    Ok(())
}

/// Sends a manifest, named by the blake3 of its stored (zstd) bytes;
/// returns that name.
pub fn send_manifest(bucket: &Bucket, manifest: &Manifest) -> RemoteResult<ChunkId> {
    let bad = |what: String| RemoteError::Malformed { remote: bucket.url().to_string(), what };
    let json = serde_json::to_vec(manifest).map_err(|e| bad(e.to_string()))?;
    let packed = zstd::encode_all(&json[..], 3).map_err(|e| bad(format!("cannot compress a manifest: {e}")))?;
    let id = ChunkId::of(&packed);
    let key = bucket.url().manifest_key(&id);
    if !bucket.exists(&key)? {
        bucket.put(&key, packed)?;
    }
    Ok(id)
}

/// A file of a view as a reader, hashing what it yields.
struct ViewReader<'v, 'a> {
    view: &'v TreeView<'a>,
    state: &'v NodeState,
    offset: u64,
    hasher: blake3::Hasher,
}

impl Read for ViewReader<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use crate::error::AsErrno;
        let n = self
            .view
            .read_at(self.state, self.offset, buf)
            .map_err(|e| std::io::Error::from_raw_os_error(e.errno().0))?;
        self.hasher.update(&buf[..n]);
        self.offset += n as u64;
        Ok(n)
    }
}
