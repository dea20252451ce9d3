//! The one place where ring-buffer bytes become typed records: live (the ring buffer), when
//! recording (each record's cgroup for the name table), and offline (replay, report). A record is
//! a [`EventHeader`] with the kind at offset 0, then the payload its kind names
//! (`cgtrace_common::event`); the length is checked against that type before anything is read.

use cgtrace_common::{
    event::{
        EventHeader, KIND_CGROUP_CHURN, KIND_RUNQ_WAIT, KIND_SLOW_READ, KIND_THROTTLE,
        KIND_THROTTLE_PERIOD, KIND_THROTTLE_SLICE, KIND_THROTTLE_SLICE_V0,
    },
    reads::{CgroupChurnEvent, SlowReadEvent},
    runq::RunqEvent,
    throttle::{PeriodEvent, SLICE_ONE, SliceEvent, ThrottleEvent},
};

/// The slice record of recordings made before slices were summed in the kernel
/// (`KIND_THROTTLE_SLICE_V0`): one per switch-out.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct SliceEventV0 {
    header: EventHeader,
    cgroup_id: u64,
    runtime_ns: u64,
    pid: u32,
    tgid: u32,
    comm: [u8; 16],
}

impl From<SliceEventV0> for SliceEvent {
    /// A lone slice of no known period: it belongs to the period its group's next period
    /// record ends, as those recordings were read.
    fn from(v: SliceEventV0) -> Self {
        Self {
            header: v.header,
            cgroup_id: v.cgroup_id,
            runtime_ns: v.runtime_ns,
            pid: v.pid,
            tgid: v.tgid,
            comm: v.comm,
            period: 0,
            slices: 1,
            cpus: 1,
            flags: SLICE_ONE,
            first_ns: v.header.ts_ns,
        }
    }
}

/// One ring-buffer record, decoded.
#[derive(Clone, Copy, Debug)]
pub enum Record {
    /// `runq`: a run-queue wait at or above `--event-min-ms`.
    RunqWait(RunqEvent),
    /// `throttle`: a closed throttle episode.
    Throttle(ThrottleEvent),
    /// `throttle`: a thread's CPU time in one period of a recently throttled group.
    ThrottleSlice(SliceEvent),
    /// `throttle`: a bandwidth period of a recently throttled group ended.
    ThrottlePeriod(PeriodEvent),
    /// `reads`: a pseudo-file read at or above `--slow-read-ms`.
    SlowRead(SlowReadEvent),
    /// `reads`: a cgroup created or removed.
    CgroupChurn(CgroupChurnEvent),
}

/// Why a record could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("a record of {len} bytes has no room for its header")]
    NoHeader { len: usize },
    #[error("event kind {kind:#x}: {len} bytes, need {need}")]
    Short { kind: u32, len: usize, need: usize },
    #[error("unknown event kind {0:#x}")]
    UnknownKind(u32),
}

/// Marker for the `#[repr(C)]` record types of `cgtrace-common`: integers and byte arrays only,
/// so every bit pattern is a valid value.
///
/// # Safety
/// Implement only for `#[repr(C)]` types made of integers and integer arrays.
unsafe trait Plain: Copy {}
// SAFETY: #[repr(C)] integers and byte arrays (see cgtrace-common).
unsafe impl Plain for EventHeader {}
// SAFETY: #[repr(C)] integers and byte arrays (see cgtrace-common).
unsafe impl Plain for RunqEvent {}
// SAFETY: #[repr(C)] integers and byte arrays (see cgtrace-common).
unsafe impl Plain for ThrottleEvent {}
// SAFETY: #[repr(C)] integers and byte arrays (see cgtrace-common).
unsafe impl Plain for SliceEvent {}
// SAFETY: #[repr(C)] integers and byte arrays.
unsafe impl Plain for SliceEventV0 {}
// SAFETY: #[repr(C)] integers and byte arrays (see cgtrace-common).
unsafe impl Plain for PeriodEvent {}
// SAFETY: #[repr(C)] integers and byte arrays (see cgtrace-common).
unsafe impl Plain for SlowReadEvent {}
// SAFETY: #[repr(C)] integers and byte arrays (see cgtrace-common).
unsafe impl Plain for CgroupChurnEvent {}

/// Reads a `T` from the front of `bytes` (unaligned), if it is long enough.
fn read<T: Plain>(kind: u32, bytes: &[u8]) -> Result<T, DecodeError> {
    let need = size_of::<T>();
    if bytes.len() < need {
        return Err(DecodeError::Short {
            kind,
            len: bytes.len(),
            need,
        });
    }
    // SAFETY: the length is checked above and `T: Plain` is valid for any bytes.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// The bytes of a slice record as the kernel writes them: the sums the throttle collector reads
/// from the kernel's map become records like the ring buffer's (live, and in a recording).
pub fn slice_bytes(ev: &SliceEvent) -> &[u8] {
    // SAFETY: a #[repr(C)] record of integers and byte arrays with explicit padding (`Plain`),
    // read as its own bytes for its own lifetime.
    unsafe {
        std::slice::from_raw_parts(
            std::ptr::from_ref(ev).cast::<u8>(),
            std::mem::size_of::<SliceEvent>(),
        )
    }
}

/// The header of a record, without decoding the rest (a kind this build may not know).
pub fn header(bytes: &[u8]) -> Result<EventHeader, DecodeError> {
    read::<EventHeader>(0, bytes).map_err(|_| DecodeError::NoHeader { len: bytes.len() })
}

impl Record {
    /// Decodes one record, checking its kind and length.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        let kind = header(bytes)?.kind;
        Ok(match kind {
            KIND_RUNQ_WAIT => Self::RunqWait(read(kind, bytes)?),
            KIND_THROTTLE => Self::Throttle(read(kind, bytes)?),
            KIND_THROTTLE_SLICE => Self::ThrottleSlice(read(kind, bytes)?),
            KIND_THROTTLE_SLICE_V0 => {
                Self::ThrottleSlice(read::<SliceEventV0>(kind, bytes)?.into())
            }
            KIND_THROTTLE_PERIOD => Self::ThrottlePeriod(read(kind, bytes)?),
            KIND_SLOW_READ => Self::SlowRead(read(kind, bytes)?),
            KIND_CGROUP_CHURN => Self::CgroupChurn(read(kind, bytes)?),
            _ => return Err(DecodeError::UnknownKind(kind)),
        })
    }

    pub fn header(&self) -> &EventHeader {
        match self {
            Self::RunqWait(e) => &e.header,
            Self::Throttle(e) => &e.header,
            Self::ThrottleSlice(e) => &e.header,
            Self::ThrottlePeriod(e) => &e.header,
            Self::SlowRead(e) => &e.header,
            Self::CgroupChurn(e) => &e.header,
        }
    }

    /// The cgroup (in the run-queue hierarchy) the record is about, for the names a recording
    /// keeps: the waiting, throttled or reading cgroup, or the cgroup of whoever created or
    /// removed a cgroup. `0` when there is none.
    pub fn cgroup_id(&self) -> u64 {
        match self {
            Self::RunqWait(e) => e.cgroup_id,
            Self::Throttle(e) => e.cgroup_id,
            Self::ThrottleSlice(e) => e.cgroup_id,
            Self::ThrottlePeriod(e) => e.cgroup_id,
            Self::SlowRead(e) => e.key.cgroup_id,
            Self::CgroupChurn(e) => e.actor_cgroup,
        }
    }
}

/// A task name from a kernel `comm` buffer.
pub fn comm_str(comm: &[u8; 16]) -> String {
    let end = comm.iter().position(|&c| c == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

/// Ring-buffer records kept as bytes for `cgtrace record`, bounded: past `cap` bytes records are
/// counted in `lost` instead (the recorder takes them after every drain, so this only fills when
/// the disk stalls).
#[derive(Debug, Default)]
pub struct RawRecords {
    /// Each record as `len:u32` (native endian) then its bytes.
    pub buf: Vec<u8>,
    pub cap: usize,
    pub lost: u64,
}

impl RawRecords {
    pub fn new(cap: usize) -> Self {
        Self {
            buf: Vec::new(),
            cap,
            lost: 0,
        }
    }

    pub fn push(&mut self, rec: &[u8]) {
        if self.buf.len() + 4 + rec.len() > self.cap {
            self.lost += 1;
            return;
        }
        append(&mut self.buf, rec);
    }

    /// Calls `f` with each record kept, then forgets them.
    pub fn drain(&mut self, f: impl FnMut(&[u8])) {
        for_each(&self.buf, f);
        self.buf.clear();
    }
}

/// Appends `rec` to `buf` in the queue's format (`len:u32` native endian, then its bytes), read
/// back by [`for_each`].
pub fn append(buf: &mut Vec<u8>, rec: &[u8]) {
    buf.extend_from_slice(&(rec.len() as u32).to_ne_bytes());
    buf.extend_from_slice(rec);
}

/// Calls `f` with each record of a buffer filled by [`RawRecords::push`] or [`append`].
pub fn for_each(buf: &[u8], mut f: impl FnMut(&[u8])) {
    let mut p = 0;
    while p + 4 <= buf.len() {
        let len = u32::from_ne_bytes([buf[p], buf[p + 1], buf[p + 2], buf[p + 3]]) as usize;
        let Some(rec) = buf.get(p + 4..p + 4 + len) else {
            return;
        };
        f(rec);
        p += 4 + len;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_made_slice_record_decodes_as_itself() {
        use cgtrace_common::event::KIND_THROTTLE_SLICE;
        let ev = SliceEvent {
            header: EventHeader {
                kind: KIND_THROTTLE_SLICE,
                cpu: 3,
                ts_ns: 42,
            },
            cgroup_id: 7,
            runtime_ns: 1_000,
            pid: 5,
            tgid: 4,
            comm: *b"GC Thread#0\0\0\0\0\0",
            period: 9,
            slices: 2,
            cpus: 1,
            flags: 0,
            first_ns: 40,
        };
        let Ok(Record::ThrottleSlice(got)) = Record::from_bytes(slice_bytes(&ev)) else {
            panic!("a slice record");
        };
        assert_eq!(
            (got.cgroup_id, got.pid, got.period, got.first_ns, got.comm),
            (7, 5, 9, 40, ev.comm)
        );
    }

    use cgtrace_common::runq::WaitKind;

    use super::*;

    fn bytes_of<T: Plain>(v: &T) -> Vec<u8> {
        // SAFETY: a plain #[repr(C)] value viewed as bytes.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
    }

    #[test]
    fn decodes_by_kind_and_checks_lengths() {
        let ev = RunqEvent {
            header: EventHeader {
                kind: KIND_RUNQ_WAIT,
                cpu: 1,
                ts_ns: 42,
            },
            cgroup_id: 77,
            wait_ns: 12_345_678,
            pid: 10,
            tgid: 9,
            kind: WaitKind::Preempt as u32,
            _pad: 0,
            comm: *b"stress-ng\0\0\0\0\0\0\0",
        };
        let b = bytes_of(&ev);
        let Ok(Record::RunqWait(back)) = Record::from_bytes(&b) else {
            panic!("not a runq wait");
        };
        assert_eq!((back.cgroup_id, back.wait_ns), (77, 12_345_678));
        assert_eq!(Record::from_bytes(&b).map(|r| r.cgroup_id()), Ok(77));
        assert_eq!(
            Record::from_bytes(&b[..20]).map(|_| ()),
            Err(DecodeError::Short {
                kind: KIND_RUNQ_WAIT,
                len: 20,
                need: size_of::<RunqEvent>()
            })
        );
        assert_eq!(
            Record::from_bytes(&b[..8]).map(|_| ()),
            Err(DecodeError::NoHeader { len: 8 })
        );
        let mut unknown = b.clone();
        unknown[..4].copy_from_slice(&0x9ffu32.to_ne_bytes());
        assert_eq!(
            Record::from_bytes(&unknown).map(|_| ()),
            Err(DecodeError::UnknownKind(0x9ff))
        );
        assert_eq!(header(&unknown).map(|h| h.kind), Ok(0x9ff));
        assert_eq!(comm_str(&ev.comm), "stress-ng");
    }

    #[test]
    fn abi_sizes_are_stable() {
        use cgtrace_common::{
            hist::NR_BUCKETS,
            runq::{RunqHist, RunqKey},
        };
        assert_eq!(size_of::<RunqKey>(), 16);
        assert_eq!(size_of::<RunqHist>(), 8 * 6 + 4 * NR_BUCKETS);
        assert_eq!(size_of::<RunqEvent>(), 16 + 8 + 8 + 16 + 16);
    }

    #[test]
    fn records_come_back_in_order_and_the_cap_counts_losses() {
        let mut q = RawRecords::new(32);
        q.push(b"abc");
        q.push(b"");
        q.push(&[7; 20]);
        q.push(b"x");
        // 7 + 4 bytes kept; the 24-byte record would pass 32: counted; the last one fits.
        let mut got = Vec::new();
        for_each(&q.buf, |r| got.push(r.to_vec()));
        assert_eq!(got, vec![b"abc".to_vec(), Vec::new(), b"x".to_vec()]);
        assert_eq!(q.lost, 1);
    }
}
