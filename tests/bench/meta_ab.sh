#!/bin/bash
# Small-file metadata: daemon system calls per file, and a direct A/B of
# rewindfs builds against native ext4 (docs/benchmarks.md).
#
#   tests/bench/meta_ab.sh syscalls BIN [N] [same|sealed]
#       strace -f of the daemon per phase of N files (default 2000), calls
#       per file: those of the threads that answer FUSE requests (fuser-*,
#       fuse-ring-*: the request's own cost), then the rest (background
#       threads: turn statistics, settler); `--auto-turn 0`, and with
#       `sealed` a `rewindfs turn` before each phase (the files were made
#       in an earlier turn), else one turn
#   tests/bench/meta_ab.sh ab ROUNDS N BIN...     alternating rounds: native, then each BIN
#       (a BIN named `nullfs` is tests/bench/nullfs.rs, the FUSE floor:
#       `cargo build --release --example nullfs`, mounted with `--uring`)
#
# Each round (and each syscall count) uses a fresh workspace, store and
# mount (`--transport uring`; `ab` keeps the default `--auto-turn 5`, as
# tests/bench/run.sh), phases create/stat/rename/delete of
# tests/bench/smallfiles.c over N files, caches dropped before each phase.
# `ab` prints one line per run: label, the four phase times (s), each
# followed for a mount by the daemon's CPU time in it (ms, all threads),
# and the 1-minute load when it ended; the order of the binaries rotates by one
# place per round. Needs root. Scratch: $WORK (default
# /var/tmp/rewindfs-meta-ab), removed run by run.
set -euo pipefail
WORK=${WORK:-/var/tmp/rewindfs-meta-ab}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$WORK"
S=$WORK/smallfiles
[ -x "$S" ] || cc -O2 -o "$S" "$HERE/smallfiles.c"

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
load() { cut -d' ' -f1 /proc/loadavg; }

# mount BIN DIR [ARGS]: mounts DIR/mnt, prints the daemon's pid.
mount_ws() {
    local bin=$1 r=$2
    shift 2
    mkdir -p "$r/ws" "$r/mnt" "$r/rt"
    REWINDFS_RUNTIME_DIR=$r/rt "$bin" mount "$r/ws" "$r/mnt" --store "$r/store" --transport uring "$@" |
        sed -n 's/.*daemon pid \([0-9]*\).*/\1/p'
}

unmount_ws() {
    REWINDFS_RUNTIME_DIR=$2/rt "$1" unmount "$2/mnt" >/dev/null
    rm -rf "$2"
}

# CPU time (ms) the threads of process $1 have run, from their schedstat.
cpu_ms() {
    [ -n "${1:-}" ] || { echo 0; return; }
    cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s / 1e6 }'
}

# phases DIR N [PID]: times the phases; with PID, also that process's CPU
# time in each phase (the daemon's work, which the load of other jobs
# changes much less than the wall time).
phases() {
    local dir=$1 n=$2 pid=${3:-} out="" c0
    for ph in create stat rename delete; do
        drop
        c0=$(cpu_ms "$pid")
        out="$out $ph=$("$S" "$ph" "$dir" "$n" 100)"
        [ -z "$pid" ] || out="$out cpu_ms=$(($(cpu_ms "$pid") - c0))"
    done
    echo "$out"
}

case ${1:-} in
syscalls)
    bin=$2 n=${3:-2000} turns=${4:-same} r=$WORK/sc
    rm -rf "$r"
    pid=$(mount_ws "$bin" "$r" --auto-turn 0)
    sleep 1
    for ph in create stat rename delete; do
        if [ "$turns" = sealed ]; then
            REWINDFS_RUNTIME_DIR=$r/rt "$bin" turn -C "$r/mnt" >/dev/null
        fi
        drop
        strace -f -qq -p "$pid" -o "$r/$ph.trace" 2>/dev/null &
        sp=$!
        sleep 1
        "$S" "$ph" "$r/mnt" "$n" 100 >/dev/null
        sleep 0.5
        kill -INT "$sp"
        wait "$sp" 2>/dev/null || true
        # thread id -> request thread or not, by the thread's name
        for t in /proc/"$pid"/task/*; do
            case $(cat "$t/comm") in fuser-* | fuse-ring-*) echo "${t##*/} 1" ;; *) echo "${t##*/} 0" ;; esac
        done >"$r/threads"
        # one line per call (a call strace split shows as "<... resumed>" too)
        awk -v n="$n" -v ph="$ph" -v turns="$turns" '
            FNR == NR { req[$1] = $2; next }
            $2 ~ /^[a-z_0-9]+\(/ { c = $2; sub(/\(.*/, "", c)
                if (req[$1]) { calls[c]++; sum++ } else { bg++ } }
            END { printf "%s (%s): %.1f calls/file answering requests:", ph, turns, sum / n;
                  for (k in calls) if (calls[k] / n >= 0.05) printf " %s %.2f", k, calls[k] / n;
                  printf "; background threads %.1f\n", bg / n }' "$r/threads" "$r/$ph.trace"
        rm -f "$r/$ph.trace"
    done
    unmount_ws "$bin" "$r"
    ;;
ab)
    rounds=$2 n=$3
    shift 3
    bins=("$@")
    for ((i = 0; i < rounds; i++)); do
        r=$WORK/native
        rm -rf "$r"
        mkdir -p "$r"
        echo "native$(phases "$r" "$n") load $(load)"
        rm -rf "$r"
        for ((j = 0; j < ${#bins[@]}; j++)); do
            b=${bins[$(((i + j) % ${#bins[@]}))]}
            r=$WORK/ab
            rm -rf "$r"
            if [ "$(basename "$b")" = nullfs ]; then
                mkdir -p "$r/mnt"
                "$b" "$r/mnt" --uring &
                pid=$!
                until mountpoint -q "$r/mnt"; do sleep 0.1; done
                echo "$b$(phases "$r/mnt" "$n" "$pid") load $(load)"
                fusermount3 -u "$r/mnt"
                wait "$pid" || true
                rm -rf "$r"
                continue
            fi
            pid=$(mount_ws "$b" "$r")
            echo "$b$(phases "$r/mnt" "$n" "$pid") load $(load)"
            unmount_ws "$b" "$r"
        done
    done
    ;;
*)
    sed -n '2,19p' "$0"
    exit 2
    ;;
esac
