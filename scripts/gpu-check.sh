#!/usr/bin/env bash
# Runs the GPU upload check on a machine with a GPU and its Vulkan driver, without network.
# The binary is the upload benchmark, built beforehand (here) with
#   cargo bench --features wgpu --bench gpu --no-run
# (it prints the path: target/release/deps/gpu-<hash>) and copied along with this script.
# It writes a pack of MIB MiB, loads it onto the GPU with burnpack and with Burn 0.22's own
# loaders, checks the values read back and prints a table with the upload throughput.
#
# Usage: scripts/gpu-check.sh [BINARY] [MIB] [discrete|integrated|default]
set -euo pipefail
newest() { ls -t target/release/deps/gpu-* 2>/dev/null | grep -v '\.d$' | head -n 1; }
bin="${1:-$(newest)}"
[ -x "$bin" ] || { echo "gpu-check: no benchmark binary (build it with: cargo bench --features wgpu --bench gpu --no-run)" >&2; exit 2; }
mib="${2:-1024}"
kind="${3:-discrete}"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
chmod 700 "$XDG_RUNTIME_DIR"
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
BURNPACK_BENCH_GPU_MIB="$mib" BURNPACK_BENCH_GPU="$kind" BURNPACK_BENCH_DIR="${TMPDIR:-/tmp}" "$bin"
