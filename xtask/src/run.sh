#!/usr/bin/env bash
# run.sh: runs the test (and benchmark) binaries of a bundle made by `cargo xtask gpu-bundle`.
#
# Needs bash and the usual command-line tools (awk, grep, sed, tee), not Rust. It can be run
# from any folder; it finds the bundle next to itself. Every test binary's full output goes
# to LOGDIR/<name>.log and one summary line per binary is printed; the last line is
# `N passed, N failed`, and the exit status is 0 only when nothing failed.
#
# The template lives in xtask/src/run.sh and is copied into each bundle.

set -u

usage() {
    cat <<'EOF'
usage: run.sh [options] [-- <test args>]

  --allow-skip      do not export GPU_REQUIRE_CUDA=1: a CUDA test on a machine without a
                    usable GPU prints "SKIPPED: <reason>" and passes (without this option
                    it fails, so a run never counts a GPU test as passed without a GPU)
  --serial          run the tests of each binary one at a time (--test-threads=1)
  --logs DIR        where the logs go (default: $OUT if set, else ./bundle-logs)
  --sanitize        also run the CUDA tests under compute-sanitizer (memcheck, racecheck,
                    synccheck); errors count as failures
  --sanitize-only   only the compute-sanitizer runs
  --bench           also run every benchmark in bench/ with `--device cuda --json
                    LOGDIR/<name>.json`; a failing benchmark counts as a failure, and so
                    does one that prints "SKIPPED:" (unless --allow-skip)
  -h, --help        this message

Arguments after `--` go to every test binary (e.g. a test filter, or --nocapture).
The environment variable COMPUTE_SANITIZER may name the compute-sanitizer to use.
EOF
}

bundle=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P) || {
    echo "run.sh: cannot find the folder this script is in" >&2
    exit 2
}

allow_skip=0
serial=0
run_tests=1
sanitize=0
bench=0
logdir=${OUT:-./bundle-logs}
pass=()
while [ $# -gt 0 ]; do
    case $1 in
        --allow-skip) allow_skip=1 ;;
        --serial) serial=1 ;;
        --logs)
            if [ $# -lt 2 ]; then
                echo "run.sh: --logs needs a folder" >&2
                exit 2
            fi
            logdir=$2
            shift
            ;;
        --logs=*) logdir=${1#--logs=} ;;
        --sanitize) sanitize=1 ;;
        --sanitize-only)
            sanitize=1
            run_tests=0
            ;;
        --bench) bench=1 ;;
        -h | --help)
            usage
            exit 0
            ;;
        --)
            shift
            pass=("$@")
            break
            ;;
        *)
            echo "run.sh: unknown argument '$1'" >&2
            usage >&2
            exit 2
            ;;
    esac
    shift
done

if ! mkdir -p -- "$logdir" || ! logdir=$(cd -- "$logdir" && pwd -P); then
    echo "run.sh: cannot create the log folder '$logdir'" >&2
    exit 2
fi

if [ "$allow_skip" -eq 1 ]; then
    unset GPU_REQUIRE_CUDA
else
    export GPU_REQUIRE_CUDA=1
fi

# Arguments for every test binary. --show-output prints what passing tests printed, so
# their `SKIPPED:` lines reach the log and are counted.
test_args=(--show-output)
if [ "$serial" -eq 1 ]; then
    test_args+=(--test-threads=1)
fi
# `${a[@]+"${a[@]}"}` expands an empty array to nothing, also under `set -u` in bash < 4.4.
test_args+=(${pass[@]+"${pass[@]}"})

bins=()
for f in "$bundle"/tests/*; do
    if [ -f "$f" ] && [ -x "$f" ]; then
        bins+=("$f")
    fi
done

total_passed=0
total_failed=0
total_ignored=0
total_skipped=0
failed_logs=()

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
echo "logs:   $logdir"
echo

if [ "${#bins[@]}" -eq 0 ]; then
    echo "run.sh: no test binaries in $bundle/tests"
    total_failed=$((total_failed + 1))
fi

# Prints "passed failed ignored skipped results" for a log: the sums over libtest's
# `test result: ok. 12 passed; 0 failed; 1 ignored; ...` lines, the count of lines
# containing `SKIPPED:`, and how many result lines there were.
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
        /SKIPPED:/ { skipped++ }
        END { printf "%d %d %d %d %d\n", passed, failed, ignored, skipped, results }
    ' "$1"
}

# Describes an exit status: "exit N", or the signal that killed the process.
describe_exit() {
    if [ "$1" -gt 128 ]; then
        echo "killed by signal $(($1 - 128))"
    else
        echo "exit $1"
    fi
}

if [ "$run_tests" -eq 1 ]; then
    for bin in ${bins[@]+"${bins[@]}"}; do
        name=${bin##*/}
        log=$logdir/$name.log
        "$bin" "${test_args[@]}" </dev/null >"$log" 2>&1
        rc=$?
        read -r passed failed ignored skipped results < <(tally "$log")
        status=ok
        if [ "$rc" -ne 0 ]; then
            status="FAILED ($(describe_exit "$rc"))"
            if [ "$results" -eq 0 ]; then
                status="FAILED ($(describe_exit "$rc"), no test result line)"
            fi
            # A crash, or a failure outside any test, still fails the binary.
            if [ "$failed" -eq 0 ]; then
                failed=1
            fi
        fi
        if [ "$failed" -ne 0 ]; then
            failed_logs+=("$log")
        fi
        printf '%-32s %5d passed %5d failed %5d ignored %5d skipped  %s\n' \
            "$name" "$passed" "$failed" "$ignored" "$skipped" "$status"
        total_passed=$((total_passed + passed))
        total_failed=$((total_failed + failed))
        total_ignored=$((total_ignored + ignored))
        total_skipped=$((total_skipped + skipped))
    done
fi

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

if [ "$sanitize" -eq 1 ]; then
    find_sanitizer
    if [ -z "$sanitizer" ]; then
        echo "SKIPPED: compute-sanitizer not found (searched $searched)"
        total_skipped=$((total_skipped + 1))
        if [ "$run_tests" -eq 0 ]; then
            total_failed=$((total_failed + 1))
        fi
    else
        echo
        echo "compute-sanitizer: $sanitizer"
        san_args=(cuda)
        if [ "$serial" -eq 1 ]; then
            san_args+=(--test-threads=1)
        fi
        san_args+=(${pass[@]+"${pass[@]}"})
        for bin in ${bins[@]+"${bins[@]}"}; do
            name=${bin##*/}
            # Only binaries with CUDA tests are worth the sanitizer's start-up time.
            listed=$("$bin" --list cuda </dev/null 2>/dev/null | grep -c ': test$')
            if [ "${listed:-0}" -eq 0 ]; then
                printf '%-32s %-10s no CUDA tests\n' "$name" "sanitizer"
                continue
            fi
            for tool in memcheck racecheck synccheck; do
                log=$logdir/$name.$tool.log
                "$sanitizer" --tool "$tool" --error-exitcode 1 --print-limit 50 \
                    "$bin" "${san_args[@]}" </dev/null >"$log" 2>&1
                rc=$?
                errors=$(sed -n 's/^========= ERROR SUMMARY: \([0-9][0-9]*\) error.*/\1/p' "$log" | tail -n 1)
                if [ "$rc" -eq 0 ] && [ "${errors:-0}" -eq 0 ]; then
                    result=clean
                else
                    if [ -n "$errors" ] && [ "$errors" -gt 0 ]; then
                        result="$errors errors"
                    else
                        result="failed ($(describe_exit "$rc"))"
                    fi
                    total_failed=$((total_failed + 1))
                    failed_logs+=("$log")
                fi
                printf '%-32s %-10s %s\n' "$name" "$tool" "$result"
            done
        done
    fi
fi

if [ "$bench" -eq 1 ]; then
    for prog in "$bundle"/bench/*; do
        if [ ! -f "$prog" ] || [ ! -x "$prog" ]; then
            continue
        fi
        name=${prog##*/}
        echo
        echo "==> bench: $name --device cuda --json $logdir/$name.json"
        "$prog" --device cuda --json "$logdir/$name.json" </dev/null 2>&1 |
            tee "$logdir/bench-$name.log"
        rc=${PIPESTATUS[0]}
        skips=$(grep -c 'SKIPPED:' "$logdir/bench-$name.log")
        total_skipped=$((total_skipped + ${skips:-0}))
        if [ "$rc" -ne 0 ]; then
            echo "bench $name: FAILED ($(describe_exit "$rc"))"
            total_failed=$((total_failed + 1))
            failed_logs+=("$logdir/bench-$name.log")
        elif [ "${skips:-0}" -gt 0 ] && [ "$allow_skip" -eq 0 ]; then
            # A benchmark that skipped measured nothing on the GPU.
            echo "bench $name: FAILED (it printed SKIPPED:; use --allow-skip to accept that)"
            total_failed=$((total_failed + 1))
        else
            echo "bench $name: ok"
        fi
    done
fi

if [ "${#failed_logs[@]}" -gt 0 ]; then
    echo
    echo "failures (first 20 failed tests of each log):"
    for log in "${failed_logs[@]}"; do
        echo "  $log"
        grep -E '^test .* \.\.\. FAILED$' "$log" | head -n 20 | sed 's/^/    /'
    done
fi

echo
if [ "$allow_skip" -eq 0 ] && [ "$total_skipped" -gt 0 ]; then
    echo "note: $total_skipped lines say SKIPPED: although GPU_REQUIRE_CUDA=1; check in the logs"
    echo "      (grep -n SKIPPED: $logdir/*.log) that none is a GPU behaviour left unverified"
fi
echo "$total_skipped skipped, $total_ignored ignored"
echo "$total_passed passed, $total_failed failed"
if [ "$total_failed" -eq 0 ]; then
    exit 0
fi
exit 1
