#!/bin/sh
# Kernel-matrix scenario for run-queue latency per cgroup v2 (run by `cargo xtask vm matrix`).
# Three busy loops in cgtrace-vm-busy and a sleeper in cgtrace-vm-quiet at the lowest CPU weight
# (a best-effort pod), all on vCPU 1; the sleeper wakes up every 10 ms and waits behind the loops.
# The sleeper is let go after cgtrace's first window and stopped again (SIGSTOP: it waits no
# more) before cgtrace; the run_delay (/proc/PID/schedstat) it had in between is printed as a
# CGTRACE-RUNDELAY line.
# cgtrace's NDJSON is printed between CGTRACE-STREAM-BEGIN/END; the host checks it.
CG=/sys/fs/cgroup
BUSY=$CG/cgtrace-vm-busy
QUIET=$CG/cgtrace-vm-quiet
OUT=/tmp/stream.ndjson
# Seconds to wait for cgtrace's first window (loading under TCG is slow).
START_TIMEOUT=$((60 + $(nproc) * 2))
. /lib.sh

mkdir "$BUSY" "$QUIET" || exit 90
echo 1 >"$QUIET/cpu.weight" || exit 91
mkfifo /tmp/tick || exit 91

pids=
# Pinned after the move: the guest's root enables cpuset, and joining a cgroup resets a task's
# affinity to its cpuset (all CPUs). Pinned before it, as this scenario did until 2026-11-27, the
# sleeper always ended up free to run on either CPU and a loop only when the move lost the race
# with `taskset`: when all three stayed on vCPU 1, the sleeper ran on an idle vCPU 0 and barely
# waited (5.10 runs failing the blame check with 34-47 ms over ~370 runs, cgtrace equal to
# run_delay).
for _ in 1 2 3; do
    sh -c 'while :; do :; done' &
    echo $! >"$BUSY/cgroup.procs"
    taskset -p -c 1 $! >/dev/null || exit 91
    pids="$pids $!"
done
# The sleeper stops itself first thing and is moved to its cgroup once stopped; its run_delay is
# read before it is let go (SIGCONT: the waits it had starting up, in the root cgroup, are not
# the scenario's) and after it is stopped again. `read -t` on a FIFO nobody writes sleeps 10 ms
# in the same process (a `sleep` child per tick would take its run_delay with it).
sh -c 'kill -STOP $$; exec 3<>/tmp/tick; while :; do read -t 0.01 x <&3; done' &
quiet=$!
wait_stopped "$quiet" && echo "$quiet" >"$QUIET/cgroup.procs"
taskset -p -c 1 "$quiet" >/dev/null || exit 91
read -r _ delay_before runs_before <"/proc/$quiet/schedstat"

# stdout goes to a file and is printed afterwards with only emergency kernel messages on the
# console, so that kernel lines cannot split an NDJSON line. stderr stays live for diagnosis.
cgtrace stream --interval 1000 --blame >"$OUT" &
cgpid=$!
waited=0
until grep -q '^{"type":"window"' "$OUT" 2>/dev/null; do
    if ! kill -0 "$cgpid" 2>/dev/null || [ "$waited" -ge $((START_TIMEOUT * 5)) ]; then
        echo "runq: no window from cgtrace"
        break
    fi
    sleep 0.2
    waited=$((waited + 1))
done

kill -CONT "$quiet"
sleep 4
kill -STOP "$quiet"
# Where the sleeper and the loops may run (CPU mask) and last ran: all on vCPU 1.
for p in $quiet $pids; do
    echo "runq: pid $p mask $(taskset -p "$p" 2>&1 | sed 's/.*: //') last cpu $(cut -d' ' -f39 "/proc/$p/stat")"
done
sleep 0.5
read -r _ delay runs <"/proc/$quiet/schedstat"
rundelay="CGTRACE-RUNDELAY quiet_ns=$((delay - delay_before)) quiet_runs=$((runs - runs_before)) clocksource=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
# One more window: the sleeper's last wait is in it.
sleep 1.2

kill -INT "$cgpid"
wait "$cgpid"
rc=$?
echo "runq: cgtrace exit $rc"

print_stream "$OUT" "$rundelay"

# shellcheck disable=SC2086 # word splitting of the pid list is intended
kill -KILL $pids "$quiet"
wait
for cg in "$BUSY" "$QUIET"; do
    for _ in 1 2 3 4 5; do rmdir "$cg" 2>/dev/null && break; sleep 0.2; done
    [ -d "$cg" ] && echo "runq: could not remove $cg"
done
exit $rc
