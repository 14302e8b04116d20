//! One checkpoint of a remote as a view source (`rewindfs show
//! s3://bucket/prefix@CHECKPOINT MOUNTPOINT`): its manifest, fetched and
//! checked once, is the whole tree (names, attributes, chunk lists); file
//! bytes are fetched chunk by chunk when read, through the bounded local
//! [`ChunkCache`], each chunk checked against its blake3 name. A chunk
//! that is missing or damaged fails that file's read with EIO and one log
//! line naming the object and the path; nothing else is refused.
//!
//! Inode numbers are manifest positions: the root is 1, entry `i` is
//! `i + 1`, and a further name of a hard-linked file has its first
//! entry's number.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use super::cache::ChunkCache;
use super::manifest::{Entry, EntryKind, Manifest};
use super::{Bucket, RemoteCheckpoint, RemoteError, RemoteResult};
use crate::store::ChunkId;
use crate::view::source::{BrowseEntry, ViewSource};
use crate::view::{ViewError, ViewResult};
use crate::workspace::attr::time_of_ns;
use crate::workspace::{Attr, FsStats, Ino, Kind};

/// A file's chunk: its name, where it starts in the file, its length.
struct Piece {
    id: ChunkId,
    start: u64,
    len: u32,
}

/// One object of the tree (a manifest entry that is not a further name).
struct Object {
    entry: Entry,
    nlink: u32,
    /// A directory's entries by name (sorted), with their numbers.
    children: Vec<(OsString, u64)>,
    pieces: Vec<Piece>,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// A remote checkpoint served read-only.
pub struct RemoteTree {
    bucket: Bucket,
    cache: ChunkCache,
    checkpoint: RemoteCheckpoint,
    /// By inode number - 1; `None` for the positions of further names.
    objects: Vec<Option<Object>>,
    bytes: u64,
    /// Chunks whose failure was logged already.
    reported: std::sync::Mutex<HashSet<ChunkId>>,
    /// The bucket's failure being met now (the server down or refusing:
    /// said once, not on every read), and the cache's count of fetches
    /// when it began: a fetch since means the server answers again.
    outage: std::sync::Mutex<Option<(String, u64)>>,
}

fn errno(n: i32) -> ViewError {
    ViewError::Io(std::io::Error::from_raw_os_error(n))
}

fn kind_of(kind: EntryKind) -> Kind {
    match kind {
        EntryKind::File => Kind::File,
        EntryKind::Dir => Kind::Dir,
        EntryKind::Symlink => Kind::Symlink,
        EntryKind::Fifo => Kind::Fifo,
        EntryKind::Socket => Kind::Socket,
        EntryKind::CharDevice => Kind::CharDevice,
        EntryKind::BlockDevice => Kind::BlockDevice,
    }
}

impl RemoteTree {
    /// The tree of checkpoint `reference` (default: the newest) of
    /// `bucket`: its manifest fetched, checked and indexed. Fails, before
    /// anything is mounted, on a checkpoint the head does not list and on
    /// a manifest that is missing, damaged or malformed.
    pub fn open(bucket: Bucket, reference: Option<&str>, cache: ChunkCache) -> RemoteResult<RemoteTree> {
        let checkpoint = super::clone::find(&bucket, reference)?;
        let manifest = bucket.manifest(&checkpoint.manifest)?;
        super::clone::check_paths(&bucket, &manifest)?;
        let (objects, bytes) = index(&bucket, manifest)?;
        Ok(RemoteTree {
            bucket,
            cache,
            checkpoint,
            objects,
            bytes,
            reported: Default::default(),
            outage: Default::default(),
        })
    }

    pub fn checkpoint(&self) -> &RemoteCheckpoint {
        &self.checkpoint
    }

    pub fn bucket(&self) -> &Bucket {
        &self.bucket
    }

    pub fn cache(&self) -> &ChunkCache {
        &self.cache
    }

    fn object(&self, ino: Ino) -> ViewResult<&Object> {
        usize::try_from(ino.0)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| self.objects.get(i))
            .and_then(Option::as_ref)
            .ok_or_else(|| errno(libc::ESTALE))
    }

    fn attr(&self, ino: Ino, o: &Object) -> Attr {
        let e = &o.entry;
        let t = time_of_ns(e.mtime_ns);
        let kind = kind_of(e.kind);
        let size = match kind {
            Kind::Symlink => e.target.as_ref().map(|t| t.len() as u64).unwrap_or(0),
            Kind::File => e.size,
            _ => 0,
        };
        Attr {
            ino,
            kind,
            perm: (e.perm & 0o7777) as u16,
            nlink: o.nlink,
            uid: e.uid,
            gid: e.gid,
            rdev: 0,
            size,
            blocks: size.div_ceil(512),
            blksize: 4096,
            atime: t,
            mtime: t,
            ctime: t,
        }
    }

    /// Logs a chunk that cannot be read: once per chunk missing or damaged,
    /// once per outage of the bucket (the same failure again is not said
    /// again until the server has answered in between).
    fn failed(&self, path: &std::path::Path, e: &RemoteError) -> ViewError {
        let key = match e {
            RemoteError::Corrupt { key, .. } | RemoteError::Missing { key, .. } => Some(key.clone()),
            _ => None,
        };
        let first = match key {
            Some(k) => ChunkId::parse_hex(k.rsplit('/').next().unwrap_or_default())
                .is_none_or(|id| crate::poison::lock(&self.reported, "the reported chunks").insert(id)),
            None => {
                let mut outage = crate::poison::lock(&self.outage, "the remote's outage");
                let failure = e.failure();
                let new = outage.as_ref().is_none_or(|(said, _)| *said != failure);
                if new {
                    *outage = Some((failure, self.cache.stats().fetched));
                }
                new
            }
        };
        if first {
            log::error!(
                "Cannot read {} of {}@{}: {e}; reads of it fail with EIO (said once until it changes).",
                crate::text::quote_name(path.as_os_str()),
                self.bucket.url(),
                self.checkpoint.checkpoint
            );
        }
        errno(libc::EIO)
    }

    /// After a successful read: an outage the bucket has answered a fetch
    /// since is over, and said so once.
    fn answered(&self) {
        let mut outage = crate::poison::lock(&self.outage, "the remote's outage");
        if outage.as_ref().is_some_and(|(_, fetched)| self.cache.stats().fetched > *fetched) {
            *outage = None;
            // As visible as the failure it ends.
            log::warn!("{} answers again: reads of it work again.", self.bucket.url());
        }
    }
}

/// The manifest as objects by number, and the bytes of its files.
fn index(bucket: &Bucket, manifest: Manifest) -> RemoteResult<(Vec<Option<Object>>, u64)> {
    let bad = |entry: &Entry, what: &str| RemoteError::Malformed {
        remote: bucket.url().to_string(),
        what: format!("the manifest gives {} {what}", crate::text::quote_name(entry.path.as_os_str())),
    };
    let count = manifest.entries.len();
    // The number of each entry's object.
    let ino_of: Vec<u64> = manifest.entries.iter().enumerate().map(|(i, e)| e.link.unwrap_or(i) as u64 + 1).collect();
    let mut dir_of: std::collections::HashMap<&std::path::Path, usize> = std::collections::HashMap::new();
    let mut objects: Vec<Option<Object>> = Vec::with_capacity(count);
    let mut bytes = 0;
    let mut links: Vec<(usize, OsString, u64)> = Vec::new();
    for (i, entry) in manifest.entries.iter().enumerate() {
        if entry.kind == EntryKind::Dir && entry.link.is_none() {
            dir_of.insert(entry.path.as_path(), i);
        }
        if i > 0 {
            let parent = entry.path.parent().unwrap_or(std::path::Path::new(""));
            let p = *dir_of.get(parent).ok_or_else(|| bad(entry, "under no directory"))?;
            let name = entry.path.file_name().ok_or_else(|| bad(entry, "no name"))?.to_os_string();
            links.push((p, name, ino_of[i]));
        }
        if entry.link.is_some() {
            objects.push(None);
            continue;
        }
        let mut pieces = Vec::with_capacity(entry.chunks.len());
        let mut start = 0u64;
        if entry.kind == EntryKind::File {
            for span in &entry.chunks {
                let id = ChunkId::parse_hex(&span.id).ok_or_else(|| bad(entry, "a bad chunk name"))?;
                pieces.push(Piece { id, start, len: span.len });
                start += span.len as u64;
            }
            if start != entry.size {
                return Err(bad(entry, "chunks whose lengths do not add up to its size"));
            }
            bytes += entry.size;
        }
        let xattrs = entry
            .xattrs
            .iter()
            .map(|x| {
                crate::name_json::base64_decode(&x.value)
                    .map(|v| (x.name.as_bytes().to_vec(), v))
                    .ok_or_else(|| bad(entry, "an extended attribute that is not base64"))
            })
            .collect::<RemoteResult<Vec<_>>>()?;
        let nlink = if entry.kind == EntryKind::Dir { 2 } else { 1 };
        objects.push(Some(Object { entry: entry.clone(), nlink, children: Vec::new(), pieces, xattrs }));
    }
    for (parent, name, ino) in links {
        let i = ino as usize - 1;
        let child_is_dir = objects[i].as_ref().is_some_and(|o| o.entry.kind == EntryKind::Dir);
        if let Some(p) = objects[parent].as_mut() {
            if child_is_dir {
                p.nlink += 1;
            }
            p.children.push((name, ino));
        }
    }
    // Each further name of a file is one link more.
    for first in manifest.entries.iter().filter_map(|e| e.link) {
        if let Some(o) = objects.get_mut(first).and_then(Option::as_mut) {
            o.nlink += 1;
        }
    }
    for o in objects.iter_mut().flatten() {
        o.children.sort_by(|a, b| a.0.cmp(&b.0));
    }
    Ok((objects, bytes))
}

impl ViewSource for RemoteTree {
    fn lookup(&self, dir: Ino, name: &OsStr) -> ViewResult<Attr> {
        let d = self.object(dir)?;
        if d.entry.kind != EntryKind::Dir {
            return Err(errno(libc::ENOTDIR));
        }
        let i = d.children.binary_search_by(|(n, _)| n.as_os_str().cmp(name)).map_err(|_| errno(libc::ENOENT))?;
        self.getattr(Ino(d.children[i].1))
    }

    /// Numbers are manifest positions: nothing to free.
    fn forget(&self, _ino: Ino, _nlookup: u64) {}

    fn getattr(&self, ino: Ino) -> ViewResult<Attr> {
        Ok(self.attr(ino, self.object(ino)?))
    }

    fn readdir(&self, dir: Ino) -> ViewResult<Vec<BrowseEntry>> {
        let d = self.object(dir)?;
        if d.entry.kind != EntryKind::Dir {
            return Err(errno(libc::ENOTDIR));
        }
        let mut out = vec![
            BrowseEntry { name: ".".into(), ino: dir, kind: Kind::Dir },
            BrowseEntry { name: "..".into(), ino: dir, kind: Kind::Dir },
        ];
        for (name, ino) in &d.children {
            let kind = self.object(Ino(*ino)).map(|o| kind_of(o.entry.kind)).unwrap_or(Kind::File);
            out.push(BrowseEntry { name: name.clone(), ino: Ino(*ino), kind });
        }
        Ok(out)
    }

    fn readdir_plus(
        &self,
        dir: Ino,
        offset: usize,
        add: &mut dyn FnMut(usize, &BrowseEntry, &Attr) -> bool,
    ) -> ViewResult<()> {
        for (i, e) in self.readdir(dir)?.into_iter().enumerate().skip(offset) {
            let attr = self.getattr(e.ino)?;
            if !add(i, &e, &attr) {
                break;
            }
        }
        Ok(())
    }

    fn read(&self, ino: Ino, offset: u64, size: u32) -> ViewResult<Vec<u8>> {
        let o = self.object(ino)?;
        if o.entry.kind != EntryKind::File {
            return Err(errno(libc::EISDIR));
        }
        let end = (offset + size as u64).min(o.entry.size);
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        // The first piece that ends after `offset`.
        let first = o.pieces.partition_point(|p| p.start + p.len as u64 <= offset);
        for piece in o.pieces[first..].iter().take_while(|p| p.start < end) {
            let data = self.cache.get(&self.bucket, &piece.id).map_err(|e| self.failed(&o.entry.path, &e))?;
            self.answered();
            if data.len() != piece.len as usize {
                let e = RemoteError::Corrupt {
                    remote: self.bucket.url().to_string(),
                    key: super::RemoteUrl::chunk_key(&piece.id),
                };
                return Err(self.failed(&o.entry.path, &e));
            }
            let from = offset.max(piece.start) - piece.start;
            let to = end.min(piece.start + piece.len as u64) - piece.start;
            out.extend_from_slice(&data[from as usize..to as usize]);
        }
        Ok(out)
    }

    fn readlink(&self, ino: Ino) -> ViewResult<Vec<u8>> {
        let o = self.object(ino)?;
        match (&o.entry.kind, &o.entry.target) {
            (EntryKind::Symlink, Some(t)) => Ok(t.as_bytes().to_vec()),
            _ => Err(errno(libc::EINVAL)),
        }
    }

    fn xattrs(&self, ino: Ino) -> ViewResult<Vec<(Vec<u8>, Vec<u8>)>> {
        Ok(self.object(ino)?.xattrs.clone())
    }

    fn statfs(&self) -> ViewResult<FsStats> {
        Ok(FsStats {
            blocks: self.bytes.div_ceil(4096),
            bfree: 0,
            bavail: 0,
            files: self.objects.len() as u64,
            ffree: 0,
            bsize: 4096,
            namelen: 255,
            frsize: 4096,
        })
    }

    fn may_change(&self, _ino: Ino) -> bool {
        false
    }
}
