//! The `--prometheus ADDR` server: `/metrics` over HTTP/1.1 with hyper, answering from the
//! exposition rendered after the last window, so a scrape never waits for the pump (nor the pump
//! for a scrape). It runs on a thread of its own (`cgtrace-http`, its own single-threaded tokio
//! runtime): the pump's map walks and cgroupfs reads, which take seconds behind thousands of
//! dying memcgs, never delay an answer or the liveness probe.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::{Body as _, Incoming},
    header,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_io_timeout::TimeoutStream;

use super::{
    Metrics, MetricsOptions,
    peers::{Limits, Peers},
};
use crate::model::Window;

/// Connections open at once: [`LIMITS`]`.per_peer` from one peer (an IPv4 address or an IPv6
/// /64), `total` in all, so it takes 32 peers to fill the server and one peer (a runaway client, a
/// slowloris) never can. A connection over either is accepted and closed at once, so the
/// kernel's accept queue never fills behind it. Each connection has its own task, so idle or slow
/// ones never hold a scrape back.
pub const LIMITS: Limits = Limits {
    total: 512,
    per_peer: 16,
};

/// How long a connection may wait on its peer.
#[derive(Clone, Copy, Debug)]
struct Timeouts {
    /// A request's head must arrive whole within this, counted from the connection's start or
    /// the end of the previous answer: it bounds a slow head and an idle kept-alive connection
    /// alike (hyper's `header_read_timeout`).
    header: Duration,
    /// An answer the peer does not read is closed once no byte of it could be written for this
    /// long. Every byte written starts it again, so a slow scrape that keeps reading is never cut.
    write_idle: Duration,
}

const TIMEOUTS: Timeouts = Timeouts {
    header: Duration::from_secs(5),
    write_idle: Duration::from_secs(30),
};
/// What hyper buffers per connection (its minimum; a request head is a few hundred bytes, and the
/// body, the exposition, is a shared `Bytes` written from where it is).
const MAX_BUF: usize = 8192;
/// Headers in a request; more get 431.
const MAX_HEADERS: usize = 32;

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
    /// Binds `addr` and serves `/metrics` from a thread of its own ([`serve_on_thread`]).
    pub fn start(addr: SocketAddr, opts: MetricsOptions) -> anyhow::Result<Self> {
        let listener = std::net::TcpListener::bind(addr)
            .map_err(|e| anyhow::anyhow!("--prometheus {addr}: {e}"))?;
        let local_addr = listener.local_addr()?;
        let metrics = Metrics::new(opts);
        let exposition = Exposition::default();
        exposition.publish(metrics.render());
        serve_on_thread(listener, exposition.clone(), TIMEOUTS)?;
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

/// Serves `listener` on the `cgtrace-http` thread, with a single-threaded runtime of its own, for
/// the rest of the process. The thread drops its capabilities first (they are per thread, and it
/// starts before the command drops its own): it needs none.
fn serve_on_thread(
    listener: std::net::TcpListener,
    exposition: Exposition,
    timeouts: Timeouts,
) -> anyhow::Result<()> {
    listener.set_nonblocking(true)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("cgtrace-http".into())
        .spawn(move || {
            if let Err(e) = crate::safety::privilege::drop_to_kept() {
                log::debug!("http thread: could not drop capabilities: {e}");
            }
            rt.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(l) => accept_loop(l, exposition, timeouts).await,
                    Err(e) => log::warn!("prometheus: {e}"),
                }
            });
        })?;
    Ok(())
}

async fn accept_loop(listener: TcpListener, exposition: Exposition, timeouts: Timeouts) {
    let peers = Peers::new(LIMITS);
    loop {
        let (conn, from) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // EMFILE and the like: wait for connections to close.
                log::warn!("prometheus: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(admitted) = peers.admit(from.ip()) else {
            drop(conn);
            continue;
        };
        let exposition = exposition.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let text = exposition.get();
                async move { Ok::<_, std::convert::Infallible>(respond(&req, &text)) }
            });
            let mut io = TimeoutStream::new(conn);
            io.set_write_timeout(Some(timeouts.write_idle));
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(timeouts.header)
                .max_buf_size(MAX_BUF)
                .max_headers(MAX_HEADERS)
                .keep_alive(true)
                .serve_connection(TokioIo::new(Box::pin(io)), service)
                .await;
            drop(admitted);
        });
    }
}

/// The answer to one request: `/metrics` (GET or HEAD), `/`, or 404/405; a request with a body
/// gets 413 and the connection is closed without reading the body, so a body sent slowly (or
/// never) holds nothing.
fn respond(req: &Request<Incoming>, text: &Bytes) -> Response<Full<Bytes>> {
    let head = req.method() == Method::HEAD;
    let plain = "text/plain; charset=utf-8";
    let with_body = !req.body().is_end_stream();
    let (status, ctype, body) = if with_body {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            plain,
            Bytes::from_static(b"no request body: GET /metrics\n"),
        )
    } else if req.method() != Method::GET && !head {
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
    if with_body {
        h.insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    r
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use tokio::{
        io::{AsyncReadExt as _, AsyncWriteExt as _},
        net::{TcpSocket, TcpStream},
    };

    use super::*;

    /// A server on 127.0.0.1 serving `text`, with `timeouts`.
    async fn server(text: String, timeouts: Timeouts) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let exposition = Exposition::default();
        exposition.publish(text);
        tokio::spawn(accept_loop(listener, exposition, timeouts));
        addr
    }

    /// A connection to `to` from the loopback address `from` (127.0.0.0/8 is all local).
    async fn connect_from(from: &str, to: SocketAddr, rcvbuf: Option<u32>) -> TcpStream {
        let s = TcpSocket::new_v4().unwrap();
        s.bind(SocketAddr::new(from.parse::<IpAddr>().unwrap(), 0))
            .unwrap();
        if let Some(b) = rcvbuf {
            s.set_recv_buffer_size(b).unwrap();
        }
        s.connect(to).await.unwrap()
    }

    /// One request on a new connection from `from`: the status line and the body.
    async fn get_from(from: &str, addr: SocketAddr, path: &str) -> (String, String) {
        let mut c = connect_from(from, addr, None).await;
        // A refused connection may be reset: what was read until then is the answer.
        let _ = c
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .await;
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out).await;
        let text = String::from_utf8_lossy(&out).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        (
            head.lines().next().unwrap_or("").to_string(),
            body.to_string(),
        )
    }

    #[tokio::test]
    async fn one_peers_idle_and_slow_connections_do_not_starve_a_scrape() {
        let text = "# EOF\n".to_string();
        let addr = server(text, TIMEOUTS).await;
        let mut held = Vec::new();
        for i in 0..64 {
            let mut c = connect_from("127.0.0.1", addr, None).await;
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
        // Past its share, this peer's next connection is closed at once.
        let (status, _) = get_from("127.0.0.1", addr, "/metrics").await;
        assert_eq!(status, "", "a connection past the peer's share is closed");
        let t = std::time::Instant::now();
        let (status, body) = tokio::time::timeout(
            Duration::from_secs(1),
            get_from("127.0.0.2", addr, "/metrics"),
        )
        .await
        .expect("a scrape answers within a second");
        assert!(t.elapsed() < Duration::from_secs(1));
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(body.ends_with("# EOF\n"), "{body}");
        let (status, _) = get_from("127.0.0.2", addr, "/nope").await;
        assert_eq!(status, "HTTP/1.1 404 Not Found");
        drop(held);
    }

    #[tokio::test]
    async fn a_request_body_is_never_waited_for() {
        let addr = server("# EOF\n".into(), TIMEOUTS).await;
        let mut c = connect_from("127.0.0.1", addr, None).await;
        // A body announced and never sent: answered and closed at once.
        c.write_all(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nab")
            .await
            .unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(1), c.read_to_end(&mut out))
            .await
            .expect("answered and closed within a second")
            .unwrap();
        let out = String::from_utf8_lossy(&out);
        assert!(out.starts_with("HTTP/1.1 413 "), "{out}");
    }

    #[tokio::test]
    async fn a_reader_that_keeps_reading_is_never_cut_one_that_stops_is() {
        const LEN: usize = 16 << 20;
        let text = "x".repeat(LEN);
        let addr = server(
            text,
            Timeouts {
                header: Duration::from_secs(5),
                write_idle: Duration::from_secs(1),
            },
        )
        .await;
        // Bytes of the body read by a client that reads `chunk` bytes every 20 ms for `slow`,
        // then all it can.
        async fn body_len(addr: SocketAddr, chunk: usize, slow: Duration) -> usize {
            let mut c = connect_from("127.0.0.1", addr, Some(64 << 10)).await;
            c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
            let mut got = Vec::new();
            let end = tokio::time::Instant::now() + slow;
            let mut buf = vec![0; chunk.max(1)];
            while tokio::time::Instant::now() < end {
                if chunk > 0 {
                    let n = c.read(&mut buf).await.unwrap();
                    got.extend_from_slice(&buf[..n]);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // A cut connection ends early (or is reset once the server is gone).
            let _ = c.read_to_end(&mut got).await;
            let text = String::from_utf8_lossy(&got);
            text.split_once("\r\n\r\n").map_or(0, |(_, b)| b.len())
        }
        // 2.5 s of slow reading (3 MB/s), past the idle timeout: every byte arrives.
        let slow = body_len(addr, 64 << 10, Duration::from_millis(2500)).await;
        assert_eq!(slow, LEN, "a slow reader got the whole answer");
        // Stopped for 2.5 s: cut, with what the sockets held.
        let stalled = body_len(addr, 0, Duration::from_millis(2500)).await;
        assert!(stalled < LEN, "a stalled reader was cut ({stalled} bytes)");
    }

    /// The serving thread answers while the thread that made it (the pump's, in a live session)
    /// is busy: here it sleeps 3 s, as a map walk or a memory.stat read behind thousands of dying
    /// memcgs may, and a scrape sent meanwhile is answered within a second.
    #[test]
    fn a_scrape_is_answered_while_the_pump_thread_is_busy() {
        use std::io::{Read as _, Write as _};
        let e = Exporter::start("127.0.0.1:0".parse().unwrap(), MetricsOptions::default()).unwrap();
        let addr = e.local_addr;
        let scrape = std::thread::spawn(move || {
            let t = std::time::Instant::now();
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut out = String::new();
            let _ = c.read_to_string(&mut out);
            (t.elapsed(), out)
        });
        // The pump's thread, busy.
        std::thread::sleep(Duration::from_secs(3));
        let (took, out) = scrape.join().unwrap();
        assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
        assert!(out.ends_with("# EOF\n"), "{out}");
        assert!(took < Duration::from_secs(1), "answered after {took:?}");
    }
}
