#!/bin/sh
# Boot smoke test for the kernel matrix: reports what the guest offers and fails if BTF or the
# cgroup2 cpu/memory controllers are missing.
#   cargo xtask vm run --kernel 6.1 --script tests/vm/env.sh [--bin <any dynamically linked binary>]
fail=0
echo "env: kernel $(uname -r), $(nproc) cpus, $(free -m | awk '/Mem:/ {print $2}') MB"
echo "env: /sys/fs/cgroup is $(awk '$2 == "/sys/fs/cgroup" {print $3}' /proc/mounts)"
echo "env: cgroup.controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
echo "env: cgroup.subtree_control: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
for c in cpu memory; do
    grep -qw "$c" /sys/fs/cgroup/cgroup.subtree_control || { echo "env: FAIL no $c controller"; fail=1; }
done
mkdir /sys/fs/cgroup/env-probe && echo "env: child cgroup files: $(ls /sys/fs/cgroup/env-probe | grep -E '^(cpu|memory)\.(max|stat|pressure)$' | tr '\n' ' ')"
rmdir /sys/fs/cgroup/env-probe
if [ -e /sys/kernel/btf/vmlinux ]; then
    echo "env: /sys/kernel/btf/vmlinux $(wc -c </sys/kernel/btf/vmlinux) bytes"
else
    echo "env: FAIL /sys/kernel/btf/vmlinux missing"
    fail=1
fi
for d in /sys/kernel/tracing /sys/kernel/debug/tracing; do
    if [ -e "$d/events/sched/sched_switch" ]; then echo "env: $d available"; else echo "env: $d not available"; fi
done
grep -q ' /sys/fs/bpf ' /proc/mounts && echo "env: bpffs mounted"
echo "env: memlock limit $(ulimit -l)"
for b in /bin/*; do
    [ -L "$b" ] && continue
    [ "$b" = /bin/busybox ] && continue
    if "$b" --help >/dev/null 2>&1; then echo "env: $b --help ok"; else echo "env: $b --help exit $?"; fi
done
exit $fail
