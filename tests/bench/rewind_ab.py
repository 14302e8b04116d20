#!/usr/bin/env python3
"""Rewind of files rewritten in place: builds of rewindfs against shadow
git, in alternating rounds (docs/benchmarks.md).

    sudo tests/bench/rewind_ab.py [--rounds 5] [--base 20000] [--edits 2000] \
        [--workdir DIR] BIN [BIN...]

Each round, in an order rotated by one place per round, for every BIN and
for shadow git: a fresh copy of a --base-file source-like tree (100 files
per directory), a checkpoint, --edits files of it rewritten in place (a
line appended, as a formatter would), a checkpoint, and the rewind to the
first one timed: for rewindfs `rewindfs rewind -C MNT CP --json` (the
mount has `--auto-turn 0`), its `phases_ms`, the daemon's CPU time over
the rewind (all threads, from schedstat) and the time until the settler
has written every pending file; for shadow git `git restore --source C .
&& git clean -fdq`. Prints one line per run and, at the end, the medians
and the median of the per-round ratios to shadow git. Caches stay warm (an
agent's tree is hot), as in tests/bench/run.sh. Needs root. Not part of `cargo test`.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the shared helpers of tests/bench/run.sh)


def daemon_cpu_ms(pid):
    """User + system time of the process, threads that ended included."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def edit(tree, n):
    for i in range(n):
        with open(os.path.join(tree, bench.tree_path(i)), "a") as f:
            f.write("// edited\n")


def run_rewindfs(binary, template, root, edits):
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    ws = os.path.join(root, "ws")
    bench.sh(["cp", "-a", template, ws])
    m = bench.Mount(binary, os.path.join(root, "rt"), ws, os.path.join(root, "mnt"),
                    os.path.join(root, "store"), "--auto-turn", "0")
    try:
        _, cp = m.turn()
        edit(m.mnt, edits)
        m.turn()
        os.sync()
        c0 = daemon_cpu_ms(m.pid) if m.pid else 0
        t0 = time.perf_counter()
        r = m.cli("rewind", "-C", m.mnt, str(cp), "--json")
        wall = time.perf_counter() - t0
        cpu = (daemon_cpu_ms(m.pid) - c0) if m.pid else None
        j = json.loads(r.stdout)
        while m.pending():
            if time.perf_counter() - t0 > 600:
                break
            time.sleep(0.05)
        settle = time.perf_counter() - t0
        with open(os.path.join(m.mnt, bench.tree_path(0))) as f:
            ok = not f.read().endswith("// edited\n")
        return {"wall": wall, "cpu_ms": cpu, "settle": settle, "ok": ok,
                "elapsed_ms": j.get("elapsed_ms"), "phases_ms": j.get("phases_ms")}
    finally:
        m.unmount()
        shutil.rmtree(root, ignore_errors=True)


def run_git(template, root, edits):
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    tree, shadow = os.path.join(root, "tree"), os.path.join(root, "shadow.git")
    bench.sh(["cp", "-a", template, tree])
    bench.shadow_git_init(shadow, tree)
    bench.shadow_git_turn(shadow, tree, "base")
    base = bench.sh(bench.shadow_git(shadow, tree, "rev-parse", "HEAD"), env=bench.GIT_ENV,
                    capture=True).stdout.strip()
    edit(tree, edits)
    bench.shadow_git_turn(shadow, tree, "edits")
    os.sync()
    wall = bench.timed(f"git --git-dir={shadow} --work-tree={tree} restore --source {base} . && "
                       f"git --git-dir={shadow} --work-tree={tree} clean -fdq", cwd=tree, env=bench.GIT_ENV)
    with open(os.path.join(tree, bench.tree_path(0))) as f:
        ok = not f.read().endswith("// edited\n")
    shutil.rmtree(root, ignore_errors=True)
    return {"wall": wall, "ok": ok}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bins", nargs="+", help="rewindfs binaries")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--base", type=int, default=20_000, help="files in the tree")
    ap.add_argument("--edits", type=int, default=2_000, help="files rewritten in place")
    ap.add_argument("--workdir", default="/var/tmp/rewindfs-rewind-ab")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("rewind_ab: needs root (drops caches)")
    if a.edits > a.base:
        raise SystemExit("rewind_ab: --edits cannot exceed --base")
    os.makedirs(a.workdir, exist_ok=True)
    template = os.path.join(a.workdir, f"tree-{a.base}")
    if not os.path.isdir(template):
        bench.make_tree(template + ".tmp", a.base)
        os.rename(template + ".tmp", template)
    labels = [f"bin{i}" for i in range(len(a.bins))] + ["git"]
    results = {lbl: [] for lbl in labels}
    for rnd in range(a.rounds):
        k = rnd % len(labels)
        for lbl in labels[k:] + labels[:k]:
            root = os.path.join(a.workdir, "run")
            load = bench.loadavg()
            if lbl == "git":
                r = run_git(template, root, a.edits)
            else:
                r = run_rewindfs(a.bins[int(lbl[3:])], template, root, a.edits)
            r["round"], r["load"] = rnd, load
            results[lbl].append(r)
            print(json.dumps({"label": lbl, **r}), flush=True)
    print()
    for i, b in enumerate(a.bins):
        print(f"bin{i} = {b}")
    print(f"{a.base} files, {a.edits} rewritten in place, {a.rounds} rounds, "
          f"load {min(r['load'] for v in results.values() for r in v):.1f}-"
          f"{max(r['load'] for v in results.values() for r in v):.1f}")
    git = {r["round"]: r["wall"] for r in results["git"]}
    print("| run | rewind (median) | vs shadow git (median of per-round ratios) | daemon CPU | "
          "phases_ms (median switch) | settled after | all rewound |")
    print("|---|--:|--:|--:|--:|--:|--:|")
    for lbl in labels:
        rs = results[lbl]
        wall = statistics.median(r["wall"] for r in rs)
        ratio = statistics.median(r["wall"] / git[r["round"]] for r in rs)
        ok = all(r["ok"] for r in rs)
        if lbl == "git":
            print(f"| shadow git | {wall:.3f} s | 1.00x | - | - | - | {ok} |")
            continue
        cpu = statistics.median(r["cpu_ms"] or 0 for r in rs)
        sw = statistics.median((r["phases_ms"] or {}).get("switch", 0) for r in rs)
        st = statistics.median(r["settle"] for r in rs)
        print(f"| {lbl} | {wall:.3f} s | {ratio:.2f}x | {cpu:.0f} ms | {sw:.0f} ms | {st:.3f} s | {ok} |")


if __name__ == "__main__":
    main()
