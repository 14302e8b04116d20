//! A checkpoint's tree as the bucket keeps it: every path with its
//! attributes and, for a file, the chunks of its content, walked through
//! the checkpoint's view under the tree lock; and sending the content a
//! manifest names, with the lock released.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use fastcdc::v2020::StreamCDC;
use serde::{Deserialize, Serialize};

use super::{Bucket, RemoteError, RemoteResult, RemoteUrl};
use crate::journal::{Journal, Mark};
use crate::meta::ObjectId;
use crate::store::ChunkId;
use crate::store::chunker::{AVG_CHUNK, ChunkSpan, ContentRef, MAX_CHUNK, MIN_CHUNK};
use crate::sys::FileHandle;
use crate::view::{Content, Node, NodeState, TreeView, ViewError};
use crate::workspace::{Kind, LiveTree};

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
    /// Chunks read and not sent yet, sent together (`flush`).
    outbox: Vec<(ChunkId, Vec<u8>)>,
    /// The chunks in `outbox`, found by name without scanning it.
    queued: HashSet<ChunkId>,
    outbox_bytes: usize,
}

/// How much [`Memory::outbox`] holds before it is sent: bounded memory,
/// and enough requests to keep [`super::Bucket::put_missing`]'s in flight.
const OUTBOX_BYTES: usize = 8 << 20;
const OUTBOX_CHUNKS: usize = 256;

impl Memory {
    /// Forgets which chunks the bucket holds (a collection may have
    /// deleted some): each is looked up again before it is relied on.
    pub fn forget_present(&mut self) {
        self.present.clear();
    }

    /// Sends the chunks read and not sent yet; each one sent or found
    /// present is known present from then on.
    fn flush(&mut self, bucket: &Bucket, sent: &mut Sent) -> RemoteResult<()> {
        let outbox = std::mem::take(&mut self.outbox);
        self.queued.clear();
        self.outbox_bytes = 0;
        if outbox.is_empty() {
            return Ok(());
        }
        let ids: Vec<ChunkId> = outbox.iter().map(|(id, _)| *id).collect();
        let sizes: Vec<u64> = outbox.iter().map(|(_, d)| d.len() as u64).collect();
        let objects = outbox.into_iter().map(|(id, data)| (RemoteUrl::chunk_key(&id), data)).collect();
        let was_sent = bucket.put_missing(objects)?;
        for ((id, size), sent_now) in ids.into_iter().zip(sizes).zip(was_sent) {
            if sent_now {
                sent.chunks_sent += 1;
                sent.bytes_sent += size;
            } else {
                sent.chunks_present += 1;
            }
            self.present.insert(id);
        }
        Ok(())
    }
}

/// A file the walk found live and did not know: its bytes are read after
/// the walk, without the tree lock.
struct LiveFile {
    /// Its entry in the manifest.
    entry: usize,
    handle: FileHandle,
    id: Option<ObjectId>,
    /// When the walk read its state: the bytes read later are the
    /// checkpoint's while no record names the object since.
    mark: Mark,
    key: Option<LiveKey>,
}

/// A checkpoint's tree as a walk under the tree lock found it: the
/// manifest, every file's content in it known except the live files it
/// lists, and the content to send. Nothing in it needs the lock again:
/// stored chunks are immutable in the chunk store, and a live file's bytes
/// are checked against the journal after they are read.
pub struct Walked {
    manifest: Manifest,
    /// Chunks of stored content (pre-images, rewound files' pending
    /// content), read from the chunk store when sent.
    stored: Vec<ChunkId>,
    /// Chunks read under the lock (`walk` with `read_live`).
    buffered: Vec<(ChunkId, Vec<u8>)>,
    live: Vec<LiveFile>,
}

impl Walked {
    pub fn into_manifest(self) -> Manifest {
        self.manifest
    }
}

/// Walks `view`'s checkpoint: paths, attributes and, for each file, its
/// chunk list where it is known without reading (stored content, a live
/// file read by an earlier checkpoint and unchanged). Reads no file bytes
/// and sends nothing, unless `read_live`: then live files are read now,
/// through the view, into memory (for a file that keeps changing while it
/// is read without the lock).
pub fn walk(view: &TreeView<'_>, memory: &Memory, read_live: bool) -> RemoteResult<Walked> {
    let checkpoint = view.checkpoint().unwrap_or(-1);
    let mut walked = Walked {
        manifest: Manifest { format: super::FORMAT, checkpoint, entries: Vec::new() },
        stored: Vec::new(),
        buffered: Vec::new(),
        live: Vec::new(),
    };
    let mut stored_seen: HashSet<ChunkId> = HashSet::new();
    let mut first_name: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut stack: Vec<(PathBuf, Node)> = vec![(PathBuf::new(), view.root()?)];
    while let Some((path, node)) = stack.pop() {
        let entries = &mut walked.manifest.entries;
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
            let known = match &state.content {
                Content::Stored(c) => Some(stored(c, &mut walked.stored, &mut stored_seen)),
                Content::Live(h) => match view.live_tree().pending().content(h) {
                    // Rewound, its bytes not written yet: they are in the store.
                    Some(c) => Some(stored(&c, &mut walked.stored, &mut stored_seen)),
                    None => {
                        let key = live_key(view.live_tree(), h);
                        match key.as_ref().and_then(|k| memory.live.get(k)) {
                            Some(known) if known.1.iter().all(|s| memory.present.contains(&s.id)) => {
                                Some(known.clone())
                            }
                            _ if read_live => Some(read_through_view(view, &state, &mut walked.buffered)?),
                            _ => {
                                walked.live.push(LiveFile {
                                    entry: entries.len(),
                                    handle: h.clone(),
                                    id: state.id,
                                    mark: state.mark,
                                    key,
                                });
                                None
                            }
                        }
                    }
                },
                Content::None => Some((ChunkId::of(b""), Vec::new())),
            };
            if let Some((hash, spans)) = known {
                set_content(&mut entry, hash, &spans);
            }
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
    Ok(walked)
}

fn stored(c: &ContentRef, chunks: &mut Vec<ChunkId>, seen: &mut HashSet<ChunkId>) -> (ChunkId, Vec<ChunkSpan>) {
    for span in &c.chunks {
        if seen.insert(span.id) {
            chunks.push(span.id);
        }
    }
    (c.hash, c.chunks.clone())
}

fn set_content(entry: &mut Entry, hash: ChunkId, spans: &[ChunkSpan]) {
    entry.size = spans.iter().map(|s| s.len as u64).sum();
    entry.hash = Some(hash.to_string());
    entry.chunks = spans.iter().map(|s| Span { id: s.id.to_string(), len: s.len }).collect();
}

fn link_entry(path: PathBuf, first: &Entry, index: usize) -> Entry {
    Entry { path, link: Some(index), chunks: Vec::new(), hash: None, xattrs: Vec::new(), ..first.clone() }
}

/// Sends the content `walked` names that the bucket lacks, without the
/// tree lock: stored chunks from the chunk store, live files read from
/// the backing tree. True when the manifest is complete; false when a live
/// file changed while it was read (its record now holds the checkpoint's
/// bytes: walk again).
pub fn send(
    walked: &mut Walked,
    tree: &LiveTree,
    journal: &Journal,
    bucket: &Bucket,
    memory: &mut Memory,
    sent: &mut Sent,
) -> RemoteResult<bool> {
    let store = journal.store();
    for id in &walked.stored {
        send_chunk(bucket, memory, sent, id, || Ok(store.get(id)?))?;
    }
    for (id, data) in std::mem::take(&mut walked.buffered) {
        send_chunk(bucket, memory, sent, &id, || Ok(data))?;
    }
    let mut complete = true;
    for file in std::mem::take(&mut walked.live) {
        match read_live(&file, tree, journal, bucket, memory, sent)? {
            Some((hash, spans)) => {
                set_content(&mut walked.manifest.entries[file.entry], hash, &spans);
                if let Some(key) = file.key {
                    memory.live.insert(key, (hash, spans));
                }
            }
            None => complete = false,
        }
    }
    // Every chunk is in the bucket before the manifest naming it is sent.
    memory.flush(bucket, sent)?;
    // Hard links name their first entry's content.
    let entries = &mut walked.manifest.entries;
    for i in 0..entries.len() {
        if let Some(first) = entries[i].link {
            entries[i].size = entries[first].size;
        }
    }
    Ok(complete)
}

/// A live file's bytes, chunked, hashed and sent; None when a record named
/// the file since the walk read its state (the bytes read may then not be
/// the checkpoint's).
fn read_live(
    file: &LiveFile,
    tree: &LiveTree,
    journal: &Journal,
    bucket: &Bucket,
    memory: &mut Memory,
    sent: &mut Sent,
) -> RemoteResult<Option<(ChunkId, Vec<ChunkSpan>)>> {
    let moved = || journal.moved_since(file.mark, file.id, Some(&file.handle));
    let what = || "cannot read a file to send".to_string();
    let fd = match tree.backing().open_handle(&file.handle, libc::O_RDONLY) {
        Ok(fd) => fd,
        Err(_) if moved() => return Ok(None),
        Err(e) => return Err(RemoteError::Io { what: what(), source: std::io::Error::from_raw_os_error(e.0) }),
    };
    let mut reader = Hashing { inner: std::fs::File::from(fd), hasher: blake3::Hasher::new() };
    let mut spans = Vec::new();
    let mut stream = StreamCDC::new(&mut reader, MIN_CHUNK as usize, AVG_CHUNK as usize, MAX_CHUNK as usize);
    for chunk in &mut stream {
        let chunk = match chunk {
            Ok(c) => c,
            Err(_) if moved() => return Ok(None),
            Err(e) => return Err(RemoteError::Io { what: what(), source: e.into() }),
        };
        let id = ChunkId::of(&chunk.data);
        send_chunk(bucket, memory, sent, &id, || Ok(chunk.data.clone()))?;
        spans.push(ChunkSpan { id, len: u32::try_from(chunk.length).unwrap_or(u32::MAX) });
    }
    drop(stream);
    if moved() || tree.pending().content(&file.handle).is_some() {
        return Ok(None);
    }
    Ok(Some((ChunkId::from_bytes(*reader.hasher.finalize().as_bytes()), spans)))
}

/// A live file read through its view, under the lock, its chunks kept in
/// `buffered` for sending after.
fn read_through_view(
    view: &TreeView<'_>,
    state: &NodeState,
    buffered: &mut Vec<(ChunkId, Vec<u8>)>,
) -> RemoteResult<(ChunkId, Vec<ChunkSpan>)> {
    let reading = ViewReader { view, state, offset: 0, gave_way: false };
    let mut reader = Hashing { inner: reading, hasher: blake3::Hasher::new() };
    let mut spans = Vec::new();
    let mut stream = StreamCDC::new(&mut reader, MIN_CHUNK as usize, AVG_CHUNK as usize, MAX_CHUNK as usize);
    let mut failed = None;
    for chunk in &mut stream {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        let id = ChunkId::of(&chunk.data);
        spans.push(ChunkSpan { id, len: u32::try_from(chunk.length).unwrap_or(u32::MAX) });
        buffered.push((id, chunk.data));
    }
    drop(stream);
    match failed {
        Some(_) if reader.inner.gave_way => return Err(ViewError::GaveWay.into()),
        Some(e) => return Err(RemoteError::Io { what: "cannot read a file to send".into(), source: e.into() }),
        None => {}
    }
    Ok((ChunkId::from_bytes(*reader.hasher.finalize().as_bytes()), spans))
}

/// The cache key of a live file, None while its ctime is too recent to
/// trust (a change in the same clock tick would leave it unchanged).
fn live_key(tree: &LiveTree, handle: &FileHandle) -> Option<LiveKey> {
    let fd = tree.backing().open_handle(handle, libc::O_PATH).ok()?;
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
    if memory.present.contains(id) || memory.queued.contains(id) {
        return Ok(());
    }
    let data = data()?;
    memory.outbox_bytes += data.len();
    memory.queued.insert(*id);
    memory.outbox.push((*id, data));
    if memory.outbox_bytes >= OUTBOX_BYTES || memory.outbox.len() >= OUTBOX_CHUNKS {
        memory.flush(bucket, sent)?;
    }
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

/// A reader that hashes what it yields.
struct Hashing<R> {
    inner: R,
    hasher: blake3::Hasher,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// A file of a view as a reader.
struct ViewReader<'v, 'a> {
    view: &'v TreeView<'a>,
    state: &'v NodeState,
    offset: u64,
    /// The view gave way ([`ViewError::GaveWay`]): what the read error
    /// (`EAGAIN`) stands for.
    gave_way: bool,
}

impl Read for ViewReader<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use crate::error::AsErrno;
        let n = self.view.read_at(self.state, self.offset, buf).map_err(|e| {
            self.gave_way = matches!(e, ViewError::GaveWay);
            std::io::Error::from_raw_os_error(e.errno().0)
        })?;
        self.offset += n as u64;
        Ok(n)
    }
}
