#!/bin/bash
# What a rewind waits for besides its own work (docs/benchmarks.md,
# "Rewind, 2026-12-06: what a rewind waited for"), as root, on a fresh mount
# each run, ROUNDS runs (default 3):
#   undo  [SIZE_MB]  a SIZE_MB file (default 1024) rewritten in a turn, the
#                    turn rewound (the old bytes left pending for the
#                    settler), then that rewind undone 0.3 s later, while the
#                    settler writes the file: the wall time of each
#   tree  [FILES]    one file changed in a FILES-file tree (default 100000,
#                    100 files per directory), rewound three times in a row:
#                    the wall time of each and the check's walk of the tree
#                    for changes made outside the mount (from the daemon log)
# usage: rewind_waits.sh BIN undo|tree [SIZE_MB|FILES] [ROUNDS]
# WORKDIR (default /var/tmp/rewindfs-waits) holds the trees, kept between runs.
set -e
BIN=$(realpath "$1")
MODE=$2
ROUNDS=${4:-3}
W=${WORKDIR:-/var/tmp/rewindfs-waits}
export REWINDFS_RUNTIME_DIR=$W/rt
now() { date +%s.%N; }
fresh() { # a clean workspace dir $W/ws, mounted on $W/mnt
  umount -l $W/mnt 2>/dev/null || true
  rm -rf $W/ws $W/mnt $W/store $W/rt
  mkdir -p $W/mnt $W/rt
}
trap 'umount -l $W/mnt 2>/dev/null || true' EXIT
mkdir -p $W
case $MODE in
undo)
  MB=${3:-1024}
  for r in $(seq 1 $ROUNDS); do
    fresh; mkdir -p $W/ws
    head -c $((MB << 20)) /dev/urandom > $W/ws/big
    RUST_LOG=info $BIN mount $W/ws $W/mnt --store $W/store --auto-turn 0 >/dev/null
    $BIN turn -C $W/mnt >/dev/null
    head -c $((MB << 20)) /dev/urandom > $W/mnt/big
    $BIN turn -C $W/mnt >/dev/null
    sleep 3
    s=$(now); out=$($BIN rewind -C $W/mnt 0 --json); e=$(now)
    safety=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["safety_checkpoint"])')
    sleep 0.3
    s2=$(now); $BIN rewind -C $W/mnt $safety >/dev/null; e2=$(now)
    echo "round $r: rewind $(echo "$e - $s" | bc) s, its undo $(echo "$e2 - $s2" | bc) s"
    $BIN unmount $W/mnt >/dev/null
  done
  ;;
tree)
  N=${3:-100000}
  if [ ! -d $W/tree-$N ]; then
    python3 - $W/tree-$N $N <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"d{i // 10000}", f"e{i // 100}")
    if i % 100 == 0:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i % 100}.txt"), "w") as f:
        f.write(f"file {i}\n" * 5)
PY
  fi
  for r in $(seq 1 $ROUNDS); do
    fresh; cp -a $W/tree-$N $W/ws
    RUST_LOG=info $BIN mount $W/ws $W/mnt --store $W/store --auto-turn 0 >/dev/null
    cp=$($BIN turn -C $W/mnt --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["checkpoint"])')
    target=$(find $W/mnt/d0 -name f7.txt | head -1)
    for i in 1 2 3; do
      echo edited >> $target; $BIN turn -C $W/mnt >/dev/null; sleep 2
      s=$(now); $BIN rewind -C $W/mnt $cp >/dev/null; e=$(now)
      walk=$(grep "changed since its seal found in" $W/store/daemon.log | tail -1 | sed 's/.*found in \([^ ]*\).*/\1/')
      echo "round $r, rewind $i: $(echo "$e - $s" | bc) s, the walk $walk"
    done
    $BIN unmount $W/mnt >/dev/null
  done
  ;;
*)
  echo "usage: rewind_waits.sh BIN undo|tree [SIZE_MB|FILES] [ROUNDS]" >&2
  exit 2
  ;;
esac
