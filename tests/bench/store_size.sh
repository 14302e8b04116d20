#!/bin/sh
# Store size over a long agent-like session, with and without the retention
# policy. Each turn edits a few source files; every 5th turn
# "builds" (a build/ tree of 60 files of 8 KB random bytes, rebuilt whole),
# every 7th removes build/ (rm -rf), every 25th "installs" a 120-file
# node_modules/ tree and every 50th removes it. With the policy, `gc
# --keep-count K --keep-days 0` runs every 10 turns (keep-days 0: only the
# count keeps); with AUTO=1 that policy is set once at the start and the
# daemon's background collection does the rest (no `gc` call). Prints one
# CSV line per 10 turns:
#   turn,store_bytes_without,store_bytes_with,live_tree_bytes,checkpoints_with
# then the time of `gc` with nothing to free and of `forget` of one
# checkpoint on the uncollected history (TURNS checkpoints).
# Usage: tests/bench/store_size.sh [TURNS] [KEEP] (root; defaults 300 20);
# KEEP_LOG=PATH copies the collected mount's daemon.log there at the end.
set -eu
TURNS=${1:-300}
KEEP=${2:-20}
AUTO=${AUTO:-0}
BIN=${REWINDFS_BIN:-$(dirname "$0")/../../target/release/rewindfs}
WORK=$(mktemp -d /var/tmp/rewindfs-store-size.XXXXXX)
export REWINDFS_RUNTIME_DIR=$WORK/run REWINDFS_HOME=$WORK/home
mkdir -p "$WORK/run"
cleanup() {
    # KEEP_LOG=PATH keeps the collected mount's daemon log (its debug lines).
    if [ -n "${KEEP_LOG:-}" ]; then cp "$WORK/with/store/daemon.log" "$KEEP_LOG" || true; fi
    for v in without with; do "$BIN" unmount "$WORK/$v/mnt" >/dev/null 2>&1 || umount -l "$WORK/$v/mnt" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
# The background slices' lengths go to the daemon's log.
[ "$AUTO" = 1 ] && export RUST_LOG=${RUST_LOG:-rewindfs=warn,rewindfs::daemon::auto_gc=debug}
for v in without with; do
    mkdir -p "$WORK/$v/ws/src" "$WORK/$v/mnt" "$WORK/$v/store"
    for i in $(seq 1 40); do head -c 4000 /dev/urandom | base64 > "$WORK/$v/ws/src/f$i.txt"; done
    "$BIN" mount "$WORK/$v/ws" "$WORK/$v/mnt" --store "$WORK/$v/store" --auto-turn 0 >/dev/null
done
size() { du -sb "$1" | cut -f1; }
checkpoints() { "$BIN" log -C "$1" --json | grep -c '"checkpoint"'; }
ms() { s=$(date +%s%N); "$@" >/dev/null; echo $(( ($(date +%s%N) - s) / 1000000 )); }
if [ "$AUTO" = 1 ]; then "$BIN" gc -C "$WORK/with/mnt" --keep-count "$KEEP" --keep-days 0 --auto on >/dev/null; fi
echo "turn,store_bytes_without,store_bytes_with,live_tree_bytes,checkpoints_with"
t=1
while [ "$t" -le "$TURNS" ]; do
    # The same random edits in both workspaces.
    seed=$(head -c 2000 /dev/urandom | base64 | tr -d '\n')
    for v in without with; do
        m=$WORK/$v/mnt
        for i in 1 2 3; do
            f=$(( (t * 7 + i * 13) % 40 + 1 ))
            printf '%s\n' "$seed" | cut -c1-$((500 + i * 300)) >> "$m/src/f$f.txt"
        done
        if [ $((t % 5)) -eq 0 ]; then
            rm -rf "$m/build"; mkdir -p "$m/build"
            for i in $(seq 1 60); do head -c 8192 /dev/urandom > "$m/build/o$i.o"; done
        fi
        if [ $((t % 7)) -eq 0 ]; then rm -rf "$m/build"; fi
        if [ $((t % 25)) -eq 0 ]; then
            mkdir -p "$m/node_modules/pkg"
            for i in $(seq 1 120); do head -c 3000 /dev/urandom | base64 > "$m/node_modules/pkg/m$i.js"; done
        fi
        if [ $((t % 50)) -eq 0 ]; then rm -rf "$m/node_modules"; fi
        "$BIN" turn -C "$m" >/dev/null
    done
    if [ $((t % 10)) -eq 0 ]; then
        if [ "$AUTO" != 1 ]; then "$BIN" gc -C "$WORK/with/mnt" --keep-count "$KEEP" --keep-days 0 >/dev/null; fi
        echo "$t,$(size "$WORK/without/store"),$(size "$WORK/with/store"),$(size "$WORK/with/ws"),$(checkpoints "$WORK/with/mnt")"
    fi
    t=$((t + 1))
done
"$BIN" fsck -C "$WORK/with/mnt" >/dev/null && echo "fsck with the policy: clean"
if [ "$AUTO" = 1 ]; then
    "$BIN" status -C "$WORK/with/mnt" --json | tr -d ' \n' | grep -o '"auto_gc":{[^}]*}'
    # Every background slice's gate time (logged at debug level): how
    # long a write waited at most, over the whole session.
    grep -o 'turn gate held [0-9.]* ms' "$WORK/with/store/daemon.log" | awk '{print $4}' | sort -n |
        awk '{a[NR]=$1} END {if (NR) printf "background slices: %d, median %s ms, max %s ms\n", NR, a[int((NR+1)/2)], a[NR]}'
fi
m=$WORK/without/mnt
echo "on $(checkpoints "$m") checkpoints: gc with nothing to free $(ms "$BIN" gc -C "$m") ms, forget of checkpoint $((TURNS / 2)) $(ms "$BIN" forget -C "$m" $((TURNS / 2))) ms"
