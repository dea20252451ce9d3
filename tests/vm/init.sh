#!/bin/sh
# /init of the cgtrace kernel-matrix guest, built into the initramfs by `cargo xtask vm`.
# Mounts the pseudo file systems, gives the guest a pure cgroup2 with cpu+memory(+cpuset),
# runs /scenario.sh, prints "CGTRACE-VM-EXIT <code>" and powers the VM off.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
for c in cpu memory cpuset; do
    if grep -qw "$c" /sys/fs/cgroup/cgroup.controllers; then
        echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control || echo "init: cannot enable $c"
    fi
done
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
# 5.10 charges BPF maps to RLIMIT_MEMLOCK (memcg accounting came in 5.11).
ulimit -l unlimited
echo "CGTRACE-VM-BOOTED $(uname -r)"
cd /tmp || exit 1
sh /scenario.sh
rc=$?
# On a line of its own: the kernel's console messages can land before the newline.
echo
echo "CGTRACE-VM-EXIT $rc"
# Let the console drain first: the power-off message once cut the line after the marker.
sleep 1
echo o >/proc/sysrq-trigger
sleep 60
