//! An HTTP/2 server for tests (the `h2` crate's server side on a thread with its own tokio
//! runtime): h2c with prior knowledge, or TLS offering only `h2`. It records each request and
//! answers as the test's handler says, trailers included.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::lo;

/// One request as the HTTP/2 server received it.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub scheme: String,
    pub authority: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The ALPN protocol of its TLS connection (`-`: none or plain TCP).
    pub alpn: String,
    /// Which connection it came on (numbered from 0 in accept order).
    pub conn: usize,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Status, headers and body of an answer; status 0: never answer (until the client resets
/// the stream).
pub type Answer = (u16, Vec<(&'static str, String)>, Vec<u8>);
pub type Handler = Arc<dyn Fn(&Seen) -> (Answer, Fields) + Send + Sync>;

/// Trailer fields of an answer.
pub type Fields = Vec<(&'static str, String)>;

/// An HTTP/2 server (h2c, or TLS offering only `h2`) answering with `handler`. Records each
/// request, and counts the connections the client ended with a GOAWAY frame.
pub struct H2Server {
    pub port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    pub goaways: Arc<AtomicUsize>,
    /// Connections that have ended (closed by either side).
    pub closed: Arc<AtomicUsize>,
}

impl H2Server {
    pub fn start(handler: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> H2Server {
        H2Server::spawn(Arc::new(move |s: &Seen| (handler(s), vec![])), None)
    }

    /// As [`H2Server::start`], the handler giving trailers too (sent after the body).
    pub fn with_trailers(
        handler: impl Fn(&Seen) -> (Answer, Fields) + Send + Sync + 'static,
    ) -> H2Server {
        H2Server::spawn(Arc::new(handler), None)
    }

    pub fn start_tls(handler: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> H2Server {
        let ck = rcgen::generate_simple_self_signed(vec!["h2.example".to_string()]).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.signing_key.serialize_der().into());
        let mut sc = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![ck.cert.der().clone()], key)
        .unwrap();
        sc.alpn_protocols = vec![b"h2".to_vec()];
        H2Server::spawn(
            Arc::new(move |s: &Seen| (handler(s), vec![])),
            Some(tokio_rustls::TlsAcceptor::from(Arc::new(sc))),
        )
    }

    fn spawn(handler: Handler, tls: Option<tokio_rustls::TlsAcceptor>) -> H2Server {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let goaways = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let (s2, g2, c2) = (seen.clone(), goaways.clone(), closed.clone());
        let conns = AtomicUsize::new(0);
        let port = tokio_server(move |s| {
            let (h, seen, goaways, tls, closed) = (
                handler.clone(),
                s2.clone(),
                g2.clone(),
                tls.clone(),
                c2.clone(),
            );
            let id = conns.fetch_add(1, SeqCst);
            async move {
                let got = match tls {
                    None => serve(ByteRecorder::new(s), ("-".into(), id), &h, &seen).await,
                    Some(acc) => {
                        let Ok(t) = acc.accept(s).await else { return };
                        let alpn = t
                            .get_ref()
                            .1
                            .alpn_protocol()
                            .map(|a| String::from_utf8_lossy(a).into_owned())
                            .unwrap_or_else(|| "-".into());
                        serve(ByteRecorder::new(t), (alpn, id), &h, &seen).await
                    }
                };
                if has_goaway(&got) {
                    goaways.fetch_add(1, SeqCst);
                }
                closed.fetch_add(1, SeqCst);
            }
        });
        H2Server {
            port,
            seen,
            goaways,
            closed,
        }
    }

    pub fn hostport(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Serves one connection until the client ends it; returns every byte the client sent.
async fn serve<T: AsyncRead + AsyncWrite + Unpin>(
    io: ByteRecorder<T>,
    (alpn, conn_id): (String, usize),
    h: &Handler,
    seen: &Arc<Mutex<Vec<Seen>>>,
) -> Vec<u8> {
    let got = io.got.clone();
    let Ok(mut conn) = h2::server::handshake(io).await else {
        return got.lock().unwrap().clone();
    };
    // Each stream in a task of its own: the accept loop must keep driving the connection
    // while a stream's body arrives.
    while let Some(Ok((req, respond))) = conn.accept().await {
        let (h, seen, alpn) = (h.clone(), seen.clone(), alpn.clone());
        tokio::spawn(answer(req, respond, (alpn, conn_id), h, seen));
    }
    got.lock().unwrap().clone()
}

/// Reads one request whole, records it, and answers it as the handler says.
async fn answer(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<bytes::Bytes>,
    (alpn, conn_id): (String, usize),
    h: Handler,
    seen: Arc<Mutex<Vec<Seen>>>,
) {
    let (parts, mut body) = req.into_parts();
    let mut b = Vec::new();
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
        b.extend_from_slice(&chunk);
    }
    let s = Seen {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        scheme: parts.uri.scheme_str().unwrap_or("").to_string(),
        authority: parts
            .uri
            .authority()
            .map(|a| a.to_string())
            .unwrap_or_default(),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect(),
        body: b,
        alpn: alpn.clone(),
        conn: conn_id,
    };
    let ((status, hdrs, rbody), trailers) = h(&s);
    if status == 0 {
        // Never answered: wait for the client to reset the stream, and record that as a
        // request with method `RESET`.
        let path = s.path.clone();
        seen.lock().unwrap().push(s);
        let _ = std::future::poll_fn(|cx| respond.poll_reset(cx)).await;
        seen.lock().unwrap().push(Seen {
            method: "RESET".into(),
            path,
            ..Default::default()
        });
        return;
    }
    seen.lock().unwrap().push(s);
    let mut resp = http::Response::builder().status(status);
    for (n, v) in hdrs {
        resp = resp.header(n, v);
    }
    let bodiless = rbody.is_empty() && trailers.is_empty();
    let Ok(mut send) = respond.send_response(resp.body(()).unwrap(), bodiless) else {
        return;
    };
    if !rbody.is_empty() {
        let _ = send.send_data(rbody.into(), trailers.is_empty());
    }
    if !trailers.is_empty() {
        let mut t = http::HeaderMap::new();
        for (n, v) in trailers {
            t.append(n, v.parse().unwrap());
        }
        let _ = send.send_trailers(t);
    }
}

/// Whether the client's bytes (preface, then frames) hold a GOAWAY frame (type 7).
fn has_goaway(b: &[u8]) -> bool {
    let mut b = b
        .strip_prefix(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .unwrap_or(b);
    while b.len() >= 9 {
        let len = ((b[0] as usize) << 16) | ((b[1] as usize) << 8) | b[2] as usize;
        if b[3] == 7 {
            return true;
        }
        b = &b[(9 + len).min(b.len())..];
    }
    false
}

/// A transport that keeps what the peer sent (in clear: it sits above TLS).
struct ByteRecorder<T> {
    io: T,
    got: Arc<Mutex<Vec<u8>>>,
}

impl<T> ByteRecorder<T> {
    fn new(io: T) -> ByteRecorder<T> {
        ByteRecorder {
            io,
            got: Arc::new(Mutex::new(Vec::new())),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ByteRecorder<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut me.io).poll_read(cx, buf);
        me.got
            .lock()
            .unwrap()
            .extend_from_slice(&buf.filled()[before..]);
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ByteRecorder<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A loopback server on a thread of its own, with a current-thread tokio runtime: `conn`
/// makes the task that serves each accepted connection. Its port.
pub fn tokio_server<F, Fut>(conn: F) -> u16
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let l = std::net::TcpListener::bind(lo(0)).unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(l).unwrap();
            while let Ok((s, _)) = l.accept().await {
                tokio::spawn(conn(s));
            }
        });
    });
    port
}
