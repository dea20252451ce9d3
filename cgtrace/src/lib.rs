//! cgtrace: per-cgroup scheduler latency traced with eBPF.
//!
//! Data flows one way: the kernel programs (`cgtrace-ebpf`) fill maps and a ring buffer; the
//! [`session`] reads them once per window ([`runq`], [`counters`]); the [`aggregate`] turns that
//! into [`snapshot`]s, which the [`stream`] prints, the [`top`] view shows, [`record`] writes
//! and [`metrics`] exports; [`replay`] and [`report`] read recordings.

pub mod aggregate;
pub mod attach;
pub mod btf;
pub mod cgroup;
pub mod clock;
pub mod counters;
pub mod decode;
pub mod doctor;
pub mod driver;
pub mod events;
pub mod family;
pub mod hist;
pub mod kallsyms;
pub mod layout;
pub mod loader;
pub mod metrics;
pub mod model;
pub mod record;
pub mod recorder;
pub mod replay;
pub mod report;
pub mod serve;
pub mod session;
pub mod stream;
pub mod top;
