//! The resolver on temporary trees (walks, the cache, removal) and, as root, on real cgroup
//! mounts (file handles).

use super::handle::proc_fd_path;
use super::walk::walk;
use super::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

fn ino(p: &Path) -> u64 {
    fs::symlink_metadata(p).unwrap().ino()
}

fn tree() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for p in ["a/b/c", "a/x", "with space/y", "z"] {
        fs::create_dir_all(d.path().join(p)).unwrap();
    }
    fs::write(d.path().join("a/file"), "").unwrap();
    d
}

#[test]
fn walk_fallback_resolves_tree() {
    let d = tree();
    let mut r = Resolver::new(d.path().to_path_buf(), 64).unwrap();
    assert!(!r.uses_file_handles());
    assert_eq!(r.mount(), d.path());
    assert_eq!(r.path_of(ino(d.path())).as_deref(), Some("/"));
    assert_eq!(
        r.path_of(ino(&d.path().join("a/b/c"))).as_deref(),
        Some("/a/b/c")
    );
    // The walk prefilled the cache with the rest of the tree.
    assert_eq!(r.len(), 7);
    assert_eq!(r.path_of(ino(&d.path().join("a"))).as_deref(), Some("/a"));
    assert_eq!(
        r.path_of(ino(&d.path().join("with space/y"))).as_deref(),
        Some("/with space/y")
    );
    // Files are not cgroups; id 0 is "unreadable".
    assert_eq!(r.path_of(ino(&d.path().join("a/file"))), None);
    assert_eq!(r.path_of(0), None);
    assert!(r.exists(ino(&d.path().join("a/b"))));
    assert!(!r.exists(0));
}

#[test]
fn capacity_is_never_exceeded() {
    let d = tempfile::tempdir().unwrap();
    let mut ids = Vec::new();
    for i in 0..30 {
        let p = d.path().join(format!("g{i}/sub"));
        fs::create_dir_all(&p).unwrap();
        ids.push((ino(&p), format!("/g{i}/sub")));
    }
    let mut r = Resolver::new(d.path().to_path_buf(), 5).unwrap();
    r.set_walk_interval(Duration::ZERO);
    for _round in 0..2 {
        for (id, want) in &ids {
            assert_eq!(r.path_of(*id).as_deref(), Some(want.as_str()));
            assert!(r.len() <= 5, "{}", r.len());
        }
    }
    assert_eq!(r.len(), 5);
}

#[test]
fn removed_dir_is_negative_and_forget_drops_cache() {
    let d = tree();
    let c = d.path().join("a/b/c");
    let id = ino(&c);
    let mut r = Resolver::new(d.path().to_path_buf(), 64).unwrap();
    r.set_walk_interval(Duration::ZERO);
    assert_eq!(r.path_of(id).as_deref(), Some("/a/b/c"));
    assert!(r.exists(id));
    fs::remove_dir(&c).unwrap();
    assert!(!r.exists(id));
    // Cached answers are not re-validated...
    assert_eq!(r.path_of(id).as_deref(), Some("/a/b/c"));
    // ...until forgotten.
    r.forget(id);
    assert_eq!(r.path_of(id), None);
    assert!(r.negative.contains_key(&id));
    // A negative answer expires.
    r.set_negative_ttl(Duration::ZERO);
    fs::create_dir(d.path().join("new")).unwrap();
    let new = ino(&d.path().join("new"));
    r.forget(new);
    assert_eq!(r.path_of(new).as_deref(), Some("/new"));
}

#[test]
fn renamed_dir_no_longer_exists_at_cached_path() {
    let d = tree();
    let id = ino(&d.path().join("z"));
    let mut r = Resolver::new(d.path().to_path_buf(), 64).unwrap();
    assert_eq!(r.path_of(id).as_deref(), Some("/z"));
    fs::rename(d.path().join("z"), d.path().join("z2")).unwrap();
    assert!(!r.exists(id));
}

#[test]
fn walks_are_rate_limited() {
    let d = tree();
    let mut r = Resolver::new(d.path().to_path_buf(), 64).unwrap();
    r.set_walk_interval(Duration::from_secs(3600));
    assert!(r.path_of(ino(&d.path().join("a"))).is_some());
    fs::create_dir(d.path().join("late")).unwrap();
    let late = ino(&d.path().join("late"));
    // No second walk within the interval; the miss is not remembered as negative.
    assert_eq!(r.path_of(late), None);
    assert!(!r.negative.contains_key(&late));
    r.set_walk_interval(Duration::ZERO);
    assert_eq!(r.path_of(late).as_deref(), Some("/late"));
}

#[test]
fn snapshot_answers_within_interval_when_cache_is_small() {
    let d = tree();
    let mut r = Resolver::new(d.path().to_path_buf(), 1).unwrap();
    r.set_walk_interval(Duration::from_secs(3600));
    assert_eq!(
        r.path_of(ino(&d.path().join("a/x"))).as_deref(),
        Some("/a/x")
    );
    assert_eq!(r.path_of(ino(&d.path().join("z"))).as_deref(), Some("/z"));
    assert_eq!(r.len(), 1);
    assert!(r.exists(ino(&d.path().join("a/x"))));
}

#[test]
fn walk_survives_concurrent_churn() {
    let d = tree();
    let stop = Arc::new(AtomicBool::new(false));
    let churn_root = d.path().join("churn");
    fs::create_dir(&churn_root).unwrap();
    let worker = {
        let stop = stop.clone();
        let root = churn_root.clone();
        thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let p = root.join(format!("d{}", i % 7)).join("e/f");
                let _ = fs::create_dir_all(&p);
                let _ = fs::remove_dir_all(root.join(format!("d{}", (i + 3) % 7)));
                i += 1;
            }
        })
    };
    let dev = fs::metadata(d.path()).unwrap().dev();
    let c = ino(&d.path().join("a/b/c"));
    for _ in 0..200 {
        let m = walk(d.path(), dev);
        assert_eq!(m.get(&c).map(|p| &**p), Some("/a/b/c"));
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
}

#[test]
fn missing_mount_is_an_error() {
    let e = Resolver::new(PathBuf::from("/nonexistent/cgroup"), 8)
        .err()
        .unwrap();
    assert!(matches!(e, Error::Mount { .. }));
    assert!(std::error::Error::source(&e).is_some());
}

/// Creates `<mount>/cgdev-test-<pid>-<tag>/inner` on a real cgroup mount and checks
/// resolution through file handles, the walk fallback and removal. Skips itself (returning
/// false) unless running as root with `mount` present.
fn real_cgroup_roundtrip(mount: &Path, tag: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || !mount.join("cgroup.procs").exists() {
        eprintln!("skipping: needs root and {}", mount.display());
        return false;
    }
    let name = format!("cgdev-test-{}-{tag}", std::process::id());
    let dir = mount.join(&name);
    let nested = dir.join("inner");
    fs::create_dir(&dir).unwrap();
    fs::create_dir(&nested).unwrap();
    let id = ino(&dir);
    let nested_id = ino(&nested);
    let result = std::panic::catch_unwind(|| {
        let mut r = Resolver::new(mount.to_path_buf(), 64).unwrap();
        assert!(
            r.uses_file_handles(),
            "open_by_handle_at should work as root"
        );
        assert_eq!(r.path_of(1).as_deref(), Some("/"));
        assert_eq!(r.path_of(id).as_deref(), Some(format!("/{name}").as_str()));
        assert_eq!(
            r.path_of(nested_id).as_deref(),
            Some(format!("/{name}/inner").as_str())
        );
        // Handle lookups do not walk.
        assert!(r.last_walk.is_none());
        assert!(r.exists(id));
        // Through a symlink to the mount, paths are still relative to the mount.
        let tmp = tempfile::tempdir().unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(mount, &link).unwrap();
        let mut via_link = Resolver::new(link, 8).unwrap();
        assert!(via_link.uses_file_handles());
        assert_eq!(
            via_link.path_of(nested_id).as_deref(),
            Some(format!("/{name}/inner").as_str())
        );
        // A directory removed while open by handle reads back with " (deleted)".
        let held = r.open_handle(nested_id).unwrap();
        fs::remove_dir(&nested).unwrap();
        assert!(matches!(r.read_back(&held, nested_id), Lookup::Gone));
        let link = fs::read_link(proc_fd_path(held.as_raw_fd())).unwrap();
        eprintln!("removed cgroup reads back as {}", link.display());
        drop(held);
        fs::create_dir(&nested).unwrap();
        let nested_id = ino(&nested);
        // The walk fallback finds the same path (inode == kernfs id).
        let mut w = Resolver::new(mount.to_path_buf(), 64).unwrap();
        w.force_walk_mode();
        assert_eq!(w.path_of(nested_id), r.path_of(nested_id));
        assert!(w.last_walk.is_some());
        (r, nested_id)
    });
    let _ = fs::remove_dir(&nested);
    let _ = fs::remove_dir(&dir);
    let (mut r, nested_id) = result.unwrap();
    assert!(!r.exists(id));
    assert!(!r.exists(nested_id));
    r.forget(id);
    assert_eq!(r.path_of(id), None);
    assert!(r.negative.contains_key(&id));
    let mut fresh = Resolver::new(mount.to_path_buf(), 64).unwrap();
    assert_eq!(fresh.path_of(nested_id), None);
    assert_eq!(fresh.path_of(id), None);
    assert!(fresh.uses_file_handles());
    true
}

/// Needs root and cgroup v1 `cpu` at /sys/fs/cgroup/cpu; skips itself otherwise.
#[test]
fn real_cgroup_v1_cpu() {
    if real_cgroup_roundtrip(Path::new("/sys/fs/cgroup/cpu"), "v1") {
        eprintln!("real_cgroup_v1_cpu: ran against /sys/fs/cgroup/cpu");
    }
}

/// Same on the cgroup2 mount (hybrid hosts: /sys/fs/cgroup/unified; v2 hosts:
/// /sys/fs/cgroup).
#[test]
fn real_cgroup2() {
    let mount = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .into_iter()
        .map(Path::new)
        .find(|m| m.join("cgroup.controllers").exists());
    match mount {
        Some(m) if real_cgroup_roundtrip(m, "v2") => {
            eprintln!("real_cgroup2: ran against {}", m.display());
        }
        _ => eprintln!("skipping: no cgroup2 mount"),
    }
}

/// Resolves existing cgroups of every mounted hierarchy of this host, whichever mode the
/// privileges allow (root: file handles; others: walks).
#[test]
fn real_hierarchies_existing_cgroups() {
    let Ok(cg) = crate::cgroup::Cgroups::discover_system() else {
        eprintln!("skipping: no cgroups");
        return;
    };
    for h in &cg.hierarchies {
        let Ok(mut r) = Resolver::new(h.mount.clone(), 256) else {
            continue;
        };
        // Up to 50 directories, breadth first.
        let mut want = Vec::new();
        let mut queue = vec![(h.mount.clone(), String::new())];
        while let Some((dir, rel)) = queue.pop() {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                if want.len() >= 50 || !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let child = format!("{rel}/{}", e.file_name().to_string_lossy());
                want.push((ino(&e.path()), child.clone()));
                queue.insert(0, (e.path(), child));
            }
        }
        for (id, path) in &want {
            assert_eq!(r.path_of(*id).as_deref(), Some(path.as_str()), "{h:?}");
        }
        eprintln!(
            "{}: {} cgroups resolved, file handles: {}",
            h.mount.display(),
            want.len(),
            r.uses_file_handles()
        );
    }
}
