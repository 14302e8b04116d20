#!/bin/bash
# Reading a checkpoint from the bucket alone (docs/benchmarks.md, "A remote
# checkpoint"): a 4,800-file tree (48 directories of 100 files, 2-8 KB of
# text each, ~24 MB) pushed to `rclone serve s3` on loopback, then, from a
# home that never saw the workspace, with an empty chunk cache each round:
#   show-ls   `rewindfs show s3://...@0 MP` started until its first `ls MP`
#             answers (the head and the manifest fetched and indexed, the
#             mount made)
#   show-read the whole tree read through that mount (`cat` of every
#             file: every chunk fetched, checked and cached)
#   clone     `rewindfs clone s3://...@0 DIR`
#   git-clone `git clone` of the same tree from a local bare repository
#             (no network, the reference point the issue names)
# Prints the median of ROUNDS (default 3) rounds, in seconds; then the
# bucket's bytes with that one workspace and after a second workspace of
# the same tree (another store, another prefix) pushed to it.
# usage: remote_show.sh BIN [ROUNDS]
set -e
BIN=$(realpath "$1")
ROUNDS=${2:-3}
base=$(mktemp -d /var/tmp/remote_show.XXXX)
trap 'kill $server 2>/dev/null; for m in $base/mp*; do umount -l $m 2>/dev/null || true; done; rm -rf $base' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p $base/data/bench $base/ws $base/mnt $base/run
export REWINDFS_RUNTIME_DIR=$base/run REWINDFS_HOME=$base/home
export AWS_ENDPOINT_URL=http://127.0.0.1:$port AWS_ACCESS_KEY_ID=benchkey AWS_SECRET_ACCESS_KEY=benchsecret
export AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true
rclone serve s3 --config $base/rclone.conf --addr 127.0.0.1:$port --auth-key benchkey,benchsecret $base/data \
  2>$base/server.log &
server=$!
until (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null; do sleep 0.1; done
python3 - "$base/ws" <<'PY'
import os, random, sys
ws = sys.argv[1]
random.seed(4800)
words = [f"w{i}" for i in range(5000)]
for d in range(48):
    os.makedirs(f"{ws}/d{d:02}")
    for f in range(100):
        n = random.randint(2048, 8192)
        text = " ".join(random.choice(words) for _ in range(n // 5))[:n]
        with open(f"{ws}/d{d:02}/f{f:03}.txt", "w") as fh:
            fh.write(text + "\n")
PY
url=s3://bench/ws
$BIN mount $base/ws $base/mnt --store $base/store --auto-turn 0 --remote $url >/dev/null
$BIN push -C $base/mnt --wait 600 >/dev/null
$BIN unmount $base/mnt >/dev/null
one=$(du -sb $base/data/bench | cut -f1)
cp -a $base/ws $base/ws2; mkdir -p $base/mnt2
$BIN mount $base/ws2 $base/mnt2 --store $base/store2 --auto-turn 0 --remote s3://bench/ws2 >/dev/null
$BIN push -C $base/mnt2 --wait 600 >/dev/null
$BIN unmount $base/mnt2 >/dev/null
two=$(du -sb $base/data/bench | cut -f1)
git -C $base/ws init -q && git -C $base/ws add -A && git -C $base/ws -c user.name=b -c user.email=b@b commit -qm tree
git clone -q --bare $base/ws $base/bare.git
rm -rf $base/ws/.git

now() { date +%s.%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for r in $(seq 1 $ROUNDS); do
  export XDG_CACHE_HOME=$base/cache$r
  mp=$base/mp$r; mkdir -p $mp
  s=$(now)
  $BIN show --foreground $url@0 $mp >/dev/null 2>$base/show$r.log &
  pid=$!
  until ls $mp 2>/dev/null | grep -q d00; do sleep 0.005; done
  e=$(now)
  echo "$e - $s" | bc >> $base/show-ls
  s=$(now); find $mp -type f -exec cat {} + >/dev/null; e=$(now)
  echo "$e - $s" | bc >> $base/show-read
  n=$(find $mp -type f | wc -l)
  [ "$n" = 4800 ] || { echo "show lists $n files, not 4800" >&2; exit 1; }
  diff -r $mp $base/ws >/dev/null || { echo "show differs from the tree" >&2; exit 1; }
  $BIN unmount $mp >/dev/null
  wait $pid
  s=$(now); $BIN clone $url@0 $base/clone$r >/dev/null; e=$(now)
  echo "$e - $s" | bc >> $base/clone
  s=$(now); git clone -q $base/bare.git $base/git$r; e=$(now)
  echo "$e - $s" | bc >> $base/git-clone
  rm -rf $base/clone$r $base/git$r $base/cache$r
done
printf 'show-ls %s show-read %s clone %s git-clone %s (median of %s, seconds)\n' \
  $(median < $base/show-ls) $(median < $base/show-read) $(median < $base/clone) $(median < $base/git-clone) $ROUNDS
echo "bucket bytes: one workspace $one, two workspaces of the same tree $two ($(echo "scale=3; $two / $one" | bc)x)"
