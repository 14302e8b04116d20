#!/bin/bash
# The cost of walking a checkpoint's view (docs/design.md, "Processes already
# inside the workspace"): 5,000 files of 2 KB in 50 directories, unchanged
# since the checkpoint, each walk on a fresh mount. Prints wall seconds and
# the daemon's CPU ticks (1/100 s) for `grep -r` over the view and `diff -r`
# of the view against a plain copy.
# usage: view_walk.sh BIN [renamed]   (renamed: one file of each directory
# renamed through the mount after the checkpoint)
set -e
BIN=$1
base=$(mktemp -d /tmp/view_walk.XXXX)
export REWINDFS_RUNTIME_DIR=$base/run
mkdir -p $base/ws $base/mnt $base/run
python3 - "$base/ws" <<'PY'
import os,sys
ws=sys.argv[1]
for d in range(50):
    os.makedirs(f"{ws}/d{d}")
    for f in range(100):
        with open(f"{ws}/d{d}/f{f}.txt","w") as fh:
            fh.write((f"line {d} {f} " * 200)[:2048])
PY
cp -a $base/ws $base/copy
$BIN mount $base/ws $base/mnt --store $base/store --auto-turn 0 >/dev/null 2>&1
K=$($BIN turn -C $base/mnt --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["checkpoint"])')
if [ "$2" = renamed ]; then
  for d in $base/mnt/d*; do mv $d/f0.txt $d/g0.txt; done
  $BIN turn -C $base/mnt >/dev/null
fi
$BIN unmount $base/mnt >/dev/null 2>&1
$BIN mount $base/ws $base/mnt --store $base/store --auto-turn 0 >/dev/null 2>&1
pid=$($BIN status -C $base/mnt --json | python3 -c 'import json,sys; v=json.load(sys.stdin); v=v[0] if isinstance(v,list) else v; print(v["pid"])')
c0=$(awk '{print $14+$15}' /proc/$pid/stat)
s=$(date +%s.%N); grep -r zzzz $base/mnt/.rewindfs/checkpoints/$K >/dev/null || true; e=$(date +%s.%N)
c1=$(awk '{print $14+$15}' /proc/$pid/stat)
g="$(echo "$e - $s" | bc) cpu $((c1-c0))"
$BIN unmount $base/mnt >/dev/null 2>&1
$BIN mount $base/ws $base/mnt --store $base/store --auto-turn 0 >/dev/null 2>&1
pid=$($BIN status -C $base/mnt --json | python3 -c 'import json,sys; v=json.load(sys.stdin); v=v[0] if isinstance(v,list) else v; print(v["pid"])')
c0=$(awk '{print $14+$15}' /proc/$pid/stat)
s=$(date +%s.%N); diff -r $base/mnt/.rewindfs/checkpoints/$K $base/copy >/dev/null; e=$(date +%s.%N)
c1=$(awk '{print $14+$15}' /proc/$pid/stat)
d="$(echo "$e - $s" | bc) cpu $((c1-c0))"
$BIN unmount $base/mnt >/dev/null 2>&1
rm -rf $base
echo "grep $g diff $d"
