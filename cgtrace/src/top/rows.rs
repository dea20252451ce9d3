//! Every cgroup the view knows and the table's row order. The order (filter, sort, tree, folds,
//! idle) is recomputed only when a snapshot arrives or a view option changes — never while
//! drawing, which only reads the visible slice.

use std::{
    borrow::Cow,
    cmp::Ordering,
    collections::{HashMap, HashSet},
    sync::Arc,
};

use crate::model::{CgroupWindow, Window};

use super::{
    columns::{Column, Source},
    family::{Ctx, Family, Flag},
    filter::{Filter, haystack},
    format,
};

/// Idle cgroups are forgotten after this many windows without a wait, at the next sweep (they come back with their
/// next wait).
pub const FORGET_AFTER_WINDOWS: u64 = 300;
/// At most this many cgroups are kept (the least recently active go first).
pub const MAX_KNOWN: usize = 100_000;

/// A cgroup the view knows: its latest data, and whether that data is from the current window.
#[derive(Debug)]
pub struct Tracked {
    /// The cgroup's id (`cg.id`, kept here so the passes that only need it leave the box alone).
    pub id: u64,
    /// Boxed: an update replaces the box, not 1 KB of cold memory in the table, and the table's
    /// entries stay small enough for a walk over 10 000 of them to stay in the cache.
    pub cg: Box<CgroupWindow>,
    /// The last window it had data in.
    pub last_seq: u64,
    /// Lower-cased name and path, for the filter.
    pub haystack: String,
    /// A hash of its name and path ([`ident_of`]): whether they changed is told without reading
    /// the strings it holds (cold in memory at 10 000 cgroups).
    ident: u64,
    /// Depth of its path (0 for the root or an unknown path).
    pub depth: u16,
    /// Display columns of its flat row's name cell ([`name_width`]), kept with the ident so that
    /// fitting the name column reads no string.
    flat_width: u32,
    /// The families' diagnoses in its last window (only current while it is active).
    pub flags: Vec<Flag>,
}

impl Tracked {
    /// The label of a flat row: its name, else its path, else its id.
    pub fn flat_label(&self) -> Cow<'_, str> {
        flat_label(&self.cg)
    }
}

/// A cgroup's flat label: its name, else its path, else its id.
fn flat_label(cg: &CgroupWindow) -> Cow<'_, str> {
    match (&cg.name, &cg.path) {
        (Some(n), _) => Cow::Borrowed(n),
        (None, Some(p)) => Cow::Borrowed(p),
        (None, None) => Cow::Owned(format!("(cgroup {} gone)", cg.id)),
    }
}

/// All known cgroups, in a vector in about the order windows list them (so the passes of an
/// update walk it front to back, as the hardware prefetcher likes) with an index by id.
#[derive(Default)]
pub struct Store {
    tracked: Vec<Tracked>,
    /// Id to position in `tracked`.
    index: HashMap<u64, usize, foldhash::fast::RandomState>,
    pub ctx: Option<Ctx>,
    /// Data replaced or forgotten by the last update. Freeing 10 000 cgroups' histograms costs
    /// more than building the view, so the UI loop hands this to a thread of its own
    /// ([`Store::take_garbage`]); whatever is left is freed at the next update.
    garbage: Garbage,
    /// Some active cgroup has a flag (the `FLAGS` column is shown).
    pub any_flags: bool,
    /// The window on screen: cgroups whose `last_seq` is this one are active, the others idle.
    seq: u64,
    /// Cgroups whose removal the window reported: forgotten at the next one.
    removed: Vec<u64>,
    /// Changes whenever the tree's shape may have: a cgroup came or went, or its path or name
    /// changed. The tree view rebuilds its [`TreeShape`] only then.
    shape_gen: u64,
}

/// What an update replaced or forgot: the window's emptied vector and the cgroups' old data.
#[derive(Default)]
pub struct Garbage {
    pub window: Vec<CgroupWindow>,
    pub cgroups: Vec<Box<CgroupWindow>>,
}

/// Every string of a cgroup's window that a tenant controls (its name and path, comms, file
/// names) made safe for the terminal ([`crate::safety::escape::terminal`]) before the view keeps it, so
/// no drawing code can show one raw. Free when there is nothing to escape.
pub fn escape_for_view(cg: &mut CgroupWindow) {
    fn fix(s: &mut String) {
        if let std::borrow::Cow::Owned(e) = crate::safety::escape::terminal(s) {
            *s = e;
        }
    }
    cg.name.as_mut().map(fix);
    cg.path.as_mut().map(fix);
    for f in cg.reads.iter_mut().flatten() {
        fix(&mut f.comm);
        fix(&mut f.file);
        if let Some(t) = f.target.as_mut() {
            fix(&mut t.path);
        }
    }
    for p in cg.throttle.iter_mut().flat_map(|t| t.periods.iter_mut()) {
        for th in &mut p.top {
            fix(&mut th.comm);
        }
    }
}

/// Asks the CPU to bring the cache line at `p` in, without waiting for it (a hint: no read, no
/// fault, whatever `p` is). The view's passes over 10 000 cgroups each touch memory that the
/// pass before evicted; issued a few items ahead, the misses overlap instead of coming one by one.
#[inline(always)]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and reads nothing architecturally; any address will do.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// How many items ahead the passes prefetch.
const AHEAD: usize = 8;

/// A hash of a cgroup's name and path, to tell whether they changed.
fn ident_of(name: Option<&str>, path: Option<&str>) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::default().hash_one((name, path))
}

/// What a cgroup's name, path and QoS class give its row: the filter's haystack, the tree
/// depth and its flat row's name width.
fn filter_and_depth(cg: &CgroupWindow) -> (String, u16, u32) {
    let depth = cg.path.as_deref().map_or(0, depth_of);
    let label = flat_label(cg);
    let width = name_width(None, depth, format::width(&label), label.starts_with('/'));
    (
        haystack(cg.name.as_deref(), cg.path.as_deref(), cg.qos.as_deref()),
        depth,
        u32::try_from(width).unwrap_or(u32::MAX),
    )
}

/// Display columns a row's name cell needs to show its label whole (what the name column grows
/// to, up to the room the numbers leave), from the label's own width: the depth dots before a
/// flat row's name (a path shows its own depth), the tree's indentation, fold marker and folded
/// count. [`crate::top::render::name`] draws the same decoration.
pub fn name_width(
    tree: Option<TreeMark>,
    depth: u16,
    label_width: usize,
    label_is_path: bool,
) -> usize {
    match tree {
        None if label_is_path => label_width,
        None => usize::from(depth.saturating_sub(1).min(4)) + label_width,
        Some(mark) => {
            // " (+N)" after a folded node.
            let suffix = match mark {
                TreeMark::Folded(n) => 4 + n.checked_ilog10().unwrap_or(0) as usize + 1,
                TreeMark::Leaf | TreeMark::Open => 0,
            };
            usize::from(depth) * 2 + 2 + label_width + suffix
        }
    }
}

/// Idle cgroups are looked for (a pass over the whole table) once every this many windows.
const SWEEP_EVERY_WINDOWS: u64 = 32;

impl Store {
    /// Takes a window's cgroups: they become active, the others idle; cgroups whose removal was
    /// reported in the previous window, or idle for too long, are forgotten.
    pub fn update(&mut self, mut window: Window, families: &[&'static dyn Family]) {
        let seq = window.seq;
        let ctx = Ctx {
            duration_ms: window.duration_ms,
        };
        self.ctx = Some(ctx);
        self.any_flags = false;
        self.seq = seq;
        // Cgroups reported removed last time go now; idle ones are swept now and then (a pass
        // over every entry costs more than the rest of the update).
        let mut gone: Vec<Box<CgroupWindow>> = Vec::new();
        for id in std::mem::take(&mut self.removed) {
            gone.extend(self.remove(id).map(|t| t.cg));
        }
        if seq.is_multiple_of(SWEEP_EVERY_WINDOWS) {
            let mut i = 0;
            while let Some(t) = self.tracked.get(i) {
                if seq.saturating_sub(t.last_seq) > FORGET_AFTER_WINDOWS {
                    let id = t.id;
                    gone.extend(self.remove(id).map(|t| t.cg));
                } else {
                    i += 1;
                }
            }
        }
        let forgotten = gone.len();
        let flags_of = |cg: &CgroupWindow| {
            let mut flags = Vec::new();
            for f in families {
                f.flags(cg, &ctx, &mut flags);
            }
            flags
        };
        // One pass, one lookup per cgroup, each cgroup's strings read once while they are in
        // the cache (escaped, hashed). Known cgroups swap their new data into the box they have;
        // new ones are taken out of the window afterwards.
        let mut new_at: Vec<usize> = Vec::new();
        for i in 0..window.cgroups.len() {
            if let Some(ahead) = window.cgroups.get(i + 2 * AHEAD) {
                prefetch(&raw const ahead.name);
                prefetch(&raw const ahead.path);
            }
            if let Some(ahead) = window.cgroups.get(i + AHEAD) {
                prefetch(ahead.name.as_deref().map_or(std::ptr::null(), str::as_ptr));
                prefetch(ahead.path.as_deref().map_or(std::ptr::null(), str::as_ptr));
            }
            let cg = &mut window.cgroups[i];
            escape_for_view(cg);
            let Some(&at) = self.index.get(&cg.id) else {
                new_at.push(i);
                continue;
            };
            let t = &mut self.tracked[at];
            let ident = ident_of(cg.name.as_deref(), cg.path.as_deref());
            if t.ident != ident {
                t.ident = ident;
                (t.haystack, t.depth, t.flat_width) = filter_and_depth(cg);
                self.shape_gen += 1;
            }
            // The new data into the box the view keeps, the old into the window's slot: no
            // allocation, and the old data is freed with the window, elsewhere.
            std::mem::swap(&mut *t.cg, cg);
            t.last_seq = seq;
            if t.cg.removed {
                self.removed.push(t.cg.id);
            }
            let flags = flags_of(&t.cg);
            self.any_flags |= !flags.is_empty();
            t.flags = flags;
        }
        let added = new_at.len();
        for i in new_at {
            let cg = Box::new(std::mem::take(&mut window.cgroups[i]));
            let flags = flags_of(&cg);
            self.any_flags |= !flags.is_empty();
            if cg.removed {
                self.removed.push(cg.id);
            }
            let (haystack, depth, flat_width) = filter_and_depth(&cg);
            let t = Tracked {
                id: cg.id,
                haystack,
                ident: ident_of(cg.name.as_deref(), cg.path.as_deref()),
                depth,
                flat_width,
                cg,
                last_seq: seq,
                flags,
            };
            // A window listing an id twice: the later entry wins, as it did in a map.
            match self.index.get(&t.id) {
                Some(&at) => gone.push(std::mem::replace(&mut self.tracked[at], t).cg),
                None => {
                    self.index.insert(t.id, self.tracked.len());
                    self.tracked.push(t);
                }
            }
        }
        if forgotten > 0 || added > 0 {
            self.shape_gen += 1;
        }
        self.garbage = Garbage {
            window: std::mem::take(&mut window.cgroups),
            cgroups: gone,
        };
        if self.tracked.len() > MAX_KNOWN {
            self.shape_gen += 1;
            let mut by_age: Vec<(u64, u64)> =
                self.tracked.iter().map(|t| (t.last_seq, t.id)).collect();
            by_age.sort_unstable();
            for (_, id) in by_age.into_iter().take(self.tracked.len() - MAX_KNOWN) {
                self.remove(id);
            }
        }
    }

    /// Forgets a cgroup: the last one takes its place in the vector.
    fn remove(&mut self, id: u64) -> Option<Tracked> {
        let at = self.index.remove(&id)?;
        let t = self.tracked.swap_remove(at);
        if let Some(moved) = self.tracked.get(at) {
            self.index.insert(moved.id, at);
        }
        Some(t)
    }

    pub fn get(&self, id: u64) -> Option<&Tracked> {
        self.index.get(&id).map(|&at| &self.tracked[at])
    }

    /// Every known cgroup, in no particular order.
    pub fn iter(&self) -> std::slice::Iter<'_, Tracked> {
        self.tracked.iter()
    }

    /// How many cgroups are known.
    pub fn len(&self) -> usize {
        self.tracked.len()
    }

    /// Whether no cgroup is known.
    pub fn is_empty(&self) -> bool {
        self.tracked.is_empty()
    }

    /// Whether it had data in the window on screen (else its row is idle).
    pub fn is_active(&self, t: &Tracked) -> bool {
        t.last_seq == self.seq
    }

    /// The data the last update replaced, to be freed elsewhere.
    pub fn take_garbage(&mut self) -> Garbage {
        std::mem::take(&mut self.garbage)
    }

    /// A row's label: a tree node's own, else the tracked cgroup's name or path.
    pub fn label<'a>(&'a self, row: &'a Row) -> Cow<'a, str> {
        match (&row.label, row.id.and_then(|id| self.get(id))) {
            (Some(l), _) => Cow::Borrowed(&**l),
            (None, Some(t)) => t.flat_label(),
            (None, None) => Cow::Borrowed("?"),
        }
    }
}

/// What identifies a row across updates (the selection follows it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RowKey {
    Cgroup(u64),
    /// A tree node with no data of its own (an ancestor of traced cgroups).
    Path(Arc<str>),
}

/// A tree row's fold state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TreeMark {
    Leaf,
    Open,
    /// Folded, hiding this many visible descendants.
    Folded(u32),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub key: RowKey,
    /// The tracked cgroup (None for a tree node without data).
    pub id: Option<u64>,
    /// Tree rows' label; flat rows take theirs from the store ([`Store::label`]), so building
    /// the flat order allocates nothing per cgroup. Shared with the [`TreeShape`], so building
    /// the tree order copies no string either.
    pub label: Option<Arc<str>>,
    /// 0 for the root, 1 for its children, …
    pub depth: u16,
    /// The path (tree nodes) — for folding.
    pub path: Option<Arc<str>>,
    /// Some in tree mode.
    pub tree: Option<TreeMark>,
}

/// How to order and filter.
pub struct ViewSpec<'a> {
    pub sort: &'a Column,
    pub descending: bool,
    pub filter: &'a Filter,
    pub hide_idle: bool,
    pub tree: bool,
    pub folded: &'a HashSet<String>,
}

/// A row's sort value.
#[derive(Clone, Debug, PartialEq)]
enum Key {
    Num(Option<f64>),
    Text(String),
}

fn key_of(t: &Tracked, active: bool, col: &Column, ctx: &Ctx, label: &str) -> Key {
    match col.source {
        Source::Name => Key::Text(label.to_lowercase()),
        Source::Flags => Key::Num(active.then_some(t.flags.len() as f64)),
        Source::Data(f) => Key::Num(if active {
            f(&t.cg, ctx).sort_key()
        } else {
            None
        }),
    }
}

/// `a` before `b`? Missing values last in either direction; ties by label.
fn cmp_keys(a: &Key, b: &Key, descending: bool) -> Ordering {
    let ord = match (a, b) {
        (Key::Num(Some(x)), Key::Num(Some(y))) => x.total_cmp(y),
        (Key::Num(Some(_)), Key::Num(None)) => return Ordering::Less,
        (Key::Num(None), Key::Num(Some(_))) => return Ordering::Greater,
        (Key::Text(x), Key::Text(y)) => x.cmp(y),
        _ => Ordering::Equal,
    };
    if descending { ord.reverse() } else { ord }
}

/// Depth of a cgroup path: `/` is 0, `/a` 1, `/a/b` 2.
pub fn depth_of(path: &str) -> u16 {
    path.split('/').filter(|c| !c.is_empty()).count() as u16
}

fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// The visible rows, in order, into `out` (its allocation is reused). The tree view keeps its
/// shape in `shape` between calls. Returns the widest row's name cell ([`name_width`]).
pub fn build(
    store: &Store,
    spec: &ViewSpec<'_>,
    shape: &mut TreeShape,
    out: &mut Vec<Row>,
) -> usize {
    out.clear();
    if spec.tree {
        build_tree(store, spec, shape, out)
    } else {
        build_flat(store, spec, out)
    }
}

fn visible(store: &Store, t: &Tracked, spec: &ViewSpec<'_>) -> bool {
    (!spec.hide_idle || store.is_active(t)) && spec.filter.matches(&t.haystack)
}

fn build_flat(store: &Store, spec: &ViewSpec<'_>, out: &mut Vec<Row>) -> usize {
    let ctx = store.ctx.unwrap_or(Ctx { duration_ms: 1000 });
    let by_name = matches!(spec.sort.source, Source::Name);
    let shown: Vec<&Tracked> = store.iter().filter(|t| visible(store, t, spec)).collect();
    let widest = shown
        .iter()
        .map(|t| t.flat_width as usize)
        .max()
        .unwrap_or(0);
    let items: Vec<(Option<f64>, Cow<'_, str>, &Tracked)> = shown
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            // The sort key reads each cgroup's data, out of the cache by now.
            if let Some(ahead) = shown.get(i + AHEAD) {
                prefetch(&raw const ahead.cg.runq);
            }
            let key = match key_of(t, store.is_active(t), spec.sort, &ctx, "") {
                Key::Num(k) if !by_name => k,
                _ => None,
            };
            (key, t.flat_label(), t)
        })
        .collect();
    let ties = |a: &(Option<f64>, Cow<'_, str>, &Tracked),
                b: &(Option<f64>, Cow<'_, str>, &Tracked)| {
        a.1.cmp(&b.1).then(a.2.id.cmp(&b.2.id))
    };
    if by_name {
        // Each label lower-cased once, not at every comparison.
        let lowered: Vec<String> = items.iter().map(|i| i.1.to_lowercase()).collect();
        let mut order: Vec<usize> = (0..items.len()).collect();
        order.sort_unstable_by(|&a, &b| {
            let ord = lowered[a].cmp(&lowered[b]);
            let ord = if spec.descending { ord.reverse() } else { ord };
            ord.then_with(|| ties(&items[a], &items[b]))
        });
        out.extend(order.into_iter().map(|i| flat_row(items[i].2)));
        return widest;
    }
    // By a 12-byte (order, position) pair instead of the 40-byte items: the order of the keys is
    // an integer's, so most comparisons read nothing else; runs of equal keys (idle cgroups,
    // equal counts) are then put in label order.
    let mut order: Vec<(u64, u32)> = items
        .iter()
        .enumerate()
        .map(|(i, item)| (num_order(item.0, spec.descending), i as u32))
        .collect();
    order.sort_unstable_by_key(|&(k, _)| k);
    for run in order.chunk_by_mut(|a, b| a.0 == b.0) {
        if run.len() > 1 {
            run.sort_unstable_by(|a, b| ties(&items[a.1 as usize], &items[b.1 as usize]));
        }
    }
    out.extend(
        order
            .into_iter()
            .map(|(_, i)| flat_row(items[i as usize].2)),
    );
    widest
}

/// A numeric sort key as an integer in the order [`cmp_keys`] gives (`f64::total_cmp`, reversed
/// when descending; no key after every key either way).
fn num_order(key: Option<f64>, descending: bool) -> u64 {
    let Some(x) = key else {
        return u64::MAX;
    };
    let bits = x.to_bits();
    // total_cmp's order as unsigned integers: negatives flipped, positives above them.
    let asc = if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    };
    // u64::MAX is kept for no key (a NaN with every bit set would share it: never a sort key).
    (if descending { !asc } else { asc }).min(u64::MAX - 1)
}

fn flat_row(t: &Tracked) -> Row {
    Row {
        key: RowKey::Cgroup(t.id),
        id: Some(t.id),
        label: None,
        depth: t.depth,
        path: None,
        tree: None,
    }
}

/// The tree view's shape: a node per known cgroup and per ancestor path of one, parents before
/// their children. Rebuilt only when the store's shape changes (a cgroup came or went, a path or
/// name changed), not at every snapshot: per snapshot only keys, visibility and order are
/// computed.
#[derive(Default)]
pub struct TreeShape {
    /// The store's `shape_gen` it was built at.
    built: Option<u64>,
    nodes: Vec<ShapeNode>,
}

struct ShapeNode {
    /// Empty for a cgroup whose path is unknown.
    path: Arc<str>,
    id: Option<u64>,
    label: Arc<str>,
    /// The label's display width (`format::width`).
    label_width: usize,
    children: Vec<usize>,
}

impl TreeShape {
    fn update(&mut self, store: &Store) {
        if self.built == Some(store.shape_gen) {
            return;
        }
        self.built = Some(store.shape_gen);
        self.nodes.clear();
        let mut index: HashMap<Arc<str>, usize> = HashMap::with_capacity(store.len() + 16);
        let root: Arc<str> = Arc::from("/");
        self.nodes.push(ShapeNode {
            path: root.clone(),
            id: None,
            label_width: format::width(&root),
            label: root.clone(),
            children: Vec::new(),
        });
        index.insert(root, 0);
        // Parents are created before their children, so children always have larger indices.
        fn ensure(
            path: &str,
            nodes: &mut Vec<ShapeNode>,
            index: &mut HashMap<Arc<str>, usize>,
        ) -> usize {
            if let Some(&i) = index.get(path) {
                return i;
            }
            let parent = ensure(parent_of(path), nodes, index);
            let label = Arc::from(path.rsplit('/').next().unwrap_or(path));
            let path: Arc<str> = Arc::from(path);
            let i = nodes.len();
            nodes.push(ShapeNode {
                path: path.clone(),
                id: None,
                label_width: format::width(&label),
                label,
                children: Vec::new(),
            });
            nodes[parent].children.push(i);
            index.insert(path, i);
            i
        }
        for t in store.iter() {
            let i = match t.cg.path.as_deref() {
                Some(p) => ensure(p, &mut self.nodes, &mut index),
                None => {
                    let i = self.nodes.len();
                    let label = t.flat_label();
                    self.nodes.push(ShapeNode {
                        path: Arc::from(""),
                        id: None,
                        label_width: format::width(&label),
                        label: Arc::from(label.as_ref()),
                        children: Vec::new(),
                    });
                    self.nodes[0].children.push(i);
                    i
                }
            };
            let node = &mut self.nodes[i];
            node.id = Some(t.id);
            if let Some(name) = &t.cg.name {
                node.label = Arc::from(name.as_str());
                node.label_width = format::width(name);
            }
        }
    }
}

fn build_tree(
    store: &Store,
    spec: &ViewSpec<'_>,
    shape: &mut TreeShape,
    rows: &mut Vec<Row>,
) -> usize {
    shape.update(store);
    let nodes = &shape.nodes;
    let n = nodes.len();
    let ctx = store.ctx.unwrap_or(Ctx { duration_ms: 1000 });
    let text_sort = matches!(spec.sort.source, Source::Name);
    let empty = || Key::Num(None);
    let mut shown = vec![false; n];
    let mut key: Vec<Key> = Vec::with_capacity(n);
    for (i, node) in nodes.iter().enumerate() {
        let mut k = empty();
        if let Some(t) = node.id.and_then(|id| store.get(id))
            && visible(store, t, spec)
        {
            shown[i] = true;
            if !text_sort {
                k = key_of(t, store.is_active(t), spec.sort, &ctx, &node.label);
            }
        }
        if text_sort {
            k = Key::Text(node.label.to_lowercase());
        }
        key.push(k);
    }
    // Bottom-up: visibility, best key and visible descendants.
    let mut best: Vec<Key> = (0..n).map(|_| empty()).collect();
    let mut below = vec![0u32; n];
    for i in (0..n).rev() {
        let mut b = if shown[i] && !text_sort {
            key[i].clone()
        } else {
            empty()
        };
        let mut any = shown[i];
        let mut count = 0;
        for &c in &nodes[i].children {
            if !shown[c] {
                continue;
            }
            any = true;
            count += 1 + below[c];
            if !text_sort && cmp_keys(&best[c], &b, spec.descending) == Ordering::Less {
                b = best[c].clone();
            }
        }
        shown[i] = any;
        below[i] = count;
        best[i] = if text_sort {
            std::mem::replace(&mut key[i], empty())
        } else {
            b
        };
    }
    if !shown[0] {
        return 0;
    }
    let mut widest = 0;
    let mut stack = vec![(0usize, 0u16)];
    let mut kids: Vec<usize> = Vec::new();
    while let Some((i, depth)) = stack.pop() {
        let node = &nodes[i];
        let folded = below[i] > 0 && !spec.folded.is_empty() && spec.folded.contains(&*node.path);
        let mark = if below[i] == 0 {
            TreeMark::Leaf
        } else if folded {
            TreeMark::Folded(below[i])
        } else {
            TreeMark::Open
        };
        widest = widest.max(name_width(Some(mark), depth, node.label_width, false));
        rows.push(Row {
            key: match node.id {
                Some(id) => RowKey::Cgroup(id),
                None => RowKey::Path(node.path.clone()),
            },
            id: node.id,
            label: Some(node.label.clone()),
            depth,
            path: (!node.path.is_empty()).then(|| node.path.clone()),
            tree: Some(mark),
        });
        if folded {
            continue;
        }
        kids.clear();
        kids.extend(node.children.iter().copied().filter(|&c| shown[c]));
        kids.sort_unstable_by(|&a, &b| {
            cmp_keys(&best[a], &best[b], spec.descending)
                .then_with(|| nodes[a].label.cmp(&nodes[b].label))
                .then_with(|| nodes[a].path.cmp(&nodes[b].path))
        });
        // Pushed in reverse so the first child is popped first.
        for &c in kids.iter().rev() {
            stack.push((c, depth + 1));
        }
    }
    widest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn num_order_sorts_as_cmp_keys_does() {
        let keys = [
            None,
            Some(0.0),
            Some(-0.0),
            Some(1.5),
            Some(-2.0),
            Some(f64::INFINITY),
            Some(f64::NEG_INFINITY),
            Some(1e-300),
            Some(123456.0),
            None,
            Some(1.5),
        ];
        for descending in [false, true] {
            for a in keys {
                for b in keys {
                    assert_eq!(
                        num_order(a, descending).cmp(&num_order(b, descending)),
                        cmp_keys(&Key::Num(a), &Key::Num(b), descending),
                        "{a:?} vs {b:?}, descending {descending}"
                    );
                }
            }
        }
    }
}
