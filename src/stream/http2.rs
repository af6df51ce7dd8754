//! `stream::http2`: HTTP/2 client connections (`alpn h2` on `ssl` binds, the h2c preface on
//! clear-text binds, `bind ... proto h2`). The `h2` crate speaks the protocol; this module
//! turns each HTTP/2 stream into one HTTP/1.1 transaction of the ordinary session code
//! (`stream::http`), through an in-memory pipe, and turns the HTTP/1.1 answer back into
//! HTTP/2 frames. Rules, balancing, queues, pools, caches, logs and counters are therefore the
//! same code for both protocols.
//!
//! It owns the protocol translation (pseudo-headers, `Cookie` merging, hop-by-hop fields,
//! chunked re-framing, flow control) and the pieces `stream::server_h2` shares for the other
//! direction (the pipe, `Unframe`, `copy_body`), and nothing else: it must not apply
//! rules, pick servers or log requests itself.

use std::cell::Cell;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::{ClientIo, SessionCtx, with_timeout};
use crate::http::{BodyKind, ChunkedState, Parsed, parse_response};

// ---------------------------------------------------------------------------------------------
// Types.

/// The connection preface of HTTP/2 with prior knowledge (RFC 9113 §3.4): its first line is
/// what a clear-text HTTP/1 session looks for.
pub const PREFACE_LINE: &[u8] = b"PRI * HTTP/2.0\r\n";

/// Whether `buf` (non-empty) is the start of [`PREFACE_LINE`], or holds all of it.
pub fn preface_prefix(buf: &[u8]) -> bool {
    let n = buf.len().min(PREFACE_LINE.len());
    n > 0 && buf[..n] == PREFACE_LINE[..n]
}

/// What HTTP version a bind's clients speak (`bind ... proto h1|h2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BindProto {
    /// HTTP/2 when TLS agreed on `h2` or a clear-text client sends the HTTP/2 preface,
    /// HTTP/1.x otherwise (HAProxy's default).
    #[default]
    Auto,
    /// `proto h1`: HTTP/1.x only.
    H1,
    /// `proto h2`: HTTP/2 only, with prior knowledge on clear-text binds.
    H2,
}

/// HAProxy 2.6's defaults for the `tune.h2.*` settings sluice advertises.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 100;
pub const DEFAULT_INITIAL_WINDOW_SIZE: u32 = 65535;
pub const DEFAULT_HEADER_TABLE_SIZE: u32 = 4096;
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16384;

/// One direction of an in-memory pipe between the HTTP/2 stream and its HTTP/1 session.
struct Chan {
    buf: BytesMut,
    /// The writer shut its side (or went away): the reader sees EOF once `buf` is drained.
    closed: bool,
    /// The reader went away: writes fail.
    gone: bool,
    /// The writer abandoned the exchange (its HTTP/2 stream was reset).
    aborted: bool,
    on_abort: Option<Waker>,
    /// Woken when the reader goes away (`gone`).
    on_gone: Option<Waker>,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

/// One end of a bounded in-memory byte pipe: what it writes the other end reads. Both ends
/// live on the same thread, as the session and its stream do; the mutex is never contended,
/// and is there because a server connection must be `Send` (pools hand idle ones between
/// threads; this kind is never pooled, but shares their type).
pub struct PipeEnd {
    rx: Arc<Mutex<Chan>>,
    tx: Arc<Mutex<Chan>>,
    cap: usize,
}

/// An HTTP/2 connection's count of streams in progress, and a wake-up for when it falls to 0
/// (the idle timeout starts then).
#[derive(Default)]
struct Live {
    streams: Cell<usize>,
    idle: tokio::sync::Notify,
}

/// Keeps one stream in `Live` and in the worker's session registry while it runs.
struct StreamGuard {
    live: Rc<Live>,
    w: Rc<crate::worker::Worker>,
    key: usize,
}

/// How a response is relayed: the session's buffer size, and how long a client may keep the
/// stream's send window closed (`timeout client`).
struct Relay {
    bufsize: usize,
    stall: Option<std::time::Duration>,
    /// The thread's worker, whose recycled buffers a relay borrows.
    w: Rc<crate::worker::Worker>,
}

/// Why relaying a response stopped early: the stream is reset with this code.
type Reset = h2::Reason;

// ---------------------------------------------------------------------------------------------
// The pipe.

/// A connected pair of pipe ends, each direction buffering at most `cap` bytes.
pub fn pipe(cap: usize) -> (PipeEnd, PipeEnd) {
    let chan = || {
        Arc::new(Mutex::new(Chan {
            buf: BytesMut::new(),
            closed: false,
            gone: false,
            aborted: false,
            on_abort: None,
            on_gone: None,
            reader: None,
            writer: None,
        }))
    };
    let (a, b) = (chan(), chan());
    (
        PipeEnd {
            rx: a.clone(),
            tx: b.clone(),
            cap,
        },
        PipeEnd { rx: b, tx: a, cap },
    )
}

fn wake(w: &mut Option<Waker>) {
    if let Some(w) = w.take() {
        w.wake();
    }
}

impl PipeEnd {
    /// Resolves when the other end has been dropped (the session let its server stream go).
    pub(super) fn peer_gone(&self) -> impl std::future::Future<Output = ()> + use<> {
        let chan = self.tx.clone();
        std::future::poll_fn(move |cx| {
            let mut c = chan.lock().unwrap();
            if c.gone {
                return Poll::Ready(());
            }
            c.on_gone = Some(cx.waker().clone());
            Poll::Pending
        })
    }

    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut c = self.rx.lock().unwrap();
        if !c.buf.is_empty() || c.closed {
            return Poll::Ready(());
        }
        c.reader = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for PipeEnd {
    fn drop(&mut self) {
        let mut t = self.tx.lock().unwrap();
        t.closed = true;
        wake(&mut t.reader);
        drop(t);
        let mut r = self.rx.lock().unwrap();
        r.gone = true;
        wake(&mut r.writer);
        wake(&mut r.on_gone);
    }
}

/// Reads what `chan` holds into `out` (EOF once it is closed and drained).
fn read_chan(
    chan: &Mutex<Chan>,
    cx: &mut Context<'_>,
    out: &mut ReadBuf<'_>,
) -> Poll<std::io::Result<()>> {
    let mut c = chan.lock().unwrap();
    if c.buf.is_empty() {
        if c.closed {
            return Poll::Ready(Ok(()));
        }
        c.reader = Some(cx.waker().clone());
        return Poll::Pending;
    }
    let n = c.buf.len().min(out.remaining());
    out.put_slice(&c.buf.split_to(n));
    wake(&mut c.writer);
    Poll::Ready(Ok(()))
}

impl AsyncRead for PipeEnd {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        read_chan(&self.rx, cx, out)
    }
}

impl AsyncWrite for PipeEnd {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let cap = self.cap;
        let mut c = self.tx.lock().unwrap();
        if c.gone || c.closed {
            return Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
        }
        let room = cap.saturating_sub(c.buf.len());
        if room == 0 {
            c.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = room.min(data.len());
        c.buf.extend_from_slice(&data[..n]);
        wake(&mut c.reader);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let mut c = self.tx.lock().unwrap();
        c.closed = true;
        wake(&mut c.reader);
        Poll::Ready(Ok(()))
    }
}

/// Marks the direction `chan` feeds as abandoned by its writer, and closes it.
fn abort(chan: &Mutex<Chan>) {
    let mut c = chan.lock().unwrap();
    c.aborted = true;
    c.closed = true;
    wake(&mut c.on_abort);
    wake(&mut c.reader);
}

impl ClientIo for PipeEnd {
    async fn aborted(&self) {
        std::future::poll_fn(|cx| {
            let mut c = self.rx.lock().unwrap();
            if c.aborted {
                return Poll::Ready(());
            }
            c.on_abort = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    async fn wait_readable(&self) -> std::io::Result<()> {
        std::future::poll_fn(|cx| self.poll_readable(cx)).await;
        Ok(())
    }

    async fn write_all_more(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.write_all(buf).await
    }

    fn shutdown_before_close(&self) -> bool {
        false
    }
}

/// Replays bytes already read from a client before reading it further: the HTTP/2 preface
/// an HTTP/1 session read before it knew what the connection speaks.
/// Also notes whether the client sent anything at all (`option dontlognull` spares a
/// connection that failed its preface without a byte).
struct Prefixed<C> {
    pre: BytesMut,
    io: C,
    read_any: Rc<Cell<bool>>,
}

impl<C: AsyncRead + Unpin> AsyncRead for Prefixed<C> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.pre.is_empty() {
            let n = self.pre.len().min(out.remaining());
            let b = self.pre.split_to(n);
            out.put_slice(&b);
            self.read_any.set(true);
            return Poll::Ready(Ok(()));
        }
        let before = out.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, out);
        if out.filled().len() > before {
            self.read_any.set(true);
        }
        r
    }
}

impl<C: AsyncWrite + Unpin> AsyncWrite for Prefixed<C> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.w.sessions.borrow_mut().try_remove(self.key);
        let n = self.live.streams.get() - 1;
        self.live.streams.set(n);
        if n == 0 {
            self.live.idle.notify_waiters();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The connection.

/// Serves one HTTP/2 client connection until it ends: the handshake (bounded by `timeout
/// http-request`, else `timeout client`), then every stream the client opens, each in its own
/// task. Idle without streams for `timeout http-keep-alive` (else `timeout client`), or on soft
/// stop, the connection is closed gracefully (GOAWAY, in-flight streams finish).
///
/// `pre`: bytes already read from the client (the preface an HTTP/1 session saw first).
pub async fn serve<T: AsyncRead + AsyncWrite + Unpin + 'static>(
    ctx: SessionCtx,
    pre: BytesMut,
    io: T,
) {
    let read_any = Rc::new(Cell::new(false));
    let io = Prefixed {
        pre,
        io,
        read_any: read_any.clone(),
    };
    let shared = ctx.shared().clone();
    let fe = &shared.cfg.proxies[ctx.proxy];
    let g = &shared.cfg.global;
    let t = &fe.timeouts;
    let mut b = h2::server::Builder::new();
    b.max_concurrent_streams(g.h2.max_concurrent_streams)
        .initial_window_size(g.h2.initial_window_size)
        // HAProxy announces frames as large as its buffers, and never larger.
        .max_frame_size(
            g.h2.max_frame_size
                .unwrap_or((g.bufsize as u32).clamp(16384, 16777215)),
        )
        .header_table_size(g.h2.header_table_size)
        // The connection's window is as wide as all its streams' windows: a stream whose
        // session is slow to take its upload must not stall the others.
        .initial_connection_window_size(
            (g.h2.initial_window_size as u64 * g.h2.max_concurrent_streams.min(256) as u64)
                .clamp(65535, (1 << 31) - 1) as u32,
        )
        // A request head must fit a buffer, as in HTTP/1 (431 beyond).
        .max_header_list_size(g.bufsize.saturating_sub(g.maxrewrite).max(512) as u32)
        .max_send_buffer_size(g.bufsize.max(1024));
    let mut conn = match with_timeout(t.http_request.or(t.client), b.handshake(io)).await {
        Some(Ok(c)) => c,
        // The preface did not come right (an HTTP/1 request on a `proto h2` bind, a broken
        // one, a close before it): logged as HAProxy logs it, unless nothing came at all and
        // `option dontlognull` is set. A client silent until the timeout is not logged.
        Some(Err(_)) => {
            if read_any.get() || !fe.options.dontlognull {
                super::http::log_failed_preface(&ctx);
            }
            return;
        }
        None => return,
    };
    let ctx = Rc::new(ctx);
    let live = Rc::new(Live::default());
    let w = ctx.w.clone();
    let idle_after = t.http_keep_alive.or(t.client);
    // Once closing and without streams, how long the client has to take the GOAWAY (and
    // answer its PING) before the connection is dropped.
    let close_grace = t.client.unwrap_or(std::time::Duration::from_secs(10));
    // Streams the client reset leave the crate's count at once but their tasks run on a
    // little: past twice the announced limit of tasks, new streams are refused.
    let max_tasks = (g.h2.max_concurrent_streams as usize).saturating_mul(2);
    let mut closing = false;
    loop {
        let idle = live.idle.notified();
        tokio::pin!(idle);
        idle.as_mut().enable();
        let stop = w.stop_notify.notified();
        tokio::pin!(stop);
        stop.as_mut().enable();
        let idle_now = live.streams.get() == 0;
        let closing_now = closing;
        let timer = async move {
            match (closing_now, idle_after) {
                (true, _) if idle_now => tokio::time::sleep(close_grace).await,
                (false, Some(d)) if idle_now => tokio::time::sleep(d).await,
                _ => std::future::pending().await,
            }
        };
        if w.stopping.get() && !closing {
            closing = true;
            conn.graceful_shutdown();
        }
        tokio::select! {
            r = conn.accept() => match r {
                Some(Ok((_, mut respond))) if live.streams.get() >= max_tasks => {
                    respond.send_reset(h2::Reason::REFUSED_STREAM);
                }
                Some(Ok((req, respond))) => spawn_stream(&ctx, &live, req, respond),
                // The client closed the connection, or broke the protocol (the crate has
                // answered with GOAWAY).
                Some(Err(_)) | None => break,
            },
            _ = timer => {
                if closing {
                    // The client took no notice of the GOAWAY: drop the connection.
                    break;
                }
                closing = true;
                conn.graceful_shutdown();
            }
            // Re-arms the idle timer when the last stream ends.
            _ = &mut idle => {}
            _ = &mut stop, if !closing => {}
        }
    }
}

/// Starts the task of one stream, with a session context of its own (a stream is one
/// transaction: its own accept date, variables and registry entry; the connection's
/// addresses, TLS details and PROXY TLVs).
fn spawn_stream(
    conn: &Rc<SessionCtx>,
    live: &Rc<Live>,
    req: http::Request<h2::RecvStream>,
    respond: h2::server::SendResponse<Bytes>,
) {
    let w = conn.w.clone();
    let key = w.sessions.borrow_mut().insert(crate::worker::SessEntry {
        abort: None,
        fe: conn.proxy,
        src: conn.peer,
        since: Instant::now(),
        srv: None,
    });
    live.streams.set(live.streams.get() + 1);
    let guard = StreamGuard {
        live: live.clone(),
        w: w.clone(),
        key,
    };
    let ctx = SessionCtx {
        w: w.clone(),
        proxy: conn.proxy,
        peer: conn.peer,
        accepted_at: std::time::SystemTime::now(),
        accepted: Instant::now(),
        local: conn.local,
        t_handshake: 0,
        key,
        tls: conn.tls.clone(),
        // The entries the connection tracks count each stream's requests, as HAProxy's
        // session-level trackers do.
        sc: conn.sc.share(),
        // The connection's `sess` variables (set by `tcp-request connection` rules), as
        // they are when the stream starts.
        vars: conn.vars.sess_copy(),
        pp: conn.pp.clone(),
        proto: BindProto::H2,
        h2_line: None,
        _adm: None,
        tcp_fd: conn.tcp_fd.clone(),
        prof: super::PROFILE_USED
            .load(std::sync::atomic::Ordering::Relaxed)
            .then(|| Rc::new(std::cell::Cell::new(super::TaskProfile::default()))),
    };
    let task = tokio::task::spawn_local(Box::pin(async move {
        stream(ctx, req, respond).await;
        drop(guard);
    }));
    if let Some(e) = w.sessions.borrow_mut().get_mut(key) {
        e.abort = Some(task.abort_handle());
    }
}

// ---------------------------------------------------------------------------------------------
// One stream.

/// Runs one stream: its request, written as HTTP/1.1 into a pipe read by an ordinary session,
/// and the session's answer relayed back as HTTP/2.
async fn stream(
    ctx: SessionCtx,
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let shared = ctx.shared().clone();
    let w = ctx.w.clone();
    let g = &shared.cfg.global;
    let (parts, body) = req.into_parts();
    if parts.method == http::Method::CONNECT {
        // Tunnels over an HTTP/2 stream (RFC 9113 §8.5) are not relayed.
        let rsp = http::Response::builder().status(501).body(()).unwrap();
        let _ = respond.send_response(rsp, true);
        return;
    }
    let is_head = parts.method == http::Method::HEAD;
    let client_timeout = shared.cfg.proxies[ctx.proxy].timeouts.client;
    let mut ctx = ctx;
    let fe = &shared.cfg.proxies[ctx.proxy];
    let logged = !fe.logs.is_empty() && (fe.options.httplog || fe.options.log_format.is_some());
    ctx.h2_line = Some(if logged {
        log_line(&parts).into()
    } else {
        "".into()
    });
    let (head, chunked) = request_head(&parts, body.is_end_stream());
    let (sess_end, gw_end) = pipe(g.bufsize.max(1024));
    // Boxed: the session future is large, and `join!` would move it by value.
    let session = Box::pin(super::http::serve(ctx, sess_end));
    let gateway = async move {
        let (rx, mut tx) = split(gw_end);
        let to_session = tx.tx.clone();
        if tx.write_all(&head).await.is_err() {
            return;
        }
        let pump = pump_request(body, tx, chunked);
        let relay = async {
            let mut send = None;
            let io = Relay {
                bufsize: g.bufsize.max(1024),
                stall: client_timeout,
                w: w.clone(),
            };
            let r = relay_response(rx, &mut respond, &mut send, is_head, io);
            if let Err(reason) = r.await {
                // The session must not wait for (or keep) a server for nobody.
                abort(&to_session);
                match send {
                    Some(mut s) => s.send_reset(reason),
                    None => respond.send_reset(reason),
                }
            }
        };
        tokio::pin!(pump, relay);
        let mut pumping = true;
        loop {
            tokio::select! {
                _ = &mut pump, if pumping => pumping = false,
                _ = &mut relay => return,
            }
        }
    };
    tokio::join!(session, gateway);
}

/// The HTTP/1.1 head of an HTTP/2 request, and whether its body is sent chunked (no
/// `content-length` and more to come). `Host` comes first, from `:authority` unless the
/// request has its own; several `cookie` fields are merged into one (RFC 9113 §8.2.3).
fn request_head(parts: &http::request::Parts, ended: bool) -> (Vec<u8>, bool) {
    let mut h = Vec::with_capacity(256);
    h.extend_from_slice(parts.method.as_str().as_bytes());
    h.push(b' ');
    let target = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    h.extend_from_slice(if target.is_empty() {
        b"/"
    } else {
        target.as_bytes()
    });
    h.extend_from_slice(b" HTTP/1.1\r\n");
    let hs = &parts.headers;
    // `:authority` wins over a `host` field, which is then dropped (as HAProxy does).
    let authority = parts.uri.authority();
    if let Some(a) = authority {
        h.extend_from_slice(b"host: ");
        h.extend_from_slice(a.as_str().as_bytes());
        h.extend_from_slice(b"\r\n");
    }
    let mut cookies = hs.get_all(http::header::COOKIE).iter().peekable();
    let has_cl = hs.contains_key(http::header::CONTENT_LENGTH);
    for (name, value) in hs {
        if name == http::header::HOST && authority.is_some() {
            continue;
        }
        if name == http::header::COOKIE {
            // All of them at the place of the first.
            if cookies.peek().is_none() {
                continue;
            }
            h.extend_from_slice(b"cookie: ");
            let mut first = true;
            for c in cookies.by_ref() {
                if !first {
                    h.extend_from_slice(b"; ");
                }
                first = false;
                h.extend_from_slice(c.as_bytes());
            }
            h.extend_from_slice(b"\r\n");
            continue;
        }
        h.extend_from_slice(name.as_str().as_bytes());
        h.extend_from_slice(b": ");
        h.extend_from_slice(value.as_bytes());
        h.extend_from_slice(b"\r\n");
    }
    let chunked = !ended && !has_cl;
    if chunked {
        h.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    h.extend_from_slice(b"\r\n");
    (h, chunked)
}

/// The request line HAProxy logs for an HTTP/2 request: the URI in absolute form when the
/// request has an `:authority`, and the version `HTTP/2.0`.
fn log_line(parts: &http::request::Parts) -> String {
    let target = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    match (parts.uri.scheme_str(), parts.uri.authority()) {
        (Some(s), Some(a)) => format!("{} {s}://{a}{target} HTTP/2.0", parts.method),
        _ => format!("{} {target} HTTP/2.0", parts.method),
    }
}

/// Splits a pipe end into its read and write halves.
pub(super) fn split(p: PipeEnd) -> (PipeReader, PipeEnd) {
    let r = PipeReader { rx: p.rx.clone() };
    (r, p)
}

/// The read half of a [`PipeEnd`] (reading only; the write half keeps the pipe open).
pub(super) struct PipeReader {
    rx: Arc<Mutex<Chan>>,
}

impl AsyncRead for PipeReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        read_chan(&self.rx, cx, out)
    }
}

/// Copies the request body from the stream into the session's pipe (chunk-framed when its
/// length is unknown, trailers included), giving the client flow-control credit back as the
/// session takes the bytes. Ends quietly if either side goes away; the relay decides what
/// the stream's outcome is.
async fn pump_request(mut body: h2::RecvStream, mut tx: PipeEnd, chunked: bool) {
    copy_body(&mut body, &mut tx, chunked).await;
    // The pipe stays open: closing it would read as the client leaving (`abortonclose`).
    std::future::pending::<()>().await;
}

/// Copies an HTTP/2 body into a pipe as an HTTP/1.1 body: as it is, or chunk-framed with
/// the trailers as chunked trailers; flow-control credit goes back as the pipe takes the
/// bytes. Stops quietly if either side goes away.
pub(super) async fn copy_body(body: &mut h2::RecvStream, tx: &mut PipeEnd, chunked: bool) {
    while let Some(r) = body.data().await {
        let Ok(data) = r else { return };
        let n = data.len();
        if chunked && n > 0 && tx.write_all(format!("{n:x}\r\n").as_bytes()).await.is_err() {
            return;
        }
        if tx.write_all(&data).await.is_err() {
            return;
        }
        if chunked && n > 0 && tx.write_all(b"\r\n").await.is_err() {
            return;
        }
        let _ = body.flow_control().release_capacity(n);
    }
    if chunked {
        let mut end = b"0\r\n".to_vec();
        if let Ok(Some(trailers)) = body.trailers().await {
            write_fields(&mut end, &trailers);
        }
        end.extend_from_slice(b"\r\n");
        let _ = tx.write_all(&end).await;
    }
}

/// Reads the session's HTTP/1.1 answer from the pipe and sends it on the stream: interim
/// answers (100, 103) as informational heads, then the final head and its body, de-chunked,
/// with trailers. `Err`: the stream must be reset with that code (the session ended without
/// a whole answer, or the client reset the stream).
async fn relay_response(
    mut rx: PipeReader,
    respond: &mut h2::server::SendResponse<Bytes>,
    send: &mut Option<h2::SendStream<Bytes>>,
    is_head: bool,
    io: Relay,
) -> Result<(), Reset> {
    let bufsize = io.bufsize;
    let mut buf = io.w.take_buf(bufsize);
    let r = relay_into(&mut rx, respond, send, is_head, &io, &mut buf).await;
    io.w.give_buf(buf);
    r
}

async fn relay_into(
    rx: &mut PipeReader,
    respond: &mut h2::server::SendResponse<Bytes>,
    send: &mut Option<h2::SendStream<Bytes>>,
    is_head: bool,
    io: &Relay,
    buf: &mut BytesMut,
) -> Result<(), Reset> {
    let bufsize = io.bufsize;
    let head = loop {
        match parse_response(buf, bufsize, is_head, false) {
            Ok(Parsed::Complete(h)) => {
                let status = h.status;
                let head = buf.split_to(h.head_len);
                if (100..200).contains(&status) {
                    if status != 101 {
                        let r = response_head(&head, &h);
                        let _ = respond.send_informational(r);
                    }
                    continue;
                }
                break (head, h);
            }
            Ok(Parsed::Partial) => {}
            Err(_) => return Err(h2::Reason::INTERNAL_ERROR),
        }
        let reset = |cx: &mut Context<'_>| respond.poll_reset(cx);
        if read_more(rx, buf, reset).await? == 0 {
            return Err(h2::Reason::CANCEL);
        }
    };
    let (head_bytes, h) = head;
    let rsp = response_head(&head_bytes, &h);
    let body = if is_head { BodyKind::None } else { h.body };
    if body == BodyKind::None {
        respond
            .send_response(rsp, true)
            .map_err(|_| h2::Reason::CANCEL)?;
        return Ok(());
    }
    if body == BodyKind::Length(0) {
        respond
            .send_response(rsp, true)
            .map_err(|_| h2::Reason::CANCEL)?;
        return Ok(());
    }
    let send = send.insert(
        respond
            .send_response(rsp, false)
            .map_err(|_| h2::Reason::CANCEL)?,
    );
    let mut unframe = Unframe::new(body, ChunkedState::new());
    loop {
        if buf.is_empty() {
            let reset = |cx: &mut Context<'_>| send.poll_reset(cx);
            match read_more(rx, buf, reset).await? {
                n if n > 0 => {}
                // EOF: the end of a close-delimited body, else a truncated answer.
                _ if body == BodyKind::CloseDelimited => {
                    send.send_data(Bytes::new(), true)
                        .map_err(|_| h2::Reason::CANCEL)?;
                    return Ok(());
                }
                _ => return Err(h2::Reason::INTERNAL_ERROR),
            }
        }
        let (data, done, tail) = unframe.take(buf).map_err(|_| h2::Reason::INTERNAL_ERROR)?;
        send_data(send, data, done && tail.is_none(), io.stall).await?;
        if done {
            if let Some(t) = tail {
                send.send_trailers(t).map_err(|_| h2::Reason::CANCEL)?;
            }
            return Ok(());
        }
    }
}

/// Takes the payload out of an HTTP/1.1 body as it arrives (its length counted, or its
/// chunked framing removed and its trailers kept), for HTTP/2 DATA frames.
pub(super) struct Unframe {
    left: u64,
    chunks: Option<ChunkedState>,
    trailers: Vec<u8>,
    out: BytesMut,
}

impl Unframe {
    /// For a body of `kind`; `chunked` tracks a chunked one (request or response rules).
    pub(super) fn new(kind: BodyKind, chunked: ChunkedState) -> Unframe {
        Unframe {
            left: match kind {
                BodyKind::Length(n) => n,
                _ => u64::MAX,
            },
            chunks: (kind == BodyKind::Chunked).then_some(chunked),
            trailers: Vec::new(),
            out: BytesMut::new(),
        }
    }

    /// Consumes what `buf` holds of the body: the payload in it, whether the body is whole,
    /// and then its trailers as an HTTP/2 block, if it had any. `Err`: bad chunked framing.
    pub(super) fn take(
        &mut self,
        buf: &mut BytesMut,
    ) -> Result<(Bytes, bool, Option<http::HeaderMap>), ()> {
        let done = if let Some(st) = &mut self.chunks {
            let (out, trailers) = (&mut self.out, &mut self.trailers);
            let (used, done) = st
                .feed_parts(
                    buf,
                    |d| out.extend_from_slice(d),
                    |t| trailers.extend_from_slice(t),
                )
                .map_err(|_| ())?;
            let _ = buf.split_to(used);
            done
        } else {
            let n = (buf.len() as u64).min(self.left) as usize;
            self.out.extend_from_slice(&buf.split_to(n));
            self.left -= n as u64;
            self.left == 0
        };
        let tail = (done && !self.trailers.is_empty()).then(|| trailer_map(&self.trailers));
        Ok((self.out.split().freeze(), done, tail))
    }
}

/// Reads more of the session's answer; `Ok(0)` at its end. `Err` if the client resets the
/// stream meanwhile (`reset` polls for that): the session then sees its client leave.
async fn read_more(
    rx: &mut PipeReader,
    buf: &mut BytesMut,
    mut reset: impl FnMut(&mut Context<'_>) -> Poll<Result<h2::Reason, h2::Error>>,
) -> Result<usize, Reset> {
    tokio::select! {
        r = rx.read_buf(buf) => Ok(r.unwrap_or(0)),
        _ = std::future::poll_fn(|cx| reset(cx)) => Err(h2::Reason::CANCEL),
    }
}

/// Sends `data` as the stream's flow control allows (waiting for window credit), or only
/// the end-of-stream flag when `data` is empty.
pub(super) async fn send_data(
    send: &mut h2::SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
    stall: Option<std::time::Duration>,
) -> Result<(), Reset> {
    if data.is_empty() {
        if end {
            send.send_data(data, true).map_err(|_| h2::Reason::CANCEL)?;
        }
        return Ok(());
    }
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        // A client that opens no window for `timeout client` loses the stream, as one that
        // stops reading an HTTP/1 answer loses its connection.
        let cap = match with_timeout(stall, std::future::poll_fn(|cx| send.poll_capacity(cx))).await
        {
            Some(Some(Ok(n))) if n > 0 => n,
            Some(Some(Ok(_))) => continue,
            _ => return Err(h2::Reason::CANCEL),
        };
        let piece = data.split_to(cap.min(data.len()));
        send.send_data(piece, end && data.is_empty())
            .map_err(|_| h2::Reason::CANCEL)?;
    }
    Ok(())
}

/// The HTTP/2 head of an HTTP/1.1 answer: its status and fields, less those about the
/// HTTP/1 connection (HTTP/2 forbids them).
fn response_head(buf: &[u8], h: &crate::http::ResponseHead) -> http::Response<()> {
    let mut r = http::Response::new(());
    *r.status_mut() = http::StatusCode::from_u16(h.status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    let hs = r.headers_mut();
    for f in &h.headers {
        let name = f.name(buf);
        if crate::http::is_hop_by_hop(name) || name.eq_ignore_ascii_case(b"transfer-encoding") {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(name),
            http::HeaderValue::from_bytes(f.value(buf)),
        ) {
            hs.append(n, v);
        }
    }
    r
}

/// Writes `fields` as HTTP/1 field lines (`name: value\r\n`...).
pub(super) fn write_fields(out: &mut Vec<u8>, fields: &http::HeaderMap) {
    for (name, value) in fields {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// Trailer field lines (`name: value\r\n`...) as an HTTP/2 trailer block.
pub(super) fn trailer_map(lines: &[u8]) -> http::HeaderMap {
    let mut m = http::HeaderMap::new();
    for l in lines.split(|&b| b == b'\n') {
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        let Some(colon) = l.iter().position(|&b| b == b':') else {
            continue;
        };
        let v = l[colon + 1..].trim_ascii();
        let name = &l[..colon];
        // Fields about the connection or the framing have no place in HTTP/2 trailers (the
        // crate would refuse the whole block).
        if crate::http::is_hop_by_hop(name)
            || name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"content-length")
        {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(&l[..colon]),
            http::HeaderValue::from_bytes(v),
        ) {
            m.append(n, v);
        }
    }
    m
}

/// Counts one HTTP/2 connection's session (an HTTP/1 connection counts its own in
/// `stream::http::serve`; the streams of an HTTP/2 one do not).
pub fn count_session(ctx: &SessionCtx) {
    ctx.shared().proxies[ctx.proxy]
        .fe
        .counters
        .sessions_total
        .fetch_add(1, Relaxed);
}
