# Part of run.sh (see its header): the call's time budget and the per-program limits.

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

# Whether a program may start now: run.sh was not interrupted and the budget is not spent.
can_start() {
    [ -z "$interrupted" ] && [ "$(budget_left)" -gt 0 ]
}
