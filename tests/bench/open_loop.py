#!/usr/bin/env python3
"""Warm opens of small files, one process, one file after the other: what a
second `grep -r` does (open, read, close). Reports the median time per file
over the rounds, the latency of single files (p50, p99, p99.9, max) and how
many times the process moved to another CPU (`se.nr_migrations` of
/proc/thread-self/sched) during the counted rounds.

    tests/bench/open_loop.py DIR [--files 5000] [--rounds 10] [--hogs N]

DIR is a directory on the filesystem to measure (a rewindfs mount, a native
directory beside it); the files (DIR/d{i//100}/f{i%100}.txt, 150 B to 6
KiB) are made there when missing. Every file is read twice before counting,
so the kernel's caches and the daemon are warm. --hogs N starts N busy
loops (normal priority, not pinned) for the counted rounds: how requests
fare when every CPU has other work. docs/benchmarks.md, "Ring threads under
SCHED_IDLE".
"""

import argparse
import os
import random
import subprocess
import sys
import time


def migrations():
    with open("/proc/thread-self/sched") as f:
        for line in f:
            if line.startswith("se.nr_migrations"):
                return int(line.split(":")[1])
    sys.exit("no se.nr_migrations in /proc/thread-self/sched (CONFIG_SCHED_DEBUG)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--hogs", type=int, default=0)
    a = ap.parse_args()
    names = [os.path.join(a.dir, f"d{i // 100}", f"f{i % 100}.txt") for i in range(a.files)]
    rng = random.Random(1)
    for i, n in enumerate(names):
        if not os.path.exists(n):
            os.makedirs(os.path.dirname(n), exist_ok=True)
            with open(n, "w") as f:
                f.write(f"line {i} of a small file\n" * rng.randint(5, 240))

    def read_all(lat=None):
        for n in names:
            s = time.perf_counter()
            fd = os.open(n, os.O_RDONLY)
            while os.read(fd, 65536):
                pass
            os.close(fd)
            if lat is not None:
                lat.append(time.perf_counter() - s)

    read_all()
    read_all()
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(a.hogs)]
    try:
        time.sleep(0.2 if hogs else 0)
        rounds, lat = [], []
        moved = migrations()
        for _ in range(a.rounds):
            s = time.perf_counter()
            read_all(lat)
            rounds.append(time.perf_counter() - s)
        moved = migrations() - moved
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    rounds.sort()
    lat.sort()
    per = len(names)
    q = lambda p: lat[min(len(lat) - 1, int(len(lat) * p))] * 1e6
    print(f"{a.dir}: {rounds[len(rounds) // 2] * 1e6 / per:.1f} us a file (median of {a.rounds} rounds of {per}); "
          f"single files p50 {q(0.5):.0f} us, p99 {q(0.99):.0f} us, p99.9 {q(0.999):.0f} us, max {lat[-1] * 1e6:.0f} us; "
          f"moved to another CPU {moved} times in {a.rounds * per} files; {a.hogs} hogs")


if __name__ == "__main__":
    main()
