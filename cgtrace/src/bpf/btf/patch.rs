//! Retyping one BTF map definition of the eBPF object before it is loaded.
//!
//! A BTF map's type is the length of the array its `type` member points to. The run-queue wait
//! starts live in task-local storage (`RUNQ_START_TASK`), which kernels before 6.1 cannot give
//! tracing programs safely (5.10 has no task storage at all, so creating the map would fail the
//! whole load). There the loader turns that map into a one-entry hash the programs never touch
//! (they use the `RUNQ_START` hash instead, chosen by `Config::runq_start_task`), so one object
//! loads everywhere. The array is found by its element type, a struct named only for this
//! ([`TASK_STORAGE_TAG`]), so no other type of the object can share it.

use object::{Object as _, ObjectSection as _};
use zerocopy::IntoBytes as _;

/// The element type of `RUNQ_START_TASK`'s map-type array in the object's BTF.
pub const TASK_STORAGE_TAG: &str = "CgtraceTaskStorageType";

/// Why the object could not be retyped (a build of cgtrace-ebpf that does not match this
/// loader).
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("the eBPF object cannot be read: {0}")]
    Elf(#[from] object::Error),
    #[error("the eBPF object has no .BTF section (cgtrace-ebpf must be linked with --btf)")]
    NoBtf,
    #[error("the eBPF object's BTF is malformed: {0}")]
    Malformed(&'static str),
    #[error("the eBPF object's BTF has no map-type array of {0}")]
    NotFound(&'static str),
}

/// An object copy aligned like `include_bytes_aligned!` (the ELF parser reads it in place).
pub struct AlignedObject {
    words: Vec<u64>,
    len: usize,
}

impl AlignedObject {
    pub fn new(bytes: &[u8]) -> Self {
        let mut this = Self {
            words: vec![0u64; bytes.len().div_ceil(8)],
            len: bytes.len(),
        };
        this.bytes_mut().copy_from_slice(bytes);
        this
    }

    pub fn bytes(&self) -> &[u8] {
        &self.words.as_bytes()[..self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.words.as_mut_bytes()[..self.len]
    }
}

/// A copy of the object `obj` in which the map whose type array has element type `tag` is of
/// type `map_type` (a `bpf_map_type`).
pub fn retype_map(
    obj: &[u8],
    tag: &'static str,
    map_type: u32,
) -> Result<AlignedObject, PatchError> {
    let range = {
        let file = object::File::parse(obj)?;
        let btf = file.section_by_name(".BTF").ok_or(PatchError::NoBtf)?;
        btf.file_range().ok_or(PatchError::NoBtf)?
    };
    let (start, size) = (range.0 as usize, range.1 as usize);
    let mut out = AlignedObject::new(obj);
    let btf = out
        .bytes_mut()
        .get_mut(start..start.saturating_add(size))
        .ok_or(PatchError::Malformed("section outside the file"))?;
    retype_in_btf(btf, tag, map_type)?;
    Ok(out)
}

const BTF_MAGIC: u16 = 0xeb9f;
const KIND_INT: u32 = 1;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_ENUM64: u32 = 19;

fn u32_at(b: &[u8], at: usize) -> Result<u32, PatchError> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(PatchError::Malformed("truncated"))
}

/// Sets `nelems` of every array whose element is the struct named `tag` in the BTF blob `btf`
/// (little-endian, as the BPF target writes it) to `nelems`; at least one must exist.
pub fn retype_in_btf(btf: &mut [u8], tag: &'static str, nelems: u32) -> Result<(), PatchError> {
    if btf.len() < 24 || u16::from_le_bytes([btf[0], btf[1]]) != BTF_MAGIC {
        return Err(PatchError::Malformed("no BTF header"));
    }
    let hdr_len = u32_at(btf, 4)? as usize;
    let (type_off, type_len) = (u32_at(btf, 8)? as usize, u32_at(btf, 12)? as usize);
    let str_off = u32_at(btf, 16)? as usize;
    let types = hdr_len + type_off;
    let types_end = types + type_len;
    let strings = hdr_len + str_off;
    let name_is = |b: &[u8], off: u32| -> bool {
        let at = strings + off as usize;
        b.get(at..at + tag.len() + 1)
            .is_some_and(|s| &s[..tag.len()] == tag.as_bytes() && s[tag.len()] == 0)
    };
    // Type ids start at 1; arrays refer to their element by id, and may come before it.
    let mut tag_ids = Vec::new();
    let mut arrays = Vec::new(); // (element type id, offset of nelems)
    let (mut at, mut id) = (types, 1u32);
    while at < types_end {
        let name_off = u32_at(btf, at)?;
        let info = u32_at(btf, at + 4)?;
        let (kind, vlen) = ((info >> 24) & 0x1f, (info & 0xffff) as usize);
        at += 12;
        let extra = match kind {
            KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
            KIND_ARRAY => 12,
            KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 12 * vlen,
            KIND_ENUM | KIND_FUNC_PROTO => 8 * vlen,
            _ => 0,
        };
        if kind == KIND_STRUCT && name_is(btf, name_off) {
            tag_ids.push(id);
        }
        if kind == KIND_ARRAY {
            arrays.push((u32_at(btf, at)?, at + 8));
        }
        at += extra;
        id += 1;
    }
    if at != types_end {
        return Err(PatchError::Malformed("types overrun their section"));
    }
    let mut found = false;
    for (elem, nelems_at) in arrays {
        if tag_ids.contains(&elem) {
            btf[nelems_at..nelems_at + 4].copy_from_slice(&nelems.to_le_bytes());
            found = true;
        }
    }
    if found {
        Ok(())
    } else {
        Err(PatchError::NotFound(tag))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob: `[1] INT u8`, `[2] ARRAY of [3] x29`, `[3] STRUCT tag { u8 }`, `[4] ARRAY of
    /// [1] x29` (an unrelated array of the same length), strings.
    fn blob(tag: &str) -> Vec<u8> {
        let strings = format!("\0u8\0{tag}\0f\0");
        let (u8_name, tag_name, f_name) = (1u32, 4u32, 4 + tag.len() as u32 + 1);
        let mut types = Vec::new();
        let mut push = |words: &[u32]| words.iter().for_each(|w| types.extend(w.to_le_bytes()));
        push(&[u8_name, KIND_INT << 24, 1, 8]);
        push(&[0, KIND_ARRAY << 24, 0, 3, 1, 29]);
        push(&[tag_name, (KIND_STRUCT << 24) | 1, 1, f_name, 1, 0]);
        push(&[0, KIND_ARRAY << 24, 0, 1, 1, 29]);
        let mut b = Vec::new();
        b.extend(BTF_MAGIC.to_le_bytes());
        b.extend([1u8, 0]);
        for w in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            b.extend(w.to_le_bytes());
        }
        b.extend(types);
        b.extend(strings.as_bytes());
        b
    }

    fn nelems(b: &[u8], array: usize) -> u32 {
        // Arrays are types 2 and 4: after the INT (16 bytes), an array is 24, the struct 24.
        let at = 24 + if array == 2 { 16 } else { 16 + 24 + 24 } + 12 + 8;
        u32_at(b, at).unwrap()
    }

    #[test]
    fn only_the_array_of_the_tag_struct_is_retyped() {
        let mut b = blob(TASK_STORAGE_TAG);
        retype_in_btf(&mut b, TASK_STORAGE_TAG, 1).unwrap();
        assert_eq!(nelems(&b, 2), 1);
        assert_eq!(nelems(&b, 4), 29);
    }

    #[test]
    fn a_missing_tag_or_a_prefix_of_it_is_an_error() {
        let mut b = blob("CgtraceTaskStorageTypeX");
        assert!(matches!(
            retype_in_btf(&mut b, TASK_STORAGE_TAG, 1),
            Err(PatchError::NotFound(_))
        ));
        assert_eq!(nelems(&b, 2), 29);
        let mut short = blob(TASK_STORAGE_TAG);
        short.truncate(30);
        assert!(retype_in_btf(&mut short, TASK_STORAGE_TAG, 1).is_err());
        assert!(retype_in_btf(&mut [0u8; 10], TASK_STORAGE_TAG, 1).is_err());
    }

    /// The object this binary carries (empty in stub builds): its task-storage map is found.
    #[test]
    fn the_embedded_object_can_be_retyped() {
        let obj = crate::bpf::loader::object();
        if obj.is_empty() {
            eprintln!("stub build: no eBPF object to retype");
            return;
        }
        let patched = retype_map(obj, TASK_STORAGE_TAG, 1).unwrap();
        assert_eq!(patched.bytes().len(), obj.len());
        assert_ne!(patched.bytes(), obj);
    }
}
