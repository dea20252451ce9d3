#!/usr/bin/env bash
# cgtrace set-up, build, run and test on a fresh Debian bookworm machine with rustup, as root.
#
#   scripts/setup.sh run [ARGS…]  install what is missing, build, start `cgtrace top ARGS…`
#                                 (`cgtrace stream ARGS…` when not on a terminal)
#   scripts/setup.sh test         install what is missing, build, run the whole test suite
#   scripts/setup.sh deps         only install what is missing
#
# Idempotent: a second run skips everything already there. Nothing outside the repo is assumed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"

# Each step says how far into the run it starts (m:ss), so a CI log shows where the time goes.
say() { printf '==> [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }
die() { printf 'setup: %s\n' "$*" >&2; exit 1; }

toolchain_of() { sed -n 's/^channel *= *"\(.*\)"/\1/p' "$1"; }
STABLE=$(toolchain_of rust-toolchain.toml)
NIGHTLY=$(toolchain_of cgtrace-ebpf/rust-toolchain.toml)
BPF_LINKER_VERSION=0.13.0
CARGO_FUZZ_VERSION=0.13.2
# python3-prometheus-client: the OpenMetrics parser the Prometheus test checks scrapes with.
# fuse3, lxcfs, strace: the reads tests (a slow FUSE filesystem, lxcfs, strace -T as reference).
APT_PACKAGES=(podman runc musl-tools build-essential qemu-system-x86 busybox-static libbpf-tools linux-perf tmux cpio openjdk-17-jdk-headless curl python3-prometheus-client python3-yaml fuse3 lxcfs strace chromium prometheus bpftool)

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and loads eBPF programs): sudo $0 $*"
command -v rustup >/dev/null || die "rustup not found: install it (https://rustup.rs) and re-run"
export RUSTUP_AUTO_INSTALL=0

install_apt() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true) == *"install ok installed"* ]] || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then say "Debian packages: all present"; return; fi
  say "Debian packages: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

install_toolchain() { # name components…
  local tc=$1; shift
  if rustup run "$tc" rustc --version >/dev/null 2>&1; then
    local have; have=$(rustup component list --installed --toolchain "$tc" 2>/dev/null)
    local need=()
    for c in "$@"; do [[ $'\n'$have == *$'\n'"$c"* ]] || need+=("$c"); done
    if [ ${#need[@]} -eq 0 ]; then say "toolchain $tc: present"; return; fi
    say "toolchain $tc: adding ${need[*]}"
    rustup component add --toolchain "$tc" "${need[@]}"
    return
  fi
  say "toolchain $tc: installing"
  local args=()
  for c in "$@"; do args+=(--component "$c"); done
  rustup toolchain install "$tc" --profile minimal --no-self-update "${args[@]}"
}

# bpf-linker must link the LLVM of the nightly that compiles the eBPF crate. The nightly ships
# libLLVM with the C API; a persistent prefix of symlinks to it stands in for a system LLVM.
install_bpf_linker() {
  local libdir sofile major prefix
  libdir=$(rustup run "$NIGHTLY" rustc --print sysroot)/lib
  local candidates=("$libdir"/libLLVM.so.*-rust-*-nightly)
  [ -e "${candidates[0]}" ] || die "no libLLVM in $libdir: is $NIGHTLY a complete toolchain?"
  sofile=$(basename "${candidates[0]}")
  major=$(rustup run "$NIGHTLY" rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
  prefix=/opt/cgtrace/llvm-$major
  mkdir -p "$prefix/lib"
  ln -sfn "$libdir/$sofile" "$prefix/lib/$sofile"
  ln -sfn "$libdir/$sofile" "$prefix/lib/libLLVM.so"
  # Outputs are captured before matching: with pipefail, `cmd | grep -q` fails at random when
  # grep exits early and cmd gets SIGPIPE.
  local version="" libs=""
  if command -v bpf-linker >/dev/null; then
    version=$(bpf-linker --version 2>/dev/null || true)
    libs=$(ldd "$(command -v bpf-linker)" 2>/dev/null || true)
  fi
  if [[ $version == *"$BPF_LINKER_VERSION"* && $libs == *"$prefix/lib/$sofile"* ]]; then
    say "bpf-linker $BPF_LINKER_VERSION (LLVM $major): present"
    return
  fi
  say "bpf-linker $BPF_LINKER_VERSION: building against LLVM $major from $NIGHTLY"
  LLVM_PREFIX=$prefix cargo +"$STABLE" install --locked --force "bpf-linker@$BPF_LINKER_VERSION" \
    --no-default-features --features "llvm-$major"
}

# cargo fuzz (the recording reader's fuzz target in fuzz/), built with the stable toolchain; it
# runs the target with the pinned nightly (fuzz/rust-toolchain.toml).
install_cargo_fuzz() {
  local version=""
  command -v cargo-fuzz >/dev/null && version=$(cargo fuzz --version 2>/dev/null || true)
  if [[ $version == *"$CARGO_FUZZ_VERSION"* ]]; then say "cargo-fuzz $CARGO_FUZZ_VERSION: present"; return; fi
  say "cargo-fuzz $CARGO_FUZZ_VERSION: installing"
  cargo +"$STABLE" install --locked --force "cargo-fuzz@$CARGO_FUZZ_VERSION"
}

# A Python for the tests' clients: the OTLP receiver of tests/tests/otlp.rs (the reference
# protobuf definitions from PyPI) and deploy/test.sh's YAML checks.
OTLP_VENV=/opt/cgtrace/otlp-venv
install_otlp_receiver() {
  if "$OTLP_VENV/bin/python" -c 'import opentelemetry.proto.collector.metrics.v1.metrics_service_pb2, yaml' 2>/dev/null; then
    say "opentelemetry-proto, PyYAML (PyPI): present"; return
  fi
  say "opentelemetry-proto, PyYAML (PyPI): installing into $OTLP_VENV"
  python3 -m venv "$OTLP_VENV"
  "$OTLP_VENV/bin/pip" install -q "opentelemetry-proto==1.45.2" "PyYAML==6.0.2"
}

# helm, from the Go module proxy, for deploy/test.sh.
HELM_VERSION=v3.16.4
GOBIN_DIR=/opt/cgtrace/go/bin
install_helm() {
  # `go install` leaves the version out of helm's own `version`: a stamp file says which it is.
  if [[ -x $GOBIN_DIR/helm && $(cat "$GOBIN_DIR/.helm-version" 2>/dev/null) == "$HELM_VERSION" ]]; then
    say "helm $HELM_VERSION: present"; return
  fi
  say "helm $HELM_VERSION: building from the Go module proxy"
  mkdir -p "$GOBIN_DIR"
  GOBIN="$GOBIN_DIR" GOFLAGS=-mod=mod go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  echo "$HELM_VERSION" >"$GOBIN_DIR/.helm-version"
}

# The OpenTelemetry Collector (core: OTLP receiver, OTLP/HTTP exporter), from the Go module proxy
# by the collector's builder, for the OTLP tests.
OTELCOL_VERSION=v0.165.0
install_otelcol() {
  local stamp; stamp="$OTELCOL_VERSION $(sha256sum tests/otelcol/builder.yaml | cut -c1-16)"
  if [[ -x $GOBIN_DIR/otelcol-cgtrace && $(cat "$GOBIN_DIR/.otelcol-version" 2>/dev/null) == "$stamp" ]]; then
    say "otelcol $OTELCOL_VERSION: present"; return
  fi
  say "otelcol $OTELCOL_VERSION: building from the Go module proxy"
  mkdir -p "$GOBIN_DIR"
  local build=/opt/cgtrace/otelcol-build
  rm -rf "$build"; mkdir -p "$build"
  GOBIN="$build" GOFLAGS=-mod=mod go install "go.opentelemetry.io/collector/cmd/builder@$OTELCOL_VERSION"
  (cd "$build" && ./builder --config "$here/tests/otelcol/builder.yaml" >builder.log 2>&1) ||
    { tail -20 "$build/builder.log" >&2; die "building the OpenTelemetry Collector failed (log: $build/builder.log)"; }
  install -m 0755 "$build/otelcol-cgtrace/otelcol-cgtrace" "$GOBIN_DIR/otelcol-cgtrace"
  echo "$stamp" >"$GOBIN_DIR/.otelcol-version"
  rm -rf "$build"
}

# containerd (with its runc shim and ctr) and crictl, from the Go module proxy, for the real CRI
# node test (tests/tests/cri.rs); Debian's runc runs the containers.
CONTAINERD_VERSION=v2.4.2
CRICTL_VERSION=v1.37.0
install_cri() {
  local stamp="$CONTAINERD_VERSION $CRICTL_VERSION"
  if [[ -x $GOBIN_DIR/containerd && -x $GOBIN_DIR/containerd-shim-runc-v2 && -x $GOBIN_DIR/ctr &&
        -x $GOBIN_DIR/crictl && $(cat "$GOBIN_DIR/.cri-version" 2>/dev/null) == "$stamp" ]]; then
    say "containerd $CONTAINERD_VERSION, crictl $CRICTL_VERSION: present"; return
  fi
  say "containerd $CONTAINERD_VERSION, crictl $CRICTL_VERSION: building from the Go module proxy"
  mkdir -p "$GOBIN_DIR"
  local m=github.com/containerd/containerd/v2/cmd
  GOBIN="$GOBIN_DIR" CGO_ENABLED=0 GOFLAGS=-mod=mod go install \
    "$m/containerd@$CONTAINERD_VERSION" "$m/containerd-shim-runc-v2@$CONTAINERD_VERSION" "$m/ctr@$CONTAINERD_VERSION"
  GOBIN="$GOBIN_DIR" CGO_ENABLED=0 GOFLAGS=-mod=mod go install "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  echo "$stamp" >"$GOBIN_DIR/.cri-version"
}

# kubelet from the Go module proxy: k8s.io/kubernetes points its 33 staging modules at ./staging,
# which a module download lacks, so tests/kubelet/go.mod requires it with each replaced by its
# published k8s.io/<name> (go.sum pinned). ~5-10 min on two cores; the version set with -ldflags.
KUBELET_VERSION=v1.37.2
install_kubelet() {
  local stamp; stamp="$KUBELET_VERSION $(cat tests/kubelet/go.mod tests/kubelet/go.sum | sha256sum | cut -c1-16)"
  if [[ -x $GOBIN_DIR/kubelet && $(cat "$GOBIN_DIR/.kubelet-version" 2>/dev/null) == "$stamp" ]]; then
    say "kubelet $KUBELET_VERSION: present"; return
  fi
  say "kubelet $KUBELET_VERSION: building from the Go module proxy"
  mkdir -p "$GOBIN_DIR"
  local minor=${KUBELET_VERSION#v1.}; minor=${minor%%.*}
  (cd "$here/tests/kubelet" && CGO_ENABLED=0 go build -mod=mod -trimpath -o "$GOBIN_DIR/kubelet.new" -ldflags \
    "-s -w -X k8s.io/component-base/version.gitVersion=$KUBELET_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
    k8s.io/kubernetes/cmd/kubelet)
  mv "$GOBIN_DIR/kubelet.new" "$GOBIN_DIR/kubelet"
  echo "$stamp" >"$GOBIN_DIR/.kubelet-version"
}

deps() {
  install_apt
  install_toolchain "$STABLE" rustfmt clippy
  install_toolchain "$NIGHTLY" rust-src rustfmt clippy
  install_bpf_linker
}

# The real programs the tests run beside cgtrace, built from the Go module proxy (not needed to
# run it: `run` skips them).
test_deps() {
  install_cargo_fuzz
  install_otlp_receiver
  install_helm
  install_otelcol
  install_cri
  install_kubelet
}

# A short fuzz run of every target from its committed seed corpus (copied, so new inputs stay
# out of the tree): the whole reader (play and report a recording) and each layer alone (chunk
# framing, record parsing, window JSON, names and escaping). A crash fails the suite; its input
# is in fuzz/artifacts/<target>/. Inputs up to 1 MiB: room for many chunks, compression bombs and
# overlapping headers (libFuzzer's default, 4 KiB, holds one chunk at most).
FUZZ_TARGETS=(reader chunks records window names sequence)
fuzz_short() {
  fuzz_targets $(( ${FUZZ_SECONDS:-60} / ${#FUZZ_TARGETS[@]} )) -1
}

# The fuzz benchmark (not a CI step): every target until FUZZ_RUNS executions (10 M) or
# FUZZ_BENCH_SECONDS (1 h) each, whichever comes first; docs/benchmarks.md says what it gave.
fuzz_bench() {
  fuzz_targets "${FUZZ_BENCH_SECONDS:-3600}" "${FUZZ_RUNS:-10000000}"
}

# Runs each target for at most SECS seconds and RUNS executions (-1: no bound), from a copy of its
# seed corpus; says executions, rate and time; stops at the first crash.
fuzz_targets() {
  local secs=$1 runs=$2 corpus log rc=0 t start n
  (cd fuzz && CGTRACE_EBPF_STUB=1 cargo fuzz build) || return 1
  for t in "${FUZZ_TARGETS[@]}"; do
    corpus=$(mktemp -d); log=$(mktemp); start=$SECONDS
    cp fuzz/corpus/"$t"/* "$corpus"/
    (cd fuzz && CGTRACE_EBPF_STUB=1 cargo fuzz run "$t" "$corpus" -- \
      -max_total_time="$secs" -runs="$runs" -max_len=1048576 -rss_limit_mb=2048 \
      -print_final_stats=1) >"$log" 2>&1 || rc=$?
    n=$(grep -E 'stat::number_of_executed_units' "$log" | awk '{print $2}')
    say "fuzz $t: ${n:-0} executions in $((SECONDS - start)) s ($(( ${n:-0} / (SECONDS - start + 1) ))/s), corpus $(ls "$corpus" | wc -l) inputs"
    [[ $rc == 0 ]] || tail -n 40 "$log"
    rm -rf "$corpus" "$log"
    [[ $rc == 0 ]] || return "$rc"
  done
}

# The container image: a static x86_64 musl binary (musl, not static glibc: glibc's static
# getaddrinfo needs NSS modules at run time and the image has no libc to load them from) copied
# into an image FROM scratch (deploy/image/Containerfile), built with podman (runc: crun refuses
# hybrid cgroup hosts). Tagged localhost/cgtrace:<version> and :latest.
IMAGE=localhost/cgtrace
build_image() {
  say "container image $IMAGE: static musl binary, FROM scratch (podman)"
  rustup target add --toolchain "$STABLE" x86_64-unknown-linux-musl >/dev/null
  CC_x86_64_unknown_linux_musl=musl-gcc cargo build --release --locked \
    --target x86_64-unknown-linux-musl -p cgtrace
  local ctx version
  ctx=$(mktemp -d)
  cp target/x86_64-unknown-linux-musl/release/cgtrace "$ctx/cgtrace"
  strip "$ctx/cgtrace"
  cp deploy/image/Containerfile "$ctx/"
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
  podman build -q -t "$IMAGE:$version" -t "$IMAGE:latest" -f "$ctx/Containerfile" "$ctx" >/dev/null
  rm -rf "$ctx"
  say "built $IMAGE:$version ($(podman image inspect --format '{{.Size}}' "$IMAGE:$version") bytes)"
}

build() {
  say "building cgtrace (release)"
  cargo build --release --locked -p cgtrace
}

run_tests() {
  say "format and lints"
  cargo fmt --all -- --check
  (cd cgtrace-ebpf && cargo fmt -- --check)
  (cd fuzz && cargo fmt -- --check)
  cargo clippy --locked --workspace --all-targets -- -D warnings
  (cd cgtrace-ebpf && cargo clippy --locked --release --target bpfel-unknown-none -Z build-std=core -- -D warnings)
  say "unprivileged tests (cargo test)"
  cargo test --locked
  say "deployment: helm lint and template of deploy/helm/cgtrace, the systemd unit"
  deploy/test.sh
  say "fuzzing the recording reader, whole and per layer, for ${FUZZ_SECONDS:-60} s (cargo fuzz)"
  fuzz_short
  say "privileged tests on this kernel (real cgroups, real load; every one must run)"
  CGTRACE_REQUIRE_PRIVILEGED=1 cargo test --locked --release -p cgtrace-tests -- --test-threads=1
  say "kernel matrix under QEMU (5.10, 6.1, 6.12; cgroup2): runq, throttle in fentry, kprobe and tgwalk modes, reads, advice"
  cargo xtask vm fetch
  cargo xtask vm matrix --bin target/release/cgtrace
}

case "${1:-}" in
  deps) deps; test_deps ;;
  run)
    shift; deps; build
    # The live view on a terminal; the NDJSON stream when piped (no terminal to draw on).
    if [ -t 0 ] && [ -t 1 ]; then
      say "starting cgtrace top $*"; exec target/release/cgtrace top "$@"
    fi
    say "no terminal: starting cgtrace stream $*"; exec target/release/cgtrace stream "$@" ;;
  test) deps; test_deps; build; build_image; run_tests ;;
  image) deps; build_image ;;
  fuzz-bench) deps; test_deps; fuzz_bench ;;
  *) die "usage: $0 run [ARGS…] | test | deps | image | fuzz-bench" ;;
esac
