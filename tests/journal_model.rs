//! Model-based: random creates, writes, truncations, renames,
//! unlinks, mkdirs and rmdirs through the mount, with turns in between,
//! against an in-memory model. Every checkpoint must rebuild as the
//! model's snapshot at that turn. Seeded: set JOURNAL_MODEL_SEED to repeat
//! a run; the seed is printed in every failure.

mod common;

use std::collections::BTreeMap;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use common::*;

#[derive(Clone, Debug, PartialEq)]
enum M {
    Dir,
    File(Vec<u8>),
}

type Model = BTreeMap<PathBuf, M>;

fn as_model(t: &Tree) -> Model {
    t.iter()
        .map(|(p, o)| {
            let m = match o {
                Obj::Dir { .. } => M::Dir,
                Obj::File { data, .. } => M::File(data.clone()),
                other => panic!("unexpected {other:?} at {}", p.display()),
            };
            (p.clone(), m)
        })
        .collect()
}

fn model_diff(want: &Model, got: &Model) -> Vec<String> {
    let mut out = Vec::new();
    for (p, w) in want {
        match got.get(p) {
            None => out.push(format!("missing {} ({})", p.display(), short(w))),
            Some(g) if g != w => out.push(format!("differs {}: want {}, got {}", p.display(), short(w), short(g))),
            _ => {}
        }
    }
    for (p, g) in got {
        if !want.contains_key(p) {
            out.push(format!("extra {} ({})", p.display(), short(g)));
        }
    }
    out
}

fn short(m: &M) -> String {
    match m {
        M::Dir => "dir".into(),
        M::File(d) => format!("file of {} bytes, blake3 {}", d.len(), &blake3::hash(d).to_hex()[..12]),
    }
}

fn dirs(m: &Model) -> Vec<PathBuf> {
    let mut v = vec![PathBuf::new()];
    v.extend(m.iter().filter(|(_, o)| **o == M::Dir).map(|(p, _)| p.clone()));
    v
}

fn files(m: &Model) -> Vec<PathBuf> {
    m.iter().filter(|(_, o)| matches!(o, M::File(_))).map(|(p, _)| p.clone()).collect()
}

fn pick<T: Clone>(rng: &mut Rng, v: &[T]) -> Option<T> {
    if v.is_empty() { None } else { Some(v[rng.below(v.len() as u64) as usize].clone()) }
}

/// Runs one file operation on the mount from this process, with a
/// timeout: a daemon that stops answering fails the test instead of
/// hanging it.
fn on_mount<T: Send + 'static>(what: String, op: impl FnOnce() -> std::io::Result<T> + Send + 'static) -> T {
    io_timeout(&what, CHILD_TIMEOUT, op).unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// `read_tree` of the mount, with a timeout.
fn read_mount(mnt: &Path) -> Tree {
    let mnt = mnt.to_path_buf();
    io_timeout(&format!("read the tree of {}", mnt.display()), CHILD_TIMEOUT, move || read_tree(&mnt))
}

#[test]
fn random_operations_and_turns_against_a_model() {
    let seed: u64 = std::env::var("JOURNAL_MODEL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
    });
    eprintln!("JOURNAL_MODEL_SEED={seed}");
    let mut rng = Rng(seed);
    let mut f = MountFixture::unmounted();
    // A starting tree in the workspace before mount.
    let mut model = Model::new();
    for i in 0..6 {
        let n = rng.below(5000) as usize;
        let data = rng.bytes(n);
        std::fs::write(f.ws.join(format!("s{i}")), &data).unwrap();
        model.insert(PathBuf::from(format!("s{i}")), M::File(data));
    }
    f.mount(false, &["--auto-turn", "0"]);
    let mnt = f.mnt.clone();
    let mut snaps: Vec<Model> = vec![model.clone()];
    let mut log = Vec::new();
    let ops = 500;
    let turns = 20;
    for step in 0..ops {
        if step > 0 && step % (ops / turns) == 0 {
            let live = as_model(&read_mount(&mnt));
            let d = model_diff(&model, &live);
            assert!(
                d.is_empty(),
                "seed {seed}: the mount differs from the model before turn {} (ops so far: {log:?}):\n{}",
                snaps.len(),
                d.join("\n")
            );
            snaps.push(model.clone());
            assert_eq!(f.turn(&format!("t{}", snaps.len() - 1)), snaps.len() as i64 - 1);
            continue;
        }
        let name = |rng: &mut Rng, prefix: &str| format!("{prefix}{}", rng.below(6));
        let op = rng.below(10);
        let desc: String = match op {
            0 | 1 => {
                let dir = pick(&mut rng, &dirs(&model)).unwrap();
                let p = dir.join(name(&mut rng, "f"));
                if model.contains_key(&p) {
                    continue;
                }
                let n = rng.below(20000) as usize;
                let data = rng.bytes(n);
                let (path, bytes) = (mnt.join(&p), data.clone());
                on_mount(format!("seed {seed}: create {}", p.display()), move || std::fs::write(path, bytes));
                model.insert(p.clone(), M::File(data));
                format!("create {}", p.display())
            }
            2 | 3 => {
                let Some(p) = pick(&mut rng, &files(&model)) else { continue };
                let Some(M::File(cur)) = model.get_mut(&p) else { unreachable!() };
                let off = rng.below(cur.len() as u64 + 100) as usize;
                let n = 1 + rng.below(3000) as usize;
                let data = rng.bytes(n);
                let (path, bytes) = (mnt.join(&p), data.clone());
                on_mount(format!("seed {seed}: write {}", p.display()), move || {
                    let mut fh = std::fs::OpenOptions::new().write(true).open(path)?;
                    fh.seek(SeekFrom::Start(off as u64))?;
                    fh.write_all(&bytes)
                });
                if cur.len() < off + data.len() {
                    cur.resize(off + data.len(), 0);
                }
                cur[off..off + data.len()].copy_from_slice(&data);
                format!("write {} at {off} len {}", p.display(), data.len())
            }
            4 => {
                let Some(p) = pick(&mut rng, &files(&model)) else { continue };
                let Some(M::File(cur)) = model.get_mut(&p) else { unreachable!() };
                let len = rng.below(cur.len() as u64 + 2000) as usize;
                let path = mnt.join(&p);
                on_mount(format!("seed {seed}: truncate {}", p.display()), move || {
                    std::fs::OpenOptions::new().write(true).open(path).and_then(|fh| fh.set_len(len as u64))
                });
                cur.resize(len, 0);
                format!("truncate {} to {len}", p.display())
            }
            5 | 6 => {
                let all: Vec<PathBuf> = model.keys().cloned().collect();
                let Some(src) = pick(&mut rng, &all) else { continue };
                let dir = pick(&mut rng, &dirs(&model)).unwrap();
                let is_dir = model[&src] == M::Dir;
                let dst = dir.join(name(&mut rng, if is_dir { "d" } else { "f" }));
                if dst.starts_with(&src) {
                    continue;
                }
                match model.get(&dst) {
                    None => {}
                    Some(M::File(_)) if !is_dir => {}
                    _ => continue,
                }
                let (from, to) = (mnt.join(&src), mnt.join(&dst));
                on_mount(format!("seed {seed}: rename {} {}", src.display(), dst.display()), move || {
                    std::fs::rename(from, to)
                });
                let moved: Vec<(PathBuf, M)> = model
                    .range(src.clone()..)
                    .take_while(|(p, _)| p.starts_with(&src))
                    .map(|(p, o)| (p.clone(), o.clone()))
                    .collect();
                for (p, _) in &moved {
                    model.remove(p);
                }
                for (p, o) in moved {
                    let rel = p.strip_prefix(&src).unwrap();
                    model.insert(if rel.as_os_str().is_empty() { dst.clone() } else { dst.join(rel) }, o);
                }
                format!("rename {} {}", src.display(), dst.display())
            }
            7 => {
                let Some(p) = pick(&mut rng, &files(&model)) else { continue };
                let path = mnt.join(&p);
                on_mount(format!("seed {seed}: unlink {}", p.display()), move || std::fs::remove_file(path));
                model.remove(&p);
                format!("unlink {}", p.display())
            }
            8 => {
                let dir = pick(&mut rng, &dirs(&model)).unwrap();
                if dir.components().count() >= 3 {
                    continue;
                }
                let p = dir.join(name(&mut rng, "d"));
                if model.contains_key(&p) {
                    continue;
                }
                let path = mnt.join(&p);
                on_mount(format!("seed {seed}: mkdir {}", p.display()), move || std::fs::create_dir(path));
                model.insert(p.clone(), M::Dir);
                format!("mkdir {}", p.display())
            }
            _ => {
                let empty: Vec<PathBuf> = dirs(&model)
                    .into_iter()
                    .filter(|d| !d.as_os_str().is_empty() && !model.keys().any(|k| k != d && k.starts_with(d)))
                    .collect();
                let Some(p) = pick(&mut rng, &empty) else { continue };
                let path = mnt.join(&p);
                on_mount(format!("seed {seed}: rmdir {}", p.display()), move || std::fs::remove_dir(path));
                model.remove(&p);
                format!("rmdir {}", p.display())
            }
        };
        log.push(desc);
    }
    let live = as_model(&read_mount(&mnt));
    assert!(model_diff(&model, &live).is_empty(), "seed {seed}: the mount differs from the model at the end");
    f.unmount();
    let off = Offline::open(&f.ws, &f.store);
    let mut errs = Vec::new();
    for (n, snap) in snaps.iter().enumerate() {
        match off.tree_at(n as i64) {
            Ok(t) => {
                let d = model_diff(snap, &as_model(&t));
                if !d.is_empty() {
                    errs.push(format!("checkpoint {n}:\n  {}", d.join("\n  ")));
                }
            }
            Err(e) => errs.push(format!("checkpoint {n}: {e}")),
        }
    }
    assert!(
        errs.is_empty(),
        "seed {seed}: checkpoints that do not rebuild as the model (ops: {log:?}):\n{}",
        errs.join("\n")
    );
    let _ = Path::new("");
}
