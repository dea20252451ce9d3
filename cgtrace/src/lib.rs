//! cgtrace: per-cgroup run-queue latency, CFS throttling and slow pseudo-file reads, traced with
//! eBPF.
//!
//! Data flows one way (ARCHITECTURE.md has the picture and a row per folder): the kernel
//! programs (`cgtrace-ebpf`) fill maps and a ring buffer, which [`bpf`] loads, attaches and
//! reads; the live [`session`](live::session) turns ring-buffer bytes into records through the
//! [`decode`]r and each [`family`]'s records, reads each family's maps once per window, and the
//! [`aggregate`](live::aggregate)or makes a [`model::Window`], which the
//! [`driver`](live::driver) hands to its sinks: the [`stream`](live::stream), the
//! [`recorder`](live::recorder), the [`metrics`] and the [`top`] view. Offline, [`replay`] and
//! [`report`] read [`record`]ings through the same decoder, families and model. [`cgroup`]
//! names cgroups; [`safety`] escapes tenant text, drops privileges and creates files safely.

pub mod bpf;
pub mod cgroup;
pub mod decode;
pub mod doctor;
pub mod family;
pub mod hist;
pub mod live;
pub mod metrics;
pub mod model;
pub mod record;
pub mod replay;
pub mod report;
pub mod safety;
pub mod selfstat;
pub mod top;
pub mod units;
pub mod whatif;
