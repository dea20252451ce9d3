//! A small reader of the kernel's BTF (`/sys/kernel/btf/vmlinux`): just what cgtrace needs to
//! resolve struct field offsets, enum values and tracepoint signatures at start-up, so the eBPF
//! programs read the right bytes on every kernel (rustc emits no CO-RE relocations).

pub mod layout;
pub mod patch;

use std::{collections::HashMap, path::Path};

/// Why BTF could not be used.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error("cannot read BTF from {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("not BTF (bad magic or truncated header)")]
    BadHeader,
    #[error("BTF truncated at type {id}")]
    Truncated { id: u32 },
    #[error("BTF type kind {kind} of type {id} is unknown")]
    UnknownKind { id: u32, kind: u32 },
}

const MAGIC: u16 = 0xeb9f;

/// BTF type kinds (`BTF_KIND_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Int,
    Ptr,
    Array,
    Struct,
    Union,
    Enum,
    Fwd,
    Typedef,
    Volatile,
    Const,
    Restrict,
    Func,
    FuncProto,
    Var,
    Datasec,
    Float,
    DeclTag,
    TypeTag,
    Enum64,
}

/// A struct or union member.
#[derive(Clone, Debug)]
pub struct Member {
    pub name: String,
    pub type_id: u32,
    /// Offset from the start of the enclosing struct, in bits.
    pub bit_offset: u32,
    /// Width in bits for a bitfield, 0 otherwise.
    pub bitfield_size: u32,
}

/// One BTF type, decoded.
#[derive(Clone, Debug)]
pub struct Type {
    pub kind: Kind,
    pub name: String,
    /// `size` for ints, structs, unions, enums; the referenced type for pointers, typedefs,
    /// modifiers, funcs and func protos (return type).
    pub size_or_type: u32,
    pub members: Vec<Member>,
    /// Enumerators (name, value) of enums.
    pub enumerators: Vec<(String, i64)>,
    /// Parameter types of func protos.
    pub params: Vec<u32>,
    /// Element type and count of arrays.
    pub array: Option<(u32, u32)>,
}

/// A parsed BTF blob.
pub struct Btf {
    types: Vec<Type>,
    by_name: HashMap<String, Vec<u32>>,
}

/// Where a field is and how big it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldInfo {
    /// Byte offset from the start of the outermost struct.
    pub offset: u32,
    /// Size of the field's type in bytes (after typedefs and modifiers).
    pub size: u32,
    /// Bit position within the byte at `offset` and width, for bitfields.
    pub bitfield: Option<(u32, u32)>,
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

impl Btf {
    /// The running kernel's BTF.
    pub fn from_sys_fs() -> Result<Self, BtfError> {
        Self::from_file(Path::new("/sys/kernel/btf/vmlinux"))
    }

    pub fn from_file(path: &Path) -> Result<Self, BtfError> {
        let data = std::fs::read(path).map_err(|source| BtfError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&data)
    }

    /// Parses a little-endian BTF blob.
    pub fn parse(b: &[u8]) -> Result<Self, BtfError> {
        if b.len() < 24 || u16::from_le_bytes([b[0], b[1]]) != MAGIC {
            return Err(BtfError::BadHeader);
        }
        let hdr_len = u32_at(b, 4).ok_or(BtfError::BadHeader)? as usize;
        let type_off = u32_at(b, 8).ok_or(BtfError::BadHeader)? as usize;
        let type_len = u32_at(b, 12).ok_or(BtfError::BadHeader)? as usize;
        let str_off = u32_at(b, 16).ok_or(BtfError::BadHeader)? as usize;
        let str_len = u32_at(b, 20).ok_or(BtfError::BadHeader)? as usize;
        let types_at = hdr_len + type_off;
        let strs_at = hdr_len + str_off;
        let tsec = b
            .get(types_at..types_at + type_len)
            .ok_or(BtfError::BadHeader)?;
        let ssec = b
            .get(strs_at..strs_at + str_len)
            .ok_or(BtfError::BadHeader)?;
        let name = |off: u32| -> String {
            let Some(rest) = ssec.get(off as usize..) else {
                return String::new();
            };
            let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
            String::from_utf8_lossy(&rest[..end]).into_owned()
        };
        // Type id 0 is void.
        let mut types = vec![Type::void()];
        let mut pos = 0usize;
        while pos < tsec.len() {
            let id = types.len() as u32;
            let trunc = BtfError::Truncated { id };
            let name_off = u32_at(tsec, pos).ok_or(BtfError::Truncated { id })?;
            let info = u32_at(tsec, pos + 4).ok_or(BtfError::Truncated { id })?;
            let size_or_type = u32_at(tsec, pos + 8).ok_or(trunc)?;
            pos += 12;
            let vlen = (info & 0xffff) as usize;
            let kind_flag = info >> 31 == 1;
            let raw_kind = (info >> 24) & 0x1f;
            let mut t = Type {
                kind: Kind::Int,
                name: name(name_off),
                size_or_type,
                members: Vec::new(),
                enumerators: Vec::new(),
                params: Vec::new(),
                array: None,
            };
            let need = |pos: usize, n: usize| -> Result<(), BtfError> {
                if pos + n > tsec.len() {
                    Err(BtfError::Truncated { id })
                } else {
                    Ok(())
                }
            };
            t.kind = match raw_kind {
                1 => {
                    need(pos, 4)?;
                    pos += 4;
                    Kind::Int
                }
                2 => Kind::Ptr,
                3 => {
                    need(pos, 12)?;
                    let elem = u32_at(tsec, pos).unwrap_or(0);
                    let n = u32_at(tsec, pos + 8).unwrap_or(0);
                    t.array = Some((elem, n));
                    pos += 12;
                    Kind::Array
                }
                4 | 5 => {
                    need(pos, 12 * vlen)?;
                    for i in 0..vlen {
                        let m = pos + 12 * i;
                        let off = u32_at(tsec, m + 8).unwrap_or(0);
                        let (bit_offset, bitfield_size) = if kind_flag {
                            (off & 0x00ff_ffff, off >> 24)
                        } else {
                            (off, 0)
                        };
                        t.members.push(Member {
                            name: name(u32_at(tsec, m).unwrap_or(0)),
                            type_id: u32_at(tsec, m + 4).unwrap_or(0),
                            bit_offset,
                            bitfield_size,
                        });
                    }
                    pos += 12 * vlen;
                    if raw_kind == 4 {
                        Kind::Struct
                    } else {
                        Kind::Union
                    }
                }
                6 => {
                    need(pos, 8 * vlen)?;
                    for i in 0..vlen {
                        let e = pos + 8 * i;
                        let v = u32_at(tsec, e + 4).unwrap_or(0);
                        let v = if kind_flag {
                            i64::from(v as i32)
                        } else {
                            i64::from(v)
                        };
                        t.enumerators.push((name(u32_at(tsec, e).unwrap_or(0)), v));
                    }
                    pos += 8 * vlen;
                    Kind::Enum
                }
                7 => Kind::Fwd,
                8 => Kind::Typedef,
                9 => Kind::Volatile,
                10 => Kind::Const,
                11 => Kind::Restrict,
                12 => Kind::Func,
                13 => {
                    need(pos, 8 * vlen)?;
                    for i in 0..vlen {
                        t.params.push(u32_at(tsec, pos + 8 * i + 4).unwrap_or(0));
                    }
                    pos += 8 * vlen;
                    Kind::FuncProto
                }
                14 => {
                    need(pos, 4)?;
                    pos += 4;
                    Kind::Var
                }
                15 => {
                    need(pos, 12 * vlen)?;
                    pos += 12 * vlen;
                    Kind::Datasec
                }
                16 => Kind::Float,
                17 => {
                    need(pos, 4)?;
                    pos += 4;
                    Kind::DeclTag
                }
                18 => Kind::TypeTag,
                19 => {
                    need(pos, 12 * vlen)?;
                    for i in 0..vlen {
                        let e = pos + 12 * i;
                        let lo = u64::from(u32_at(tsec, e + 4).unwrap_or(0));
                        let hi = u64::from(u32_at(tsec, e + 8).unwrap_or(0));
                        t.enumerators
                            .push((name(u32_at(tsec, e).unwrap_or(0)), ((hi << 32) | lo) as i64));
                    }
                    pos += 12 * vlen;
                    Kind::Enum64
                }
                kind => return Err(BtfError::UnknownKind { id, kind }),
            };
            types.push(t);
        }
        let mut by_name: HashMap<String, Vec<u32>> = HashMap::new();
        for (id, t) in types.iter().enumerate() {
            if !t.name.is_empty() {
                by_name.entry(t.name.clone()).or_default().push(id as u32);
            }
        }
        Ok(Self { types, by_name })
    }

    pub fn get(&self, id: u32) -> Option<&Type> {
        self.types.get(id as usize)
    }

    /// The first type named `name` of kind `kind`.
    pub fn find(&self, name: &str, kind: Kind) -> Option<u32> {
        self.by_name
            .get(name)?
            .iter()
            .copied()
            .find(|&id| self.types[id as usize].kind == kind)
    }

    /// Whether the kernel has a function (BTF `FUNC`) called `name`.
    pub fn has_func(&self, name: &str) -> bool {
        self.find(name, Kind::Func).is_some()
    }

    /// Follows typedefs and modifiers to the underlying type.
    pub fn resolve(&self, mut id: u32) -> u32 {
        for _ in 0..32 {
            match self.get(id).map(|t| t.kind) {
                Some(
                    Kind::Typedef | Kind::Volatile | Kind::Const | Kind::Restrict | Kind::TypeTag,
                ) => id = self.types[id as usize].size_or_type,
                _ => break,
            }
        }
        id
    }

    /// Size in bytes of a type.
    pub fn size_of(&self, id: u32) -> u32 {
        let id = self.resolve(id);
        match self.get(id) {
            Some(t) => match t.kind {
                Kind::Ptr => 8,
                Kind::Array => t
                    .array
                    .map(|(elem, n)| self.size_of(elem).saturating_mul(n))
                    .unwrap_or(0),
                Kind::Int
                | Kind::Struct
                | Kind::Union
                | Kind::Enum
                | Kind::Enum64
                | Kind::Float => t.size_or_type,
                _ => 0,
            },
            None => 0,
        }
    }

    /// Finds `field` in struct `strukt`, looking through anonymous struct/union members.
    pub fn field(&self, strukt: &str, field: &str) -> Option<FieldInfo> {
        let id = self
            .find(strukt, Kind::Struct)
            .or_else(|| self.find(strukt, Kind::Union))?;
        self.field_in(id, field, 0)
    }

    /// Resolves a dotted path such as `se.cfs_rq` (nested structs by value, not pointers).
    pub fn field_path(&self, strukt: &str, path: &str) -> Option<FieldInfo> {
        let mut id = self
            .find(strukt, Kind::Struct)
            .or_else(|| self.find(strukt, Kind::Union))?;
        let mut base = 0u32;
        let mut parts = path.split('.').peekable();
        while let Some(part) = parts.next() {
            let f = self.field_in(id, part, 0)?;
            if parts.peek().is_none() {
                return Some(FieldInfo {
                    offset: base + f.offset,
                    ..f
                });
            }
            base += f.offset;
            id = self.resolve(self.member_type(id, part)?);
        }
        None
    }

    fn member_type(&self, id: u32, field: &str) -> Option<u32> {
        let t = self.get(self.resolve(id))?;
        for m in &t.members {
            if m.name == field {
                return Some(m.type_id);
            }
            if m.name.is_empty()
                && let Some(found) = self.member_type(m.type_id, field)
            {
                return Some(found);
            }
        }
        None
    }

    fn field_in(&self, id: u32, field: &str, base_bits: u32) -> Option<FieldInfo> {
        let t = self.get(self.resolve(id))?;
        for m in &t.members {
            let bits = base_bits + m.bit_offset;
            if m.name == field {
                let size = self.size_of(m.type_id);
                let bitfield = (m.bitfield_size != 0).then_some((bits % 8, m.bitfield_size));
                return Some(FieldInfo {
                    offset: bits / 8,
                    size,
                    bitfield,
                });
            }
            if m.name.is_empty()
                && let Some(found) = self.field_in(m.type_id, field, bits)
            {
                return Some(found);
            }
        }
        None
    }

    /// Value of enumerator `name` of enum `enum_name`.
    pub fn enum_value(&self, enum_name: &str, name: &str) -> Option<i64> {
        let id = self
            .find(enum_name, Kind::Enum)
            .or_else(|| self.find(enum_name, Kind::Enum64))?;
        self.types[id as usize]
            .enumerators
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, v)| v)
    }

    /// Number of arguments a BTF tracepoint passes to its programs (`btf_trace_<tp>` typedef,
    /// minus the leading `void *__data`), or `None` if the tracepoint does not exist.
    pub fn tracepoint_args(&self, tp: &str) -> Option<usize> {
        let td = self.find(&format!("btf_trace_{tp}"), Kind::Typedef)?;
        let ptr = self.resolve(td);
        let proto = self.get(ptr).filter(|t| t.kind == Kind::Ptr)?.size_or_type;
        let proto = self.get(proto).filter(|t| t.kind == Kind::FuncProto)?;
        Some(proto.params.len().saturating_sub(1))
    }
}

impl Type {
    fn void() -> Self {
        Self {
            kind: Kind::Int,
            name: String::new(),
            size_or_type: 0,
            members: Vec::new(),
            enumerators: Vec::new(),
            params: Vec::new(),
            array: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Option<Btf> {
        Btf::from_sys_fs().ok()
    }

    #[test]
    fn rejects_garbage() {
        assert!(matches!(
            Btf::parse(b"not btf at all, no"),
            Err(BtfError::BadHeader)
        ));
        assert!(matches!(Btf::parse(&[]), Err(BtfError::BadHeader)));
    }

    /// A hand-made blob: header, one struct type claiming 5 members but carrying none.
    fn blob(types: &[u8], strs: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&[1, 0]);
        for v in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strs.len() as u32,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(types);
        b.extend_from_slice(strs);
        b
    }

    #[test]
    fn truncated_type_section_is_an_error_not_a_panic() {
        let mut t = Vec::new();
        for v in [1u32, (4 << 24) | 5, 16] {
            t.extend_from_slice(&v.to_le_bytes());
        }
        let b = blob(&t, b"\0foo\0");
        assert!(matches!(Btf::parse(&b), Err(BtfError::Truncated { id: 1 })));
    }

    #[test]
    fn parses_a_struct_with_a_bitfield() {
        // int "int" size 4; struct "s" { int a; int b:3 at bit 35 }.
        let mut t = Vec::new();
        for v in [5u32, 1 << 24, 4, 0x20] {
            t.extend_from_slice(&v.to_le_bytes());
        }
        for v in [
            9u32,
            (4 << 24) | (1 << 31) | 2,
            8,
            11,
            1,
            0,
            13,
            1,
            (3 << 24) | 35,
        ] {
            t.extend_from_slice(&v.to_le_bytes());
        }
        let btf = Btf::parse(&blob(&t, b"\0\0\0\0\0int\0s\0a\0b\0")).expect("parse");
        let a = btf.field("s", "a").expect("a");
        assert_eq!((a.offset, a.size, a.bitfield), (0, 4, None));
        let b = btf.field("s", "b").expect("b");
        assert_eq!((b.offset, b.bitfield), (4, Some((3, 3))));
        assert!(btf.field("s", "c").is_none());
    }

    #[test]
    fn host_kernel_fields_resolve() {
        let Some(btf) = host() else {
            eprintln!("skipping: no readable kernel BTF");
            return;
        };
        let pid = btf.field("task_struct", "pid").expect("task_struct.pid");
        assert_eq!(pid.size, 4);
        let comm = btf.field("task_struct", "comm").expect("task_struct.comm");
        assert_eq!(comm.size, 16);
        let id = btf.field("kernfs_node", "id").expect("kernfs_node.id");
        assert_eq!(id.size, 8);
        assert!(btf.enum_value("cgroup_subsys_id", "cpu_cgrp_id").is_some());
        // sched_switch has had prev_state since 5.18.
        let n = btf.tracepoint_args("sched_switch").expect("sched_switch");
        assert!(n == 3 || n == 4, "{n}");
        assert_eq!(btf.tracepoint_args("sched_wakeup"), Some(1));
        assert!(btf.tracepoint_args("no_such_tracepoint").is_none());
        // A field inside an embedded struct.
        let cfs_rq = btf
            .field_path("task_struct", "se.cfs_rq")
            .expect("se.cfs_rq");
        assert_eq!(cfs_rq.size, 8);
    }
}
