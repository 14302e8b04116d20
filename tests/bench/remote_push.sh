#!/bin/bash
# Sending history to a remote (docs/benchmarks.md, "Pushing to a remote"),
# against `rclone serve s3` on loopback, median of ROUNDS (default 3):
#   upload      a turn that wrote SIZE_MB (default 256) of incompressible
#               bytes in 64 files: from `turn` until `push` says the remote
#               holds the checkpoint after it (the tree's content is sent:
#               the remote must rebuild the checkpoint alone)
#   raw-copy    the same files copied to the same server by `rclone copy`
#               (the server's own upload speed for 64 large objects)
#   raw-chunks  the chunk objects that push sent, copied by `rclone copy`
#               to another prefix (the same objects, one per chunk: the
#               server's speed for that many small objects)
#   lag         a one-file turn: from `turn` until `status --json` shows the
#               remote holding it (the background uploader, nobody waiting)
#   record      2,000 small files created then `turn`, on a mount with a
#               remote and on one without, alternated within each round
#               (the recording path must not wait for the network)
# usage: remote_push.sh BIN [ROUNDS] [SIZE_MB]
set -e
BIN=$(realpath "$1")
ROUNDS=${2:-3}
SIZE_MB=${3:-256}
base=$(mktemp -d /var/tmp/remote_push.XXXX)
trap 'kill $server 2>/dev/null; for m in $base/mnt*; do umount -l $m 2>/dev/null || true; done; rm -rf $base' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p $base/data/bench $base/run
export REWINDFS_RUNTIME_DIR=$base/run REWINDFS_HOME=$base/home
export AWS_ENDPOINT_URL=http://127.0.0.1:$port AWS_ACCESS_KEY_ID=benchkey AWS_SECRET_ACCESS_KEY=benchsecret
export AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true
rclone serve s3 --config /dev/null --addr 127.0.0.1:$port --auth-key benchkey,benchsecret $base/data \
  2>$base/server.log &
server=$!
until (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null; do sleep 0.1; done
raw_remote=":s3,provider=Other,endpoint='http://127.0.0.1:$port',access_key_id=benchkey,secret_access_key=benchsecret:bench"

now() { date +%s.%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
remote_holds() { # MOUNT N: the remote holds checkpoint N or later
  $BIN status -C "$1" --json | python3 -c '
import json, sys
r = json.load(sys.stdin).get("remote") or {}
sys.exit(0 if (r.get("remote_checkpoint") or -1) >= int(sys.argv[1]) else 1)' "$2"
}
turn() { $BIN turn -C "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["checkpoint"])'; }

for r in $(seq 1 $ROUNDS); do
  # upload: a fresh workspace and prefix each round, so nothing is there yet
  ws=$base/ws$r; mnt=$base/mnt$r; mkdir -p $ws $mnt
  $BIN mount $ws $mnt --store $base/store$r --auto-turn 0 --remote s3://bench/up$r >/dev/null
  $BIN push -C $mnt --wait 600 >/dev/null
  for i in $(seq 1 64); do head -c $((SIZE_MB * 1024 * 1024 / 64)) /dev/urandom > $mnt/big$i; done
  ls $base/data/bench/chunks 2>/dev/null | sort > $base/chunks-before
  s=$(now); n=$(turn $mnt); $BIN push -C $mnt --wait 1200 >/dev/null
  remote_holds $mnt $n || { echo "push returned before the remote held checkpoint $n" >&2; exit 1; }
  e=$(now); echo "$e - $s" | bc >> $base/upload
  mkdir -p $base/raw$r; cp $ws/big* $base/raw$r/
  s=$(now); rclone copy --config /dev/null $base/raw$r "$raw_remote/raw$r" 2>>$base/rclone.log; e=$(now)
  echo "$e - $s" | bc >> $base/raw-copy
  rm -rf $base/raw$r
  mkdir -p $base/rawchunks$r
  ls $base/data/bench/chunks | sort | comm -13 $base/chunks-before - | while read c; do
    cp $base/data/bench/chunks/$c $base/rawchunks$r/; done
  echo "$(ls $base/rawchunks$r | wc -l) chunk objects" >> $base/chunk-count
  s=$(now); rclone copy --config /dev/null $base/rawchunks$r "$raw_remote/rawchunks$r" 2>>$base/rclone.log; e=$(now)
  echo "$e - $s" | bc >> $base/raw-chunks
  rm -rf $base/rawchunks$r
  # lag: a small turn, nobody waiting
  echo "one line" > $mnt/small
  s=$(now); n=$(turn $mnt)
  until remote_holds $mnt $n; do sleep 0.01; done
  e=$(now); echo "$e - $s" | bc >> $base/lag
  $BIN unmount $mnt >/dev/null
  # record: the same small-file turn with and without a remote
  for kind in remote none; do
    w=$base/rec-$kind-$r; m=$base/mnt-rec-$kind-$r; mkdir -p $w $m
    if [ $kind = remote ]; then extra="--remote s3://bench/rec$r"; else extra=""; fi
    $BIN mount $w $m --store $base/store-rec-$kind-$r --auto-turn 0 $extra >/dev/null
    s=$(now)
    for d in $(seq 1 20); do mkdir $m/d$d; for f in $(seq 1 100); do echo "file $d $f" > $m/d$d/f$f; done; done
    turn $m >/dev/null
    e=$(now); echo "$e - $s" | bc >> $base/record-$kind
    $BIN unmount $m >/dev/null
  done
  rm -rf $ws $base/store$r
done
up=$(median < $base/upload); raw=$(median < $base/raw-copy); rc=$(median < $base/raw-chunks)
rr=$(median < $base/record-remote); rn=$(median < $base/record-none)
printf 'upload %s s (%s MB/s) raw-copy %s s (%s MB/s): %sx\n' $up $(echo "scale=1; $SIZE_MB / $up" | bc) \
  $raw $(echo "scale=1; $SIZE_MB / $raw" | bc) $(echo "scale=2; $up / $raw" | bc)
printf 'raw-chunks %s s (%s, last round): push %sx\n' $rc "$(tail -1 $base/chunk-count)" $(echo "scale=2; $up / $rc" | bc)
printf 'lag of a small turn %s s\n' $(median < $base/lag)
printf 'record 2,000 files + turn: with a remote %s s, without %s s: %sx (median of %s rounds)\n' \
  $rr $rn $(echo "scale=2; $rr / $rn" | bc) $ROUNDS
