//! A live run: the [`session`] (tracer, collectors, ring-buffer records and the [`aggregate`]r)
//! makes one window per interval; the [`driver`] hands each turn to its sinks. The live commands
//! differ only in their sinks: [`stream`] (NDJSON on stdout), [`recorder`] (`cgtrace record`),
//! [`serve`] (Prometheus and OTLP), and the view (`crate::top::source`).
//!
//! Offline code (recordings, replay, report, the view's player) never imports this folder's
//! session or driver.

pub mod aggregate;
pub mod driver;
pub mod outputs;
pub mod recorder;
pub mod serve;
pub mod session;
pub mod stream;
