//! cgtrace: per-cgroup run-queue latency, CFS throttling and slow pseudo-file reads, traced with
//! eBPF.
//!
//! Data flows one way (ARCHITECTURE.md has the picture): the kernel programs (`cgtrace-ebpf`)
//! fill maps and a ring buffer; the [`session`] drains the ring buffer through the [`decode`]r
//! into each [`family`]'s records and reads each family's maps once per window; the
//! [`aggregate`] and the families' collectors make a [`model::Window`], which the [`driver`]
//! hands to its sinks: the [`stream`], the [`recorder`], the [`metrics`] and the [`top`] view.
//! [`replay`] and [`report`] read recordings through the same decoder and model.

pub mod aggregate;
pub mod attach;
pub mod btf;
pub mod btfpatch;
pub mod cgroup;
pub mod clock;
pub mod counters;
pub mod decode;
pub mod doctor;
pub mod drain;
pub mod driver;
pub mod escape;
pub mod events;
pub mod family;
pub mod hist;
pub mod kallsyms;
pub mod layout;
pub mod loader;
pub mod mapbatch;
pub mod metrics;
pub mod mmaparray;
pub mod model;
pub mod privilege;
pub mod progstats;
pub mod record;
pub mod recorder;
pub mod replay;
pub mod report;
pub mod selfstat;
pub mod serve;
pub mod session;
pub mod stream;
pub mod top;
