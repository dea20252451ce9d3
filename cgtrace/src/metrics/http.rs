//! The `--prometheus ADDR` server: `/metrics` over HTTP/1.1 with hyper, answering from the
//! exposition rendered after the last window, so a scrape never waits for the pump (nor the pump
//! for a scrape).

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, body::Incoming, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use super::{Metrics, MetricsOptions};
use crate::model::Window;

/// Connections open at once; one more is accepted and closed at once. Every connection has its
/// own task, so idle or slow ones never hold a scrape back; they are cut at [`HEADER_TIMEOUT`]
/// (a request's head must arrive within it) or [`IDLE_TIMEOUT`] (nothing asked).
const MAX_CONNECTIONS: usize = 256;
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The rendered text the HTTP handler serves, replaced after every window.
#[derive(Clone, Default)]
pub struct Exposition(Arc<Mutex<Bytes>>);

impl Exposition {
    pub fn publish(&self, text: String) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Bytes::from(text);
    }

    fn get(&self) -> Bytes {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Metrics plus where they are served.
pub struct Exporter {
    pub metrics: Metrics,
    pub exposition: Exposition,
    /// Where it listens (the port chosen when ADDR's was 0).
    pub local_addr: SocketAddr,
}

impl Exporter {
    /// Binds `addr` and serves `/metrics` on the current tokio runtime.
    pub async fn start(addr: SocketAddr, opts: MetricsOptions) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("--prometheus {addr}: {e}"))?;
        let local_addr = listener.local_addr()?;
        let metrics = Metrics::new(opts);
        let exposition = Exposition::default();
        exposition.publish(metrics.render());
        tokio::spawn(accept_loop(listener, exposition.clone()));
        Ok(Self {
            metrics,
            exposition,
            local_addr,
        })
    }

    pub fn update(&mut self, w: &Window) {
        self.metrics.update(w);
        self.exposition.publish(self.metrics.render());
    }
}

async fn accept_loop(listener: TcpListener, exposition: Exposition) {
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    loop {
        let (conn, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                log::warn!("prometheus: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        use std::sync::atomic::Ordering::Relaxed;
        if open.fetch_add(1, Relaxed) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Relaxed);
            drop(conn);
            continue;
        }
        let (exposition, open) = (exposition.clone(), open.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let text = exposition.get();
                async move { Ok::<_, std::convert::Infallible>(respond(&req, &text)) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(true)
                .serve_connection(TokioIo::new(conn), service);
            // A connection that asks nothing for IDLE_TIMEOUT is closed.
            let _ = tokio::time::timeout(IDLE_TIMEOUT, served).await;
            open.fetch_sub(1, Relaxed);
        });
    }
}

/// The answer to one request: `/metrics` (GET or HEAD), `/`, or 404/405.
fn respond(req: &Request<Incoming>, text: &Bytes) -> Response<Full<Bytes>> {
    let head = req.method() == Method::HEAD;
    let plain = "text/plain; charset=utf-8";
    let (status, ctype, body) = if req.method() != Method::GET && !head {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            plain,
            Bytes::from_static(b"GET or HEAD only\n"),
        )
    } else {
        match req.uri().path() {
            "/metrics" => (
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                text.clone(),
            ),
            "/" => (
                StatusCode::OK,
                plain,
                Bytes::from_static(b"cgtrace: metrics at /metrics\n"),
            ),
            _ => (
                StatusCode::NOT_FOUND,
                plain,
                Bytes::from_static(b"not found: try /metrics\n"),
            ),
        }
    };
    let len = body.len();
    let mut r = Response::new(Full::new(if head { Bytes::new() } else { body }));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(ctype),
    );
    h.insert(header::CONTENT_LENGTH, header::HeaderValue::from(len));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One scrape on a new connection: the status line and the body.
    async fn get(addr: SocketAddr, path: &str) -> (String, String) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        c.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = Vec::new();
        c.read_to_end(&mut out).await.unwrap();
        let text = String::from_utf8_lossy(&out).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        (head.lines().next().unwrap().to_string(), body.to_string())
    }

    #[tokio::test]
    async fn idle_and_slow_connections_do_not_starve_a_scrape() {
        use tokio::io::AsyncWriteExt as _;
        let opts = MetricsOptions {
            max_series: 10,
            ttl: Duration::from_secs(60),
        };
        let e = Exporter::start("127.0.0.1:0".parse().unwrap(), opts)
            .await
            .unwrap();
        let addr = e.local_addr;
        let mut held = Vec::new();
        for i in 0..64 {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            if i % 2 == 1 {
                // A byte a second, never finishing its request head.
                tokio::spawn(async move {
                    for b in b"GET /metrics HTTP/1.1\r\nX: ".iter().cycle() {
                        if c.write_all(&[*b]).await.is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                });
            } else {
                held.push(c);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let t = std::time::Instant::now();
        let (status, body) = tokio::time::timeout(Duration::from_secs(1), get(addr, "/metrics"))
            .await
            .expect("a scrape answers within a second");
        assert!(t.elapsed() < Duration::from_secs(1));
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(body.ends_with("# EOF\n"), "{body}");
        let (status, _) = get(addr, "/nope").await;
        assert_eq!(status, "HTTP/1.1 404 Not Found");
        drop(held);
    }
}
