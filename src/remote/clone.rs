//! A checkpoint rebuilt from the bucket alone, as a plain directory: the
//! manifest's entries created parents first, every chunk checked against
//! its name and every file against its whole hash, then attributes set
//! children first (so a directory's mtime is not moved by filling it).

use std::collections::HashSet;
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use rustix::fs::{AtFlags, CWD, Mode, Timespec, Timestamps};

use super::manifest::{Entry, EntryKind, Manifest};
use super::{Bucket, RemoteCheckpoint, RemoteError, RemoteResult, RemoteUrl};
use crate::store::ChunkId;

/// What a clone wrote.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Cloned {
    pub checkpoint: i64,
    pub entries: u64,
    pub bytes: u64,
    pub chunks_fetched: u64,
    /// Attributes that could not be set as recorded (an owner, without root).
    pub not_set: Vec<String>,
}

/// The checkpoint `reference` names (default: the newest) in the bucket.
pub fn find(bucket: &Bucket, reference: Option<&str>) -> RemoteResult<RemoteCheckpoint> {
    let head = bucket.head()?.ok_or_else(|| RemoteError::Missing {
        remote: bucket.url().to_string(),
        key: format!("{} (nothing was pushed there)", bucket.url().head_key()),
    })?;
    let found = match reference {
        Some(r) => head.find(r),
        None => head.checkpoints.last(),
    };
    found.cloned().ok_or_else(|| RemoteError::Refused {
        remote: bucket.url().to_string(),
        what: format!("it holds no checkpoint {}", reference.unwrap_or("at all")),
    })
}

/// Writes checkpoint `reference` of the bucket into `dir` (created if
/// missing; it must be empty). The tree is written beside it first and
/// renamed into place once whole: a clone that fails (a damaged or missing
/// object, a full disk) leaves `dir` as it was, nothing half made.
pub fn clone_into(bucket: &Bucket, reference: Option<&str>, dir: &Path) -> RemoteResult<Cloned> {
    let io = |what: String| move |source| RemoteError::Io { what, source };
    let checkpoint = find(bucket, reference)?;
    let manifest = bucket.manifest(&checkpoint.manifest)?;
    check_paths(bucket, &manifest)?;
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(RemoteError::Refused {
                    remote: bucket.url().to_string(),
                    what: format!("cannot clone into {}: it is not empty", dir.display()),
                });
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(format!("cannot read {}", dir.display()))(e)),
    }
    let name = dir.file_name().ok_or_else(|| RemoteError::Refused {
        remote: bucket.url().to_string(),
        what: format!("cannot clone into {}: it names no directory", dir.display()),
    })?;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut partial = std::ffi::OsString::from(".");
    partial.push(name);
    partial.push(format!(".rewindfs-clone-{}", std::process::id()));
    let partial = parent.join(partial);
    std::fs::create_dir(&partial).map_err(io(format!("cannot create {}", partial.display())))?;
    let mut done = Cloned {
        checkpoint: checkpoint.checkpoint,
        entries: manifest.entries.len() as u64,
        bytes: 0,
        chunks_fetched: 0,
        not_set: Vec::new(),
    };
    // Over an empty directory, rename replaces it.
    let written = write_tree(bucket, &manifest, &partial, &mut done).and_then(|()| {
        std::fs::rename(&partial, dir).map_err(io(format!("cannot move the clone to {}", dir.display())))
    });
    if let Err(e) = written {
        if let Err(left) = std::fs::remove_dir_all(&partial) {
            log::warn!("Cannot remove the unfinished clone {}: {left}.", partial.display());
        }
        return Err(e);
    }
    Ok(done)
}

/// Creates the manifest's entries under `dir`, then sets their attributes.
fn write_tree(bucket: &Bucket, manifest: &Manifest, dir: &Path, done: &mut Cloned) -> RemoteResult<()> {
    let io = |what: String| move |source| RemoteError::Io { what, source };
    for entry in &manifest.entries {
        let path = dir.join(&entry.path);
        let at = || format!("cannot create {}", path.display());
        if let Some(first) = entry.link {
            std::fs::hard_link(dir.join(&manifest.entries[first].path), &path).map_err(io(at()))?;
            continue;
        }
        match entry.kind {
            EntryKind::Dir if entry.path.as_os_str().is_empty() => {}
            EntryKind::Dir => std::fs::create_dir(&path).map_err(io(at()))?,
            EntryKind::Symlink => {
                let target = entry.target.as_deref().unwrap_or(OsStr::new(""));
                std::os::unix::fs::symlink(target, &path).map_err(io(at()))?
            }
            EntryKind::File => {
                let mut file =
                    std::fs::OpenOptions::new().write(true).create_new(true).open(&path).map_err(io(at()))?;
                let mut whole = blake3::Hasher::new();
                for span in &entry.chunks {
                    let id =
                        ChunkId::parse_hex(&span.id).ok_or_else(|| malformed(bucket, entry, "a bad chunk name"))?;
                    let data = bucket.get_verified(&RemoteUrl::chunk_key(&id), &id)?;
                    if data.len() != span.len as usize {
                        return Err(malformed(bucket, entry, "a chunk of another length than its list says"));
                    }
                    done.chunks_fetched += 1;
                    whole.update(&data);
                    file.write_all(&data).map_err(io(format!("cannot write {}", path.display())))?;
                }
                let hash = ChunkId::from_bytes(*whole.finalize().as_bytes()).to_string();
                if entry.hash.as_deref().is_some_and(|h| h != hash) {
                    return Err(malformed(bucket, entry, "content whose hash is not the recorded one"));
                }
                done.bytes += entry.size;
            }
            EntryKind::Fifo | EntryKind::Socket => {
                let kind = if entry.kind == EntryKind::Fifo {
                    rustix::fs::FileType::Fifo
                } else {
                    rustix::fs::FileType::Socket
                };
                rustix::fs::mknodat(CWD, &path, kind, Mode::from_raw_mode(0o600), 0).map_err(|e| io(at())(e.into()))?
            }
            EntryKind::CharDevice | EntryKind::BlockDevice => {
                done.not_set.push(format!("{}: a device node (its number is not recorded)", entry.path.display()));
            }
        }
    }
    // Children before parents: filling a directory moves its mtime.
    for entry in manifest.entries.iter().rev().filter(|e| e.link.is_none()) {
        if matches!(entry.kind, EntryKind::CharDevice | EntryKind::BlockDevice) {
            continue;
        }
        set_attributes(&dir.join(&entry.path), entry, &mut done.not_set)?;
    }
    Ok(())
}

fn malformed(bucket: &Bucket, entry: &Entry, what: &str) -> RemoteError {
    RemoteError::Malformed {
        remote: bucket.url().to_string(),
        what: format!("the manifest gives {} {what}", crate::text::quote_name(entry.path.as_os_str())),
    }
}

/// Every path is relative, of plain names, under a directory that an
/// earlier entry creates: nothing a manifest says can write outside the
/// clone or through a symlink it made.
pub fn check_paths(bucket: &Bucket, manifest: &Manifest) -> RemoteResult<()> {
    let mut dirs: HashSet<&Path> = HashSet::new();
    for (i, entry) in manifest.entries.iter().enumerate() {
        let bad = |what: &str| malformed(bucket, entry, what);
        if i == 0 {
            if !entry.path.as_os_str().is_empty() || entry.kind != EntryKind::Dir {
                return Err(bad("as its first entry, which must be the root directory"));
            }
            dirs.insert(&entry.path);
            continue;
        }
        if !entry.path.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(bad("a path that is not a plain relative one"));
        }
        let parent = entry.path.parent().unwrap_or(Path::new(""));
        if !dirs.contains(parent) {
            return Err(bad("a path whose parent is not a directory listed before it"));
        }
        if let Some(first) = entry.link
            && (first >= i || manifest.entries[first].kind == EntryKind::Dir)
        {
            return Err(bad("a hard link to an entry that is not a file before it"));
        }
        if entry.kind == EntryKind::Dir && entry.link.is_none() {
            dirs.insert(&entry.path);
        }
    }
    Ok(())
}

fn set_attributes(path: &Path, entry: &Entry, not_set: &mut Vec<String>) -> RemoteResult<()> {
    let io = |what: &str| {
        let what = format!("cannot set the {what} of {}", path.display());
        move |e: rustix::io::Errno| RemoteError::Io { what, source: e.into() }
    };
    let symlink = entry.kind == EntryKind::Symlink;
    for x in &entry.xattrs {
        let value = crate::name_json::base64_decode(&x.value).unwrap_or_default();
        rustix::fs::lsetxattr(path, x.name.as_bytes(), &value, rustix::fs::XattrFlags::empty())
            .map_err(io("extended attributes"))?;
    }
    let owner = rustix::fs::chownat(
        CWD,
        path,
        Some(rustix::fs::Uid::from_raw(entry.uid)),
        Some(rustix::fs::Gid::from_raw(entry.gid)),
        AtFlags::SYMLINK_NOFOLLOW,
    );
    match owner {
        Ok(()) => {}
        Err(rustix::io::Errno::PERM) => {
            not_set.push(format!("{}: owner {}:{} (needs root)", path.display(), entry.uid, entry.gid))
        }
        Err(e) => return Err(io("owner")(e)),
    }
    if !symlink {
        // After chown, which clears set-id bits.
        rustix::fs::chmodat(CWD, path, Mode::from_raw_mode(entry.perm), AtFlags::empty()).map_err(io("mode"))?;
    }
    let t = Timespec {
        tv_sec: entry.mtime_ns.div_euclid(1_000_000_000),
        tv_nsec: entry.mtime_ns.rem_euclid(1_000_000_000) as _,
    };
    let times = Timestamps { last_access: t, last_modification: t };
    rustix::fs::utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).map_err(io("times"))?;
    Ok(())
}
