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
