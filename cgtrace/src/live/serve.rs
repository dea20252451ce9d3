//! `cgtrace serve`: headless; traces and serves the windows as OpenMetrics (`--prometheus ADDR`,
//! see [`crate::metrics`]) and/or pushes them as OTLP (`--otlp URL`, see
//! [`crate::metrics::otlp`]) until SIGINT/SIGTERM or `--duration`.

use std::time::Duration;

use crate::{
    live::driver,
    live::session::{Pump, SessionOptions},
    metrics::outputs::Outputs,
};

pub async fn run(
    opts: SessionOptions,
    out: Outputs,
    duration: Option<Duration>,
) -> anyhow::Result<()> {
    let (_stop, control) = driver::stop_on_signals(duration)?;
    let pump = Pump::start(&opts)?;
    let mut metrics = out.start(&pump.session.hello.host)?;
    crate::safety::privilege::drop_after_attach("serve");
    if let Some(addr) = out.prometheus {
        eprintln!("cgtrace: serving OpenMetrics on http://{addr}/metrics");
    }
    if let Some(url) = &out.otlp {
        eprintln!("cgtrace: pushing OTLP metrics to {url} after every window");
    }
    crate::live::outputs::run(pump, Vec::new(), &mut metrics, control).await?;
    Ok(())
}
