//! Request and response head parsing (`httparse` + the framing rules of RFC 9112 §6, with
//! HAProxy's strictness).
//!
//! # Requests (errors carry the status HAProxy answers)
//!
//! | condition | status |
//! |---|---|
//! | invalid method / request-target byte (CTL, SP, non-ASCII, `#`), HTTP/0.9, version other than `HTTP/1.0` / `HTTP/1.1` | 400 |
//! | request-target form not allowed for the method (`*` except OPTIONS / unknown methods, CONNECT without `host:port`, `GET foo`) | 400 |
//! | invalid header name byte, whitespace before the colon, obs-fold, bare CR, NUL/CTL in a value | 400 |
//! | more than [`MAX_HEADERS`] header fields | 400 |
//! | `Content-Length` not a list of identical decimal numbers (sign, spaces, hex, overflow, empty element) or repeated with different values | 400 |
//! | `Content-Length` and `Transfer-Encoding` both present (never guessed: smuggling) | 400 |
//! | `Transfer-Encoding` in an HTTP/1.0 request, empty/malformed, `chunked` twice or not last | 400 |
//! | `Transfer-Encoding` ending in `chunked` but with another coding (`gzip, chunked`) | 501 |
//! | CONNECT with a body (`Content-Length` > 0 or `Transfer-Encoding`) | 400 |
//! | several `Host` headers with different values | 400 |
//! | absolute-form request-target whose authority differs from `Host` | 400 |
//! | `Connection: upgrade` + `Upgrade: websocket` without `Sec-WebSocket-Key` (HTTP/1.1) | 400 |
//! | head incomplete within `max_head` bytes, request line not complete | 414 |
//! | head incomplete within `max_head` bytes, request line complete | 431 |
//!
//! Bare-LF line endings and leading empty lines are accepted (as HAProxy does).
//!
//! # Responses
//!
//! Every error is a 502. Framing follows RFC 9112 §6.3; see [`parse_response`].

use std::mem::MaybeUninit;

use super::util::{
    header_eq, is_token, list_elements, path_of, scheme_prefix_len, skip_leading_newlines, trim_ows,
};
use super::{BodyKind, HeaderSpan, HttpError, Parsed, RequestHead, ResponseHead, Span};

/// Maximum number of header fields in a head (HAProxy's default `tune.http.maxhdr`).
pub const MAX_HEADERS: usize = 101;

const fn err(status: u16, reason: &'static str) -> HttpError {
    HttpError { status, reason }
}

/// Which header fields the framing logic looks at.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Special {
    Other,
    ContentLength,
    TransferEncoding,
    Connection,
    Upgrade,
    Expect,
    Host,
    WebSocketKey,
}

#[inline]
fn classify(name: &[u8]) -> Special {
    // Cheap pre-filter on (length, lower-cased first byte) before the full comparison.
    let Some(&first) = name.first() else {
        return Special::Other;
    };
    match (name.len(), first | 0x20) {
        (4, b'h') if header_eq(name, b"host") => Special::Host,
        (6, b'e') if header_eq(name, b"expect") => Special::Expect,
        (7, b'u') if header_eq(name, b"upgrade") => Special::Upgrade,
        (10, b'c') if header_eq(name, b"connection") => Special::Connection,
        (14, b'c') if header_eq(name, b"content-length") => Special::ContentLength,
        (17, b't') if header_eq(name, b"transfer-encoding") => Special::TransferEncoding,
        (17, b's') if header_eq(name, b"sec-websocket-key") => Special::WebSocketKey,
        _ => Special::Other,
    }
}

/// Merges one `Content-Length` field value into `cl`. The value must be a comma-separated list
/// of decimal numbers (leading zeros allowed), all equal to each other and to any earlier value.
fn merge_content_length(value: &[u8], cl: &mut Option<u64>) -> Result<(), &'static str> {
    if value.is_empty() {
        return Err("empty content-length");
    }
    for elem in value.split(|&b| b == b',') {
        let digits = trim_ows(elem);
        if digits.is_empty() {
            return Err("empty content-length element");
        }
        let mut n: u64 = 0;
        for &b in digits {
            if !b.is_ascii_digit() {
                return Err("invalid content-length");
            }
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_add(u64::from(b - b'0')))
                .ok_or("content-length overflow")?;
        }
        match *cl {
            Some(prev) if prev != n => return Err("conflicting content-length"),
            _ => *cl = Some(n),
        }
    }
    Ok(())
}

/// What the `Transfer-Encoding` fields of a message say, merged in order.
#[derive(Default, Clone, Copy)]
struct TransferEncoding {
    present: bool,
    /// `chunked` appeared at least once.
    chunked_seen: bool,
    /// The last coding seen is `chunked`.
    chunked_last: bool,
    /// A coding other than `chunked` appeared.
    other: bool,
}

impl TransferEncoding {
    /// Merges one `Transfer-Encoding` field value. Errors are syntax errors (empty value or
    /// element, non-token coding, `chunked` with parameters, `chunked` applied twice).
    fn merge(&mut self, value: &[u8]) -> Result<(), &'static str> {
        self.present = true;
        if value.is_empty() {
            return Err("empty transfer-encoding");
        }
        for elem in value.split(|&b| b == b',') {
            let elem = trim_ows(elem);
            if elem.is_empty() {
                return Err("empty transfer-coding");
            }
            // transfer-coding = token *( OWS ";" OWS transfer-parameter )
            let (coding, params) = match memchr::memchr(b';', elem) {
                Some(i) => (trim_ows(&elem[..i]), true),
                None => (elem, false),
            };
            if !is_token(coding) {
                return Err("malformed transfer-encoding");
            }
            if header_eq(coding, b"chunked") {
                if params {
                    return Err("chunked transfer-coding with parameters");
                }
                if self.chunked_seen {
                    return Err("chunked transfer-coding applied twice");
                }
                self.chunked_seen = true;
                self.chunked_last = true;
            } else {
                self.chunked_last = false;
                self.other = true;
            }
        }
        Ok(())
    }
}

/// Flags from the `Connection` header fields.
#[derive(Default, Clone, Copy)]
struct ConnectionTokens {
    close: bool,
    keep_alive: bool,
    upgrade: bool,
}

impl ConnectionTokens {
    #[inline]
    fn merge(&mut self, value: &[u8]) {
        for tok in list_elements(value) {
            match tok.len() {
                5 if header_eq(tok, b"close") => self.close = true,
                7 if header_eq(tok, b"upgrade") => self.upgrade = true,
                10 if header_eq(tok, b"keep-alive") => self.keep_alive = true,
                _ => {}
            }
        }
    }
}

/// Offset of `p` (a pointer into `buf`) from the start of `buf`.
#[inline]
fn offset_in(buf: &[u8], p: *const u8) -> u32 {
    let off = (p as usize).wrapping_sub(buf.as_ptr() as usize);
    debug_assert!(off <= buf.len());
    // `buf` is at most `u32::MAX` bytes long (callers clamp `max_head`).
    off.min(buf.len()) as u32
}

/// Span of `sub`, a sub-slice of `buf`.
#[inline]
fn span_in(buf: &[u8], sub: &[u8]) -> Span {
    let start = offset_in(buf, sub.as_ptr());
    Span {
        start,
        end: start + sub.len() as u32,
    }
}

/// Converts `httparse` headers into spans, in order, into a Vec sized exactly.
#[inline]
fn header_spans(buf: &[u8], headers: &[httparse::Header<'_>]) -> Vec<HeaderSpan> {
    let mut out = Vec::with_capacity(headers.len());
    out.extend(headers.iter().map(|h| HeaderSpan {
        name: span_in(buf, h.name.as_bytes()),
        value: span_in(buf, h.value),
    }));
    out
}

/// Validates the request-target against the method (RFC 9112 §3.2, as HAProxy does).
fn check_request_target(method: &[u8], uri: &[u8], is_connect: bool) -> Result<(), HttpError> {
    // httparse already refused CTLs, SP and DEL; HAProxy also refuses non-ASCII and '#'.
    if !uri.is_ascii() || memchr::memchr(b'#', uri).is_some() {
        return Err(err(400, "invalid character in request-target"));
    }
    if is_connect {
        // authority-form: host ":" port
        let ok = match memchr::memrchr(b':', uri) {
            Some(colon) => {
                let (host, port) = (&uri[..colon], &uri[colon + 1..]);
                !host.is_empty()
                    && !port.is_empty()
                    && port.iter().all(u8::is_ascii_digit)
                    && !host.iter().any(|&b| matches!(b, b'/' | b'?' | b'@'))
            }
            None => false,
        };
        return if ok {
            Ok(())
        } else {
            Err(err(400, "invalid CONNECT authority"))
        };
    }
    match uri.first() {
        Some(b'/') => Ok(()),
        Some(b'*') if uri.len() == 1 => {
            // asterisk-form: OPTIONS, or a method HAProxy does not know.
            const KNOWN: [&[u8]; 6] = [b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"TRACE"];
            if KNOWN.contains(&method) {
                Err(err(400, "asterisk-form request-target"))
            } else {
                Ok(())
            }
        }
        _ if scheme_prefix_len(uri).is_some() => Ok(()),
        _ => Err(err(400, "invalid request-target")),
    }
}

/// Maps an `httparse` error on a request to a 400 with a reason.
fn request_syntax_error(e: httparse::Error) -> HttpError {
    use httparse::Error as E;
    err(
        400,
        match e {
            E::HeaderName => "invalid header name",
            E::HeaderValue => "invalid header value",
            E::NewLine => "invalid line ending",
            E::Status => "invalid request line",
            E::Token => "invalid request line",
            E::TooManyHeaders => "too many headers",
            E::Version => "invalid HTTP version",
        },
    )
}

/// Maps an `httparse` error on a response to a 502 with a reason.
fn response_syntax_error(e: httparse::Error) -> HttpError {
    use httparse::Error as E;
    err(
        502,
        match e {
            E::HeaderName => "invalid response header name",
            E::HeaderValue => "invalid response header value",
            E::NewLine => "invalid response line ending",
            E::Status => "invalid response status line",
            E::Token => "invalid response status line",
            E::TooManyHeaders => "too many response headers",
            E::Version => "invalid response HTTP version",
        },
    )
}

/// Parses a request head from the start of `buf`.
///
/// Only the first `max_head` bytes are ever looked at, so the result does not depend on how
/// much of the body or of a pipelined request follows. Returns [`Parsed::Partial`] while the head
/// is incomplete and `buf.len() < max_head`; once `max_head` bytes are buffered without a
/// complete head, 414 if the request line is not complete yet, else 431. See the module
/// documentation for the full list of rejected messages.
///
/// The only allocation is the `headers` Vec, sized exactly.
pub fn parse_request(buf: &[u8], max_head: usize) -> Result<Parsed<RequestHead>, HttpError> {
    let max_head = max_head.min(u32::MAX as usize);
    let data = &buf[..buf.len().min(max_head)];

    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let head_len = match req.parse_with_uninit_headers(data, &mut slots) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() < max_head {
                return Ok(Parsed::Partial);
            }
            let start = skip_leading_newlines(data);
            return Err(if memchr::memchr(b'\n', &data[start..]).is_some() {
                err(431, "request header too large")
            } else {
                err(414, "request line too long")
            });
        }
        Err(e) => return Err(request_syntax_error(e)),
    };
    let (Some(method), Some(uri), Some(version_minor)) = (req.method, req.path, req.version) else {
        // Unreachable with httparse's contract on Complete; never panic regardless.
        return Err(err(400, "invalid request line"));
    };
    let method = method.as_bytes();
    let uri = uri.as_bytes();
    let is_head = method == b"HEAD";
    let is_connect = method == b"CONNECT";
    check_request_target(method, uri, is_connect)?;

    let mut cl: Option<u64> = None;
    let mut te = TransferEncoding::default();
    let mut conn = ConnectionTokens::default();
    let mut upgrade_hdr = false;
    let mut expect_continue = false;
    let mut host: Option<&[u8]> = None;
    let mut cl_rewrite = false;
    let mut host_dup = false;
    let mut websocket = false;
    let mut ws_key = false;
    for h in req.headers.iter() {
        let value = h.value;
        match classify(h.name.as_bytes()) {
            Special::Other => {}
            Special::ContentLength => {
                cl_rewrite |= cl.is_some() || value.contains(&b',');
                merge_content_length(value, &mut cl).map_err(|r| err(400, r))?;
            }
            Special::TransferEncoding => te.merge(value).map_err(|r| err(400, r))?,
            Special::Connection => conn.merge(value),
            Special::Upgrade => {
                upgrade_hdr |= !value.is_empty();
                websocket |= super::util::has_token(value, b"websocket");
            }
            Special::WebSocketKey => ws_key |= !value.is_empty(),
            Special::Expect => {
                expect_continue |= header_eq(trim_ows(value), b"100-continue");
            }
            Special::Host => match host {
                None => host = Some(value),
                Some(prev) if header_eq(prev, value) => host_dup = true,
                Some(_) => return Err(err(400, "several different host headers")),
            },
        }
    }

    // absolute-form: the authority is the target, and a Host saying otherwise would let a
    // rule on Host and the server disagree on it; HAProxy refuses the request.
    if let (Some(n), Some(h)) = (scheme_prefix_len(uri), host) {
        // The authority runs up to where `path_of` says the path starts.
        let end = offset_in(uri, path_of(uri).as_ptr()) as usize;
        if !header_eq(&uri[n..end], trim_ows(h)) {
            return Err(err(
                400,
                "host header differs from the request-target's authority",
            ));
        }
    }

    let body = if te.present {
        if cl.is_some() {
            return Err(err(400, "both content-length and transfer-encoding"));
        }
        if version_minor == 0 {
            return Err(err(400, "transfer-encoding in an HTTP/1.0 request"));
        }
        // `chunked` present but not last: the framing is broken (400, RFC 9112 §6.3). No
        // `chunked` at all: only codings sluice does not implement (501, RFC 9112 §6.1).
        if te.chunked_seen && !te.chunked_last {
            return Err(err(400, "chunked is not the final transfer-coding"));
        }
        if te.other {
            return Err(err(501, "unsupported transfer-coding"));
        }
        BodyKind::Chunked
    } else {
        match cl {
            Some(n) => BodyKind::Length(n),
            None => BodyKind::None,
        }
    };
    let body = if is_connect {
        match body {
            BodyKind::None | BodyKind::Length(0) => BodyKind::None,
            _ => return Err(err(400, "CONNECT request with a body")),
        }
    } else {
        body
    };

    let http11 = version_minor == 1;
    // A WebSocket handshake without its key cannot succeed (RFC 6455 §4.1); HAProxy refuses it
    // rather than let a server switch protocols on a request no client could have meant.
    if http11 && conn.upgrade && websocket && !ws_key {
        return Err(err(400, "websocket upgrade without sec-websocket-key"));
    }
    Ok(Parsed::Complete(RequestHead {
        head_len,
        method: span_in(data, method),
        uri: span_in(data, uri),
        version_minor,
        headers: header_spans(data, req.headers),
        body,
        conn_close: conn.close || (!http11 && !conn.keep_alive),
        conn_keep_alive: conn.keep_alive,
        upgrade: http11 && conn.upgrade && upgrade_hdr,
        expect_continue: http11 && expect_continue,
        is_head,
        cacheable_method: matches!(method, b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE"),
        is_connect,
        cl_rewrite,
        host_dup,
    }))
}

/// Span of the reason phrase of a status line httparse accepted (`HTTP/1.x SSS[ reason]EOL`,
/// after optional leading empty lines). Computed from the bytes because httparse replaces a
/// reason containing obs-text with a static empty string.
fn reason_span(data: &[u8]) -> Span {
    let after_code = skip_leading_newlines(data) + b"HTTP/1.1 200".len();
    let (start, end) = if data.get(after_code) == Some(&b' ') {
        let start = after_code + 1;
        let tail = data.get(start..).unwrap_or_default();
        let mut end = start + memchr::memchr(b'\n', tail).unwrap_or(0);
        if end > start && data[end - 1] == b'\r' {
            end -= 1;
        }
        (start, end)
    } else {
        (after_code, after_code)
    };
    let start = start.min(data.len()) as u32;
    let end = (end.min(data.len()) as u32).max(start);
    Span { start, end }
}

/// Parses a response head from the start of `buf`. `req_is_head` / `req_is_connect` describe
/// the request this response answers. Every error is a 502.
///
/// Body framing (RFC 9112 §6.3):
/// 1. 1xx → [`BodyKind::None`] (101 also sets `switching`: the connection becomes a tunnel);
/// 2. 2xx to CONNECT → [`BodyKind::CloseDelimited`] (tunnel);
/// 3. response to HEAD, 204, 304 → [`BodyKind::None`];
/// 4. `Transfer-Encoding` with `chunked` last → [`BodyKind::Chunked`] (if `Content-Length` is
///    present too, or the response is HTTP/1.0, TE wins but `conn_close` is set);
///    other last coding → [`BodyKind::CloseDelimited`];
/// 5. `Content-Length` → [`BodyKind::Length`] (conflicting or malformed values → 502);
/// 6. otherwise → [`BodyKind::CloseDelimited`].
///
/// `conn_close` is set for `Connection: close`, HTTP/1.0 without `keep-alive`, the TE+CL
/// ambiguity, TE in HTTP/1.0, and whenever the body is close-delimited.
pub fn parse_response(
    buf: &[u8],
    max_head: usize,
    req_is_head: bool,
    req_is_connect: bool,
) -> Result<Parsed<ResponseHead>, HttpError> {
    let max_head = max_head.min(u32::MAX as usize);
    let data = &buf[..buf.len().min(max_head)];

    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut []);
    let config = httparse::ParserConfig::default();
    let head_len = match config.parse_response_with_uninit_headers(&mut res, data, &mut slots) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() < max_head {
                return Ok(Parsed::Partial);
            }
            return Err(err(502, "response header too large"));
        }
        Err(e) => return Err(response_syntax_error(e)),
    };
    let (Some(status), Some(version_minor)) = (res.code, res.version) else {
        return Err(err(502, "invalid response status line"));
    };
    if status < 100 {
        return Err(err(502, "invalid response status code"));
    }

    let mut cl: Option<u64> = None;
    let mut te = TransferEncoding::default();
    let mut conn = ConnectionTokens::default();
    let mut cl_rewrite = false;
    for h in res.headers.iter() {
        let value = h.value;
        match classify(h.name.as_bytes()) {
            Special::ContentLength => {
                cl_rewrite |= cl.is_some() || value.contains(&b',');
                merge_content_length(value, &mut cl).map_err(|r| err(502, r))?;
            }
            Special::TransferEncoding => te.merge(value).map_err(|r| err(502, r))?,
            Special::Connection => conn.merge(value),
            _ => {}
        }
    }

    let http11 = version_minor == 1;
    let mut conn_close = conn.close || (!http11 && !conn.keep_alive);
    let switching = status == 101;
    let body = if status < 200 {
        BodyKind::None
    } else if req_is_connect && status < 300 {
        BodyKind::CloseDelimited
    } else if req_is_head || status == 204 || status == 304 {
        BodyKind::None
    } else if te.present {
        if cl.is_some() || !http11 {
            conn_close = true;
        }
        if te.chunked_last {
            BodyKind::Chunked
        } else {
            BodyKind::CloseDelimited
        }
    } else {
        match cl {
            Some(n) => BodyKind::Length(n),
            None => BodyKind::CloseDelimited,
        }
    };
    if body == BodyKind::CloseDelimited {
        conn_close = true;
    }

    Ok(Parsed::Complete(ResponseHead {
        head_len,
        status,
        reason: reason_span(&data[..head_len]),
        version_minor,
        headers: header_spans(data, res.headers),
        body,
        conn_close,
        conn_keep_alive: conn.keep_alive,
        switching,
        // With Transfer-Encoding, the length is the chunks' (or the close's), never the
        // Content-Length: a recipient must not see both (RFC 9112 §6.3).
        cl_rewrite: cl_rewrite || (cl.is_some() && te.present),
        cl_value: if te.present { None } else { cl },
    }))
}
