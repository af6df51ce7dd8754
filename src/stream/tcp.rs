//! `mode tcp` sessions, and the bidirectional tunnel that HTTP upgrades (WebSocket) reuse.
//! Half-closes are propagated (a FIN from one side becomes a shutdown of the other side's
//! write half), and the session ends when both directions are done or a timeout fires.

use std::cell::Cell;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::http::SrcView;
use super::{ClientIo, ConnectError, ServerStream, SessionCtx, connect_server};
use crate::backend::PickInput;
use crate::histogram::Timings;
use crate::log::Entry;

/// How a tunnel ended, from the client's point of view (tcplog termination state).
#[derive(Debug, Clone, Copy, Default)]
pub struct TunnelEnd {
    pub term: [u8; 2],
    /// Bytes client → server.
    pub up: u64,
    /// Bytes server → client.
    pub down: u64,
}

/// Timeouts of a tunnel.
#[derive(Debug, Clone, Copy)]
pub struct TunnelTimeouts {
    pub client: Option<Duration>,
    pub server: Option<Duration>,
    pub client_fin: Option<Duration>,
    pub server_fin: Option<Duration>,
}

enum DirEnd {
    /// Source sent FIN.
    Eof,
    /// Inactivity timeout.
    Timeout,
    ReadErr,
    WriteErr,
}

/// Copies `r` to `w` until EOF, error or inactivity. `activity` is the last time either
/// direction moved data: a long download must not be cut by the idle upload side.
#[allow(clippy::too_many_arguments)]
async fn pump<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    r: &mut R,
    w: &mut W,
    initial: &[u8],
    timeout: &Cell<Option<Duration>>,
    activity: &Cell<Instant>,
    bytes: &Cell<u64>,
    live: &[&AtomicU64],
    changed: &tokio::sync::Notify,
    bufsize: usize,
) -> DirEnd {
    if !initial.is_empty() {
        if w.write_all(initial).await.is_err() || w.flush().await.is_err() {
            return DirEnd::WriteErr;
        }
        bytes.set(bytes.get() + initial.len() as u64);
        for c in live {
            c.fetch_add(initial.len() as u64, Relaxed);
        }
    }
    let mut buf = vec![0u8; bufsize];
    loop {
        let n = loop {
            let to = timeout.get();
            let read = r.read(&mut buf);
            match to {
                None => {
                    tokio::select! {
                        res = read => break res,
                        _ = changed.notified() => continue,
                    }
                }
                Some(d) => {
                    let since = activity.get().elapsed();
                    let left = d.saturating_sub(since);
                    if left.is_zero() {
                        return DirEnd::Timeout;
                    }
                    tokio::select! {
                        res = read => break res,
                        // Re-check: the other direction may have moved meanwhile.
                        _ = tokio::time::sleep(left) => continue,
                        // A half-close switched this direction to a `*-fin` timeout.
                        _ = changed.notified() => continue,
                    }
                }
            }
        };
        match n {
            Ok(0) => {
                // Propagate the half-close at once: the peer may be waiting for our FIN
                // before it answers (e.g. `nc -q`, request/response protocols over TCP).
                let _ = w.shutdown().await;
                return DirEnd::Eof;
            }
            Ok(n) => {
                activity.set(Instant::now());
                // The flush is free on plain sockets and sends what TLS buffered.
                if w.write_all(&buf[..n]).await.is_err() || w.flush().await.is_err() {
                    return DirEnd::WriteErr;
                }
                activity.set(Instant::now());
                bytes.set(bytes.get() + n as u64);
                for c in live {
                    c.fetch_add(n as u64, Relaxed);
                }
            }
            Err(_) => return DirEnd::ReadErr,
        }
    }
}

/// Byte counters a tunnel adds to as data moves (`option contstats`): (client to server,
/// server to client). Without it, the caller adds the totals of [`TunnelEnd`] at the end.
pub type LiveBytes<'a> = (&'a [&'a AtomicU64], &'a [&'a AtomicU64]);

/// Runs a bidirectional tunnel between `client` and `server` until both directions end.
/// `to_server` / `to_client` are bytes already read that must be sent first.
pub async fn tunnel<C: AsyncRead + AsyncWrite + Unpin>(
    client: &mut C,
    server: &mut ServerStream,
    to_server: &[u8],
    to_client: &[u8],
    t: TunnelTimeouts,
    bufsize: usize,
    live: LiveBytes<'_>,
) -> TunnelEnd {
    let (cr, cw) = tokio::io::split(client);
    match server {
        // A plain socket splits into borrowed halves without the lock `io::split` takes.
        ServerStream::Plain(s) => {
            let (sr, sw) = s.split();
            tunnel_halves(cr, cw, sr, sw, to_server, to_client, t, bufsize, live).await
        }
        ServerStream::Unix(s) => {
            let (sr, sw) = s.split();
            tunnel_halves(cr, cw, sr, sw, to_server, to_client, t, bufsize, live).await
        }
        ServerStream::Tls(s) => {
            let (sr, sw) = tokio::io::split(&mut **s);
            tunnel_halves(cr, cw, sr, sw, to_server, to_client, t, bufsize, live).await
        }
        ServerStream::H2(s) => {
            let (sr, sw) = tokio::io::split(&mut **s);
            tunnel_halves(cr, cw, sr, sw, to_server, to_client, t, bufsize, live).await
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn tunnel_halves<CR, CW, SR, SW>(
    mut cr: CR,
    mut cw: CW,
    mut sr: SR,
    mut sw: SW,
    to_server: &[u8],
    to_client: &[u8],
    t: TunnelTimeouts,
    bufsize: usize,
    live: LiveBytes<'_>,
) -> TunnelEnd
where
    CR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
    SR: AsyncRead + Unpin,
    SW: AsyncWrite + Unpin,
{
    let activity = Cell::new(Instant::now());
    let up = Cell::new(0u64);
    let down = Cell::new(0u64);
    let up_to = Cell::new(t.client);
    let down_to = Cell::new(t.server);
    let changed = tokio::sync::Notify::new();
    let mut c2s_end: Option<DirEnd> = None;
    let mut s2c_end: Option<DirEnd> = None;
    {
        let c2s = pump(
            &mut cr, &mut sw, to_server, &up_to, &activity, &up, live.0, &changed, bufsize,
        );
        let s2c = pump(
            &mut sr, &mut cw, to_client, &down_to, &activity, &down, live.1, &changed, bufsize,
        );
        tokio::pin!(c2s);
        tokio::pin!(s2c);
        loop {
            tokio::select! {
                e = &mut c2s, if c2s_end.is_none() => {
                    let eof = matches!(e, DirEnd::Eof);
                    c2s_end = Some(e);
                    if !eof || s2c_end.is_some() { break; }
                    // Client half-closed, and its FIN went on to the server: waiting for
                    // the server to finish is what `timeout server-fin` bounds (HAProxy: the
                    // side we shut down is the one whose -fin timeout applies).
                    if t.server_fin.is_some() {
                        down_to.set(t.server_fin);
                        changed.notify_waiters();
                    }
                }
                e = &mut s2c, if s2c_end.is_none() => {
                    let eof = matches!(e, DirEnd::Eof);
                    s2c_end = Some(e);
                    if !eof || c2s_end.is_some() { break; }
                    // Server half-closed, FIN forwarded to the client: `client-fin`.
                    if t.client_fin.is_some() {
                        up_to.set(t.client_fin);
                        changed.notify_waiters();
                    }
                }
            }
            if c2s_end.is_some() && s2c_end.is_some() {
                break;
            }
        }
    }
    let term = match (&c2s_end, &s2c_end) {
        (Some(DirEnd::Timeout), _) => *b"cD",
        (_, Some(DirEnd::Timeout)) => *b"sD",
        (Some(DirEnd::ReadErr), _) | (_, Some(DirEnd::WriteErr)) => *b"CD",
        (Some(DirEnd::WriteErr), _) | (_, Some(DirEnd::ReadErr)) => *b"SD",
        _ => *b"--",
    };
    TunnelEnd {
        term,
        up: up.get(),
        down: down.get(),
    }
}

/// A `mode tcp` session: connect to a server of the default backend, then tunnel.
pub async fn serve<C: ClientIo>(mut ctx: SessionCtx, client: C) {
    let shared = ctx.shared().clone();
    let fe = &shared.cfg.proxies[ctx.proxy];
    let start = Instant::now();
    let fc = &shared.proxies[ctx.proxy].fe.counters;
    fc.sessions_total.fetch_add(1, Relaxed);
    fc.req_total.fetch_add(1, Relaxed);
    // `tcp-request content`: the client's first data, when rules read it, then the
    // frontend's rules, the backend choice, and the backend's rules.
    let mut client = client;
    let held = match fe.inspect_delay {
        Some(d) if wants_payload(&shared, fe) => {
            inspect(&mut client, d, shared.cfg.global.bufsize).await
        }
        _ => Vec::new(),
    };
    let held = Held::new(held, shared.cfg.global.bufsize);
    // SPOE: in `mode tcp` the stream is the session.
    let mut spoe = crate::spoe::TxnState::default();
    {
        use crate::spoe::Event;
        spoe_events(
            &ctx,
            fe,
            &mut spoe,
            &[Event::ClientSession, Event::FrontendTcpRequest],
            &held,
        )
        .await;
    }
    let verdict = content_verdict(&mut ctx, fe, &held);
    if let super::Verdict::Http(proto) = verdict {
        return upgrade(ctx, client, held, None, proto).await;
    }
    if verdict != super::Verdict::Go {
        if verdict == super::Verdict::SilentDrop {
            client.silent_drop();
        }
        fc.denied_req.fetch_add(1, Relaxed);
        log_refused(&ctx, None, start, *b"PR");
        return;
    }
    let Some(be_idx) = select_backend(&ctx, &held) else {
        log_refused(&ctx, None, start, *b"SC");
        return;
    };
    let bp = &shared.cfg.proxies[be_idx];
    if bp.mode == crate::config::Mode::Http {
        let proto = super::http2::BindProto::Auto;
        return upgrade(ctx, client, held, Some(be_idx), proto).await;
    }
    let bc = &shared.backend(be_idx).counters;
    bc.sessions_total.fetch_add(1, Relaxed);
    let verdict = if be_idx != ctx.proxy {
        let ev = [crate::spoe::Event::BackendTcpRequest];
        spoe_events(&ctx, fe, &mut spoe, &ev, &held).await;
        spoe_events(&ctx, bp, &mut spoe, &ev, &held).await;
        content_verdict(&mut ctx, bp, &held)
    } else {
        super::Verdict::Go
    };
    if verdict != super::Verdict::Go {
        if verdict == super::Verdict::SilentDrop {
            client.silent_drop();
        }
        bc.denied_req.fetch_add(1, Relaxed);
        log_refused(&ctx, Some(be_idx), start, *b"PR");
        return;
    }
    // `stick match` / `stick on` choose the server; `stick on` / `store-request` remember it.
    let stick_view = || rules_view(&ctx, bp, &held);
    let stuck = if bp.sticks.is_empty() {
        None
    } else {
        super::stick_match(&shared, be_idx, &stick_view())
    };
    let input = PickInput {
        src: ctx.peer.map(|a| a.ip()),
        uri: b"",
        hdr: None,
        persist: stuck,
    };
    let mut conn = match connect_server(&ctx, be_idx, &input).await {
        Ok(c) => {
            ctx.w.session_server(ctx.key, Some((be_idx, c.slot.server)));
            if !bp.sticks.is_empty() {
                super::stick_store(&shared, be_idx, &stick_view(), c.slot.server, false);
            }
            c
        }
        Err(e) => {
            let (retries, server) = match e {
                ConnectError::Failed {
                    retries, server, ..
                } => (retries, Some(server)),
                _ => (0, None),
            };
            // The server that refused is named, as HAProxy logs it.
            let name = server.map_or("<NOSRV>", |s| ctx.shared().server(be_idx, s).name.as_str());
            log_tcp(
                &ctx,
                Some(be_idx),
                None,
                name,
                -1,
                -1,
                start,
                e.term(),
                (0, 0),
                retries,
                false,
                false,
            );
            return;
        }
    };
    // The server connection's source address, only when a log line prints it.
    let be_src = fe
        .options
        .log_format
        .as_ref()
        .filter(|f| f.needs_be_src && !fe.logs.is_empty())
        .and_then(|_| conn.stream.tcp())
        .and_then(|s| s.local_addr().ok());
    let tw = conn.slot.queued.as_millis() as i64;
    let tc = conn.connect_time.as_millis() as i64;
    let tunnel_to = bp.timeouts.tunnel;
    let t = TunnelTimeouts {
        client: tunnel_to.or(fe.timeouts.client),
        server: tunnel_to.or(bp.timeouts.server),
        client_fin: fe.timeouts.client_fin,
        server_fin: bp.timeouts.server_fin,
    };
    if fe.options.logasap {
        // `option logasap`: logged now that the server is connected, bytes and time as `+0`.
        let st = conn.slot.server_state();
        log_tcp(
            &ctx,
            Some(be_idx),
            Some((conn.slot.server, be_src)),
            &st.name,
            tw,
            tc,
            start,
            *b"--",
            (0, 0),
            conn.retries,
            conn.redispatched,
            true,
        );
    }
    let srv = conn.slot.server_state();
    // `option contstats`: the stats see a long session's bytes as they move.
    let contstats = fe.options.contstats;
    let (ins, outs) = (
        [&srv.counters.bytes_in, &fc.bytes_in, &bc.bytes_in],
        [&srv.counters.bytes_out, &fc.bytes_out, &bc.bytes_out],
    );
    let live: LiveBytes = if contstats { (&ins, &outs) } else { (&[], &[]) };
    let end = tunnel(
        &mut client,
        &mut conn.stream,
        &held.data,
        b"",
        t,
        shared.cfg.global.bufsize,
        live,
    )
    .await;
    srv.timers.record(
        ctx.w.id,
        &Timings {
            queue: Some(conn.slot.queued),
            connect: Some(conn.connect_time),
            response: None,
            total: Some(start.elapsed()),
        },
    );
    if !contstats {
        for c in ins {
            c.fetch_add(end.up, Relaxed);
        }
        for c in outs {
            c.fetch_add(end.down, Relaxed);
        }
    }
    ctx.sc.add(crate::stick::Data::BytesInCnt, end.up);
    ctx.sc.add(crate::stick::Data::BytesOutCnt, end.down);
    let name = srv.name.clone();
    let srv_idx = conn.slot.server;
    let (retries, redisp) = (conn.retries, conn.redispatched);
    drop(conn);
    if fe.options.logasap || (fe.options.dontlognull && end.up == 0 && end.down == 0) {
        return;
    }
    log_tcp(
        &ctx,
        Some(be_idx),
        Some((srv_idx, be_src)),
        &name,
        tw,
        tc,
        start,
        end.term,
        (end.down, end.up),
        retries,
        redisp,
        false,
    );
}

/// What `tcp-request inspect-delay` held of the client's first data, and the HTTP/1 request
/// head it holds, if it is one: HTTP samples in rules read it (HAProxy parses raw data for
/// them the same way).
struct Held {
    data: Vec<u8>,
    head: Option<crate::http::RequestHead>,
}

impl Held {
    fn new(data: Vec<u8>, max_head: usize) -> Held {
        let head = match crate::http::parse_request(&data, max_head) {
            _ if data.is_empty() => None,
            Ok(crate::http::Parsed::Complete(h)) => Some(h),
            _ => None,
        };
        Held { data, head }
    }
}

/// The session becomes HTTP: `switch-mode http` (`to` is `None`: the frontend's own HTTP
/// rules and `use_backend` apply), or a `mode http` backend `to` was chosen (HAProxy's
/// implicit upgrade). What inspection held is the start of the first request. HTTP/2 (its
/// preface, ALPN `h2`, or `proto h2`) starts a new stream per request, routed by the
/// frontend's rules (HAProxy's destructive upgrade); HTTP/1 keeps this session.
async fn upgrade<C: ClientIo>(
    mut ctx: SessionCtx,
    client: C,
    held: Held,
    to: Option<usize>,
    proto: super::http2::BindProto,
) {
    use super::http2::BindProto;
    // The HTTP stream counts its own requests.
    let fc = &ctx.shared().proxies[ctx.proxy].fe.counters;
    fc.req_total.fetch_sub(1, Relaxed);
    let pre = bytes::BytesMut::from(&held.data[..]);
    let h2 = match proto {
        BindProto::H2 => true,
        BindProto::H1 => false,
        BindProto::Auto => ctx
            .tls
            .as_ref()
            .is_some_and(|t| t.alpn.as_deref() == Some(b"h2")),
    };
    if proto != BindProto::Auto {
        ctx.proto = proto;
    }
    if h2 {
        Box::pin(super::http2::serve(ctx, pre, client)).await
    } else {
        // A clear-text HTTP/2 preface is recognised there, as on an HTTP bind.
        super::http::serve_upgraded(ctx, client, pre, to).await
    }
}

/// The session as the rules (and SPOE messages) of proxy `p` see it, with the client's
/// first data `held`.
fn rules_view<'v>(ctx: &'v SessionCtx, p: &'v crate::config::Proxy, held: &'v Held) -> SrcView<'v> {
    let mut sess = ctx.sess();
    sess.backend = &p.name;
    SrcView(
        ctx.peer.map(|a| a.ip()),
        ctx.tls.as_deref(),
        Some(&held.data),
        sess,
        held.head.as_ref(),
    )
}

/// The messages the SPOE engines of `p` send on `events`, each exchange waited for.
async fn spoe_events(
    ctx: &SessionCtx,
    p: &crate::config::Proxy,
    st: &mut crate::spoe::TxnState,
    events: &[crate::spoe::Event],
    held: &Held,
) {
    for &ev in events {
        for e in p.spoe.iter().filter(|e| e.has_event(ev)) {
            let view = rules_view(ctx, p, held);
            e.process(ctx, st, Ok(ev), &view, &ctx.vars).await;
        }
    }
}

/// `tcp-request content` rules of `p` on the client's first data `held`. Entries they track
/// join the session's (in `mode tcp` the stream is the session).
fn content_verdict(ctx: &mut SessionCtx, p: &crate::config::Proxy, held: &Held) -> super::Verdict {
    // Out of the context while the rules, which see the context, add to it.
    let mut sc = std::mem::take(&mut ctx.sc);
    let allowed = {
        let view = rules_view(ctx, p, held);
        super::tcp_rules(&p.tcp_content, &view, &mut sc)
    };
    ctx.sc = sc;
    allowed
}

/// Whether rules of `fe`, or of a backend it may pick, read the client's first data.
fn wants_payload(shared: &crate::backend::Shared, fe: &crate::config::Proxy) -> bool {
    // HTTP samples read the request head in the first data.
    let reads = |c: &crate::config::Cond| c.needs_payload() || c.uses_http();
    let needs = |p: &crate::config::Proxy| {
        p.tcp_content
            .iter()
            .any(|r| r.cond.as_ref().is_some_and(reads))
    };
    needs(fe)
        || fe.use_backends.iter().any(|u| {
            u.cond.as_ref().is_some_and(reads)
                || u.dynamic
                    .as_ref()
                    .is_some_and(|d| d.needs_payload() || d.uses_http())
        })
        || fe
            .use_backends
            .iter()
            .any(|u| u.dynamic.is_some() && shared.cfg.proxies.iter().any(needs))
        || fe
            .use_backends
            .iter()
            .filter_map(|u| u.backend)
            .chain(fe.default_backend)
            .any(|b| needs(&shared.cfg.proxies[b]))
}

/// `tcp-request inspect-delay`: reads the client's first data until it can be judged (a
/// whole first TLS record; a whole HTTP request head, for what starts like one; anything
/// else at once), the buffer is full, the client stops sending, or the delay ends.
async fn inspect<C: ClientIo>(client: &mut C, delay: std::time::Duration, max: usize) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut held = Vec::new();
    let deadline = tokio::time::Instant::now() + delay;
    let mut chunk = vec![0u8; 4096];
    let judged = |b: &[u8]| match b.first() {
        Some(0x16) => crate::tls::peek::complete(b),
        Some(_) => crate::http::request_head_state(b).is_some(),
        None => false,
    };
    while !judged(&held) && held.len() < max {
        match tokio::time::timeout_at(deadline, client.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => held.extend_from_slice(&chunk[..n]),
            _ => break,
        }
    }
    held
}

/// `use_backend` rules evaluated on what a TCP session has (its source, its first data),
/// then the default.
fn select_backend(ctx: &SessionCtx, held: &Held) -> Option<usize> {
    let p = &ctx.shared().cfg.proxies[ctx.proxy];
    let view = SrcView(
        ctx.peer.map(|a| a.ip()),
        ctx.tls.as_deref(),
        Some(&held.data),
        ctx.sess(),
        held.head.as_ref(),
    );
    for ub in &p.use_backends {
        if ub.cond.as_ref().is_none_or(|c| c.eval(&view)) {
            // A dynamic name naming no backend falls to the default one, as in HAProxy.
            let cfg = &ctx.shared().cfg;
            return ub
                .target(cfg, crate::config::Mode::Tcp, &view)
                .or(p.default_backend);
        }
    }
    p.default_backend
}

/// Logs a session that ended before any server was tried (a `tcp-request content` reject,
/// no backend).
fn log_refused(ctx: &SessionCtx, be: Option<usize>, start: Instant, term: [u8; 2]) {
    log_tcp(
        ctx,
        be,
        None,
        "<NOSRV>",
        -1,
        -1,
        start,
        term,
        (0, 0),
        0,
        false,
        false,
    );
}

/// Logs a finished TCP session. `srv`: the server's index and, when a format prints it, the
/// connection's source address; `bytes`: (to the client, from the client).
#[allow(clippy::too_many_arguments)]
fn log_tcp(
    ctx: &SessionCtx,
    be: Option<usize>,
    srv: Option<(usize, Option<std::net::SocketAddr>)>,
    server: &str,
    tw: i64,
    tc: i64,
    start: Instant,
    term: [u8; 2],
    bytes: (u64, u64),
    retries: u32,
    redispatched: bool,
    asap: bool,
) {
    let shared = ctx.shared();
    let fe = &shared.cfg.proxies[ctx.proxy];
    if fe.logs.is_empty() || !(fe.options.tcplog || fe.options.log_format.is_some()) {
        return;
    }
    let interesting = crate::log::worth_err(term, retries, redispatched, 0);
    let Some(level) = crate::log::traffic_level(&fe.options, interesting) else {
        return;
    };
    let bname = be
        .map(|b| shared.cfg.proxies[b].name.as_str())
        .unwrap_or(fe.name.as_str());
    let fstate = &shared.proxies[ctx.proxy].fe;
    let mut e = Entry {
        client: ctx.peer,
        tcp_fd: ctx.tcp_fd.as_deref().map(std::os::fd::AsFd::as_fd),
        profile: ctx.prof.as_deref().map(std::cell::Cell::get),
        accept_time: Some(ctx.accepted_at),
        frontend: &fe.name,
        backend: bname,
        server,
        t_wait: tw,
        t_connect: tc,
        t_active: start.elapsed().as_millis() as i64,
        bytes: bytes.0,
        term,
        cookie: *b"--",
        actconn: shared.global_conns.load(Relaxed),
        feconn: fstate.cur_conns.load(Relaxed),
        beconn: be
            .map(|b| shared.proxies[b].fe.cur_conns.load(Relaxed))
            .unwrap_or(0),
        retries,
        redispatched,
        asap,
        srvconn: match (be, srv) {
            (Some(b), Some((s, _))) => shared.server(b, s).served.load(Relaxed),
            _ => 0,
        },
        vars: Some(&ctx.vars),
        ..Default::default()
    };
    let Some(f) = &fe.options.log_format else {
        ctx.w.log.emit(&fe.logs, level, &e.tcplog());
        return;
    };
    e.local = ctx.local;
    e.tls = ctx.tls.as_deref();
    e.t_handshake = ctx.t_handshake;
    // Outside HTTP there is no request: HAProxy's request timers are -1 (they are reserved
    // for `mode http` anyway) and the session's time counts from the accept.
    e.t_req = -1;
    e.t_idle = -1;
    e.t_resp = -1;
    e.t_total = ctx.accepted.elapsed().as_millis() as i64;
    e.bytes_in = bytes.1;
    e.req_count = fstate.counters.req_total.load(Relaxed);
    if f.needs_log_count {
        e.log_count = fstate.log_count.fetch_add(1, Relaxed);
    }
    if let (Some(b), Some((s, src))) = (be, srv) {
        let st = shared.server(b, s);
        e.srv_addr = Some(**st.addr.load());
        e.srv_unix = st.conf.unix.is_some();
        e.be_src = src;
    }
    ctx.w.log.emit(&fe.logs, level, &ctx.w.log.custom(f, &e));
}
