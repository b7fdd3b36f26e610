#!/usr/bin/env python3
"""Runs a wasm32-wasip1 program under wasmtime (the `wasmtime` package from PyPI, which ships
the runtime): `wasi-run.py program.wasm [args...]`, with the arguments, the environment, stdin,
stdout and stderr passed through, the current directory preopened as `.`, and the program's
exit code as this script's. Cargo uses it as the runner of the wasm32-wasip1 target
(`CARGO_TARGET_WASM32_WASIP1_RUNNER`), so `cargo test --target wasm32-wasip1` runs the tests.
"""
import os
import sys

import wasmtime


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: wasi-run.py program.wasm [args...]", file=sys.stderr)
        return 2
    path = sys.argv[1]
    config = wasmtime.Config()
    engine = wasmtime.Engine(config)
    store = wasmtime.Store(engine)
    wasi = wasmtime.WasiConfig()
    wasi.argv = [os.path.basename(path)] + sys.argv[2:]
    wasi.env = list(os.environ.items())
    wasi.inherit_stdin()
    wasi.inherit_stdout()
    wasi.inherit_stderr()
    wasi.preopen_dir(os.getcwd(), ".")
    store.set_wasi(wasi)
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    module = wasmtime.Module.from_file(engine, path)
    instance = linker.instantiate(store, module)
    start = instance.exports(store)["_start"]
    try:
        start(store)
    except wasmtime.ExitTrap as exit:
        return exit.code
    except wasmtime.Trap as trap:
        # A panic under `panic = "abort"` (the target's default) ends in `unreachable`.
        print(f"wasi-run: {path} trapped: {trap.message}", file=sys.stderr)
        return 101
    return 0


if __name__ == "__main__":
    sys.exit(main())
