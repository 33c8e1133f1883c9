# Part of run.sh (see its header): the output folder, the tallies, and one test unit's run
# and record.

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

# Reports that listing unit $1's tests failed (column $2): a failure, as a crash would be.
listing_failed() {
    printf '%-32s %-9s %s\n' "$1" "$2" "FAILED (listing its tests failed)"
    total_failed=$((total_failed + 1))
    reasons+=("$1 ($2): listing its tests failed")
}

# Runs one test unit (under a sanitizer tool when $2 is not "tests") and records it.
# Args: the unit's name, column, log name, then the command to run.
run_test_unit() {
    local name=$1 column=$2 logname=$3 status passed failed ignored results cuda skipped errors
    shift 3
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
