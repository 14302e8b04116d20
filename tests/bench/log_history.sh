#!/bin/bash
# Times `rewindfs log` on a long history: a tree of FILES text files
# (100 per directory) is mounted with --auto-turn 0, then TURNS turns each
# append a line to one file and create one new file, `rewindfs turn` after
# each. Then `log --json` is timed three times: the first call after the
# history was built (it computes what is not stored yet), a second call
# (everything stored), and one after one more turn. Last, with schema 6,
# the stored statistics are cleared (sqlite3) and `log` timed again: every
# turn computed on demand from the paths noted at its seal. Then
# `history PATH --json` is timed for a file 1 turn in 100 appended to
# (d0/f0.txt), one created by one turn (new/<TURNS/2>.txt) and one no turn
# touched (d1/f2.txt). SKIP_LOG=1 leaves out the `log` timings.
#
#   sudo tests/bench/log_history.sh [BINARY]     # default target/release/rewindfs
#   TURNS=1000 FILES=10000 sudo tests/bench/log_history.sh
#
# Needs root (FUSE mount with passthrough). Scratch space: WORKDIR
# (default /var/tmp), removed at the end.
set -euo pipefail
bin=$(realpath "${1:-target/release/rewindfs}")
turns=${TURNS:-1000}
files=${FILES:-10000}
work=$(mktemp -d "${WORKDIR:-/var/tmp}/rewindfs-logbench.XXXXXX")
ws=$work/ws mnt=$work/mnt store=$work/store
mkdir -p "$ws" "$mnt" "$store" "$work/run"
export REWINDFS_RUNTIME_DIR=$work/run REWINDFS_HOME=$work/home
cleanup() {
    "$bin" unmount "$mnt" >/dev/null 2>&1 || umount -l "$mnt" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

dirs=$(((files + 99) / 100))
for ((d = 0; d < dirs; d++)); do
    mkdir -p "$ws/d$d"
    for ((i = 0; i < 100 && d * 100 + i < files; i++)); do
        printf 'file %d %d\nsecond line\n' "$d" "$i" >"$ws/d$d/f$i.txt"
    done
done
mkdir "$ws/new"
"$bin" mount "$ws" "$mnt" --store "$store" --auto-turn 0

now() { date +%s.%N; }
start=$(now)
for ((t = 1; t <= turns; t++)); do
    d=$((t % dirs))
    echo "turn $t" >>"$mnt/d$d/f$((t % 100)).txt"
    echo "new $t" >"$mnt/new/$t.txt"
    "$bin" turn -C "$mnt" >/dev/null
done
built=$(now)
echo "built $turns turns on $files files in $(echo "$built - $start" | bc) s"

timed_log() {
    local a b
    a=$(now)
    "$bin" log -C "$mnt" --json >"$work/log.json"
    b=$(now)
    printf '%s: %.3f s (%s checkpoints)\n' "$1" "$(echo "$b - $a" | bc)" "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$work/log.json")"
}
if [ "${SKIP_LOG:-0}" != 1 ]; then
    timed_log "log, first call"
    timed_log "log, second call"
    echo "one more line" >>"$mnt/d0/f0.txt"
    "$bin" turn -C "$mnt" >/dev/null
    timed_log "log, after one more turn"
    if sqlite3 "$store/meta.sqlite" "UPDATE turn_summaries SET files_added = NULL; DELETE FROM turn_programs" 2>/dev/null; then
        timed_log "log, every turn's statistics cleared (computed on demand)"
    fi
fi

timed_history() {
    local a b
    a=$(now)
    "$bin" history -C "$mnt" --json "$mnt/$1" >"$work/history.json"
    b=$(now)
    printf 'history %s: %.3f s (%s turns listed)\n' "$1" "$(echo "$b - $a" | bc)" "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$work/history.json")"
}
timed_history d0/f0.txt
timed_history "new/$((turns / 2)).txt"
timed_history d1/f2.txt
