//! What keeps a tracer that reads tenant-controlled text and runs as root safe to run:
//! [`escape`] (tenant text for terminals, pages and JSON lines), [`privilege`] (capabilities
//! dropped after attach) and [`files`] (files created owner-only, never through a link).

pub mod escape;
pub mod files;
pub mod privilege;
