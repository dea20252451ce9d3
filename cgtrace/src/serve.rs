//! `cgtrace serve --prometheus ADDR`: headless; traces and serves the windows as OpenMetrics
//! (see [`crate::metrics`]) until SIGINT/SIGTERM or `--duration`.

use std::{net::SocketAddr, time::Duration};

use crate::{
    driver,
    metrics::{Exporter, MetricsOptions},
    session::{Pump, SessionOptions},
};

pub async fn run(
    opts: SessionOptions,
    addr: SocketAddr,
    mopts: MetricsOptions,
    duration: Option<Duration>,
) -> anyhow::Result<()> {
    let (_stop, control) = driver::stop_on_signals(duration)?;
    let pump = Pump::start(&opts)?;
    let mut exporter = Exporter::start(addr, mopts).await?;
    crate::privilege::drop_after_attach("serve");
    eprintln!("cgtrace: serving OpenMetrics on http://{addr}/metrics");
    driver::run(pump, &mut [&mut exporter], control).await?;
    Ok(())
}
