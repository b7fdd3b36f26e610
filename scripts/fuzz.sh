#!/usr/bin/env bash
# Runs every fuzz target (or those named) for SECONDS each (default 120) under a memory
# ceiling: libFuzzer stops with an "out-of-memory" crash when the process passes
# -rss_limit_mb, or when one allocation passes -malloc_limit_mb. The parsers' bounds (see
# docs/integrity.md, "Memory bounded by the input") keep any input of libFuzzer's default
# maximum length (4 KiB, or the largest corpus file) far below both.
#
#   cargo install cargo-fuzz            # once
#   SECONDS_EACH=600 scripts/fuzz.sh pytorch burn_record
set -euo pipefail
cd "$(dirname "$0")/.."
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(reader safetensors object_source burn_record pytorch gguf numpy onnx index manifest any)
each="${SECONDS_EACH:-120}"
# AddressSanitizer keeps 256 MiB of freed memory by default (its quarantine), which the RSS
# ceiling below would count as the target's: a long run of small inputs then "runs out of
# memory" with 26 MiB live (seen on the numpy target). A smaller quarantine keeps the ceiling
# about the parsers' own memory.
export ASAN_OPTIONS="${ASAN_OPTIONS:-quarantine_size_mb=64}"
for target in "${targets[@]}"; do
  work="$(mktemp -d)"
  cp -r "fuzz/corpus/$target/." "$work/"
  echo "== $target: ${each}s, rss ceiling 512 MiB, single allocation ceiling 256 MiB"
  log="$work.log"
  status=0
  cargo +nightly fuzz run "$target" "$work" -- -max_total_time="$each" -rss_limit_mb=512 \
    -malloc_limit_mb=256 -timeout=10 >"$log" 2>&1 || status=$?
  grep -E '^#[0-9]+\s+DONE|^Done [0-9]+ runs|out-of-memory|SUMMARY|panicked' "$log" || true
  echo "corpus: $(ls "$work" | wc -l) inputs; exit status $status"
  rm -rf "$work"
  if [ "$status" -ne 0 ]; then
    echo "$target failed: see $log" >&2
    exit "$status"
  fi
  rm -f "$log"
done
