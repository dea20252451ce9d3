//! Placeholder: being written (benchmarks).
#[derive(clap::Args)]
pub struct BenchArgs {}
pub fn run(_args: BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet written")
}
