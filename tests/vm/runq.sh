#!/bin/sh
# Kernel-matrix scenario for run-queue latency per cgroup v2 (run by `cargo xtask vm matrix`).
# Three busy loops compete for 2 vCPUs in cgtrace-vm-busy; a sleeper in cgtrace-vm-quiet wakes
# up every 10 ms. cgtrace's NDJSON is printed between CGTRACE-STREAM-BEGIN/END; the host checks it.
CG=/sys/fs/cgroup
BUSY=$CG/cgtrace-vm-busy
QUIET=$CG/cgtrace-vm-quiet
mkdir "$BUSY" "$QUIET" || exit 90

pids=
for _ in 1 2 3; do
    sh -c 'while :; do :; done' &
    echo $! >"$BUSY/cgroup.procs"
    pids="$pids $!"
done
sh -c 'while :; do sleep 0.01; done' &
echo $! >"$QUIET/cgroup.procs"
pids="$pids $!"
sleep 1

# stdout goes to a file and is printed afterwards with only emergency kernel messages on the
# console, so that kernel lines cannot split an NDJSON line. stderr stays live for diagnosis.
cgtrace stream --interval 1000 --duration 4 --blame >/tmp/stream.ndjson
rc=$?
echo "runq: cgtrace exit $rc"

read -r printk_saved </proc/sys/kernel/printk
echo 1 >/proc/sys/kernel/printk
echo CGTRACE-STREAM-BEGIN
cat /tmp/stream.ndjson
echo CGTRACE-STREAM-END
echo "$printk_saved" >/proc/sys/kernel/printk

# shellcheck disable=SC2086 # word splitting of the pid list is intended
kill $pids
wait
for cg in "$BUSY" "$QUIET"; do
    for _ in 1 2 3 4 5; do rmdir "$cg" 2>/dev/null && break; sleep 0.2; done
    [ -d "$cg" ] && echo "runq: could not remove $cg"
done
exit $rc
