#!/usr/bin/env bash
# Proves the deployment artefacts: `helm lint` and `helm template` of deploy/helm/cgtrace, with
# the rendered objects checked (the DaemonSet's host namespaces, read-only host mounts,
# capabilities instead of privileged, tolerations, the flight recorder's command; the
# ServiceMonitor only when asked for; the privileged fallback), and `systemd-analyze verify` of the
# systemd unit. Needs helm and a Python with PyYAML (scripts/setup.sh deps installs both).
set -euo pipefail
cd "$(dirname "$0")/.."
HELM=${HELM:-/opt/cgtrace/go/bin/helm}
PY=${PY:-/opt/cgtrace/otlp-venv/bin/python}
CHART=deploy/helm/cgtrace
fail() { printf 'deploy/test.sh: %s\n' "$*" >&2; exit 1; }
[[ -x $HELM ]] || fail "helm is missing at $HELM: run scripts/setup.sh deps"
"$PY" -c 'import yaml' 2>/dev/null || fail "no PyYAML in $PY: run scripts/setup.sh deps"

"$HELM" lint --strict "$CHART" >/dev/null || fail "helm lint failed: $("$HELM" lint --strict "$CHART" 2>&1 | tail -5)"

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
render() { "$HELM" template t "$CHART" --namespace cgtrace "$@" >"$tmp/rendered.yaml"; }
check() { # python checks on the rendered YAML; $1 names the case
  "$PY" - "$1" "$tmp/rendered.yaml" <<'PY'
import sys, yaml
case = sys.argv[1]
docs = [d for d in yaml.safe_load_all(open(sys.argv[2])) if d]
kinds = [d["kind"] for d in docs]
def fail(msg):
    sys.exit(f"deploy/test.sh: {case}: {msg}")
ds = next((d for d in docs if d["kind"] == "DaemonSet"), None) or fail("no DaemonSet")
pod = ds["spec"]["template"]["spec"]
c = pod["containers"][0]
mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
sc = c["securityContext"]
if not pod.get("hostPID"): fail("hostPID is not set")
if not pod.get("hostNetwork"): fail("hostNetwork is not set (the node's hostname)")
TASKS = "/run/containerd/io.containerd.runtime.v2.task"
for p in ["/sys/fs/cgroup", "/sys/kernel", "/var/log/pods", "/var/log/containers", TASKS]:
    if p not in mounts: fail(f"{p} is not mounted")
    if not mounts[p].get("readOnly"): fail(f"{p} is not read-only")
if not any(t.get("operator") == "Exists" for t in pod.get("tolerations", [])): fail("no toleration for every taint")
args = c["args"]
if case == "privileged":
    if sc.get("privileged") is not True: fail("privileged fallback not rendered")
else:
    if sc.get("privileged"): fail("privileged by default")
    caps = set(sc["capabilities"]["add"])
    want = {"BPF", "PERFMON", "SYS_ADMIN", "DAC_READ_SEARCH", "SYS_RESOURCE", "SETPCAP"}
    if caps != want: fail(f"capabilities {sorted(caps)}, want {sorted(want)}")
    if sc["capabilities"].get("drop") != ["ALL"]: fail("capabilities not dropped first")
if not sc.get("readOnlyRootFilesystem"): fail("root filesystem writable")
if "--require-drop" not in args: fail(f"--require-drop not passed: {args}")
seccomp = sc.get("seccompProfile") or {}
if case == "unconfined":
    if seccomp != {"type": "Unconfined"}: fail(f"seccompProfile {seccomp}, want Unconfined alone")
elif seccomp != {"type": "Localhost", "localhostProfile": "profiles/cgtrace.json"}:
    fail(f"seccompProfile {seccomp}, want Localhost profiles/cgtrace.json")
types = {v["hostPath"]["path"]: v["hostPath"].get("type") for v in pod["volumes"] if "hostPath" in v}
want_types = {"/sys/fs/cgroup": "Directory", "/sys/kernel": "Directory",
              "/var/log/pods": "DirectoryOrCreate", "/var/log/containers": "DirectoryOrCreate",
              "/var/lib/cgtrace": "DirectoryOrCreate", TASKS: "DirectoryOrCreate"}
if types != want_types: fail(f"hostPath types {types}, want {want_types}")
if args[0] != "record" or "--rotate" not in args or "--prometheus" not in args:
    fail(f"not a flight recorder with metrics: {args}")
if args[args.index("--min-free") + 1] != "1G": fail(f"--min-free not passed: {args}")
if args[args.index("--containerd-state") + 1] != "/run/containerd": fail(f"--containerd-state not passed: {args}")
if "/var/lib/cgtrace" not in mounts: fail("no recording volume")
if not c["resources"]["limits"].get("memory") or c["resources"]["limits"].get("cpu"):
    fail("want a memory limit and no CPU limit")
svc = next((d for d in docs if d["kind"] == "Service"), None) or fail("no Service")
if svc["spec"]["ports"][0]["name"] != "metrics": fail("Service port not named metrics")
sm = "ServiceMonitor" in kinds
if case == "servicemonitor" and not sm: fail("no ServiceMonitor with serviceMonitor.enabled=true")
if case != "servicemonitor" and sm: fail("a ServiceMonitor by default")
if case == "otlp" and args[args.index("--otlp") + 1] != "http://collector:4318/v1/metrics":
    fail("--otlp not passed")
print(f"deploy/test.sh: {case}: ok ({', '.join(kinds)})")
PY
}
render && check default
render --set serviceMonitor.enabled=true && check servicemonitor
render --set securityContext.privileged=true && check privileged
render --set metrics.otlp=http://collector:4318/v1/metrics && check otlp
render --set securityContext.seccompProfile.type=Unconfined && check unconfined

if command -v systemd-analyze >/dev/null; then
  # verify wants the binary named in ExecStart to exist: point it at this build's.
  bin=$(readlink -f target/release/cgtrace 2>/dev/null || true)
  [[ -x $bin ]] || fail "target/release/cgtrace is missing: build first"
  sed "s|/usr/local/bin/cgtrace|$bin|" deploy/systemd/cgtrace.service >"$tmp/cgtrace.service"
  out=$(systemd-analyze verify "$tmp/cgtrace.service" 2>&1) || fail "systemd-analyze verify: $out"
  [[ -z $out ]] || fail "systemd-analyze verify: $out"
  echo "deploy/test.sh: systemd unit: ok"
else
  echo "deploy/test.sh: systemd-analyze is not installed: the unit was not verified"
fi
