#!/usr/bin/env python3
"""rewindfs benchmarks: the same workloads on native ext4 and on rewindfs.

Run through tests/bench/run.sh (needs root: it drops caches and mounts).
See docs/benchmarks.md for what each workload does and how to read the table.

Targets
  native   a plain directory on the same filesystem as the workspaces
  pt       rewindfs mount, default options (--passthrough all)
  off      rewindfs mount, --passthrough off (all data through the daemon)
  norec    rewindfs mount, --no-record
  null     a FUSE filesystem doing no I/O (tests/bench/nullfs.rs)
  fovl     fuse-overlayfs over an empty lower directory (records nothing; the
           usual FUSE overlay, /dev/fuse only: apt-get install fuse-overlayfs)
Any mounted target may carry a FUSE transport: `pt@uring`, `pt@classic`,
`null@uring`, ... (`mount --transport`; without one, `auto`). A uring target
switches the kernel's fuse.enable_uring on for the run.
A mounted target ending in `:alt` (`pt:alt`, `off@uring:alt`) runs the binary
of --alt-bin instead of --bin, in the same interleaved run, to compare two
builds under the same load (an extra table gives the paired ratios).

Each (workload, target, repetition) gets a fresh directory (and, for the
mounted targets, a fresh workspace, store and mount). Before every measured
step the page cache, dentries and inodes are dropped
(`sync; echo 3 > /proc/sys/vm/drop_caches`). Each step is repeated --reps
times; within a repetition every target runs once, in an order rotated by
one place per repetition, so that each repetition sees every target under
about the same machine load. A target's ratio to native is the median of
its per-repetition ratios (each against native in the same repetition).
"""

import argparse
import datetime
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
NULLFS = os.path.join(os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target"), "release", "examples", "nullfs")

# Workload sizes (the numbers).
SMALL_FILES = 20_000
SEQ_MIB = 512
RAND_WRITES = 2_000
RAND_FILE_MIB = 64
SQLITE_ROWS = 20_000
SQLITE_BATCH = 100
GREP_PATTERN = "rewindfs-bench-pattern-that-matches-nothing"

# Goal per step: "data" steps within 1.3x native, "meta" within 2x.
GOALS = {"data": 1.3, "meta": 2.0}

TARGETS = {
    "native": "native ext4",
    "pt": "rewindfs (passthrough)",
    "off": "rewindfs (passthrough off)",
    "norec": "rewindfs (passthrough, --no-record)",
    "null": "null FUSE fs (no I/O)",
    "fovl": "fuse-overlayfs",
}

TRANSPORTS = ("uring", "classic")
ENABLE_URING = "/sys/module/fuse/parameters/enable_uring"


ALT_LABEL = "alt"  # set from --alt-label


def split_alt(t):
    """`pt@uring:alt` -> (`pt@uring`, True): the target without the mark
    that it runs the --alt-bin binary."""
    t, sep, _ = t.partition(":")
    return t, bool(sep)


def base(t):
    """The target without its transport: `pt@uring` -> `pt`."""
    return split_alt(t)[0].partition("@")[0]


def label(t):
    t, alt = split_alt(t)
    b, _, tr = t.partition("@")
    return TARGETS[b] + (f" [{tr}]" if tr else "") + (f" [{ALT_LABEL}]" if alt else "")


# The null target (tests/bench/nullfs.rs) keeps names in memory and discards
# data: only workloads that never read back what they wrote run on it.
NULL_WORKLOADS = ("smallfiles", "untar")

# Measurements of rewindfs itself (not run per target): --workloads names.
SPECIAL = ("turn", "bytes", "views", "rewind")

# Hermetic git: no user or system config, fixed identity.
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    # No `gc --auto` left running in the background after a commit: it
    # would compete with the next step and keep the mount busy.
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "gc.auto",
    "GIT_CONFIG_VALUE_0": "0",
    "GIT_CONFIG_KEY_1": "maintenance.auto",
    "GIT_CONFIG_VALUE_1": "false",
}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def sh(cmd, cwd=None, env=None, check=True, capture=False):
    e = dict(os.environ)
    if env:
        e.update(env)
    r = subprocess.run(cmd, cwd=cwd, env=e, shell=isinstance(cmd, str), check=False,
                       stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"command failed ({r.returncode}): {cmd}\n{r.stderr[-2000:]}")
    return r


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def timed(cmd, cwd=None, env=None, ok_codes=(0,)):
    """Runs a command (list or shell string) and returns its wall time."""
    e = dict(os.environ)
    if env:
        e.update(env)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=e, shell=isinstance(cmd, str),
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    if r.returncode not in ok_codes:
        raise RuntimeError(f"command failed ({r.returncode}): {cmd}\n{r.stderr[-2000:]}")
    return dt


def cpu_busy(window=0.5):
    """Fraction of CPU time spent busy (all cores) over `window` seconds."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + v[4]
        return sum(v), idle
    t0, i0 = snap()
    time.sleep(window)
    t1, i1 = snap()
    return 1 - (i1 - i0) / max(1, t1 - t0)


def wait_idle(max_wait, threshold=0.15):
    """Waits up to max_wait seconds for the machine to be quiet (other jobs
    share it). Returns the last busy fraction seen."""
    deadline = time.monotonic() + max_wait
    busy = cpu_busy()
    while busy > threshold and time.monotonic() < deadline:
        busy = cpu_busy()
    return busy


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


# ---------------------------------------------------------------------------
# Inputs built once and cached in the work directory


class Inputs:
    def __init__(self, workdir, cc, workloads):
        self.cache = os.path.join(workdir, "cache")
        os.makedirs(self.cache, exist_ok=True)
        self.tarball, self.tree_files, self.tree_bytes = self._tarball()
        self.smallfiles = self._helper(cc) if "smallfiles" in workloads else None
        # Incompressible source for the sequential write, kept in tmpfs so
        # that reading it costs no disk I/O (drop_caches does not drop tmpfs).
        self.seq_src = os.path.join("/dev/shm", f"rewindfs-bench-{os.getpid()}.bin")
        if {"seq", "randwrite"} & set(workloads):
            log(f"bench: generating {SEQ_MIB} MiB of random data in {self.seq_src}")
            with open("/dev/urandom", "rb") as r, open(self.seq_src, "wb") as w:
                for _ in range(SEQ_MIB):
                    w.write(r.read(1 << 20))

    def close(self):
        try:
            os.unlink(self.seq_src)
        except FileNotFoundError:
            pass

    def _tarball(self):
        """An uncompressed tarball of the crate sources in ~/.cargo/registry/src
        (the *-pc-windows-gnu import-library crates left out: they are a few
        large binary blobs, not a source tree)."""
        tar = os.path.join(self.cache, "src-tree.tar")
        meta = tar + ".json"
        if os.path.exists(tar) and os.path.exists(meta):
            with open(meta) as f:
                m = json.load(f)
            return tar, m["files"], m["bytes"]
        home = os.path.expanduser("~/.cargo/registry/src")
        regs = sorted(d for d in os.listdir(home) if os.path.isdir(os.path.join(home, d)))
        if not regs:
            raise SystemExit("bench: no crate sources in ~/.cargo/registry/src (run cargo build first)")
        root = os.path.join(home, regs[0])
        crates = sorted(c for c in os.listdir(root) if "-pc-windows-gnu" not in c)
        files = nbytes = 0
        for c in crates:
            for dp, _, fns in os.walk(os.path.join(root, c)):
                for fn in fns:
                    p = os.path.join(dp, fn)
                    if os.path.isfile(p) and not os.path.islink(p):
                        files += 1
                        nbytes += os.path.getsize(p)
        log(f"bench: building {tar} from {len(crates)} crates ({files} files, {nbytes >> 20} MiB)")
        listfile = tar + ".list"
        with open(listfile, "w") as f:
            f.write("\n".join(crates) + "\n")
        sh(["tar", "-cf", tar + ".tmp", "-C", root, "--sort=name", "-T", listfile])
        os.rename(tar + ".tmp", tar)
        with open(meta, "w") as f:
            json.dump({"files": files, "bytes": nbytes, "crates": len(crates), "root": root}, f)
        return tar, files, nbytes

    def _helper(self, cc):
        src = os.path.join(HERE, "smallfiles.c")
        out = os.path.join(self.cache, "smallfiles")
        if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(src):
            sh([cc, "-O2", "-o", out, src])
        return out


# ---------------------------------------------------------------------------
# Targets: where a workload runs


UNMOUNT_ERRORS = []


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/mounts") as f:
        return any(line.split()[1] == path for line in f)


class Target:
    """Creates a fresh directory for one workload run, and removes it."""

    def __init__(self, kind, base, binary, runtime_dir):
        self.name = kind.replace("@", "-").replace(":", "-")
        kind, _, self.transport = split_alt(kind)[0].partition("@")
        self.kind, self.base, self.binary, self.runtime_dir = kind, base, binary, runtime_dir
        self.daemon_pid = None
        self.passthrough_reported = None

    def setup(self, tag):
        self.root = os.path.join(self.base, f"{self.name}-{tag}")
        if os.path.exists(self.root):
            shutil.rmtree(self.root)
        os.makedirs(self.root)
        if self.kind == "native":
            self.dir = os.path.join(self.root, "ws")
            os.makedirs(self.dir)
            return self.dir
        ws, mnt, store = (os.path.join(self.root, n) for n in ("ws", "mnt", "store"))
        for d in (ws, mnt):
            os.makedirs(d)
        if self.kind == "fovl":
            upper, work = (os.path.join(self.root, n) for n in ("upper", "work"))
            for d in (upper, work):
                os.makedirs(d)
            sh(["fuse-overlayfs", "-o", f"lowerdir={ws},upperdir={upper},workdir={work}", mnt])
            if not is_mounted(mnt):
                raise SystemExit("bench: fuse-overlayfs did not mount")
            self.mnt = self.dir = mnt
            return self.dir
        if self.kind == "null":
            self.proc = subprocess.Popen([NULLFS, mnt] + (["--uring"] if self.transport == "uring" else []))
            for _ in range(200):
                if is_mounted(mnt):
                    break
                if self.proc.poll() is not None:
                    raise SystemExit(f"bench: nullfs exited with {self.proc.returncode}")
                time.sleep(0.02)
            else:
                raise SystemExit("bench: nullfs did not mount within 4 s")
            if self.transport == "uring":
                # nullfs falls back to /dev/fuse silently: check its ring threads.
                time.sleep(0.2)
                comms = [open(f"/proc/{self.proc.pid}/task/{t}/comm").read().strip()
                         for t in os.listdir(f"/proc/{self.proc.pid}/task")]
                if not any(c.startswith("fuse-ring") for c in comms):
                    raise SystemExit(f"bench: nullfs --uring runs no ring thread ({comms})")
            self.mnt = self.dir = mnt
            return self.dir
        cmd = [self.binary, "mount", ws, mnt, "--store", store]
        if self.kind == "off":
            cmd += ["--passthrough", "off"]
        if self.kind == "norec":
            cmd += ["--no-record"]
        if self.transport:
            cmd += ["--transport", self.transport]
        r = sh(cmd, env={"REWINDFS_RUNTIME_DIR": self.runtime_dir}, capture=True)
        out = r.stdout
        if "daemon pid" in out:
            self.daemon_pid = int(out.rsplit("daemon pid", 1)[1].strip().rstrip(")"))
        st = sh([self.binary, "status"], env={"REWINDFS_RUNTIME_DIR": self.runtime_dir},
                capture=True, check=False).stdout
        for line in st.splitlines():
            if "passthrough:" in line:
                self.passthrough_reported = line.split(":", 1)[1].strip()
        self.mnt = mnt
        self.dir = mnt
        return self.dir

    def ring_requests(self):
        """Requests the mount's io_uring rings served so far (`status --json`;
        read through the control socket, so reading it costs no FUSE
        request), or None when the target is not a rewindfs mount on the
        rings."""
        if self.kind in ("native", "null", "fovl") or self.transport != "uring":
            return None
        r = sh([self.binary, "status", "-C", self.mnt, "--json"], env={"REWINDFS_RUNTIME_DIR": self.runtime_dir},
               capture=True, check=False)
        try:
            v = json.loads(r.stdout)
            v = v[0] if isinstance(v, list) else v
            return int(v["ring_requests"])
        except (ValueError, KeyError, IndexError, TypeError):
            return None

    def teardown(self):
        if self.kind == "fovl":
            if sh(["umount", self.mnt], check=False).returncode != 0:
                sh(["umount", "-l", self.mnt], check=False)
            self.store_bytes = None
            shutil.rmtree(self.root, ignore_errors=True)
            return
        if self.kind == "null":
            sh(["umount", self.mnt], check=False)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                sh(["umount", "-l", self.mnt], check=False)
                self.proc.kill()
            self.store_bytes = None
            shutil.rmtree(self.root, ignore_errors=True)
            return
        if self.kind != "native":
            r = sh([self.binary, "unmount", self.mnt], env={"REWINDFS_RUNTIME_DIR": self.runtime_dir},
                   check=False, capture=True)
            if r.returncode != 0:
                still = is_mounted(self.mnt)
                UNMOUNT_ERRORS.append(f"{os.path.basename(self.root)}: {r.stderr.strip()}"
                                      f" (mount {'still there' if still else 'gone'})")
                log(f"bench: `rewindfs unmount {self.mnt}` failed: {r.stderr.strip()}; "
                    f"mount {'still there: lazy-unmounting' if still else 'is gone anyway'}")
                if still:
                    sh(["umount", "-l", self.mnt], check=False)
                log_src = os.path.join(self.root, "store", "daemon.log")
                if os.path.exists(log_src):
                    shutil.copy(log_src, os.path.join(self.base, f"..", f"daemon-{os.path.basename(self.root)}.log"))
            # Wait for the daemon to go away before deleting its store.
            if self.daemon_pid:
                for _ in range(100):
                    if not os.path.exists(f"/proc/{self.daemon_pid}"):
                        break
                    time.sleep(0.05)
            self.daemon_pid = None
        self.store_bytes = dir_bytes(os.path.join(self.root, "store")) if self.kind != "native" else None
        shutil.rmtree(self.root, ignore_errors=True)


# ---------------------------------------------------------------------------
# Workloads. Each is a generator function (inp, dir, step) where step(name,
# cls, fn) drops caches, runs fn, and records its wall time; untimed setup is
# plain code between steps.


def wl_untar(inp, d, step):
    step("untar", "meta", lambda: timed(["tar", "-xf", inp.tarball, "-C", d]))


def wl_git(inp, d, step):
    sh(["tar", "-xf", inp.tarball, "-C", d])
    step("git init+add+commit", "meta",
         lambda: timed("git init -q && git add -A && git commit -q -m import", cwd=d, env=GIT_ENV))


def wl_warm(inp, d, step):
    """What an agent repeats all day on a tree whose caches are warm: each
    step runs once untimed first, and caches are not dropped before it."""
    sh(["tar", "-xf", inp.tarball, "-C", d])
    sh("git init -q && git add -A && git commit -q -m import", cwd=d, env=GIT_ENV)
    sh(["git", "status", "--porcelain"], cwd=d, env=GIT_ENV, capture=True)
    step("git status (warm)", "meta", lambda: timed(["git", "status", "--porcelain"], cwd=d, env=GIT_ENV), warm=True)
    timed(["grep", "-r", GREP_PATTERN, d], ok_codes=(1,))
    step("grep -r (warm)", "meta", lambda: timed(["grep", "-r", GREP_PATTERN, d], ok_codes=(1,)), warm=True)


def wl_smallfiles(inp, d, step):
    for phase in ("create", "stat", "rename", "delete"):
        def run(phase=phase):
            r = sh([inp.smallfiles, phase, d, str(SMALL_FILES)], capture=True)
            return float(r.stdout.strip())
        step(f"{SMALL_FILES // 1000}k files: {phase}", "meta", run)


def wl_seq(inp, d, step):
    f = os.path.join(d, "seq.bin")
    step(f"seq write {SEQ_MIB} MiB (fsync)", "data",
         lambda: timed(["dd", f"if={inp.seq_src}", f"of={f}", "bs=1M", "conv=fsync", "status=none"]))
    step(f"seq read {SEQ_MIB} MiB", "data",
         lambda: timed(["dd", f"if={f}", "of=/dev/null", "bs=1M", "status=none"]))
    # fio as its users run it: the file is made by the writer, which
    # preallocates it (fallocate) and reopens it, then writes 4 KiB blocks.
    if shutil.which("fio") is None:
        raise SystemExit("bench: the seq workload needs fio (apt-get install -y fio)")
    g = os.path.join(d, "fio.bin")
    step(f"seq write {SEQ_MIB} MiB (fio, fsync at end)", "data",
         lambda: timed(["fio", "--name=seq", f"--filename={g}", "--rw=write", f"--size={SEQ_MIB}M",
                        "--end_fsync=1", "--output=/dev/null"]))


RANDWRITE = r"""
import os, random, sys, time
path, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(42)
blocks = size // 4096
bufs = [os.urandom(4096) for _ in range(16)]
fd = os.open(path, os.O_WRONLY)
t0 = time.perf_counter()
for i in range(n):
    os.pwrite(fd, bufs[i % 16], rng.randrange(blocks) * 4096)
    os.fsync(fd)
print(time.perf_counter() - t0)
os.close(fd)
"""


def wl_randwrite(inp, d, step):
    f = os.path.join(d, "rand.bin")
    sh(["dd", f"if={inp.seq_src}", f"of={f}", "bs=1M", f"count={RAND_FILE_MIB}", "conv=fsync", "status=none"])

    def run():
        r = sh([sys.executable, "-c", RANDWRITE, f, str(RAND_WRITES), str(RAND_FILE_MIB << 20)], capture=True)
        return float(r.stdout.strip())
    step(f"rand write 4k+fsync x{RAND_WRITES}", "data", run)


def wl_grep(inp, d, step):
    sh(["tar", "-xf", inp.tarball, "-C", d])
    step("grep -r (cold)", "meta", lambda: timed(["grep", "-r", GREP_PATTERN, d], ok_codes=(1,)))


SQLITE = r"""
import sqlite3, sys, time
path, rows, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
db = sqlite3.connect(path, isolation_level=None)
db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT, v BLOB)")
t0 = time.perf_counter()
i = 0
while i < rows:
    db.execute("BEGIN")
    for _ in range(batch):
        db.execute("INSERT INTO t (k, v) VALUES (?, ?)", (f"key-{i}", b"x" * 100))
        i += 1
    db.execute("COMMIT")
print(time.perf_counter() - t0)
db.close()
"""


def wl_sqlite(inp, d, step):
    def run():
        r = sh([sys.executable, "-c", SQLITE, os.path.join(d, "bench.db"), str(SQLITE_ROWS), str(SQLITE_BATCH)],
               capture=True)
        return float(r.stdout.strip())
    step(f"sqlite {SQLITE_ROWS // 1000}k inserts, txn of {SQLITE_BATCH}", "data", run)


WORKLOADS = {
    "untar": wl_untar,
    "git": wl_git,
    "smallfiles": wl_smallfiles,
    "seq": wl_seq,
    "randwrite": wl_randwrite,
    "grep": wl_grep,
    "warm": wl_warm,
    "sqlite": wl_sqlite,
}


# ---------------------------------------------------------------------------
# Shadow git: the baseline for `turn` latency and bytes stored. Today's agent
# checkpoints (Gemini CLI, Cline, PawGit) keep a separate git directory and
# run `add -A && commit` over the whole work tree at every checkpoint.


def shadow_git(shadow, tree, *args):
    return ["git", f"--git-dir={shadow}", f"--work-tree={tree}", *args]


def shadow_git_init(shadow, tree):
    sh(shadow_git(shadow, tree, "init", "-q"), env=GIT_ENV)


def shadow_git_turn(shadow, tree, message="turn"):
    """One shadow-git checkpoint: `add -A && commit`. Returns wall seconds."""
    t0 = time.perf_counter()
    sh(shadow_git(shadow, tree, "add", "-A"), env=GIT_ENV)
    sh(shadow_git(shadow, tree, "commit", "-q", "--allow-empty", "-m", message), env=GIT_ENV)
    return time.perf_counter() - t0


def dir_bytes(path, apparent=False):
    """Bytes on disk (allocated blocks) under path; apparent=True: file sizes."""
    total = 0
    for dp, _, fns in os.walk(path):
        for fn in fns:
            try:
                st = os.lstat(os.path.join(dp, fn))
                total += st.st_size if apparent else st.st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def make_tree(root, nfiles, seed=1):
    """A synthetic source-like tree: nfiles text files of 1-4 KiB, 100 per
    directory, 10 directories per parent."""
    rng = random.Random(seed)
    words = ["fn", "let", "mut", "impl", "struct", "return", "match", "self", "pub", "use", "mod", "if", "else"]
    for i in range(nfiles):
        d = os.path.join(root, f"a{i // 1000:03d}", f"b{(i // 100) % 10}")
        if i % 100 == 0:
            os.makedirs(d, exist_ok=True)
        lines = [" ".join(rng.choice(words) for _ in range(8)) + f" // {i}.{j}" for j in range(rng.randint(20, 80))]
        with open(os.path.join(d, f"f{i}.rs"), "w") as f:
            f.write("\n".join(lines) + "\n")


def touch_some(root, nfiles, k, turn):
    """The edits of one agent turn: modify k existing files, add one."""
    rng = random.Random(turn)
    for i in rng.sample(range(nfiles), k):
        p = os.path.join(root, f"a{i // 1000:03d}", f"b{(i // 100) % 10}", f"f{i}.rs")
        with open(p, "a") as f:
            f.write(f"// edit in turn {turn}\n")
    with open(os.path.join(root, f"new-{turn}.rs"), "w") as f:
        f.write(f"// new in turn {turn}\n")


def bench_shadow_turn(base, sizes, reps):
    """Shadow-git turn latency on trees of each size: the first checkpoint
    (whole tree), then `reps` turns each changing 10 files and adding one.
    Warm caches (an agent's tree is hot when its turn ends)."""
    rows = []
    for n in sizes:
        root = os.path.join(base, f"shadow-{n}")
        shutil.rmtree(root, ignore_errors=True)
        tree, shadow = os.path.join(root, "tree"), os.path.join(root, "shadow.git")
        log(f"bench: shadow git, {n} files: building tree")
        make_tree(tree, n)
        shadow_git_init(shadow, tree)
        first = shadow_git_turn(shadow, tree, "first")
        times = []
        for t in range(reps):
            touch_some(tree, n, 10, t)
            times.append(shadow_git_turn(shadow, tree, f"turn {t}"))
        idle = shadow_git_turn(shadow, tree, "no change")
        rows.append({"files": n, "first": first, "turn": statistics.median(times), "turns": times,
                     "idle": idle, "shadow_bytes": dir_bytes(shadow)})
        shutil.rmtree(root, ignore_errors=True)
    return rows


def bench_shadow_bytes(base, edits=100):
    """Bytes a shadow git keeps for `edits` one-line edits of a 1 MiB text
    file, one checkpoint per edit: loose objects as left by the tools, and
    after `git gc` (delta-compressed pack)."""
    root = os.path.join(base, "shadow-bytes")
    shutil.rmtree(root, ignore_errors=True)
    tree, shadow = os.path.join(root, "tree"), os.path.join(root, "shadow.git")
    os.makedirs(tree)
    rng = random.Random(7)
    lines = [f"{i:06d} " + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(57)) for i in range(16384)]
    path = os.path.join(tree, "big.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    file_bytes = os.path.getsize(path)
    shadow_git_init(shadow, tree)
    shadow_git_turn(shadow, tree, "initial")
    after_initial = dir_bytes(os.path.join(shadow, "objects"))
    for e in range(edits):
        k = rng.randrange(len(lines))
        lines[k] = lines[k][:7] + f"edit {e:03d} " + lines[k][16:]
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        shadow_git_turn(shadow, tree, f"edit {e}")
    loose = dir_bytes(os.path.join(shadow, "objects"))
    git_loose = dir_bytes(shadow)
    sh(shadow_git(shadow, tree, "gc", "-q"), env=GIT_ENV)
    packed = dir_bytes(os.path.join(shadow, "objects"))
    git_packed = dir_bytes(shadow)
    shutil.rmtree(root, ignore_errors=True)
    return {"file_bytes": file_bytes, "edits": edits, "after_initial": after_initial,
            "loose": loose, "packed": packed, "git_loose": git_loose, "git_packed": git_packed}


# ---------------------------------------------------------------------------
# rewindfs-specific measurements (turn, views, bytes, rewind). Each runs once per
# repetition outside the native/mount target loop and returns rows for its
# own table. Select them with --workloads turn,bytes,views,rewind.


class Mount:
    """One rewindfs mount of `ws` on `mnt` with its own store."""

    def __init__(self, binary, runtime_dir, ws, mnt, store, *extra):
        self.binary, self.env = binary, {"REWINDFS_RUNTIME_DIR": runtime_dir}
        self.ws, self.mnt, self.store = ws, mnt, store
        os.makedirs(mnt, exist_ok=True)
        t0 = time.perf_counter()
        r = sh([binary, "mount", ws, mnt, "--store", store, *extra], env=self.env, capture=True)
        self.mount_secs = time.perf_counter() - t0
        self.pid = None
        if "daemon pid" in r.stdout:
            self.pid = int(r.stdout.rsplit("daemon pid", 1)[1].strip().rstrip(")"))

    def cli(self, *args, capture=True, check=True):
        return sh([self.binary, *args], env=self.env, capture=capture, check=check)

    def turn(self):
        """`rewindfs turn`: returns (seconds, checkpoint number)."""
        t0 = time.perf_counter()
        r = self.cli("turn", "-C", self.mnt, "--json")
        dt = time.perf_counter() - t0
        return dt, json.loads(r.stdout)["checkpoint"]

    def pending(self):
        """Rewound files whose bytes the settler has not written yet
        (`rewindfs status --json`, field pending_files)."""
        r = self.cli("status", "-C", self.mnt, "--json", check=False)
        try:
            return json.loads(r.stdout)["pending_files"]
        except (ValueError, KeyError) as e:
            log(f"bench: cannot read pending count: {e}: {r.stdout!r} {r.stderr!r}")
            return None

    def unmount(self):
        t0 = time.perf_counter()
        r = self.cli("unmount", self.mnt, check=False)
        if r.returncode != 0:
            still = is_mounted(self.mnt)
            UNMOUNT_ERRORS.append(f"{self.mnt}: {r.stderr.strip()} (mount {'still there' if still else 'gone'})")
            if still:
                sh(["umount", "-l", self.mnt], check=False)
        if self.pid:
            for _ in range(6000):
                if not os.path.exists(f"/proc/{self.pid}"):
                    break
                time.sleep(0.01)
        return time.perf_counter() - t0


def tree_path(i):
    return os.path.join(f"a{i // 1000:03d}", f"b{(i // 100) % 10}", f"f{i}.rs")


def bench_turns(ctx, sizes, reps, keep_mount_for_views=None):
    """`rewindfs turn` vs shadow git `add -A && commit` on the same tree,
    after changing 10 files and adding 1 (warm caches). Returns rows; with
    keep_mount_for_views=N the mount of the N-file tree is returned too."""
    rows, kept = [], None
    for n in sizes:
        root = os.path.join(ctx.runs, f"turn-{n}")
        shutil.rmtree(root, ignore_errors=True)
        ws, shadow = os.path.join(root, "ws"), os.path.join(root, "shadow.git")
        log(f"bench: turn, {n} files: building tree")
        make_tree(ws, n)
        shadow_git_init(shadow, ws)
        first = shadow_git_turn(shadow, ws, "first")
        git_times = []
        for t in range(reps):
            touch_some(ws, n, 10, 1000 + t)
            git_times.append(shadow_git_turn(shadow, ws, f"turn {t}"))
        git_idle = shadow_git_turn(shadow, ws, "no change")
        git_bytes = dir_bytes(shadow)
        os.sync()
        m = Mount(ctx.bin, ctx.runtime_dir, ws, os.path.join(root, "mnt"), os.path.join(root, "store"),
                  "--auto-turn", "0")
        rw_first, _ = m.turn()  # the first explicit turn after mounting
        rw_times = []
        for t in range(reps):
            touch_some(m.mnt, n, 10, 2000 + t)
            dt, _ = m.turn()
            rw_times.append(dt)
            log(f"  turn {n} files rep {t + 1}: rewindfs {dt:.3f} s, shadow git {git_times[t]:.3f} s "
                f"(load {loadavg():.2f})")
        rw_idle, _ = m.turn()
        ctx.loads.append(loadavg())
        rows.append({"files": n, "mount": m.mount_secs, "rw_first": rw_first, "rw_turn": statistics.median(rw_times),
                     "rw_turns": rw_times, "rw_idle": rw_idle, "git_first": first,
                     "git_turn": statistics.median(git_times), "git_turns": git_times, "git_idle": git_idle,
                     "git_bytes": git_bytes, "store_bytes": dir_bytes(m.store)})
        if keep_mount_for_views == n:
            kept = (m, root)
        else:
            m.unmount()
            shutil.rmtree(root, ignore_errors=True)
    return rows, kept


def bench_bytes(ctx, edits=100):
    """Store bytes for `edits` one-line edits of a 1 MiB text file with a
    `turn` after each, against full copies and the shadow git."""
    root = os.path.join(ctx.runs, "bytes")
    shutil.rmtree(root, ignore_errors=True)
    ws = os.path.join(root, "ws")
    os.makedirs(ws)
    m = Mount(ctx.bin, ctx.runtime_dir, ws, os.path.join(root, "mnt"), os.path.join(root, "store"),
              "--auto-turn", "0")
    rng = random.Random(7)  # the same file and edits as bench_shadow_bytes
    lines = [f"{i:06d} " + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(57)) for i in range(16384)]
    path = os.path.join(m.mnt, "big.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    file_bytes = os.path.getsize(path)
    m.turn()
    chunks = os.path.join(m.store, "chunks")
    after_initial = dir_bytes(chunks)
    for e in range(edits):
        k = rng.randrange(len(lines))
        lines[k] = lines[k][:7] + f"edit {e:03d} " + lines[k][16:]
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        m.turn()
    m.unmount()
    out = {"file_bytes": file_bytes, "edits": edits, "chunks_initial": after_initial,
           "chunks": dir_bytes(chunks), "chunks_apparent": dir_bytes(chunks, apparent=True),
           "meta": dir_bytes(m.store) - dir_bytes(chunks)}
    shutil.rmtree(root, ignore_errors=True)
    out["shadow"] = bench_shadow_bytes(ctx.runs, edits)
    return out


def bench_views(ctx, m, ntree):
    """Opening a view of a checkpoint of the mounted `ntree`-file tree and
    listing its root, and reading a SEQ_MIB file through views vs live."""
    res = {"files": ntree}
    cp_tree = m.turn()[1]

    def t_ls(path):
        drop_caches()
        return timed(["ls", path])
    res["ls_live"] = t_ls(m.mnt)
    res["ls_dotdir"] = t_ls(os.path.join(m.mnt, ".rewindfs", "checkpoints", str(cp_tree)))
    res["ls_dotdir_old"] = t_ls(os.path.join(m.mnt, ".rewindfs", "checkpoints", "1"))
    view = os.path.join(os.path.dirname(m.mnt), "view")
    os.makedirs(view, exist_ok=True)
    drop_caches()
    t0 = time.perf_counter()
    m.cli("show", "-C", m.mnt, str(cp_tree), view)
    res["show"] = time.perf_counter() - t0
    res["show_ls"] = timed(["ls", view])
    m.cli("unmount", view, check=False)
    # 512 MiB: version X at cp_x (changed later: read from the store),
    # version Y at cp_y (unchanged since: read from the live tree).
    big = os.path.join(m.mnt, "big.bin")
    sh(["dd", f"if={ctx.inputs.seq_src}", f"of={big}", "bs=1M", "conv=fsync", "status=none"])
    _, cp_x = m.turn()
    t0 = time.perf_counter()
    sh(["dd", "if=/dev/urandom", f"of={big}", "bs=1M", f"count={SEQ_MIB}", "conv=fsync", "status=none"])
    res["overwrite"] = time.perf_counter() - t0
    _, cp_y = m.turn()

    def t_read(path):
        drop_caches()
        return timed(["dd", f"if={path}", "of=/dev/null", "bs=1M", "status=none"])
    res["read_live"] = t_read(big)
    res["read_store"] = t_read(os.path.join(m.mnt, ".rewindfs", "checkpoints", str(cp_x), "big.bin"))
    res["read_view_live"] = t_read(os.path.join(m.mnt, ".rewindfs", "checkpoints", str(cp_y), "big.bin"))
    # The view of cp_x must give the first version back.
    res["store_exact"] = sh(["cmp", "-s", ctx.inputs.seq_src,
                             os.path.join(m.mnt, ".rewindfs", "checkpoints", str(cp_x), "big.bin")],
                            check=False).returncode == 0
    m.cli("show", "-C", m.mnt, str(cp_x), view)
    res["read_show_store"] = t_read(os.path.join(view, "big.bin"))
    m.cli("unmount", view, check=False)
    ctx.loads.append(loadavg())
    log(f"  views: {res}")
    return res


def bench_rewind(ctx, base_files, new_files, big_mib):
    """Rewind latency for a small and a large turn, the settler's time, and
    the shadow-git equivalent (`git restore --source C . && git clean -fd`)."""
    root = os.path.join(ctx.runs, "rewind")
    shutil.rmtree(root, ignore_errors=True)
    ws, gtree, shadow = (os.path.join(root, n) for n in ("ws", "gtree", "shadow.git"))
    log(f"bench: rewind: building a {base_files}-file tree and a {big_mib} MiB file")
    make_tree(ws, base_files)
    sh(["dd", "if=/dev/urandom", f"of={os.path.join(ws, 'big.bin')}", "bs=1M", f"count={big_mib}", "status=none"])
    sh(["cp", "-a", ws, gtree])
    os.sync()

    def big_turn(d):
        """20,000 new files (100 B-4 KiB) in 200 directories and big.bin rewritten."""
        rng = random.Random(5)
        for i in range(new_files):
            sub = os.path.join(d, "gen", f"d{i // 100:03d}")
            if i % 100 == 0:
                os.makedirs(sub, exist_ok=True)
            with open(os.path.join(sub, f"g{i}.o"), "wb") as f:
                f.write(b"x" * rng.randint(100, 4096))
        with open(os.path.join(d, "big.bin"), "r+b") as f:
            chunk = os.urandom(1 << 20)
            for i in range(big_mib):
                f.write(chunk[i % 997:] + chunk[:i % 997])
            f.flush()
            os.fsync(f.fileno())

    def small_turn(d):
        with open(os.path.join(d, tree_path(7)), "a") as f:
            f.write("// one change\n")

    edits = min(2000, base_files)

    def edits_turn(d):
        """2,000 files of the tree rewritten in place (100 per directory)."""
        for i in range(edits):
            with open(os.path.join(d, tree_path(i)), "a") as f:
                f.write("// edited\n")

    res = {"base_files": base_files, "new_files": new_files, "big_mib": big_mib, "edits": edits}
    # rewindfs
    m = Mount(ctx.bin, ctx.runtime_dir, ws, os.path.join(root, "mnt"), os.path.join(root, "store"),
              "--auto-turn", "0")
    for name, fn in (("small", small_turn), ("large", big_turn), ("edits", edits_turn)):
        _, cp = m.turn()
        t0 = time.perf_counter()
        fn(m.mnt)
        res[f"{name}_change"] = time.perf_counter() - t0
        res[f"{name}_turn"], _ = m.turn()
        os.sync()
        t0 = time.perf_counter()
        r = m.cli("rewind", "-C", m.mnt, str(cp), "--json")
        os.listdir(m.mnt)
        os.stat(os.path.join(m.mnt, "big.bin"))
        res[f"{name}_rewind"] = time.perf_counter() - t0
        try:
            j = json.loads(r.stdout)
            res[f"{name}_daemon_ms"] = j.get("elapsed_ms")
            res[f"{name}_phases_ms"] = j.get("phases_ms")
            res[f"{name}_changes"] = len(j.get("changes", []))
        except ValueError:
            pass
        # The settler: poll the pending files until none is left.
        t1 = time.perf_counter()
        while True:
            p = m.pending()
            if not p:
                break
            if time.perf_counter() - t1 > 600:
                break
            time.sleep(0.05)
        res[f"{name}_settle"] = time.perf_counter() - t0
        res[f"{name}_settle_ok"] = p == 0
        gone = not os.path.exists(os.path.join(m.mnt, "gen"))
        res[f"{name}_check"] = gone
        log(f"  rewind {name}: {res[f'{name}_rewind']:.3f} s, settled after {res[f'{name}_settle']:.3f} s "
            f"(load {loadavg():.2f})")
    res["unmount"] = m.unmount()
    # shadow git, same changes
    shadow_git_init(shadow, gtree)
    shadow_git_turn(shadow, gtree, "base")
    for name, fn in (("small", small_turn), ("large", big_turn), ("edits", edits_turn)):
        base = sh(shadow_git(shadow, gtree, "rev-parse", "HEAD"), env=GIT_ENV, capture=True).stdout.strip()
        fn(gtree)
        res[f"git_{name}_commit"] = shadow_git_turn(shadow, gtree, name)
        os.sync()
        res[f"git_{name}_rewind"] = timed(f"git --git-dir={shadow} --work-tree={gtree} restore --source {base} . && "
                                          f"git --git-dir={shadow} --work-tree={gtree} clean -fdq",
                                          cwd=gtree, env=GIT_ENV)
        shadow_git_turn(shadow, gtree, f"after rewind {name}")
        log(f"  git rewind {name}: {res[f'git_{name}_rewind']:.3f} s")
    ctx.loads.append(loadavg())
    shutil.rmtree(root, ignore_errors=True)
    return res


# ---------------------------------------------------------------------------
# Reporting


def fmt_s(x):
    if x is None:
        return "-"
    return f"{x:.3f} s" if x < 10 else f"{x:.1f} s"


def fmt_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def report_special(sp, meta):
    out = []
    w = out.append
    if sp.get("turn"):
        w("")
        w("`turn` latency: `rewindfs turn` vs shadow git `add -A && commit` on the same tree "
          "(synthetic text files of 1-4 KiB, 100 per directory; a turn changes 10 files and adds 1; "
          f"warm caches; mount with `--auto-turn 0`; median of {len(sp['turn'][0]['rw_turns'])} turns):")
        w("")
        w("| tree | rewindfs turn | shadow git turn | ratio git/rewindfs | rewindfs turn, no change | "
          "shadow git, no change | rewindfs first turn after mount | shadow git first commit | mount | "
          "rewindfs store | shadow .git |")
        w("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
        for r in sp["turn"]:
            w(f"| {r['files']:,} files | {fmt_s(r['rw_turn'])} | {fmt_s(r['git_turn'])} | "
              f"{r['git_turn'] / r['rw_turn']:.1f}x | {fmt_s(r['rw_idle'])} | {fmt_s(r['git_idle'])} | "
              f"{fmt_s(r['rw_first'])} | {fmt_s(r['git_first'])} | {fmt_s(r['mount'])} | "
              f"{fmt_bytes(r['store_bytes'])} | {fmt_bytes(r['git_bytes'])} |")
        t = sp["turn"]
        if len(t) > 1:
            w("")
            w(f"Growth from {t[0]['files']:,} to {t[-1]['files']:,} files: rewindfs turn "
              f"{t[-1]['rw_turn'] / t[0]['rw_turn']:.1f}x, shadow git {t[-1]['git_turn'] / t[0]['git_turn']:.1f}x.")
    if sp.get("bytes"):
        b, g = sp["bytes"], sp["bytes"]["shadow"]
        full = b["file_bytes"] * (b["edits"] + 1)
        w("")
        w(f"Bytes stored for {b['edits']} one-line edits of a {fmt_bytes(b['file_bytes'])} text file, "
          "the whole file rewritten each time, one `turn` after each (on disk, allocated blocks):")
        w("")
        w("| | bytes | vs 100 full copies |")
        w("|---|--:|--:|")
        w(f"| {b['edits']} full copies (+ the original) | {fmt_bytes(full)} | 1.00 |")
        w(f"| rewindfs `chunks/` after the first turn | {fmt_bytes(b['chunks_initial'])} | - |")
        w(f"| rewindfs `chunks/` after {b['edits']} edits | {fmt_bytes(b['chunks'])} "
          f"(apparent {fmt_bytes(b['chunks_apparent'])}) | {b['chunks'] / full:.3f} |")
        w(f"| rewindfs metadata (`meta.sqlite` etc.) | {fmt_bytes(b['meta'])} | {b['meta'] / full:.3f} |")
        w(f"| shadow `.git`, loose objects | {fmt_bytes(g['git_loose'])} | {g['git_loose'] / full:.3f} |")
        w(f"| shadow `.git` after `git gc` | {fmt_bytes(g['git_packed'])} | {g['git_packed'] / full:.3f} |")
    if sp.get("views"):
        v = sp["views"]
        mib = SEQ_MIB
        w("")
        w(f"Views of a checkpoint of a {v['files']:,}-file tree (caches dropped before each step):")
        w("")
        w("| step | time |")
        w("|---|--:|")
        w(f"| `ls MNT` (live root, for comparison) | {fmt_s(v['ls_live'])} |")
        w(f"| `ls MNT/.rewindfs/checkpoints/N/` (newest checkpoint) | {fmt_s(v['ls_dotdir'])} |")
        w(f"| `ls MNT/.rewindfs/checkpoints/1/` (oldest checkpoint) | {fmt_s(v['ls_dotdir_old'])} |")
        w(f"| `rewindfs show N VIEW` | {fmt_s(v['show'])} |")
        w(f"| `ls VIEW` right after | {fmt_s(v['show_ls'])} |")
        w("")
        w(f"Reading a {mib} MiB file (`dd bs=1M`, cold):")
        w("")
        w("| from | time | MiB/s | vs live |")
        w("|---|--:|--:|--:|")
        for k, label in (("read_live", "live mount"),
                         ("read_view_live", "`.rewindfs/checkpoints/N/`, unchanged since (live tree)"),
                         ("read_store", "`.rewindfs/checkpoints/N/`, changed since (chunk store)"),
                         ("read_show_store", "`rewindfs show` view, changed since (chunk store)")):
            w(f"| {label} | {fmt_s(v[k])} | {mib / v[k]:.0f} | {v[k] / v['read_live']:.2f}x |")
        w("")
        w(f"The chunk-store view returned the original bytes: {'yes' if v.get('store_exact') else 'NO'}. "
          f"Overwriting the file (`dd` from /dev/urandom, pre-image captured) took {fmt_s(v['overwrite'])}.")
    if sp.get("rewind"):
        r = sp["rewind"]
        w("")
        w(f"Rewind latency on a {r['base_files']:,}-file tree (time until `rewindfs rewind` returns and the root "
          f"is listed); the large turn created {r['new_files']:,} files and rewrote a {r['big_mib']} MiB file:")
        w("")
        w("| turn rewound | rewindfs rewind | (daemon's own ms) | settler done after | "
          "shadow git restore+clean | ratio git/rewindfs | time of the change itself |")
        w("|---|--:|--:|--:|--:|--:|--:|")
        cases = [("small", "1 file changed"),
                 ("large", f"{r['new_files']:,} files created + {r['big_mib']} MiB rewritten")]
        if "edits_rewind" in r:
            cases.append(("edits", f"{r['edits']:,} files rewritten in place"))
        for k, label in cases:
            settle = fmt_s(r[f"{k}_settle"]) + ("" if r.get(f"{k}_settle_ok") else " (not finished)")
            w(f"| {label} | {fmt_s(r[f'{k}_rewind'])} | {r.get(f'{k}_daemon_ms', 0) or 0:.1f} ms | {settle} | "
              f"{fmt_s(r[f'git_{k}_rewind'])} | {r[f'git_{k}_rewind'] / r[f'{k}_rewind']:.1f}x | "
              f"{fmt_s(r[f'{k}_change'])} |")
        w("")
        phases = [(k, r.get(f"{k}_phases_ms")) for k, _ in cases]
        if all(p for _, p in phases):
            w("Inside the daemon (`phases_ms` of `rewind --json`): " + "; ".join(
                f"{k}: safety seal {p['safety_seal']:.1f}, switch {p['switch']:.1f}, result seal "
                f"{p['result_seal']:.1f}, invalidation {p['invalidate']:.1f} ms" for k, p in phases) + ".")
            w("")
        w(f"Large/small rewind latency: rewindfs {r['large_rewind'] / r['small_rewind']:.1f}x, shadow git "
          f"{r['git_large_rewind'] / r['git_small_rewind']:.1f}x. Unmount after the rewinds: "
          f"{fmt_s(r['unmount'])}.")
    return out


def paired_ratio(step, t, ref):
    """Median over the repetitions of t's time / ref's time in the same
    repetition (so both saw about the same machine load); the ratio of the
    medians when the run kept no repetition numbers."""
    by_rep = step.get("rep", {})
    a, b = by_rep.get(t, {}), by_rep.get(ref, {})
    pairs = [a[r] / b[r] for r in a if r in b and b[r] > 0]
    if pairs:
        return statistics.median(pairs)
    x, y = step["med"].get(t), step["med"].get(ref)
    return x / y if x is not None and y else None


def step_ops(name, meta):
    """Files one step touches (for requests per operation), or None."""
    if name == "untar":
        return meta.get("tree_files")
    if name.startswith(f"{SMALL_FILES // 1000}k files:"):
        return SMALL_FILES
    return None


def report(res, meta, targets, shadow_turns, shadow_bytes, store_sizes, special=None):
    out = []
    w = out.append
    w(f"Run: {meta['date']} on {meta['host']}: {meta['cores']} cores, kernel {meta['kernel']}, "
      f"{meta['fs']} ({meta['disk']}), {meta['mem_gib']:.0f} GiB RAM; rewindfs {meta['commit']}; "
      f"{meta['reps']} repetitions, median; caches dropped before every measured step. A ratio is the "
      f"median of the per-repetition ratios to native ext4 (same repetition, so about the same load).")
    w("")
    w(f"Source tree: {meta['tree_files']} files, {meta['tree_bytes'] / 2**20:.0f} MiB "
      f"({meta['tree_crates']} crate sources from ~/.cargo/registry/src, uncompressed tar).")
    w(f"Load average (1 min) during the run: min {meta['load_min']:.2f}, max {meta['load_max']:.2f}.")
    if meta.get("passthrough"):
        w(f"`rewindfs status` passthrough: {meta['passthrough']}.")
    if meta.get("enable_uring"):
        w(f"fuse.enable_uring: {meta['enable_uring']} (targets without a transport use `auto`).")
    w("")
    steps = list(res.keys())
    head = ["workload", "goal"]
    for t in targets:
        head.append(label(t))
        if t != "native":
            head.append("ratio")
    w("| " + " | ".join(head) + " |")
    w("|" + "|".join("---" if i < 2 else "--:" for i in range(len(head))) + "|")
    misses = []
    for s in steps:
        cls = res[s]["class"]
        goal = GOALS[cls]
        row = [s, f"{cls} ≤{goal}x"]
        for t in targets:
            v = res[s]["med"].get(t)
            row.append(fmt_s(v))
            if t != "native":
                r = paired_ratio(res[s], t, "native") if v is not None else None
                if r is not None:
                    flag = "" if r <= goal else " ✗"
                    if r > goal and base(t) != "null":
                        misses.append((s, t, r, goal))
                    row.append(f"{r:.2f}x{flag}")
                else:
                    row.append("-")
        w("| " + " | ".join(row) + " |")
    w("")
    w("✗ = misses the goal (data steps within 1.3x of native, metadata steps within 2x).")
    w("")
    w("Spread (max/min over the repetitions), to judge noise, and the 1-minute load average at the start "
      "of the step's samples (min / median / max):")
    w("")
    w("| workload | " + " | ".join(label(t) for t in targets) + " | load |")
    w("|---|" + "|".join("--:" for _ in targets) + "|--:|")
    for s in steps:
        cells = []
        for t in targets:
            xs = res[s]["all"].get(t, [])
            cells.append(f"{max(xs) / min(xs):.2f}" if xs and min(xs) > 0 else "-")
        ld = res[s].get("load") or [float("nan")]
        cells.append(f"{min(ld):.1f} / {statistics.median(ld):.1f} / {max(ld):.1f}")
        w(f"| {s} | " + " | ".join(cells) + " |")
    rung = [t for t in targets if any(res[s].get("ring", {}).get(t) for s in steps)]
    if rung:
        w("")
        w("FUSE requests per file the io_uring rings served (median; `ring_requests` of `status --json` "
          "before and after the step; forgets and interrupts travel on /dev/fuse and are not counted):")
        w("")
        w("| workload | " + " | ".join(label(t) for t in rung) + " |")
        w("|---|" + "|".join("--:" for _ in rung) + "|")
        for s in steps:
            n = step_ops(s, meta)
            cells = [f"{statistics.median(res[s]['ring'][t]) / n:.2f}" if n and res[s].get("ring", {}).get(t)
                     else "-" for t in rung]
            w(f"| {s} | " + " | ".join(cells) + " |")
    if not steps:
        # Only baselines were asked for: drop the empty workload tables.
        del out[out.index("| " + " | ".join(head) + " |"):]
    mounted = [t for t in targets if base(t) not in ("native", "null")]
    if store_sizes and mounted:
        w("")
        w("rewindfs store size after each workload (median; the workspace itself not included):")
        w("")
        w("| workload | " + " | ".join(label(t) for t in mounted) + " |")
        w("|---|" + "|".join("--:" for _ in mounted) + "|")
        for wname, by_t in store_sizes.items():
            w(f"| {wname} | " + " | ".join(fmt_bytes(statistics.median(by_t[t])) if t in by_t else "-"
                                          for t in mounted) + " |")
    # Pairs of targets on the same transport ("" = auto): pt@uring with
    # norec@uring and null@uring, and so on.
    suffixes = sorted({t.partition("@")[2] for t in targets if base(t) in ("pt", "norec", "null") and ":" not in t})
    for sfx in suffixes:
        at = (lambda b: f"{b}@{sfx}" if sfx else b)
        pt, norec, null = at("pt"), at("norec"), at("null")
        tag = f" on {sfx}" if sfx else ""
        if pt in targets and norec in targets and steps:
            w("")
            w(f"Cost of recording{tag}: the default mount (passthrough, recording on) against the same mount "
              "with `--no-record` (on/off: median of the per-repetition ratios; the goal is within 1.3x):")
            w("")
            w("| workload | recording off | recording on | on/off |")
            w("|---|--:|--:|--:|")
            for s in steps:
                on, off = res[s]["med"].get(pt), res[s]["med"].get(norec)
                if on and off:
                    w(f"| {s} | {fmt_s(off)} | {fmt_s(on)} | {paired_ratio(res[s], pt, norec):.2f}x |")
        if null in targets and steps:
            w("")
            w(f"The FUSE floor{tag}: the same steps on a FUSE filesystem that does no I/O at all "
              "(`tests/bench/nullfs.rs`, names in memory, data discarded, the same kernel options), "
              "against native and against rewindfs (ratios: medians of the per-repetition ratios):")
            w("")
            w("| workload | native ext4 | null FUSE | null/native | rewindfs (passthrough) | rewindfs/null |")
            w("|---|--:|--:|--:|--:|--:|")
            for s in steps:
                nat, nv, pv = (res[s]["med"].get(k) for k in ("native", null, pt))
                if nat and nv:
                    over = paired_ratio(res[s], pt, null) if pv else None
                    w(f"| {s} | {fmt_s(nat)} | {fmt_s(nv)} | {paired_ratio(res[s], null, 'native'):.2f}x | "
                      f"{fmt_s(pv)} | {f'{over:.2f}x' if over else '-'} |")
    alts = [(split_alt(t)[0], t) for t in targets if split_alt(t)[1] and split_alt(t)[0] in targets]
    if alts and steps:
        w("")
        w(f"This build (--bin) against the {ALT_LABEL} build (--alt-bin {meta.get('alt_bin')}), same target, "
          "same repetition (ratio: median of the per-repetition ratios this/alt; above 1 = this build slower; "
          "range: min-max of those ratios):")
        w("")
        w("| workload | " + " | ".join(f"{label(a)} | {label(b)} | ratio | range" for a, b in alts) + " |")
        w("|---|" + "|".join("--:|--:|--:|--:" for _ in alts) + "|")
        for s in steps:
            cells = []
            for a, b in alts:
                va, vb = res[s]["med"].get(a), res[s]["med"].get(b)
                ra, rb = res[s].get("rep", {}).get(a, {}), res[s].get("rep", {}).get(b, {})
                pairs = [ra[r] / rb[r] for r in ra if r in rb and rb[r] > 0]
                ratio = paired_ratio(res[s], a, b) if va and vb else None
                cells.append(f"{fmt_s(va) if va else '-'} | {fmt_s(vb) if vb else '-'} | "
                             f"{f'{ratio:.2f}x' if ratio else '-'} | "
                             f"{f'{min(pairs):.2f}-{max(pairs):.2f}' if pairs else '-'}")
            w(f"| {s} | " + " | ".join(cells) + " |")
    out.extend(report_special(special or {}, meta))
    if shadow_turns:
        w("")
        w("Shadow git `add -A && commit` per turn (warm caches; a turn changes 10 files and adds 1):")
        w("")
        w("| tree | first checkpoint | turn (median) | turn with no change | shadow .git size |")
        w("|---|--:|--:|--:|--:|")
        for r in shadow_turns:
            w(f"| {r['files']} files | {fmt_s(r['first'])} | {fmt_s(r['turn'])} | {fmt_s(r['idle'])} | "
              f"{fmt_bytes(r['shadow_bytes'])} |")
    if shadow_bytes:
        b = shadow_bytes
        w("")
        w(f"Shadow git bytes for {b['edits']} one-line edits of a {fmt_bytes(b['file_bytes'])} text file "
          f"(one commit per edit): objects after the first commit {fmt_bytes(b['after_initial'])}, "
          f"after {b['edits']} edits {fmt_bytes(b['loose'])} loose, {fmt_bytes(b['packed'])} after `git gc`.")
    if UNMOUNT_ERRORS:
        w("")
        w(f"`rewindfs unmount` reported an error {len(UNMOUNT_ERRORS)} time(s) "
          f"(timings are unaffected; the mount is torn down after the measured steps):")
        w("")
        for e in UNMOUNT_ERRORS[:10]:
            w(f"- {e}")
    return "\n".join(out) + "\n", misses


def results_from_log(path):
    """Rebuilds results from the progress lines of a run's stderr (to report
    an interrupted run)."""
    import re
    res = {}
    pat = re.compile(r"^  rep (\d+)/(\d+) (\S+)\s+(.+): ([0-9.]+) s \(load ([0-9.]+)(?:, (\d+) ring requests)?\)$")
    loads = []
    for line in open(path):
        m = pat.match(line.rstrip("\n"))
        if not m:
            continue
        t, name, secs = m.group(3), m.group(4), float(m.group(5))
        loads.append(float(m.group(6)))
        cls = "data" if name.startswith(("seq ", "rand ", "sqlite")) else "meta"
        e = res.setdefault(name, {"class": cls, "all": {}, "rep": {}, "load": [], "ring": {}})
        e["all"].setdefault(t, []).append(secs)
        e["rep"].setdefault(t, {})[int(m.group(1)) - 1] = secs
        e["load"].append(loads[-1])
        if m.group(7) is not None:
            e["ring"].setdefault(t, []).append(int(m.group(7)))
    return res, loads


def machine_meta(args, inputs):
    st = os.statvfs(args.workdir)
    fs = "?"
    with open("/proc/mounts") as f:
        best = ""
        for line in f:
            dev, mp, typ = line.split()[:3]
            if args.workdir.startswith(mp) and len(mp) > len(best):
                best, fs = mp, f"{typ} on {dev}"
    disk = "?"
    try:
        dev = fs.split(" on /dev/")[1]
        rot = open(f"/sys/block/{dev}/queue/rotational").read().strip()
        disk = f"{dev}, rotational={rot}"
    except Exception:
        pass
    commit = sh(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture=True, check=False).stdout.strip()
    dirty = sh(["git", "-C", REPO, "status", "--porcelain", "--", "src"], capture=True, check=False).stdout.strip()
    tm = json.load(open(inputs.tarball + ".json"))
    return {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "host": platform.node(),
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "fs": fs,
        "disk": disk,
        "mem_gib": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30,
        "commit": commit + (" (src modified)" if dirty else ""),
        "enable_uring": open(ENABLE_URING).read().strip() if os.path.exists(ENABLE_URING) else "absent",
        "reps": args.reps,
        "tree_files": inputs.tree_files,
        "tree_bytes": inputs.tree_bytes,
        "tree_crates": tm.get("crates"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3, help="repetitions per step (median reported); default 3")
    ap.add_argument("--workloads", default=",".join(list(WORKLOADS) + list(SPECIAL)),
                    help=f"comma-separated subset of {','.join(list(WORKLOADS) + list(SPECIAL))}")
    ap.add_argument("--targets", default="native,pt,off,norec", help="comma-separated subset of native,pt,off,norec,null,fovl (null: a FUSE fs doing no I/O, smallfiles and untar only; fovl: fuse-overlayfs); "
                         "a mounted target may name its FUSE transport: pt@uring, pt@classic, null@uring, ...")
    ap.add_argument("--turn-sizes", default="1000,10000,100000", help="tree sizes for the turn workload")
    ap.add_argument("--turn-reps", type=int, default=5, help="turns measured per tree size (median)")
    ap.add_argument("--views-files", type=int, default=100_000, help="tree size for the views workload")
    ap.add_argument("--rewind-mib", type=int, default=1024, help="size of the file the large rewound turn rewrites")
    ap.add_argument("--rewind-files", type=int, default=20_000, help="files the large rewound turn creates")
    ap.add_argument("--rewind-base", type=int, default=10_000, help="files in the tree the rewinds run on")
    ap.add_argument("--shadow-git", default="",
                    help="also measure the shadow-git baseline on trees of these sizes, e.g. 1000,10000,100000")
    ap.add_argument("--shadow-bytes", action="store_true",
                    help="also measure shadow-git bytes for 100 one-line edits of a 1 MiB file")
    ap.add_argument("--workdir", default="/var/tmp/rewindfs-bench",
                    help="scratch directory (same filesystem for all targets); default /var/tmp/rewindfs-bench")
    ap.add_argument("--bin", default=os.path.join(REPO, "target", "release", "rewindfs"),
                    help="rewindfs binary; default target/release/rewindfs (run cargo build --release first)")
    ap.add_argument("--alt-bin", help="a second rewindfs binary, run by the targets that end in `:alt` "
                    "(pt:alt, off@uring:alt, ...) in the same interleaved run")
    ap.add_argument("--alt-label", default="alt", help="what the tables call the --alt-bin build; default alt")
    ap.add_argument("--out", help="also write the markdown table to this file")
    ap.add_argument("--json", help="also write raw samples as JSON to this file")
    ap.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                    help="before each measured step, wait up to SECONDS for the CPUs to be idle "
                         "(for a machine shared with other jobs); default 0 (do not wait)")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"), help="C compiler for the small-file helper")
    ap.add_argument("--from-log", metavar="STDERR",
                    help="do not run: print the table from the progress lines of an earlier run's stderr")
    args = ap.parse_args()

    # Stop cleanly (unmounting) on SIGTERM, and on SIGINT even when started
    # in the background (where SIGINT is ignored).
    def interrupted(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    if os.geteuid() != 0:
        raise SystemExit("bench: needs root (drops caches; FUSE passthrough needs CAP_SYS_ADMIN)")
    targets = [t for t in args.targets.split(",") if t]
    global ALT_LABEL
    ALT_LABEL = args.alt_label
    for t in targets:
        plain, alt = split_alt(t)
        b, _, tr = plain.partition("@")
        if b not in TARGETS or (tr and (tr not in TRANSPORTS or b in ("native", "fovl"))):
            raise SystemExit(f"bench: unknown target {t}")
        if alt and (b in ("native", "null", "fovl") or t.partition(":")[2] != "alt"):
            raise SystemExit(f"bench: {t}: only a rewindfs target can end in `:alt`")
        if alt and not (args.alt_bin and os.access(args.alt_bin, os.X_OK)):
            raise SystemExit(f"bench: {t} needs --alt-bin, an executable rewindfs binary")
    if any(split_alt(t)[0].endswith("@uring") for t in targets):
        # nullfs asks for io_uring but does not switch the kernel on itself.
        try:
            with open(ENABLE_URING, "w") as f:
                f.write("Y")
        except OSError as e:
            raise SystemExit(f"bench: cannot switch FUSE over io_uring on ({ENABLE_URING}): {e}")
    if "native" not in targets:
        targets.insert(0, "native")
    workloads = [w for w in args.workloads.split(",") if w]
    special = [w for w in workloads if w in SPECIAL]
    workloads = [w for w in workloads if w not in SPECIAL]
    for wname in workloads:
        if wname not in WORKLOADS:
            raise SystemExit(f"bench: unknown workload {wname}")
    if any(base(t) == "null" for t in targets) and not os.access(NULLFS, os.X_OK):
        raise SystemExit(f"bench: {NULLFS} not found: run `cargo build --release --example nullfs` first")
    if any(base(t) == "fovl" for t in targets) and shutil.which("fuse-overlayfs") is None:
        raise SystemExit("bench: the fovl target needs fuse-overlayfs (apt-get install -y fuse-overlayfs)")
    if any(t != "native" for t in targets) and not os.access(args.bin, os.X_OK):
        raise SystemExit(f"bench: {args.bin} not found: run `cargo build --release` first")

    args.workdir = os.path.abspath(args.workdir)
    os.makedirs(args.workdir, exist_ok=True)
    runs = os.path.join(args.workdir, "runs")
    shutil.rmtree(runs, ignore_errors=True)
    os.makedirs(runs)
    runtime_dir = tempfile.mkdtemp(prefix="rt-", dir=args.workdir)

    inputs = Inputs(args.workdir, args.cc,
                    (workloads + (["seq"] if "views" in special else [])) if not args.from_log else [])
    meta = machine_meta(args, inputs)
    meta["alt_bin"] = args.alt_bin
    if args.from_log:
        res, loads = results_from_log(args.from_log)
        for s_ in res.values():
            s_["med"] = {t: statistics.median(xs) for t, xs in s_["all"].items()}
        reps = {len(xs) for s_ in res.values() for xs in s_["all"].values()}
        meta["reps"] = f"{min(reps)}-{max(reps)}" if len(reps) > 1 else reps.pop()
        meta["load_min"], meta["load_max"] = min(loads), max(loads)
        print(report(res, meta, targets, None, None, {})[0])
        return
    res = {}  # step -> {"class", "all": {target: [secs]}}
    store_sizes = {}  # workload -> {target: [bytes]}
    loads = [loadavg()]
    passthrough = set()
    try:
        for rep in range(args.reps):
            for wname in workloads:
                # Rotate the order of targets by one place per repetition so
                # that a slow drift (another job on the machine) does not
                # always hit the same target, and each target runs first,
                # second, ... about equally often.
                k = rep % len(targets)
                order = targets[k:] + targets[:k]
                for t in order:
                    if base(t) == "null" and wname not in NULL_WORKLOADS:
                        continue
                    tgt = Target(t, runs, args.alt_bin if split_alt(t)[1] else args.bin, runtime_dir)
                    d = tgt.setup(f"{wname}-{rep}")
                    if tgt.passthrough_reported:
                        passthrough.add(f"{t}={tgt.passthrough_reported}")

                    def step(name, cls, fn, warm=False, t=t, tgt=tgt, rep=rep):
                        if args.wait_idle > 0:
                            busy = wait_idle(args.wait_idle)
                            if busy > 0.15:
                                log(f"  (machine still {busy:.0%} busy after waiting {args.wait_idle} s)")
                        if not warm:
                            drop_caches()
                        loads.append(loadavg())
                        before = tgt.ring_requests()
                        secs = fn()
                        after = tgt.ring_requests()
                        e = res.setdefault(name, {"class": cls, "all": {}, "rep": {}, "load": [], "ring": {}})
                        e["all"].setdefault(t, []).append(secs)
                        e["rep"].setdefault(t, {})[rep] = secs
                        e["load"].append(loads[-1])
                        ring = ""
                        if before is not None and after is not None:
                            e["ring"].setdefault(t, []).append(after - before)
                            ring = f", {after - before} ring requests"
                        log(f"  rep {rep + 1}/{args.reps} {t:6s} {name}: {secs:.3f} s (load {loads[-1]:.2f}{ring})")

                    try:
                        WORKLOADS[wname](inputs, d, step)
                    finally:
                        tgt.teardown()
                    if tgt.store_bytes is not None:
                        store_sizes.setdefault(wname, {}).setdefault(t, []).append(tgt.store_bytes)
        sp = {}
        if special:
            class Ctx:
                pass
            ctx = Ctx()
            ctx.bin, ctx.runtime_dir, ctx.runs, ctx.inputs, ctx.loads = args.bin, runtime_dir, runs, inputs, loads
            kept = None
            if "turn" in special:
                sizes = [int(x) for x in args.turn_sizes.split(",") if x]
                keep = args.views_files if "views" in special and args.views_files in sizes else None
                sp["turn"], kept = bench_turns(ctx, sizes, args.turn_reps, keep)
            if "views" in special:
                if kept is None:
                    _, kept = bench_turns(ctx, [args.views_files], 1, args.views_files)
                try:
                    sp["views"] = bench_views(ctx, kept[0], args.views_files)
                finally:
                    kept[0].unmount()
                    shutil.rmtree(kept[1], ignore_errors=True)
            if "bytes" in special:
                sp["bytes"] = bench_bytes(ctx)
            if "rewind" in special:
                sp["rewind"] = bench_rewind(ctx, args.rewind_base, args.rewind_files, args.rewind_mib)
        shadow_turns = shadow_bytes = None
        if args.shadow_git:
            sizes = [int(x) for x in args.shadow_git.split(",") if x]
            shadow_turns = bench_shadow_turn(runs, sizes, max(args.reps, 5))
        if args.shadow_bytes:
            shadow_bytes = bench_shadow_bytes(runs)
    finally:
        inputs.close()
        shutil.rmtree(runtime_dir, ignore_errors=True)
    for s in res.values():
        s["med"] = {t: statistics.median(xs) for t, xs in s["all"].items()}
    meta["load_min"], meta["load_max"] = min(loads), max(loads)
    meta["passthrough"] = ", ".join(sorted(passthrough))
    md, misses = report(res, meta, targets, shadow_turns, shadow_bytes, store_sizes, sp)
    print(md)
    if args.out:
        with open(args.out, "w") as f:
            f.write(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": res, "shadow_turns": shadow_turns, "shadow_bytes": shadow_bytes,
                       "special": sp},
                      f, indent=1)
    if misses:
        log("bench: steps missing their goal: " +
            "; ".join(f"{s} on {t}: {r:.2f}x > {g}x" for s, t, r, g in misses))


if __name__ == "__main__":
    main()
