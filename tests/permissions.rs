//! Permissions on the mount: an unprivileged user, and root acting as
//! other users, get what they would get on the backing filesystem.

mod common;

use std::os::unix::fs::MetadataExt;
use std::process::Output;

use common::{MountFixture, check, py_as_in, stderr, test_user};

/// Runs a python3 program in the mount as `uid:gid` (no supplementary groups).
fn py_as(fx: &MountFixture, uid: u32, gid: u32, code: &str) -> Output {
    py_as_in(fx.path(), uid, gid, code)
}

fn assert_py_as(fx: &MountFixture, uid: u32, gid: u32, code: &str) {
    check(py_as(fx, uid, gid, code), &format!("python3 as {uid}:{gid}:\n{code}\n"));
}

#[test]
fn user_creates_files_it_owns() {
    let (uid, gid) = test_user();
    let fx = MountFixture::new();
    fx.sh(&format!("mkdir home && chown {uid}:{gid} home"));
    assert_py_as(
        &fx,
        uid,
        gid,
        r#"
import os
os.chdir('home')
open('f', 'w').write('mine'); os.mkdir('d'); os.symlink('f', 'l'); os.mkfifo('p'); os.link('f', 'h')
os.rename('f', 'g'); os.chmod('g', 0o600)
assert open('g').read() == 'mine'
for n in ('g', 'd', 'l', 'p', 'h'):
    st = os.lstat(n)
    assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid()), (n, st)
"#,
    );
    for n in ["g", "d", "l", "p"] {
        let m = std::fs::symlink_metadata(fx.ws.join("home").join(n)).unwrap();
        assert_eq!((m.uid(), m.gid()), (uid, gid), "backing owner of {n}");
    }
}

#[test]
fn user_is_refused_what_it_may_not_do() {
    let (uid, gid) = test_user();
    let fx = MountFixture::new();
    fx.sh("echo secret > rootfile && chmod 644 rootfile && echo hidden > private && chmod 600 private && mkdir -m 1777 sticky && echo r > sticky/rootowned");
    assert_py_as(
        &fx,
        uid,
        gid,
        r#"
import os, errno
assert open('rootfile').read() == 'secret\n'
assert err(os.open, 'rootfile', os.O_WRONLY) == errno.EACCES
assert err(os.open, 'rootfile', os.O_WRONLY | os.O_TRUNC) == errno.EACCES
assert err(os.open, 'private', os.O_RDONLY) == errno.EACCES
assert err(os.open, 'newfile', os.O_WRONLY | os.O_CREAT) == errno.EACCES
assert err(os.mkdir, 'newdir') == errno.EACCES
assert err(os.unlink, 'rootfile') == errno.EACCES
assert err(os.chmod, 'rootfile', 0o666) == errno.EPERM
assert err(os.chown, 'rootfile', os.getuid(), -1) == errno.EPERM
assert err(os.truncate, 'rootfile', 0) == errno.EACCES
assert err(os.setxattr, 'rootfile', 'user.x', b'1') == errno.EACCES
assert not os.access('rootfile', os.W_OK) and os.access('rootfile', os.R_OK)
open('sticky/mine', 'w').write('x')
assert err(os.unlink, 'sticky/rootowned') == errno.EPERM
assert err(os.rename, 'sticky/rootowned', 'sticky/stolen') == errno.EPERM
os.unlink('sticky/mine')
"#,
    );
    assert_eq!(std::fs::read_to_string(fx.ws.join("rootfile")).unwrap(), "secret\n");
    assert!(fx.ws.join("sticky/rootowned").exists());
}

#[test]
fn setgid_directory_passes_its_group_on() {
    let (uid, gid) = test_user();
    let fx = MountFixture::new();
    fx.sh("mkdir shared && chgrp 4242 shared && chmod 2777 shared");
    assert_py_as(
        &fx,
        uid,
        gid,
        r#"
import os, stat
os.chdir('shared')
open('f', 'w').close(); os.mkdir('sub'); os.symlink('f', 'l')
for n in ('f', 'sub', 'l'):
    st = os.lstat(n)
    assert st.st_gid == 4242 and st.st_uid == os.getuid(), (n, st)
assert os.stat('sub').st_mode & stat.S_ISGID, 'subdirectory must inherit setgid'
assert not os.stat('f').st_mode & stat.S_ISGID
os.mkdir('sub/deeper')
assert os.stat('sub/deeper').st_gid == 4242
"#,
    );
    let m = std::fs::metadata(fx.ws.join("shared/sub/deeper")).unwrap();
    assert_eq!((m.uid(), m.gid()), (uid, 4242));
    assert_ne!(gid, 4242);
}

#[test]
fn root_switching_uids() {
    let fx = MountFixture::new();
    fx.sh("mkdir -m 777 open");
    for (uid, gid) in [(1234, 1234), (2345, 100)] {
        assert_py_as(
            &fx,
            uid,
            gid,
            &format!(
                r#"
import os
p = 'open/by{uid}'
fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600); os.write(fd, b'{uid}'); os.close(fd)
st = os.stat(p)
assert (st.st_uid, st.st_gid) == ({uid}, {gid}), st
"#
            ),
        );
    }
    // 2345 may not read 1234's private file; 1234 may.
    let out = py_as(&fx, 2345, 100, "open('open/by1234').read()");
    assert!(!out.status.success() && stderr(&out).contains("PermissionError"), "{}", stderr(&out));
    assert_py_as(&fx, 1234, 1234, "assert open('open/by1234').read() == '1234'");
    let m = std::fs::metadata(fx.ws.join("open/by2345")).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o777), (2345, 100, 0o600));
}

/// The same script as the unprivileged user in a plain directory and in
/// the mount: setuid/setgid bits must come out the same (the kernel strips
/// them for users without CAP_FSETID; the daemon runs as root and has it).
#[test]
fn special_bits_match_plain_directory() {
    let (uid, gid) = test_user();
    let fx = MountFixture::new();
    let setup = "mkdir -m 2777 shared && chgrp 4242 shared && mkdir -m 777 open && \
                 printf data > suid && chmod 4777 suid && printf data > sgid && chgrp 4242 sgid && chmod 2777 sgid && \
                 printf data > suid2 && chmod 6777 suid2 && printf data > suid3 && chmod 4777 suid3";
    let script = r#"
import os
os.umask(0o022)
for d in ('shared', 'open'):
    for name, mode in (('f2755', 0o2755), ('f4755', 0o4755), ('f6777', 0o6777)):
        os.close(os.open(f'{d}/{name}', os.O_WRONLY | os.O_CREAT, mode))
    os.mkdir(f'{d}/d2755', 0o2755); os.mkdir(f'{d}/d3777', 0o3777)
with open('suid', 'a') as f: f.write('more')
fd = os.open('suid2', os.O_WRONLY); os.pwrite(fd, b'x', 0); os.close(fd)
os.truncate('suid3', 1)
with open('sgid', 'a') as f: f.write('more')
for root, dirs, files in sorted(os.walk('.')):
    for n in sorted(dirs + files):
        p = os.path.join(root, n); st = os.lstat(p)
        print(p, oct(st.st_mode), st.st_uid, st.st_gid, st.st_size)
"#;
    fx.assert_parity(setup, |dir| common::stdout(&check(py_as_in(dir, uid, gid, script), "script as the test user")));
}

/// Writes by an unprivileged user clear setuid/setgid in the cases where
/// the daemon must do it itself (FUSE_HANDLE_KILLPRIV_V2): a file the user
/// created setuid and then wrote, and a setuid file that root holds open
/// (so the kernel insists on passthrough for the user's open too). Root's
/// own writes keep the bits, as on ext4.
#[test]
fn special_bits_cleared_by_writes_the_daemon_cannot_see() {
    let (uid, gid) = test_user();
    let fx = MountFixture::new();
    let setup = "mkdir -m 777 open && printf data > held && chmod 4777 held && printf data > rootw && chmod 4777 rootw";
    let script = r#"
import os
fd = os.open('open/c4755', os.O_WRONLY | os.O_CREAT, 0o4755); os.write(fd, b'x'); os.close(fd)
fd = os.open('open/c2775', os.O_WRONLY | os.O_CREAT, 0o2775); os.close(fd)
fd = os.open('held', os.O_WRONLY); os.pwrite(fd, b'y', 0); os.close(fd)
# `stat -c %a` asks for the mode alone (statx STATX_MODE), which the kernel
# answers from its attribute cache unless told that the mode changed.
import subprocess
print(subprocess.run(['stat', '-c', '%n %a', 'held', 'open/c4755'], capture_output=True, text=True).stdout, end='')
for p in ('open/c4755', 'open/c2775', 'held'):
    st = os.lstat(p); print(p, oct(st.st_mode), st.st_size)
"#;
    fx.assert_parity(setup, |dir| {
        // Root holds `held` open for writing while the user writes it.
        let holder = std::fs::OpenOptions::new().read(true).write(true).open(dir.join("held")).expect("open held");
        let out = common::stdout(&check(py_as_in(dir, uid, gid, script), "script as the test user"));
        drop(holder);
        let mut f = std::fs::OpenOptions::new().append(true).open(dir.join("rootw")).expect("open rootw");
        std::io::Write::write_all(&mut f, b"root").expect("root write");
        drop(f);
        let m = std::fs::metadata(dir.join("rootw")).expect("stat rootw");
        format!("{out}rootw {:o}\n", std::os::unix::fs::PermissionsExt::mode(&m.permissions()))
    });
}
