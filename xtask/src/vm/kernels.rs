//! The matrix kernels: Debian packages fetched into the cache, and finding their vmlinuz.

use super::*;

/// One kernel of the matrix and where Debian ships it.
pub(super) struct KernelSpec {
    pub(super) name: &'static str,
    /// Debian release whose `<r>`, `<r>-updates` and `<r>-security` suites are searched.
    pub(super) release: &'static str,
    /// Meta package whose dependency is the current image package.
    pub(super) meta: &'static str,
    /// What the resolved image package must start with.
    pub(super) package_prefix: &'static str,
}

pub(super) const KERNELS: [KernelSpec; 3] = [
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

pub(super) fn kernel_spec(name: &str) -> Result<&'static KernelSpec> {
    KERNELS
        .iter()
        .find(|k| k.name == name)
        .with_context(|| format!("unknown kernel {name}"))
}

pub(super) fn select_kernels(names: &[String]) -> Vec<&'static KernelSpec> {
    if names.iter().any(|n| n == "all") {
        return KERNELS.iter().collect();
    }
    KERNELS
        .iter()
        .filter(|k| names.iter().any(|n| n == k.name))
        .collect()
}

/// A kernel image in the cache.
pub(super) struct CachedKernel {
    pub(super) vmlinuz: PathBuf,
    /// "<package> <version>" as recorded at fetch time.
    pub(super) package: String,
}

pub(super) fn kernel_dir(cache: &Path, spec: &KernelSpec) -> PathBuf {
    cache.join("kernels").join(spec.name)
}

pub(super) fn cached_kernel(cache: &Path, spec: &KernelSpec) -> Result<Option<CachedKernel>> {
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

pub(super) fn fetch_all(cache: &Path, specs: &[&'static KernelSpec]) -> Result<Vec<CachedKernel>> {
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

pub(super) fn ensure_kernel(cache: &Path, spec: &'static KernelSpec) -> Result<CachedKernel> {
    let mut got = fetch_all(cache, &[spec])?;
    Ok(got.remove(0))
}

pub(super) fn fetch_kernel(
    cache: &Path,
    spec: &KernelSpec,
    apt: &apt::PrivateApt,
) -> Result<CachedKernel> {
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

pub(super) fn find_vmlinuz(boot: &Path) -> Result<PathBuf> {
    for entry in fs::read_dir(boot).with_context(|| format!("reading {}", boot.display()))? {
        let path = entry?.path();
        if file_name(&path).starts_with("vmlinuz-") {
            return Ok(path);
        }
    }
    bail!("no vmlinuz-* in {}", boot.display())
}
