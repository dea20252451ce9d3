//! Map access aya 0.16 does not give: whole hash maps read in batches ([`batch`]) and arrays
//! mapped into the daemon ([`mmap_array`]).

pub mod batch;
pub mod mmap_array;
