//! `cargo xtask`: the workspace's automation, written in Rust so it runs wherever cargo does.
//!
//! This is the matklad xtask pattern (as in rust-analyzer and wgpu): `.cargo/config.toml`
//! aliases `cargo xtask` to `cargo run --package xtask --`, so no tool has to be installed.
//! Each subcommand lives in its own module; `util` holds the shared plumbing, its command
//! lines included (lexopt). Its few dependencies are small and well kept (lexopt, serde_json)
//! so it builds in seconds.

mod bench;
mod bindgen;
mod chaos;
mod ci;
mod cuda_emu;
mod fuzz;
mod gpu_bundle;
mod gpu_test;
mod miri;
mod msrv;
mod mutants;
mod no_gpu;
mod package;
mod python;
mod sanitize;
mod soak;
mod tidy;
mod toolchains;
mod util;

use std::process::ExitCode;

use util::{Failure, Result};

/// The help text for `cargo xtask help`.
pub const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  ci [--skip-fmt] [--skip-clippy] [--skip-tidy] [--skip-test] [--skip-cuda-emu]
     [--skip-python] [--skip-no-cuda] [--skip-doc] [--skip-package] [--skip-toolchains]
     [-- <test args>]
        run the checks CI runs, in order, stopping at the first failure:
        cargo fmt --check, cargo clippy -D warnings, tidy, cargo test --workspace (every
        target but the examples, which clippy checks, then the doc tests, then the CPU and
        pipeline suites under the chaos schedule, seed 1, then the CPU tests and kernel
        examples under GPU_KERNEL_RACECHECK=1), cuda-emu (`cuda-emu test`
        below on the test step's build, then the data_parallel example on two emulated
        devices through NCCL and cuda_doctor), python (below),
        no-cuda
        (the facade without its default features: no CUDA crate in its dependency tree,
        clippy, its tests built, those about device selection run), cargo doc with
        RUSTDOCFLAGS=\"-D warnings\" (every feature; public items, then private ones too),
        package (cargo package --no-verify of every library crate, then every file their
        sources and manifests name must be in the packages), toolchains (below).
        Arguments after `--` are appended to both test runs (e.g. a test filter, or
        `-- --nocapture`).
  cuda-emu build | env | run | test [--release] [--jobs N] [-- COMMAND [ARGS] | FILTER...]
        the CUDA emulator (crates/gpukit-cuda-emu) in place of NVIDIA's libraries: `build`
        builds it and its folder of links (target/cuda-emu/lib-PROFILE: libcuda.so.1,
        libnvrtc.so.12, libcublas.so.12, libnccl.so.2, ...); `env` prints the `export`
        lines that select it (LD_LIBRARY_PATH, GPUKIT_CUDA_EMU_CACHE, GPU_KERNEL_CACHE; a
        shell that exports them hands the fake driver to every CUDA program it starts,
        PyTorch's included); `run -- COMMAND` runs one command with them; `test` runs the
        CUDA tests against it, each in its own process, N at a time (default 2), those
        whose names contain a FILTER when given, with GPU_REQUIRE_CUDA=1, GPU_POOL=off and
        GPUKIT_CUDA_EMU_SMS=8
  tidy
        check the house rules no lint checks: `//!` module docs in every file, and the
        files `cargo xtask bindgen` generates in crates/gpukit-cuda-sys/src/ffi/ and only there.
        clippy checks the rest: `// SAFETY:` comments on unsafe blocks and impls,
        `# Safety` docs on unsafe fns and traits, no unwrap/expect in library code.
  bench [--quick] [--json FILE] [--write-docs] [--table-only] [-- <args>]
        run the benchmarks (gpukit-bench's examples, release build): transfer_bench on the
        CPU and on Vulkan, whose CPU JSON goes to FILE (by default
        target/bench/transfer_bench.json) and which get the arguments after `--`, then
        cuda_bench (CUDA vs raw cudarc; SKIPPED without a GPU; again on the CUDA emulator,
        whose rows are host-only: ns per op over raw), pipeline_bench (every
        pipeline pattern against sequential at compute:transfer ratios 0.25, 1 and 4) and
        graph_bench (host cost per op, eager vs replayed graph) on the CPU and on CUDA,
        ops_bench (built-in ops vs memcpy, gemm vs other gemms and numpy) and
        enqueue_bench on the CPU, startup_bench (a fresh process's time to its first
        result per GPU_DEVICE, and each probe alone), kernel_bench (#[kernel]s vs
        hand-written kernels) on the CPU, Vulkan and CUDA, allreduce_bench (all-reduce bus bandwidth vs memcpy, and
        data-parallel training vs one device) on cpu:0..2 and on every CUDA device, each
        writing NAME.json beside FILE; run.json records the run (date, commit, machine,
        arguments). Then one table of every figure with its target and whether it holds
        (holds / MISSED / n/a; info without a target), with the load average at the start
        and the end, also written to summary.json beside FILE. --quick: each program's
        short form (fewer sizes and runs). --write-docs: also regenerate
        docs/BENCHMARKS.md from the reports. --table-only runs nothing: the table (and the
        page) from the reports already there.
  gpu-test [-- <test args>]
        run the CUDA tests on this machine (release build) and fail when no GPU is usable:
        GPU_REQUIRE_CUDA=1 cargo test --release --no-fail-fast --workspace --exclude xtask
        cuda [args], then, unfiltered, the targets whose CUDA tests lack `cuda` in their
        names (gpukit-cuda-sys's unit and nvrtc tests, gpukit-cuda's unit tests, gpukit's cuda_poison).
        With GPU_REQUIRE_CUDA=1 a CUDA test fails instead of printing `SKIPPED:`, so this
        never reports a GPU pass without a GPU; a run where no test passed fails too.
        Arguments after `--` are appended to each run (e.g. `-- -p gpukit`, or
        `-- -- --nocapture`), then `--show-output` for the test binaries; `SKIPPED:` lines
        are listed at the end.
  gpu-bundle [DIR]
        build the release test binaries, the benchmarks and the cuda_doctor tool into DIR
        (default: bundle/), stripped, with MANIFEST.txt, run.sh and the PyTorch comparator
        (crates/gpukit-bench/torch_compare.py and its modules, run after the benchmarks),
        for a GPU machine without Rust (same x86-64 Linux). Refuses to empty a non-empty DIR that has no
        MANIFEST.txt, and fails at 64 MiB or more. On the GPU machine, one step per call:
        `DIR/run.sh [--doctor] [--tests] [--sanitize memcheck|racecheck|synccheck|all]
        [--bench] [--budget S] [--allow-skip] [--expect-skip TEXT] [--out DIR]
        [-- <test args>]` (see `run.sh --help`; docs/GPU-RUNS.md has the sequence); the
        summary, a log archive and the benchmark JSON go to $OUT.
  bindgen [--include DIR]...
        regenerate crates/gpukit-cuda-sys/src/ffi/*.rs from CUDA's headers (DIR, or
        $CUDA_HOME/include) with the `bindgen` tool (`cargo install bindgen-cli --locked`,
        needs libclang); the functions bound are listed in crates/gpukit-cuda-sys/bindgen/functions.txt
  soak --minutes N [--backend cpu|cuda] [-- <args>]
        run the soak tool (release build) for N minutes (fractions allowed: 0.2; at
        most 10080, a week):
        a triple-buffered pipeline repeated while host RSS, the pinned pool and (CUDA)
        device memory are sampled; fails unless memory is flat after the warm-up (the
        first 20 %) within max(8 MiB, 5 %) and the pool stops allocating, and unless every
        run's output equals the first's. `--backend cuda` without a GPU prints SKIPPED.
        Arguments after `--` go to the tool (`--batches N`, `--batch-mib X`).
  soak --chaos --minutes N [--seed S]
        the ordering soak: the CPU and pipeline test suites under the CPU backend's chaos
        schedule (GPU_CPU_SCHEDULE=chaos:<seed>: work reordered as far as its dependencies
        allow, races reported), seed after seed from S (default: from the clock) until N
        minutes have passed; the first failure stops it and names its seed. `ci` runs the
        same suites under seed 1.
  no-gpu
        the no-GPU contract: `cargo test -p gpukit --test it no_gpu::` (every
        constructor that can request CUDA returns a typed error), then the no_gpu_abort
        tool built with CARGO_PROFILE_RELEASE_PANIC=abort into target/panic-abort (the
        same kinds of calls and the CUDA library loaders all return, none panics); then
        a deliberate panic in it must abort (SIGABRT).
  miri [--minutes N] [-- <args>]
        run gpukit-core's and gpukit-cpu's unit and doc tests under Miri (needs the nightly toolchain with
        the miri and rust-src components), but the op table's safe-code reference tests;
        stopped and failed after N minutes (default 60), naming the test that was running
  mutants [--area tracker|optable|pipeline]... [--minutes N] [--shard K/N] [--iterate]
        mutation testing (cargo-mutants) of gpukit-core's tracker (against the chaos and
        tracker tests of gpukit-cpu), the op table (against gpukit-core's unit tests)
        and the pipeline engine (against its tests under the chaos schedule);
        prints caught / missed / timeout / unviable per area (lists in
        target/mutants/AREA/mutants.out); stopped after N minutes (default 60);
        --iterate tests again only the mutants the area's last run did not catch
  sanitize --sanitizer address|thread [--minutes N] [-- <test filters>]
        the facade's multi-device and collective tests (`it` filtered to multi_device) and
        the CPU backend's queue tests under AddressSanitizer or ThreadSanitizer (nightly,
        std rebuilt with -Zbuild-std, in target/sanitize-NAME); any report fails it;
        stopped after N minutes (default 40)
  toolchains
        `cargo check --workspace --all-targets --locked` with the declared minimum Rust
        (rust-version, e.g. 1.90.0), `-p gpukit --lib` (the library crates) with the
        current nightly, each installed with
        rustup (--profile minimal) where missing, in target/toolchains/NAME; fails only
        when the minimum fails (a failing nightly is reported), and reports a toolchain
        rustup cannot install as not run. Also the last step of `ci`.
  python
        build the Python package (crates/gpukit-python, maturin) into a wheel with pip
        (dev profile), install it in target/python/venv (made with $PYTHON -m venv, else
        python3; maturin, NumPy and mypy from PyPI), check its type stubs (mypy's stubtest,
        mypy --strict over a typed use) and run its tests (crates/gpukit-python/tests,
        unittest): DLPack both ways with NumPy, and with PyTorch where installed; the
        tests of the wheel for every CPython from 3.9 (feature abi3-py39) on CPython 3.9
        (NumPy 2.0) where python3.9 is installed, and the CUDA tests against the CUDA
        emulator. Without an
        interpreter, or where the environment cannot be made or filled, prints SKIPPED
        (GPU_REQUIRE_PYTHON=1: fails). Also a step of `ci`.
  fuzz [--seconds N] [--target NAME]... [-- <libFuzzer args>]
        run the cargo-fuzz targets in fuzz/ (device_spec, config_toml, op_program, dlpack_import,
        kernel_codegen, launcher_env; all by
        default) for N seconds each (default 60): `cargo +nightly fuzz run NAME --
        -max_total_time=N -print_final_stats=1` in fuzz/, then a summary of executions
        per target; fails if any target fails (crash inputs go to fuzz/artifacts/NAME).
        Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz --locked`).
  help
        print this message
";

fn main() -> ExitCode {
    match dispatch() {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) if failure.is_help() => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        Err(failure) => {
            eprintln!("error: {}", failure.message);
            if failure.code == 2 {
                eprintln!("run `cargo xtask help` for usage");
            }
            ExitCode::from(failure.code)
        }
    }
}

fn dispatch() -> Result {
    let args = args()?;
    let root = util::workspace_root();
    let Some((command, rest)) = args.split_first() else {
        print!("{USAGE}");
        return Ok(());
    };
    let result = match command.as_str() {
        "ci" => ci::run(&root, rest),
        "cuda-emu" => cuda_emu::run(&root, rest),
        "tidy" => tidy::run_cli(&root, rest),
        "bench" => bench::run(&root, rest),
        "bindgen" => bindgen::run(&root, rest),
        "miri" => miri::run(&root, rest),
        "gpu-test" => gpu_test::run(&root, rest),
        "gpu-bundle" => gpu_bundle::run(&root, rest),
        "soak" => soak::run(&root, rest),
        "no-gpu" => no_gpu::run(&root, rest),
        "fuzz" => fuzz::run(&root, rest),
        "sanitize" => sanitize::run(&root, rest),
        "mutants" => mutants::run(&root, rest),
        "toolchains" => toolchains::run(&root, rest),
        "python" => python::run(&root, rest),
        "help" | "-h" | "--help" => return Err(Failure::help()),
        other => {
            eprint!("{USAGE}");
            return Err(Failure::usage(format!("unknown subcommand `{other}`")));
        }
    };
    // A usage error says which subcommand it is about.
    result.map_err(|failure| match failure.code {
        2 => Failure::usage(format!("`cargo xtask {command}`: {}", failure.message)),
        _ => failure,
    })
}

/// The arguments after the program name; a non-UTF-8 argument is a usage error, not a panic.
fn args() -> Result<Vec<String>> {
    std::env::args_os()
        .skip(1)
        .map(|arg| {
            arg.into_string()
                .map_err(|arg| Failure::usage(format!("argument {arg:?} is not valid UTF-8")))
        })
        .collect()
}
