#!/usr/bin/env bash
# wire/fuzz/run.sh SECONDS [TARGET...]
#
# Runs psbx-wire's cargo-fuzz targets (default: decode, then session) for
# SECONDS each and fails if one finds a crash, a panic or a hang. Needs a
# nightly toolchain; installs cargo-fuzz when it is missing. Builds outside
# the clone ($PSBX_FUZZ_TARGET_DIR, default ~/.cache/psbx/fuzz-target) and
# keeps each target's corpus there too, so that later runs start further on;
# a failing input is saved under wire/fuzz/artifacts/<target>/.
set -euo pipefail

HERE="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
[[ $# -ge 1 && "$1" =~ ^[0-9]+$ ]] || { echo "usage: $0 SECONDS [TARGET...]" >&2; exit 2; }
SECS="$1"
shift
TARGETS=("$@")
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=(decode session)

rustup run nightly rustc --version >/dev/null 2>&1 \
    || { echo "fuzz: a nightly toolchain is needed (rustup toolchain install nightly)" >&2; exit 1; }
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked

CACHE="${PSBX_FUZZ_TARGET_DIR:-$HOME/.cache/psbx/fuzz-target}"
mkdir -p "$CACHE"
cd "$HERE/.."
for target in "${TARGETS[@]}"; do
    corpus="$CACHE/corpus/$target"
    mkdir -p "$corpus" "$HERE/artifacts/$target"
    echo "fuzz: $target for ${SECS}s"
    cargo +nightly fuzz run --target-dir "$CACHE" "$target" "$corpus" -- \
        -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
done
