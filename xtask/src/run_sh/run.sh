#!/usr/bin/env bash
# run.sh: runs the steps of a GPU bundle made by `cargo xtask gpu-bundle`: the doctor (a
# preflight of the machine, then tools/cuda_doctor), the tests, the benchmarks, each
# compute-sanitizer tool, and last the PyTorch comparator (with the benchmarks).
#
# Needs bash 4.4+ and the usual command-line tools (awk, grep, sed, tar, gzip, timeout), not
# Rust. It can be run from any folder; it finds the bundle next to itself. Each call runs the
# steps its options name (the tests when none is named), in the order above, and:
# - runs the test units, in the test and sanitizer steps: each test binary, except that a
#   grouped binary (the facade's `it`, one module per area) runs once per group, its
#   top-level modules (`props`, `behaviour`, ...), each with its own time limit, log and
#   row; in an order that puts the most telling first (the CUDA-vs-CPU properties and the
#   behaviours) and the slowest last, so that a call cut short has still run those (--first
#   and --only change it);
# - writes every program's full output to a working folder (--logs, else a fresh folder
#   under $TMPDIR or /tmp), and prints one line per program and a summary;
# - puts into the output folder (--out, else $OUT when set) at most 8 files, each named
#   after the call's steps: LABEL.summary.txt (everything printed), LABEL.logs.tar.gz (the
#   logs), and the JSON reports of the benchmarks and the PyTorch comparator. They are
#   refreshed after every program, so a call cut short still leaves what it had;
# - stops starting programs when the time budget (--budget) is spent, and cuts a program
#   that outlives its share (timeout), reporting it as a failure, so that the call ends,
#   with its summary, before a device tool's own limit kills it;
# - leaves out of the sanitizer steps the test binaries that fault on purpose (xtask's
#   gpu_test::UNFILTERED_TARGETS says which), and reports a sanitizer step as `not run`,
#   failing nothing, where compute-sanitizer cannot work: under gVisor (a kernel release of
#   4.4) it cannot attach to the GPU, and where it answers `Device not supported` it refused
#   the device;
# - exits 0 only when nothing failed and nothing was left unverified: a test step in which
#   nothing passed, a SKIPPED: line, a missing compute-sanitizer or a skipped benchmark fails
#   the call (unless --allow-skip; a test step with no passing test fails regardless).
#
# For run.sh's own tests only: RUN_SH_KERNEL_RELEASE, when set, stands in for `uname -r`
# (so that the gVisor case can be shown on any machine).
#
# The template lives in xtask/src/run_sh/: this file, the entry point (options, the call's
# setup, the header, the steps in order, the summary), and one file per concern, which
# `cargo xtask gpu-bundle` puts in place of their `# @include NAME` lines: units.sh (the
# test units and their order), budget.sh (time limits), results.sh (outputs, tallies, one
# test unit's run and record) and steps.sh (the steps). The bundle's run.sh is the one file
# that results, with the grouped test binaries, and the test binaries its sanitizer steps
# run unfiltered and those they leave out, filled in.

set -u

usage() {
    sed "s/@TORCH_COMPARE_NEEDS@/$torch_compare_needs/" <<'EOF'
usage: run.sh [steps] [options] [-- <test args>]

steps (any combination, run in this order; the tests when none is given):
  --doctor            a preflight (kernel and gVisor, GPU and driver, compute-sanitizer,
                      CUDA variables, python3's torch: information, failing nothing), then
                      tools/cuda_doctor: the libraries found and chosen, every built-in
                      module compiled, a smoke test (about 30 s, NVRTC cold)
  --tests             every test unit, unfiltered (about 2.5 min)
  --bench             every benchmark in bench/ with `--device cuda --json FILE` (about
                      4 min; 1.5 with --quick)
  --sanitize TOOL     the CUDA tests under compute-sanitizer's TOOL: memcheck, racecheck,
                      synccheck, or all (each its own step; repeatable); an error, or no
                      compute-sanitizer, fails the step; under gVisor, or where it refuses
                      the device, the step is not run and fails nothing
  --all               all of the above (needs about 20 min: raise --budget)
After the steps, with --bench: tools/torch_compare.py, the same work through PyTorch in a
table beside cuda_bench's and pipeline_bench's figures (about 1 min; not run, failing
nothing, where python3 lacks torch or torch lacks CUDA).

options:
  --quick             the benchmarks in short: cuda_bench and transfer_bench up to
                      256 MiB, pipeline_bench --quick, graph_bench as it is, kernel_bench
                      --runs 7, allreduce_bench --quick, startup_bench as always (5 fresh
                      processes per device, cuda's included); then the comparator only with
                      @TORCH_COMPARE_NEEDS@ s of the budget left (else `not run`, failing
                      nothing). Needs --bench
  --max-mib N         the largest transfer of cuda_bench and transfer_bench, 1 to 65536
                      (over --quick's 256). Needs --bench
  --first A,B,...     run these test units (binaries or groups, below) first, in this
                      order, and the rest after in the default order (below); repeatable
  --only A,B,...      run only these test units in the test and sanitizer steps, in this
                      order unless --first gives one; repeatable
  --allow-skip        do not export GPU_REQUIRE_CUDA=1 (CUDA tests skip without a GPU)
                      and accept SKIPPED: lines, a missing compute-sanitizer and skipped
                      benchmarks; without it each of those fails the run
  --expect-skip TEXT  a SKIPPED: line containing TEXT is expected (one shown to be
                      legitimate on a GPU) and fails nothing; repeatable
  --serial            run the tests of each unit one at a time (--test-threads=1)
  --budget SECONDS    time for the whole call (default 540; 0: no limit): no program
                      starts after it is spent, and a running one is cut when it ends
  --binary-timeout S  the most one program may take (default 240; 0: the budget's rest)
  --logs DIR          the working folder for the logs (default: a fresh one in /tmp)
  --out DIR           where the summary, the log archive and the JSON reports go
                      (default: $OUT if set, else nowhere: the logs stay in --logs)
  -h, --help          this message

A test unit is a test binary, or a group of a grouped binary (@GROUPED_TARGETS@): the tests
under one of its top-level modules. A NAME is a binary's target name, matching the
bundle's tests/NAME and tests/NAME-HASH where two targets share a name (both `faults`); a
group's module name (`props`, `behaviour`); or a grouped binary's name, for all its
groups. A NAME that matches none is an error.

Arguments after `--` go to every test unit (e.g. a test filter, or --nocapture); a
group's run names its tests exactly (libtest's filters match anywhere in a name), among
those the arguments select.
COMPUTE_SANITIZER may name the compute-sanitizer to use; TORCH_PYTHON the Python that
runs the comparator and the preflight's torch check (default python3).
EOF
    echo
    echo "The default order of the test units: first $default_first; then the others by name; last $default_last." |
        fold -s -w 90 | sed 's/ *$//'
}

bundle=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P) || {
    echo "run.sh: cannot find the folder this script is in" >&2
    exit 2
}

# The binaries travel packed (bins.tar.xz, written by `cargo xtask gpu-bundle`): unpack them
# beside this script on the first call. Without xz, Python's tarfile reads the archive.
if [ -f "$bundle/bins.tar.xz" ] && [ ! -d "$bundle/tests" ]; then
    if command -v xz >/dev/null 2>&1; then
        tar -C "$bundle" -xJf "$bundle/bins.tar.xz"
    else
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
            "$bundle/bins.tar.xz" "$bundle"
    fi || {
        echo "run.sh: could not unpack $bundle/bins.tar.xz (neither xz nor python3 worked)" >&2
        exit 2
    }
fi

# Test binaries whose CUDA tests do not have `cuda` in their names: the sanitizer steps run
# them unfiltered. Test binaries that fault on purpose (cuda_poison's wild write poisons the
# device), which compute-sanitizer would report by design: the sanitizer steps leave them
# out. Both from xtask's gpu_test::UNFILTERED_TARGETS, filled in by `cargo xtask
# gpu-bundle`; a name is the bundle's file name under tests/.
unfiltered_targets="@UNFILTERED_TARGETS@"
not_sanitized_targets="@NOT_SANITIZED_TARGETS@"

# The default order of the test units (names as --first takes them: binaries, and groups of
# `it`): these first, the rest by name, then the last ones. First the CUDA-vs-CPU
# properties and the behaviours, the most a cut-off run can report; then the features no
# GPU has run yet (Rust kernels, awaiting streams, DLPack, the Python module, NCCL, several
# devices), the other units with CUDA variants, the unfiltered CUDA targets, the probe and
# device selection on a real driver, and the Vulkan backend's own. Last the slowest: pipeline_props (a fresh context
# per random case) and the CPU-only fault-injection and training tests. A name not in the
# bundle is passed over (xtask's tests check that each names a test target or a group of
# the workspace).
default_first="props behaviour memory rust_kernels asynchronous dlpack python nccl multi_device bad_input interop alloc_free half debug bad_input_pipeline gpukit_cuda nvrtc gpukit_cuda_sys cuda_poison probe selection gpukit_wgpu kernels windows"
default_last="pipeline_props faults digits"

# Rough expectations for each step, printed when it starts. Nothing has run on a GPU yet:
# replace them with what docs/GPU-RUNS.md records once something has.
expected_duration() {
    local n=${#order[@]}
    case $1 in
        doctor) echo "about 30 s (the preflight, then cuda_doctor compiling a built-in kernel of each element type, cold, and its smoke test)" ;;
        tests) if [ "$only_given" -eq 1 ]; then echo "about 30 s a unit (--only: $n)"; else echo "about 2.5 min"; fi ;;
        memcheck) if [ "$only_given" -eq 1 ]; then echo "about 1 min a unit (--only: $n)"; else echo "about 5 min"; fi ;;
        racecheck) if [ "$only_given" -eq 1 ]; then echo "about 45 s a unit (--only: $n)"; else echo "about 4 min"; fi ;;
        synccheck) if [ "$only_given" -eq 1 ]; then echo "about 30 s a unit (--only: $n)"; else echo "about 3 min"; fi ;;
        bench) if [ "$quick" -eq 1 ]; then echo "about 1.5 min (--quick)"; else echo "about 4 min"; fi ;;
        torch_compare) echo "about 1 min" ;;
        *) echo "unknown" ;;
    esac
}

die_usage() {
    echo "run.sh: $1" >&2
    usage >&2
    exit 2
}

# Whether $1 is a whole number of seconds.
is_seconds() {
    case $1 in
        '' | *[!0-9]*) return 1 ;;
        *) return 0 ;;
    esac
}

want_doctor=0
want_tests=0
want_bench=0
want_all=0
sanitize_tools=()
allow_skip=0
serial=0
logdir=
outdir=${OUT:-}
budget=540
binary_timeout=240
expect_skips=()
# The CUDA backend's error-path tests inject faults through the CUDA emulator; a GPU has
# nothing to inject them with.
expect_skips+=("fault injection needs the CUDA emulator")
pass=()
quick=0
max_mib=
# Seconds of budget the comparator needs under --quick (it measures for about a minute).
torch_compare_needs=90
first_names=()
only_names=()
only_given=0

add_tool() {
    local tool existing
    case $1 in
        all) set -- memcheck racecheck synccheck ;;
        memcheck | racecheck | synccheck) ;;
        *) die_usage "unknown compute-sanitizer tool '$1' (memcheck, racecheck, synccheck or all)" ;;
    esac
    for tool in "$@"; do
        for existing in ${sanitize_tools[@]+"${sanitize_tools[@]}"}; do
            if [ "$existing" = "$tool" ]; then continue 2; fi
        done
        sanitize_tools+=("$tool")
    done
}

# Option values: `--opt VALUE` or `--opt=VALUE`.
while [ $# -gt 0 ]; do
    opt=$1
    value=
    has_value=0
    case $opt in
        --*=*)
            value=${opt#*=}
            opt=${opt%%=*}
            has_value=1
            ;;
    esac
    case $opt in
        --sanitize | --expect-skip | --budget | --binary-timeout | --logs | --out | \
            --max-mib | --first | --only)
            if [ "$has_value" -eq 0 ]; then
                if [ $# -lt 2 ]; then die_usage "$opt needs a value"; fi
                value=$2
                shift
            fi
            ;;
    esac
    case $opt in
        --doctor) want_doctor=1 ;;
        --tests) want_tests=1 ;;
        --sanitize) add_tool "$value" ;;
        --bench) want_bench=1 ;;
        --all) want_all=1 ;;
        --allow-skip) allow_skip=1 ;;
        --expect-skip)
            if [ -z "$value" ]; then die_usage "--expect-skip needs a non-empty text"; fi
            expect_skips+=("$value")
            ;;
        --serial) serial=1 ;;
        --budget)
            is_seconds "$value" || die_usage "--budget takes whole seconds, not '$value'"
            budget=$((10#$value))
            ;;
        --binary-timeout)
            is_seconds "$value" || die_usage "--binary-timeout takes whole seconds, not '$value'"
            binary_timeout=$((10#$value))
            ;;
        --logs) logdir=$value ;;
        --out) outdir=$value ;;
        --quick) quick=1 ;;
        --max-mib)
            if ! is_seconds "$value" || [ $((10#$value)) -lt 1 ] || [ $((10#$value)) -gt 65536 ]; then
                die_usage "--max-mib takes a whole number of MiB from 1 to 65536, not '$value'"
            fi
            max_mib=$((10#$value))
            ;;
        --first | --only)
            IFS=, read -r -a names <<<"$value"
            for name in ${names[@]+"${names[@]}"}; do
                if [ -z "$name" ]; then continue; fi
                if [ "$opt" = --first ]; then first_names+=("$name"); else only_names+=("$name"); fi
            done
            if [ "$opt" = --only ]; then only_given=1; fi
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        --)
            shift
            pass=("$@")
            break
            ;;
        *) die_usage "unknown argument '$1'" ;;
    esac
    shift
done

if [ "$want_all" -eq 1 ]; then
    want_doctor=1
    want_tests=1
    want_bench=1
    add_tool all
fi
if [ "$want_doctor$want_tests$want_bench" = 000 ] && [ "${#sanitize_tools[@]}" -eq 0 ]; then
    want_tests=1
fi
if [ "$want_bench" -eq 0 ] && { [ "$quick" -eq 1 ] || [ -n "$max_mib" ]; }; then
    die_usage "--quick and --max-mib shape the benchmarks: add --bench"
fi
if [ "$only_given" -eq 1 ] && [ "${#only_names[@]}" -eq 0 ]; then
    die_usage "--only needs at least one test unit's name"
fi

# The steps in the order they run, and the call's label, which names its output files. The
# benchmarks come before the sanitizers: they are shorter, and after the tests' results their
# figures are what a short call needs most. The comparator runs after every step (below): it
# only adds to the benchmarks' figures.
steps=()
if [ "$want_doctor" -eq 1 ]; then steps+=(doctor); fi
if [ "$want_tests" -eq 1 ]; then steps+=(tests); fi
if [ "$want_bench" -eq 1 ]; then steps+=(bench); fi
steps+=(${sanitize_tools[@]+"${sanitize_tools[@]}"})
if [ "$want_all" -eq 1 ]; then
    label=all
else
    label=$(IFS=-; echo "${steps[*]}")
fi

# @include units.sh

if [ -z "$logdir" ]; then
    logdir=$(mktemp -d "${TMPDIR:-/tmp}/gpu-run-$label.XXXXXX") || {
        echo "run.sh: cannot create a log folder in ${TMPDIR:-/tmp}" >&2
        exit 2
    }
fi
if ! mkdir -p -- "$logdir" || ! logdir=$(cd -- "$logdir" && pwd -P); then
    echo "run.sh: cannot create the log folder '$logdir'" >&2
    exit 2
fi
if [ -n "$outdir" ]; then
    if ! mkdir -p -- "$outdir" || ! outdir=$(cd -- "$outdir" && pwd -P); then
        echo "run.sh: cannot create the output folder '$outdir'" >&2
        exit 2
    fi
    case $logdir/ in
        "$outdir"/*)
            echo "run.sh: the log folder must not be in the output folder (the logs are archived)" >&2
            exit 2
            ;;
    esac
fi

if [ "$allow_skip" -eq 1 ]; then
    unset GPU_REQUIRE_CUDA
else
    export GPU_REQUIRE_CUDA=1
fi

# The Vulkan backend's tests run on the NVIDIA Vulkan driver where the machine has one: the
# lent machines keep its ICD file where the loader does not look. The loader itself
# (libvulkan.so.1) may have to be carried (docs/GPU-RUNS.md says how); with it present, an
# unusable Vulkan fails the Vulkan tests (GPU_REQUIRE_VULKAN=1) instead of skipping them.
nvidia_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -z "${VK_ICD_FILENAMES:-}" ] && [ -f "$nvidia_icd" ]; then
    export VK_DRIVER_FILES=$nvidia_icd
fi
if [ "$allow_skip" -eq 0 ] && { ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1'; }; then
    export GPU_REQUIRE_VULKAN=1
else
    unset GPU_REQUIRE_VULKAN
fi

summary_name=$label.summary.txt
archive_name=$label.logs.tar.gz
summary=$logdir/$summary_name
# Files this call wrote into $logdir (relative names): the archive holds exactly these.
written=()
# JSON reports copied to $outdir; with the summary and the archive at most 8 files.
max_out_files=8
out_json=()

# Everything printed from here on also goes to the summary file. tee ignores INT and TERM,
# so that after a signal to the whole process group the summary can still be finished.
exec 3>&1 4>&2
exec > >(
    trap '' INT TERM
    exec tee "$summary"
) 2>&1
tee_pid=$!

# @include budget.sh

# NCCL (the collectives on CUDA devices): cudarc opens `libnccl.so`, but the libnccl2 package
# and pip's nvidia-nccl-cu12 wheel (torch's dependency) ship only `libnccl.so.2`. Where the
# unversioned name is missing and a `libnccl.so.2` is found, a link to it in a folder of this
# call's own goes first on LD_LIBRARY_PATH, for every program run from here on.
nccl_note="libnccl.so loads as it is"
if ! { ldconfig -p 2>/dev/null | grep -q 'libnccl\.so '; }; then
    nccl_lib=$(ldconfig -p 2>/dev/null | sed -n 's/.*libnccl\.so\.2 .*=> //p' | head -n 1)
    if [ -z "$nccl_lib" ]; then
        # pip's wheel (torch's dependency), wherever the interpreter on PATH keeps its
        # packages (a virtual environment's site-packages on the lent machines): Python
        # says where `nvidia.nccl` is.
        for py in python3 python; do
            if ! command -v "$py" >/dev/null 2>&1; then continue; fi
            nccl_dir=$(capped "$(probe_limit 20)" "$py" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' | head -n 1) || nccl_dir=
            if [ -n "$nccl_dir" ] && [ -f "$nccl_dir/lib/libnccl.so.2" ]; then
                nccl_lib=$nccl_dir/lib/libnccl.so.2
                break
            fi
        done
    fi
    if [ -z "$nccl_lib" ]; then
        # Else the usual places of pip's wheel.
        for candidate in "${VIRTUAL_ENV:-/nonexistent}"/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 \
            /usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2 \
            /usr/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2 \
            /usr/local/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 \
            /opt/conda/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 \
            "$HOME"/.local/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2; do
            if [ -f "$candidate" ]; then
                nccl_lib=$candidate
                break
            fi
        done
    fi
    if [ -n "$nccl_lib" ] && [ -f "$nccl_lib" ]; then
        mkdir -p "$logdir/nccl-link" && ln -sf "$nccl_lib" "$logdir/nccl-link/libnccl.so"
        export LD_LIBRARY_PATH=$logdir/nccl-link${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        nccl_note="libnccl.so -> $nccl_lib (a link first on LD_LIBRARY_PATH)"
    else
        nccl_note="no libnccl.so and no libnccl.so.2 found: the tests that need NCCL skip (expected), the collectives run in process"
        # Not this library's fault: the machine has no NCCL.
        expect_skips+=("NCCL unavailable")
    fi
fi

# @include results.sh

# ---- the header

commit=unknown
if [ -f "$bundle/MANIFEST.txt" ]; then
    commit=$(sed -n 's/^commit: //p' "$bundle/MANIFEST.txt")
fi
echo "bundle: $bundle"
echo "commit: $commit"
echo "date:   $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
if command -v nvidia-smi >/dev/null 2>&1; then
    capped "$(probe_limit 10)" nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader |
        sed 's/^/gpu:    /'
else
    echo "gpu:    nvidia-smi not found"
fi
if [ "$allow_skip" -eq 1 ]; then
    echo "mode:   --allow-skip (CUDA tests skip when no GPU is usable)"
else
    echo "mode:   GPU_REQUIRE_CUDA=1 (CUDA tests fail when no GPU is usable)"
fi
echo "vulkan: VK_DRIVER_FILES=${VK_DRIVER_FILES:-(unset)}, GPU_REQUIRE_VULKAN=${GPU_REQUIRE_VULKAN:-(unset: the Vulkan tests skip without a loader)}"
echo "nccl:   $nccl_note"
if [ "$want_bench" -eq 1 ]; then
    echo "steps:  ${steps[*]}, then the torch comparator"
    bench_shape="every benchmark in full"
    if [ "$quick" -eq 1 ]; then
        bench_shape="--quick: cuda_bench and transfer_bench to ${max_mib:-256} MiB, pipeline_bench --quick, graph_bench, kernel_bench --runs 7; the comparator with $torch_compare_needs s left; then startup_bench, and allreduce_bench --quick with two GPUs or more"
    elif [ -n "$max_mib" ]; then
        bench_shape="cuda_bench and transfer_bench to $max_mib MiB"
    fi
    echo "bench:  $bench_shape"
else
    echo "steps:  ${steps[*]}"
fi
if [ "$want_tests" -eq 1 ] || [ "${#sanitize_tools[@]}" -gt 0 ]; then
    if [ "$only_given" -eq 1 ]; then
        order_source="--only"
    elif [ "${#first_names[@]}" -gt 0 ]; then
        order_source="--first, then the default order"
    else
        order_source="the default order"
    fi
    echo "order:  $(for i in ${order[@]+"${order[@]}"}; do printf '%s ' "${unit_names[$i]}"; done)($order_source)"
    for line in ${unit_notes[@]+"${unit_notes[@]}"}; do
        echo "note:   $line"
    done
fi
if [ "$budget" -eq 0 ]; then
    echo "budget: none"
else
    echo "budget: $budget s for this call; $binary_timeout s at most per program (0: no cap)"
fi
if [ "$have_timeout" -eq 0 ]; then
    echo "note:   \`timeout\` is not installed: programs run without a time limit"
fi
echo "logs:   $logdir"
if [ -n "$outdir" ]; then
    echo "out:    $outdir ($summary_name, $archive_name and any benchmark JSON)"
else
    echo "out:    none (no --out and no \$OUT): the logs stay in $logdir"
fi

# Arguments for every test unit. --show-output prints what passing tests printed, so
# their `SKIPPED:` lines reach the log and are counted.
test_args=(--show-output)
if [ "$serial" -eq 1 ]; then
    test_args+=(--test-threads=1)
fi

step_header() {
    echo
    echo "==> $1: expected $(expected_duration "$1") (an estimate); $(budget_left) s left in the budget"
}

# @include steps.sh

on_signal() {
    interrupted=$1
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT

save_outputs
for step in "${steps[@]}"; do
    if [ -n "$interrupted" ]; then
        break
    fi
    case $step in
        doctor) step_doctor ;;
        tests) step_tests ;;
        bench)
            if [ "$quick" -eq 1 ]; then step_bench early; else step_bench all; fi
            ;;
        *) step_sanitize "$step" ;;
    esac
done
if [ "$want_bench" -eq 1 ] && [ -z "$interrupted" ]; then
    step_torch_compare
    # Under --quick the comparator comes before startup_bench and allreduce_bench.
    if [ "$quick" -eq 1 ] && [ -z "$interrupted" ]; then
        step_bench late
    fi
fi

# ---- the summary

if [ -n "$interrupted" ]; then
    reasons+=("interrupted by SIG$interrupted")
fi
if [ "${#timed_out[@]}" -gt 0 ]; then
    echo
    echo "cut short by the time limits (--budget $budget, --binary-timeout $binary_timeout):"
    for line in "${timed_out[@]}"; do
        echo "  $line"
    done
    reasons+=("${#timed_out[@]} programs cut short by the time limits")
fi
if [ "${#not_started[@]}" -gt 0 ]; then
    echo
    echo "not started (${not_started_why:-}):"
    for line in "${not_started[@]}"; do
        echo "  $line"
    done
    reasons+=("${#not_started[@]} programs not started: ${not_started_why:-}")
fi

if [ "${#failed_logs[@]}" -gt 0 ]; then
    echo
    echo "failures (first 20 failed tests of each log; tests running for over 60 s):"
    for log in "${failed_logs[@]}"; do
        echo "  $logdir/$log"
        grep -E '^test .* \.\.\. FAILED$|has been running for over' "$logdir/$log" |
            head -n 20 | sed 's/^/    /'
    done
fi

unexpected=0
if [ "${#skip_lines[@]}" -gt 0 ]; then
    marked=()
    for line in "${skip_lines[@]}"; do
        if skip_expected "$line"; then
            expected_skip_count=$((expected_skip_count + 1))
            marked+=("(expected) $line")
        else
            unexpected=$((unexpected + 1))
            marked+=("$line")
        fi
    done
    echo
    echo "SKIPPED lines (${#skip_lines[@]}; count x binary: test: line, the same line once):"
    printf '%s\n' "${marked[@]}" | awk '
        { if (!($0 in count)) order[n++] = $0; count[$0]++ }
        END { for (i = 0; i < n; i++) printf "  %dx %s\n", count[order[i]], order[i] }
    '
    if [ "$allow_skip" -eq 0 ] && [ "$unexpected" -gt 0 ]; then
        reasons+=("$unexpected SKIPPED: lines although GPU_REQUIRE_CUDA=1 (--expect-skip TEXT accepts a known one; a Vulkan skip needs the carried loader, docs/GPU-RUNS.md)")
    fi
fi

if [ "$total_failed" -gt 0 ]; then
    reasons=("$total_failed failed" ${reasons[@]+"${reasons[@]}"})
fi

echo
echo "${#skip_lines[@]} skipped ($expected_skip_count expected), $total_ignored ignored"
echo "$total_passed passed, $total_failed failed"
if [ "${#reasons[@]}" -eq 0 ]; then
    status=0
    echo "run.sh: PASSED (${steps[*]})"
else
    status=1
    verdict=$(printf '%s; ' "${reasons[@]}")
    echo "run.sh: FAILED: ${verdict%; }"
fi

# Let tee finish the summary, then publish the final outputs.
exec 1>&3 2>&4 3>&- 4>&-
wait "$tee_pid" 2>/dev/null
save_outputs
if [ -n "$outdir" ]; then
    echo "outputs: $(cd -- "$outdir" && ls -- "$summary_name" "$archive_name" ${out_json[@]+"${out_json[@]}"} 2>/dev/null | tr '\n' ' ')(in $outdir)"
fi
exit "$status"
