//! Where the metrics go, as the command line asked: served for Prometheus ([`super::http`]),
//! pushed as OTLP ([`super::otlp`]), or both.

use std::net::SocketAddr;

use super::{MetricsOptions, http::Exporter, otlp};

/// Where the metrics go: served for Prometheus, pushed as OTLP, or both.
#[derive(Clone, Debug, Default)]
pub struct Outputs {
    pub prometheus: Option<SocketAddr>,
    pub otlp: Option<hyper::Uri>,
    pub opts: MetricsOptions,
}

impl Outputs {
    pub fn is_empty(&self) -> bool {
        self.prometheus.is_none() && self.otlp.is_none()
    }

    /// Binds the Prometheus port and makes the OTLP pusher, as asked.
    pub fn start(&self, host: &str) -> anyhow::Result<(Option<Exporter>, Option<otlp::Pusher>)> {
        let exporter = match self.prometheus {
            Some(addr) => Some(Exporter::start(addr, self.opts)?),
            None => None,
        };
        let pusher = self
            .otlp
            .clone()
            .map(|u| otlp::Pusher::new(u, self.opts, host.to_string()));
        Ok((exporter, pusher))
    }
}
