//! The end of every live command: the driver runs the command's own sinks, then the metrics
//! outputs it was asked for (`--prometheus`, `--otlp`), and the OTLP pusher sends what is left
//! once the run stops.

use crate::{
    live::{
        driver::{self, Control, Sink},
        session::Pump,
    },
    metrics::{http::Exporter, otlp::Pusher},
};

/// Runs `pump` into `sinks` (in order), then the exporter and the pusher, until `control` stops
/// it; flushes the pusher at the end.
pub async fn run(
    pump: Pump,
    first: Vec<&mut dyn Sink>,
    (exporter, pusher): &mut (Option<Exporter>, Option<Pusher>),
    control: tokio::sync::mpsc::UnboundedReceiver<Control>,
) -> anyhow::Result<()> {
    {
        let mut sinks: Vec<&mut dyn Sink> = first.into_iter().map(|s| s as &mut dyn Sink).collect();
        if let Some(e) = exporter.as_mut() {
            sinks.push(e);
        }
        if let Some(p) = pusher.as_mut() {
            sinks.push(p);
        }
        driver::run(pump, &mut sinks, control).await?;
    }
    if let Some(p) = pusher.as_mut() {
        p.flush().await;
    }
    Ok(())
}
