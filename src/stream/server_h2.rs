//! `stream::server_h2`: HTTP/2 to servers (`server ... proto h2`, or `ssl alpn h2` agreed).
//! A thread keeps one HTTP/2 connection per server (and SNI) and runs every request to that
//! server on it as a stream, up to the server's `SETTINGS_MAX_CONCURRENT_STREAMS`. To the
//! session a stream looks like a server connection of its own ([`ServerStream::H2`]): the
//! session writes its HTTP/1.1 request into a pipe and reads an HTTP/1.1 answer from it; a
//! task here translates both ways, as `stream::http2` does for clients.
//!
//! It owns the server-side connections and their translation, nothing else: which server,
//! retries, timeouts and logs stay with the session. Connections carrying a PROXY header
//! (`send-proxy`) belong to one client and are never shared.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::rc::Rc;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::ServerStream;
use super::http2::{PipeEnd, pipe};
use crate::http::{BodyKind, ChunkedState, Parsed, parse_request};

// ---------------------------------------------------------------------------------------------
// Types.

/// Which shared connection a request may use: the server (by its state's address, stable
/// while the configuration lives), its current address, and the SNI sent.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    server: usize,
    addr: std::net::SocketAddr,
    sni: Option<Box<str>>,
}

/// An open HTTP/2 connection to a server.
struct Upstream {
    send: h2::client::SendRequest<Bytes>,
    state: Rc<ConnState>,
    /// Which of this thread's connections it is (a newer one may have replaced it).
    id: u64,
}

/// What a connection's streams and its task share.
#[derive(Default)]
struct ConnState {
    /// Cleared when the connection ends or fails a stream: it takes no new ones.
    open: std::cell::Cell<bool>,
    /// Streams in progress.
    streams: std::cell::Cell<usize>,
    /// Woken when the last stream ends (the idle close starts then).
    idle: tokio::sync::Notify,
}

/// Counts one stream in its connection while it runs.
struct StreamCount(Rc<ConnState>);

impl Drop for StreamCount {
    fn drop(&mut self) {
        let n = self.0.streams.get() - 1;
        self.0.streams.set(n);
        if n == 0 {
            self.0.idle.notify_waiters();
        }
    }
}

thread_local! {
    /// This thread's HTTP/2 server connections.
    static CONNS: RefCell<HashMap<Key, Upstream>> = RefCell::new(HashMap::new());
    static NEXT_ID: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How a stream's request is written for the server.
pub struct Target {
    /// `https` over TLS.
    pub tls: bool,
    /// The server's address: the `:authority` of a request without `Host`.
    pub addr: std::net::SocketAddr,
    pub bufsize: usize,
}

// ---------------------------------------------------------------------------------------------
// Connections.

fn key(srv: &crate::backend::ServerState, addr: std::net::SocketAddr, sni: Option<&str>) -> Key {
    Key {
        server: srv as *const _ as usize,
        addr,
        sni: sni.map(Into::into),
    }
}

/// A stream on this thread's open connection to the server, if there is one.
pub fn existing(
    srv: &crate::backend::ServerState,
    addr: std::net::SocketAddr,
    sni: Option<&str>,
    t: Target,
) -> Option<ServerStream> {
    let k = key(srv, addr, sni);
    let (send, state) = CONNS.with(|c| {
        let mut c = c.borrow_mut();
        let u = c.get(&k)?;
        // A connection the server is closing (GOAWAY) or that failed takes no new streams.
        let mut probe = u.send.clone();
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let failed = matches!(probe.poll_ready(&mut cx), std::task::Poll::Ready(Err(_)));
        if !u.state.open.get() || failed {
            c.remove(&k);
            return None;
        }
        Some((u.send.clone(), u.state.clone()))
    })?;
    Some(open_stream(send, state, t))
}

/// Starts HTTP/2 on a freshly connected (and, over TLS, handshaken) server connection, keeps
/// it for the thread's next requests unless `private`, and returns a stream on it. `Err`: the
/// server did not complete the HTTP/2 handshake within `timeout` (`true`: timed out), which
/// the caller counts as a failed connect.
pub async fn start<T: AsyncRead + AsyncWrite + Unpin + 'static>(
    io: T,
    srv: &crate::backend::ServerState,
    addr: std::net::SocketAddr,
    sni: Option<&str>,
    private: bool,
    t: Target,
    timeout: Option<std::time::Duration>,
) -> Result<ServerStream, bool> {
    let window = crate::stream::http2::DEFAULT_INITIAL_WINDOW_SIZE;
    let handshake = h2::client::Builder::new()
        .initial_window_size(window)
        // As wide as 100 streams' windows: a slow client's answer must not hold up the
        // others on the connection.
        .initial_connection_window_size(window * 100)
        .max_send_buffer_size(t.bufsize)
        .handshake::<_, Bytes>(io);
    let (send, conn) = match super::with_timeout(timeout, handshake).await {
        Some(Ok(c)) => c,
        Some(Err(_)) => return Err(false),
        None => return Err(true),
    };
    let state = Rc::new(ConnState::default());
    state.open.set(true);
    let id = NEXT_ID.with(|n| {
        n.set(n.get() + 1);
        n.get()
    });
    let k = key(srv, addr, sni);
    let purge = srv.conf.pool_purge_delay;
    {
        let state = state.clone();
        let k = k.clone();
        tokio::task::spawn_local(async move {
            tokio::pin!(conn);
            // Runs the connection until it ends, or until it has had no stream for
            // `pool-purge-delay` (HAProxy's idle-connection life): a connection left idle
            // is not trusted to be alive for long (a NAT may have dropped it silently).
            loop {
                let idle = state.idle.notified();
                tokio::pin!(idle);
                idle.as_mut().enable();
                let quiet = state.streams.get() == 0;
                tokio::select! {
                    _ = &mut conn => break,
                    _ = tokio::time::sleep(purge), if quiet => break,
                    _ = &mut idle => {}
                }
            }
            state.open.set(false);
            if !private {
                CONNS.with(|c| {
                    let mut c = c.borrow_mut();
                    if c.get(&k).is_some_and(|u| u.id == id) {
                        c.remove(&k);
                    }
                });
            }
        });
    }
    if !private {
        CONNS.with(|c| {
            c.borrow_mut().insert(
                k,
                Upstream {
                    send: send.clone(),
                    state: state.clone(),
                    id,
                },
            )
        });
    }
    Ok(open_stream(send, state, t))
}

/// A stream for one request: the session's end of a pipe, and the task that relays it.
/// When the session lets the stream go before its end (a timeout, its client leaving, a
/// retry elsewhere), the task ends, and dropping the stream's handles resets it (CANCEL), so
/// the server neither keeps working for nobody nor counts it against its stream limit.
fn open_stream(
    send: h2::client::SendRequest<Bytes>,
    state: Rc<ConnState>,
    t: Target,
) -> ServerStream {
    let (sess_end, gw_end) = pipe(t.bufsize);
    let gone = gw_end.peer_gone();
    state.streams.set(state.streams.get() + 1);
    let count = StreamCount(state);
    tokio::task::spawn_local(async move {
        tokio::select! {
            _ = relay(send, gw_end, t, &count.0.open) => {}
            _ = gone => {}
        }
        drop(count);
    });
    ServerStream::H2(Box::new(sess_end))
}

// ---------------------------------------------------------------------------------------------
// One stream.

/// Reads the session's HTTP/1.1 request from the pipe, sends it as an HTTP/2 stream, and
/// writes the answer back as HTTP/1.1. Ends (closing the pipe, which the session reads as
/// the server closing) on any failure; dropping the stream's handles resets it.
async fn relay(
    send: h2::client::SendRequest<Bytes>,
    io: PipeEnd,
    t: Target,
    open: &std::cell::Cell<bool>,
) {
    let (mut rx, mut tx) = super::http2::split(io);
    let mut buf = BytesMut::with_capacity(t.bufsize);
    let head = loop {
        match parse_request(&buf, t.bufsize) {
            Ok(Parsed::Complete(h)) => break h,
            Ok(Parsed::Partial) => {}
            Err(_) => return,
        }
        match rx.read_buf(&mut buf).await {
            Ok(n) if n > 0 => {}
            _ => return,
        }
    };
    let is_head = head.method.of(&buf) == b"HEAD";
    let Some(req) = request(&buf, &head, &t) else {
        // Not expressible in HTTP/2 (an empty Host, a `*` target): answered here rather
        // than replayed as a failed connection would be.
        let _ = tx
            .write_all(
                b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            )
            .await;
        return;
    };
    let _ = buf.split_to(head.head_len);
    let Ok(mut send) = send.ready().await else {
        // The connection is failing (GOAWAY, reset): the session replays the request, on a
        // new one.
        open.set(false);
        return;
    };
    let no_body = head.body == BodyKind::None || head.body == BodyKind::Length(0);
    let Ok((rsp, body_tx)) = send.send_request(req, no_body) else {
        return;
    };
    // The body goes on while the answer comes (a server may answer before the end of the
    // request, and gRPC streams both ways); the stream is over when the answer is.
    let pump = async {
        if !no_body {
            pump_body(&mut rx, buf, head.body, body_tx).await;
        }
        std::future::pending::<()>().await
    };
    let answer = async {
        let mut rsp = rsp;
        // Interim answers (100 Continue, 103 Early Hints) first, as HTTP/1.1 ones.
        let mut interim = true;
        let rsp = loop {
            let ev = std::future::poll_fn(|cx| {
                if interim {
                    match rsp.poll_informational(cx) {
                        Poll::Ready(Some(Ok(r))) => return Poll::Ready(Err(r)),
                        Poll::Ready(_) => interim = false,
                        Poll::Pending => {}
                    }
                }
                std::pin::Pin::new(&mut rsp).poll(cx).map(Ok)
            })
            .await;
            match ev {
                Ok(r) => break r,
                Err(r) => {
                    let mut h = status_line(r.status().as_u16());
                    super::http2::write_fields(&mut h, r.headers());
                    h.extend_from_slice(b"\r\n");
                    if tx.write_all(&h).await.is_err() {
                        return;
                    }
                }
            }
        };
        let Ok(rsp) = rsp else { return };
        write_answer(rsp, &mut tx, is_head).await;
    };
    tokio::pin!(pump, answer);
    tokio::select! {
        _ = &mut pump => {}
        _ = &mut answer => {}
    }
}

/// The origin-form part of a request target (an absolute-form one loses its scheme and
/// authority, which travel in `:scheme` and `:authority`).
fn origin_form(target: &[u8]) -> &[u8] {
    let rest = if let Some(r) = target.strip_prefix(b"http://") {
        r
    } else if let Some(r) = target.strip_prefix(b"https://") {
        r
    } else {
        return target;
    };
    match rest.iter().position(|&b| b == b'/' || b == b'?') {
        Some(i) if rest[i] == b'/' => &rest[i..],
        // `http://host?q`: the path is empty, `/` stands for it; the query stays.
        Some(i) => &rest[i..],
        None => b"/",
    }
}

/// The HTTP/2 request for an HTTP/1.1 head: `:authority` from `Host` (else the server's
/// address), the fields less those about the HTTP/1 connection; `te: trailers` for gRPC,
/// whose servers expect it and which the session, as any HTTP/1 hop, does not forward.
fn request(buf: &[u8], head: &crate::http::RequestHead, t: &Target) -> Option<http::Request<()>> {
    let mut authority = None;
    let mut grpc = false;
    let mut b = http::Request::builder().method(head.method.of(buf));
    for f in &head.headers {
        let (name, value) = (f.name(buf), f.value(buf));
        if name.eq_ignore_ascii_case(b"host") {
            authority.get_or_insert(value);
            continue;
        }
        if crate::http::is_hop_by_hop(name) || name.eq_ignore_ascii_case(b"transfer-encoding") {
            continue;
        }
        if name.eq_ignore_ascii_case(b"content-type") && value.starts_with(b"application/grpc") {
            grpc = true;
        }
        b = b.header(name, value);
    }
    if grpc {
        b = b.header("te", "trailers");
    }
    let authority = match authority {
        Some(a) => String::from_utf8_lossy(a).into_owned(),
        None => t.addr.to_string(),
    };
    let path = head.uri.of(buf);
    // An absolute-form target keeps only its path here: the authority travels apart.
    let path = origin_form(path);
    let uri = format!(
        "{}://{authority}{}",
        if t.tls { "https" } else { "http" },
        String::from_utf8_lossy(path)
    );
    b.uri(uri).body(()).ok()
}

/// Sends the request body (what followed the head in `buf`, then the pipe's) on the stream,
/// de-chunked with its trailers, as the server's flow control allows.
async fn pump_body(
    rx: &mut super::http2::PipeReader,
    mut buf: BytesMut,
    kind: BodyKind,
    mut tx: h2::SendStream<Bytes>,
) {
    let mut unframe = super::http2::Unframe::new(kind, ChunkedState::for_request());
    loop {
        if buf.is_empty() {
            match rx.read_buf(&mut buf).await {
                Ok(n) if n > 0 => {}
                _ => return,
            }
        }
        let Ok((data, done, tail)) = unframe.take(&mut buf) else {
            return;
        };
        let end = done && tail.is_none();
        if super::http2::send_data(&mut tx, data, end, None)
            .await
            .is_err()
        {
            return;
        }
        if done {
            if let Some(t) = tail
                && tx.send_trailers(t).is_err()
            {
                let _ = tx.send_data(Bytes::new(), true);
            }
            return;
        }
    }
}

/// `HTTP/1.1 CODE REASON\r\n`.
fn status_line(status: u16) -> Vec<u8> {
    let mut h = Vec::with_capacity(256);
    h.extend_from_slice(
        format!(
            "HTTP/1.1 {status} {}\r\n",
            crate::http::reason_phrase(status)
        )
        .as_bytes(),
    );
    h
}

/// Writes an HTTP/2 answer to the session as HTTP/1.1: its length as the server gave it,
/// else chunked (with the trailers, gRPC's status among them).
async fn write_answer(rsp: http::Response<h2::RecvStream>, tx: &mut PipeEnd, is_head: bool) {
    let (parts, mut body) = rsp.into_parts();
    let status = parts.status.as_u16();
    let mut h = status_line(status);
    // Each stream carries one request: the session must not keep it for another.
    h.extend_from_slice(b"connection: close\r\n");
    let has_cl = parts.headers.contains_key(http::header::CONTENT_LENGTH);
    super::http2::write_fields(&mut h, &parts.headers);
    let bodiless = is_head || status == 204 || status == 304 || (100..200).contains(&status);
    let ended = body.is_end_stream();
    let chunked = !bodiless && !has_cl && !ended;
    if chunked {
        h.extend_from_slice(b"transfer-encoding: chunked\r\n");
    } else if !bodiless && !has_cl {
        h.extend_from_slice(b"content-length: 0\r\n");
    }
    h.extend_from_slice(b"\r\n");
    if tx.write_all(&h).await.is_err() || bodiless || ended && !chunked {
        return;
    }
    super::http2::copy_body(&mut body, tx, chunked).await;
    // Dropping the pipe now is the server closing after a whole answer: the session reads
    // the answer to its end first.
}
