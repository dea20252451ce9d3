#!/bin/sh
# Kernel-matrix scenario for slow pseudo-file reads on cgroup v2 (run by `cargo xtask vm matrix`).
# A reader in /cgtrace-vm-reader reads /sys/fs/cgroup/cgtrace-vm-reads/memory.stat five times,
# then DYING memory cgroups are made below cgtrace-vm-reads (each leaves 16 KiB of tmpfs pages
# charged to it, so it stays dying after rmdir), then the reader reads five more times.
# `cgtrace stream --events` traces all of it; the kernel's nr_dying_descendants of the parent is
# printed as a CGTRACE-KSTAT-AFTER line and cgtrace's NDJSON between CGTRACE-STREAM-BEGIN/END.
# The host checks the reads family's attach mode, the reader's memory.stat reads, and the dying
# count against the kernel's.
#
# Parameters (kernel command line): cgtrace.reads_mode=auto|fentry|syscall (default auto),
# cgtrace.dying=N (default 300).
PARENT=/sys/fs/cgroup/cgtrace-vm-reads
READER=/sys/fs/cgroup/cgtrace-vm-reader
MODE=auto
DYING=300
for word in $(cat /proc/cmdline); do
    case "$word" in
        cgtrace.reads_mode=*) MODE=${word#*=} ;;
        cgtrace.dying=*) DYING=${word#*=} ;;
    esac
done
START_TIMEOUT=60
OUT=/tmp/reads.ndjson
. /lib.sh

mkdir "$PARENT" "$READER" || exit 90
echo +memory >"$PARENT/cgroup.subtree_control" || exit 91
echo "reads: mode $MODE, $DYING dying memcgs"

cgtrace stream --interval 1000 --events --slow-read-ms 1 --reads-mode "$MODE" >"$OUT" &
cgpid=$!
waited=0
until grep -q '^{"type":"window"' "$OUT" 2>/dev/null; do
    if ! kill -0 "$cgpid" 2>/dev/null || [ "$waited" -ge $((START_TIMEOUT * 5)) ]; then
        echo "reads: cgtrace gave no window"
        kill -INT "$cgpid" 2>/dev/null
        cat "$OUT"
        exit 92
    fi
    sleep 0.2
    waited=$((waited + 1))
done

read_stats() {
    sh -c "echo \$\$ >$READER/cgroup.procs; for i in 1 2 3 4 5; do cat $PARENT/memory.stat >/dev/null; done"
}

read_stats
mkdir -p /tmp/dying
i=0
while [ "$i" -lt "$DYING" ]; do
    d="$PARENT/d$i"
    mkdir "$d" || break
    sh -c "echo \$\$ >$d/cgroup.procs; head -c 16384 /dev/zero >/tmp/dying/f$i"
    rmdir "$d" 2>/dev/null || { sleep 0.1; rmdir "$d"; }
    i=$((i + 1))
done
dying=$(awk '$1 == "nr_dying_descendants" { print $2 }' "$PARENT/cgroup.stat")
read_stats
sleep 2
kill -INT "$cgpid"
wait "$cgpid"
rc=$?

print_stream "$OUT" "CGTRACE-KSTAT-AFTER nr_dying_descendants=$dying made=$i"
exit $rc
