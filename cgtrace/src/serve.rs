//! `cgtrace serve --prometheus ADDR`: headless; traces and serves the windows as OpenMetrics
//! (see [`crate::metrics`]) until SIGINT/SIGTERM or `--duration`.

use std::{net::SocketAddr, time::Duration};

use tokio::{
    signal::unix::{SignalKind, signal},
    time::sleep,
};

use crate::{
    metrics::{Exporter, MetricsOptions},
    session::{Pump, Pumped, SessionOptions},
};

pub async fn run(
    opts: SessionOptions,
    addr: SocketAddr,
    mopts: MetricsOptions,
    duration: Option<Duration>,
) -> anyhow::Result<()> {
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut pump = Pump::start(&opts)?;
    let mut exporter = Exporter::start(addr, mopts).await?;
    eprintln!("cgtrace: serving OpenMetrics on http://{addr}/metrics");
    let deadline = sleep(duration.unwrap_or(Duration::from_secs(u64::MAX / 4)));
    tokio::pin!(deadline);
    loop {
        let pumped = tokio::select! {
            p = pump.next(None) => p?,
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
            () = &mut deadline => break,
        };
        if let Pumped::Window(w) = pumped {
            exporter.update(&w);
        }
    }
    Ok(())
}
