//! `cargo xtask vm`: the QEMU kernel matrix.
//!
//! Debian cloud kernels (5.10 from bullseye, 6.1 from bookworm, 6.12 from bookworm-security) are
//! fetched with a private apt configuration into a persistent cache (`/var/cache/cgtrace-vm`, or
//! `$CGTRACE_VM_CACHE`). A run builds an initramfs in Rust (cpio newc, uncompressed) holding
//! busybox-static, the requested binaries with their shared libraries, `tests/vm/init.sh` as
//! `/init` and a guest script, boots it under QEMU TCG and streams the serial console.
//!
//! The matrix has three scenarios, each checked on the host from the captured serial log
//! (`reads`, slow pseudo-file reads and dying memcgs, is in `vm_reads.rs`):
//! `runq` (`tests/vm/runq.sh`: run-queue latency lands on the right cgroup2 paths) and
//! `throttle` (`tests/vm/throttle.sh`, one boot per throttle attach mode: cgtrace's
//! `nr_throttled` and throttled time for a cgroup with `cpu.max` 20000/100000 against the guest
//! kernel's own `cpu.stat` delta over the same run).
//!
//! Cache layout: `kernels/<k>/vmlinuz-*` and `kernels/<k>/package` (the Debian package and
//! version), `apt/<suite>/` (private apt state), `logs/<k>.log` (serial log of the last `run` or
//! runq boot) and `logs/<k>-throttle-<mode>.log` (of the last throttle boot).
use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use cgtrace_common::modes::ThrottleMode;
use clap::{Args, Subcommand};
use serde_json::Value;

use crate::vm_reads::{self, READS_SCENARIO, ReadsReport, check_reads};

const DEFAULT_CACHE: &str = "/var/cache/cgtrace-vm";
const BUSYBOX: &str = "/bin/busybox";
const INIT_SCRIPT: &str = include_str!("../../tests/vm/init.sh");
const RUNQ_SCENARIO: &str = include_str!("../../tests/vm/runq.sh");
const THROTTLE_SCENARIO: &str = include_str!("../../tests/vm/throttle.sh");
const BOOTED_MARKER: &str = "CGTRACE-VM-BOOTED";
const EXIT_MARKER: &str = "CGTRACE-VM-EXIT";
const STREAM_BEGIN: &str = "CGTRACE-STREAM-BEGIN";
const STREAM_END: &str = "CGTRACE-STREAM-END";
const KSTAT_BEFORE: &str = "CGTRACE-KSTAT-BEFORE";
const KSTAT_AFTER: &str = "CGTRACE-KSTAT-AFTER";
/// The cgroup (cgroup2 path) `tests/vm/throttle.sh` puts its quota and load in.
const THROTTLE_CGROUP: &str = "/cgtrace-vm-thr";
/// Largest relative difference allowed between our throttled time and the kernel's.
const THROTTLED_TIME_TOLERANCE: f64 = 0.02;
const KERNEL_NAMES: [&str; 3] = ["5.10", "6.1", "6.12"];

#[derive(Args)]
pub struct VmArgs {
    #[command(subcommand)]
    cmd: VmCmd,
}

#[derive(Subcommand)]
enum VmCmd {
    /// Download the Debian kernel images into the cache (skips those already there).
    Fetch {
        /// Kernels to fetch (repeat or comma-separate).
        #[arg(long, value_delimiter = ',', default_value = "all", value_parser = kernel_or_all())]
        kernel: Vec<String>,
    },
    /// Boot one kernel with the given binaries and run a guest script.
    Run(RunArgs),
    /// Run the scenarios (tests/vm/runq.sh, tests/vm/throttle.sh) with cgtrace on each kernel
    /// and check their output.
    Matrix(MatrixArgs),
}

#[derive(Args, Clone)]
struct BootOpts {
    /// Virtual CPUs.
    #[arg(long, default_value_t = 2)]
    smp: u32,
    /// Guest memory in MiB (cgtrace preallocates its BPF maps).
    #[arg(long, default_value_t = 1024)]
    mem: u32,
    /// Seconds before QEMU is killed (TCG is 5-10x slower than the host).
    #[arg(long, default_value_t = 150)]
    timeout: u64,
    /// Extra kernel command-line arguments.
    #[arg(long, default_value = "")]
    append: String,
}

#[derive(Args)]
struct RunArgs {
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(KERNEL_NAMES))]
    kernel: String,
    /// Binary to install as /bin/<file name>, with its shared libraries (repeatable).
    #[arg(long = "bin")]
    bins: Vec<PathBuf>,
    /// Host path of the script the guest runs with `sh`.
    #[arg(long)]
    script: PathBuf,
    #[command(flatten)]
    boot: BootOpts,
}

#[derive(Args)]
struct MatrixArgs {
    /// The cgtrace binary (installed in the guest as /bin/cgtrace).
    #[arg(long = "bin")]
    bin: PathBuf,
    /// Kernels to test (repeat or comma-separate).
    #[arg(long, value_delimiter = ',', default_value = "all", value_parser = kernel_or_all())]
    kernel: Vec<String>,
    /// Scenarios to run on each kernel.
    #[arg(long, value_enum, default_value = "all")]
    scenario: Scenario,
    /// Throttle attach modes to test, one boot each (repeat or comma-separate); cgtrace gets
    /// `--throttle-mode <mode>`.
    #[arg(
        long = "throttle-mode",
        value_enum,
        value_delimiter = ',',
        default_values = ["fentry", "kprobe", "tgwalk"]
    )]
    throttle_modes: Vec<ThrottleMode>,
    /// Seconds of load in the throttle scenario.
    #[arg(long, default_value_t = 6)]
    throttle_secs: u32,
    #[command(flatten)]
    boot: BootOpts,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Scenario {
    Runq,
    Throttle,
    Reads,
    All,
}

fn kernel_or_all() -> clap::builder::PossibleValuesParser {
    let mut names = KERNEL_NAMES.to_vec();
    names.push("all");
    clap::builder::PossibleValuesParser::new(names)
}

pub fn run(args: VmArgs) -> Result<()> {
    let cache = cache_dir();
    match args.cmd {
        VmCmd::Fetch { kernel } => fetch_all(&cache, &select_kernels(&kernel)).map(|_| ()),
        VmCmd::Run(args) => run_one(&cache, &args),
        VmCmd::Matrix(args) => run_matrix(&cache, &args),
    }
}

fn cache_dir() -> PathBuf {
    std::env::var_os("CGTRACE_VM_CACHE").map_or_else(|| PathBuf::from(DEFAULT_CACHE), PathBuf::from)
}

// ---------------------------------------------------------------------------------------------
// Kernels

/// One kernel of the matrix and where Debian ships it.
struct KernelSpec {
    name: &'static str,
    /// Debian release whose `<r>`, `<r>-updates` and `<r>-security` suites are searched.
    release: &'static str,
    /// Meta package whose dependency is the current image package.
    meta: &'static str,
    /// What the resolved image package must start with.
    package_prefix: &'static str,
}

const KERNELS: [KernelSpec; 3] = [
    KernelSpec {
        name: "5.10",
        release: "bullseye",
        meta: "linux-image-cloud-amd64",
        package_prefix: "linux-image-5.10.0-",
    },
    KernelSpec {
        name: "6.1",
        release: "bookworm",
        meta: "linux-image-cloud-amd64",
        package_prefix: "linux-image-6.1.0-",
    },
    KernelSpec {
        // Served by bookworm-security as linux-image-6.12.*+deb12-cloud-amd64.
        name: "6.12",
        release: "bookworm",
        meta: "linux-image-6.12-cloud-amd64",
        package_prefix: "linux-image-6.12.",
    },
];

fn kernel_spec(name: &str) -> Result<&'static KernelSpec> {
    KERNELS
        .iter()
        .find(|k| k.name == name)
        .with_context(|| format!("unknown kernel {name}"))
}

fn select_kernels(names: &[String]) -> Vec<&'static KernelSpec> {
    if names.iter().any(|n| n == "all") {
        return KERNELS.iter().collect();
    }
    KERNELS
        .iter()
        .filter(|k| names.iter().any(|n| n == k.name))
        .collect()
}

/// A kernel image in the cache.
struct CachedKernel {
    vmlinuz: PathBuf,
    /// "<package> <version>" as recorded at fetch time.
    package: String,
}

fn kernel_dir(cache: &Path, spec: &KernelSpec) -> PathBuf {
    cache.join("kernels").join(spec.name)
}

fn cached_kernel(cache: &Path, spec: &KernelSpec) -> Result<Option<CachedKernel>> {
    let dir = kernel_dir(cache, spec);
    if !dir.is_dir() {
        return Ok(None);
    }
    for entry in fs::read_dir(&dir)? {
        let path = entry?.path();
        if file_name(&path).starts_with("vmlinuz-") {
            let package = fs::read_to_string(dir.join("package")).unwrap_or_default();
            let package = package.trim().to_string();
            return Ok(Some(CachedKernel {
                vmlinuz: path,
                package,
            }));
        }
    }
    Ok(None)
}

fn fetch_all(cache: &Path, specs: &[&'static KernelSpec]) -> Result<Vec<CachedKernel>> {
    let mut updated = HashSet::new();
    let mut mirrors = None;
    let mut out = Vec::new();
    for spec in specs {
        if let Some(have) = cached_kernel(cache, spec)? {
            println!(
                "have {}: {} ({})",
                spec.name,
                have.vmlinuz.display(),
                have.package
            );
            out.push(have);
            continue;
        }
        let mirrors = match &mut mirrors {
            Some(m) => m,
            slot @ None => slot.insert(apt::system_mirrors()?),
        };
        let apt = apt::PrivateApt::new(cache, spec.release, mirrors)?;
        if updated.insert(spec.release) {
            apt.update()?;
        }
        out.push(fetch_kernel(cache, spec, &apt)?);
    }
    Ok(out)
}

fn ensure_kernel(cache: &Path, spec: &'static KernelSpec) -> Result<CachedKernel> {
    let mut got = fetch_all(cache, &[spec])?;
    Ok(got.remove(0))
}

fn fetch_kernel(cache: &Path, spec: &KernelSpec, apt: &apt::PrivateApt) -> Result<CachedKernel> {
    let package = apt.resolve_dependency(spec.meta, spec.package_prefix)?;
    println!("fetching {}: {package}", spec.name);
    let deb = apt.download(&package)?;
    let version = command_stdout(Command::new("dpkg-deb").arg("-f").arg(&deb).arg("Version"))?;
    let package = format!("{package} {}", version.trim());
    let dir = kernel_dir(cache, spec);
    let unpack = cache.join(format!("unpack-{}", std::process::id()));
    let _ = fs::remove_dir_all(&unpack);
    run_command(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpack))?;
    let vmlinuz = find_vmlinuz(&unpack.join("boot"))?;
    fs::create_dir_all(&dir)?;
    let dest = dir.join(file_name(&vmlinuz));
    fs::write(dir.join("package"), format!("{package}\n"))?;
    fs::rename(&vmlinuz, &dest)?;
    fs::remove_dir_all(&unpack)?;
    fs::remove_file(&deb)?;
    println!("got {}: {}", spec.name, dest.display());
    Ok(CachedKernel {
        vmlinuz: dest,
        package,
    })
}

fn find_vmlinuz(boot: &Path) -> Result<PathBuf> {
    for entry in fs::read_dir(boot).with_context(|| format!("reading {}", boot.display()))? {
        let path = entry?.path();
        if file_name(&path).starts_with("vmlinuz-") {
            return Ok(path);
        }
    }
    bail!("no vmlinuz-* in {}", boot.display())
}

/// Private apt configuration: the system's sources and state stay untouched.
mod apt {
    use super::*;

    /// Mirror URIs taken from the system's apt sources.
    pub struct Mirrors {
        pub archive: String,
        pub security: String,
        pub signed_by: Option<String>,
    }

    /// One `deb` source entry (from either the one-line or the deb822 format).
    #[derive(Debug, PartialEq)]
    pub struct Source {
        pub uri: String,
        pub suites: Vec<String>,
        pub signed_by: Option<String>,
    }

    pub fn system_mirrors() -> Result<Mirrors> {
        let codename = host_codename()?;
        let sources = system_sources()?;
        mirrors_for(&codename, &sources)
    }

    fn host_codename() -> Result<String> {
        let text = fs::read_to_string("/etc/os-release").context("reading /etc/os-release")?;
        text.lines()
            .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
            .map(|v| v.trim_matches('"').to_string())
            .filter(|v| !v.is_empty())
            .context("no VERSION_CODENAME in /etc/os-release (is this Debian?)")
    }

    fn system_sources() -> Result<Vec<Source>> {
        let mut sources = Vec::new();
        let main = Path::new("/etc/apt/sources.list");
        if main.exists() {
            sources.extend(parse_one_line(&fs::read_to_string(main)?));
        }
        let mut parts: Vec<PathBuf> = match fs::read_dir("/etc/apt/sources.list.d") {
            Ok(dir) => dir.filter_map(|e| e.ok().map(|e| e.path())).collect(),
            Err(_) => Vec::new(),
        };
        parts.sort();
        for path in parts {
            let text = || fs::read_to_string(&path);
            match path.extension().and_then(|e| e.to_str()) {
                Some("list") => sources.extend(parse_one_line(&text()?)),
                Some("sources") => sources.extend(parse_deb822(&text()?)),
                _ => {}
            }
        }
        Ok(sources)
    }

    /// The archive serves `<codename>`, the security archive `<codename>-security`.
    pub fn mirrors_for(codename: &str, sources: &[Source]) -> Result<Mirrors> {
        let with_suite = |suite: &str| sources.iter().find(|s| s.suites.iter().any(|x| x == suite));
        let archive = with_suite(codename)
            .with_context(|| format!("no apt source for suite {codename} in /etc/apt"))?;
        let security = with_suite(&format!("{codename}-security"))
            .with_context(|| format!("no apt source for suite {codename}-security in /etc/apt"))?;
        Ok(Mirrors {
            archive: archive.uri.trim_end_matches('/').to_string(),
            security: security.uri.trim_end_matches('/').to_string(),
            signed_by: archive.signed_by.clone(),
        })
    }

    /// `deb [opts] uri suite component...` lines.
    pub fn parse_one_line(text: &str) -> Vec<Source> {
        let mut out = Vec::new();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            let Some(rest) = line.strip_prefix("deb ") else {
                continue;
            };
            let (opts, rest) = match rest.trim_start().strip_prefix('[') {
                Some(r) => r.split_once(']').unwrap_or((r, "")),
                None => ("", rest),
            };
            let mut words = rest.split_whitespace();
            let (Some(uri), Some(suite)) = (words.next(), words.next()) else {
                continue;
            };
            let signed_by = opts
                .split_whitespace()
                .find_map(|o| o.strip_prefix("signed-by=").map(str::to_string));
            out.push(Source {
                uri: uri.to_string(),
                suites: vec![suite.to_string()],
                signed_by,
            });
        }
        out
    }

    /// deb822 stanzas (`Types:`, `URIs:`, `Suites:`, `Signed-By:`, `Enabled:`).
    pub fn parse_deb822(text: &str) -> Vec<Source> {
        let mut out = Vec::new();
        for stanza in text.split("\n\n") {
            let mut fields = BTreeMap::new();
            for line in stanza.lines().filter(|l| !l.starts_with('#')) {
                if let Some((k, v)) = line.split_once(':').filter(|_| !line.starts_with(' ')) {
                    fields.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
                }
            }
            let words = |k: &str| -> Vec<String> {
                fields
                    .get(k)
                    .map(|v| v.split_whitespace().map(str::to_string).collect())
                    .unwrap_or_default()
            };
            let enabled = fields.get("enabled").is_none_or(|v| v != "no");
            if !enabled || !words("types").iter().any(|t| t == "deb") {
                continue;
            }
            let signed_by = fields
                .get("signed-by")
                .filter(|v| v.starts_with('/'))
                .cloned();
            for uri in words("uris") {
                out.push(Source {
                    uri,
                    suites: words("suites"),
                    signed_by: signed_by.clone(),
                });
            }
        }
        out
    }

    pub struct PrivateApt {
        root: PathBuf,
    }

    impl PrivateApt {
        pub fn new(cache: &Path, release: &str, mirrors: &Mirrors) -> Result<Self> {
            let root = cache.join("apt").join(release);
            for dir in ["lists/partial", "cache/archives/partial", "debs"] {
                fs::create_dir_all(root.join(dir))?;
            }
            fs::write(root.join("status"), "")?;
            fs::write(root.join("sources.list"), sources_list(release, mirrors))?;
            Ok(Self { root })
        }

        fn command(&self, tool: &str) -> Command {
            let r = |p: &str| self.root.join(p).display().to_string();
            let mut cmd = Command::new(tool);
            for (key, value) in [
                ("Dir::Etc::SourceList", r("sources.list")),
                ("Dir::Etc::SourceParts", "/dev/null".into()),
                ("Dir::Etc::Preferences", "/dev/null".into()),
                ("Dir::Etc::PreferencesParts", "/dev/null".into()),
                ("Dir::State::Lists", r("lists")),
                ("Dir::State::status", r("status")),
                ("Dir::Cache", r("cache")),
                ("Dir::Cache::archives", r("cache/archives")),
                ("APT::Sandbox::User", "root".into()),
                // Only the Packages indices are needed.
                ("Acquire::Languages", "none".into()),
                (
                    "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled",
                    "false".into(),
                ),
                (
                    "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled",
                    "false".into(),
                ),
            ] {
                cmd.arg("-o").arg(format!("{key}={value}"));
            }
            cmd
        }

        pub fn update(&self) -> Result<()> {
            run_command(self.command("apt-get").args(["-q", "update"]))
        }

        /// The first dependency of `meta` that starts with `prefix`.
        pub fn resolve_dependency(&self, meta: &str, prefix: &str) -> Result<String> {
            let out = command_stdout(self.command("apt-cache").args(["depends", meta]))?;
            out.lines()
                .filter_map(|l| l.trim().strip_prefix("Depends: "))
                .find(|p| p.starts_with(prefix))
                .map(str::to_string)
                .with_context(|| format!("{meta} depends on no {prefix}*:\n{out}"))
        }

        /// Downloads `package` into `debs/` and returns the file.
        pub fn download(&self, package: &str) -> Result<PathBuf> {
            let debs = self.root.join("debs");
            for stale in fs::read_dir(&debs)? {
                fs::remove_file(stale?.path())?;
            }
            run_command(
                self.command("apt-get")
                    .args(["-q", "download", package])
                    .current_dir(&debs),
            )?;
            let deb = fs::read_dir(&debs)?
                .next()
                .context("apt-get download left no file")??;
            Ok(deb.path())
        }
    }

    pub fn sources_list(release: &str, m: &Mirrors) -> String {
        let opts = m
            .signed_by
            .as_ref()
            .map(|k| format!("[signed-by={k}] "))
            .unwrap_or_default();
        format!(
            "deb {opts}{a} {release} main\ndeb {opts}{a} {release}-updates main\n\
             deb {opts}{s} {release}-security main\n",
            a = m.archive,
            s = m.security
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Initramfs

/// Builds a cpio "newc" archive (uncompressed; the kernel unpacks it as is).
mod cpio {
    use super::*;

    enum Node {
        Dir,
        File { src: PathBuf, mode: u32 },
        Data { bytes: Vec<u8>, mode: u32 },
        Symlink(String),
        CharDev(u32, u32),
    }

    #[derive(Default)]
    pub struct Archive {
        /// Guest path without the leading '/'; sorted order puts parents first.
        nodes: BTreeMap<String, Node>,
    }

    impl Archive {
        fn insert(&mut self, path: &str, node: Node) {
            let path = path.trim_start_matches('/');
            let mut parent = Path::new(path).parent();
            while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
                self.nodes
                    .entry(p.to_string_lossy().into_owned())
                    .or_insert(Node::Dir);
                parent = p.parent();
            }
            self.nodes.insert(path.to_string(), node);
        }

        pub fn dir(&mut self, path: &str) {
            self.insert(path, Node::Dir);
        }

        pub fn file(&mut self, path: &str, src: &Path, mode: u32) {
            self.insert(
                path,
                Node::File {
                    src: src.to_path_buf(),
                    mode,
                },
            );
        }

        pub fn data(&mut self, path: &str, bytes: impl Into<Vec<u8>>, mode: u32) {
            self.insert(
                path,
                Node::Data {
                    bytes: bytes.into(),
                    mode,
                },
            );
        }

        pub fn symlink(&mut self, path: &str, target: &str) {
            self.insert(path, Node::Symlink(target.to_string()));
        }

        pub fn char_dev(&mut self, path: &str, major: u32, minor: u32) {
            self.insert(path, Node::CharDev(major, minor));
        }

        pub fn write_to(&self, out: &mut impl Write) -> Result<()> {
            for (ino, (name, node)) in (1u32..).zip(&self.nodes) {
                write_node(out, ino, name, node)?;
            }
            let trailer = Header {
                nlink: 1,
                ..Header::default()
            };
            trailer.write(out, "TRAILER!!!")?;
            Ok(())
        }
    }

    fn write_node(out: &mut impl Write, ino: u32, name: &str, node: &Node) -> Result<()> {
        let mut h = Header {
            ino,
            nlink: 1,
            ..Header::default()
        };
        match node {
            Node::Dir => {
                h.mode = libc::S_IFDIR | 0o755;
                h.nlink = 2;
                h.write(out, name)
            }
            Node::Data { bytes, mode } => {
                h.mode = libc::S_IFREG | mode;
                h.write_with_data(out, name, bytes)
            }
            Node::Symlink(target) => {
                h.mode = libc::S_IFLNK | 0o777;
                h.write_with_data(out, name, target.as_bytes())
            }
            Node::CharDev(major, minor) => {
                h.mode = libc::S_IFCHR | 0o600;
                (h.rdev_major, h.rdev_minor) = (*major, *minor);
                h.write(out, name)
            }
            Node::File { src, mode } => {
                h.mode = libc::S_IFREG | mode;
                let mut file =
                    File::open(src).with_context(|| format!("opening {}", src.display()))?;
                h.size =
                    u32::try_from(file.metadata()?.len()).context("file too large for cpio")?;
                h.write(out, name)?;
                let copied = io::copy(&mut file, out)?;
                ensure!(
                    copied == u64::from(h.size),
                    "{} changed while copying",
                    src.display()
                );
                pad(out, copied as usize)
            }
        }
    }

    #[derive(Default)]
    struct Header {
        ino: u32,
        mode: u32,
        nlink: u32,
        size: u32,
        rdev_major: u32,
        rdev_minor: u32,
    }

    impl Header {
        fn write(&self, out: &mut impl Write, name: &str) -> Result<()> {
            let namesize = name.len() + 1;
            let fields = [
                self.ino,
                self.mode,
                0, // uid
                0, // gid
                self.nlink,
                0, // mtime
                self.size,
                0, // devmajor
                0, // devminor
                self.rdev_major,
                self.rdev_minor,
                u32::try_from(namesize)?,
                0, // check
            ];
            let mut header = String::from("070701");
            for f in fields {
                header.push_str(&format!("{f:08X}"));
            }
            out.write_all(header.as_bytes())?;
            out.write_all(name.as_bytes())?;
            out.write_all(&[0])?;
            pad(out, header.len() + namesize)
        }

        fn write_with_data(mut self, out: &mut impl Write, name: &str, data: &[u8]) -> Result<()> {
            self.size = u32::try_from(data.len())?;
            self.write(out, name)?;
            out.write_all(data)?;
            pad(out, data.len())
        }
    }

    /// Pads to the 4-byte alignment newc needs after the header+name and after the data.
    fn pad(out: &mut impl Write, written: usize) -> Result<()> {
        let n = (4 - written % 4) % 4;
        out.write_all(&[0; 3][..n])?;
        Ok(())
    }
}

/// Shared libraries (and the dynamic loader) `bin` needs, per `ldd`; empty for static binaries
/// and scripts.
fn shared_libraries(bin: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(bin)
        .output()
        .context("running ldd")?;
    parse_ldd(&String::from_utf8_lossy(&out.stdout))
}

fn parse_ldd(text: &str) -> Result<Vec<PathBuf>> {
    let mut libs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let path = match line.split_once("=>") {
            Some((name, rest)) => {
                let target = rest.split_whitespace().next().unwrap_or("");
                ensure!(target != "not", "ldd: {} not found", name.trim());
                target
            }
            None => line.split_whitespace().next().unwrap_or(""),
        };
        if path.starts_with('/') {
            libs.push(PathBuf::from(path));
        }
    }
    Ok(libs)
}

/// A binary to install in the guest as `/bin/<guest_name>`.
struct GuestBin {
    host: PathBuf,
    guest_name: String,
}

fn build_initramfs(out: &Path, bins: &[GuestBin], scenario: &[u8]) -> Result<()> {
    let mut cpio = cpio::Archive::default();
    for dir in ["dev", "proc", "sys", "tmp", "run", "etc", "root"] {
        cpio.dir(dir);
    }
    cpio.char_dev("dev/console", 5, 1);
    cpio.char_dev("dev/null", 1, 3);
    add_busybox(&mut cpio)?;
    for bin in bins {
        ensure!(
            bin.host.is_file(),
            "--bin {} is not a file",
            bin.host.display()
        );
        cpio.file(&format!("bin/{}", bin.guest_name), &bin.host, 0o755);
        for lib in shared_libraries(&bin.host)? {
            cpio.file(&lib.to_string_lossy(), &lib, 0o755);
        }
    }
    cpio.data("init", INIT_SCRIPT, 0o755);
    cpio.data("scenario.sh", scenario, 0o755);
    let mut w = BufWriter::new(File::create(out)?);
    cpio.write_to(&mut w)?;
    w.flush()?;
    Ok(())
}

fn add_busybox(cpio: &mut cpio::Archive) -> Result<()> {
    ensure!(
        Path::new(BUSYBOX).exists(),
        "{BUSYBOX} missing: apt-get install busybox-static"
    );
    cpio.file("bin/busybox", Path::new(BUSYBOX), 0o755);
    let applets = command_stdout(Command::new(BUSYBOX).arg("--list"))?;
    for applet in applets
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox")
    {
        cpio.symlink(&format!("bin/{applet}"), "busybox");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// QEMU

/// What one boot produced.
struct Outcome {
    lines: Vec<String>,
    /// Exit code of the guest script, from the `CGTRACE-VM-EXIT` line.
    exit_code: Option<i32>,
    /// `uname -r` of the guest, from the `CGTRACE-VM-BOOTED` line.
    uname: Option<String>,
    booted_after: Option<Duration>,
    elapsed: Duration,
    timed_out: bool,
}

impl Outcome {
    fn passed(&self) -> bool {
        self.exit_code == Some(0)
    }

    fn summary(&self) -> String {
        let boot = self
            .booted_after
            .map_or("-".into(), |d| format!("{:.1}s", d.as_secs_f64()));
        let exit = self.exit_code.map_or("none".into(), |c| c.to_string());
        let timeout = if self.timed_out { ", TIMED OUT" } else { "" };
        format!(
            "init after {boot}, total {:.1}s, guest exit {exit}{timeout}",
            self.elapsed.as_secs_f64()
        )
    }
}

/// Builds the initramfs, boots `kernel` and streams its console to stdout and
/// `logs/<label>.log`.
fn boot(
    cache: &Path,
    spec: &'static KernelSpec,
    label: &str,
    bins: &[GuestBin],
    scenario: &[u8],
    opts: &BootOpts,
) -> Result<Outcome> {
    let kernel = ensure_kernel(cache, spec)?;
    let runs = cache.join("runs");
    fs::create_dir_all(&runs)?;
    fs::create_dir_all(cache.join("logs"))?;
    let initrd = runs.join(format!("{label}-{}.cpio", std::process::id()));
    let log = cache.join("logs").join(format!("{label}.log"));
    build_initramfs(&initrd, bins, scenario)?;
    // Under TCG a guest kernel occasionally locks up (soft lockups, RCU stalls) before the
    // scenario gives a verdict, or dies while booting (an int3 oops in text patching was seen on
    // 6.12) before /init runs; that says nothing about cgtrace, so such a boot is tried once more.
    // A guest that dies after /init started is never retried: that could be cgtrace.
    let mut attempt = 1;
    let result = loop {
        let child = qemu_command(&kernel.vmlinuz, &initrd, opts)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting qemu-system-x86_64 (apt-get install qemu-system-x86)")?;
        let outcome = watch(child, &log, Duration::from_secs(opts.timeout));
        match outcome {
            Ok(o)
                if o.exit_code.is_none()
                    && (o.timed_out || o.booted_after.is_none())
                    && attempt == 1 =>
            {
                println!(
                    "xtask: {label}: the guest {} before a verdict (TCG); booting it once more",
                    if o.booted_after.is_none() {
                        "died while booting"
                    } else {
                        "hung"
                    }
                );
                attempt += 1;
            }
            other => break other,
        }
    };
    let _ = fs::remove_file(&initrd);
    println!("serial log: {}", log.display());
    result
}

fn qemu_command(vmlinuz: &Path, initrd: &Path, opts: &BootOpts) -> Command {
    let mut cmdline = String::from("console=ttyS0 rdinit=/init panic=-1 quiet");
    if !opts.append.is_empty() {
        cmdline = format!("{cmdline} {}", opts.append);
    }
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args([
        "-accel",
        "tcg,tb-size=256",
        "-nographic",
        "-nic",
        "none",
        "-no-reboot",
    ])
    .args(["-smp", &opts.smp.to_string(), "-m", &opts.mem.to_string()])
    .arg("-kernel")
    .arg(vmlinuz)
    .arg("-initrd")
    .arg(initrd)
    .args(["-append", &cmdline]);
    cmd
}

/// Streams the console until QEMU exits or `timeout` passes (then QEMU is killed).
fn watch(mut child: Child, log: &Path, timeout: Duration) -> Result<Outcome> {
    let start = Instant::now();
    let mut log = BufWriter::new(File::create(log)?);
    let lines_rx = spawn_line_reader(child.stdout.take().context("qemu stdout")?);
    let mut outcome = Outcome {
        lines: Vec::new(),
        exit_code: None,
        uname: None,
        booted_after: None,
        elapsed: Duration::ZERO,
        timed_out: false,
    };
    loop {
        match lines_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => record_line(&mut outcome, &mut log, line, start)?,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if !outcome.timed_out && start.elapsed() > timeout {
            println!("xtask: timeout after {}s, killing qemu", timeout.as_secs());
            outcome.timed_out = true;
            let _ = child.kill();
        }
    }
    child.wait()?;
    outcome.elapsed = start.elapsed();
    log.flush()?;
    Ok(outcome)
}

fn spawn_line_reader(stdout: impl io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut buf = Vec::new();
        while matches!(reader.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
            let line = String::from_utf8_lossy(&buf)
                .trim_end_matches(['\r', '\n'])
                .to_string();
            if tx.send(line).is_err() {
                break;
            }
            buf.clear();
        }
    });
    rx
}

fn record_line(
    outcome: &mut Outcome,
    log: &mut impl Write,
    line: String,
    start: Instant,
) -> Result<()> {
    let line = strip_escapes(&line);
    println!("{line}");
    writeln!(log, "{line}")?;
    if let Some(rest) = marker_value(&line, BOOTED_MARKER) {
        outcome.booted_after.get_or_insert(start.elapsed());
        outcome.uname = Some(rest.to_string());
    }
    if let Some(code) = marker_value(&line, EXIT_MARKER) {
        outcome.exit_code = code.parse().ok();
    }
    outcome.lines.push(line);
    Ok(())
}

/// `line` without carriage returns and terminal escape sequences (SeaBIOS resets and clears
/// the screen).
fn strip_escapes(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\r' {
            continue;
        } else if c != '\x1b' {
            out.push(c);
        } else if chars.next() == Some('[') {
            // CSI: parameters up to a final byte in '@'..='~'.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

/// The word after `marker` in `line`, if the line contains it.
fn marker_value<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    let (_, rest) = line.split_once(marker)?;
    rest.split_whitespace().next()
}

// ---------------------------------------------------------------------------------------------
// Subcommands

fn run_one(cache: &Path, args: &RunArgs) -> Result<()> {
    let spec = kernel_spec(&args.kernel)?;
    let bins: Vec<GuestBin> = args
        .bins
        .iter()
        .map(|p| GuestBin {
            host: p.clone(),
            guest_name: file_name(p),
        })
        .collect();
    let script = &args.script;
    let scenario = fs::read(script).with_context(|| format!("reading {}", script.display()))?;
    let outcome = boot(cache, spec, spec.name, &bins, &scenario, &args.boot)?;
    println!("{}: {}", spec.name, outcome.summary());
    ensure!(
        outcome.passed(),
        "{}: no `{EXIT_MARKER} 0` in the serial log",
        spec.name
    );
    Ok(())
}

fn run_matrix(cache: &Path, args: &MatrixArgs) -> Result<()> {
    let bins = [GuestBin {
        host: args.bin.clone(),
        guest_name: "cgtrace".into(),
    }];
    let runq = matches!(args.scenario, Scenario::Runq | Scenario::All);
    let throttle = matches!(args.scenario, Scenario::Throttle | Scenario::All);
    let reads = matches!(args.scenario, Scenario::Reads | Scenario::All);
    let mut reads_rows: Vec<(&'static str, String, ReadsReport)> = Vec::new();
    let mut rows = Vec::new();
    let mut throttle_rows = Vec::new();
    for spec in select_kernels(&args.kernel) {
        if runq {
            println!("=== kernel {} ===", spec.name);
            let row = match boot(
                cache,
                spec,
                spec.name,
                &bins,
                RUNQ_SCENARIO.as_bytes(),
                &args.boot,
            ) {
                Ok(outcome) => matrix_row(spec, &outcome),
                Err(e) => MatrixRow::error(spec, format!("{e:#}")),
            };
            rows.push(row);
        }
        if reads {
            println!("=== kernel {} reads ===", spec.name);
            let label = format!("{}-reads", spec.name);
            let mut opts = args.boot.clone();
            opts.append = format!(
                "{} cgtrace.reads_mode={}",
                opts.append,
                vm_reads::expected_mode(spec.name)
            )
            .trim()
            .to_string();
            let report = match boot(cache, spec, &label, &bins, READS_SCENARIO.as_bytes(), &opts) {
                Ok(outcome) => {
                    let mut failures = Vec::new();
                    if !outcome.passed() {
                        failures.push(format!("guest: {}", outcome.summary()));
                    }
                    let objects = stream_objects(&outcome.lines, &mut failures);
                    let r = check_reads(spec.name, objects, &outcome.lines, failures);
                    reads_rows.push((spec.name, outcome_timing(&outcome), r));
                    None
                }
                Err(e) => Some(e),
            };
            if let Some(e) = report {
                reads_rows.push((
                    spec.name,
                    "-".into(),
                    ReadsReport {
                        failures: vec![format!("{e:#}")],
                        ..ReadsReport::default()
                    },
                ));
            }
        }
        if !throttle {
            continue;
        }
        for &mode in &args.throttle_modes {
            println!("=== kernel {} throttle {} ===", spec.name, mode.as_str());
            let mut opts = args.boot.clone();
            opts.append = format!(
                "{} cgtrace.throttle_mode={} cgtrace.throttle_secs={}",
                opts.append,
                mode.as_str(),
                args.throttle_secs
            )
            .trim()
            .to_string();
            let label = format!("{}-throttle-{}", spec.name, mode.as_str());
            let scenario = THROTTLE_SCENARIO.as_bytes();
            let row = match boot(cache, spec, &label, &bins, scenario, &opts) {
                Ok(outcome) => throttle_row(spec, mode, &outcome),
                Err(e) => ThrottleRow::error(spec, mode, format!("{e:#}")),
            };
            throttle_rows.push(row);
        }
    }
    print_table(&rows, &throttle_rows);
    print_reads_table(&reads_rows);
    let failed = rows.iter().filter(|r| !r.failures.is_empty()).count()
        + reads_rows
            .iter()
            .filter(|r| !r.2.failures.is_empty())
            .count()
        + throttle_rows
            .iter()
            .filter(|r| !r.failures.is_empty())
            .count();
    let total = rows.len() + throttle_rows.len() + reads_rows.len();
    println!("{} passed, {failed} failed", total - failed);
    if failed > 0 {
        // The summary stays the last line of the output.
        std::process::exit(1);
    }
    Ok(())
}

struct MatrixRow {
    kernel: &'static str,
    uname: String,
    timing: String,
    report: Option<StreamReport>,
    failures: Vec<String>,
}

impl MatrixRow {
    fn error(spec: &'static KernelSpec, error: String) -> Self {
        let (uname, timing) = ("-".into(), "-".into());
        Self {
            kernel: spec.name,
            uname,
            timing,
            report: None,
            failures: vec![error],
        }
    }
}

fn matrix_row(spec: &'static KernelSpec, outcome: &Outcome) -> MatrixRow {
    let report = check_stream(spec.name, &outcome.lines);
    let mut failures = report.failures.clone();
    if !outcome.passed() {
        failures.insert(0, format!("guest: {}", outcome.summary()));
    }
    MatrixRow {
        kernel: spec.name,
        uname: outcome.uname.clone().unwrap_or_else(|| "-".into()),
        timing: outcome_timing(outcome),
        report: Some(report),
        failures,
    }
}

/// "<seconds to init>/<seconds in total>" of one boot.
fn outcome_timing(outcome: &Outcome) -> String {
    let boot = outcome
        .booted_after
        .map_or("-".into(), |d| format!("{:.1}", d.as_secs_f64()));
    format!("{boot}/{:.1}", outcome.elapsed.as_secs_f64())
}

struct ThrottleRow {
    kernel: &'static str,
    mode: ThrottleMode,
    uname: String,
    timing: String,
    report: Option<ThrottleReport>,
    failures: Vec<String>,
}

impl ThrottleRow {
    fn error(spec: &'static KernelSpec, mode: ThrottleMode, error: String) -> Self {
        Self {
            kernel: spec.name,
            mode,
            uname: "-".into(),
            timing: "-".into(),
            report: None,
            failures: vec![error],
        }
    }
}

fn throttle_row(spec: &'static KernelSpec, mode: ThrottleMode, outcome: &Outcome) -> ThrottleRow {
    let report = check_throttle(spec.name, mode, &outcome.lines);
    let mut failures = report.failures.clone();
    if !outcome.passed() {
        failures.insert(0, format!("guest: {}", outcome.summary()));
    }
    ThrottleRow {
        kernel: spec.name,
        mode,
        uname: outcome.uname.clone().unwrap_or_else(|| "-".into()),
        timing: outcome_timing(outcome),
        report: Some(report),
        failures,
    }
}

fn print_reads_table(rows: &[(&'static str, String, ReadsReport)]) {
    if rows.is_empty() {
        return;
    }
    println!(
        "{:<8}{:<8}{:>12}  {:<20}{:>8}{:>7}{:>11}{:>11}{:>11}{:>6}{:>18}",
        "kernel",
        "result",
        "boot/total s",
        "reads mode (want)",
        "windows",
        "reads",
        "total ms",
        "max ms",
        "flush ms",
        "slow",
        "dying ours/kern"
    );
    for (kernel, timing, r) in rows {
        println!(
            "{:<8}{:<8}{:>12}  {:<20}{:>8}{:>7}{:>11.2}{:>11.2}{:>11.2}{:>6}{:>18}",
            kernel,
            verdict(&r.failures),
            timing,
            format!(
                "{} ({})",
                r.mode.as_deref().unwrap_or("-"),
                vm_reads::expected_mode(kernel)
            ),
            r.windows,
            r.reads,
            r.read_us / 1e3,
            r.max_us / 1e3,
            r.flush_us / 1e3,
            r.slow_reads,
            format!(
                "{}/{}",
                r.dying_ours.map_or("-".into(), |v| v.to_string()),
                r.dying_kernel.map_or("-".into(), |v| v.to_string())
            )
        );
    }
    for (kernel, _, r) in rows {
        for failure in &r.failures {
            println!("  {kernel} reads: {failure}");
        }
    }
    println!();
}

fn verdict(failures: &[String]) -> &'static str {
    if failures.is_empty() { "PASS" } else { "FAIL" }
}

fn print_table(rows: &[MatrixRow], throttle_rows: &[ThrottleRow]) {
    println!();
    if !rows.is_empty() {
        println!(
            "{:<8}{:<8}{:<30}{:>12}{:>9}{:>10}{:>10}{:>9}  runq mode",
            "kernel", "result", "uname -r", "boot/total s", "windows", "busy", "quiet", "dropped"
        );
    }
    for row in rows {
        let r = row.report.clone().unwrap_or_default();
        println!(
            "{:<8}{:<8}{:<30}{:>12}{:>9}{:>10}{:>10}{:>9}  {}",
            row.kernel,
            verdict(&row.failures),
            row.uname,
            row.timing,
            r.windows,
            r.busy_count,
            r.quiet_count,
            r.dropped,
            r.runq_mode.as_deref().unwrap_or("-")
        );
    }
    if !throttle_rows.is_empty() {
        if !rows.is_empty() {
            println!();
        }
        println!(
            "{:<8}{:<8}{:<30}{:>12}  {:<25}{:>8}{:>18}{:>22}{:>8}",
            "kernel",
            "result",
            "uname -r",
            "boot/total s",
            "throttle mode (hello)",
            "windows",
            "nr_thr ours/kern",
            "thr ms ours/kern",
            "ratio"
        );
    }
    for row in throttle_rows {
        let r = row.report.clone().unwrap_or_default();
        let mode = format!(
            "{} ({})",
            row.mode.as_str(),
            r.mode.as_deref().unwrap_or("-")
        );
        let (nr, ms, ratio) = match r.kernel {
            Some(k) => (
                format!("{}/{}", r.ours_nr_throttled, k.nr_throttled),
                format!(
                    "{:.1}/{:.1}",
                    r.ours_throttled_us / 1e3,
                    k.throttled_usec as f64 / 1e3
                ),
                r.time_ratio().map_or("-".into(), |x| format!("{x:.4}")),
            ),
            None => (
                format!("{}/-", r.ours_nr_throttled),
                format!("{:.1}/-", r.ours_throttled_us / 1e3),
                "-".into(),
            ),
        };
        println!(
            "{:<8}{:<8}{:<30}{:>12}  {:<25}{:>8}{:>18}{:>22}{:>8}",
            row.kernel,
            verdict(&row.failures),
            row.uname,
            row.timing,
            mode,
            r.windows,
            nr,
            ms,
            ratio
        );
    }
    for row in rows.iter().filter(|r| !r.failures.is_empty()) {
        for failure in &row.failures {
            println!("  {}: {failure}", row.kernel);
        }
    }
    for row in throttle_rows.iter().filter(|r| !r.failures.is_empty()) {
        for failure in &row.failures {
            println!("  {} throttle/{}: {failure}", row.kernel, row.mode.as_str());
        }
    }
    println!();
}

// ---------------------------------------------------------------------------------------------
// Checking cgtrace's stream

/// What the runq scenario's NDJSON showed, and what was wrong with it.
#[derive(Clone, Default, Debug)]
struct StreamReport {
    windows: usize,
    seen: u64,
    dropped: u64,
    busy_count: u64,
    quiet_count: u64,
    runq_mode: Option<String>,
    failures: Vec<String>,
}

/// Checks the `cgtrace stream` output between the stream markers in a captured serial log.
/// Lines that do not start with '{' (kernel noise) are ignored.
fn check_stream(expected_kernel: &str, lines: &[String]) -> StreamReport {
    let mut report = StreamReport::default();
    let Some(objects) = stream_objects(lines, &mut report.failures) else {
        return report;
    };
    match objects.iter().find(|o| o["type"] == "hello") {
        Some(hello) => {
            check_hello(expected_kernel, hello, &mut report.failures);
            report.runq_mode = hello_text(hello, "/families/runq/mode");
        }
        None => report.failures.push("no hello line".into()),
    }
    let mut dropped_reported = false;
    for window in objects.iter().filter(|o| o["type"] == "window") {
        report.windows += 1;
        report.seen += window
            .pointer("/events/seen")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if let Some(d) = window.pointer("/events/dropped").and_then(Value::as_u64) {
            report.dropped += d;
            dropped_reported = true;
        }
        report.busy_count += runq_count(window, "/cgtrace-vm-busy");
        report.quiet_count += runq_count(window, "/cgtrace-vm-quiet");
    }
    let f = &mut report.failures;
    if report.windows == 0 {
        f.push("no window lines".into());
    } else if !dropped_reported {
        f.push("no window reports events.dropped".into());
    }
    if report.busy_count == 0 {
        f.push("no runq count for cgroup2 /cgtrace-vm-busy".into());
    }
    if report.quiet_count == 0 {
        f.push("no runq count for cgroup2 /cgtrace-vm-quiet".into());
    }
    report
}

/// The JSON objects between the stream markers; `None` (with a failure) if the markers are
/// missing. Lines that start with '{' but do not parse are failures.
fn stream_objects(lines: &[String], failures: &mut Vec<String>) -> Option<Vec<Value>> {
    let begin = lines.iter().position(|l| l.trim() == STREAM_BEGIN);
    let Some(begin) = begin else {
        failures.push(format!("no {STREAM_BEGIN} line"));
        return None;
    };
    let rest = &lines[begin + 1..];
    let Some(end) = rest.iter().position(|l| l.trim() == STREAM_END) else {
        failures.push(format!("no {STREAM_END} line"));
        return None;
    };
    let mut objects = Vec::new();
    for line in rest[..end]
        .iter()
        .map(|l| l.trim())
        .filter(|l| l.starts_with('{'))
    {
        match serde_json::from_str::<Value>(line) {
            Ok(v) => objects.push(v),
            Err(e) => failures.push(format!("bad JSON line ({e}): {:.120}", line)),
        }
    }
    Some(objects)
}

/// What every scenario wants of the `hello` line: pure cgroup2 and the booted kernel.
fn check_hello(expected_kernel: &str, hello: &Value, f: &mut Vec<String>) {
    let text = |p: &str| {
        hello
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("<missing>")
    };
    if text("/cgroup/layout") != "v2" {
        f.push(format!(
            "hello cgroup.layout is {}, want v2",
            text("/cgroup/layout")
        ));
    }
    if text("/cgroup/runq_hierarchy") != "cgroup2" {
        f.push(format!(
            "hello cgroup.runq_hierarchy is {}, want cgroup2",
            text("/cgroup/runq_hierarchy")
        ));
    }
    if !text("/kernel").starts_with(&format!("{expected_kernel}.")) {
        f.push(format!(
            "hello kernel is {}, want {expected_kernel}.*",
            text("/kernel")
        ));
    }
}

fn hello_text(hello: &Value, pointer: &str) -> Option<String> {
    hello
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// `runq.count` of the cgroup2 element with `path` in one window (0 if absent).
fn runq_count(window: &Value, path: &str) -> u64 {
    let Some(cgroups) = window["cgroups"].as_array() else {
        return 0;
    };
    cgroups
        .iter()
        .filter(|c| c["path"] == path && c["hierarchy"] == "cgroup2")
        .filter_map(|c| c.pointer("/runq/count").and_then(Value::as_u64))
        .sum()
}

// ---------------------------------------------------------------------------------------------
// Checking the throttle scenario

/// The throttling counters of the kernel's `cpu.stat` the throttle scenario prints.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
struct Kstat {
    nr_periods: u64,
    nr_throttled: u64,
    throttled_usec: u64,
}

impl Kstat {
    /// `self - earlier`, `None` if a counter went backwards.
    fn delta(self, earlier: Kstat) -> Option<Kstat> {
        Some(Kstat {
            nr_periods: self.nr_periods.checked_sub(earlier.nr_periods)?,
            nr_throttled: self.nr_throttled.checked_sub(earlier.nr_throttled)?,
            throttled_usec: self.throttled_usec.checked_sub(earlier.throttled_usec)?,
        })
    }
}

/// What the throttle scenario showed: ours summed over the windows, the kernel's `cpu.stat`
/// delta over the load, and what was wrong.
#[derive(Clone, Default, Debug)]
struct ThrottleReport {
    windows: usize,
    /// `families.throttle.mode` of the hello line.
    mode: Option<String>,
    /// Windows with a `throttle` object for the scenario's cgroup.
    throttle_windows: usize,
    ours_nr_periods: u64,
    ours_nr_throttled: u64,
    ours_throttled_us: f64,
    ours_episodes: u64,
    /// after - before of the guest kernel's `cpu.stat`.
    kernel: Option<Kstat>,
    failures: Vec<String>,
}

impl ThrottleReport {
    /// Our throttled time over the kernel's.
    fn time_ratio(&self) -> Option<f64> {
        let k = self.kernel?;
        (k.throttled_usec > 0).then(|| self.ours_throttled_us / k.throttled_usec as f64)
    }
}

/// Checks a captured throttle-scenario log: the hello line, the throttle attach mode, and
/// cgtrace's `nr_throttled` (equal) and throttled time (within 2 %) for the scenario's cgroup,
/// summed over all windows, against the kernel's `cpu.stat` delta, which must show throttling.
fn check_throttle(
    expected_kernel: &str,
    requested: ThrottleMode,
    lines: &[String],
) -> ThrottleReport {
    let mut report = ThrottleReport::default();
    let before = kstat_line(lines, KSTAT_BEFORE, &mut report.failures);
    let after = kstat_line(lines, KSTAT_AFTER, &mut report.failures);
    if let (Some(before), Some(after)) = (before, after) {
        report.kernel = after.delta(before);
        if report.kernel.is_none() {
            report
                .failures
                .push(format!("cpu.stat went backwards: {before:?} -> {after:?}"));
        }
    }
    let Some(objects) = stream_objects(lines, &mut report.failures) else {
        return report;
    };
    match objects.iter().find(|o| o["type"] == "hello") {
        Some(hello) => {
            check_hello(expected_kernel, hello, &mut report.failures);
            report.mode = hello_text(hello, "/families/throttle/mode");
            let got = report.mode.as_deref().unwrap_or("<missing>");
            if requested != ThrottleMode::Auto && got != requested.as_str() {
                let detail = hello_text(hello, "/families/throttle/detail").unwrap_or_default();
                report.failures.push(format!(
                    "hello families.throttle.mode is {got}, want {} ({detail})",
                    requested.as_str()
                ));
            }
        }
        None => report.failures.push("no hello line".into()),
    }
    for window in objects.iter().filter(|o| o["type"] == "window") {
        report.windows += 1;
        let Some(cgroups) = window["cgroups"].as_array() else {
            continue;
        };
        for t in cgroups
            .iter()
            .filter(|c| c["path"] == THROTTLE_CGROUP)
            .filter_map(|c| c.get("throttle").filter(|t| t.is_object()))
        {
            let n = |k: &str| t[k].as_u64().unwrap_or(0);
            report.throttle_windows += 1;
            report.ours_nr_periods += n("nr_periods");
            report.ours_nr_throttled += n("nr_throttled");
            report.ours_episodes += n("episodes");
            report.ours_throttled_us += t["throttled_us"].as_f64().unwrap_or(0.0);
        }
    }
    let f = &mut report.failures;
    if report.windows == 0 {
        f.push("no window lines".into());
    } else if report.throttle_windows == 0 {
        f.push(format!(
            "no window has a throttle object for {THROTTLE_CGROUP}"
        ));
    }
    if let Some(k) = report.kernel {
        if k.nr_throttled == 0 {
            f.push(format!(
                "kernel cpu.stat shows no throttling (nr_throttled delta 0, nr_periods delta {}): \
                 the workload was not throttled",
                k.nr_periods
            ));
        } else {
            if report.ours_nr_throttled != k.nr_throttled {
                f.push(format!(
                    "nr_throttled ours {} != kernel {} (nr_periods ours {}, kernel {})",
                    report.ours_nr_throttled, k.nr_throttled, report.ours_nr_periods, k.nr_periods
                ));
            }
            let kernel_us = k.throttled_usec as f64;
            let diff = (report.ours_throttled_us - kernel_us).abs();
            if diff > THROTTLED_TIME_TOLERANCE * kernel_us {
                f.push(format!(
                    "throttled_us ours {:.0} vs kernel {} (ratio {:.4}, allowed ±{} %)",
                    report.ours_throttled_us,
                    k.throttled_usec,
                    report.ours_throttled_us / kernel_us,
                    THROTTLED_TIME_TOLERANCE * 100.0
                ));
            }
        }
    }
    report
}

/// The `key=value` counters after `marker` on its (first) line in the log.
fn kstat_line(lines: &[String], marker: &str, failures: &mut Vec<String>) -> Option<Kstat> {
    let Some(rest) = lines
        .iter()
        .find_map(|l| l.split_once(marker).map(|(_, r)| r))
    else {
        failures.push(format!("no {marker} line"));
        return None;
    };
    let fields: BTreeMap<&str, &str> = rest
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect();
    let mut field = |key: &str| {
        let value = fields.get(key).and_then(|v| v.parse::<u64>().ok());
        if value.is_none() {
            failures.push(format!(
                "{marker}: no number for {key} in {:?}",
                rest.trim()
            ));
        }
        value
    };
    let (nr_periods, nr_throttled, throttled_usec) = (
        field("nr_periods"),
        field("nr_throttled"),
        field("throttled_usec"),
    );
    Some(Kstat {
        nr_periods: nr_periods?,
        nr_throttled: nr_throttled?,
        throttled_usec: throttled_usec?,
    })
}

// ---------------------------------------------------------------------------------------------
// Helpers

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn run_command(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    ensure!(status.success(), "{cmd:?} failed: {status}");
    Ok(())
}

fn command_stdout(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    ensure!(out.status.success(), "{cmd:?} failed: {}", out.status);
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    const HELLO: &str = r#"{"type":"hello","schema":1,"kernel":"6.1.0-56-cloud-amd64","cgroup":{"layout":"v2","runq_hierarchy":"cgroup2"},"families":{"runq":{"mode":"tp_btf"}}}"#;
    const WINDOW_1: &str = r#"{"type":"window","seq":1,"events":{"seen":900,"dropped":2},"cgroups":[{"id":7,"hierarchy":"cgroup2","path":"/cgtrace-vm-busy","name":"cgtrace-vm-busy","runq":{"count":310,"p50_us":900.0,"p99_us":4000.0,"max_us":5000.0,"buckets":[[1024,3]],"kinds":{}}}]}"#;
    const WINDOW_2: &str = r#"{"type":"window","seq":2,"events":{"seen":800,"dropped":1},"cgroups":[{"id":8,"hierarchy":"cgroup2","path":"/cgtrace-vm-quiet","name":"cgtrace-vm-quiet","runq":{"count":40,"p50_us":20.0,"p99_us":90.0,"max_us":100.0,"buckets":[],"kinds":{}}},{"id":1,"hierarchy":"cgroup2","path":"/","runq":{"count":5}}]}"#;

    fn captured(hello: &str) -> Vec<String> {
        lines(&format!(
            "[    0.912345] random: crng init done\nCGTRACE-VM-BOOTED 6.1.0-56-cloud-amd64\n\
             cgtrace: attached runq (tp_btf)\n{STREAM_BEGIN}\n{hello}\r\n\
             [    7.000001] sched: RT throttling activated\n{WINDOW_1}\n{WINDOW_2}\n{STREAM_END}\n\
             CGTRACE-VM-EXIT 0\n[    9.1] reboot: Power down"
        ))
    }

    #[test]
    fn check_accepts_good_stream_with_kernel_noise() {
        let report = check_stream("6.1", &captured(HELLO));
        assert!(report.failures.is_empty(), "{:?}", report.failures);
        assert_eq!((report.windows, report.seen, report.dropped), (2, 1700, 3));
        assert_eq!((report.busy_count, report.quiet_count), (310, 40));
        assert_eq!(report.runq_mode.as_deref(), Some("tp_btf"));
    }

    #[test]
    fn check_rejects_v1_layout_wrong_kernel_and_missing_cgroup() {
        let hello = HELLO.replace(r#""layout":"v2""#, r#""layout":"hybrid""#);
        let mut log = captured(&hello);
        log.retain(|l| !l.contains("cgtrace-vm-quiet"));
        let report = check_stream("6.12", &log);
        let all = report.failures.join("\n");
        assert!(all.contains("layout is hybrid"), "{all}");
        assert!(all.contains("want 6.12.*"), "{all}");
        assert!(all.contains("/cgtrace-vm-quiet"), "{all}");
        assert!(!all.contains("/cgtrace-vm-busy"), "{all}");
    }

    #[test]
    fn check_rejects_missing_markers_and_bad_json() {
        let report = check_stream("6.1", &lines("boot\nCGTRACE-VM-EXIT 1"));
        assert_eq!(report.failures, vec![format!("no {STREAM_BEGIN} line")]);
        let log = lines(&format!("{STREAM_BEGIN}\n{{\"type\":\"hel\n{STREAM_END}"));
        let all = check_stream("6.1", &log).failures.join("\n");
        assert!(
            all.contains("bad JSON line") && all.contains("no hello line"),
            "{all}"
        );
    }

    const THR_HELLO: &str = r#"{"type":"hello","schema":1,"kernel":"6.12.117+deb12-cloud-amd64","cgroup":{"layout":"v2","runq_hierarchy":"cgroup2"},"families":{"runq":{"mode":"tp_btf"},"throttle":{"mode":"fentry","detail":"fentry on tg_throttle_down"}}}"#;

    /// A window whose /cgtrace-vm-thr element has `nr_throttled` and `throttled_us`.
    fn thr_window(seq: u32, nr_throttled: u64, throttled_us: f64) -> String {
        format!(
            r#"{{"type":"window","seq":{seq},"events":{{"seen":100,"dropped":0}},"cgroups":[{{"id":1,"hierarchy":"cgroup2","path":"/","runq":{{"count":5}}}},{{"id":23,"hierarchy":"cgroup2","path":"/cgtrace-vm-thr","runq":{{"count":40}},"throttle":{{"quota_us":20000,"period_us":100000,"nr_periods":{nr_throttled},"nr_throttled":{nr_throttled},"throttled_us":{throttled_us},"episodes":{e},"kernel":null}}}}]}}"#,
            e = 2 * nr_throttled
        )
    }

    /// A throttle-scenario log: kernel delta 62 throttled periods, 10 674 582 µs.
    fn thr_captured(hello: &str, windows: &[String]) -> Vec<String> {
        lines(&format!(
            "CGTRACE-VM-BOOTED 6.12.117+deb12-cloud-amd64\n\
             throttle: mode fentry, 6s of load, cpu.max 20000 100000\n\
             [    9.100000] random: crng init done\nthrottle: cgtrace exit 0\n\
             {KSTAT_BEFORE} nr_periods=2 nr_throttled=0 throttled_usec=0\n\
             {KSTAT_AFTER} nr_periods=66 nr_throttled=62 throttled_usec=10674582\n\
             {STREAM_BEGIN}\n{hello}\n{}\n{STREAM_END}\nCGTRACE-VM-EXIT 0",
            windows.join("\n")
        ))
    }

    fn good_thr_windows() -> Vec<String> {
        // 62 throttled periods, 10 700 000 µs (ratio 1.0024).
        vec![
            thr_window(1, 0, 0.0).replace(r#","throttle":{"#, r#","nothrottle":{"#),
            thr_window(2, 30, 5_200_000.0),
            thr_window(3, 32, 5_500_000.0),
        ]
    }

    #[test]
    fn throttle_check_accepts_matching_counts() {
        let log = thr_captured(THR_HELLO, &good_thr_windows());
        let r = check_throttle("6.12", ThrottleMode::Fentry, &log);
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!((r.windows, r.throttle_windows), (3, 2));
        assert_eq!((r.ours_nr_throttled, r.ours_episodes), (62, 124));
        assert_eq!(r.ours_throttled_us, 10_700_000.0);
        assert_eq!(
            r.kernel,
            Some(Kstat {
                nr_periods: 64,
                nr_throttled: 62,
                throttled_usec: 10_674_582
            })
        );
        assert_eq!(r.mode.as_deref(), Some("fentry"));
        assert!((r.time_ratio().unwrap() - 1.00238).abs() < 1e-4);
        // auto only records the mode.
        let r = check_throttle("6.12", ThrottleMode::Auto, &log);
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!(r.mode.as_deref(), Some("fentry"));
    }

    #[test]
    fn throttle_check_rejects_wrong_mode_count_and_time() {
        // One throttled period missing, 2.5 % too much time.
        let windows = [
            thr_window(1, 30, 5_400_000.0),
            thr_window(2, 31, 5_542_000.0),
        ];
        let log = thr_captured(THR_HELLO, &windows);
        let r = check_throttle("6.12", ThrottleMode::Kprobe, &log);
        let all = r.failures.join("\n");
        assert_eq!(r.failures.len(), 3, "{all}");
        assert!(
            all.contains("families.throttle.mode is fentry, want kprobe"),
            "{all}"
        );
        assert!(all.contains("nr_throttled ours 61 != kernel 62"), "{all}");
        assert!(
            all.contains("throttled_us ours 10942000 vs kernel 10674582 (ratio 1.0251"),
            "{all}"
        );
    }

    #[test]
    fn throttle_check_rejects_unthrottled_workload_and_missing_data() {
        let log = thr_captured(THR_HELLO, &good_thr_windows());
        let unthrottled: Vec<String> = log
            .iter()
            .map(|l| {
                l.replace(
                    "nr_throttled=62 throttled_usec=10674582",
                    "nr_throttled=0 throttled_usec=0",
                )
            })
            .collect();
        let all = check_throttle("6.12", ThrottleMode::Fentry, &unthrottled)
            .failures
            .join("\n");
        assert!(all.contains("the workload was not throttled"), "{all}");

        // No cpu.stat lines, no throttle objects, no mode in hello, and a wrong kernel.
        let hello = THR_HELLO.replace(r#""mode":"fentry","#, "");
        let windows = [thr_window(1, 5, 1.0).replace("/cgtrace-vm-thr", "/other")];
        let log: Vec<String> = thr_captured(&hello, &windows)
            .into_iter()
            .filter(|l| !l.starts_with("CGTRACE-KSTAT"))
            .collect();
        let r = check_throttle("6.1", ThrottleMode::Fentry, &log);
        let all = r.failures.join("\n");
        for want in [
            "no CGTRACE-KSTAT-BEFORE line",
            "no CGTRACE-KSTAT-AFTER line",
            "mode is <missing>, want fentry",
            "want 6.1.*",
            "no window has a throttle object for /cgtrace-vm-thr",
        ] {
            assert!(all.contains(want), "{want}: {all}");
        }
        assert!(r.kernel.is_none());

        // A cpu.stat read that failed (empty values) and a crashed cgtrace.
        let log = lines(&format!(
            "{KSTAT_BEFORE} nr_periods= nr_throttled= throttled_usec=\n\
             {KSTAT_AFTER} nr_periods=3 nr_throttled=1 throttled_usec=9\nCGTRACE-VM-EXIT 101"
        ));
        let all = check_throttle("6.1", ThrottleMode::Kprobe, &log)
            .failures
            .join("\n");
        assert!(
            all.contains("CGTRACE-KSTAT-BEFORE: no number for nr_periods"),
            "{all}"
        );
        assert!(all.contains(&format!("no {STREAM_BEGIN} line")), "{all}");
    }

    #[test]
    fn strips_terminal_escapes() {
        assert_eq!(strip_escapes("\x1bc\x1b[?7l\x1b[2JSeaBIOS\r"), "SeaBIOS");
        assert_eq!(strip_escapes("plain [ 1.0] line"), "plain [ 1.0] line");
    }

    #[test]
    fn parses_ldd_output() {
        let text = "\tlinux-vdso.so.1 (0x00007ffc)\n\
                    \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        let libs = parse_ldd(text).unwrap();
        assert_eq!(
            libs,
            [
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
            .map(PathBuf::from)
        );
        assert!(
            parse_ldd("\tnot a dynamic executable\n")
                .unwrap()
                .is_empty()
        );
        assert!(parse_ldd("\tlibfoo.so.1 => not found\n").is_err());
    }

    #[test]
    fn finds_mirrors_in_both_source_formats() {
        let deb822 = "Types: deb\n# comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n\
                      Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
                      Types: deb\nURIs: http://mirror.example/debian-security/\nSuites: bookworm-security\n\
                      Components: main\n\nEnabled: no\nTypes: deb\nURIs: http://off.example\nSuites: bookworm\n";
        let mut sources =
            apt::parse_one_line("deb [arch=amd64] http://other.example/x nodistro main\n");
        sources.extend(apt::parse_deb822(deb822));
        let m = apt::mirrors_for("bookworm", &sources).unwrap();
        assert_eq!(m.archive, "http://mirror.example/debian");
        assert_eq!(m.security, "http://mirror.example/debian-security");
        let list = apt::sources_list("bullseye", &m);
        let keyring = "[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]";
        assert!(list.contains(&format!(
            "{keyring} http://mirror.example/debian bullseye-updates"
        )));
        assert!(list.contains("http://mirror.example/debian-security bullseye-security main"));

        let one_line = apt::parse_one_line(
            "deb http://a.example/debian bookworm main # x\n#deb http://b bookworm main\n",
        );
        assert_eq!(one_line.len(), 1);
        assert!(
            apt::mirrors_for("bookworm", &one_line).is_err(),
            "no security source"
        );
    }

    #[test]
    fn cpio_newc_layout() {
        let mut archive = cpio::Archive::default();
        archive.data("bin/hello", "hi!\n", 0o755);
        archive.symlink("bin/sh", "busybox");
        let mut out = Vec::new();
        archive.write_to(&mut out).unwrap();
        assert_eq!(out.len() % 4, 0);
        let text = String::from_utf8_lossy(&out);
        // The parent directory is created and comes first.
        assert!(text.find("bin\0").unwrap() < text.find("bin/hello\0").unwrap());
        assert_eq!(text.matches("070701").count(), 4);
        assert!(text.contains("hi!\n") && text.contains("busybox") && text.contains("TRAILER!!!"));
        // mode of bin/hello: regular file 0755.
        let h = text.find("bin/hello").unwrap() - 110;
        assert_eq!(&text[h + 14..h + 22], "000081ED");
    }
}
