//! A store whose database was lost, replaced or damaged is refused at
//! mount: it used to mount with an empty or wrong
//! history next to packs and an attic full of the real one.

mod common;

use common::{MountFixture, stderr};

fn s(p: &std::path::Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A store with some history, unmounted.
fn store_with_history() -> MountFixture {
    let mut fx = MountFixture::manual_turns();
    fx.sh("head -c 200000 /dev/urandom > big.bin && echo one > a.txt");
    fx.turn("m1");
    fx.sh("echo two >> a.txt && rm big.bin");
    fx.turn("m2");
    fx.unmount();
    fx
}

/// Mounts again; asserts the mount is refused with `why` (alternatives
/// separated by `|`) and names fsck,
/// and that the workspace is untouched.
fn assert_mount_refused(fx: &mut MountFixture, why: &str) {
    let before = common::manifest(&fx.ws);
    let out = fx.rewindfs(&["mount", s(&fx.ws), s(&fx.mnt), "--store", s(&fx.store), "--auto-turn", "0"]);
    if out.status.success() {
        fx.forget_mount();
        let _ = fx.rewindfs(&["unmount", "--lazy", s(&fx.mnt)]);
        panic!("a store with {why} was mounted");
    }
    let err = stderr(&out);
    assert!(
        why.split('|').any(|w| err.contains(w)) && err.contains("rewindfs fsck"),
        "the refusal does not say {why:?} and fsck: {err}"
    );
    assert!(!common::is_mounted(&fx.mnt));
    assert_eq!(common::manifest(&fx.ws), before, "the workspace changed");
}

#[test]
fn an_emptied_database_is_refused() {
    let mut fx = store_with_history();
    std::fs::write(fx.store.join("meta.sqlite"), b"").expect("truncate");
    for f in ["meta.sqlite-wal", "meta.sqlite-shm"] {
        let _ = std::fs::remove_file(fx.store.join(f));
    }
    assert_mount_refused(&mut fx, "is empty");
}

#[test]
fn a_database_from_another_store_is_refused() {
    let mut fx = store_with_history();
    let mut other = MountFixture::manual_turns();
    other.unmount();
    for f in ["meta.sqlite", "meta.sqlite-wal", "meta.sqlite-shm"] {
        let _ = std::fs::remove_file(fx.store.join(f));
        if other.store.join(f).exists() {
            std::fs::copy(other.store.join(f), fx.store.join(f)).expect("copy");
        }
    }
    // Either check may see it first: the store ids differ, and the attic
    // names objects this database never had.
    assert_mount_refused(&mut fx, "belong to different stores|older than the attic");
}

#[test]
fn a_damaged_database_is_refused() {
    let mut fx = store_with_history();
    let db = fx.store.join("meta.sqlite");
    let mut bytes = std::fs::read(&db).expect("read db");
    assert!(bytes.len() > 8192, "database too small to damage: {}", bytes.len());
    // Every page after the first two: b-tree pages of the tables.
    for b in bytes[8192..].iter_mut().step_by(97) {
        *b ^= 0x5a;
    }
    std::fs::write(&db, bytes).expect("write db");
    assert_mount_refused(&mut fx, "damaged");
}
