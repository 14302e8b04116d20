#!/usr/bin/env bash
# rewindfs benchmarks: native ext4 vs rewindfs (passthrough on / off,
# recording off), and rewindfs's own costs against a shadow git:
#   sudo tests/bench/run.sh [--reps N] [--workloads untar,git,...] [--out FILE]
#                           [--targets native,pt,off,norec]
#   sudo tests/bench/run.sh --workloads turn,views,bytes,rewind [--rewind-mib 1024]
# Needs root (drops caches, FUSE passthrough), a release build
# (cargo build --release), python3, git, tar, dd, grep and a C compiler.
# Not part of `cargo test`. See docs/benchmarks.md; --help for all options.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec python3 "$here/bench.py" "$@"
