//! `cargo xtask <task>`: developer tasks that are not part of the shipped binary.
use clap::{Parser, Subcommand};

mod bench;
mod sim;
mod vm;
mod workspace;

#[derive(Parser)]
#[command(about = "cgtrace developer tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Boot Debian kernels under QEMU and run cgtrace inside them (the kernel matrix).
    Vm(vm::VmArgs),
    /// Benchmarks of cgtrace's overhead on the traced host.
    Bench(bench::BenchArgs),
    /// Simulations at production scale (a Kubernetes node for an hour).
    Sim(sim::SimArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().task {
        Task::Vm(args) => vm::run(args),
        Task::Bench(args) => bench::run(args),
        Task::Sim(args) => sim::run(args),
    }
}
