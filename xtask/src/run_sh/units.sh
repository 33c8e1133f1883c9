# Part of run.sh (see its header): the test units, their names and their order.

# ---- the test units and their order

# A unit of the test and sanitizer steps is a test binary, or one group of a grouped
# binary: the tests under one of its top-level modules (the facade's one test binary, `it`,
# holds a module per area: `props`, `behaviour`, ...). Each unit runs on its own, with its
# own time limit, log and row. The grouped binaries, from xtask's gpu_bundle::GROUPED_TARGETS,
# filled in by `cargo xtask gpu-bundle`.
grouped_targets="@GROUPED_TARGETS@"

# Whether the bundle's binary $2 (a path) is the test target named $1: its file name is the
# name, or cargo's `name-hash` where two targets share a name (or xtask's `name-2`).
is_target() {
    case ${2##*/} in
        "$1" | "$1"-[0-9a-f]*) return 0 ;;
    esac
    return 1
}

# Whether the bundle's binary $2 (a path) is one of the targets named in the list $1.
in_targets() {
    local target
    for target in $1; do
        if is_target "$target" "$2"; then return 0; fi
    done
    return 1
}

# Prints the names of the tests the test binary $2 would run with the libtest arguments
# after it (its filters and --skip apply), one a line, listing them for at most $1 seconds
# (a listing never hangs the call); fails as the listing does.
list_tests() {
    local secs=$1 bin=$2 out rc
    shift 2
    if command -v timeout >/dev/null 2>&1; then
        out=$(timeout --kill-after=2 "$secs" "$bin" --list --format terse "$@" </dev/null 2>/dev/null)
    else
        out=$("$bin" --list --format terse "$@" </dev/null 2>/dev/null)
    fi
    rc=$?
    sed -n 's/: test$//p' <<<"$out"
    return "$rc"
}

# Prints the names among stdin that belong to group $1: those under the module $1, or with
# $1 empty those at the binary's root (no module).
in_group() {
    awk -v group="$1" '
        NF == 0 { next }
        group == "" { if (index($0, "::") == 0) print; next }
        index($0, group "::") == 1 { print }
    '
}

# The units, by index: the name that --first and --only take and that names its row and
# log, the binary, and the group (empty for a whole binary; `::` for a grouped binary's
# tests at its root, which form one unit named after the binary).
unit_names=()
unit_bins=()
unit_groups=()
# What the header reports about the units (a grouped binary that could not be listed).
unit_notes=()
add_unit() {
    unit_names+=("$1")
    unit_bins+=("$2")
    unit_groups+=("$3")
}
for f in "$bundle"/tests/*; do
    if [ ! -f "$f" ] || [ ! -x "$f" ]; then
        continue
    fi
    if ! in_targets "$grouped_targets" "$f"; then
        add_unit "${f##*/}" "$f" ""
        continue
    fi
    # A grouped binary: its groups from its list of tests, by name.
    if ! listed=$(list_tests 60 "$f"); then
        unit_notes+=("listing the tests of tests/${f##*/} failed: it runs as one binary")
        add_unit "${f##*/}" "$f" ""
        continue
    fi
    groups=$(awk -F'::' 'NF > 1 { print $1 }' <<<"$listed" | sort -u)
    for group in $groups; do
        add_unit "$group" "$f" "$group"
    done
    if [ -n "$(in_group "" <<<"$listed")" ] || [ -z "$groups" ]; then
        add_unit "${f##*/}" "$f" "::"
    fi
done

# Whether unit $2 (an index) is named $1: a group by its name or its binary's, a binary by
# its target's name.
unit_is() {
    if [ -n "${unit_groups[$2]}" ] && [ "${unit_groups[$2]}" != "::" ] &&
        [ "$1" = "${unit_groups[$2]}" ]; then
        return 0
    fi
    is_target "$1" "${unit_bins[$2]}"
}

# The names among "$@" that match no unit, space-separated.
unknown_names() {
    local name i unknown=()
    for name in "$@"; do
        for i in "${!unit_names[@]}"; do
            if unit_is "$name" "$i"; then continue 2; fi
        done
        unknown+=("'$name'")
    done
    echo "${unknown[*]:-}"
}

for option in --first --only; do
    if [ "$option" = --first ]; then
        unknown=$(unknown_names ${first_names[@]+"${first_names[@]}"})
    else
        unknown=$(unknown_names ${only_names[@]+"${only_names[@]}"})
    fi
    if [ -n "$unknown" ]; then
        known=$({
            for name in ${unit_names[@]+"${unit_names[@]}"}; do echo "$name"; done
            for f in "$bundle"/tests/*; do
                if in_targets "$grouped_targets" "$f"; then echo "${f##*/}"; fi
            done
        } | LC_ALL=C sort -u | tr '\n' ' ')
        known=${known:-none}
        die_usage "$option: no test binary or group named $unknown in $bundle/tests (there: ${known% })"
    fi
done

# The units in the order the test and sanitizer steps run them (indices): --first's names
# (else --only's), the default first names, the rest by name except the default last names,
# then those; with --only, only the units it names.
declare -A placed=()
order=()
place_unit() {
    if [ -z "${placed[$1]:-}" ]; then
        placed[$1]=1
        order+=("$1")
    fi
}
place() {
    local name i
    for name in "$@"; do
        for i in "${!unit_names[@]}"; do
            if unit_is "$name" "$i"; then place_unit "$i"; fi
        done
    done
}
if [ "${#first_names[@]}" -gt 0 ]; then
    place "${first_names[@]}"
elif [ "$only_given" -eq 1 ]; then
    place "${only_names[@]}"
fi
place $default_first
while IFS=$'\t' read -r name i; do
    if [ -z "$i" ]; then continue; fi
    for last in $default_last; do
        if unit_is "$last" "$i"; then continue 2; fi
    done
    place_unit "$i"
done < <(for i in "${!unit_names[@]}"; do printf '%s\t%s\n' "${unit_names[$i]}" "$i"; done | LC_ALL=C sort)
place $default_last
if [ "$only_given" -eq 1 ]; then
    ordered=(${order[@]+"${order[@]}"})
    order=()
    for i in ${ordered[@]+"${ordered[@]}"}; do
        for name in "${only_names[@]}"; do
            if unit_is "$name" "$i"; then
                order+=("$i")
                break
            fi
        done
    done
fi

# Sets `options` to the libtest options among "$@": without its filters, --skip and
# --exact, which a group's listing has applied already.
options_only() {
    options=()
    while [ $# -gt 0 ]; do
        case $1 in
            --skip) shift ;;
            --skip=* | --exact) ;;
            --test-threads | --logfile | --format | --color | -Z | --shuffle-seed)
                options+=("$1" "${2-}")
                shift
                ;;
            -*) options+=("$1") ;;
        esac
        shift
    done
}

# Sets `unit_args` to the arguments that make the binary of unit $1 (an index) run the
# unit's tests among those the libtest arguments after $1 select (filters included), and
# `unit_count` to how many tests a group has among them (-1 for a whole binary). A whole
# binary takes the arguments as they are. A group lists the tests they select and names its
# own exactly, since libtest's filters match anywhere in a name (`props::` would take
# `pipeline_props::` tests too, `memory::` a test `..._of_memory::cuda`). Fails where the
# listing fails. When no program may start, the arguments stay as they are:
# run_test_unit reports the unit as not started.
select_unit() {
    local group=${unit_groups[$1]} bin=${unit_bins[$1]} listed names
    shift
    unit_args=("$@")
    unit_count=-1
    if [ -z "$group" ] || ! can_start; then
        return 0
    fi
    if [ "$group" = "::" ]; then
        group=
    fi
    listed=$(list_tests "$(probe_limit 60)" "$bin" "$@") || return 1
    mapfile -t names < <(in_group "$group" <<<"$listed")
    unit_count=${#names[@]}
    options_only "$@"
    unit_args=(--exact ${names[@]+"${names[@]}"} ${options[@]+"${options[@]}"})
}
