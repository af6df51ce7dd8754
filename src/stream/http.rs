//! `mode http` sessions: HTTP/1.x transactions on one client connection, in order (pipelined
//! requests wait in the receive buffer), each one: read head → rules → backend → server →
//! response → log. The server connection is kept for the next request to the same server.
//!
//! Bodies are streamed through bounded buffers and never re-framed: the codec in `http` tells
//! where a message ends and we forward its bytes verbatim. Edited heads are re-serialised once,
//! and head plus the first body bytes leave in a single write (no Nagle/delayed-ACK stalls).

use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::tcp::{TunnelTimeouts, tunnel};
use super::{ClientIo, ConnectError, ServerStream, SessionCtx, connect_with_slot};
use crate::backend::{self, PickInput, Slot};
use crate::config::acl::Sess;
use crate::config::{
    HeaderAction, HttpConnMode, HttpRequestAction, HttpResponseAction, HttpReuse, HttpView,
    LfValue, Proxy, Redirect, RedirectKind, Service,
};
use crate::histogram::Timings;
use crate::http::{
    BodyKind, ChunkedState, HttpError, Parsed, RequestHead, ResponseHead, has_token, header_eq,
    is_hop_by_hop, parse_request, parse_response,
};
use crate::log::Entry;
use crate::log::Live;
use crate::pool::{IdleConn, Limits};
use crate::worker::Worker;
use std::rc::Rc;

/// What rules see outside an HTTP request: the client's address, its TLS handshake on an
/// `ssl` bind, and in `mode tcp` the first data `tcp-request content` inspection held, with
/// the HTTP/1 request head parsed from it when it holds one (HAProxy's HTTP fetches read raw
/// data that way, so `path_beg` or `hdr(host)` route a `mode tcp` session).
pub struct SrcView<'a>(
    pub Option<IpAddr>,
    pub Option<&'a crate::tls::TlsInfo>,
    pub Option<&'a [u8]>,
    pub Sess<'a>,
    pub Option<&'a RequestHead>,
);

impl SrcView<'_> {
    fn raw(&self) -> (&[u8], Option<&RequestHead>) {
        (self.2.unwrap_or_default(), self.4)
    }
}

impl HttpView for SrcView<'_> {
    fn method(&self) -> &[u8] {
        match self.raw() {
            (buf, Some(h)) => h.method(buf),
            _ => b"",
        }
    }
    fn uri(&self) -> &[u8] {
        match self.raw() {
            (buf, Some(h)) => h.uri(buf),
            _ => b"",
        }
    }
    fn for_each_header(&self, name: &[u8], f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        let (buf, Some(h)) = self.raw() else {
            return false;
        };
        h.headers
            .iter()
            .filter(|x| crate::http::header_eq(x.name(buf), name))
            .any(|x| f(x.value(buf)))
    }
    fn for_each_field(&self, f: &mut dyn FnMut(&[u8], &[u8])) {
        if let (buf, Some(h)) = self.raw() {
            for x in &h.headers {
                f(x.name(buf), x.value(buf));
            }
        }
    }
    fn version_minor(&self) -> Option<u8> {
        self.4.map(|h| h.version_minor)
    }
    fn src(&self) -> Option<IpAddr> {
        self.0
    }
    fn tls(&self) -> Option<&crate::tls::TlsInfo> {
        self.1
    }
    fn payload(&self) -> Option<&[u8]> {
        self.2
    }
    fn sess(&self) -> Sess<'_> {
        self.3
    }
}

/// Header bytes: either still in the receive buffer, or produced by a rule.
#[derive(Debug, Clone)]
enum Hb {
    In(crate::http::Span),
    Own(Box<[u8]>),
}

impl Hb {
    fn get<'a>(&'a self, buf: &'a [u8]) -> &'a [u8] {
        match self {
            Hb::In(s) => s.of(buf),
            Hb::Own(b) => b,
        }
    }
}

/// The working header list of a message being forwarded (rules edit this, not the buffer).
#[derive(Debug, Default)]
struct Headers {
    list: Vec<(Hb, Hb)>,
    /// The request target as rules rewrote it (`set-path`, `replace-uri`, ...).
    uri: Option<Box<[u8]>>,
}

impl Headers {
    fn load(&mut self, spans: &[crate::http::HeaderSpan]) {
        self.list.clear();
        self.uri = None;
        self.list
            .extend(spans.iter().map(|h| (Hb::In(h.name), Hb::In(h.value))));
    }

    /// The request target: as rewritten by the rules, else as received.
    fn target<'a>(&'a self, buf: &'a [u8], head: &RequestHead) -> &'a [u8] {
        self.uri.as_deref().unwrap_or_else(|| head.uri.of(buf))
    }

    /// Applies an action whose value is literal.
    fn apply(&mut self, buf: &[u8], a: &HeaderAction) {
        let v = a.value().map_or("", LfValue::text);
        self.apply_value(buf, a, v);
    }

    /// Applies an action with its value already evaluated.
    fn apply_value(&mut self, buf: &[u8], a: &HeaderAction, value: &str) {
        match a {
            HeaderAction::SetHeader { name, .. } => {
                self.del(buf, name.as_bytes());
                self.add(name, value);
            }
            HeaderAction::AddHeader { name, .. } => self.add(name, value),
            HeaderAction::DelHeader {
                name,
                how: crate::config::NameMatch::Str,
            } => self.del(buf, name.as_bytes()),
            HeaderAction::DelHeader { name, how } => self
                .list
                .retain(|(n, _)| !how.matches(n.get(buf), name.as_bytes())),
            HeaderAction::Replace {
                name,
                regex,
                each_value,
                ..
            } => {
                for (n, v) in &mut self.list {
                    if !header_eq(n.get(buf), name.as_bytes()) {
                        continue;
                    }
                    let old = v.get(buf);
                    let new = if *each_value {
                        crate::http::replace_each_value(old, &regex.0, value.as_bytes())
                    } else {
                        crate::http::replace_whole(old, &regex.0, value.as_bytes())
                    };
                    if let Some(new) = new {
                        *v = Hb::Own(new.into_boxed_slice());
                    }
                }
            }
        }
    }

    fn add(&mut self, name: &str, value: &str) {
        self.list.push((
            Hb::Own(name.as_bytes().into()),
            Hb::Own(value.as_bytes().into()),
        ));
    }

    /// One `content-length` field with value `n` in place of the received ones (a list of
    /// equal values, repeated fields), or none. Rare (a sender's oddity), so its
    /// allocations do not matter.
    fn set_content_length(&mut self, buf: &[u8], n: Option<u64>) {
        self.del(buf, b"content-length");
        if let Some(n) = n {
            self.add("content-length", &n.to_string());
        }
    }

    fn del(&mut self, buf: &[u8], name: &[u8]) {
        self.list.retain(|(n, _)| !header_eq(n.get(buf), name));
    }

    /// Keeps only the first field called `name` (a repeated identical `Host`).
    fn keep_first(&mut self, buf: &[u8], name: &[u8]) {
        let mut seen = false;
        self.list
            .retain(|(n, _)| !(header_eq(n.get(buf), name) && std::mem::replace(&mut seen, true)));
    }

    fn has(&self, buf: &[u8], name: &[u8]) -> bool {
        self.list.iter().any(|(n, _)| header_eq(n.get(buf), name))
    }

    fn first<'a>(&'a self, buf: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
        self.list
            .iter()
            .find(|(n, _)| header_eq(n.get(buf), name))
            .map(|(_, v)| v.get(buf))
    }

    /// Writes the header block, minus hop-by-hop fields (and fields the `Connection` header
    /// names), then `extra` lines, then the blank line. Returns the (dropped) `Keep-Alive`
    /// value, which tells a server's keep-alive limits.
    fn write<'b>(
        &'b self,
        buf: &'b [u8],
        out: &mut Vec<u8>,
        keep_upgrade: bool,
        extra: &[&[u8]],
    ) -> Option<&'b [u8]> {
        let mut keep_alive = None;
        // Fields listed in Connection are hop-by-hop too.
        let conn_vals: Vec<&[u8]> = self
            .list
            .iter()
            .filter(|(n, _)| header_eq(n.get(buf), b"connection"))
            .map(|(_, v)| v.get(buf))
            .collect();
        for (n, v) in &self.list {
            let n = n.get(buf);
            if is_hop_by_hop(n) {
                if n.len() == 10 && header_eq(n, b"keep-alive") {
                    keep_alive.get_or_insert(v.get(buf));
                }
                if !(keep_upgrade && header_eq(n, b"upgrade")) {
                    continue;
                }
            } else if !conn_vals.is_empty()
                && conn_vals.iter().any(|cv| has_token(cv, n))
                && !header_eq(n, b"transfer-encoding")
                && !header_eq(n, b"content-length")
            {
                continue;
            }
            out.extend_from_slice(n);
            out.extend_from_slice(b": ");
            out.extend_from_slice(v.get(buf));
            out.extend_from_slice(b"\r\n");
        }
        for e in extra {
            out.extend_from_slice(e);
        }
        out.extend_from_slice(b"\r\n");
        keep_alive
    }
}

/// A request as the rules see it.
struct ReqView<'a> {
    buf: &'a [u8],
    head: &'a RequestHead,
    hdrs: &'a Headers,
    /// `option http-use-proxy-header` and a proxied request: credentials come in
    /// `Proxy-Authorization`.
    proxy_auth: bool,
    src: Option<IpAddr>,
    tls: Option<&'a crate::tls::TlsInfo>,
    sess: Sess<'a>,
}

impl HttpView for ReqView<'_> {
    fn method(&self) -> &[u8] {
        self.head.method.of(self.buf)
    }
    fn uri(&self) -> &[u8] {
        self.hdrs.target(self.buf, self.head)
    }
    fn for_each_header(&self, name: &[u8], f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        for (n, v) in &self.hdrs.list {
            if header_eq(n.get(self.buf), name) && f(v.get(self.buf)) {
                return true;
            }
        }
        false
    }
    fn src(&self) -> Option<IpAddr> {
        self.src
    }
    fn tls(&self) -> Option<&crate::tls::TlsInfo> {
        self.tls
    }
    fn sess(&self) -> Sess<'_> {
        self.sess
    }
    fn for_each_field(&self, f: &mut dyn FnMut(&[u8], &[u8])) {
        for (n, v) in &self.hdrs.list {
            f(n.get(self.buf), v.get(self.buf));
        }
    }
    fn version_minor(&self) -> Option<u8> {
        Some(self.head.version_minor)
    }
    fn auth_header(&self) -> &'static [u8] {
        if self.proxy_auth {
            b"proxy-authorization"
        } else {
            b"authorization"
        }
    }
    fn body(&self) -> Option<(&[u8], u64)> {
        let start = self.head.head_len.min(self.buf.len());
        match self.head.body {
            BodyKind::None => Some((&[], 0)),
            BodyKind::Length(n) => {
                let end = start.saturating_add(usize::try_from(n).unwrap_or(usize::MAX));
                Some((&self.buf[start..end.min(self.buf.len())], n))
            }
            _ => None,
        }
    }
}

/// A response as `http-response` rules see it (request-only fetches see the request).
/// How `http-response` rules ended the response, when one answers instead of the server.
#[derive(Clone)]
enum RspEnd<'r> {
    Return(&'r crate::config::Reply),
    /// A Lua action's `txn:done(reply)`.
    Owned(Box<crate::config::Reply>),
    /// A Lua action's `txn:done()`: the client connection is closed without an answer.
    Close,
    Redirect(&'r Redirect),
    Deny(&'r crate::config::Deny),
    Drop,
}

/// A response blocked by sluice itself: `option checkcache`, or `return act.DENY` from a Lua
/// action (HAProxy's 502); and `act.ERROR` (500).
static DENY_502: crate::config::Deny = crate::config::Deny {
    status: 502,
    reply: None,
};
static LUA_ERROR: crate::config::Deny = crate::config::Deny {
    status: 500,
    reply: None,
};

/// What the `http-response` rules decided.
struct RspRules<'r> {
    end: Option<RspEnd<'r>>,
    /// The status the client gets (`set-status`), and its reason.
    status: u16,
    reason: Option<&'r str>,
    /// The response goes into the cache as it passes (`cache-store`).
    fill: Option<crate::cache::Filling>,
    /// `http-response capture`: (slot, value) to keep for the log.
    captures: Vec<(usize, Box<[u8]>)>,
}

struct RspView<'a> {
    status: u16,
    /// The transaction's request and response captures (`capture.req.hdr(N)`).
    caps: [&'a [Option<Box<[u8]>>]; 2],
    /// Where the body starts in `buf`, and the size its head announced (`res.body`).
    body: Option<(usize, u64)>,
    /// HTTP/1.`version_minor` (`res.ver`).
    version_minor: u8,
    /// The request's method (the rest of the request is gone).
    method: &'a [u8],
    buf: &'a [u8],
    hdrs: &'a Headers,
    src: Option<IpAddr>,
    tls: Option<&'a crate::tls::TlsInfo>,
    sess: Sess<'a>,
    /// The cache the response comes from (`res.cache_hit`, `res.cache_name`).
    cache: Option<&'a str>,
}

impl HttpView for RspView<'_> {
    fn cache_hit(&self) -> Option<&str> {
        self.cache
    }
    fn method(&self) -> &[u8] {
        self.method
    }
    fn uri(&self) -> &[u8] {
        b""
    }
    fn for_each_header(&self, name: &[u8], f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        for (n, v) in &self.hdrs.list {
            if header_eq(n.get(self.buf), name) && f(v.get(self.buf)) {
                return true;
            }
        }
        false
    }
    fn src(&self) -> Option<IpAddr> {
        self.src
    }
    fn tls(&self) -> Option<&crate::tls::TlsInfo> {
        self.tls
    }
    fn sess(&self) -> Sess<'_> {
        self.sess
    }
    fn status(&self) -> Option<u16> {
        Some(self.status)
    }
    fn for_each_field(&self, f: &mut dyn FnMut(&[u8], &[u8])) {
        for (n, v) in &self.hdrs.list {
            f(n.get(self.buf), v.get(self.buf));
        }
    }
    fn version_minor(&self) -> Option<u8> {
        Some(self.version_minor)
    }
    fn capture(&self, req: bool, idx: usize) -> Option<&[u8]> {
        self.caps[usize::from(!req)].get(idx)?.as_deref()
    }
    fn body(&self) -> Option<(&[u8], u64)> {
        let (start, n) = self.body?;
        let start = start.min(self.buf.len());
        let end = start.saturating_add(usize::try_from(n).unwrap_or(usize::MAX));
        Some((&self.buf[start..end.min(self.buf.len())], n))
    }
}

/// Methods whose request can be sent twice without harm (RFC 9110 §9.2.2).
fn is_idempotent(method: &[u8]) -> bool {
    matches!(
        method,
        b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE" | b"PUT" | b"DELETE"
    )
}

/// Whether `exchange` may hand the request back for another attempt (`self.replay`): the
/// request can be replayed and attempts remain; `reused` makes an unanswered close a replay
/// whatever `retry-on` says (the idle-close race, sluice's own rule).
#[derive(Debug, Clone, Copy)]
struct Retry {
    allowed: bool,
    reused: bool,
}

/// Accounts a server connection in its thread's pool while it carries a request: dropping
/// the guard says the connection is gone (closed), `keep` gives it back to the pool. Unarmed
/// under `http-reuse never`, where connections stay private to their client connection.
struct PoolGuard {
    w: Option<Rc<Worker>>,
    key: crate::pool::Key,
    limits: Limits,
    /// The server's address generation when the connection was opened.
    epoch: u32,
}

impl PoolGuard {
    fn new(w: &Rc<Worker>, reuse: HttpReuse, key: crate::pool::Key, epoch: u32) -> PoolGuard {
        let (be, server, _) = key;
        let srv = &w.shared.server(be, server).conf;
        PoolGuard {
            w: (reuse != HttpReuse::Never).then(|| w.clone()),
            key,
            limits: Limits::of(srv),
            epoch,
        }
    }

    /// Returns the connection to the pool (if pooling applies; otherwise it closes).
    fn keep(mut self, stream: ServerStream, uses: u32) {
        if let Some(w) = self.w.take() {
            let g = &w.shared.server(self.key.0, self.key.1).pool;
            w.pool.release(
                self.key,
                Some(IdleConn {
                    stream,
                    uses,
                    epoch: self.epoch,
                    since: Instant::now(),
                }),
                self.limits,
                g,
            );
        }
    }
}

impl Drop for PoolGuard {
    fn drop(&mut self) {
        if let Some(w) = self.w.take() {
            let g = &w.shared.server(self.key.0, self.key.1).pool;
            w.pool.release(self.key, None, self.limits, g);
        }
    }
}

/// The server side of a request in progress.
struct ServerSide {
    stream: ServerStream,
    sni: Option<Box<str>>,
    slot: Slot,
    /// Requests this connection carried before the current one.
    uses: u32,
    guard: PoolGuard,
    /// Bound to this client connection for good: the server authenticated the connection
    /// itself (NTLM, Negotiate), so no other client may ever use it.
    private: bool,
}

/// A server connection kept between requests of one client connection (`http-reuse never`,
/// or a private connection).
struct Kept {
    be: usize,
    server: usize,
    stream: ServerStream,
    /// The SNI a TLS connection was opened with.
    sni: Option<Box<str>>,
    uses: u32,
    /// The server's address generation at connect time.
    epoch: u32,
    private: bool,
}

/// A response head that arrived without the start of the body it announces, or without a
/// small rest of it: the server may be waiting for our ACK (Nagle) to send the rest.
fn head_without_its_body(resp: &ResponseHead, buffered: usize) -> bool {
    let body_in = buffered.saturating_sub(resp.head_len) as u64;
    match resp.body {
        BodyKind::Length(n) => body_in < n && (body_in == 0 || n - body_in <= 16 * 1024),
        BodyKind::Chunked => body_in == 0,
        _ => false,
    }
}

/// The pool key part of a request's `pool-conn-name` value, and of the SNI of a TLS server
/// whose `sni` comes from the request (`sni`: `Some` for such a server, with the value sent;
/// see `pool::name_hash`).
fn conn_name_hash(
    e: Option<&crate::config::NameExpr>,
    hdrs: &Headers,
    buf: &[u8],
    sni: Option<Option<&str>>,
) -> u64 {
    let name = e.map(|e| match e {
        crate::config::NameExpr::Str(s) => s.as_bytes(),
        crate::config::NameExpr::ReqHdr(n) => hdrs.first(buf, n.as_bytes()).unwrap_or(b""),
    });
    crate::pool::name_hash(name, sni)
}

/// A `401`/`407` whose challenge authenticates the connection rather than each request
/// (NTLM, Negotiate/Kerberos): the connection must stay with this client (HAProxy marks such
/// connections private too).
/// `option checkcache`: whether a shared cache could keep this response with the cookie it
/// sets: a `Set-Cookie` on a response to GET/HEAD/OPTIONS/TRACE with a cacheable status, or
/// marked `Cache-Control: public`, and not made uncacheable (`private`, `no-store`,
/// `no-cache`, `max-age=0`, `s-maxage=0`, `Pragma: no-cache`) nor its cookies excluded
/// (`no-cache="set-cookie"`). HAProxy's rules, header by header in order.
fn cacheable_cookie(status: u16, method_ok: bool, hdrs: &Headers, buf: &[u8]) -> bool {
    let mut cacheable = method_ok
        && matches!(
            status,
            200 | 203 | 204 | 206 | 300 | 301 | 404 | 405 | 410 | 414 | 501
        );
    let mut cookies_too = cacheable;
    let mut set_cookie = false;
    for (n, v) in &hdrs.list {
        let (n, v) = (n.get(buf), v.get(buf));
        if header_eq(n, b"set-cookie") {
            set_cookie = true;
        } else if header_eq(n, b"pragma") {
            if v.split(|&b| b == b',')
                .any(|d| d.trim_ascii().eq_ignore_ascii_case(b"no-cache"))
            {
                (cacheable, cookies_too) = (false, false);
            }
        } else if header_eq(n, b"cache-control") {
            for d in v.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                let l = d.to_ascii_lowercase();
                match l.as_slice() {
                    b"public" => (cacheable, cookies_too) = (true, true),
                    b"private" | b"no-store" | b"no-cache" | b"max-age=0" | b"s-maxage=0" => {
                        (cacheable, cookies_too) = (false, false)
                    }
                    _ if l.starts_with(b"no-cache=\"set-cookie") => cookies_too = false,
                    _ => {}
                }
            }
        }
    }
    set_cookie && cacheable && cookies_too
}

fn connection_auth_challenge(status: u16, hdrs: &Headers, buf: &[u8]) -> bool {
    let name: &[u8] = match status {
        401 => b"www-authenticate",
        407 => b"proxy-authenticate",
        _ => return false,
    };
    hdrs.list.iter().any(|(n, v)| {
        header_eq(n.get(buf), name) && {
            let v = v.get(buf).trim_ascii_start();
            let scheme = v.split(|&b| b == b' ' || b == b',').next().unwrap_or(b"");
            scheme.eq_ignore_ascii_case(b"ntlm") || scheme.eq_ignore_ascii_case(b"negotiate")
        }
    })
}

impl Kept {
    /// An idle server connection is usable only if it has neither closed nor sent anything;
    /// a request that can be replayed (`replay_ok`) takes the event loop's word for it.
    fn alive(&self, replay_ok: bool) -> bool {
        self.stream.reusable(replay_ok)
    }
}

/// A log timer in milliseconds, -1 for a phase not reached (HAProxy's convention).
fn log_ms(d: Option<std::time::Duration>) -> i64 {
    d.map_or(-1, |d| d.as_millis() as i64)
}

/// Per-transaction log facts.
struct Txn {
    start: Instant,
    t_req: i64,
    /// Queue, connect and response times (the log's %Tw %Tc %Tr are derived from them).
    timings: Timings,
    status: i32,
    bytes_out: u64,
    /// Request bytes received from the client (head and forwarded body), for stats `bin`.
    bytes_in: u64,
    /// What the stats plane counts besides status and bytes.
    flags: TxnFlags,
    term: [u8; 2],
    be: Option<usize>,
    /// Server index in the backend, once one is chosen.
    server: Option<usize>,
    /// The server every connection attempt failed to (named in the log only: the
    /// transaction is not accounted to it).
    failed_server: Option<usize>,
    retries: u32,
    redispatched: bool,
    request_line: String,
    /// `log-format` only: the request's `%[fetch]` samples and the server connection's
    /// source address (`%bi`, `%bp`).
    samples: Vec<Option<Box<[u8]>>>,
    be_src: Option<std::net::SocketAddr>,
    /// Cookie persistence: what the request's cookie said, and the response's letter.
    cookie: crate::cookie::Seen,
    ck_rsp: u8,
    /// Already logged (`option logasap`: once the response head went out).
    logged: bool,
    /// The request's method, as cookie insertion needs it (`postonly`, `nocache`).
    post: bool,
    get_or_head: bool,
    /// `compression`: the algorithm the request accepts, if the proxies compress.
    comp: Option<crate::compression::Algo>,
    /// The request's method (up to 16 bytes), for `method` in `http-response` rules, which
    /// run once the request has left the buffer (HAProxy keeps it with the transaction too).
    method: ([u8; 16], u8),
    /// `cache-use`: the request's key, and the object that answers it if one does.
    cache: Option<Box<crate::cache::Lookup>>,
    /// The response comes from the cache (`res.cache_hit`; `<CACHE>` in the log).
    from_cache: bool,
    /// The frontend's capture slots (`%hr`, `%hs`): empty (no allocation) without captures.
    cap_req: Vec<Option<Box<[u8]>>>,
    cap_rsp: Vec<Option<Box<[u8]>>>,
    /// How a Lua action of the request rules ended the transaction.
    lua_end: Option<crate::lua::End>,
    /// The transaction's private Lua value (`txn:set_priv`), from one action to the next.
    lua_priv: std::cell::RefCell<crate::lua::Priv>,
}

/// Whether a status line carries status `code`.
fn status_code_is(line: &[u8], code: u16) -> bool {
    line.split(|&b| b == b' ')
        .nth(1)
        .and_then(|t| std::str::from_utf8(t).ok())
        .and_then(|t| t.parse::<u16>().ok())
        == Some(code)
}

/// Keeps at most `len` bytes of a captured value in slot `i` (made when first needed).
fn capture_into(slots: &mut Vec<Option<Box<[u8]>>>, n: usize, i: usize, v: &[u8], len: usize) {
    if slots.len() < n {
        slots.resize(n, None);
    }
    if let Some(s) = slots.get_mut(i) {
        *s = Some(v[..v.len().min(len)].into());
    }
}

/// `capture request|response header`: the last occurrence of each captured header.
fn capture_headers(
    caps: &[crate::config::CaptureSlot],
    slots: &mut Vec<Option<Box<[u8]>>>,
    hdrs: &Headers,
    buf: &[u8],
) {
    for (i, c) in caps.iter().enumerate() {
        let Some(name) = &c.header else { continue };
        let last = hdrs
            .list
            .iter()
            .rev()
            .find(|(n, _)| header_eq(n.get(buf), name.as_bytes()));
        if let Some((_, v)) = last {
            capture_into(slots, caps.len(), i, v.get(buf), c.len);
        }
    }
}

/// The server name a response from the cache is logged with (HAProxy's).
const CACHE_SERVER: &str = "<CACHE>";

impl Txn {
    /// The cache the response comes from, if it does.
    fn cache_hit_name(&self) -> Option<&str> {
        match &self.cache {
            Some(l) if self.from_cache => Some(&l.cache.conf.name),
            _ => None,
        }
    }

    fn new(start: Instant) -> Txn {
        Txn {
            start,
            t_req: -1,
            timings: Timings::default(),
            status: -1,
            bytes_out: 0,
            bytes_in: 0,
            flags: TxnFlags::default(),
            term: *b"--",
            be: None,
            server: None,
            failed_server: None,
            retries: 0,
            redispatched: false,
            request_line: String::new(),
            samples: Vec::new(),
            be_src: None,
            cookie: crate::cookie::Seen::NONE,
            ck_rsp: b'N',
            logged: false,
            post: false,
            get_or_head: false,
            comp: None,
            method: ([0; 16], 0),
            cache: None,
            from_cache: false,
            cap_req: Vec::new(),
            cap_rsp: Vec::new(),
            lua_end: None,
            lua_priv: Default::default(),
        }
    }
}

/// Facts of a transaction that only the stats counters need.
#[derive(Default, Clone, Copy)]
struct TxnFlags {
    bad_request: bool,
    denied: bool,
    /// `http-response deny`.
    denied_resp: bool,
    intercepted: bool,
    reused: bool,
    /// The status came from the server (not generated by sluice).
    from_server: bool,
}

/// The client connection may carry another request (`None` from a transaction = close).
enum Next {
    KeepAlive,
    /// The connection turned out to be HTTP/2 (`HeadRead::Http2`).
    Http2,
}

struct Conn<'a, C> {
    ctx: &'a SessionCtx,
    fe: &'a Proxy,
    client: C,
    cbuf: BytesMut,
    sbuf: BytesMut,
    kept: Option<Kept>,
    /// The backend and server of the last request forwarded (`option prefer-last-server`).
    last_server: Option<(usize, usize)>,
    /// Set by `exchange` when a reused server connection failed before any response byte:
    /// the slot to replay the request with.
    replay: Option<Slot>,
    /// This is the first request of the client connection (`http-reuse safe`).
    first: bool,
    hdrs: Headers,
    /// `unique-id-format`: the current request's id (`%ID`, `%[unique-id]`,
    /// `unique-id-header`).
    unique_id: Option<String>,
    /// `set-log-level`: the level of this transaction's log line (`Some(None)`: none).
    log_level: std::cell::Cell<Option<Option<u8>>>,
    out: Vec<u8>,
    bufsize: usize,
    max_head: usize,
    /// When the connection last became idle (handshake or previous response done): `%Ti`.
    idle_since: Instant,
    /// An error answer was sent and the connection ends: close it lingering.
    linger: bool,
    /// `silent-drop`: the connection is closed without a word to the client.
    dropped: bool,
    /// The stick-table entries the current request tracks (`http-request track-scN`, and
    /// `tcp-request content track-scN`, which in `mode http` run per request).
    sc: crate::stick::Trackers,
    /// The response's HTTP/1 minor version (`res.ver`).
    rsp_minor: u8,
    /// Where the server's response body starts in `sbuf`, and its announced length
    /// (`res.body`); `None` for other answers.
    rsp_body: Option<(usize, u64)>,
    /// SPOE exchanges of the current transaction (`filter spoe`).
    spoe: crate::spoe::TxnState,
    /// Set for the first request of a `mode tcp` frontend's session that became HTTP: its
    /// first bytes were judged already (the frontend's content rules ran, its SPOE messages
    /// went, its variables were set), so none of that runs again (HAProxy's in-place
    /// upgrade); and the backend those rules chose (`None` after `switch-mode http`: the
    /// frontend's `use_backend` rules pick it). The next requests are processed as usual.
    upgraded: Option<Option<usize>>,
}

/// Lingering close, after an error answer: how long, and how many bytes, the client's further
/// input is read and discarded before the socket is closed. The time is the bound that
/// matters (nginx has no other); the bytes only stop a flood sooner. A client that uploads
/// fast and reads the answer after its upload loses the answer to the reset the close sends
/// once either bound is reached, so the byte bound is generous: 1 MiB cut a 16 MiB upload's
/// early answer short on loopback.
const LINGER_TIME: Duration = Duration::from_secs(2);

/// How long a piece of an answer written with MSG_MORE waits for the server's next bytes
/// before it is pushed out (the kernel's own limit is 200 ms).
const CORK_GRACE: Duration = Duration::from_millis(2);
const LINGER_BYTES: usize = 64 << 20;

/// How long an idle client connection may keep its server connection. Past this the server
/// connection is closed so idle clients do not pin server sockets (until the cross-connection
/// pool of DESIGN §4 takes them instead).
const KEPT_IDLE_GRACE: Duration = Duration::from_secs(1);

/// A header list and an output vector, recycled between connections of a thread.
type Scratch = (Vec<(Hb, Hb)>, Vec<u8>);

thread_local! {
    /// Recycled header lists and output vectors: an idle connection holds none.
    static SCRATCH: std::cell::RefCell<Vec<Scratch>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Scratch vectors kept per thread for reuse; beyond this they are freed.
const SCRATCH_MAX: usize = 256;

fn take_scratch() -> Scratch {
    SCRATCH
        .with(|s| s.borrow_mut().pop())
        .unwrap_or_else(|| (Vec::with_capacity(32), Vec::with_capacity(1024)))
}

fn give_scratch(mut list: Vec<(Hb, Hb)>, mut out: Vec<u8>) {
    if list.capacity() == 0 && out.capacity() == 0 {
        return;
    }
    list.clear();
    out.clear();
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < SCRATCH_MAX {
            s.push((list, out));
        }
    });
}

pub async fn serve<C: ClientIo>(ctx: SessionCtx, client: C) {
    // An HTTP/2 stream is a transaction of its connection's session, counted there.
    if ctx.h2_line.is_none() {
        ctx.shared().proxies[ctx.proxy]
            .fe
            .counters
            .sessions_total
            .fetch_add(1, Relaxed);
    }
    run(ctx, client, BytesMut::new(), false, None).await
}

/// A `mode tcp` frontend's session (counted there) that becomes HTTP/1 (`switch-mode http`,
/// or `to`: the `mode http` backend its rules chose). `pre`: the client's data read so far.
pub async fn serve_upgraded<C: ClientIo>(
    ctx: SessionCtx,
    client: C,
    pre: BytesMut,
    to: Option<usize>,
) {
    Box::pin(run(ctx, client, pre, true, to)).await
}

async fn run<C: ClientIo>(
    ctx: SessionCtx,
    client: C,
    pre: BytesMut,
    upgraded: bool,
    to: Option<usize>,
) {
    let shared = ctx.shared().clone();
    let fe = &shared.cfg.proxies[ctx.proxy];
    let custom_log = fe.options.log_format.is_some() && !fe.logs.is_empty();
    let prof = ctx.prof.clone();
    let mut c = Conn::new(&ctx, fe, client);
    c.cbuf = pre;
    c.upgraded = upgraded.then_some(to);
    let mut first = true;
    loop {
        // The idle wait runs in this small future; the large transaction future exists only
        // while a request is in progress (one allocation per request buys ~3.5 KiB less per
        // idle connection).
        let pending = if c.cbuf.is_empty() {
            match c.wait_idle(first).await {
                Idle::Ready => None,
                Idle::Gone => break,
                Idle::Fail(status, term, at) => Some((status, term, at)),
            }
        } else {
            None
        };
        if c.out.capacity() == 0 {
            let (list, out) = take_scratch();
            c.hdrs.list = list;
            c.out = out;
        }
        c.first = first;
        let txn = Box::pin(c.transaction(first, pending));
        // `cpu_calls`, `cpu_ns_*`: counted per request, as HAProxy resets them.
        let next = match &prof {
            Some(p) => {
                p.set(super::TaskProfile::default());
                super::Profiled {
                    inner: txn,
                    prof: p,
                }
                .await
            }
            None => txn.await,
        };
        match next {
            Some(Next::KeepAlive) => first = false,
            Some(Next::Http2) => {
                // The client sent the HTTP/2 preface: the connection is HTTP/2 from here,
                // starting with the bytes already read.
                let Conn {
                    client, mut cbuf, ..
                } = c;
                let pre = cbuf.split();
                ctx.w.give_buf(cbuf);
                return Box::pin(super::http2::serve(ctx, pre, client)).await;
            }
            None => break,
        }
        if custom_log {
            c.idle_since = Instant::now();
        }
        if c.ctx.w.stopping.get() {
            break;
        }
    }
    if c.linger {
        c.lingering_close().await;
    } else if c.client.shutdown_before_close() && !c.dropped {
        let _ = c.client.shutdown().await;
    }
    c.release_idle_memory();
}

impl<'a, C: ClientIo> Conn<'a, C> {
    fn new(ctx: &'a SessionCtx, fe: &'a Proxy, client: C) -> Self {
        let g = &ctx.shared().cfg.global;
        let bufsize = g.bufsize.max(1024);
        let max_head = bufsize.saturating_sub(g.maxrewrite).max(512);
        let custom_log = fe.options.log_format.is_some() && !fe.logs.is_empty();
        Conn {
            ctx,
            fe,
            client,
            cbuf: BytesMut::new(),
            sbuf: BytesMut::new(),
            kept: None,
            last_server: None,
            replay: None,
            first: true,
            hdrs: Headers::default(),
            unique_id: None,
            log_level: std::cell::Cell::new(None),
            out: Vec::new(),
            bufsize,
            max_head,
            // Read only by `log-format` lines (`%Ti`): no clock read otherwise.
            idle_since: if custom_log {
                Instant::now()
            } else {
                ctx.accepted
            },
            linger: false,
            dropped: false,
            sc: crate::stick::Trackers::default(),
            rsp_minor: 1,
            rsp_body: None,
            spoe: crate::spoe::TxnState::default(),
            upgraded: None,
        }
    }
}

/// Logs an HTTP/2 connection whose preface never came right (an HTTP/1 request on a `proto
/// h2` bind, a broken preface, a close before it), as HAProxy does: `<BADREQ>`, status 0
/// (nothing is answered), `PR--`, from the connection's start. No request is counted: there
/// was none (HAProxy counts a protocol error of the connection).
pub(super) fn log_failed_preface(ctx: &SessionCtx) {
    let shared = ctx.shared().clone();
    let fe = &shared.cfg.proxies[ctx.proxy];
    // The connection is gone already: the log line is made as a session's, on a closed pipe.
    let (client, _) = super::http2::pipe(1024);
    let c = Conn::new(ctx, fe, client);
    let mut txn = Txn::new(ctx.accepted);
    txn.term = *b"PR";
    txn.status = 0;
    txn.request_line = "<BADREQ>".into();
    c.log(&txn);
}

/// Completes when the client has closed its side (EOF or error). Bytes that arrive meanwhile
/// (request body, pipelined requests) are kept in `buf`, up to `room` bytes; past that the
/// client is no longer watched.
async fn client_closed<C: ClientIo>(client: &mut C, buf: &mut BytesMut, room: usize) {
    loop {
        if buf.len() >= room || buf.capacity() == buf.len() {
            std::future::pending::<()>().await;
        }
        match client.read_buf(buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Outcome of waiting for the first byte of a request.
enum Idle {
    Ready,
    /// Closed, idle timeout between requests, or soft stop: leave silently.
    Gone,
    /// Error to answer with this status (and log), then close.
    Fail(u16, [u8; 2], Instant),
}

/// Outcome of reading a request head.
enum HeadRead {
    Got(RequestHead, Instant),
    /// The first bytes of the connection are the HTTP/2 preface.
    Http2,
    /// Closed or idle timeout with nothing received: leave silently.
    Gone,
    /// Error to answer with this status (and log), then close.
    Fail(u16, [u8; 2], Instant),
}

impl<'a, C: ClientIo> Conn<'a, C> {
    /// Gives the buffers and scratch vectors back to the thread.
    fn release_idle_memory(&mut self) {
        let w = &self.ctx.w;
        w.give_buf(std::mem::take(&mut self.cbuf));
        w.give_buf(std::mem::take(&mut self.sbuf));
        give_scratch(
            std::mem::take(&mut self.hdrs.list),
            std::mem::take(&mut self.out),
        );
    }

    /// Waits, holding no buffer, for the first byte of the next request, honouring
    /// `timeout http-keep-alive` (idle between requests), `timeout http-request` and
    /// `timeout client`, and soft stop (which closes idle keep-alive connections).
    async fn wait_idle(&mut self, first: bool) -> Idle {
        let t = &self.fe.timeouts;
        let w = self.ctx.w.clone();
        self.release_idle_memory();
        let idle = if first {
            t.http_request.or(t.client)
        } else {
            t.http_keep_alive.or(t.http_request).or(t.client)
        };
        let stop = w.stop_notify.notified();
        tokio::pin!(stop);
        stop.as_mut().enable();
        if w.stopping.get() && !first {
            return Idle::Gone;
        }
        // One timer serves both the idle timeout and the kept-connection grace (each
        // tokio timer costs ~100 bytes in every idle connection's task).
        let now = tokio::time::Instant::now();
        let deadline = idle.map(|d| now + d);
        let mut grace_at = self.kept.as_ref().map(|_| now + KEPT_IDLE_GRACE);
        let next_wake = |g: Option<tokio::time::Instant>| match (deadline, g) {
            (Some(d), Some(g)) => d.min(g),
            (Some(d), None) => d,
            (None, Some(g)) => g,
            // No timeout configured: far enough to never fire in practice.
            (None, None) => now + Duration::from_secs(86400 * 365),
        };
        let timer = tokio::time::sleep_until(next_wake(grace_at));
        tokio::pin!(timer);
        let ready = self.client.wait_readable();
        tokio::pin!(ready);
        loop {
            tokio::select! {
                r = &mut ready => match r {
                    Ok(()) => break,
                    Err(_) => return Idle::Gone,
                },
                _ = &mut timer => {
                    if grace_at.is_some_and(|g| tokio::time::Instant::now() >= g) {
                        self.kept = None;
                        grace_at = None;
                        timer.as_mut().reset(next_wake(None));
                        continue;
                    }
                    if first {
                        return Idle::Fail(408, *b"cR", Instant::now());
                    }
                    return Idle::Gone;
                }
                _ = &mut stop, if !first => return Idle::Gone,
            }
        }
        self.cbuf = w.take_buf(self.bufsize);
        Idle::Ready
    }

    /// Reads the rest of a request head whose first byte has arrived, honouring
    /// `timeout http-request` (whole head) and `timeout client`.
    async fn read_head(&mut self, pending: Option<(u16, [u8; 2], Instant)>) -> HeadRead {
        if let Some((status, term, at)) = pending {
            return HeadRead::Fail(status, term, at);
        }
        let t = &self.fe.timeouts;
        let start = Instant::now();
        let deadline = t.http_request.map(|d| start + d);
        loop {
            // A clear-text client may open with the HTTP/2 preface (prior knowledge), which
            // no HTTP/1 parser must see: a part of it is read on until it is whole.
            let h2_preface = self.first
                && self.ctx.proto == super::http2::BindProto::Auto
                && self.ctx.h2_line.is_none()
                && super::http2::preface_prefix(&self.cbuf);
            if h2_preface && self.cbuf.len() >= super::http2::PREFACE_LINE.len() {
                return HeadRead::Http2;
            }
            if !h2_preface && !self.cbuf.is_empty() {
                match parse_request(&self.cbuf, self.max_head) {
                    Ok(Parsed::Complete(h)) => {
                        if h.body != BodyKind::None && self.smart_accept() {
                            // The body may be held by the client's Nagle until our ACK.
                            self.client.quick_ack();
                        }
                        return HeadRead::Got(h, start);
                    }
                    // The rest of the head, likewise (a head written in pieces by a client
                    // with Nagle on). Rare: most heads arrive whole.
                    Ok(Parsed::Partial) if self.smart_accept() => self.client.quick_ack(),
                    Ok(Parsed::Partial) => {}
                    Err(e) => return HeadRead::Fail(e.status, *b"PR", start),
                }
            }
            let mut wait = t.client;
            if let Some(dl) = deadline {
                let left = dl.saturating_duration_since(Instant::now());
                wait = Some(wait.map_or(left, |c| c.min(left)));
            }
            if self.cbuf.capacity() - self.cbuf.len() < 512 {
                self.cbuf.reserve(self.bufsize);
            }
            match super::with_timeout(wait, self.client.read_buf(&mut self.cbuf)).await {
                Some(Ok(n)) if n > 0 => {}
                Some(_) => {
                    // Client closed (or reset) mid-head. Nothing received on a later
                    // keep-alive turn is a plain close; on a connection's first turn it is
                    // logged as HAProxy does (`400 CR-- "<BADREQ>"`), unless
                    // `option dontlognull`.
                    if self.cbuf.is_empty() && !self.first {
                        return HeadRead::Gone;
                    }
                    return HeadRead::Fail(400, *b"CR", start);
                }
                None => return HeadRead::Fail(408, *b"cR", start),
            }
        }
    }

    /// One request/response exchange. `None` = the connection is done.
    async fn transaction(
        &mut self,
        first: bool,
        pending: Option<(u16, [u8; 2], Instant)>,
    ) -> Option<Next> {
        // A new transaction: the previous one's id, log level and variables must not reach
        // this one (the first request of an upgraded session keeps those its raw data set).
        self.unique_id = None;
        self.log_level.set(None);
        let judged = self.upgraded.take();
        if judged.is_none() {
            use crate::vars::Scope;
            self.ctx.vars.clear(&[Scope::Txn, Scope::Req, Scope::Res]);
        }
        let (head, start) = match self.read_head(pending).await {
            HeadRead::Got(h, s) => (h, s),
            HeadRead::Gone => return None,
            HeadRead::Http2 => return Some(Next::Http2),
            // `option http-ignore-probes`: a first connection that sent nothing and timed out
            // or closed (a browser's pre-connection) ends without an answer or a log line.
            HeadRead::Fail(status, term, _)
                if first
                    && self.cbuf.is_empty()
                    && self.fe.options.http_ignore_probes
                    && (status == 408 || (status == 400 && term == *b"CR")) =>
            {
                return None;
            }
            HeadRead::Fail(status, term, start) => {
                let mut txn = Txn::new(start);
                txn.term = term;
                txn.status = status as i32;
                txn.request_line = "<BADREQ>".into();
                let client_gone = status == 400 && term == *b"CR";
                let silent_probe =
                    first && self.cbuf.is_empty() && status == 408 && self.fe.options.dontlognull;
                if !client_gone && !silent_probe {
                    let resp = crate::errorfile::response(self.fe, None, status).into_owned();
                    let _ = self.client.send(&resp).await;
                    txn.bytes_out = resp.len() as u64;
                    // The rejected head (an over-long line, say) is still partly unread.
                    self.linger = true;
                }
                txn.flags.bad_request = !client_gone && !silent_probe;
                if !(self.fe.options.dontlognull && self.cbuf.is_empty()) {
                    self.log(&txn);
                }
                self.account(&txn);
                self.stick_account(&txn);
                return None;
            }
        };
        let mut txn = Txn::new(start);
        txn.t_req = start.elapsed().as_millis() as i64;
        txn.bytes_in = head.head_len as u64;
        let m = head.method.of(&self.cbuf);
        if m.len() <= 16 {
            txn.method.0[..m.len()].copy_from_slice(m);
            txn.method.1 = m.len() as u8;
        }
        // Every request counts in the entries the session tracks.
        self.ctx.sc.add(crate::stick::Data::HttpReqCnt, 1);
        let custom = self.fe.options.log_format.as_deref();
        let log_on = !self.fe.logs.is_empty() && (self.fe.options.httplog || custom.is_some());
        if log_on
            && let Some(f) = custom
            && f.req_fetches > 0
        {
            // The request is gone by log time: its samples are taken now, as it arrived.
            self.hdrs.load(&head.headers);
            let view = self.req_view(&head, self.ctx.peer.map(|a| a.ip()));
            txn.samples = vec![None; f.req_fetches];
            let mut v = Vec::new();
            for (fetch, slot) in f.fetches() {
                v.clear();
                if fetch.write(&view, &mut v) {
                    txn.samples[slot] = Some(v.as_slice().into());
                }
            }
        }
        if log_on {
            txn.request_line = match &self.ctx.h2_line {
                Some(l) => l.to_string(),
                None => {
                    let l = crate::http::start_line(&self.cbuf[..head.head_len]);
                    String::from_utf8_lossy(l).into_owned()
                }
            };
        }
        let next = self.process(&head, &mut txn, judged).await;
        if !txn.logged {
            self.log(&txn);
        }
        self.account(&txn);
        self.stick_account(&txn);
        next
    }

    /// Whether this connection delays its ACKs (`tcp-smart-accept`, set on its listener).
    fn smart_accept(&self) -> bool {
        self.fe
            .options
            .smart_accept(self.fe.mode, self.ctx.tls.is_some())
    }

    /// Adds a finished transaction to the frontend, backend and server counters (stats and
    /// CLI read them). A handful of relaxed atomic adds: no lock, no allocation.
    fn account(&self, txn: &Txn) {
        if txn.server.is_some() {
            self.ctx.w.session_server(self.ctx.key, None);
        }
        let shared = self.ctx.shared();
        let class = match txn.status {
            100..=599 => (txn.status / 100 - 1) as usize,
            _ => 5,
        };
        let add = |c: &std::sync::atomic::AtomicU64, n: u64| {
            if n != 0 {
                c.fetch_add(n, Relaxed);
            }
        };
        let f = &txn.flags;
        // What frontend and backend both count of a transaction.
        let both = |c: &crate::backend::Counters| {
            add(&c.req_total, 1);
            if txn.status > 0 {
                add(&c.hrsp[class], 1);
            }
            add(&c.bytes_in, txn.bytes_in);
            add(&c.bytes_out, txn.bytes_out);
            add(&c.denied_req, f.denied as u64);
            add(&c.denied_resp, f.denied_resp as u64);
        };
        let fc = &shared.proxies[self.ctx.proxy].fe.counters;
        both(fc);
        add(&fc.req_errors, f.bad_request as u64);
        add(&fc.intercepted, f.intercepted as u64);
        let Some(b) = txn.be else { return };
        let Some(be) = shared.proxies[b].be.as_ref() else {
            return;
        };
        let bc = &be.counters;
        both(bc);
        add(&bc.sessions_total, 1);
        let data_phase = txn.term[1] == b'D';
        let cli_abort = data_phase && matches!(txn.term[0], b'C' | b'c');
        let srv_abort = data_phase && matches!(txn.term[0], b'S' | b's');
        add(&bc.cli_aborts, cli_abort as u64);
        add(&bc.srv_aborts, srv_abort as u64);
        let Some(s) = txn.server else { return };
        let srv = &be.servers[s];
        // Latency histograms: this thread's own block of the server, no allocation.
        let mut t = txn.timings;
        t.total = Some(txn.start.elapsed());
        srv.timers.record(self.ctx.w.id, &t);
        crate::check::observe_txn(srv, f.from_server, txn.status, txn.term);
        let sc = &srv.counters;
        add(&sc.req_total, 1);
        if f.from_server {
            add(&sc.hrsp[class], 1);
        }
        add(&sc.reuses, f.reused as u64);
        add(&sc.cli_aborts, cli_abort as u64);
        add(&sc.srv_aborts, srv_abort as u64);
    }

    /// Adds a finished transaction to the stick-table entries it and its session track,
    /// then lets go of the request's own (its `conn_cur` drops).
    fn stick_account(&mut self, txn: &Txn) {
        use crate::stick::Data;
        let req = std::mem::take(&mut self.sc);
        for sc in [&self.ctx.sc, &req] {
            if sc.is_empty() {
                continue;
            }
            // As HAProxy counts them: a server's 4xx, a `deny` and a bad request are errors;
            // a server's 5xx other than 501 and 505 is a failure. What sluice answers itself
            // otherwise (`return`, 503 without a server) counts as neither.
            let f = &txn.flags;
            match txn.status {
                400..=499 if f.from_server || f.denied || f.bad_request => {
                    sc.add(Data::HttpErrCnt, 1)
                }
                500..=599 if f.from_server && !matches!(txn.status, 501 | 505) => {
                    sc.add(Data::HttpFailCnt, 1)
                }
                _ => {}
            }
            sc.add(Data::BytesInCnt, txn.bytes_in);
            sc.add(Data::BytesOutCnt, txn.bytes_out);
        }
    }

    fn log(&self, txn: &Txn) {
        self.log_line(txn, false);
    }

    fn log_line(&self, txn: &Txn, asap: bool) {
        let fe = self.fe;
        let o = &fe.options;
        if fe.logs.is_empty() || !(o.httplog || o.tcplog || o.log_format.is_some()) {
            return;
        }
        let shared = self.ctx.shared();
        let bname = txn
            .be
            .map(|b| shared.cfg.proxies[b].name.as_str())
            .unwrap_or(fe.name.as_str());
        let e = Entry {
            client: self.ctx.peer,
            tcp_fd: self.ctx.tcp_fd.as_deref().map(std::os::fd::AsFd::as_fd),
            profile: self.ctx.prof.as_deref().map(std::cell::Cell::get),
            accept_time: Some(self.ctx.accepted_at),
            vars: Some(&self.ctx.vars),
            frontend: &fe.name,
            backend: bname,
            server: match (txn.be, txn.server.or(txn.failed_server)) {
                _ if txn.from_cache => CACHE_SERVER,
                (Some(b), Some(s)) => shared.server(b, s).name.as_str(),
                _ => "<NOSRV>",
            },
            t_req: txn.t_req,
            t_wait: log_ms(txn.timings.queue),
            // A reused server connection took no time to establish: 0, as HAProxy logs it.
            t_connect: match txn.timings.connect {
                None if txn.flags.reused => 0,
                c => log_ms(c),
            },
            t_resp: log_ms(txn.timings.response),
            t_active: txn.start.elapsed().as_millis() as i64,
            status: txn.status,
            bytes: txn.bytes_out,
            term: txn.term,
            actconn: shared.global_conns.load(Relaxed),
            feconn: shared.proxies[self.ctx.proxy].fe.cur_conns.load(Relaxed),
            beconn: txn
                .be
                .and_then(|b| shared.proxies[b].be.as_ref())
                .map(|b| b.servers.iter().map(|s| s.served.load(Relaxed)).sum())
                .unwrap_or(0),
            srvconn: match (txn.be, txn.server) {
                (Some(b), Some(s)) => shared.server(b, s).served.load(Relaxed),
                _ => 0,
            },
            retries: txn.retries,
            redispatched: txn.redispatched,
            srv_queue: 0,
            be_queue: txn
                .be
                .and_then(|b| shared.proxies[b].be.as_ref())
                .map(|b| b.queued.load(Relaxed))
                .unwrap_or(0),
            request: &txn.request_line,
            cap_req: (fe.capture_req.len(), &txn.cap_req),
            cap_rsp: (fe.capture_rsp.len(), &txn.cap_rsp),
            asap,
            cookie: txn
                .be
                .and_then(|b| shared.cfg.proxies[b].cookie.as_ref())
                .filter(|c| c.mode != crate::config::CookieMode::Passive || c.indirect)
                .map_or(*b"--", |_| {
                    let req = if txn.cookie.req == b'-' {
                        b'N'
                    } else {
                        txn.cookie.req
                    };
                    [req, txn.ck_rsp]
                }),
            ..Default::default()
        };
        let interesting =
            crate::log::worth_err(txn.term, txn.retries, txn.redispatched, txn.status);
        let Some(mut level) = crate::log::traffic_level(&fe.options, interesting) else {
            return;
        };
        match self.log_level.get() {
            Some(None) => return,
            Some(Some(l)) => level = l,
            None => {}
        }
        let Some(f) = &fe.options.log_format else {
            // `option tcplog` on an HTTP stream (or a `mode tcp` frontend's upgraded one):
            // its request is logged in the TCP format, as HAProxy does.
            let line = if o.httplog { e.httplog() } else { e.tcplog() };
            self.ctx.w.log.emit(&fe.logs, level, &line);
            return;
        };
        let mut e = e;
        let fstate = &shared.proxies[self.ctx.proxy].fe;
        let ctx = self.ctx;
        e.local = ctx.local;
        e.tls = ctx.tls.as_deref();
        // The handshake counts for the first request of a connection only.
        e.t_handshake = if self.first { ctx.t_handshake } else { 0 };
        e.t_idle = txn
            .start
            .saturating_duration_since(self.idle_since)
            .as_millis() as i64;
        e.t_total = e.t_handshake + e.t_idle + e.t_active;
        e.req_time = Some(std::time::SystemTime::now() - txn.start.elapsed());
        e.bytes_in = txn.bytes_in;
        e.unique_id = self.unique_id.as_deref();
        // The frontend counts this request once it is logged.
        e.req_count = fstate.counters.req_total.load(Relaxed) + 1;
        if f.needs_log_count {
            e.log_count = fstate.log_count.fetch_add(1, Relaxed);
        }
        if let (Some(b), Some(s)) = (txn.be, txn.server) {
            e.srv_addr = Some(**shared.server(b, s).addr.load());
            e.srv_unix = shared.server(b, s).conf.unix.is_some();
        }
        e.be_src = txn.be_src;
        e.samples = &txn.samples;
        self.ctx
            .w
            .log
            .emit(&fe.logs, level, &self.ctx.w.log.custom(f, &e));
    }

    /// Sends a locally generated response, then decides whether the connection can go on.
    async fn local_response(
        &mut self,
        head: &RequestHead,
        txn: &mut Txn,
        resp: &[u8],
        status: u16,
        keep: bool,
    ) -> Option<Next> {
        txn.status = status as i32;
        let resp = self.after_blob(txn, resp);
        txn.bytes_out = resp.len() as u64;
        self.cbuf.advance(head.head_len);
        let body_left = !matches!(head.body, BodyKind::None | BodyKind::Length(0));
        if self.client.send(&resp).await.is_err() {
            txn.term = *b"CD";
            return None;
        }
        if keep
            && !body_left
            && !head.conn_close
            && self.fe.options.http_conn_mode != HttpConnMode::Close
        {
            Some(Next::KeepAlive)
        } else {
            None
        }
    }

    async fn error_response(
        &mut self,
        head: &RequestHead,
        txn: &mut Txn,
        status: u16,
        term: [u8; 2],
    ) -> Option<Next> {
        txn.term = term;
        let be = txn.be.map(|b| &self.ctx.shared().cfg.proxies[b]);
        let resp = crate::errorfile::response(self.fe, be, status).into_owned();
        self.local_response(head, txn, &resp, status, false).await
    }

    /// Whether the access log prints the server connection's source address (`%bi`, `%bp`).
    fn needs_be_src(&self) -> bool {
        !self.fe.logs.is_empty()
            && self
                .fe
                .options
                .log_format
                .as_ref()
                .is_some_and(|f| f.needs_be_src)
    }

    /// Rules, backend choice, server exchange.
    /// `judged`: see [`Conn::upgraded`].
    async fn process(
        &mut self,
        head: &RequestHead,
        txn: &mut Txn,
        judged: Option<Option<usize>>,
    ) -> Option<Next> {
        let ctx = self.ctx;
        let shared = ctx.shared();
        let src = self.ctx.peer.map(|a| a.ip());
        let uri = head.uri.of(&self.cbuf);
        // monitor-uri: answered here, never forwarded.
        if let Some(m) = &self.fe.monitor_uri
            && uri == m.as_bytes()
        {
            let resp = crate::errorfile::builtin(200);
            txn.flags.intercepted = true;
            return self.local_response(head, txn, &resp, 200, true).await;
        }
        self.hdrs.load(&head.headers);
        if head.host_dup {
            self.hdrs.keep_first(&self.cbuf, b"host");
        }
        // `capture request header`: as received, before the rules.
        if !self.fe.capture_req.is_empty() {
            capture_headers(
                &self.fe.capture_req,
                &mut txn.cap_req,
                &self.hdrs,
                &self.cbuf,
            );
        }
        // `unique-id-format`: the id is made as the request arrives, before the rules (a
        // header the server gets carries it; the access log's %ID prints it).
        if let Some(f) = &self.fe.options.unique_id_format {
            self.unique_id =
                Some(self.render_on_request(self.fe, head, src, txn, f, Live::UniqueId));
        }
        // SPOE: each HTTP request is a stream of its own, as in HAProxy.
        self.spoe = crate::spoe::TxnState::default();
        self.rsp_body = None;
        let fe = self.fe;
        if !fe.spoe.is_empty() && judged.is_none() {
            use crate::spoe::Event;
            self.spoe_event(fe, Event::ClientSession, head, src).await;
            self.spoe_event(fe, Event::FrontendTcpRequest, head, src)
                .await;
        }
        // `tcp-request content` rules run per request in `mode http`, before the
        // `http-request` ones (HAProxy's streams are requests); not again for the request
        // whose first bytes a `mode tcp` frontend's rules already judged.
        if judged.is_none() {
            let verdict = self.content_rules(self.fe, head, src);
            if verdict != super::Verdict::Go {
                return self.content_reject(txn, verdict);
            }
        }
        // `option http-buffer-request` on the frontend: the body (up to the buffer) is
        // received before its http-request rules, which may read it (`req.body`).
        if fe.options.http_buffer_request && !self.buffer_body(head).await {
            return self.error_response(head, txn, 408, *b"cR").await;
        }
        if !fe.spoe.is_empty() {
            let ev = crate::spoe::Event::FrontendHttpRequest;
            self.spoe_event(fe, ev, head, src).await;
        }
        // Frontend http-request rules.
        if let Some(r) = self.request_rules(fe, head, src, txn).await {
            return self.act_final(self.fe, head, txn, r).await;
        }
        // A hit of the frontend's `cache-use` is answered by the frontend: no backend.
        if txn.cache.as_ref().is_some_and(|c| c.hit.is_some()) {
            return self.serve_cached(head, txn, self.ctx.proxy).await;
        }
        // The stats page, after the proxy's http-request rules as in HAProxy.
        if self.fe.stats.is_some()
            && let Some(next) = self.stats_page(self.ctx.proxy, head, txn, src).await
        {
            return next;
        }
        // The proxy's `redirect` rules come after its http-request rules and stats page.
        if let Some(rd) = self.first_redirect(self.fe, head, src) {
            return self.redirect_response(self.fe, head, txn, rd).await;
        }
        // use_backend / default_backend.
        let be_idx = judged.flatten().or_else(|| {
            let view = self.req_view(head, src);
            // The first rule whose condition holds decides; a dynamic name naming no
            // backend falls to the default one, as in HAProxy.
            self.fe
                .use_backends
                .iter()
                .find(|ub| ub.cond.as_ref().is_none_or(|c| c.eval(&view)))
                .and_then(|ub| ub.target(&shared.cfg, self.fe.mode, &view))
                .or(self.fe.default_backend)
        });
        let Some(be_idx) = be_idx else {
            return self.error_response(head, txn, 503, *b"SC").await;
        };
        let bp = &shared.cfg.proxies[be_idx];
        txn.be = Some(be_idx);
        if bp.mode != crate::config::Mode::Http {
            // A `mode tcp` frontend's later request routed to a `mode tcp` backend: an HTTP
            // stream cannot go there. As HAProxy does, the connection is closed without an
            // answer (a client retries on a new connection, which its first data routes),
            // logged `IR` with status 500.
            txn.status = 500;
            txn.term = *b"IR";
            return None;
        }
        if be_idx != self.ctx.proxy {
            use crate::spoe::Event;
            // HAProxy waits for the body before the backend's content rules.
            if bp.options.http_buffer_request
                && !self.fe.options.http_buffer_request
                && !self.buffer_body(head).await
            {
                return self.error_response(head, txn, 408, *b"cR").await;
            }
            // The backend events go to the frontend's engines too (only a `listen`
            // section's skip them), then to the backend's.
            let spoe = !self.fe.spoe.is_empty() || !bp.spoe.is_empty();
            if spoe {
                self.spoe_event(fe, Event::BackendTcpRequest, head, src)
                    .await;
                self.spoe_event(bp, Event::BackendTcpRequest, head, src)
                    .await;
            }
            let verdict = self.content_rules(bp, head, src);
            if verdict != super::Verdict::Go {
                return self.content_reject(txn, verdict);
            }
            if spoe {
                self.spoe_event(fe, Event::BackendHttpRequest, head, src)
                    .await;
                self.spoe_event(bp, Event::BackendHttpRequest, head, src)
                    .await;
            }
            if let Some(r) = self.request_rules(bp, head, src, txn).await {
                return self.act_final(bp, head, txn, r).await;
            }
            if bp.stats.is_some()
                && let Some(next) = self.stats_page(be_idx, head, txn, src).await
            {
                return next;
            }
            if let Some(rd) = self.first_redirect(bp, head, src) {
                return self.redirect_response(bp, head, txn, rd).await;
            }
        }
        if txn.cache.as_ref().is_some_and(|c| c.hit.is_some()) {
            return self.serve_cached(head, txn, be_idx).await;
        }
        // A listen section's `option http-buffer-request` (its own backend): the body was
        // waited for before its rules, as the frontend's.
        self.forward(head, txn, be_idx).await
    }

    /// `option http-buffer-request`: the body (up to the buffer) is received before the
    /// rules that follow, and before a server is chosen and connected to. `false`: the
    /// client stopped sending (a 408).
    async fn buffer_body(&mut self, head: &RequestHead) -> bool {
        if head.expect_continue {
            return true;
        }
        let BodyKind::Length(n) = head.body else {
            return true;
        };
        let room = self.bufsize.saturating_sub(head.head_len) as u64;
        let want = n.min(room);
        let t = self.fe.timeouts.http_request.or(self.fe.timeouts.client);
        want == 0 || self.read_body_into_buf(head, want, t).await.is_some()
    }

    /// Answers the stats page of proxy `px` if the request is for it (`None`: it is not).
    async fn stats_page(
        &mut self,
        px: usize,
        head: &RequestHead,
        txn: &mut Txn,
        src: Option<IpAddr>,
    ) -> Option<Option<Next>> {
        use crate::stats_page as sp;
        let ctx = self.ctx;
        let shared = ctx.shared();
        let page = shared.cfg.proxies[px].stats.as_ref()?;
        let rest = sp::matches(page, head.method.of(&self.cbuf), head.uri.of(&self.cbuf))?;
        let rest = rest.to_vec();
        txn.flags.intercepted = true;
        let auth = self.hdrs.first(&self.cbuf, b"authorization");
        let admin = page
            .admin
            .as_ref()
            .is_some_and(|c| c.eval(&self.req_view(head, src)));
        let (status, resp) = if !sp::authorized(page, auth) {
            (401, sp::unauthorized(page, head.is_head))
        } else if head.method.of(&self.cbuf) == b"POST" {
            // The form is small: read it whole, then drop it from the buffer so the
            // connection stays in step for the next request.
            let body: Result<usize, &'static str> = match head.body {
                BodyKind::None => Ok(0),
                BodyKind::Length(n) if n <= sp::MAX_POST => {
                    match self
                        .read_body_into_buf(head, n, self.fe.timeouts.client)
                        .await
                    {
                        Some(n) => Ok(n),
                        None => {
                            txn.term = *b"CD";
                            return Some(None);
                        }
                    }
                }
                BodyKind::Length(_) => Err("EXCD"),
                _ => Err("IVAL"),
            };
            let form = body.map(|n| &self.cbuf[head.head_len..head.head_len + n]);
            let workers = shared.workers.get();
            let kill = |be: usize, srv: usize| {
                // Every thread closes its own sessions on that server.
                for tx in workers.into_iter().flatten() {
                    let _ = tx.send(Box::new(move |w: &Rc<Worker>| {
                        w.kill_server_sessions(be, srv)
                    }));
                }
            };
            let resp = sp::post(shared, page, &rest, form, admin, &kill);
            let mut h2 = head.clone();
            if let Ok(n) = body {
                // Remove the form bytes: the response below then sees a bodiless request
                // and the connection stays in step (a refused body closes it instead).
                let mut tail = self.cbuf.split_off(head.head_len);
                tail.advance(n);
                self.cbuf.unsplit(tail);
                h2.body = BodyKind::None;
            }
            return Some(self.local_response(&h2, txn, &resp, 303, true).await);
        } else {
            (
                200,
                sp::render(shared, page, px, &rest, head.is_head, admin),
            )
        };
        Some(self.local_response(head, txn, &resp, status, true).await)
    }

    /// Reads until `n` body bytes follow the head in `cbuf`, within `t` in all.
    /// `None`: the client went away or timed out.
    async fn read_body_into_buf(
        &mut self,
        head: &RequestHead,
        n: u64,
        t: Option<std::time::Duration>,
    ) -> Option<usize> {
        let want = head.head_len + n as usize;
        let deadline = t.map(|t| tokio::time::Instant::now() + t);
        while self.cbuf.len() < want {
            self.cbuf.reserve(want - self.cbuf.len());
            let left = deadline.map(|d| d.saturating_duration_since(tokio::time::Instant::now()));
            match super::with_timeout(left, self.client.read_buf(&mut self.cbuf)).await {
                Some(Ok(k)) if k > 0 => {}
                _ => return None,
            }
        }
        Some(n as usize)
    }

    /// `tcp-request content` rules of `p` on this request.
    fn content_rules(
        &mut self,
        p: &Proxy,
        head: &RequestHead,
        src: Option<IpAddr>,
    ) -> super::Verdict {
        use crate::config::TcpAction;
        for r in &p.tcp_content {
            let done = {
                let view = self.proxy_view(p, head, src);
                if !r.cond.as_ref().is_none_or(|c| c.eval(&view)) {
                    continue;
                }
                match &r.action {
                    // The stream is HTTP already: `switch-mode` only stops the rules.
                    TcpAction::Accept | TcpAction::SwitchMode(_) => return super::Verdict::Go,
                    TcpAction::Reject => return super::Verdict::Reject,
                    TcpAction::SilentDrop => return super::Verdict::SilentDrop,
                    TcpAction::Stick(a) => super::stick_act(a, &view),
                    TcpAction::SetVar(a) => {
                        a.run(&view);
                        continue;
                    }
                    // Edits of an HTTP message mean nothing here; an end rejects.
                    TcpAction::Lua(a) => {
                        let eff = crate::lua::run_action(a, &view, false, None);
                        if eff.end.is_some() {
                            return super::Verdict::Reject;
                        }
                        if eff.stop {
                            return super::Verdict::Go;
                        }
                        continue;
                    }
                }
            };
            self.track(done);
        }
        super::Verdict::Go
    }

    /// A request rejected by `tcp-request content`: the connection is closed without an
    /// answer, as in HAProxy; logged `PR`.
    fn content_reject(&mut self, txn: &mut Txn, verdict: super::Verdict) -> Option<Next> {
        txn.term = *b"PR";
        txn.flags.denied = true;
        if verdict == super::Verdict::SilentDrop {
            self.silent_drop();
        }
        None
    }

    /// The proxy's page for `status` (the backend's `errorfile`, the frontend's, or the
    /// built-in one), and whether the connection stays open after it: as after `deny` when
    /// `keep` (unless the page says close), else closed.
    fn error_page(&self, txn: &Txn, status: u16, keep: bool) -> (Vec<u8>, bool) {
        let be = txn.be.map(|b| &self.ctx.shared().cfg.proxies[b]);
        match crate::errorfile::response(self.fe, be, status) {
            std::borrow::Cow::Borrowed(f) => (f.to_vec(), keep && !crate::http::says_close(f)),
            std::borrow::Cow::Owned(_) if keep => (crate::errorfile::builtin_open(status), true),
            std::borrow::Cow::Owned(f) => (f, false),
        }
    }

    /// `silent-drop`: the client connection is closed as the transaction ends, without the
    /// client being told (no answer, no shutdown, no lingering).
    fn silent_drop(&mut self) {
        self.client.silent_drop();
        self.dropped = true;
        self.linger = false;
    }

    /// Keeps an entry a rule of this request started to track; the request counts in it
    /// (it was received before the rule ran).
    fn track(&mut self, done: super::StickDone) {
        if let super::StickDone::Track(slot, t) = done {
            t.add(crate::stick::Data::HttpReqCnt, 1);
            self.sc.0[slot] = Some(t);
        }
    }

    /// Applies header edits and returns the first final action (deny/return/redirect).
    fn run_request_rules<'p>(
        &mut self,
        p: &'p Proxy,
        head: &RequestHead,
        src: Option<IpAddr>,
        txn: &mut Txn,
        from: usize,
    ) -> Option<(usize, &'p HttpRequestAction)> {
        for (i, rule) in p.http_request.iter().enumerate().skip(from) {
            let ok = match &rule.cond {
                None => true,
                Some(c) => c.eval(&self.proxy_view(p, head, src)),
            };
            if !ok {
                continue;
            }
            match &rule.action {
                HttpRequestAction::Stick(a) => {
                    let done = super::stick_act(a, &self.proxy_view(p, head, src));
                    self.track(done);
                }
                HttpRequestAction::SetVar(a) => a.run(&self.proxy_view(p, head, src)),
                HttpRequestAction::SetLogLevel(l) => self.log_level.set(Some(*l)),
                HttpRequestAction::CacheUse(u) => self.cache_use(u, p, head, txn),
                HttpRequestAction::Capture(c) => {
                    let mut v = Vec::new();
                    if c.expr.write(&self.proxy_view(p, head, src), &mut v) {
                        let caps = &self.fe.capture_req;
                        let len = caps.get(c.slot).map_or(0, |s| s.len);
                        capture_into(&mut txn.cap_req, caps.len(), c.slot, &v, len);
                    }
                }
                // `allow`: no more rules of this section; the request goes on.
                HttpRequestAction::Allow => return None,
                HttpRequestAction::PatEdit(e) => {
                    let render = |v: &LfValue| match v {
                        LfValue::Lit(t) => t.clone(),
                        LfValue::Fmt { format, .. } => {
                            self.render_on_request(p, head, src, txn, format, Live::HeaderValue)
                        }
                    };
                    let key = render(&e.key);
                    let value = render(&e.value);
                    e.apply(&key, &value);
                }
                HttpRequestAction::Header(a) => match a.value() {
                    Some(LfValue::Fmt { format, .. }) => {
                        let v =
                            self.render_on_request(p, head, src, txn, format, Live::HeaderValue);
                        self.hdrs.apply_value(&self.cbuf, a, &v);
                    }
                    _ => self.hdrs.apply(&self.cbuf, a),
                },
                HttpRequestAction::Lua(la) => {
                    let eff = crate::lua::run_action(
                        la,
                        &self.proxy_view(p, head, src),
                        false,
                        Some(&txn.lua_priv),
                    );
                    for e in eff.edits {
                        match e {
                            crate::lua::Edit::Header { res: false, action } => {
                                self.hdrs.apply(&self.cbuf, &action)
                            }
                            crate::lua::Edit::Target(part, v) => {
                                let cur = self.hdrs.target(&self.cbuf, head);
                                if let Some(new) =
                                    crate::http::rewrite_target(cur, part, None, v.as_bytes())
                                {
                                    self.hdrs.uri = Some(new.into_boxed_slice());
                                }
                            }
                            _ => {}
                        }
                    }
                    if eff.end.is_some() {
                        txn.lua_end = eff.end;
                        return Some((i, &rule.action));
                    }
                    if eff.stop {
                        return None;
                    }
                }
                HttpRequestAction::Rewrite(rw) => {
                    let value = match &rw.value {
                        LfValue::Lit(t) => std::borrow::Cow::Borrowed(t.as_str()),
                        LfValue::Fmt { format, .. } => std::borrow::Cow::Owned(
                            self.render_on_request(p, head, src, txn, format, Live::HeaderValue),
                        ),
                    };
                    let cur = self.hdrs.target(&self.cbuf, head);
                    let re = rw.regex.as_ref().map(|r| &r.0);
                    if let Some(new) =
                        crate::http::rewrite_target(cur, rw.part, re, value.as_bytes())
                    {
                        self.hdrs.uri = Some(new.into_boxed_slice());
                    }
                }
                other => return Some((i, other)),
            }
        }
        None
    }

    /// The `http-request` rules of `p`, waiting for the agents of `send-spoe-group` rules;
    /// returns the action that ends the evaluation, if one does.
    async fn request_rules<'p>(
        &mut self,
        p: &'p Proxy,
        head: &RequestHead,
        src: Option<IpAddr>,
        txn: &mut Txn,
    ) -> Option<&'p HttpRequestAction> {
        let mut from = 0;
        loop {
            match self.run_request_rules(p, head, src, txn, from)? {
                (i, HttpRequestAction::SendSpoeGroup(g)) => {
                    if let Some(e) = p.spoe.get(g.engine) {
                        self.spoe_run(e, Err(g.group), p, head, src).await;
                    }
                    from = i + 1;
                }
                (_, a) => return Some(a),
            }
        }
    }

    /// The messages of SPOE engines of `p` sent on event `ev`, each exchange waited for.
    async fn spoe_event(
        &mut self,
        p: &Proxy,
        ev: crate::spoe::Event,
        head: &RequestHead,
        src: Option<IpAddr>,
    ) {
        for e in &p.spoe {
            if e.has_event(ev) {
                self.spoe_run(e, Ok(ev), p, head, src).await;
            }
        }
    }

    /// The `on-http-response` messages of the frontend's SPOE engines, then the backend's.
    async fn spoe_response(
        &mut self,
        bp: &Proxy,
        txn: &Txn,
        srv: Option<&crate::backend::ServerState>,
        status: u16,
    ) {
        let ev = crate::spoe::Event::HttpResponse;
        let fe = self.fe;
        let sets: [&Proxy; 2] = [fe, bp];
        let n = if std::ptr::eq(fe, bp) { 1 } else { 2 };
        for p in &sets[..n] {
            for e in p.spoe.iter().filter(|e| e.has_event(ev)) {
                self.spoe_rsp_run(e, Ok(ev), bp, txn, srv, status).await;
            }
        }
    }

    /// One SPOE exchange on the response (`status` as the rules see it now).
    async fn spoe_rsp_run(
        &mut self,
        e: &crate::spoe::Engine,
        what: Result<crate::spoe::Event, usize>,
        bp: &Proxy,
        txn: &Txn,
        srv: Option<&crate::backend::ServerState>,
        status: u16,
    ) {
        let ctx = self.ctx;
        // Out of `self` while the view borrows it.
        let mut st = std::mem::take(&mut self.spoe);
        {
            let view = self.rsp_view(txn, status, &bp.name, srv);
            e.process(ctx, &mut st, what, &view, &ctx.vars).await;
        }
        self.spoe = st;
    }

    /// One SPOE exchange on the request: samples are taken as the rules of `p` see it.
    async fn spoe_run(
        &mut self,
        e: &crate::spoe::Engine,
        what: Result<crate::spoe::Event, usize>,
        p: &Proxy,
        head: &RequestHead,
        src: Option<IpAddr>,
    ) {
        let ctx = self.ctx;
        let mut st = std::mem::take(&mut self.spoe);
        {
            let view = self.proxy_view(p, head, src);
            e.process(ctx, &mut st, what, &view, &ctx.vars).await;
        }
        self.spoe = st;
    }

    /// The request as the rules of proxy `p` see it (`be_name` is `p`'s name).
    fn proxy_view<'v>(
        &'v self,
        p: &'v Proxy,
        head: &'v RequestHead,
        src: Option<IpAddr>,
    ) -> ReqView<'v> {
        let mut v = self.req_view(head, src);
        v.sess.backend = &p.name;
        v
    }

    /// Evaluates a format on the request now, as the rules of proxy `p` see it: a header value
    /// or redirect target, or the `unique-id-format` id.
    fn render_on_request(
        &self,
        p: &Proxy,
        head: &RequestHead,
        src: Option<IpAddr>,
        txn: &Txn,
        f: &crate::config::logformat::LogFormat,
        as_: Live,
    ) -> String {
        let mut e = self.now_entry(&p.name, txn);
        // The request line (`%r`, `%HM`, ...) is kept for logging only when a log needs it.
        let line = String::from_utf8_lossy(crate::http::start_line(&self.cbuf[..head.head_len]));
        if e.request.is_empty() {
            e.request = &line;
        }
        let mut out = String::new();
        let view = self.proxy_view(p, head, src);
        self.ctx.w.log.render_now(f, &e, &view, as_, &mut out);
        out
    }

    /// What a log-format evaluated before the end of the transaction knows of it.
    fn now_entry<'e>(&'e self, backend: &'e str, txn: &'e Txn) -> Entry<'e> {
        let ctx = self.ctx;
        Entry {
            client: ctx.peer,
            tcp_fd: ctx.tcp_fd.as_deref().map(std::os::fd::AsFd::as_fd),
            accept_time: Some(ctx.accepted_at),
            frontend: &self.fe.name,
            backend,
            server: "<NOSRV>",
            t_req: txn.t_req,
            t_wait: -1,
            t_connect: -1,
            t_resp: -1,
            t_active: -1,
            t_total: -1,
            status: -1,
            request: &txn.request_line,
            local: ctx.local,
            tls: ctx.tls.as_deref(),
            t_handshake: if self.first { ctx.t_handshake } else { 0 },
            bytes_in: txn.bytes_in,
            req_count: ctx.shared().proxies[ctx.proxy]
                .fe
                .counters
                .req_total
                .load(Relaxed),
            unique_id: self.unique_id.as_deref(),
            vars: Some(&ctx.vars),
            ..Default::default()
        }
    }

    /// Cookie persistence, request side: which server the cookie names (`txn.cookie`), and
    /// the `Cookie` header as the server must see it (`prefix` and `insert indirect` edit it).
    fn read_cookie(
        &mut self,
        ck: &crate::config::CookieCfg,
        head: &RequestHead,
        txn: &mut Txn,
        be_idx: usize,
    ) {
        let method = head.method.of(&self.cbuf);
        txn.post = method == b"POST";
        txn.get_or_head = method == b"GET" || method == b"HEAD";
        let shared = self.ctx.shared();
        let servers = &shared.backend(be_idx).servers;
        // Read in place: no per-request copy of the server list.
        let candidate = |i: usize| {
            let s = &servers[i];
            let gone = s.deleted.load(Relaxed);
            crate::cookie::Candidate {
                cookie: s.conf.cookie.as_deref().filter(|_| !gone),
                running: !s.maint.load(Relaxed) && s.up.load(Relaxed),
            }
        };
        let at: Vec<usize> = (0..self.hdrs.list.len())
            .filter(|&i| header_eq(self.hdrs.list[i].0.get(&self.cbuf), b"cookie"))
            .collect();
        let mut values: Vec<Vec<u8>> = at
            .iter()
            .map(|&i| self.hdrs.list[i].1.get(&self.cbuf).to_vec())
            .collect();
        txn.cookie = crate::cookie::read_request(
            ck,
            (servers.len(), &candidate),
            shared.cfg.proxies[be_idx].options.persist,
            &mut values,
            crate::backend::unix_now() as u32,
        );
        // Edited fields replace the received ones; emptied ones go (last first, so that
        // the indices stay right).
        for (&i, v) in at.iter().zip(values).rev() {
            if v.is_empty() {
                self.hdrs.list.remove(i);
            } else if v != self.hdrs.list[i].1.get(&self.cbuf) {
                self.hdrs.list[i].1 = Hb::Own(v.into_boxed_slice());
            }
        }
    }

    /// Cookie persistence, response side: the server's `Set-Cookie` fields as the mode
    /// wants them, and the cookie sluice inserts.
    fn answer_cookie(
        &mut self,
        ck: &crate::config::CookieCfg,
        txn: &mut Txn,
        server: usize,
        state: &crate::backend::ServerState,
        status: u16,
    ) {
        let direct = txn.cookie.server == Some(server);
        if txn.cookie.req == b'V' && !direct {
            // A retry moved the request away from the server its valid cookie named.
            txn.cookie.req = b'D';
        }
        let buf = &self.sbuf;
        let set_cookies: Vec<(usize, &[u8])> = self
            .hdrs
            .list
            .iter()
            .enumerate()
            .filter(|(_, (n, _))| header_eq(n.get(buf), b"set-cookie"))
            .map(|(i, (_, v))| (i, v.get(buf)))
            .collect();
        let cacheable = ck.nocache
            && crate::cookie::cacheable(
                txn.get_or_head,
                status,
                self.hdrs.list.iter().map(|(n, v)| (n.get(buf), v.get(buf))),
            );
        let a = crate::cookie::answer(
            ck,
            &txn.cookie,
            direct,
            state.conf.cookie.as_deref(),
            &set_cookies,
            txn.post,
            cacheable,
            crate::backend::unix_now() as u32,
        );
        drop(set_cookies);
        for (i, v) in a.replace {
            self.hdrs.list[i].1 = Hb::Own(v.into_bytes().into_boxed_slice());
        }
        for &i in a.delete.iter().rev() {
            self.hdrs.list.remove(i);
        }
        if let Some(v) = a.insert {
            self.hdrs.add("set-cookie", &v);
            if a.cache_private {
                self.hdrs.add("cache-control", "private");
            }
        }
        txn.ck_rsp = a.letter;
    }

    /// The request as rules see it.
    fn req_view<'v>(&'v self, head: &'v RequestHead, src: Option<IpAddr>) -> ReqView<'v> {
        ReqView {
            buf: &self.cbuf,
            head,
            hdrs: &self.hdrs,
            proxy_auth: self.proxied(head),
            src,
            tls: self.ctx.tls.as_deref(),
            sess: self.sess(&self.fe.name),
        }
    }

    /// `option http-use-proxy-header` and a request whose target starts with neither `/`
    /// nor `*` (HAProxy's test for a request meant for a proxy).
    fn proxied(&self, head: &RequestHead) -> bool {
        self.fe.options.http_use_proxy_header
            && !matches!(head.uri.of(&self.cbuf).first(), Some(b'/' | b'*'))
    }

    /// What the rules of a transaction in `backend` see of its session.
    fn sess<'v>(&'v self, backend: &'v str) -> Sess<'v> {
        Sess {
            peer: self.ctx.peer,
            local: self.ctx.local,
            frontend: &self.fe.name,
            backend,
            unique_id: self.unique_id.as_deref(),
            sc: crate::stick::ScView {
                sess: Some(&self.ctx.sc),
                txn: Some(&self.sc),
            },
            vars: Some(&self.ctx.vars),
            pp: self.ctx.pp.as_deref(),
            shared: Some(self.ctx.shared()),
            server: None,
            tcp_fd: self.ctx.tcp_fd.as_deref().map(std::os::fd::AsFd::as_fd),
            profile: self.ctx.prof.as_deref().map(std::cell::Cell::get),
        }
    }

    /// The first of `p`'s `redirect` rules whose condition holds.
    fn first_redirect<'p>(
        &self,
        p: &'p Proxy,
        head: &RequestHead,
        src: Option<IpAddr>,
    ) -> Option<&'p Redirect> {
        let view = self.proxy_view(p, head, src);
        p.redirects
            .iter()
            .find(|r| r.cond.as_ref().is_none_or(|c| c.eval(&view)))
            .map(|r| &r.redirect)
    }

    async fn redirect_response(
        &mut self,
        p: &Proxy,
        head: &RequestHead,
        txn: &mut Txn,
        rd: &Redirect,
    ) -> Option<Next> {
        let target = match &rd.target {
            LfValue::Lit(t) => std::borrow::Cow::Borrowed(t.as_str()),
            LfValue::Fmt { format, .. } => {
                let src = self.ctx.peer.map(|a| a.ip());
                std::borrow::Cow::Owned(self.render_on_request(
                    p,
                    head,
                    src,
                    txn,
                    format,
                    Live::HeaderValue,
                ))
            }
        };
        let loc = redirect_location(rd, &target, &self.cbuf, head, &self.hdrs);
        let resp = format!(
            "HTTP/1.1 {} {}\r\ncontent-length: 0\r\nlocation: {}\r\ncache-control: no-cache\r\n\r\n",
            rd.code,
            crate::http::reason_phrase(rd.code),
            loc
        );
        self.local_response(head, txn, resp.as_bytes(), rd.code, true)
            .await
    }

    /// What a `deny` sends: its own reply, or the status's error page; either way the
    /// connection ends after it.
    fn deny_answer(
        &self,
        d: &crate::config::Deny,
        head: &RequestHead,
        txn: &Txn,
        eval: &mut dyn FnMut(&crate::config::logformat::LogFormat) -> String,
    ) -> Vec<u8> {
        match &d.reply {
            Some(r) => fill_reply(r, head.is_head, true, eval),
            None => {
                let be = txn.be.map(|b| &self.ctx.shared().cfg.proxies[b]);
                crate::errorfile::response(self.fe, be, d.status).into_owned()
            }
        }
    }

    /// A reply's bytes, its log-format parts evaluated on this request as the rules of `p`
    /// see it.
    fn reply_bytes(
        &self,
        p: &Proxy,
        head: &RequestHead,
        txn: &Txn,
        r: &crate::config::Reply,
        close: bool,
    ) -> Vec<u8> {
        let src = self.ctx.peer.map(|a| a.ip());
        fill_reply(r, head.is_head, close, &mut |format| {
            self.render_on_request(p, head, src, txn, format, Live::HeaderValue)
        })
    }

    /// Evaluates a format on the response being processed (the request head is gone from
    /// the receive buffer by then), as `http-response` header values are.
    fn render_on_response(
        &self,
        bp: &Proxy,
        txn: &Txn,
        srv: Option<&crate::backend::ServerState>,
        status: u16,
        format: &crate::config::logformat::LogFormat,
    ) -> String {
        let view = self.rsp_view(txn, status, &bp.name, srv);
        let mut e = self.now_entry(&bp.name, txn);
        match srv {
            Some(srv) => {
                e.server = &srv.name;
                e.srv_addr = Some(**srv.addr.load());
                e.srv_unix = srv.conf.unix.is_some();
            }
            None if txn.from_cache => e.server = CACHE_SERVER,
            None => {}
        }
        e.status = status.into();
        let mut v = String::new();
        self.ctx
            .w
            .log
            .render_now(format, &e, &view, Live::HeaderValue, &mut v);
        v
    }

    /// The response being processed as rules see it (`be_name` is `backend`; `srv` the
    /// server that answered, if one did).
    fn rsp_view<'v>(
        &'v self,
        txn: &'v Txn,
        status: u16,
        backend: &'v str,
        srv: Option<&'v crate::backend::ServerState>,
    ) -> RspView<'v> {
        RspView {
            status,
            caps: [&txn.cap_req, &txn.cap_rsp],
            body: self.rsp_body,
            version_minor: self.rsp_minor,
            method: &txn.method.0[..usize::from(txn.method.1)],
            buf: &self.sbuf,
            hdrs: &self.hdrs,
            src: self.ctx.peer.map(|a| a.ip()),
            tls: self.ctx.tls.as_deref(),
            sess: Sess {
                server: srv,
                ..self.sess(backend)
            },
            cache: txn.cache_hit_name(),
        }
    }

    async fn act_final(
        &mut self,
        p: &Proxy,
        head: &RequestHead,
        txn: &mut Txn,
        a: &HttpRequestAction,
    ) -> Option<Next> {
        match a {
            HttpRequestAction::Deny(d) => {
                txn.term = *b"PR";
                txn.flags.denied = true;
                // As HAProxy 2.6: the client connection stays open for its next request (a
                // rate-limited client keeps its connection), unless the answer says close
                // (an `errorfile` may).
                let (resp, keep) = match &d.reply {
                    Some(r) => (self.reply_bytes(p, head, txn, r, false), true),
                    None => self.error_page(txn, d.status, true),
                };
                self.local_response(head, txn, &resp, d.status, keep).await
            }
            HttpRequestAction::SilentDrop => {
                txn.term = *b"PR";
                txn.flags.denied = true;
                self.silent_drop();
                None
            }
            HttpRequestAction::Return(reply) => {
                let bytes = self.reply_bytes(p, head, txn, reply, false);
                // Answered locally: logged `LR` as HAProxy does (`CD` if the client is gone).
                txn.term = *b"LR";
                self.local_response(head, txn, &bytes, reply.status, true)
                    .await
            }
            HttpRequestAction::Redirect(rd) => self.redirect_response(p, head, txn, rd).await,
            HttpRequestAction::Auth { realm } => {
                // HAProxy's 401: its page, the realm last; logged `LR`, counted as
                // intercepted; the connection stays open for the retry with credentials.
                // A proxied request under `option http-use-proxy-header`: HAProxy's 407.
                let proxied = self.proxied(head);
                let (status, body, field): (u16, &[u8], _) = if proxied {
                    (
                        407,
                        b"<html><body><h1>407 Unauthorized</h1>\nYou need a valid user and \
                          password to access this content.\n</body></html>\n",
                        "proxy-authenticate",
                    )
                } else {
                    (
                        401,
                        b"<html><body><h1>401 Unauthorized</h1>\nYou need a valid user and \
                          password to access this content.\n</body></html>\n",
                        "www-authenticate",
                    )
                };
                let reply = crate::config::Reply {
                    status,
                    content_type: Some("text/html".into()),
                    body: body.to_vec(),
                    headers: vec![
                        ("cache-control".into(), "no-cache".into()),
                        (
                            field.into(),
                            format!("Basic realm=\"{}\"", realm.as_deref().unwrap_or(&p.name)),
                        ),
                    ],
                    formats: None,
                    raw: None,
                };
                txn.term = *b"LR";
                txn.flags.intercepted = true;
                let bytes = reply.render(head.is_head, false);
                self.local_response(head, txn, &bytes, status, true).await
            }
            HttpRequestAction::Lua(_) => {
                txn.term = *b"PR";
                match txn.lua_end.take() {
                    Some(crate::lua::End::Reply(r)) => {
                        txn.flags.intercepted = true;
                        let bytes = r.render(head.is_head, false);
                        let next = self.local_response(head, txn, &bytes, r.status, true).await;
                        txn.term = *b"--";
                        next
                    }
                    // The proxy's error pages, as for `deny`: the connection stays open after
                    // a 403 unless the page says close; a 500 or 503 closes it.
                    Some(
                        end @ (crate::lua::End::Deny
                        | crate::lua::End::Error
                        | crate::lua::End::Abort),
                    ) => {
                        let status = match end {
                            crate::lua::End::Deny => {
                                txn.flags.denied = true;
                                403
                            }
                            crate::lua::End::Error => 500,
                            _ => 503,
                        };
                        if status != 403 {
                            txn.term = *b"PI";
                        }
                        let (resp, keep) = self.error_page(txn, status, status == 403);
                        self.local_response(head, txn, &resp, status, keep).await
                    }
                    // `txn:done()` without a reply, `act.ABORT`: closed without an answer.
                    Some(crate::lua::End::Close) | None => {
                        txn.flags.denied = true;
                        None
                    }
                }
            }
            HttpRequestAction::UseService(Service::Lua(name)) => {
                txn.flags.intercepted = true;
                // The service reads the body (`applet:receive()`): it is received first.
                if !self.buffer_body(head).await {
                    return self.error_response(head, txn, 408, *b"cR").await;
                }
                let uri = head.uri.of(&self.cbuf).to_vec();
                let method = head.method.of(&self.cbuf).to_vec();
                let src = self.ctx.peer.map(|a| a.ip());
                let answer = {
                    let view = self.proxy_view(p, head, src);
                    let body = view.body().map(|(b, _)| b.to_vec()).unwrap_or_default();
                    let req = crate::lua::ServiceRequest {
                        method: &method,
                        uri: &uri,
                        version: if head.version_minor == 0 {
                            "HTTP/1.0"
                        } else {
                            "HTTP/1.1"
                        },
                        body: &body,
                    };
                    crate::lua::run_service(name, &req, &view)
                };
                match answer {
                    Some(reply) => {
                        let bytes = reply.render(head.is_head, false);
                        self.local_response(head, txn, &bytes, reply.status, true)
                            .await
                    }
                    None => {
                        txn.term = *b"PI";
                        let (resp, keep) = self.error_page(txn, 500, false);
                        self.local_response(head, txn, &resp, 500, keep).await
                    }
                }
            }
            HttpRequestAction::UseService(Service::PrometheusExporter) => {
                // Answered here like the stats page: rendering reads relaxed atomics only.
                txn.flags.intercepted = true;
                let uri = head.uri.of(&self.cbuf);
                let query = memchr::memchr(b'?', uri).map_or(&b""[..], |i| &uri[i + 1..]);
                let (status, resp) =
                    crate::prometheus::response(self.ctx.shared(), query, head.is_head);
                self.local_response(head, txn, &resp, status, true).await
            }
            HttpRequestAction::Header(_)
            | HttpRequestAction::Rewrite(_)
            | HttpRequestAction::Stick(_)
            | HttpRequestAction::SetVar(_)
            | HttpRequestAction::SetLogLevel(_)
            | HttpRequestAction::CacheUse(_)
            | HttpRequestAction::Capture(_)
            | HttpRequestAction::SendSpoeGroup(_)
            | HttpRequestAction::Allow
            | HttpRequestAction::PatEdit(_) => {
                unreachable!("header edits, target rewrites and stick actions are applied in place")
            }
        }
    }

    /// Sends the request to a server of `be_idx` and relays the response.
    async fn forward(&mut self, head: &RequestHead, txn: &mut Txn, be_idx: usize) -> Option<Next> {
        let ctx = self.ctx;
        let shared = ctx.shared();
        let bp = &shared.cfg.proxies[be_idx];
        let src = self.ctx.peer.map(|a| a.ip());
        let mode = effective_mode(self.fe, bp);
        let client_ka =
            !head.conn_close && mode != HttpConnMode::Close && !self.ctx.w.stopping.get();
        let server_ka = mode == HttpConnMode::KeepAlive && !head.upgrade && !head.is_connect;

        // Pick a server (may queue).
        let hdr_val = match &bp.balance {
            crate::config::Balance::Hdr { name, .. } => self
                .hdrs
                .first(&self.cbuf, name.as_bytes())
                .map(|v| v.to_vec()),
            _ => None,
        };
        // Only hashing algorithms look at the URI; copy it only for them.
        let uri_owned = match &bp.balance {
            crate::config::Balance::Uri { .. } | crate::config::Balance::UrlParam { .. } => {
                self.hdrs.target(&self.cbuf, head).to_vec()
            }
            _ => Vec::new(),
        };
        if let Some(ck) = &bp.cookie {
            self.read_cookie(ck, head, txn, be_idx);
        }
        // `option prefer-last-server`: the server this connection's previous request used,
        // while usable with room (not for hashing algorithms, which already stick).
        let last = self
            .last_server
            .filter(|&(b, _)| bp.options.prefer_last_server && b == be_idx)
            .filter(|_| !bp.balance.hashes_request())
            .map(|(_, s)| s)
            .filter(|&s| {
                let st = shared.server(be_idx, s);
                let m = st.eff_maxconn();
                st.usable() && (m == 0 || st.served.load(Relaxed) < m)
            });
        // `stick match` / `stick on`: the server a stick table remembers for this request.
        let stuck = if bp.sticks.is_empty() {
            None
        } else {
            super::stick_match(shared, be_idx, &self.proxy_view(bp, head, src))
        };
        let input = PickInput {
            src,
            uri: &uri_owned,
            hdr: hdr_val.as_deref(),
            persist: txn.cookie.server.or(stuck).or(last),
        };
        // `option abortonclose`: a client that closes while its request waits for a server
        // slot or a connection gives up the request (HAProxy's CQ / CC).
        // A stream of an HTTP/2 connection closes its side only when the client resets it
        // (never a half-close): it always abandons the request then.
        let abort = bp.options.abortonclose || self.ctx.h2_line.is_some();
        let room = self.bufsize;
        let acquired = if abort {
            tokio::select! {
                r = backend::acquire(shared, be_idx, &input, None) => r,
                _ = client_closed(&mut self.client, &mut self.cbuf, room) => {
                    txn.term = *b"CQ";
                    return None;
                }
            }
        } else {
            backend::acquire(shared, be_idx, &input, None).await
        };
        let slot = match acquired {
            Ok(s) => s,
            Err(e) => {
                let ce = ConnectError::Pick(e);
                return self.error_response(head, txn, 503, ce.term()).await;
            }
        };
        txn.timings.queue = Some(slot.queued);
        // A server connection: this client's private one (`http-reuse never`), an idle one
        // from the thread's pool as `http-reuse` allows, or a new one.
        // A server sent the client's address in a PROXY header (`send-proxy*`), or reached on
        // the port the client connected to (port mapping): its connections belong to that
        // client and stay private to it, as under `never`.
        let reuse = if shared.server(be_idx, slot.server).conf.private_conns() {
            HttpReuse::Never
        } else {
            bp.options.http_reuse
        };
        let replayable = is_idempotent(head.method.of(&self.cbuf)) && head.body == BodyKind::None;
        // Whether a failure of a reused connection before any response byte would be
        // replayed (see `Retry`): then reuse needs no liveness syscall.
        let replay_ok = replayable && bp.retries > 0;
        let min_uses = match reuse {
            HttpReuse::Never => None,
            HttpReuse::Always => Some(1),
            // Beyond HAProxy: a first request that sluice can replay itself may use a pooled
            // connection (it is replayed on a new one if the reused one fails unanswered).
            // Replayable here means idempotent, without a body, and `retries` left.
            HttpReuse::Safe if self.first && !replay_ok => None,
            HttpReuse::Safe => Some(1),
            HttpReuse::Aggressive if self.first && !replay_ok => Some(2),
            HttpReuse::Aggressive => Some(1),
        };
        let pool = &self.ctx.w.pool;
        let cur_gen = shared.server(be_idx, slot.server).addr_gen.load(Relaxed);
        // The Host header, kept only for a TLS server whose SNI comes from it (the head's
        // offsets are gone once the buffer advances past it).
        let srv_conf = &shared.server(be_idx, slot.server).conf;
        let srv_tls = srv_conf.tls.as_ref().filter(|_| srv_conf.ssl);
        let sni_varies = srv_tls.is_some_and(|t| t.sni == Some(crate::tls::SniExpr::ReqHost));
        let host: Option<Vec<u8>> = if sni_varies {
            self.hdrs.first(&self.cbuf, b"host").map(|v| v.to_vec())
        } else {
            None
        };
        // The pool key's name: `pool-conn-name` and a request-dependent SNI, computed now,
        // while the header spans still point into `cbuf` (a replay reuses it).
        let name = conn_name_hash(
            srv_conf.pool_conn_name.as_ref(),
            &self.hdrs,
            &self.cbuf,
            sni_varies.then(|| srv_tls.and_then(|t| super::server_sni(t, host.as_deref()))),
        );
        let mut got: Option<(ServerStream, u32, u32, Option<Box<str>>)> = None;
        let mut private = false;
        if let Some(k) = self.kept.take()
            && k.be == be_idx
            && k.server == slot.server
            && k.epoch == cur_gen
            && k.sni.as_deref() == srv_tls.and_then(|t| super::server_sni(t, host.as_deref()))
            && k.alive(replay_ok)
        {
            private = k.private;
            got = Some((k.stream, k.uses, k.epoch, k.sni));
        }
        if got.is_none()
            && let Some(m) = min_uses
            && let Some(c) = pool.take(
                (be_idx, slot.server, name),
                m,
                Limits::of(&shared.server(be_idx, slot.server).conf),
                &shared.server(be_idx, slot.server).pool,
                cur_gen,
                replay_ok,
            )
        {
            // The key holds the SNI's hash when it varies, so this is the SNI it was opened
            // with.
            let sni = srv_tls.and_then(|t| super::server_sni(t, host.as_deref()));
            got = Some((c.stream, c.uses, c.epoch, sni.map(Into::into)));
        }
        let (stream, sni, slot, uses, epoch, reused) = match got {
            Some((stream, uses, epoch, sni)) => {
                txn.flags.reused = true;
                (stream, sni, slot, uses, epoch, true)
            }
            None => match if abort {
                let ctx = self.ctx;
                tokio::select! {
                    r = connect_with_slot(ctx, be_idx, &input, slot, host.as_deref()) => r,
                    _ = client_closed(&mut self.client, &mut self.cbuf, room) => {
                        txn.term = *b"CC";
                        return None;
                    }
                }
            } else {
                connect_with_slot(self.ctx, be_idx, &input, slot, host.as_deref()).await
            } {
                Ok(sc) => {
                    txn.timings.connect = Some(sc.connect_time);
                    txn.retries = sc.retries;
                    txn.redispatched = sc.redispatched;
                    // (A redispatch may have gone to a server that sends a PROXY header.)
                    private = sc.slot.server_state().conf.private_conns();
                    if reuse != HttpReuse::Never && !private && sc.stream.poolable() {
                        pool.opened((be_idx, sc.slot.server, name), &sc.slot.server_state().pool);
                    }
                    txn.flags.reused = sc.reused;
                    let epoch = sc.slot.server_state().addr_gen.load(Relaxed);
                    (sc.stream, sc.sni, sc.slot, 0, epoch, sc.reused)
                }
                Err(e) => {
                    if let ConnectError::Failed {
                        retries, server, ..
                    } = e
                    {
                        txn.retries = retries;
                        txn.failed_server = Some(server);
                    }
                    return self.error_response(head, txn, e.status(), e.term()).await;
                }
            },
        };
        txn.server = Some(slot.server);
        self.last_server = Some((be_idx, slot.server));
        if !bp.sticks.is_empty() {
            super::stick_store(
                shared,
                be_idx,
                &self.proxy_view(bp, head, src),
                slot.server,
                false,
            );
        }
        self.ctx
            .w
            .session_server(self.ctx.key, Some((be_idx, slot.server)));
        if self.needs_be_src() {
            txn.be_src = stream.tcp().and_then(|s| s.local_addr().ok());
        }

        self.choose_compression(txn, bp);
        // `unique-id-header`: added after the rules, as HAProxy adds it.
        if let (Some(name), Some(id)) = (&self.fe.options.unique_id_header, &self.unique_id) {
            self.hdrs.add(name, id);
        }
        // Serialise the request head.
        self.build_request_head(head, bp, src, server_ka);
        // Coalesce the head with the body bytes already received.
        let mut req_body = BodyTracker::new(head.body, true);
        self.cbuf.advance(head.head_len);
        let initial = req_body.take(&self.cbuf);
        let initial = match initial {
            Ok(n) => n,
            Err(e) => return self.error_response_after_head(txn, e.status).await,
        };
        self.out.extend_from_slice(&self.cbuf[..initial]);
        txn.bytes_in += initial as u64;
        let poolable = stream.poolable();
        let mut conn = ServerSide {
            stream,
            sni,
            // A private connection is outside the pool's accounting, and so is a stream on
            // an HTTP/2 connection (the connection is shared, never pooled).
            guard: if private || !poolable {
                PoolGuard::new(
                    &self.ctx.w,
                    HttpReuse::Never,
                    (be_idx, slot.server, name),
                    epoch,
                )
            } else {
                PoolGuard::new(&self.ctx.w, reuse, (be_idx, slot.server, name), epoch)
            },
            slot,
            uses,
            private,
        };
        let mut reused = reused;
        // Attempts after the first (`retries` bounds them, `retry-on` says when).
        let mut again = 0;
        loop {
            let sent_at = Instant::now();
            let retry = Retry {
                allowed: replayable && again < bp.retries,
                reused,
            };
            let slot = if conn.stream.send(&self.out).await.is_err() {
                if !(reused && retry.allowed) {
                    txn.term = *b"SH";
                    return self.error_response_after_head(txn, 502).await;
                }
                conn.slot
            } else {
                let req_body = std::mem::replace(&mut req_body, BodyTracker::new(head.body, true));
                let next = self
                    .exchange(
                        head, txn, bp, conn, req_body, initial, client_ka, server_ka, sent_at,
                        retry,
                    )
                    .await;
                match self.replay.take() {
                    Some(slot) => slot,
                    None => return next,
                }
            };
            // The reused connection failed before any response byte, or `retry-on` asks for
            // another attempt: replay the request (idempotent, no body) on a new connection, so
            // a server closing an idle connection never becomes a 502 for a GET.
            again += 1;
            if reused {
                slot.server_state().pool.count_replayed(self.ctx.w.id);
            }
            slot.server_state().counters.retries.fetch_add(1, Relaxed);
            match connect_with_slot(self.ctx, be_idx, &input, slot, host.as_deref()).await {
                Ok(sc) => {
                    txn.timings.connect = Some(sc.connect_time);
                    txn.retries += 1 + sc.retries;
                    let server = sc.slot.server;
                    txn.server = Some(server);
                    if self.needs_be_src() {
                        txn.be_src = sc.stream.tcp().and_then(|s| s.local_addr().ok());
                    }
                    self.ctx
                        .w
                        .session_server(self.ctx.key, Some((be_idx, server)));
                    let epoch = sc.slot.server_state().addr_gen.load(Relaxed);
                    let private = sc.slot.server_state().conf.private_conns();
                    let reuse = if private || !sc.stream.poolable() {
                        HttpReuse::Never
                    } else {
                        reuse
                    };
                    conn = ServerSide {
                        stream: sc.stream,
                        sni: sc.sni,
                        guard: PoolGuard::new(&self.ctx.w, reuse, (be_idx, server, name), epoch),
                        slot: sc.slot,
                        uses: 0,
                        private,
                    };
                    if reuse != HttpReuse::Never && conn.stream.poolable() {
                        self.ctx
                            .w
                            .pool
                            .opened((be_idx, server, name), &conn.slot.server_state().pool);
                    }
                    reused = sc.reused;
                }
                Err(e) => {
                    txn.term = e.term();
                    return self.error_response_after_head(txn, e.status()).await;
                }
            }
        }
    }

    async fn error_response_after_head(&mut self, txn: &mut Txn, status: u16) -> Option<Next> {
        let be = txn.be.map(|b| &self.ctx.shared().cfg.proxies[b]);
        let resp = crate::errorfile::response(self.fe, be, status).into_owned();
        txn.status = status as i32;
        let resp = self.after_blob(txn, &resp).into_owned();
        txn.bytes_out = resp.len() as u64;
        if txn.term == *b"--" {
            txn.term = *b"SH";
        }
        let _ = self.client.send(&resp).await;
        // A request body may still be on its way.
        self.linger = true;
        None
    }

    /// Closes after an error answer without resetting it away. A close with client input
    /// unread sends a reset, and a reset that reaches the client before it read the answer
    /// destroys the answer in its socket (over a real network, a 413 or 414 would then show as
    /// "connection reset"). So: FIN first, then read and discard until the client closes, for
    /// at most [`LINGER_TIME`] and [`LINGER_BYTES`] (nginx's lingering close).
    async fn lingering_close(&mut self) {
        let _ = self.client.shutdown().await;
        let deadline = tokio::time::Instant::now() + LINGER_TIME;
        let mut left = LINGER_BYTES;
        loop {
            self.cbuf.clear();
            if self.cbuf.capacity() < 4096 {
                self.cbuf.reserve(self.bufsize);
            }
            match tokio::time::timeout_at(deadline, self.client.read_buf(&mut self.cbuf)).await {
                Ok(Ok(n)) if n > 0 && n < left => left -= n,
                _ => break,
            }
        }
        self.cbuf.clear();
    }

    #[allow(clippy::too_many_arguments)]
    async fn exchange(
        &mut self,
        head: &RequestHead,
        txn: &mut Txn,
        bp: &Proxy,
        conn: ServerSide,
        mut req_body: BodyTracker,
        initial: usize,
        client_ka: bool,
        server_ka: bool,
        sent_at: Instant,
        retry: Retry,
    ) -> Option<Next> {
        let ServerSide {
            mut stream,
            sni,
            slot,
            uses,
            guard,
            mut private,
        } = conn;
        let mut interim_sent = false;
        let ctx = self.ctx;
        let shared = ctx.shared();
        let srv_counters = &slot.server_state().counters;
        srv_counters
            .bytes_in
            .fetch_add(self.out.len() as u64, Relaxed);
        self.cbuf.advance(initial);
        let t_server = bp.timeouts.server;
        let t_client = self.fe.timeouts.client;
        if self.sbuf.capacity() == 0 {
            self.sbuf = self.ctx.w.take_buf(self.bufsize);
        }
        self.sbuf.clear();
        // Pump the request body while waiting for the response head (a server may answer
        // early, and `Expect: 100-continue` needs the interim response relayed).
        let resp: ResponseHead = loop {
            if !req_body.done() && !self.cbuf.is_empty() {
                let n = match req_body.take(&self.cbuf) {
                    Ok(n) => n,
                    Err(e) => {
                        txn.term = *b"CD";
                        return self.error_response_after_head(txn, e.status).await;
                    }
                };
                if n > 0 {
                    // A server that stops reading the body has `timeout server` to resume.
                    match super::with_timeout(t_server, stream.send(&self.cbuf[..n])).await {
                        Some(Ok(())) => {}
                        Some(Err(_)) => {
                            txn.term = *b"SD";
                            return self.error_response_after_head(txn, 502).await;
                        }
                        None => {
                            txn.term = *b"sD";
                            return self.error_response_after_head(txn, 504).await;
                        }
                    }
                    srv_counters.bytes_in.fetch_add(n as u64, Relaxed);
                    txn.bytes_in += n as u64;
                    self.cbuf.advance(n);
                    continue;
                }
            }
            if !self.sbuf.is_empty() {
                match parse_response(&self.sbuf, self.max_head, head.is_head, head.is_connect) {
                    Ok(Parsed::Complete(r)) => {
                        if (100..200).contains(&r.status) && r.status != 101 {
                            // Interim response: relay as is and keep waiting.
                            let n = r.head_len;
                            if self.client.send(&self.sbuf[..n]).await.is_err() {
                                txn.term = *b"CD";
                                return None;
                            }
                            interim_sent = true;
                            self.sbuf.advance(n);
                            continue;
                        }
                        break r;
                    }
                    Ok(Parsed::Partial) => {}
                    Err(HttpError { .. })
                        if retry.allowed && bp.retry_on.junk_response && !interim_sent =>
                    {
                        srv_counters.resp_errors.fetch_add(1, Relaxed);
                        self.replay = Some(slot);
                        return None;
                    }
                    Err(HttpError { .. }) => {
                        srv_counters.resp_errors.fetch_add(1, Relaxed);
                        txn.term = *b"SH";
                        return self.error_response_after_head(txn, 502).await;
                    }
                }
            }
            if self.sbuf.capacity() - self.sbuf.len() < 512 {
                self.sbuf.reserve(self.bufsize);
            }
            let want_client = !req_body.done();
            if want_client && self.cbuf.capacity() - self.cbuf.len() < 512 {
                self.cbuf.reserve(self.bufsize);
            }
            tokio::select! {
                // The client's body while it lasts; after it, only an abort (an HTTP/2
                // stream reset) is watched for: an HTTP/1 client's close may be a half-close.
                r = async {
                    if want_client {
                        Some(super::with_timeout(t_client, self.client.read_buf(&mut self.cbuf)).await)
                    } else {
                        self.client.aborted().await;
                        None
                    }
                } => match r {
                    Some(Some(Ok(n))) if n > 0 => {}
                    Some(Some(_)) | None => { txn.term = *b"CD"; return None; }
                    Some(None) => { txn.term = *b"cD"; return self.error_response_after_head(txn, 408).await; }
                },
                r = super::with_timeout(t_server, stream.read_buf(&mut self.sbuf)) => match r {
                    Some(Ok(n)) if n > 0 => {}
                    Some(_) if retry.allowed
                        && (retry.reused || bp.retry_on.empty_response)
                        && self.sbuf.is_empty()
                        && !interim_sent => {
                        // Closed (or reset) unanswered: on a reused connection, the race with
                        // the server's idle close. The caller replays the request.
                        self.replay = Some(slot);
                        return None;
                    }
                    Some(_) => {
                        srv_counters.resp_errors.fetch_add(1, Relaxed);
                        txn.term = *b"SH";
                        return self.error_response_after_head(txn, 502).await;
                    }
                    None if retry.allowed
                        && bp.retry_on.response_timeout
                        && self.sbuf.is_empty()
                        && !interim_sent => {
                        self.replay = Some(slot);
                        return None;
                    }
                    None => {
                        txn.term = *b"sH";
                        return self.error_response_after_head(txn, 504).await;
                    }
                },
            }
        };
        if head_without_its_body(&resp, self.sbuf.len()) {
            // Beyond HAProxy: a server that writes its head and its body in two sends with
            // Nagle on holds the body until the head is acknowledged, and the kernel delays
            // that ACK by up to 40 ms. Acknowledge now.
            stream.quick_ack();
        }
        if retry.allowed && bp.retry_on.status(resp.status) && !interim_sent {
            // `retry-on <status>`: this answer is dropped with its connection, and the request
            // sent again.
            self.replay = Some(slot);
            return None;
        }
        let t_resp = sent_at.elapsed();
        txn.timings.response = Some(t_resp);
        txn.status = resp.status as i32;
        txn.flags.from_server = true;

        // Response head: http-response rules (backend first, then frontend), hop-by-hop.
        self.hdrs.load(&resp.headers);
        self.rsp_minor = resp.version_minor;
        self.rsp_body = match resp.body {
            BodyKind::None => Some((resp.head_len, 0)),
            BodyKind::Length(n) => Some((resp.head_len, n)),
            _ => None,
        };
        if resp.cl_rewrite {
            self.hdrs.set_content_length(&self.sbuf, resp.cl_value);
        }
        private = private || connection_auth_challenge(resp.status, &self.hdrs, &self.sbuf);
        if bp.sticks.iter().any(|r| r.on_response) {
            // `stick store-response`: the server that answered, under a key read from its
            // response (a session cookie it sets, say), before the `http-response` rules
            // change it (HAProxy's order).
            let view = self.rsp_view(txn, resp.status, &bp.name, Some(slot.server_state()));
            super::stick_store(shared, bp_index(shared, bp), &view, slot.server, true);
        }
        if !self.fe.spoe.is_empty() || !bp.spoe.is_empty() {
            self.spoe_response(bp, txn, Some(slot.server_state()), resp.status)
                .await;
        }
        let RspRules {
            mut end,
            status: cur_status,
            reason,
            mut fill,
            ..
        } = self
            .response_rules(bp, txn, Some(slot.server_state()), resp.status)
            .await;
        if let Some(RspEnd::Drop | RspEnd::Close) = end {
            // `http-response silent-drop`: the response goes nowhere (its connection is
            // dropped on return), and the client is not told; counted and logged as HAProxy
            // does: a denied request, `PR`. A Lua `txn:done()` closes the connection.
            txn.flags.denied = true;
            txn.flags.from_server = false;
            txn.term = *b"PR";
            if matches!(end, Some(RspEnd::Drop)) {
                self.silent_drop();
            }
            return None;
        }
        // `option checkcache` judges the response as the rules left it, as HAProxy does.
        if bp.options.checkcache
            && end.is_none()
            && cacheable_cookie(cur_status, head.cacheable_method, &self.hdrs, &self.sbuf)
        {
            // Blocked as an `http-response deny` would block it, with HAProxy's alert.
            let line = format!(
                "Blocking cacheable cookie in response from instance {}, server {}.",
                bp.name,
                slot.server_state().name
            );
            crate::say!("[ALERT] ({}) : {line}", std::process::id());
            self.ctx.w.log.emit(&bp.logs, 1, &line);
            end = Some(RspEnd::Deny(&DENY_502));
        }
        if let Some(end) = end {
            // `http-response return` or `deny`: the server's response is not forwarded; its
            // connection is closed with the rest of it unread (dropped on return), and the
            // client gets the rule's answer, then a close.
            if let RspEnd::Deny(_) = end {
                // Logged `PH` with no response time, counted in `dresp`, as in HAProxy.
                srv_counters.denied_resp.fetch_add(1, Relaxed);
                txn.flags.denied_resp = true;
                txn.timings.response = None;
                txn.term = *b"PH";
            }
            txn.flags.from_server = false;
            let srv = slot.server_state();
            let mut eval = |f: &crate::config::logformat::LogFormat| {
                self.render_on_response(bp, txn, Some(srv), resp.status, f)
            };
            let (answer, status) = match end {
                RspEnd::Return(r) => (fill_reply(r, head.is_head, true, &mut eval), r.status),
                RspEnd::Owned(r) => (fill_reply(&r, head.is_head, true, &mut eval), r.status),
                RspEnd::Redirect(rd) => (response_redirect(rd, &mut eval), rd.code),
                RspEnd::Deny(d) => (self.deny_answer(d, head, txn, &mut eval), d.status),
                RspEnd::Drop | RspEnd::Close => unreachable!("handled above"),
            };
            txn.status = status.into();
            let answer = self.after_blob(txn, &answer).into_owned();
            txn.bytes_out = answer.len() as u64;
            let _ = self.client.send(&answer).await;
            self.linger = !req_body.done();
            return None;
        }
        if let Some(ck) = &bp.cookie {
            self.answer_cookie(ck, txn, slot.server, slot.server_state(), cur_status);
        }
        let (cur_status, reason) =
            self.after_response_rules(txn, Some(slot.server_state()), (cur_status, reason));
        let tunnel_mode = resp.switching || (head.is_connect && (200..300).contains(&resp.status));
        let status_override = (cur_status != resp.status || reason.is_some()).then(|| {
            txn.status = cur_status.into();
            let why = reason.unwrap_or_else(|| crate::http::reason_phrase(cur_status));
            format!("HTTP/1.1 {cur_status} {why}")
        });
        let mut encoder = self.start_compression(txn, bp, head, &resp, tunnel_mode);
        if tunnel_mode
            || matches!(resp.body, BodyKind::Length(n) if !fill.as_ref().is_some_and(|f| f.fits(n)))
        {
            fill = None;
        }
        let close_delim = resp.body == BodyKind::CloseDelimited && !tunnel_mode;
        // An HTTP/1.0 response with Transfer-Encoding has faulty framing (RFC 9112 §6.1): it is
        // forwarded as received, and the client is told to close, as the server closes.
        let faulty_10 = resp.version_minor == 0 && resp.body == BodyKind::Chunked;
        // During a soft stop the response says `connection: close` (as HAProxy's does), so
        // the client does not race the close with its next request.
        let client_keep = client_ka
            && !close_delim
            && !tunnel_mode
            && !faulty_10
            && req_body.done()
            && !self.ctx.w.stopping.get();
        let server_keep =
            server_ka && !resp.conn_close && !close_delim && !tunnel_mode && req_body.done();

        self.out.clear();
        let status_line = match &status_override {
            Some(l) => l.as_bytes(),
            None => crate::http::start_line(&self.sbuf[..resp.head_len]),
        };
        self.out.extend_from_slice(status_line);
        self.out.extend_from_slice(b"\r\n");
        let extra: &[&[u8]] = if tunnel_mode && resp.switching {
            &[b"connection: upgrade\r\n"]
        } else if !client_keep && head.version_minor == 1 {
            &[b"connection: close\r\n"]
        } else if client_keep && (head.version_minor == 0 || resp.version_minor == 0) {
            // An HTTP/1.0 status line means "not persistent" to any client unless it says
            // keep-alive (RFC 9112 §9.3): a 1.0 server behind us must not cost an HTTP/1.1
            // client its connection. HAProxy adds the same header.
            &[b"connection: keep-alive\r\n"]
        } else {
            &[]
        };
        // `Keep-Alive: timeout=N, max=M`: the server's idle timeout (shared by all threads'
        // pools, so that none reuses a connection the server is about to close) and how many
        // more requests this connection may carry.
        let server_ka_max = match self
            .hdrs
            .write(&self.sbuf, &mut self.out, resp.switching, extra)
        {
            Some(v) => {
                let (timeout, max) = crate::http::keep_alive_params(v);
                if let Some(t) = timeout {
                    slot.server_state().pool.learn_timeout(t, true);
                }
                max
            }
            None => None,
        };
        self.sbuf.advance(resp.head_len);

        if tunnel_mode {
            let to_client: Vec<u8> = {
                let mut v = std::mem::take(&mut self.out);
                v.extend_from_slice(&self.sbuf);
                v
            };
            self.sbuf.clear();
            let to_server = self.cbuf.split().freeze();
            let tt = bp.timeouts.tunnel;
            let t = TunnelTimeouts {
                client: tt.or(self.fe.timeouts.client),
                server: tt.or(bp.timeouts.server),
                client_fin: self.fe.timeouts.client_fin,
                server_fin: bp.timeouts.server_fin,
            };
            let end = tunnel(
                &mut self.client,
                &mut stream,
                &to_server,
                &to_client,
                t,
                self.bufsize,
                // The transaction's totals are counted when it ends.
                (&[], &[]),
            )
            .await;
            txn.bytes_out = end.down;
            // What the client sent through the tunnel counts as request bytes (`%U`, `bin`),
            // and the server's counters see both ways, as after a response body.
            txn.bytes_in += end.up;
            let sc = &slot.server_state().counters;
            sc.bytes_in.fetch_add(end.up, Relaxed);
            sc.bytes_out.fetch_add(end.down, Relaxed);
            txn.term = end.term;
            return None;
        }

        // Response body.
        let mut rsp_body = BodyTracker::new(resp.body, false);
        // The payload of a response being compressed (reused for each piece), and its
        // trailer fields, which follow the compressed body.
        let mut plain = Vec::new();
        let mut trailers = Vec::new();
        // The payload is needed apart from its framing when it is compressed or stored.
        let taken = if encoder.is_none() && fill.is_none() {
            rsp_body.take(&self.sbuf)
        } else {
            rsp_body.take_payload(&self.sbuf, &mut plain, &mut trailers)
        };
        let n = match taken {
            Ok(n) => n,
            Err(_) => {
                // Bad framing in what came with the head: nothing of the response has reached
                // the client yet, so it gets a 502, as for a bad head (HAProxy does the same).
                srv_counters.resp_errors.fetch_add(1, Relaxed);
                txn.flags.from_server = false;
                txn.term = *b"SH";
                return self.error_response_after_head(txn, 502).await;
            }
        };
        if let Some(f) = &mut fill {
            f.push(&plain);
        }
        if fill.as_ref().is_some_and(|f| !f.ok()) {
            fill = None;
        }
        match &mut encoder {
            None => self.out.extend_from_slice(&self.sbuf[..n]),
            Some(enc) => {
                enc.push(&plain, &mut self.out);
                if rsp_body.done()
                    && let Some(enc) = encoder.take()
                {
                    enc.finish(&trailers, &mut self.out);
                }
            }
        }
        self.sbuf.advance(n);
        // The last response of a connection closed right after it, with nothing unread from
        // the client: its end waits in the socket (`MSG_MORE`) for the close, which sends it
        // with the FIN in one segment. Two segments less per `Connection: close` request
        // (12 -> 10 with wrk and the bench origin). The close follows at once: no await
        // between the two. Not with unread input (a request body not read to its end): that
        // close is a reset, which would discard a response still in the socket.
        // Not under `option nolinger`, whose close is a reset that would discard it.
        let fin_follows =
            !client_keep && req_body.done() && self.cbuf.is_empty() && !self.fe.options.nolinger;
        // Written with MSG_MORE and not pushed out since.
        let mut corked = false;
        let w = if rsp_body.done() && !fin_follows {
            if self.ctx.w.active.get() > 1 {
                // A whole response in hand goes out after the other connections ready in
                // this round of the event loop have had their turn, as HAProxy's sends
                // follow its receives: the client (often one process holding many
                // connections) then reads several responses per wake-up instead of one.
                // Measured with the bench's wrk: 0.07-0.20 sleeps per request instead of
                // 0.16-0.21, and less CPU per request on the load's core.
                tokio::task::yield_now().await;
            }
            self.client.send(&self.out).await
        } else {
            // More follows (the body, or the FIN): it waits in the socket for it, unless the
            // server pauses (`push_pending` below).
            corked = true;
            self.client.write_all_more(&self.out).await
        };
        if w.is_err() {
            txn.term = *b"CD";
            return None;
        }
        txn.bytes_out = self.out.len() as u64;
        if self.fe.options.logasap {
            // `option logasap`: the line goes out now, with the head's bytes and time so far
            // (`+` marks both as lower bounds), not when the body ends.
            self.log_line(txn, true);
            txn.logged = true;
        }
        // The request body during the response (full duplex, below): bytes at the front of
        // `cbuf` taken as body but not yet written, whether a TLS record may still wait in
        // the writer, and whether the server stopped taking the body.
        let (mut pending, mut unflushed, mut body_dropped) = (0usize, false, false);
        // Only TLS keeps written bytes back (a record not yet out) until flushed.
        let flushes = matches!(stream, ServerStream::Tls(_));
        while !rsp_body.done() {
            let mut short_read = false;
            if self.sbuf.is_empty() {
                // Read straight into the connection's buffer. (Releasing it to the thread pool
                // while waiting and reading with readable() + try_read_buf() cost 17 % more
                // CPU and a 5x p99 on 64 KiB responses: bench A/B in the commit log.)
                if self.sbuf.capacity() < self.bufsize / 2 {
                    self.sbuf.reserve(self.bufsize);
                }
                let room = self.sbuf.capacity() - self.sbuf.len();
                let got = loop {
                    let body_left = !body_dropped && (pending > 0 || unflushed || !req_body.done());
                    if !body_left {
                        let read = super::with_timeout(t_server, stream.read_buf(&mut self.sbuf));
                        if !corked {
                            break read.await;
                        }
                        tokio::pin!(read);
                        // What was written with MSG_MORE waits for the server's next bytes
                        // a moment (a head sent apart from its body: the body comes one
                        // round trip later, and both leave in one segment), then goes: the
                        // kernel would hold it up to 200 ms (a streamed answer, server-sent
                        // events).
                        match std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await {
                            Poll::Ready(r) => break r,
                            Poll::Pending => {
                                tokio::select! {
                                    biased;
                                    r = &mut read => break r,
                                    _ = tokio::time::sleep(CORK_GRACE) => {}
                                }
                                self.client.push_pending();
                                corked = false;
                                break read.await;
                            }
                        }
                    }
                    // Full duplex: the request body still flows while the response does (a
                    // server may answer before reading all of it; gRPC and other streaming
                    // APIs answer each piece as it comes). Whichever way is ready goes, so a
                    // server that stops reading the body cannot hold its own answer back.
                    // The client is not timed out on its own here: it is receiving, and
                    // `timeout server` bounds a silence of both.
                    if pending == 0 && !unflushed && self.cbuf.capacity() - self.cbuf.len() < 512 {
                        self.cbuf.reserve(self.bufsize);
                    }
                    if std::mem::take(&mut corked) {
                        self.client.push_pending();
                    }
                    let (mut rd, mut wr) = tokio::io::split(&mut stream);
                    if pending > 0 {
                        tokio::select! {
                            r = super::with_timeout(t_server, rd.read_buf(&mut self.sbuf)) => break r,
                            r = wr.write(&self.cbuf[..pending]) => match r {
                                Ok(n) if n > 0 => {
                                    srv_counters.bytes_in.fetch_add(n as u64, Relaxed);
                                    txn.bytes_in += n as u64;
                                    self.cbuf.advance(n);
                                    pending -= n;
                                    unflushed = flushes;
                                }
                                // The server takes no more of it (it answered, and closed its
                                // reading side): its answer still goes to the client.
                                _ => body_dropped = true,
                            },
                        }
                    } else if unflushed {
                        tokio::select! {
                            r = super::with_timeout(t_server, rd.read_buf(&mut self.sbuf)) => break r,
                            r = wr.flush() => match r {
                                Ok(()) => unflushed = false,
                                Err(_) => body_dropped = true,
                            },
                        }
                    } else {
                        tokio::select! {
                            r = super::with_timeout(t_server, rd.read_buf(&mut self.sbuf)) => break r,
                            r = self.client.read_buf(&mut self.cbuf) => {
                                if !matches!(r, Ok(n) if n > 0) {
                                    // Gone (or half-closed) before the end of its body.
                                    txn.term = *b"CD";
                                    return None;
                                }
                                match req_body.take(&self.cbuf) {
                                    Ok(n) => pending = n,
                                    Err(_) => {
                                        txn.term = *b"CD";
                                        return None;
                                    }
                                }
                            }
                        }
                    }
                };
                let got = match got {
                    Some(Ok(n)) => Some(Ok(n)),
                    Some(Err(_)) => Some(Err(())),
                    None => None,
                };
                short_read = matches!(got, Some(Ok(n)) if n > 0 && n < room);
                match got {
                    Some(Ok(n)) if n > 0 => {}
                    Some(Ok(_)) if rsp_body.kind == BodyKind::CloseDelimited => break,
                    Some(_) => {
                        txn.term = *b"SD";
                        return None;
                    }
                    None => {
                        txn.term = *b"sD";
                        return None;
                    }
                }
            }
            plain.clear();
            let taken = if encoder.is_none() && fill.is_none() {
                rsp_body.take(&self.sbuf)
            } else {
                rsp_body.take_payload(&self.sbuf, &mut plain, &mut trailers)
            };
            let n = match taken {
                Ok(n) => n,
                Err(_) => {
                    txn.term = *b"SD";
                    return None;
                }
            };
            if short_read && !rsp_body.done() && rsp_body.kind != BodyKind::CloseDelimited {
                // The read drained the socket and the body is unfinished: the rest may be
                // waiting for our ACK (the server's send buffer full, or its Nagle holding
                // the tail until what precedes it is acknowledged). Measured: 1 % of 64 KiB
                // responses from nginx waited 40 ms for their last 4 KiB.
                stream.quick_ack();
            }
            if let Some(f) = &mut fill {
                f.push(&plain);
            }
            if fill.as_ref().is_some_and(|f| !f.ok()) {
                fill = None;
            }
            let piece = match &mut encoder {
                None => &self.sbuf[..n],
                Some(enc) => {
                    self.out.clear();
                    enc.push(&plain, &mut self.out);
                    if rsp_body.done()
                        && let Some(enc) = encoder.take()
                    {
                        enc.finish(&trailers, &mut self.out);
                    }
                    &self.out[..]
                }
            };
            let sent = piece.len();
            let w = if rsp_body.done() && !fin_follows {
                super::with_timeout(t_client, self.client.send(piece)).await
            } else {
                corked = true;
                super::with_timeout(t_client, self.client.write_all_more(piece)).await
            };
            match w {
                Some(Ok(())) => {}
                Some(Err(_)) => {
                    txn.term = *b"CD";
                    return None;
                }
                None => {
                    txn.term = *b"cD";
                    return None;
                }
            }
            txn.bytes_out += sent as u64;
            self.sbuf.advance(n);
        }
        if let Some(f) = fill {
            f.finish(crate::backend::unix_now() as i64);
        }
        if !req_body.done() {
            // Answered before the end of the request body: the connection closes (its head
            // said so), lingering so that the unread rest cannot turn the close into a reset
            // that discards the response.
            self.linger = true;
        }
        slot.server_state()
            .counters
            .bytes_out
            .fetch_add(txn.bytes_out, Relaxed);
        // Release the server slot now (the transaction is over), keep the connection.
        let (be, server) = (bp_index(shared, bp), slot.server);
        drop(slot);
        if server_keep && self.sbuf.is_empty() && server_ka_max != Some(0) {
            if guard.w.is_some() && !private {
                guard.keep(stream, uses + 1);
            } else {
                // (An armed guard dropped here takes the connection out of the pool's count.)
                self.kept = Some(Kept {
                    be,
                    server,
                    stream,
                    sni,
                    uses: uses + 1,
                    epoch: guard.epoch,
                    private,
                });
            }
        }
        if client_keep {
            Some(Next::KeepAlive)
        } else {
            None
        }
    }

    /// `http-after-response` rules of the backend (once one is chosen), then of the
    /// frontend, on the response head in `self.hdrs` (spans into `self.sbuf`): header edits
    /// are applied; `set-status` changes the returned status and reason.
    fn after_response_rules<'r>(
        &mut self,
        txn: &Txn,
        srv: Option<&crate::backend::ServerState>,
        status: (u16, Option<&'r str>),
    ) -> (u16, Option<&'r str>)
    where
        'a: 'r,
    {
        let shared: &'a crate::backend::Shared = self.ctx.shared();
        let be = txn
            .be
            .map(|b| &shared.cfg.proxies[b])
            .filter(|b| !std::ptr::eq(*b, self.fe));
        // Samples see the backend once there is one (`be_name`), whichever proxy's rule.
        let seen: &Proxy = txn.be.map_or(self.fe, |b| &shared.cfg.proxies[b]);
        let (mut status, mut reason) = status;
        for p in be.into_iter().chain(std::iter::once(self.fe)) {
            for rule in &p.http_after_response {
                let view = self.rsp_view(txn, status, &seen.name, srv);
                if !rule.cond.as_ref().is_none_or(|c| c.eval(&view)) {
                    continue;
                }
                match &rule.action {
                    HttpResponseAction::Allow => break,
                    HttpResponseAction::SetStatus {
                        status: s,
                        reason: r,
                    } => {
                        status = *s;
                        reason = r.as_deref();
                    }
                    HttpResponseAction::SetVar(a) => a.run(&view),
                    HttpResponseAction::Header(a) => match a.value() {
                        Some(LfValue::Fmt { format, .. }) => {
                            let v = self.render_on_response(seen, txn, srv, status, format);
                            self.hdrs.apply_value(&self.sbuf, a, &v);
                        }
                        _ => self.hdrs.apply(&self.sbuf, a),
                    },
                    // The parser allows no other action here.
                    _ => {}
                }
            }
        }
        (status, reason)
    }

    /// A response sluice made (an error page, a redirect, a `return`...) as the client gets
    /// it: through the `http-after-response` rules when the proxies have some (the blob is
    /// parsed, edited and re-written), else untouched.
    fn after_blob<'b>(&mut self, txn: &mut Txn, resp: &'b [u8]) -> std::borrow::Cow<'b, [u8]> {
        use std::borrow::Cow;
        let shared: &'a crate::backend::Shared = self.ctx.shared();
        let be_has = txn
            .be
            .is_some_and(|b| !shared.cfg.proxies[b].http_after_response.is_empty());
        if !be_has && self.fe.http_after_response.is_empty() {
            return Cow::Borrowed(resp);
        }
        let Ok(Parsed::Complete(rh)) = crate::http::parse_response(resp, resp.len(), true, false)
        else {
            return Cow::Borrowed(resp);
        };
        if self.sbuf.capacity() == 0 {
            self.sbuf = self.ctx.w.take_buf(self.bufsize);
        }
        // The head goes where the rules read a response head; the spans stay valid (same
        // bytes at the same offsets).
        self.sbuf.clear();
        self.sbuf.extend_from_slice(&resp[..rh.head_len]);
        self.hdrs.load(&rh.headers);
        let (status, reason) = self.after_response_rules(txn, None, (rh.status, None));
        let mut out = Vec::with_capacity(resp.len() + 64);
        if status != rh.status || reason.is_some() {
            txn.status = status.into();
            let why = reason.unwrap_or_else(|| crate::http::reason_phrase(status));
            out.extend_from_slice(format!("HTTP/1.1 {status} {why}").as_bytes());
        } else {
            out.extend_from_slice(crate::http::start_line(&self.sbuf));
        }
        out.extend_from_slice(b"\r\n");
        for (n, v) in &self.hdrs.list {
            out.extend_from_slice(n.get(&self.sbuf));
            out.extend_from_slice(b": ");
            out.extend_from_slice(v.get(&self.sbuf));
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&resp[rh.head_len..]);
        self.sbuf.clear();
        Cow::Owned(out)
    }

    /// `http-request cache-use`: the request's key (for a later `cache-store`), and the
    /// fresh object that answers it, if the request may take one. The first such rule of a
    /// transaction decides. Counted in the rule's proxy (frontend or backend counters).
    fn cache_use(&self, u: &crate::cache::Use, p: &Proxy, head: &RequestHead, txn: &mut Txn) {
        use crate::cache::{Lookup, ReqVary, key, request_policy, request_vary};
        if txn.cache.is_some() || head.version_minor == 0 {
            return;
        }
        let buf = &self.cbuf[..];
        // Without a `Host`, HAProxy makes no key: nothing is served, stored nor invalidated.
        let Some(host) = self.hdrs.first(buf, b"host") else {
            return;
        };
        let fields = || self.hdrs.list.iter().map(|(n, v)| (n.get(buf), v.get(buf)));
        let policy = request_policy(head.method.of(buf), head.version_minor, fields());
        let cache = u.get();
        let key = key(host, self.hdrs.target(buf, head));
        let vary = if cache.conf.process_vary {
            request_vary(fields())
        } else {
            ReqVary::default()
        };
        let mut hit = None;
        if policy.serve {
            let shared = self.ctx.shared();
            let idx = bp_index(shared, p);
            let counters = match &shared.proxies[idx].be {
                Some(be) if !std::ptr::eq(p, self.fe) => &be.counters,
                _ => &shared.proxies[idx].fe.counters,
            };
            counters.cache_lookups.fetch_add(1, Relaxed);
            cache.lookups.fetch_add(1, Relaxed);
            hit = cache.get(&key, &vary, crate::backend::unix_now() as i64);
            if hit.is_some() {
                counters.cache_hits.fetch_add(1, Relaxed);
                cache.hits.fetch_add(1, Relaxed);
            }
        }
        txn.cache = Some(Box::new(Lookup {
            cache: cache.clone(),
            key,
            vary,
            store: policy.store,
            hit,
        }));
    }

    /// Answers the request with the object `cache-use` found, as HAProxy's cache does: the
    /// stored head with an `Age`, through the `http-response` rules of the backend and the
    /// frontend; `304 Not Modified` to a conditional request it satisfies; no body to a
    /// HEAD. Logged with `<CACHE>` as its server.
    async fn serve_cached(
        &mut self,
        head: &RequestHead,
        txn: &mut Txn,
        be_idx: usize,
    ) -> Option<Next> {
        use std::io::Write;
        let obj = txn.cache.as_ref()?.hit.clone()?;
        txn.from_cache = true;
        let shared = self.ctx.shared();
        let bp = &shared.cfg.proxies[be_idx];
        // `compression`: what the request accepts, read while the request's head is in
        // `self.hdrs` (a copy from the cache is compressed as the server's response is).
        self.choose_compression(txn, bp);
        let buf = &self.cbuf[..];
        let fields = self.hdrs.list.iter().map(|(n, v)| (n.get(buf), v.get(buf)));
        let not_modified = crate::cache::not_modified(&obj, fields);
        let with_body = !head.is_head && !not_modified;
        let now = crate::backend::unix_now() as i64;
        // The response head goes through the server buffer, where the response rules read
        // it (it is empty between transactions).
        if self.sbuf.capacity() == 0 {
            self.sbuf = self.ctx.w.take_buf(self.bufsize);
        }
        self.sbuf.clear();
        let mut h: Vec<u8> = Vec::with_capacity(obj.status_line.len() + obj.fields.len() + 64);
        if not_modified {
            h.extend_from_slice(b"HTTP/1.1 304 Not Modified");
        } else {
            h.extend_from_slice(&obj.status_line);
        }
        h.extend_from_slice(b"\r\n");
        h.extend_from_slice(&obj.fields);
        if !obj.has_length {
            let _ = write!(h, "content-length: {}\r\n", obj.body.len());
        }
        let _ = write!(h, "age: {}\r\n\r\n", (now - obj.born).max(0));
        self.sbuf.extend_from_slice(&h);
        let resp = match crate::http::parse_response(&self.sbuf, self.max_head, head.is_head, false)
        {
            Ok(Parsed::Complete(r)) => r,
            _ => return self.error_response(head, txn, 500, *b"PH").await,
        };
        self.rsp_minor = resp.version_minor;
        self.rsp_body = None;
        // Logged as HAProxy logs a hit: no wait, no connect, no response time, `LR`.
        txn.status = resp.status as i32;
        txn.term = *b"LR";
        txn.timings.queue = Some(Duration::ZERO);
        txn.timings.connect = Some(Duration::ZERO);
        txn.timings.response = Some(Duration::ZERO);
        self.hdrs.load(&resp.headers);
        let RspRules {
            end,
            status,
            reason,
            ..
        } = self.response_rules(bp, txn, None, resp.status).await;
        self.cbuf.advance(head.head_len);
        let body_left = !matches!(head.body, BodyKind::None | BodyKind::Length(0));
        let keep = !head.conn_close
            && effective_mode(self.fe, bp) != HttpConnMode::Close
            && !self.ctx.w.stopping.get()
            && !body_left;
        if let Some(end) = end {
            let denied = matches!(end, RspEnd::Deny(_));
            let mut eval = |f: &crate::config::logformat::LogFormat| {
                self.render_on_response(bp, txn, None, resp.status, f)
            };
            let (answer, status) = match end {
                RspEnd::Return(r) => (fill_reply(r, head.is_head, true, &mut eval), r.status),
                RspEnd::Owned(r) => (fill_reply(&r, head.is_head, true, &mut eval), r.status),
                RspEnd::Redirect(rd) => (response_redirect(rd, &mut eval), rd.code),
                RspEnd::Deny(d) => (self.deny_answer(d, head, txn, &mut eval), d.status),
                RspEnd::Drop | RspEnd::Close => {
                    txn.flags.denied = true;
                    txn.term = *b"PR";
                    if matches!(end, RspEnd::Drop) {
                        self.silent_drop();
                    }
                    return None;
                }
            };
            if denied {
                txn.flags.denied_resp = true;
                txn.term = *b"PH";
            }
            txn.status = status.into();
            let answer = self.after_blob(txn, &answer).into_owned();
            txn.bytes_out = answer.len() as u64;
            let _ = self.client.send(&answer).await;
            self.linger = body_left;
            return None;
        }
        let (status, reason) = self.after_response_rules(txn, None, (status, reason));
        let encoder = if with_body {
            self.start_compression(txn, bp, head, &resp, false)
        } else {
            None
        };
        self.out.clear();
        if status != resp.status || reason.is_some() {
            txn.status = status.into();
            let why = reason.unwrap_or_else(|| crate::http::reason_phrase(status));
            let _ = write!(self.out, "HTTP/1.1 {status} {why}");
        } else {
            self.out
                .extend_from_slice(crate::http::start_line(&self.sbuf[..resp.head_len]));
        }
        self.out.extend_from_slice(b"\r\n");
        let extra: &[&[u8]] = if !keep && head.version_minor == 1 {
            &[b"connection: close\r\n"]
        } else {
            &[]
        };
        self.hdrs.write(&self.sbuf, &mut self.out, false, extra);
        self.sbuf.clear();
        // A small body goes with the head in one write; a large one is written from the
        // object itself (no copy into the connection's output buffer, which stays small).
        let compressed;
        let body: &[u8] = match encoder {
            Some(mut enc) => {
                let mut b = Vec::new();
                enc.push(&obj.body, &mut b);
                enc.finish(&[], &mut b);
                compressed = b;
                &compressed
            }
            None if with_body => &obj.body,
            None => &[],
        };
        txn.bytes_out = (self.out.len() + body.len()) as u64;
        let sent = if body.len() <= 16 * 1024 {
            self.out.extend_from_slice(body);
            self.client.send(&self.out).await
        } else {
            match self.client.write_all_more(&self.out).await {
                Ok(()) => self.client.send(body).await,
                Err(e) => Err(e),
            }
        };
        if sent.is_err() {
            txn.term = *b"CD";
            return None;
        }
        // A request body left unread: the close lingers, so that no reset discards the
        // answer.
        self.linger = body_left;
        keep.then_some(Next::KeepAlive)
    }

    /// The `http-response` rules of the backend, then of the frontend, on the response head
    /// in `self.hdrs` (from a server, `srv`, or from the cache): header edits are applied;
    /// what ended the evaluation, the status the client gets, and the storing of the
    /// response (`cache-store`) are returned.
    async fn response_rules<'p>(
        &mut self,
        bp: &'p Proxy,
        txn: &mut Txn,
        srv: Option<&crate::backend::ServerState>,
        status: u16,
    ) -> RspRules<'p>
    where
        'a: 'p,
    {
        // `capture response header`: as received, before the rules.
        if !self.fe.capture_rsp.is_empty() {
            capture_headers(
                &self.fe.capture_rsp,
                &mut txn.cap_rsp,
                &self.hdrs,
                &self.sbuf,
            );
        }
        let mut out = RspRules {
            end: None,
            status,
            reason: None,
            fill: None,
            captures: Vec::new(),
        };
        // `send-spoe-group` pauses the evaluation until its agent answers.
        let mut from = (0, 0);
        while let Some((at, p, g)) = self.run_response_rules(bp, txn, srv, &mut out, from) {
            if let Some(e) = p.spoe.get(g.engine) {
                self.spoe_rsp_run(e, Err(g.group), bp, txn, srv, out.status)
                    .await;
            }
            from = at;
        }
        // `http-response capture`: into the frontend's response slots.
        let caps = &self.fe.capture_rsp;
        for (i, v) in std::mem::take(&mut out.captures) {
            let len = caps.get(i).map_or(0, |s| s.len);
            capture_into(&mut txn.cap_rsp, caps.len(), i, &v, len);
        }
        out
    }

    /// [`Self::response_rules`]' evaluation proper, from rule `from.1` of rule set `from.0`
    /// (the backend's, then the frontend's): returns where to go on from when a
    /// `send-spoe-group` rule pauses it, with that rule's proxy and group.
    #[allow(clippy::type_complexity)]
    fn run_response_rules<'p>(
        &mut self,
        bp: &'p Proxy,
        txn: &Txn,
        srv: Option<&crate::backend::ServerState>,
        out: &mut RspRules<'p>,
        from: (usize, usize),
    ) -> Option<((usize, usize), &'p Proxy, &'p crate::spoe::GroupRef)>
    where
        'a: 'p,
    {
        let rule_sets: [&'p Proxy; 2] = [bp, self.fe];
        let n_sets = if std::ptr::eq(bp, self.fe) { 1 } else { 2 };
        let cache_name = txn.cache_hit_name();
        'rules: for (si, p) in rule_sets[..n_sets].iter().enumerate().skip(from.0) {
            let first = if si == from.0 { from.1 } else { 0 };
            for (ri, rule) in p.http_response.iter().enumerate().skip(first) {
                let view = self.rsp_view(txn, out.status, &bp.name, srv);
                if !rule.cond.as_ref().is_none_or(|c| c.eval(&view)) {
                    continue;
                }
                let a = match &rule.action {
                    HttpResponseAction::Header(a) => a,
                    HttpResponseAction::Deny(d) => {
                        out.end = Some(RspEnd::Deny(d));
                        break 'rules;
                    }
                    HttpResponseAction::SilentDrop => {
                        out.end = Some(RspEnd::Drop);
                        break 'rules;
                    }
                    // `allow`: no more rules of this section.
                    HttpResponseAction::Allow => continue 'rules,
                    HttpResponseAction::SetStatus { status, reason: r } => {
                        out.status = *status;
                        out.reason = r.as_deref();
                        continue;
                    }
                    HttpResponseAction::Return(r) => {
                        out.end = Some(RspEnd::Return(r));
                        break 'rules;
                    }
                    HttpResponseAction::Redirect(rd) => {
                        out.end = Some(RspEnd::Redirect(rd));
                        break 'rules;
                    }
                    HttpResponseAction::SetVar(a) => {
                        a.run(&view);
                        continue;
                    }
                    HttpResponseAction::SetLogLevel(l) => {
                        self.log_level.set(Some(*l));
                        continue;
                    }
                    HttpResponseAction::Capture(c) => {
                        let mut v = Vec::new();
                        if c.expr.write(&view, &mut v) {
                            out.captures.push((c.slot, v.into_boxed_slice()));
                        }
                        continue;
                    }
                    HttpResponseAction::SendSpoeGroup(g) => return Some(((si, ri + 1), p, g)),
                    HttpResponseAction::Lua(la) => {
                        let eff = crate::lua::run_action(la, &view, true, Some(&txn.lua_priv));
                        for e in eff.edits {
                            match e {
                                crate::lua::Edit::Header { res: true, action } => {
                                    self.hdrs.apply(&self.sbuf, &action)
                                }
                                crate::lua::Edit::Status(code) => {
                                    out.status = code;
                                    out.reason = None;
                                }
                                _ => {}
                            }
                        }
                        match eff.end {
                            Some(crate::lua::End::Reply(r)) => {
                                out.end = Some(RspEnd::Owned(Box::new(r)));
                                break 'rules;
                            }
                            Some(crate::lua::End::Deny) => {
                                out.end = Some(RspEnd::Deny(&DENY_502));
                                break 'rules;
                            }
                            Some(crate::lua::End::Error) => {
                                out.end = Some(RspEnd::Deny(&LUA_ERROR));
                                break 'rules;
                            }
                            Some(crate::lua::End::Close | crate::lua::End::Abort) => {
                                out.end = Some(RspEnd::Close);
                                break 'rules;
                            }
                            None if eff.stop => continue 'rules,
                            None => continue,
                        }
                    }
                    HttpResponseAction::CacheStore(u) => {
                        if out.fill.is_none() && cache_name.is_none() {
                            out.fill = self.cache_store(u, txn, out.status, out.reason);
                        }
                        continue;
                    }
                    HttpResponseAction::PatEdit(e) => {
                        let render = |v: &LfValue| match v {
                            LfValue::Lit(t) => t.clone(),
                            LfValue::Fmt { format, .. } => {
                                self.render_on_response(bp, txn, srv, out.status, format)
                            }
                        };
                        let key = render(&e.key);
                        let value = render(&e.value);
                        e.apply(&key, &value);
                        continue;
                    }
                };
                match a.value() {
                    Some(LfValue::Fmt { format, .. }) => {
                        let v = self.render_on_response(bp, txn, srv, out.status, format);
                        self.hdrs.apply_value(&self.sbuf, a, &v);
                    }
                    _ => self.hdrs.apply(&self.sbuf, a),
                }
            }
        }
        None
    }

    /// `http-response cache-store`: starts storing the response if the request looked the
    /// cache up (`cache-use`) and HAProxy's cache would keep both. Its header fields are
    /// taken as they are now; the `Age` the server gave leaves the response (the object
    /// counts it, and a response from the cache says its own).
    fn cache_store(
        &mut self,
        u: &crate::cache::Use,
        txn: &Txn,
        status: u16,
        reason: Option<&str>,
    ) -> Option<crate::cache::Filling> {
        let look = txn.cache.as_deref()?;
        let cache = u.get();
        let method = &txn.method.0[..usize::from(txn.method.1)];
        if method != b"GET" {
            // A successful unsafe request makes what is stored for its URL stale (RFC 9111
            // §4.4).
            if (200..400).contains(&status) && !matches!(method, b"HEAD" | b"OPTIONS" | b"TRACE") {
                cache.invalidate(&look.key);
            }
            return None;
        }
        if !look.store {
            return None;
        }
        let buf = &self.sbuf;
        let fields = self.hdrs.list.iter().map(|(n, v)| (n.get(buf), v.get(buf)));
        let now = crate::backend::unix_now() as i64;
        let st = crate::cache::storable(&cache.conf, status, fields, &look.vary, now)?;
        let mut lines = Vec::new();
        for (n, v) in &self.hdrs.list {
            let n = n.get(buf);
            if is_hop_by_hop(n) || header_eq(n, b"transfer-encoding") || header_eq(n, b"age") {
                continue;
            }
            lines.extend_from_slice(n);
            lines.extend_from_slice(b": ");
            lines.extend_from_slice(v.get(buf));
            lines.extend_from_slice(b"\r\n");
        }
        // The status line as the rules left it (`set-status` before `cache-store`).
        let received = crate::http::start_line(buf);
        let rewritten;
        let status_line = if reason.is_some() || !status_code_is(received, status) {
            let why = reason.unwrap_or_else(|| crate::http::reason_phrase(status));
            rewritten = format!("HTTP/1.1 {status} {why}");
            rewritten.as_bytes()
        } else {
            received
        };
        let f = crate::cache::Filling::start(cache, &look.key, status_line, lines, st)?;
        self.hdrs.del(&self.sbuf, b"age");
        Some(f)
    }

    /// `compression`, request side: the algorithm the request accepts (`txn.comp`); under
    /// `compression offload`, the server is not told the client accepts any.
    fn choose_compression(&mut self, txn: &mut Txn, bp: &Proxy) {
        use crate::compression::{Effective, choose};
        txn.comp = None;
        let Some(eff) = Effective::of(bp.compression.as_ref(), self.fe.compression.as_ref()) else {
            return;
        };
        let buf = &self.cbuf;
        let accept = self
            .hdrs
            .list
            .iter()
            .filter(|(n, _)| header_eq(n.get(buf), b"accept-encoding"))
            .map(|(_, v)| v.get(buf));
        let chosen = choose(eff.algos, accept, self.hdrs.first(buf, b"user-agent"));
        if eff.offload && chosen.is_some_and(|(_, by_header)| by_header) {
            self.hdrs.del(buf, b"accept-encoding");
        }
        txn.comp = chosen.map(|(a, _)| a);
    }

    /// `compression`, response side: whether this response is compressed (HAProxy's rules,
    /// [`crate::compression::may_compress`]) and, if so, its headers edited as HAProxy edits
    /// them and the encoder for its body.
    fn start_compression(
        &mut self,
        txn: &Txn,
        bp: &Proxy,
        head: &RequestHead,
        resp: &ResponseHead,
        tunnel: bool,
    ) -> Option<crate::compression::Encoder> {
        use crate::compression::{Effective, Encoder, Response, etag_valid, may_compress};
        let algo = txn.comp?;
        let eff = Effective::of(bp.compression.as_ref(), self.fe.compression.as_ref())?;
        let buf = &self.sbuf;
        let list = &self.hdrs.list;
        let named = |name: &'static [u8]| {
            list.iter()
                .filter(move |(n, _)| header_eq(n.get(buf), name))
                .map(|(_, v)| v.get(buf))
        };
        let mut etags = named(b"etag");
        let etag_ok = match (etags.next(), etags.next()) {
            (None, _) => true,
            (Some(e), None) => etag_valid(e),
            _ => false,
        };
        let r = Response {
            status: resp.status,
            http11: head.version_minor == 1 && resp.version_minor == 1,
            head_request: head.is_head,
            // HAProxy leaves an empty body alone when its length says so (not when chunked).
            framed_body: !tunnel && matches!(resp.body, BodyKind::Length(1..) | BodyKind::Chunked),
            content_encoding: named(b"content-encoding").next().is_some(),
            no_transform: named(b"cache-control").any(|v| has_token(v, b"no-transform")),
            etag_ok,
            content_type: named(b"content-type").next(),
        };
        if !may_compress(eff.types, &r) {
            return None;
        }
        let enc = Encoder::new(algo);
        if let Some(i) = list
            .iter()
            .position(|(n, _)| header_eq(n.get(buf), b"etag"))
            && let Some(weak) = crate::compression::weaken_etag(list[i].1.get(buf))
        {
            self.hdrs.list[i].1 = Hb::Own(weak.into_boxed_slice());
        }
        self.hdrs.del(&self.sbuf, b"content-length");
        self.hdrs.del(&self.sbuf, b"transfer-encoding");
        self.hdrs.add("transfer-encoding", "chunked");
        self.hdrs.add("vary", "Accept-Encoding");
        if algo != crate::compression::Algo::Identity {
            self.hdrs.add("content-encoding", algo.token());
        }
        Some(enc)
    }

    /// Request line + edited headers + forwarding headers + connection management.
    fn build_request_head(
        &mut self,
        head: &RequestHead,
        bp: &Proxy,
        src: Option<IpAddr>,
        server_ka: bool,
    ) {
        self.out.clear();
        match &self.hdrs.uri {
            // Rewritten by a rule: the method, the new target, the version as received.
            Some(uri) => {
                self.out.extend_from_slice(head.method.of(&self.cbuf));
                self.out.push(b' ');
                self.out.extend_from_slice(uri);
                self.out.extend_from_slice(if head.version_minor == 0 {
                    b" HTTP/1.0\r\n"
                } else {
                    b" HTTP/1.1\r\n"
                });
            }
            None => {
                let line = crate::http::start_line(&self.cbuf[..head.head_len]);
                self.out.extend_from_slice(line);
                self.out.extend_from_slice(b"\r\n");
            }
        }
        let mut extra: Vec<u8> = Vec::new();
        // option forwardfor (backend setting wins, else frontend's).
        if let Some(ff) = bp
            .options
            .forwardfor
            .as_ref()
            .or(self.fe.options.forwardfor.as_ref())
            && let Some(ip) = src
        {
            let skip = ff.except.is_some_and(|n| n.contains(ip))
                || (ff.if_none && self.hdrs.has(&self.cbuf, ff.header.as_bytes()));
            if !skip {
                let ip = match ip {
                    IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
                    v4 => v4,
                };
                extra.extend_from_slice(format!("{}: {}\r\n", ff.header, ip).as_bytes());
            }
        }
        if head.upgrade {
            extra.extend_from_slice(b"connection: upgrade\r\n");
        } else if !server_ka && head.version_minor == 1 && !bp.options.http_pretend_keepalive {
            extra.extend_from_slice(b"connection: close\r\n");
        } else if server_ka && head.version_minor == 0 {
            extra.extend_from_slice(b"connection: keep-alive\r\n");
        }
        if head.cl_rewrite {
            let n = match head.body {
                BodyKind::Length(n) => Some(n),
                _ => None,
            };
            self.hdrs.set_content_length(&self.cbuf, n);
        }
        let extra_ref: [&[u8]; 1] = [&extra];
        self.hdrs
            .write(&self.cbuf, &mut self.out, head.upgrade, &extra_ref);
    }
}

fn bp_index(shared: &crate::backend::Shared, bp: &Proxy) -> usize {
    shared
        .cfg
        .proxies
        .iter()
        .position(|p| std::ptr::eq(p, bp))
        .unwrap_or(0)
}

/// HTTP connection mode of a transaction: the stricter of frontend and backend.
/// A reply's bytes, its log-format parts (if any) evaluated by `eval`.
/// The answer of `http-response redirect location TARGET`: the target's format is evaluated
/// on the response; the connection closes after it, as after `http-response return`.
fn response_redirect(
    rd: &Redirect,
    eval: &mut dyn FnMut(&crate::config::logformat::LogFormat) -> String,
) -> Vec<u8> {
    let loc = match &rd.target {
        LfValue::Lit(t) => t.clone(),
        LfValue::Fmt { format, .. } => eval(format),
    };
    format!(
        "HTTP/1.1 {} {}\r\ncontent-length: 0\r\nlocation: {loc}\r\ncache-control: no-cache\r\n\
         connection: close\r\n\r\n",
        rd.code,
        crate::http::reason_phrase(rd.code)
    )
    .into_bytes()
}

fn fill_reply(
    r: &crate::config::Reply,
    head_request: bool,
    close: bool,
    eval: &mut dyn FnMut(&crate::config::logformat::LogFormat) -> String,
) -> Vec<u8> {
    let Some(f) = &r.formats else {
        return r.render(head_request, close);
    };
    let mut value = |v: &LfValue| match v {
        LfValue::Lit(t) => t.clone(),
        LfValue::Fmt { format, .. } => eval(format),
    };
    let mut r = r.clone();
    if let Some(b) = &f.body {
        r.body = value(b).into_bytes();
    }
    for (i, v) in &f.headers {
        r.headers[*i].1 = value(v);
    }
    r.render(head_request, close)
}

fn effective_mode(fe: &Proxy, be: &Proxy) -> HttpConnMode {
    use HttpConnMode::*;
    match (fe.options.http_conn_mode, be.options.http_conn_mode) {
        (Close, _) | (_, Close) => Close,
        (ServerClose, _) | (_, ServerClose) => ServerClose,
        _ => KeepAlive,
    }
}

fn redirect_location(
    rd: &Redirect,
    target: &str,
    buf: &[u8],
    head: &RequestHead,
    hdrs: &Headers,
) -> String {
    let uri = hdrs.target(buf, head);
    let path_q = {
        let p = crate::http::path_of(uri);
        let start = p.as_ptr() as usize - uri.as_ptr() as usize;
        &uri[start..]
    };
    let mut rest: Vec<u8> = path_q.to_vec();
    if rd.drop_query
        && let Some(q) = rest.iter().position(|&c| c == b'?')
    {
        rest.truncate(q);
    }
    if rd.append_slash && !rest.ends_with(b"/") && !rest.contains(&b'?') {
        rest.push(b'/');
    }
    let rest = String::from_utf8_lossy(&rest);
    match rd.kind {
        RedirectKind::Location => target.to_string(),
        RedirectKind::Prefix => {
            let t = target.trim_end_matches('/');
            format!("{t}{rest}")
        }
        RedirectKind::Scheme => {
            let host = hdrs
                .first(buf, b"host")
                .map(|h| String::from_utf8_lossy(h).into_owned())
                .unwrap_or_default();
            format!("{target}://{host}{rest}")
        }
    }
}

/// Tracks where a message body ends while its bytes stream through a buffer.
struct BodyTracker {
    kind: BodyKind,
    remaining: u64,
    chunked: Option<ChunkedState>,
    finished: bool,
}

impl BodyTracker {
    /// `request`: a client's body, whose chunked framing must end its lines with CRLF.
    fn new(kind: BodyKind, request: bool) -> BodyTracker {
        let (remaining, finished) = match kind {
            BodyKind::None => (0, true),
            BodyKind::Length(n) => (n, n == 0),
            BodyKind::Chunked | BodyKind::CloseDelimited => (0, false),
        };
        BodyTracker {
            kind,
            remaining,
            chunked: (kind == BodyKind::Chunked).then(|| {
                if request {
                    ChunkedState::for_request()
                } else {
                    ChunkedState::new()
                }
            }),
            finished,
        }
    }

    fn done(&self) -> bool {
        self.finished
    }

    /// How many bytes at the front of `data` belong to the body.
    fn take(&mut self, data: &[u8]) -> Result<usize, HttpError> {
        self.take_with(data, |_| {}, |_| {})
    }

    /// [`take`](Self::take), appending the payload those bytes carry (without chunked
    /// framing) to `payload`, and trailer field lines to `trailers`.
    fn take_payload(
        &mut self,
        data: &[u8],
        payload: &mut Vec<u8>,
        trailers: &mut Vec<u8>,
    ) -> Result<usize, HttpError> {
        self.take_with(
            data,
            |p| payload.extend_from_slice(p),
            |t| trailers.extend_from_slice(t),
        )
    }

    fn take_with(
        &mut self,
        data: &[u8],
        mut on_data: impl FnMut(&[u8]),
        on_trailer: impl FnMut(&[u8]),
    ) -> Result<usize, HttpError> {
        if self.finished {
            return Ok(0);
        }
        match self.kind {
            BodyKind::None => Ok(0),
            BodyKind::Length(_) => {
                let n = (data.len() as u64).min(self.remaining) as usize;
                self.remaining -= n as u64;
                self.finished = self.remaining == 0;
                on_data(&data[..n]);
                Ok(n)
            }
            BodyKind::Chunked => {
                let st = self.chunked.as_mut().expect("chunked state");
                let (n, done) = st.feed_parts(data, on_data, on_trailer)?;
                self.finished = done;
                Ok(n)
            }
            BodyKind::CloseDelimited => {
                on_data(data);
                Ok(data.len())
            }
        }
    }
}
