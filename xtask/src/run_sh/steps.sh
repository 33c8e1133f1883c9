# Part of run.sh (see its header): the steps (preflight and doctor, tests, sanitizers,
# benchmarks, the torch comparator).

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
    local i name passed_before=$total_passed cuda_before=$total_cuda_passed
    step_header tests
    if [ "${#order[@]}" -eq 0 ]; then
        echo "tests: no test binaries in $bundle/tests"
        reasons+=("no test binaries")
        total_failed=$((total_failed + 1))
        return
    fi
    for i in "${order[@]}"; do
        name=${unit_names[$i]}
        if ! select_unit "$i" "${test_args[@]}" ${pass[@]+"${pass[@]}"}; then
            listing_failed "$name" tests
            continue
        fi
        if [ "$unit_count" -eq 0 ]; then
            printf '%-32s %-9s %s\n' "$name" tests "no test selected (the arguments after -- leave none)"
            continue
        fi
        run_test_unit "$name" tests "$name.log" "${unit_bins[$i]}" "${unit_args[@]}"
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

# Set by run_test_unit when compute-sanitizer refused the device: the step stops there.
sanitizer_refused=0

step_sanitize() {
    local tool=$1 i bin name listed passed_before=$total_passed filter
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
    for i in ${order[@]+"${order[@]}"}; do
        name=${unit_names[$i]}
        bin=${unit_bins[$i]}
        if in_targets "$not_sanitized_targets" "$bin"; then
            printf '%-32s %-9s %s\n' "$name" "$tool" \
                "not run: it faults on purpose, which $tool reports by design (xtask's gpu_test::UNFILTERED_TARGETS)"
            continue
        fi
        filter=(cuda)
        if [ -n "${unit_groups[$i]}" ]; then
            : # A group: select_unit lists its CUDA tests.
        elif in_targets "$unfiltered_targets" "$bin"; then
            filter=()
        else
            # Only binaries with CUDA tests are worth the sanitizer's start-up time.
            listed=$("$bin" --list cuda </dev/null 2>/dev/null | grep -c ': test$')
            if [ "${listed:-0}" -eq 0 ]; then
                printf '%-32s %-9s no CUDA tests\n' "$name" "$tool"
                continue
            fi
        fi
        if ! select_unit "$i" ${filter[@]+"${filter[@]}"} "${test_args[@]}" ${pass[@]+"${pass[@]}"}; then
            listing_failed "$name" "$tool"
            continue
        fi
        if [ "$unit_count" -eq 0 ]; then
            printf '%-32s %-9s no CUDA tests\n' "$name" "$tool"
            continue
        fi
        # --report-api-errors no: tests that provoke driver errors on purpose (out of
        # memory, bad PTX, a missing entry point) are not sanitizer errors.
        run_test_unit "$name" "$tool" "$name.$tool.log" \
            "$sanitizer" --tool "$tool" --error-exitcode 1 --report-api-errors no \
            --print-limit 50 "$bin" "${unit_args[@]}"
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

# The benchmarks that, under --quick, run after the comparator (which reads none of their
# reports): a one-GPU machine learns least from them.
late_benches="startup_bench allreduce_bench"

# The number of GPUs nvidia-smi lists, or nothing when it cannot say.
gpu_count() {
    if command -v nvidia-smi >/dev/null 2>&1; then
        capped "$(probe_limit 10)" nvidia-smi -L | grep -c '^GPU ' || true
    fi
}

# $1: `all` (every benchmark), `early` (all but $late_benches) or `late` (those).
step_bench() {
    local prog name log skips ran=0 args part=${1:-all} gpus
    if [ "$part" != late ]; then
        step_header bench
    fi
    for prog in "$bundle"/bench/*; do
        if [ ! -f "$prog" ] || [ ! -x "$prog" ]; then
            continue
        fi
        name=${prog##*/}
        case " $late_benches " in
            *" $name "*) if [ "$part" = early ]; then continue; fi ;;
            *) if [ "$part" = late ]; then continue; fi ;;
        esac
        if [ "$part" = late ] && [ "$name" = allreduce_bench ]; then
            gpus=$(gpu_count)
            if [ "${gpus:-2}" -lt 2 ]; then
                echo "bench $name: not run (--quick, one GPU: a one-rank all-reduce measures no collective)"
                continue
            fi
        fi
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
            pipeline_bench | allreduce_bench)
                # allreduce_bench reads `--device cuda` as every CUDA device (cuda:*).
                if [ "$quick" -eq 1 ]; then args+=(--quick); fi
                ;;
            kernel_bench)
                if [ "$quick" -eq 1 ]; then args+=(--runs 7); fi
                ;;
            startup_bench)
                # Fresh processes per device, CUDA's among them; it takes no --device.
                args=(--json "$logdir/$name.json" --runs 5
                    --devices cpu,auto,cuda,vulkan,probe:cuda,probe:vulkan)
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
    if [ "$ran" -eq 0 ] && [ "$part" != late ]; then
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
