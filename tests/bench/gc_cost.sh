#!/bin/sh
# What a collection costs on a long history (its cost should be
# proportional to what it frees). Builds a history of TURNS checkpoints in one mount
# (each turn appends to 3 of 40 files; every 10th writes 20 new files and
# removes the previous 20), then times, with the background collection off:
#   - `gc` with nothing to free (the default policy keeps every young
#     checkpoint), REPS times;
#   - `gc` freeing one checkpoint (keep-count: one fewer than there are,
#     keep-days 0), REPS times;
#   - `forget` of one checkpoint in the middle, REPS times.
# For each: the daemon's CPU time per run (user + system, from
# /proc/PID/stat, averaged over REPS runs) and the wall time per run
# (CLI start included); `status` for scale.
# Usage: tests/bench/gc_cost.sh [TURNS] [REPS] (root; defaults 1200 20).
# REWINDFS_BIN: the binary (default target/release/rewindfs).
set -eu
TURNS=${1:-1200}
REPS=${2:-20}
BIN=${REWINDFS_BIN:-$(dirname "$0")/../../target/release/rewindfs}
WORK=$(mktemp -d /var/tmp/rewindfs-gc-cost.XXXXXX)
export REWINDFS_RUNTIME_DIR=$WORK/run REWINDFS_HOME=$WORK/home
mkdir -p "$WORK/run" "$WORK/ws/src" "$WORK/mnt" "$WORK/store"
cleanup() {
    "$BIN" unmount "$WORK/mnt" >/dev/null 2>&1 || umount -l "$WORK/mnt" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
for i in $(seq 1 40); do head -c 4000 /dev/urandom | base64 > "$WORK/ws/src/f$i.txt"; done
"$BIN" mount "$WORK/ws" "$WORK/mnt" --store "$WORK/store" --auto-turn 0 >/dev/null
m=$WORK/mnt
"$BIN" gc -C "$m" --auto off >/dev/null
t=1
while [ "$t" -le "$TURNS" ]; do
    seed=$(head -c 600 /dev/urandom | base64 | tr -d '\n')
    for i in 1 2 3; do
        f=$(( (t * 7 + i * 13) % 40 + 1 ))
        printf '%s\n' "$seed" >> "$m/src/f$f.txt"
    done
    if [ $((t % 10)) -eq 0 ]; then
        rm -rf "$m/gen"; mkdir -p "$m/gen"
        for i in $(seq 1 20); do head -c 3000 /dev/urandom > "$m/gen/g$i.bin"; done
    fi
    "$BIN" turn -C "$m" >/dev/null
    t=$((t + 1))
done
# The daemon's CPU time (user + system, all threads) over REPS runs of a
# command, per run, in ms: wall times on a shared, loaded machine vary by
# 10x from run to run; CPU time hardly does (it has 10 ms ticks, hence the
# repetitions).
pid=$("$BIN" status -C "$m" --json | tr -d ' \n' | grep -o '"pid":[0-9]*' | head -1 | cut -d: -f2)
hz=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
count() { "$BIN" log -C "$m" --json | grep -c '"checkpoint"'; }
per_run() { # label, then the command (run REPS times; @N@ is replaced by the rep number)
    label=$1; shift
    before=$(cpu); s=$(date +%s%N)
    r=1
    while [ "$r" -le "$REPS" ]; do
        eval "$(echo "$*" | sed "s/@N@/$r/g")" >/dev/null
        r=$((r + 1))
    done
    wall=$(( ($(date +%s%N) - s) / 1000000 / REPS ))
    echo "$label: daemon CPU $(( ($(cpu) - before) * 1000 / hz / REPS )) ms per run (wall $wall ms per run, CLI start included)"
}
n=$(count)
echo "checkpoints: $n"
per_run "status (for scale)" '"$BIN" status -C "$m"'
per_run "gc with nothing to free" '"$BIN" gc -C "$m"'
per_run "gc freeing one checkpoint" '"$BIN" gc -C "$m" --keep-count $((n - @N@)) --keep-days 0'
"$BIN" gc -C "$m" --keep-count 1000000 --keep-days 14 >/dev/null
per_run "forget of one checkpoint" '"$BIN" forget -C "$m" $((TURNS / 2 + @N@ * 2))'
"$BIN" fsck -C "$m" >/dev/null && echo "fsck: clean"
