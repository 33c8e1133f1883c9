#!/usr/bin/env bash
# run.sh: runs the steps of a GPU bundle made by `cargo xtask gpu-bundle`: the doctor, the
# tests, each compute-sanitizer tool, the benchmarks (and the PyTorch comparator after them).
#
# Needs bash 4.4+ and the usual command-line tools (awk, grep, sed, tar, gzip, timeout), not
# Rust. It can be run from any folder; it finds the bundle next to itself. Each call runs the
# steps its options name (the tests when none is named) and:
# - writes every program's full output to a working folder (--logs, else a fresh folder
#   under $TMPDIR or /tmp), and prints one line per program and a summary;
# - puts into the output folder (--out, else $OUT when set) at most 8 files, each named
#   after the call's steps: LABEL.summary.txt (everything printed), LABEL.logs.tar.gz (the
#   logs), and the JSON reports of the benchmarks and the PyTorch comparator. They are
#   refreshed after every program, so a call cut short still leaves what it had;
# - stops starting programs when the time budget (--budget) is spent, and cuts a program
#   that outlives its share (timeout), reporting it as a failure, so that the call ends,
#   with its summary, before a device tool's own limit kills it;
# - exits 0 only when nothing failed and nothing was left unverified: a test step in which
#   nothing passed, a SKIPPED: line, a missing compute-sanitizer or a skipped benchmark fails
#   the call (unless --allow-skip; a test step with no passing test fails regardless).
#
# The template lives in xtask/src/run.sh; `cargo xtask gpu-bundle` copies it into each
# bundle, filling in the list of unfiltered test binaries.

set -u

usage() {
    cat <<'EOF'
usage: run.sh [steps] [options] [-- <test args>]

steps (any combination, run in this order; the tests when none is given):
  --doctor            tools/cuda_doctor: driver, devices, libraries found and chosen,
                      NVRTC's architectures, one module compiled (about 10 s)
  --tests             every test binary, unfiltered (about 2 min)
  --sanitize TOOL     the CUDA tests under compute-sanitizer's TOOL: memcheck, racecheck,
                      synccheck, or all (each its own step; repeatable); an error, or no
                      compute-sanitizer, fails the step
  --bench             every benchmark in bench/ with `--device cuda --json FILE`, then
                      tools/torch_compare.py: the same work through PyTorch, in a table
                      beside cuda_bench's and pipeline_bench's figures (not run, failing
                      nothing, where python3 lacks torch or torch lacks CUDA)
  --all               all of the above (needs about 20 min: raise --budget)

options:
  --allow-skip        do not export GPU_REQUIRE_CUDA=1 (CUDA tests skip without a GPU)
                      and accept SKIPPED: lines, a missing compute-sanitizer and skipped
                      benchmarks; without it each of those fails the run
  --expect-skip TEXT  a SKIPPED: line containing TEXT is expected (one shown to be
                      legitimate on a GPU) and fails nothing; repeatable
  --serial            run the tests of each binary one at a time (--test-threads=1)
  --budget SECONDS    time for the whole call (default 540; 0: no limit): no program
                      starts after it is spent, and a running one is cut when it ends
  --binary-timeout S  the most one program may take (default 240; 0: the budget's rest)
  --logs DIR          the working folder for the logs (default: a fresh one in /tmp)
  --out DIR           where the summary, the log archive and the JSON reports go
                      (default: $OUT if set, else nowhere: the logs stay in --logs)
  -h, --help          this message

Arguments after `--` go to every test binary (e.g. a test filter, or --nocapture).
COMPUTE_SANITIZER may name the compute-sanitizer to use; TORCH_PYTHON the Python that
runs the comparator (default python3).
EOF
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
# them unfiltered (xtask's gpu_test::UNFILTERED_TARGETS, filled in by `cargo xtask
# gpu-bundle`; a name is the bundle's file name under tests/).
unfiltered_targets="@UNFILTERED_TARGETS@"

# Rough expectations for each step, printed when it starts. Nothing has run on a GPU yet:
# replace them with what GPU-RUNS.md records once something has.
expected_duration() {
    case $1 in
        doctor) echo "about 10 s" ;;
        tests) echo "about 2 min" ;;
        memcheck) echo "about 5 min" ;;
        racecheck) echo "about 4 min" ;;
        synccheck) echo "about 3 min" ;;
        bench) echo "about 5 min" ;;
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
pass=()

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
        --sanitize | --expect-skip | --budget | --binary-timeout | --logs | --out)
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

# The steps in the order they run, and the call's label, which names its output files.
steps=()
if [ "$want_doctor" -eq 1 ]; then steps+=(doctor); fi
if [ "$want_tests" -eq 1 ]; then steps+=(tests); fi
steps+=(${sanitize_tools[@]+"${sanitize_tools[@]}"})
if [ "$want_bench" -eq 1 ]; then steps+=(bench); fi
if [ "$want_all" -eq 1 ]; then
    label=all
else
    label=$(IFS=-; echo "${steps[*]}")
fi

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
# (libvulkan.so.1) may have to be carried (GPU-RUNS.md says how); with it present, an
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

# ---- time budget

# A stand-in for "no limit" that still compares as a number.
unlimited=999999
start_seconds=$SECONDS

# Seconds left in the budget (may be negative).
budget_left() {
    if [ "$budget" -eq 0 ]; then
        echo "$unlimited"
    else
        echo $((budget - (SECONDS - start_seconds)))
    fi
}

have_timeout=0
if command -v timeout >/dev/null 2>&1; then
    have_timeout=1
fi

# Runs "$@" with stdin closed and its output in the log $1, for at most the smaller of
# --binary-timeout and the budget's rest. Sets `rc`, `took` (seconds), `limit` and `cut`: 1
# when the limit ended it, 2 when it was not started (the budget was spent, or run.sh was
# interrupted).
run_limited() {
    local log=$1 left began
    shift
    left=$(budget_left)
    limit=$binary_timeout
    if [ "$limit" -eq 0 ] || [ "$left" -lt "$limit" ]; then
        limit=$left
    fi
    cut=0
    rc=125
    took=0
    if [ -n "$interrupted" ]; then
        cut=2
        not_started_why="run.sh was interrupted (SIG$interrupted)"
    elif [ "$limit" -le 0 ]; then
        cut=2
        not_started_why="the time budget (--budget $budget) was spent"
    fi
    if [ "$cut" -eq 2 ]; then
        echo "run.sh: not started: $not_started_why" >"$log"
        return
    fi
    began=$SECONDS
    if [ "$have_timeout" -eq 1 ] && [ "$limit" -lt "$unlimited" ]; then
        # TERM first, KILL 10 s later; without --foreground the whole process group gets
        # it, so a test binary under compute-sanitizer dies with the sanitizer.
        timeout --kill-after=10 "$limit" "$@" </dev/null >"$log" 2>&1
        rc=$?
        if [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ $((SECONDS - began)) -ge "$limit" ]; }; then
            cut=1
        fi
    else
        "$@" </dev/null >"$log" 2>&1
        rc=$?
    fi
    took=$((SECONDS - began))
}

# Describes how a program run by run_limited ended: "exit N", a signal, or the cut.
describe_end() {
    if [ "$cut" -eq 1 ]; then
        echo "timed out after $limit s"
    elif [ "$cut" -eq 2 ]; then
        echo "not started: $not_started_why"
    elif [ "$rc" -gt 128 ]; then
        echo "killed by signal $((rc - 128))"
    else
        echo "exit $rc"
    fi
}

# ---- outputs

archive_note_shown=0
interrupted=
not_started_why=

# Copies $1 into $outdir as $2, atomically (a copy under a temporary name, then a rename).
publish() {
    cp -- "$1" "$outdir/$2.part" && mv -f -- "$outdir/$2.part" "$outdir/$2"
}

# Refreshes the files in $outdir: the summary so far, the archive of the logs written so
# far, the JSON reports. Called after every program, and once more at the end.
save_outputs() {
    if [ -z "$outdir" ]; then
        return 0
    fi
    local tarball=$logdir/.$archive_name size trunc f
    if [ "${#written[@]}" -gt 0 ]; then
        if tar -czf "$tarball" -C "$logdir" -- "${written[@]}" 2>/dev/null; then
            size=$(wc -c <"$tarball")
            # The device tool returns files up to 16 MiB: keep the end of each log instead.
            if [ "$size" -gt $((15 << 20)) ]; then
                trunc=$logdir/.truncated
                rm -rf -- "$trunc"
                mkdir -p -- "$trunc"
                for f in "${written[@]}"; do
                    tail -c $((1 << 20)) -- "$logdir/$f" >"$trunc/$f"
                done
                tar -czf "$tarball" -C "$trunc" -- "${written[@]}" 2>/dev/null
                rm -rf -- "$trunc"
                if [ "$archive_note_shown" -eq 0 ]; then
                    archive_note_shown=1
                    echo "note: the logs come to $((size >> 20)) MiB compressed; $archive_name keeps the last MiB of each (all of them are in $logdir)"
                fi
            fi
            publish "$tarball" "$archive_name"
        fi
    fi
    publish "$summary" "$summary_name"
    for f in ${out_json[@]+"${out_json[@]}"}; do
        publish "$logdir/$f" "$f"
    done
}

# ---- tallies

total_passed=0
total_failed=0
total_ignored=0
total_cuda_passed=0
failed_logs=()
timed_out=()
not_started=()
reasons=()
skip_lines=()
expected_skip_count=0

# Prints "passed failed ignored results cuda_passed" for a log: the sums over libtest's
# `test result: ok. 12 passed; 0 failed; 1 ignored; ...` lines, how many there were, and
# how many tests with `cuda` in their names passed.
tally() {
    awk '
        /^test result: / {
            results++
            for (i = 2; i <= NF; i++) {
                word = $i
                sub(/[;,.]$/, "", word)
                if (word == "passed") passed += $(i - 1)
                else if (word == "failed") failed += $(i - 1)
                else if (word == "ignored") ignored += $(i - 1)
            }
        }
        /^test [^ ]*cuda[^ ]* \.\.\. ok$/ { cuda++ }
        END { printf "%d %d %d %d %d\n", passed, failed, ignored, results, cuda }
    ' "$1"
}

# Prints each `SKIPPED:` line of a log as "<prefix>: <test>: <line>": libtest's
# --show-output prints a passing test's output under `---- <test> stdout ----`.
skips_of() {
    awk -v prefix="$2" '
        /^---- .* stdout ----$/ { test = $2; next }
        /SKIPPED:/ {
            line = $0
            sub(/^[ \t]+/, "", line)
            printf "%s: %s: %s\n", prefix, (test == "" ? "?" : test), line
        }
    ' "$1"
}

# Adds a log's SKIPPED: lines to skip_lines; sets `collected` to how many there were.
collect_skips() {
    local line
    collected=0
    while IFS= read -r line; do
        skip_lines+=("$line")
        collected=$((collected + 1))
    done < <(skips_of "$1" "$2")
}

# Whether a SKIPPED: line was announced with --expect-skip.
skip_expected() {
    local text
    for text in ${expect_skips[@]+"${expect_skips[@]}"}; do
        case $1 in
            *"$text"*) return 0 ;;
        esac
    done
    return 1
}

# Adds a log to the archive's list (a name relative to $logdir, once).
add_written() {
    local f
    for f in ${written[@]+"${written[@]}"}; do
        if [ "$f" = "$1" ]; then return; fi
    done
    written+=("$1")
}

# Adds one program's tallies, prints its line, records its failures. Args: the row's name,
# its column (step), the log's name, the counts, extra status text.
record() {
    local name=$1 column=$2 logname=$3 passed=$4 failed=$5 ignored=$6 skipped=$7 status=$8
    printf '%-32s %-9s %5d passed %5d failed %5d ignored %5d skipped %4d s  %s\n' \
        "$name" "$column" "$passed" "$failed" "$ignored" "$skipped" "$took" "$status"
    total_passed=$((total_passed + passed))
    total_failed=$((total_failed + failed))
    total_ignored=$((total_ignored + ignored))
    if [ "$failed" -ne 0 ]; then
        failed_logs+=("$logname")
    fi
    if [ "$cut" -eq 1 ]; then
        timed_out+=("$name ($column): $(describe_end)")
    fi
}

# Runs one test binary (under a sanitizer tool when $2 is not "tests") and records it.
# Args: binary, column, log name, then the command to run.
run_test_binary() {
    local bin=$1 column=$2 logname=$3 name status passed failed ignored results cuda skipped errors
    shift 3
    name=${bin##*/}
    run_limited "$logdir/$logname" "$@"
    if [ "$cut" -eq 2 ]; then
        printf '%-32s %-9s %s\n' "$name" "$column" "$(describe_end)"
        not_started+=("$name ($column)")
        return
    fi
    add_written "$logname"
    read -r passed failed ignored results cuda < <(tally "$logdir/$logname")
    if [ "$column" = tests ]; then
        collect_skips "$logdir/$logname" "$name"
    else
        collect_skips "$logdir/$logname" "$name ($column)"
    fi
    skipped=$collected
    errors=
    if [ "$column" != tests ]; then
        errors=$(sed -n 's/^========= ERROR SUMMARY: \([0-9][0-9]*\) error.*/\1/p' "$logdir/$logname" | tail -n 1)
    fi
    status=ok
    if [ -n "$errors" ] && [ "$errors" -gt 0 ]; then
        # The sanitizer's exit status (--error-exitcode) says no more than its summary.
        status="FAILED ($errors sanitizer errors)"
        failed=$((failed + 1))
    elif [ "$rc" -ne 0 ]; then
        status="FAILED ($(describe_end))"
        if [ "$results" -eq 0 ] && [ "$cut" -eq 0 ]; then
            status="FAILED ($(describe_end), no test result line)"
        fi
        # A crash, a cut, or a failure outside any test still fails the binary.
        if [ "$failed" -eq 0 ]; then
            failed=1
        fi
    fi
    if [ "$column" != tests ] && [ -z "$errors" ] && [ "$cut" -eq 0 ]; then
        status="$status (no ERROR SUMMARY line)"
    fi
    total_cuda_passed=$((total_cuda_passed + cuda))
    record "$name" "$column" "$logname" "$passed" "$failed" "$ignored" "$skipped" "$status"
    save_outputs
}

# ---- the header

commit=unknown
if [ -f "$bundle/MANIFEST.txt" ]; then
    commit=$(sed -n 's/^commit: //p' "$bundle/MANIFEST.txt")
fi
echo "bundle: $bundle"
echo "commit: $commit"
echo "date:   $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1 |
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
echo "steps:  ${steps[*]}"
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

bins=()
for f in "$bundle"/tests/*; do
    if [ -f "$f" ] && [ -x "$f" ]; then
        bins+=("$f")
    fi
done

# Arguments for every test binary. --show-output prints what passing tests printed, so
# their `SKIPPED:` lines reach the log and are counted.
test_args=(--show-output)
if [ "$serial" -eq 1 ]; then
    test_args+=(--test-threads=1)
fi

step_header() {
    echo
    echo "==> $1: expected $(expected_duration "$1") (an estimate); $(budget_left) s left in the budget"
}

# ---- the steps

step_doctor() {
    local doctor=$bundle/tools/cuda_doctor
    step_header doctor
    if [ ! -x "$doctor" ]; then
        echo "doctor: FAILED (tools/cuda_doctor is not in the bundle)"
        reasons+=("the doctor is not in the bundle")
        total_failed=$((total_failed + 1))
        return
    fi
    run_limited "$logdir/doctor.log" "$doctor"
    if [ "$cut" -eq 2 ]; then
        echo "doctor: $(describe_end)"
        not_started+=(doctor)
        return
    fi
    add_written doctor.log
    sed 's/^./  &/' "$logdir/doctor.log"
    if [ "$rc" -eq 0 ]; then
        echo "doctor: ok ($took s)"
    else
        echo "doctor: FAILED ($(describe_end), after $took s)"
        reasons+=("the doctor found a problem")
        total_failed=$((total_failed + 1))
        if [ "$cut" -ne 0 ]; then timed_out+=("doctor: $(describe_end)"); fi
    fi
    save_outputs
}

step_tests() {
    local bin passed_before=$total_passed cuda_before=$total_cuda_passed
    step_header tests
    if [ "${#bins[@]}" -eq 0 ]; then
        echo "tests: no test binaries in $bundle/tests"
        reasons+=("no test binaries")
        total_failed=$((total_failed + 1))
        return
    fi
    for bin in "${bins[@]}"; do
        run_test_binary "$bin" tests "${bin##*/}.log" \
            "$bin" "${test_args[@]}" ${pass[@]+"${pass[@]}"}
    done
    if [ "$total_passed" -eq "$passed_before" ]; then
        reasons+=("tests: no test passed, so nothing was verified")
    elif [ "$allow_skip" -eq 0 ] && [ "$total_cuda_passed" -eq "$cuda_before" ]; then
        reasons+=("tests: no test with \`cuda\` in its name passed, so nothing was verified on a GPU")
    fi
}

# Finds compute-sanitizer: $COMPUTE_SANITIZER, PATH, $CUDA_HOME/bin, $CUDA_PATH/bin,
# /usr/local/cuda/bin, /usr/local/cuda-*/bin (newest-looking first), /opt/nvidia/*/bin.
# Sets `sanitizer` (empty if none) and `searched`.
find_sanitizer() {
    sanitizer=
    searched="\$COMPUTE_SANITIZER, PATH"
    if [ -n "${COMPUTE_SANITIZER:-}" ] && [ -x "$COMPUTE_SANITIZER" ]; then
        sanitizer=$COMPUTE_SANITIZER
        return
    fi
    if sanitizer=$(command -v compute-sanitizer 2>/dev/null) && [ -n "$sanitizer" ]; then
        return
    fi
    sanitizer=
    local dirs=() d i versioned=()
    if [ -n "${CUDA_HOME:-}" ]; then dirs+=("$CUDA_HOME/bin"); fi
    if [ -n "${CUDA_PATH:-}" ]; then dirs+=("$CUDA_PATH/bin"); fi
    dirs+=(/usr/local/cuda/bin)
    for d in /usr/local/cuda-*/bin; do
        if [ -d "$d" ]; then versioned+=("$d"); fi
    done
    for ((i = ${#versioned[@]} - 1; i >= 0; i--)); do
        dirs+=("${versioned[$i]}")
    done
    for d in /opt/nvidia/*/bin; do
        if [ -d "$d" ]; then dirs+=("$d"); fi
    done
    searched="$searched, \$CUDA_HOME/bin, \$CUDA_PATH/bin, /usr/local/cuda/bin, /usr/local/cuda-*/bin, /opt/nvidia/*/bin"
    for d in "${dirs[@]}"; do
        if [ -x "$d/compute-sanitizer" ]; then
            sanitizer=$d/compute-sanitizer
            return
        fi
    done
}

# Whether the bundle's binary named $1 runs unfiltered under the sanitizer.
is_unfiltered() {
    local target
    for target in $unfiltered_targets; do
        if [ "$target" = "$1" ]; then return 0; fi
    done
    return 1
}

step_sanitize() {
    local tool=$1 bin name listed passed_before=$total_passed filter
    step_header "$tool"
    find_sanitizer
    if [ -z "$sanitizer" ]; then
        echo "SKIPPED: compute-sanitizer not found (searched $searched)"
        if [ "$allow_skip" -eq 0 ]; then
            reasons+=("$tool: compute-sanitizer not found, so nothing was checked")
            total_failed=$((total_failed + 1))
        fi
        return
    fi
    echo "compute-sanitizer: $sanitizer"
    for bin in ${bins[@]+"${bins[@]}"}; do
        name=${bin##*/}
        filter=(cuda)
        if is_unfiltered "$name"; then
            filter=()
        else
            # Only binaries with CUDA tests are worth the sanitizer's start-up time.
            listed=$("$bin" --list cuda </dev/null 2>/dev/null | grep -c ': test$')
            if [ "${listed:-0}" -eq 0 ]; then
                printf '%-32s %-9s no CUDA tests\n' "$name" "$tool"
                continue
            fi
        fi
        # --report-api-errors no: tests that provoke driver errors on purpose (out of
        # memory, bad PTX, a missing entry point) are not sanitizer errors.
        run_test_binary "$bin" "$tool" "$name.$tool.log" \
            "$sanitizer" --tool "$tool" --error-exitcode 1 --report-api-errors no \
            --print-limit 50 "$bin" ${filter[@]+"${filter[@]}"} "${test_args[@]}" \
            ${pass[@]+"${pass[@]}"}
    done
    if [ "$total_passed" -eq "$passed_before" ]; then
        reasons+=("$tool: no test passed under compute-sanitizer, so nothing was checked")
    fi
}

# A JSON report written into $logdir (arg: its name): into the archive, and into the output
# folder while it has room beside the summary and the archive.
keep_report() {
    add_written "$1"
    if [ $((2 + ${#out_json[@]})) -lt "$max_out_files" ]; then
        out_json+=("$1")
    else
        echo "note: $1 is only in the archive ($max_out_files files at most go to the output folder)"
    fi
}

step_bench() {
    local prog name log skips ran=0 reports=()
    step_header bench
    for prog in "$bundle"/bench/*; do
        if [ ! -f "$prog" ] || [ ! -x "$prog" ]; then
            continue
        fi
        name=${prog##*/}
        log=bench-$name.log
        ran=$((ran + 1))
        echo "--- $name --device cuda --json $logdir/$name.json"
        run_limited "$logdir/$log" "$prog" --device cuda --json "$logdir/$name.json"
        if [ "$cut" -eq 2 ]; then
            echo "bench $name: $(describe_end)"
            not_started+=("bench $name")
            continue
        fi
        add_written "$log"
        cat "$logdir/$log"
        # Printed above; a skipped benchmark is its own failure, not one of skip_lines.
        skips=$(grep -c 'SKIPPED:' "$logdir/$log")
        if [ -f "$logdir/$name.json" ]; then
            reports+=("$name")
            keep_report "$name.json"
        fi
        if [ "$rc" -ne 0 ]; then
            echo "bench $name: FAILED ($(describe_end), after $took s)"
            total_failed=$((total_failed + 1))
            failed_logs+=("$log")
            if [ "$cut" -ne 0 ]; then timed_out+=("bench $name: $(describe_end)"); fi
        elif [ "${skips:-0}" -gt 0 ] && [ "$allow_skip" -eq 0 ]; then
            # A benchmark that skipped measured nothing on the GPU.
            echo "bench $name: FAILED (it printed SKIPPED:; use --allow-skip to accept that)"
            total_failed=$((total_failed + 1))
            reasons+=("bench $name printed SKIPPED:")
        else
            echo "bench $name: ok ($took s)"
        fi
        save_outputs
    done
    if [ "$ran" -eq 0 ]; then
        echo "bench: no benchmarks in $bundle/bench"
        reasons+=("no benchmarks in the bundle")
        total_failed=$((total_failed + 1))
    fi
    torch_compare ${reports[@]+"${reports[@]}"}
}

# The PyTorch comparator (tools/torch_compare.py, from bench/ of the repository): the work
# of cuda_bench and pipeline_bench through PyTorch on the same GPU, and a table of our
# figures, PyTorch's and their ratios against the targets. Args: the benchmarks that wrote
# a JSON report in this step (cuda_bench's and pipeline_bench's are passed to it). Where
# there is no Python, no torch, or a torch without CUDA, it is not run and fails nothing
# (there is nothing to compare there); once torch runs on CUDA, its failure fails the step.
# A missed target is in its table, not a failure.
torch_compare() {
    local script=$bundle/tools/torch_compare.py python=${TORCH_PYTHON:-python3}
    local log=bench-torch_compare.log json=torch_compare.json name args=()
    if [ ! -f "$script" ]; then
        echo "torch comparator: not run (tools/torch_compare.py is not in the bundle)"
        return
    fi
    if ! command -v "$python" >/dev/null 2>&1; then
        echo "torch comparator: not run ($python not found)"
        return
    fi
    for name in "$@"; do
        case $name in
            cuda_bench) args+=(--ours-cuda-bench "$logdir/$name.json") ;;
            pipeline_bench) args+=(--ours-pipeline-bench "$logdir/$name.json") ;;
        esac
    done
    args+=(--json "$logdir/$json")
    rm -f -- "$logdir/$json"
    echo "--- torch_compare.py ${args[*]}"
    run_limited "$logdir/$log" "$python" "$script" "${args[@]}"
    if [ "$cut" -eq 2 ]; then
        echo "torch comparator: $(describe_end)"
        not_started+=("torch comparator")
        return
    fi
    add_written "$log"
    cat "$logdir/$log"
    if [ -f "$logdir/$json" ]; then
        keep_report "$json"
    fi
    if [ "$rc" -ne 0 ]; then
        echo "torch comparator: FAILED ($(describe_end), after $took s)"
        total_failed=$((total_failed + 1))
        failed_logs+=("$log")
        if [ "$cut" -ne 0 ]; then timed_out+=("torch comparator: $(describe_end)"); fi
    elif ! grep -q '^torch comparator: not run' "$logdir/$log"; then
        echo "torch comparator: ok ($took s)"
    fi
    save_outputs
}

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
        bench) step_bench ;;
        *) step_sanitize "$step" ;;
    esac
done

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
        reasons+=("$unexpected SKIPPED: lines although GPU_REQUIRE_CUDA=1 (--expect-skip TEXT accepts a known one; a Vulkan skip needs the carried loader, GPU-RUNS.md)")
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
