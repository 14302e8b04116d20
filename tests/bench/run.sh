#!/usr/bin/env bash
# rewindfs benchmarks: native ext4 vs rewindfs (passthrough on / off).
#   sudo tests/bench/run.sh [--reps N] [--workloads untar,git,...] [--out FILE]
#                           [--shadow-git 1000,10000,100000] [--shadow-bytes]
# Needs root (drops caches, FUSE passthrough), a release build
# (cargo build --release), python3, git, tar, dd, grep and a C compiler.
# Not part of `cargo test`. See docs/benchmarks.md; --help for all options.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec python3 "$here/bench.py" "$@"
