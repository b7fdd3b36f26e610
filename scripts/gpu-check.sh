#!/usr/bin/env bash
# Runs the GPU check on a machine with a GPU and its Vulkan driver, without network: the
# binary is built beforehand (here) with
#   cargo build --release --features wgpu --example gpu_check
# and copied along with this script. Usage: scripts/gpu-check.sh [BINARY] [MIB] [discrete|integrated|default]
set -euo pipefail
bin="${1:-target/release/examples/gpu_check}"
mib="${2:-1024}"
kind="${3:-discrete}"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
chmod 700 "$XDG_RUNTIME_DIR"
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
"$bin" "$mib" "$kind"
