#!/bin/sh
# Shell functions the kernel-matrix scenarios share; the initramfs carries it as /lib.sh and each
# scenario sources it (`. /lib.sh`).

# Waits (up to 30 s) until process $1 has stopped itself (state T).
wait_stopped() {
    n=0
    while [ "$n" -lt 300 ]; do
        read -r _ _ state _ <"/proc/$1/stat" && [ "$state" = T ] && return 0
        sleep 0.1
        n=$((n + 1))
    done
    echo "scenario: process $1 did not stop itself"
    return 1
}

# Prints cgtrace's NDJSON (file $1) between CGTRACE-STREAM-BEGIN/END, after the lines $2... (an
# empty one is left out), with only emergency kernel messages on the console meanwhile, so that
# kernel lines cannot split an NDJSON line.
print_stream() {
    ps_out=$1
    shift
    read -r printk_saved </proc/sys/kernel/printk
    echo 1 >/proc/sys/kernel/printk
    for ps_line in "$@"; do
        [ -n "$ps_line" ] && echo "$ps_line"
    done
    echo CGTRACE-STREAM-BEGIN
    cat "$ps_out"
    echo CGTRACE-STREAM-END
    echo "$printk_saved" >/proc/sys/kernel/printk
}
