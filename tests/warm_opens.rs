//! Opening a file again on a warm tree: the passthrough backing the
//! kernel reads through is kept after a file is closed (`fs/mod.rs`,
//! `BackingIds`), so a second open costs no registration. A kept backing
//! names one backing inode; these tests read, through the mount, every
//! way a name can come to stand for other bytes or another object (in
//! place, a rewind that swaps a new inode in, a rename over it, a delete
//! and a new file under the same name or the same inode number) and check
//! that each read gives the bytes of the object the name now has, that a
//! view of a checkpoint still gives its own bytes, and that an open by an
//! unprivileged user is still checked.
//!
//! A small file opened read-only is read through the kernel's page cache
//! instead (`fs/page_cache.rs`), its pages kept across opens while nothing
//! writes it: the same reads check that no open gets pages older than the
//! file, and one test writes a file every way while a reader holds it.

mod common;

use common::*;

/// Reads `names` (relative to the mount) twice each, so that the second
/// open of each finds a kept backing; prints each content once.
const READ_TWICE: &str = r#"
import sys
for n in sys.argv[1:]:
    first = open(n, 'rb').read()
    again = open(n, 'rb').read()
    assert first == again, (n, first, again)
    print(n, first.decode())
"#;

fn read_twice(fx: &MountFixture, names: &[&str]) -> String {
    let script = format!("python3 - {} <<'EOF'\n{READ_TWICE}\nEOF", names.join(" "));
    fx.sh(&script)
}

fn rewind(fx: &MountFixture, to: i64) -> i64 {
    let v = fx.cli_json(&["rewind", &to.to_string()]);
    v["safety_checkpoint"].as_i64().unwrap_or_else(|| panic!("no safety_checkpoint in {v}"))
}

#[test]
fn a_reopened_file_reads_the_object_its_name_has_now() {
    let fx = MountFixture::manual_turns();
    fx.sh("printf v1 > inplace && printf v1 > swapped && printf v1 > renamed && printf v1 > recreated");
    let all = ["inplace", "swapped", "renamed", "recreated"];
    assert_eq!(read_twice(&fx, &all), "inplace v1\nswapped v1\nrenamed v1\nrecreated v1\n");
    let c1 = fx.turn("r000001");

    // Written in place: the same inode, new bytes.
    fx.sh("printf v2-in-place > inplace");
    // Rewritten, then rewound: a new inode swapped in under the name.
    fx.sh("printf v2-to-rewind > swapped");
    // Replaced by a rename over it.
    fx.sh("printf v2-renamed > tmp && mv tmp renamed");
    // Deleted, and a new file made under the same name.
    fx.sh("rm recreated && printf v2-recreated > recreated");
    assert_eq!(
        read_twice(&fx, &all),
        "inplace v2-in-place\nswapped v2-to-rewind\nrenamed v2-renamed\nrecreated v2-recreated\n"
    );
    fx.turn("r000002");

    let safety = rewind(&fx, c1);
    assert_eq!(read_twice(&fx, &all), "inplace v1\nswapped v1\nrenamed v1\nrecreated v1\n", "after the rewind");
    // And back: the rewind is undone the same way.
    rewind(&fx, safety);
    assert_eq!(
        read_twice(&fx, &all),
        "inplace v2-in-place\nswapped v2-to-rewind\nrenamed v2-renamed\nrecreated v2-recreated\n",
        "after undoing the rewind"
    );
    fx.assert_fsck_clean("after reopening rewound files");
}

/// A file born and removed in one turn is unlinked for good, and ext4
/// gives its inode number to a file it makes next: once the kernel has
/// forgotten the old inode, the new file shows the same inode number
/// through the mount. Its reads must be its own bytes.
#[test]
fn a_new_file_with_a_reused_inode_number_reads_its_own_bytes() {
    let fx = MountFixture::manual_turns();
    fx.turn("r000001");
    let script = r#"
import os, time
reused = 0
for i in range(40):
    old = f'old{i}'
    with open(old, 'w') as f: f.write(f'old bytes {i}')
    for _ in range(2): assert open(old).read() == f'old bytes {i}'
    ino = os.stat(old).st_ino
    os.unlink(old)
    # The kernel forgets a removed inode once nothing holds it (FORGET
    # reaches the daemon, asynchronously).
    time.sleep(0.05)
    for j in range(8):
        new = f'new{i}-{j}'
        with open(new, 'w') as f: f.write(f'new bytes {i}-{j}')
        if os.stat(new).st_ino == ino:
            reused += 1
        for _ in range(2):
            got = open(new).read()
            assert got == f'new bytes {i}-{j}', (new, got)
    if reused >= 3:
        break
print('reused', reused >= 3)
"#;
    assert_eq!(fx.py(script).trim(), "reused True", "ext4 never reused an inode number: the test proved nothing");
}

/// A checkpoint's view of a file never reads the live file's backing,
/// before or after the live file was opened (and its backing kept).
#[test]
fn a_view_of_a_checkpoint_never_serves_live_bytes() {
    let fx = MountFixture::manual_turns();
    fx.sh("printf before > f");
    assert_eq!(read_twice(&fx, &["f"]), "f before\n");
    let c1 = fx.turn("r000001");
    fx.sh("printf after-in-place > f");
    assert_eq!(read_twice(&fx, &["f"]), "f after-in-place\n");
    let c2 = fx.turn("r000002");
    let old = format!(".rewindfs/checkpoints/{c1}/f");
    let new = format!(".rewindfs/checkpoints/{c2}/f");
    assert_eq!(read_twice(&fx, &[&old, &new, "f"]), format!("{old} before\n{new} after-in-place\nf after-in-place\n"));
    fx.sh("printf live-again > f");
    assert_eq!(
        read_twice(&fx, &["f", &old, &new]),
        format!("f live-again\n{old} before\n{new} after-in-place\n"),
        "after the live file changed again"
    );
}

/// An open by the unprivileged user is checked every time, whatever root
/// opened before (and whatever backing that left kept).
#[test]
fn a_kept_backing_does_not_open_a_file_to_a_user_it_is_closed_to() {
    let (uid, gid) = test_user();
    let fx = MountFixture::manual_turns();
    fx.sh("printf secret > secret && chmod 600 secret && printf open > open && chmod 644 open");
    assert_eq!(read_twice(&fx, &["secret", "open"]), "secret secret\nopen open\n");
    let probe = r#"
for n in ('secret', 'open'):
    try:
        print(n, open(n).read())
    except PermissionError:
        print(n, 'denied')
"#;
    let as_user = || stdout(&check(py_as_in(fx.path(), uid, gid, probe), "reads as the test user"));
    assert_eq!(as_user(), "secret denied\nopen open\n");
    fx.sh("chmod 644 secret && chmod 600 open");
    assert_eq!(as_user(), "secret secret\nopen denied\n", "after chmod");
    fx.sh("chmod 600 secret");
    assert_eq!(as_user(), "secret denied\nopen denied\n", "after chmod back");
}

/// A file whose read backing is kept, then opened for writing: the write
/// is recorded like any other (its pre-image is in the checkpoint before
/// it), the live file and a read open after it give the new bytes, and a
/// descriptor opened for reading before the write sees them too (one
/// backing inode).
#[test]
fn a_write_open_after_a_kept_read_backing_is_recorded_and_read_back() {
    let fx = MountFixture::manual_turns();
    fx.sh("printf 0123456789 > patched && printf old-bytes > truncated");
    assert_eq!(read_twice(&fx, &["patched", "truncated"]), "patched 0123456789\ntruncated old-bytes\n");
    let before = fx.turn("r000001");
    let script = r#"
import os
held = open('patched', 'rb')
fd = os.open('patched', os.O_RDWR)
os.pwrite(fd, b'ABC', 3)
os.close(fd)
with open('truncated', 'wb') as f: f.write(b'new')
print(held.read().decode())
"#;
    assert_eq!(fx.py(script).trim(), "012ABC6789", "a descriptor opened before the write");
    assert_eq!(read_twice(&fx, &["patched", "truncated"]), "patched 012ABC6789\ntruncated new\n");
    let after = fx.turn("r000002");
    let view = |c: i64, n: &str| format!(".rewindfs/checkpoints/{c}/{n}");
    assert_eq!(
        read_twice(&fx, &[&view(before, "patched"), &view(before, "truncated")]),
        format!("{} 0123456789\n{} old-bytes\n", view(before, "patched"), view(before, "truncated")),
        "the pre-images of writes through a kept backing"
    );
    assert_eq!(
        read_twice(&fx, &[&view(after, "patched"), &view(after, "truncated")]),
        format!("{} 012ABC6789\n{} new\n", view(after, "patched"), view(after, "truncated")),
    );
    fx.assert_fsck_clean("after writes through kept backings");
}

/// A reader holds a small file open (through the page cache) while the
/// file is written, truncated, mapped and written, and grown past the size
/// read that way, by other descriptors: every read of the held descriptor
/// and every new open gives the file's bytes at that moment, and the
/// history records each change.
#[test]
fn a_file_held_through_the_page_cache_shows_every_change() {
    let fx = MountFixture::manual_turns();
    fx.sh("printf v1 > f");
    assert_eq!(read_twice(&fx, &["f"]), "f v1\n");
    let before = fx.turn("r000001");
    let script = r#"
import os, mmap
def now():
    with open('f', 'rb') as g: return g.read()
r = os.open('f', os.O_RDONLY)
assert os.pread(r, 100, 0) == b'v1'
w = os.open('f', os.O_WRONLY)
os.pwrite(w, b'V2', 0)
assert os.pread(r, 100, 0) == b'V2', 'a write beside the reader'
os.ftruncate(w, 1)
assert os.pread(r, 100, 0) == b'V', 'a truncation beside the reader'
os.pwrite(w, b'abc', 0)
assert os.pread(r, 100, 0) == b'abc' and now() == b'abc', 'grown again'
rw = os.open('f', os.O_RDWR)
m = mmap.mmap(rw, 3)
m[0:1] = b'X'
m.flush(); m.close(); os.close(rw)
assert os.pread(r, 100, 0) == b'Xbc' and now() == b'Xbc', 'a shared mapping written beside the reader'
os.pwrite(w, b'z' * 300000, 3)
assert os.pread(r, 10, 0) == b'Xbczzzzzzz' and len(now()) == 300003, 'grown past the page-cache size'
os.close(w); os.close(r)
os.truncate('f', 3)
assert now() == b'Xbc'
with open('f', 'r+b') as g: g.write(b'Y')
assert now() == b'Ybc', 'written with no reader open, then opened again'
print('ok')
"#;
    assert_eq!(fx.py(script).trim(), "ok");
    let after = fx.turn("r000002");
    let view = |c: i64| format!(".rewindfs/checkpoints/{c}/f");
    assert_eq!(read_twice(&fx, &[&view(before), &view(after)]), format!("{} v1\n{} Ybc\n", view(before), view(after)));
    rewind(&fx, before);
    assert_eq!(read_twice(&fx, &["f"]), "f v1\n", "rewound");
    fx.assert_fsck_clean("after changes beside a page-cache reader");
}
