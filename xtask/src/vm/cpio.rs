//! Builds a cpio "newc" archive (uncompressed; the kernel unpacks it as is).

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
            let mut file = File::open(src).with_context(|| format!("opening {}", src.display()))?;
            h.size = u32::try_from(file.metadata()?.len()).context("file too large for cpio")?;
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
