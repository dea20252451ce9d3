//! `cargo xtask bench`: benchmarks of cgtrace's overhead on the traced host, one module per
//! benchmark: [`runq`] (a scheduler-heavy load under cgtrace and under runqlat), [`reads`] (what
//! the reads family adds to one read syscall), [`record`] (what recording costs), [`cgroups`]
//! (the daemon's memory and CPU at 10 000 cgroups) and [`render`] (the view's snapshot and frame
//! at 10 000 cgroups, against another build).

use anyhow::Result;
use clap::{Args, Subcommand};

mod cgroups;
mod reads;
mod record;
mod render;
mod runq;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// Slowdown of `perf bench sched pipe` under cgtrace and under runqlat, vs bare.
    Runq(runq::RunqArgs),
    /// Nanoseconds added per read syscall (regular and cgroup files, 1-byte reads) by cgtrace.
    Reads(reads::ReadsArgs),
    /// Recording costs: bytes per event on disk, recorder CPU at an event rate, replay speed
    /// (`cgtrace/benches/record.rs`, synthetic records shaped like the kernel's).
    Record(record::RecordBenchArgs),
    /// The daemon's RSS and CPU with 10 000 cgroups, each with a thread waking once a second.
    Cgroups(cgroups::CgroupsArgs),
    /// The view's snapshot plus frame at 10 000 cgroups, flat and tree, interleaved with another
    /// build's (`cgtrace/benches/render.rs`).
    Render(render::RenderArgs),
}

/// The median (the mean of the two middle values for an even count); `None` for no values.
fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

pub fn run(args: BenchArgs) -> Result<()> {
    match args.bench {
        Bench::Runq(args) => runq::run(args),
        Bench::Reads(args) => reads::run(args),
        Bench::Record(args) => record::run(args),
        Bench::Cgroups(args) => cgroups::run(args),
        Bench::Render(args) => render::run(args),
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_even_and_empty() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
