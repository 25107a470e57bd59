#!/usr/bin/env bash
# Runs every test: the cmocka binaries in $SECKILL_BUILD/tests (unit tests and
# integration tests that start their own servers) and the integration scripts
# tests/it_*.sh (real instances, real load balancer, on loopback), N at a time.
#
#   tests/run.sh [-j N] [-v] [FILTER]
#     -j N     tests side by side (default: $SECKILL_TEST_JOBS, else DEFAULT_JOBS below)
#     -v       print every test's output, not only a failed one's
#     FILTER   only the tests whose name contains FILTER
#   SECKILL_BUILD         build directory (build, build/address, build/thread, ...)
#   SECKILL_TESTS         space-separated test names to run (default: all)
#   SECKILL_TEST_STRESS=1 the whole run while busy loops take every core (stress-ng
#                         --cpu $(nproc), started and stopped by its PID): a test that
#                         fails then is broken (make test-stress)
#   SECKILL_TEST_TIMEOUT  seconds one test may take before it is stopped (900)
#
# Each test runs with a TMPDIR of its own under this run's directory, its output in a
# file there: a green test prints one line, `--- ok NAME (Ns)`; a failed one its whole
# output, then `--- FAIL NAME (Ns)`. Then "N passed, N failed", and after it the five
# slowest tests and the wall time. Exits non-zero when anything failed. A test that
# exits 77 (automake's convention) was skipped: it says why on its output, counts
# neither as passed nor as failed, and is named on a "skipped:" line before the summary.
#
# Tests that must run alone are the ALONE list below, its one place: they run after the
# parallel batch, one by one. The longest tests start first (longest processing time
# first: the batch does not end waiting on one that started late): the times of this
# build's last run ($SECKILL_BUILD/test-times), else the LONG list's order.
#
# Sanitizer builds: every process of a test that carries a sanitizer runtime (the
# cmocka binaries, every server instance a script starts, however deep) writes its
# reports to $SECKILL_BUILD/sanitizer/<test>/, through ASAN/UBSAN/TSAN_OPTIONS'
# log_path. A test that left any report there fails, whatever its own verdict: a
# server instance's data race or leak is not lost in a log nobody reads.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

# Measured on the 2-core box (docs/testing.md, "How many at once"): the fastest N that
# stays green with two busy loops on both cores.
DEFAULT_JOBS=4

# Tests that run after the parallel batch, each alone: their subject is a speed or a
# ratio that another test's load would distort.
ALONE=(
    it_bench   # make bench's harness: a ratio of two modes' throughputs
    it_compare # make bench BASE=: two builds' medians side by side
)
# Started first when this build has no times yet: the longest, longest first.
LONG=(
    it_frozen it_outage it_reserve it_rzk it_rsale it_window it_sink it_pglock it_rcluster
    it_zk it_invariants it_edge it_http it_ops it_rfence it_replicas it_netns
    test_lock_zk test_zk_fence test_cluster
)

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
jobs=${SECKILL_TEST_JOBS:-$DEFAULT_JOBS}
verbose=0
while (($#)); do
    case $1 in
    -j) jobs=${2:-}; shift 2 || usage 2 ;;
    -j*) jobs=${1#-j}; shift ;;
    -v) verbose=1; shift ;;
    -h | --help) usage 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; usage 2 ;;
    *) break ;;
    esac
done
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: -j wants a positive number, not '$jobs'" >&2; exit 2; }
only=${1:-}
selected=${SECKILL_TESTS:-}
limit=${SECKILL_TEST_TIMEOUT:-900}

build=${SECKILL_BUILD:-build}
export SECKILL_BUILD=$build
export SECKILL_BIN=${SECKILL_BIN:-$build/seckill}
san_root=$build/sanitizer
[[ $san_root == /* ]] || san_root=$PWD/$san_root
rm -rf "$san_root"
times_file=$build/test-times
# Options common to every test; log_path is appended per test. exitcode makes a
# process with a report exit non-zero too (a cmocka binary then fails by itself).
san_asan="exitcode=97:detect_leaks=1:abort_on_error=0:print_summary=1"
san_ubsan="exitcode=97:print_stacktrace=1:halt_on_error=1"
san_tsan="exitcode=97:halt_on_error=0:second_deadlock_stack=1:history_size=4"
san_tsan+=":suppressions=$PWD/tests/tsan.supp"

# This run's directory: a TMPDIR per test (short paths: sockets live under them).
run_dir=$(mktemp -d /tmp/seckill-run.XXXXXX) || exit 1
run_tag=${run_dir##*.}
declare -A cmd_of=() start_of=() name_of=() secs_of=() last_secs=()
stress_pid=""

wanted() { # NAME: selected by FILTER and SECKILL_TESTS
    [[ -z $only || $1 == *"$only"* ]] || return 1
    [[ -z $selected || " $selected " == *" $1 "* ]]
}
is_alone() { [[ " ${ALONE[*]} " == *" $1 "* ]]; }

tests=()
for t in "$build"/tests/test_*; do
    [[ -x $t ]] || continue
    n=$(basename "$t")
    wanted "$n" || continue
    tests+=("$n")
    cmd_of[$n]=$t
done
for t in tests/it_*.sh; do
    [[ -f $t ]] || continue
    n=$(basename "$t" .sh)
    wanted "$n" || continue
    tests+=("$n")
    cmd_of[$n]="bash $t"
done

# The order: by the last run's seconds, longest first; without them, LONG's order first.
if [[ -s $times_file ]]; then
    while read -r n s; do [[ -n $n && $s =~ ^[0-9]+$ ]] && last_secs[$n]=$s; done <"$times_file"
fi
weight() { # NAME -> a sort key, larger first
    local i
    if [[ -n ${last_secs[$1]:-} ]]; then echo "${last_secs[$1]}"; return; fi
    for i in "${!LONG[@]}"; do
        [[ ${LONG[$i]} == "$1" ]] && { echo $((10000 - i)); return; }
    done
    echo 0
}
batch=()
alone=()
while read -r _ n; do
    if is_alone "$n"; then alone+=("$n"); else batch+=("$n"); fi
done < <(for n in "${tests[@]}"; do echo "$(weight "$n") $n"; done | sort -k1,1nr -k2,2)

passed=0
failed=0
failures=()
skips=()
running=0

start_test() { # NAME: in the background, its output in the run's dir
    local name=$1 san=$san_root/$1 tmp=$run_dir/$1
    local -a cmd
    read -r -a cmd <<<"${cmd_of[$name]}"
    mkdir -p "$san" "$tmp"
    (
        export TMPDIR=$tmp SECKILL_TEST_TAG=$run_tag/$name
        # a test that runs make (it_install, it_compare) is a make of its own, not a
        # child of make check's jobserver
        unset MAKEFLAGS MFLAGS MAKELEVEL
        export ASAN_OPTIONS="$san_asan:log_path=$san/asan" UBSAN_OPTIONS="$san_ubsan:log_path=$san/ubsan"
        export TSAN_OPTIONS="$san_tsan:log_path=$san/tsan"
        # timeout stops the test's process group (its traps then stop what it started).
        exec timeout -k 60 "$limit" "${cmd[@]}"
    ) </dev/null >"$run_dir/$name.log" 2>&1 &
    name_of[$!]=$name
    start_of[$name]=${EPOCHREALTIME/./}
    running=$((running + 1))
}

# finish_test PID RC: its verdict, one line (and its output when it failed).
finish_test() {
    local pid=$1 rc=$2 name=${name_of[$1]} ok=1 reports f secs
    unset "name_of[$pid]"
    running=$((running - 1))
    secs=$(((${EPOCHREALTIME/./} - ${start_of[$name]}) / 1000000))
    secs_of[$name]=$secs
    ((rc == 0)) || ok=0
    left_running "$name" >"$run_dir/$name.left" || ok=0
    reports=$(find "$san_root/$name" -type f -size +0 2>/dev/null | sort)
    [[ -n $reports ]] && ok=0
    if ((!ok || verbose)); then
        echo "=== $name"
        cat "$run_dir/$name.log"
        ((rc == 124)) && echo "(stopped after ${limit}s: SECKILL_TEST_TIMEOUT)"
        cat "$run_dir/$name.left"
        if [[ -n $reports ]]; then
            echo "sanitizer reports of $name (kept in $san_root/$name):"
            for f in $reports; do
                echo "--- $f"
                head -n 60 "$f"
            done
        fi
    fi
    if ((rc == 77)) && [[ -z $reports ]]; then
        skips+=("$name")
        echo "--- SKIP $name (${secs}s): $(grep -m1 -i 'skip' "$run_dir/$name.log")"
    elif ((ok)); then
        passed=$((passed + 1))
        echo "--- ok   $name (${secs}s)"
    else
        failed=$((failed + 1))
        failures+=("$name")
        echo "--- FAIL $name (${secs}s)"
        return
    fi
    rm -rf "${run_dir:?}/$name" "$run_dir/$name.log" "$run_dir/$name.left"
}

# left_running NAME: a process the test started (it carries the test's
# SECKILL_TEST_TAG) that outlived it by 5 s is said and killed, and fails the test:
# every test stops what it started. Status 1 when there was one.
tagged() { # TAG: pids whose environment holds SECKILL_TEST_TAG=TAG
    grep -lxzF "SECKILL_TEST_TAG=$1" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3
}
left_running() {
    local tag=$run_tag/$1 pids p
    for ((p = 0; p < 50; p++)); do
        pids=$(tagged "$tag")
        [[ -z $pids ]] && return 0
        sleep 0.1
    done
    echo "left running by $1 (killed now):"
    for p in $pids; do
        echo "  $p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
        kill -KILL "$p" 2>/dev/null
    done
    return 1
}

wait_one() {
    local pid rc
    wait -n -p pid
    rc=$?
    [[ -n ${pid:-} && -n ${name_of[$pid]:-} ]] && finish_test "$pid" "$rc"
}

on_signal() {
    local pid
    for pid in "${!name_of[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    wait
    stop_stress
    echo "run.sh: interrupted; outputs kept in $run_dir"
    exit 130
}
stop_stress() {
    [[ -n $stress_pid ]] || return 0
    kill -TERM "$stress_pid" 2>/dev/null
    wait "$stress_pid" 2>/dev/null
    stress_pid=""
}
trap on_signal INT TERM
trap stop_stress EXIT

if [[ ${SECKILL_TEST_STRESS:-0} == 1 ]]; then
    command -v stress-ng >/dev/null || { echo "run.sh: stress mode needs stress-ng (scripts/deps.sh)"; exit 1; }
    # Bounded by itself too (2 h), should this script be killed before its trap runs.
    stress-ng --cpu "$(nproc)" --timeout 7200 --quiet &
    stress_pid=$!
    echo "stress: stress-ng --cpu $(nproc) (pid $stress_pid) for the whole run"
fi

wall_start=$SECONDS
for n in "${batch[@]}"; do
    while ((running >= jobs)); do wait_one; done
    start_test "$n"
done
while ((running > 0)); do wait_one; done
for n in "${alone[@]}"; do
    start_test "$n"
    wait_one
done
stop_stress

# This build's times, for the next run's order (merged: a filtered run keeps the rest).
if ((${#secs_of[@]})); then
    for n in "${!secs_of[@]}"; do last_secs[$n]=${secs_of[$n]}; done
    for n in "${!last_secs[@]}"; do
        [[ -e tests/$n.sh || -x $build/tests/$n ]] && echo "$n ${last_secs[$n]}"
    done | sort >"$times_file.tmp" &&
        mv "$times_file.tmp" "$times_file"
fi

echo
if ((${#skips[@]})); then
    echo "skipped: ${skips[*]}"
fi
if ((failed)); then
    echo "failed: ${failures[*]} (outputs kept in $run_dir)"
else
    rm -rf "$run_dir"
fi
echo "$passed passed, $failed failed"
slowest=$(for n in "${!secs_of[@]}"; do echo "${secs_of[$n]} $n"; done | sort -k1,1nr | head -5 |
    awk '{ printf "%s%s %ss", (NR > 1 ? ", " : ""), $2, $1 }')
[[ -n $slowest ]] && echo "slowest: $slowest"
stressed=""
[[ ${SECKILL_TEST_STRESS:-0} == 1 ]] && stressed=", under stress"
echo "wall: $((SECONDS - wall_start))s, -j $jobs$stressed"
((failed == 0))
