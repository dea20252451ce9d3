#!/bin/sh
# Kernel-matrix scenario for advice proven by applying it, on cgroup v2 (run by `cargo xtask vm
# matrix`): bursts under half a CPU of quota (a busy loop for 80 ms every ~1.03 s: one loop, so
# the bursts do not depend on two vCPUs of an emulated guest running at once) are throttled while
# using far less than the quota on average. cgtrace flags them
# (`throttled_below_quota`) with a cgroup-file change: `cpu.max.burst` on 5.14+, a higher
# `cpu.max` before (no burst allowance). The change is written exactly as given and the same
# bursts run again. The kernel's cpu.stat around each run is printed as
#   CGTRACE-ADVICE-BEFORE nr_throttled=N secs=S
#   CGTRACE-ADVICE-CHANGE knob=FILE value=V (spaces in V as _)
#   CGTRACE-ADVICE-AFTER nr_throttled=N secs=S
# and the host checks the cut and the knob. Each run's stream is printed (CGTRACE-STREAM-BEGIN/END).
# What-if accuracy on the same kernel: every run is recorded (`record --stream -o`), and before a
# change is written `cgtrace whatif` predicts it from the recording of the run before; its JSON
# is printed as a CGTRACE-WHATIF-PREDICT-<NAME> line and the host sets it beside the kernel's
# cpu.stat of the run after (throttled periods and time within 20 %, the p99 stall within 30 %
# of the kernel's stall per throttled period). Two predictions: the bursts under the flag's
# change (BURST), and a steady loop under 20/100 ms moved to 5/25 ms (STEADY: the runs
# CGTRACE-WHATIF-RUN-A and -B, 10 s each).
# A run is 20 s: the burst is sized for the largest throttled period seen, and in 10 s runs the
# bursts had at times not yet landed where a period holds them off longest (6.1: 24 ms seen in
# one run, 49 ms in the next).
CG=/sys/fs/cgroup/cgtrace-vm-advice
RUN_SECS=20
STEADY_SECS=10
OUT=/tmp/advice.ndjson
REC=/tmp/advice.cgtr
START_TIMEOUT=$((60 + $(nproc) * 2))

. /lib.sh

nr_throttled() {
    awk '$1 == "nr_throttled" { print $2 }' "$CG/cpu.stat"
}

throttled_usec() {
    awk '$1 == "throttled_usec" { print $2 }' "$CG/cpu.stat"
}

uptime_s() {
    cut -d. -f1 /proc/uptime
}

# Bursts for $1 seconds: a loop, moved into the cgroup while stopped, runs 80 ms, then goes.
bursts() {
    end=$(($(uptime_s) + $1))
    while [ "$(uptime_s)" -lt "$end" ]; do
        sh -c 'kill -STOP $$; while :; do :; done' &
        a=$!
        wait_stopped "$a" && echo "$a" >"$CG/cgroup.procs"
        kill -CONT "$a"
        sleep 0.08
        kill -KILL "$a"
        wait "$a" 2>/dev/null
        sleep 0.95
    done
}

# A busy loop in the cgroup for $1 seconds.
steady() {
    sh -c 'kill -STOP $$; while :; do :; done' &
    a=$!
    wait_stopped "$a" && echo "$a" >"$CG/cgroup.procs"
    kill -CONT "$a"
    sleep "$1"
    kill -KILL "$a"
    wait "$a" 2>/dev/null
}

# `cgtrace whatif` on recording $2 with options $3...: its JSON on one line after marker $1.
whatif() {
    wi_marker=$1
    wi_file=$2
    shift 2
    if ! cgtrace whatif "$wi_file" --cgroup /cgtrace-vm-advice --json "$@" >/tmp/whatif.json \
        2>/tmp/whatif.err; then
        echo "advice: whatif $*: $(cat /tmp/whatif.err)"
        return
    fi
    read -r printk_saved </proc/sys/kernel/printk
    echo 1 >/proc/sys/kernel/printk
    echo "$wi_marker $(tr -d '\n' </tmp/whatif.json)"
    echo "$printk_saved" >/proc/sys/kernel/printk
}

# One run of load $2 for $3 seconds, recorded to $REC (its NDJSON to $OUT): the kernel's
# throttled periods and time over it, after marker $1.
run() {
    : >"$OUT"
    rm -f "$REC"
    cgtrace record --stream -o "$REC" --interval 1000 >"$OUT" &
    cgpid=$!
    waited=0
    until grep -q '^{"type":"window"' "$OUT" 2>/dev/null; do
        if ! kill -0 "$cgpid" 2>/dev/null || [ "$waited" -ge $((START_TIMEOUT * 5)) ]; then
            echo "advice: no window from cgtrace"
            kill -INT "$cgpid" 2>/dev/null
            rmdir "$CG"
            exit 93
        fi
        sleep 0.2
        waited=$((waited + 1))
    done
    t0=$(nr_throttled)
    u0=$(throttled_usec)
    s0=$(uptime_s)
    "$2" "$3"
    sleep 0.3
    echo "$1 nr_throttled=$(($(nr_throttled) - t0)) throttled_usec=$(($(throttled_usec) - u0)) secs=$(($(uptime_s) - s0))"
    sleep 1.2
    kill -INT "$cgpid"
    wait "$cgpid"
    print_stream "$OUT"
}

mkdir "$CG" || exit 90
echo "50000 100000" >"$CG/cpu.max" || exit 91
echo "advice: bursts under cpu.max $(cat "$CG/cpu.max") on $(nproc) CPUs, ${RUN_SECS}s a run"
run CGTRACE-ADVICE-BEFORE bursts "$RUN_SECS"
# The flag's first cgroup-file change, from its last window.
change=$(grep -o '"code":"throttled_below_quota"[^]]*' "$OUT" | tail -n 1 |
    grep -o '"kind":"cgroup_file","knob":"[^"]*","value":"[^"]*"' | head -n 1)
knob=$(echo "$change" | sed 's/.*"knob":"\([^"]*\)".*/\1/')
value=$(echo "$change" | sed 's/.*"value":"\([^"]*\)".*/\1/')
if [ -z "$change" ]; then
    echo "advice: no throttled_below_quota flag with a cgroup-file change"
    print_stream "$OUT"
    rmdir "$CG"
    exit 94
fi
echo "CGTRACE-ADVICE-CHANGE knob=$knob value=$(echo "$value" | tr ' ' _)"
case $knob in
cpu.max.burst) whatif CGTRACE-WHATIF-PREDICT-BURST "$REC" --burst "${value}us" ;;
cpu.max)
    set -- $value
    whatif CGTRACE-WHATIF-PREDICT-BURST "$REC" --quota "${1}us" --period "${2}us"
    ;;
esac
echo "$value" >"$CG/$knob" || {
    echo "advice: the kernel refused $knob = $value"
    rmdir "$CG"
    exit 95
}
run CGTRACE-ADVICE-AFTER bursts "$RUN_SECS"

# What-if of a steady loop: 20/100 ms recorded, 5/25 ms predicted, then run.
[ -e "$CG/cpu.max.burst" ] && echo 0 >"$CG/cpu.max.burst"
echo "20000 100000" >"$CG/cpu.max"
run CGTRACE-WHATIF-RUN-A steady "$STEADY_SECS"
whatif CGTRACE-WHATIF-PREDICT-STEADY "$REC" --quota 5000us --period 25000us
echo "5000 25000" >"$CG/cpu.max"
run CGTRACE-WHATIF-RUN-B steady "$STEADY_SECS"
rm -f "$REC"
rmdir "$CG"
exit 0
