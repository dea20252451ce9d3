//! The guest's initramfs: busybox, the binaries with their shared libraries, init and a scenario.

use super::*;

/// Shared libraries (and the dynamic loader) `bin` needs, per `ldd`; empty for static binaries
/// and scripts.
pub(super) fn shared_libraries(bin: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(bin)
        .output()
        .context("running ldd")?;
    parse_ldd(&String::from_utf8_lossy(&out.stdout))
}

pub(super) fn parse_ldd(text: &str) -> Result<Vec<PathBuf>> {
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
pub(super) struct GuestBin {
    pub(super) host: PathBuf,
    pub(super) guest_name: String,
}

pub(super) fn build_initramfs(out: &Path, bins: &[GuestBin], scenario: &[u8]) -> Result<()> {
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
    cpio.data("lib.sh", SCENARIO_LIB, 0o644);
    cpio.data("scenario.sh", scenario, 0o755);
    let mut w = BufWriter::new(File::create(out)?);
    cpio.write_to(&mut w)?;
    w.flush()?;
    Ok(())
}

pub(super) fn add_busybox(cpio: &mut cpio::Archive) -> Result<()> {
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
