//! cgtrace: per-cgroup run-queue latency, CFS throttling and slow pseudo-file reads, traced with
//! eBPF.
//!
//! Data flows one way (ARCHITECTURE.md has the picture): the kernel programs (`cgtrace-ebpf`)
//! fill maps and a ring buffer; the [`session`] drains the ring buffer through the [`decode`]r
//! into each [`family`]'s records and reads each family's maps once per window; the
//! [`aggregate`] and the families' collectors make a [`model::Window`], which the [`driver`]
//! hands to its sinks: the [`stream`], the [`recorder`], the [`metrics`] and the [`top`] view.
//! [`replay`] and [`report`] read recordings through the same decoder and model.

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
