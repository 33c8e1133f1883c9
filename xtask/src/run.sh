#!/usr/bin/env bash
# run.sh: runs the steps of a GPU bundle made by `cargo xtask gpu-bundle`: the doctor (a
# preflight of the machine, then tools/cuda_doctor), the tests, the benchmarks, each
# compute-sanitizer tool, and last the PyTorch comparator (with the benchmarks).
#
# Needs bash 4.4+ and the usual command-line tools (awk, grep, sed, tar, gzip, timeout), not
# Rust. It can be run from any folder; it finds the bundle next to itself. Each call runs the
# steps its options name (the tests when none is named), in the order above, and:
# - runs the test binaries, in the test and sanitizer steps, in an order that puts the most
#   telling first (the CUDA-vs-CPU properties and the behaviours) and the slowest last, so
#   that a call cut short has still run those (--first and --only change it);
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
# The template lives in xtask/src/run.sh; `cargo xtask gpu-bundle` copies it into each
# bundle, filling in the test binaries its sanitizer steps run unfiltered and those they
# leave out.

set -u

usage() {
    sed "s/@TORCH_COMPARE_NEEDS@/$torch_compare_needs/" <<'EOF'
usage: run.sh [steps] [options] [-- <test args>]

steps (any combination, run in this order; the tests when none is given):
  --doctor            a preflight (kernel and gVisor, GPU and driver, compute-sanitizer,
                      CUDA variables, python3's torch: information, failing nothing), then
                      tools/cuda_doctor: the libraries found and chosen, every built-in
                      module compiled, a smoke test (about 30 s, NVRTC cold)
  --tests             every test binary, unfiltered (about 2.5 min)
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
                      256 MiB, pipeline_bench --quick, graph_bench as it is; then the
                      comparator only with @TORCH_COMPARE_NEEDS@ s of the budget left (else
                      `not run`, failing nothing). Needs --bench
  --max-mib N         the largest transfer of cuda_bench and transfer_bench, 1 to 65536
                      (over --quick's 256). Needs --bench
  --first A,B,...     run these test binaries first, in this order, and the rest after in
                      the default order (below); repeatable
  --only A,B,...      run only these test binaries in the test and sanitizer steps, in
                      this order unless --first gives one; repeatable
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

A test binary's NAME is its target's name: it matches the bundle's tests/NAME, and
tests/NAME-HASH where two targets share a name (both `faults`); a NAME that matches none
is an error.

Arguments after `--` go to every test binary (e.g. a test filter, or --nocapture).
COMPUTE_SANITIZER may name the compute-sanitizer to use; TORCH_PYTHON the Python that
runs the comparator and the preflight's torch check (default python3).
EOF
    echo
    echo "The default order of the test binaries: first $default_first; then the others by name; last $default_last." |
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

# The default order of the test binaries (target names, as --first takes them): these
# first, the rest by name, then the last ones. First the CUDA-vs-CPU properties and the
# behaviours, the most a cut-off run can report; then the other binaries with CUDA variants,
# the unfiltered CUDA targets, the probe and device selection on a real driver, and the
# Vulkan backend's own. Last the slowest: pipeline_props (a fresh context per random case)
# and the CPU-only fault-injection and training tests. A name not in the bundle is passed
# over (xtask's tests check that each names a test target of the workspace).
default_first="props behaviour memory bad_input interop alloc_free half debug bad_input_pipeline gpukit_cuda nvrtc gpukit_cuda_sys cuda_poison probe selection gpukit_wgpu kernels windows"
default_last="pipeline_props faults digits"

# Rough expectations for each step, printed when it starts. Nothing has run on a GPU yet:
# replace them with what docs/GPU-RUNS.md records once something has.
expected_duration() {
    local n=${#bins[@]}
    case $1 in
        doctor) echo "about 30 s (the preflight, then cuda_doctor compiling every built-in module, cold, and its smoke test)" ;;
        tests) if [ "$only_given" -eq 1 ]; then echo "about 30 s a binary (--only: $n)"; else echo "about 2.5 min"; fi ;;
        memcheck) if [ "$only_given" -eq 1 ]; then echo "about 1 min a binary (--only: $n)"; else echo "about 5 min"; fi ;;
        racecheck) if [ "$only_given" -eq 1 ]; then echo "about 45 s a binary (--only: $n)"; else echo "about 4 min"; fi ;;
        synccheck) if [ "$only_given" -eq 1 ]; then echo "about 30 s a binary (--only: $n)"; else echo "about 3 min"; fi ;;
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
    die_usage "--only needs at least one test binary's name"
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

# ---- the test binaries and their order

# Whether the bundle's binary $2 (a path) is the test target named $1: its file name is the
# name, or cargo's `name-hash` where two targets share a name (or xtask's `name-2`).
is_target() {
    case ${2##*/} in
        "$1" | "$1"-[0-9a-f]*) return 0 ;;
    esac
    return 1
}

# The names among "$@" that match no binary in the bundle, space-separated.
unknown_names() {
    local name f unknown=()
    for name in "$@"; do
        for f in ${found_bins[@]+"${found_bins[@]}"}; do
            if is_target "$name" "$f"; then continue 2; fi
        done
        unknown+=("'$name'")
    done
    echo "${unknown[*]:-}"
}

found_bins=()
for f in "$bundle"/tests/*; do
    if [ -f "$f" ] && [ -x "$f" ]; then
        found_bins+=("$f")
    fi
done
for option in --first --only; do
    if [ "$option" = --first ]; then
        unknown=$(unknown_names ${first_names[@]+"${first_names[@]}"})
    else
        unknown=$(unknown_names ${only_names[@]+"${only_names[@]}"})
    fi
    if [ -n "$unknown" ]; then
        known=$(for f in ${found_bins[@]+"${found_bins[@]}"}; do echo "${f##*/}"; done | tr '\n' ' ')
        known=${known:-none}
        die_usage "$option: no test binary named $unknown in $bundle/tests (there: ${known% })"
    fi
done

# The binaries in the order the test and sanitizer steps run them: --first's names (else
# --only's), the default first names, the rest by name except the default last names, then
# those; with --only, only the binaries it names.
declare -A placed=()
bins=()
place() {
    local name f
    for name in "$@"; do
        for f in ${found_bins[@]+"${found_bins[@]}"}; do
            if [ -z "${placed[$f]:-}" ] && is_target "$name" "$f"; then
                placed[$f]=1
                bins+=("$f")
            fi
        done
    done
}
if [ "${#first_names[@]}" -gt 0 ]; then
    place "${first_names[@]}"
elif [ "$only_given" -eq 1 ]; then
    place "${only_names[@]}"
fi
place $default_first
for f in ${found_bins[@]+"${found_bins[@]}"}; do
    for name in $default_last; do
        if is_target "$name" "$f"; then continue 2; fi
    done
    place "${f##*/}"
done
place $default_last
if [ "$only_given" -eq 1 ]; then
    ordered=(${bins[@]+"${bins[@]}"})
    bins=()
    for f in ${ordered[@]+"${ordered[@]}"}; do
        for name in "${only_names[@]}"; do
            if is_target "$name" "$f"; then
                bins+=("$f")
                break
            fi
        done
    done
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

# The time limit of a probe that informs (the preflight, the header's GPU line): $1 seconds,
# or the budget's rest if less, 1 s at least. Such a probe must never hang the call.
probe_limit() {
    local left
    left=$(budget_left)
    if [ "$left" -lt "$1" ]; then
        echo $((left < 1 ? 1 : left))
    else
        echo "$1"
    fi
}

# Runs "$@" (a probe) with stdin closed and stderr into stdout, for at most $1 seconds
# (without `timeout`, unlimited). Its status is the command's, 124 or 137 when cut.
capped() {
    local secs=$1
    shift
    if [ "$have_timeout" -eq 1 ]; then
        timeout --kill-after=2 "$secs" "$@" </dev/null 2>&1
    else
        "$@" </dev/null 2>&1
    fi
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
    if [ "$column" != tests ] && grep -q 'Device not supported' "$logdir/$logname"; then
        # compute-sanitizer refused the device (as under gVisor): nothing was checked, and
        # the test results under it say nothing about the code.
        printf '%-32s %-9s %s\n' "$name" "$column" "not run: compute-sanitizer refused the device (after $took s)"
        sanitizer_refused=1
        save_outputs
        return
    fi
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
if [ "$want_bench" -eq 1 ]; then
    echo "steps:  ${steps[*]}, then the torch comparator"
    bench_shape="every benchmark in full"
    if [ "$quick" -eq 1 ]; then
        bench_shape="--quick: cuda_bench and transfer_bench to ${max_mib:-256} MiB, pipeline_bench --quick, graph_bench; the comparator with $torch_compare_needs s left"
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
    echo "order:  $(for f in ${bins[@]+"${bins[@]}"}; do printf '%s ' "${f##*/}"; done)($order_source)"
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

# The kernel's release: gVisor reports 4.4(.0). RUN_SH_KERNEL_RELEASE stands in for it in
# run.sh's own tests.
kernel_release=${RUN_SH_KERNEL_RELEASE:-$(uname -r 2>/dev/null || echo unknown)}

# Whether this machine runs under gVisor, where compute-sanitizer cannot attach to the GPU
# (it answers "Device not supported", then fails every allocation).
is_gvisor() {
    case $kernel_release in
        4.4 | 4.4.*) return 0 ;;
    esac
    return 1
}

# One labelled line of the preflight.
preflight_line() {
    printf '  %-22s %s\n' "$1:" "$2"
}

# What about this machine explains the doctor's and the tests' results, before the doctor
# runs: the kernel (and gVisor), the GPU and driver, compute-sanitizer, the variables that
# change what CUDA loads or computes, and python3's torch. Information only: it fails
# nothing, and each probe is time-limited. (Which libcuda, libnvrtc, libnvrtc-builtins and
# libcublas the probe picks, cuda_doctor prints.)
preflight() {
    local out rc limit line var version python=${TORCH_PYTHON:-python3} gvisor=no
    echo "preflight (information; it fails nothing):"
    if is_gvisor; then
        gvisor="yes: compute-sanitizer cannot attach to the GPU here, the sanitizer steps are not run"
    fi
    preflight_line kernel "$kernel_release $(uname -m 2>/dev/null) (gVisor: $gvisor)"
    if command -v nvidia-smi >/dev/null 2>&1; then
        limit=$(probe_limit 10)
        out=$(capped "$limit" nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv,noheader)
        rc=$?
        if [ "$rc" -eq 0 ]; then
            while IFS= read -r line; do
                preflight_line gpu "$line (index, name, driver, memory, compute capability)"
            done <<<"$out"
            limit=$(probe_limit 10)
            version=$(capped "$limit" nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9][0-9.]*\).*/\1/p' | head -n 1)
            preflight_line "CUDA (nvidia-smi)" "${version:-not reported}"
        elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            preflight_line gpu "nvidia-smi gave no answer within $limit s"
        else
            preflight_line gpu "nvidia-smi failed (exit $rc): $(tail -n 1 <<<"$out")"
        fi
    else
        preflight_line gpu "nvidia-smi not found"
    fi
    find_sanitizer
    if [ -n "$sanitizer" ]; then
        limit=$(probe_limit 10)
        out=$(capped "$limit" "$sanitizer" --version)
        version=$(grep -m 1 -i 'version' <<<"$out" || head -n 1 <<<"$out")
        preflight_line compute-sanitizer "$sanitizer (${version:-no --version output})"
    else
        preflight_line compute-sanitizer "not found (searched $searched)"
    fi
    for var in NVIDIA_TF32_OVERRIDE CUDA_VISIBLE_DEVICES LD_LIBRARY_PATH; do
        if [ -n "${!var+set}" ]; then
            preflight_line "$var" "'${!var}'"
        else
            preflight_line "$var" "(unset)"
        fi
    done
    if command -v "$python" >/dev/null 2>&1; then
        limit=$(probe_limit 20)
        out=$(capped "$limit" "$python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)')
        rc=$?
        if [ "$rc" -eq 0 ]; then
            preflight_line "torch ($python)" "$(tail -n 1 <<<"$out")"
        elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            preflight_line "torch ($python)" "not available (no answer within $limit s)"
        else
            preflight_line "torch ($python)" "not available ($(tail -n 1 <<<"$out"))"
        fi
    else
        preflight_line "torch ($python)" "not available ($python not found)"
    fi
}

step_doctor() {
    local doctor=$bundle/tools/cuda_doctor
    step_header doctor
    preflight
    save_outputs
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
    echo "tools/cuda_doctor:"
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

# Whether the bundle's binary $2 (a path) is one of the targets named in the list $1.
in_targets() {
    local target
    for target in $1; do
        if is_target "$target" "$2"; then return 0; fi
    done
    return 1
}

# Set by run_test_binary when compute-sanitizer refused the device: the step stops there.
sanitizer_refused=0

step_sanitize() {
    local tool=$1 bin name listed passed_before=$total_passed filter
    step_header "$tool"
    if is_gvisor; then
        echo "$tool: not run: gVisor (kernel $kernel_release): compute-sanitizer cannot attach to the GPU there"
        return
    fi
    find_sanitizer
    if [ -z "$sanitizer" ]; then
        echo "$tool: not run: compute-sanitizer not found (searched $searched)"
        if [ "$allow_skip" -eq 0 ]; then
            reasons+=("$tool: compute-sanitizer not found, so nothing was checked")
            total_failed=$((total_failed + 1))
        fi
        return
    fi
    echo "compute-sanitizer: $sanitizer"
    sanitizer_refused=0
    for bin in ${bins[@]+"${bins[@]}"}; do
        name=${bin##*/}
        if in_targets "$not_sanitized_targets" "$bin"; then
            printf '%-32s %-9s %s\n' "$name" "$tool" \
                "not run: it faults on purpose, which $tool reports by design (xtask's gpu_test::UNFILTERED_TARGETS)"
            continue
        fi
        filter=(cuda)
        if in_targets "$unfiltered_targets" "$bin"; then
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
        if [ "$sanitizer_refused" -eq 1 ]; then
            echo "$tool: stopped: compute-sanitizer refused the device (\`Device not supported\` in $logdir/$name.$tool.log); it fails nothing"
            return
        fi
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

# The benchmarks that wrote a JSON report in the bench step, for the comparator.
bench_reports=()

step_bench() {
    local prog name log skips ran=0 args
    step_header bench
    for prog in "$bundle"/bench/*; do
        if [ ! -f "$prog" ] || [ ! -x "$prog" ]; then
            continue
        fi
        name=${prog##*/}
        log=bench-$name.log
        ran=$((ran + 1))
        args=(--device cuda --json "$logdir/$name.json")
        case $name in
            cuda_bench | transfer_bench)
                if [ -n "$max_mib" ]; then
                    args+=(--max-mib "$max_mib")
                elif [ "$quick" -eq 1 ]; then
                    args+=(--max-mib 256)
                fi
                ;;
            pipeline_bench)
                if [ "$quick" -eq 1 ]; then args+=(--quick); fi
                ;;
        esac
        echo "--- $name ${args[*]}"
        run_limited "$logdir/$log" "$prog" "${args[@]}"
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
            bench_reports+=("$name")
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
}

# The comparator, after every step (with --bench): under --quick only while the budget has
# the time it needs, since it only adds to the benchmarks' figures.
step_torch_compare() {
    local left
    step_header torch_compare
    left=$(budget_left)
    if [ "$quick" -eq 1 ] && [ "$left" -lt "$torch_compare_needs" ]; then
        echo "torch comparator: not run (time: $left s left, needs about $torch_compare_needs)"
        return
    fi
    torch_compare ${bench_reports[@]+"${bench_reports[@]}"}
}

# The PyTorch comparator (tools/torch_compare.py, from crates/gpukit-bench/): the work
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
if [ "$want_bench" -eq 1 ] && [ -z "$interrupted" ]; then
    step_torch_compare
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
