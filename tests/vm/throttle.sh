#!/bin/sh
# Kernel-matrix scenario for CFS throttling on cgroup v2 (run by `cargo xtask vm matrix`).
# cgtrace-vm-thr gets cpu.max "20000 100000"; two busy loops run in it for RUN_SECS while
# `cgtrace stream` traces. The kernel's cpu.stat is read before the loops start (once cgtrace has
# written its first window) and after they are gone (once the last episodes have closed), and
# printed as CGTRACE-KSTAT-BEFORE/AFTER lines; cgtrace's NDJSON is printed between
# CGTRACE-STREAM-BEGIN/END. The host compares the two.
# With them, one loop runs in cgtrace-vm-anc/child under a 2 % quota on its parent: its wait must
# be charged to its ancestor's quota. At the end the loops are stopped (SIGSTOP: they wait no
# more) and their threads' run_delay (/proc/PID/schedstat) printed as a CGTRACE-RUNDELAY line:
# the host compares it with cgtrace's run-queue wait.
# Then groups removed while throttled: GONE groups under a 5 ms / 100 ms quota each get a busy
# loop that is moved out after 300 ms (throttled ~95 % of the time) and the group removed at once,
# so the kernel frees its cfs_rqs still throttled; after a pause NEW groups are throttled the same
# way and may reuse that memory. The host checks that no throttle episode (--events throttle) of
# those groups is longer than a second: a stale entry left by a removed group must never give a
# new group its start time. (Only on guests of at most 8 CPUs, announced by a "throttle: churn"
# line: the 64-vCPU guest is too slow under TCG for its other checks with it.)
#
# Parameters come from the kernel command line (`--append` of `cargo xtask vm run`):
#   cgtrace.throttle_mode=auto|fentry|kprobe|tracepoint   passed as --throttle-mode; without it
#                                                         (or with "none") the flag is omitted
#   cgtrace.throttle_secs=N                               seconds of load (default 6)
#   cgtrace.throttle_threads=N                            busy loops (default 2; the wide guest
#                                                         runs one per CPU)
#   cgtrace.throttle_quota=US                             cpu.max quota per 100 ms (default 20000)
#   cgtrace.throttle_anc_quota=US                         the ancestor's quota per 100 ms (default
#                                                         2000)
#   cgtrace.throttle_pin=1                                every loop pinned to a CPU of its own (the
#                                                         wide guest): the ancestor's to the last,
#                                                         which it has to itself (cpuset), loop i to
#                                                         CPU i-1 of the others. Unpinned on a TCG
#                                                         guest of 64 vCPUs, a loop that shared a
#                                                         vCPU waited behind a neighbour's slices
#                                                         (stretched by the host) and two loops on
#                                                         one CPU broke the loops/CPUs estimate
CG=/sys/fs/cgroup/cgtrace-vm-thr
ANC=/sys/fs/cgroup/cgtrace-vm-anc
MODE=
RUN_SECS=6
THREADS=2
QUOTA=20000
ANC_QUOTA=2000
PIN=
for word in $(cat /proc/cmdline); do
    case "$word" in
        cgtrace.throttle_mode=*) MODE=${word#*=} ;;
        cgtrace.throttle_secs=*) RUN_SECS=${word#*=} ;;
        cgtrace.throttle_threads=*) THREADS=${word#*=} ;;
        cgtrace.throttle_quota=*) QUOTA=${word#*=} ;;
        cgtrace.throttle_anc_quota=*) ANC_QUOTA=${word#*=} ;;
        cgtrace.throttle_pin=1) PIN=1 ;;
    esac
done
[ "$MODE" = none ] && MODE=
# Seconds to wait for cgtrace's first window (loading under TCG is slow, slower with many vCPUs).
START_TIMEOUT=$((60 + $(nproc) * 2))
# Seconds between killing the loops and the final cpu.stat read: the last episodes close and the
# period timer goes idle.
SETTLE_SECS=2
OUT=/tmp/throttle.ndjson

kstat() {
    awk -v tag="$1" '
        $1 == "nr_periods" { p = $2 }
        $1 == "nr_throttled" { t = $2 }
        $1 == "throttled_usec" { u = $2 }
        END { printf "%s nr_periods=%s nr_throttled=%s throttled_usec=%s\n", tag, p, t, u }
    ' "$CG/cpu.stat"
}

# Makes cgroup $1 with a 5 ms / 100 ms quota, runs a busy loop in it for 300 ms, moves the loop
# out and (with $2 = gone) removes the group at once, while it is most likely throttled; other
# groups stay until the end (so that their episodes carry their path).
throttled_group() {
    mkdir "$1" || return
    echo "5000 100000" >"$1/cpu.max"
    sh -c 'kill -STOP $$; while :; do :; done' &
    loop=$!
    wait_stopped "$loop" && echo "$loop" >"$1/cgroup.procs"
    kill -CONT "$loop"
    sleep 0.3
    echo "$loop" >/sys/fs/cgroup/cgroup.procs
    [ "$2" = gone ] && rmdir "$1"
    kill -KILL "$loop"
    wait "$loop" 2>/dev/null
}

remove_cgroup() {
    for cg in "$CG" "$ANC/child" "$ANC" /sys/fs/cgroup/cgtrace-vm-new*; do
        [ -d "$cg" ] || continue
        for _ in 1 2 3 4 5; do rmdir "$cg" 2>/dev/null && break; sleep 0.2; done
        [ -d "$cg" ] && echo "throttle: could not remove $cg"
    done
}

# The sum of the second field of /proc/PID/schedstat (run_delay, ns) over the given pids.
run_delay() {
    total=0
    for pid in "$@"; do
        read -r _ delay _ <"/proc/$pid/schedstat"
        total=$((total + delay))
    done
    echo "$total"
}

. /lib.sh

mkdir "$CG" "$ANC" || exit 90
echo "$QUOTA 100000" >"$CG/cpu.max" || exit 91
echo "$ANC_QUOTA 100000" >"$ANC/cpu.max" || exit 91
# The CPUs the scenario cgroup's loops can run on (the host's wait/kernel check divides by them).
CG_CPUS=$(nproc)
if [ -n "$PIN" ]; then
    last=$(($(nproc) - 1))
    CG_CPUS=$last
    echo +cpuset >/sys/fs/cgroup/cgroup.subtree_control || exit 91
    echo "0-$((last - 1))" >"$CG/cpuset.cpus" || exit 91
    echo "$last" >"$ANC/cpuset.cpus" || exit 91
fi
# The child is a CPU group of its own under the parent's quota.
echo +cpu >"$ANC/cgroup.subtree_control" || exit 91
mkdir "$ANC/child" || exit 90
echo "throttle: mode ${MODE:-(flag omitted)}, ${RUN_SECS}s of load in $THREADS loops, cpu.max $(cat "$CG/cpu.max"), $CG_CPUS CPUs"
echo "throttle: ancestor cpu.max $(cat "$ANC/cpu.max")${PIN:+, its loop alone on CPU $(cat "$ANC/cpuset.cpus.effective")}"

before=
after=
rundelay=
# stdout goes to a file; stderr stays live on the console for diagnosis.
CHURN=
[ "$(nproc)" -le 8 ] && CHURN=1
cgtrace stream --interval 1000 --blame ${CHURN:+--events throttle} ${MODE:+--throttle-mode "$MODE"} >"$OUT" &
cgpid=$!

waited=0
until grep -q '^{"type":"window"' "$OUT" 2>/dev/null; do
    if ! kill -0 "$cgpid" 2>/dev/null; then
        wait "$cgpid"
        rc=$?
        echo "throttle: cgtrace exited with $rc before its first window"
        print_stream "$OUT" "$before" "$after" "$rundelay"
        remove_cgroup
        [ "$rc" -eq 0 ] && rc=92
        exit $rc
    fi
    if [ "$waited" -ge $((START_TIMEOUT * 5)) ]; then
        echo "throttle: no window from cgtrace after ${START_TIMEOUT}s"
        kill -INT "$cgpid"
        wait "$cgpid"
        print_stream "$OUT" "$before" "$after" "$rundelay"
        remove_cgroup
        exit 93
    fi
    sleep 0.2
    waited=$((waited + 1))
done

before=$(kstat CGTRACE-KSTAT-BEFORE)
# Each loop stops itself first thing and is moved to its cgroup once stopped; their run_delay is
# read before they are let go (SIGCONT: the waits they had starting up, in the root cgroup, are
# not the scenario's) and after they are stopped again.
pids=
i=0
while [ "$i" -lt "$THREADS" ]; do
    i=$((i + 1))
    sh -c 'kill -STOP $$; while :; do :; done' &
    wait_stopped $! && echo $! >"$CG/cgroup.procs"
    # After the move: joining a cpuset resets a task's affinity to the set.
    [ -n "$PIN" ] && taskset -p -c $(((i - 1) % CG_CPUS)) $! >/dev/null
    pids="$pids $!"
done
sh -c 'kill -STOP $$; while :; do :; done' &
anc=$!
wait_stopped $anc && echo $anc >"$ANC/child/cgroup.procs"
# shellcheck disable=SC2086 # word splitting of the pid list is intended
thr_before=$(run_delay $pids)
anc_before=$(run_delay $anc)
# shellcheck disable=SC2086
kill -CONT $pids $anc
sleep "$RUN_SECS"
# shellcheck disable=SC2086
kill -STOP $pids $anc
sleep "$SETTLE_SECS"
# shellcheck disable=SC2086
rundelay="CGTRACE-RUNDELAY thr_ns=$(($(run_delay $pids) - thr_before)) anc_ns=$(($(run_delay $anc) - anc_before)) clocksource=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
after=$(kstat CGTRACE-KSTAT-AFTER)
# Out of the quota'd groups before they go: a loop killed there would wait for the next period
# to exit, a wait after its run_delay was read.
for pid in $pids $anc; do echo "$pid" >/sys/fs/cgroup/cgroup.procs; done
# shellcheck disable=SC2086
kill -KILL $pids $anc
# shellcheck disable=SC2086
wait $pids $anc 2>/dev/null
if [ -n "$CHURN" ]; then
    echo "throttle: churn: groups removed while throttled, then new ones"
    for i in 1 2 3 4; do throttled_group "/sys/fs/cgroup/cgtrace-vm-gone$i" gone; done
    # The freed cfs_rqs go back to the allocator after an RCU grace period.
    sleep 2
    for i in 1 2 3 4 5 6 7 8; do throttled_group "/sys/fs/cgroup/cgtrace-vm-new$i" keep; done
fi
# One more window: the last waits and episodes are in it.
sleep 1.2

kill -INT "$cgpid"
wait "$cgpid"
rc=$?
echo "throttle: cgtrace exit $rc"
print_stream "$OUT" "$before" "$after" "$rundelay"
remove_cgroup
exit $rc
