//! Helpers for cgtrace's privileged integration tests (`tests/tests/*.rs`).
