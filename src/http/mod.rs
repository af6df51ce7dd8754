//! `http`: the HTTP/1.x codec — request and response heads parsed with `httparse` into offsets
//! into the receive buffer (original order and case kept), strict message framing
//! (Content-Length / chunked / close-delimited / none), and the chunked-body boundary tracker.
//!
//! It owns *syntax and framing*, never policy: which headers a proxy adds or drops, timeouts and
//! connection reuse belong to `stream`. It must never allocate per byte, never guess a length
//! (an ambiguous message is an error: request smuggling), and never panic on any input.
//!
//! Layout:
//! - [`parse_request`] / [`parse_response`] (in `head.rs`): head parsing and framing decisions;
//! - [`ChunkedState`] (in `chunked.rs`): incremental chunked-body boundary tracker;
//! - helpers (in `util.rs`): [`header_eq`], [`has_token`], [`is_hop_by_hop`],
//!   [`connection_tokens_contain`], [`reason_phrase`], [`path_of`], [`query_of`].
//!
//! Strictness summary (requests; see `head.rs` for the full list): anything that could make two
//! HTTP implementations disagree on where a message ends is rejected — `Content-Length` together
//! with `Transfer-Encoding` (sluice never guesses which one the next hop will honour), conflicting
//! or malformed `Content-Length`, `chunked` not last or repeated, obs-fold, bare CR, control
//! characters, whitespace before the colon.

mod chunked;
mod head;
mod util;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;

pub use chunked::ChunkedState;
pub use head::{MAX_HEADERS, parse_request, parse_response};
pub use util::{
    connection_tokens_contain, expand_groups, has_token, header_eq, is_hop_by_hop,
    keep_alive_params, path_of, query_of, reason_phrase, replace_each_value, replace_whole,
    request_head_state, rewrite_target, says_close, start_line, trim_first_element,
    urlencoded_pairs,
};

/// A byte range `[start, end)` into the buffer the head was parsed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    #[inline]
    pub fn of<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.start as usize..self.end as usize]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderSpan {
    pub name: Span,
    pub value: Span,
}

impl HeaderSpan {
    /// The header name bytes (original case).
    #[inline]
    pub fn name<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        self.name.of(buf)
    }

    /// The header value bytes (leading and trailing whitespace already trimmed).
    #[inline]
    pub fn value<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        self.value.of(buf)
    }
}

/// How the body of a message is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// No body at all (requests without CL/TE, HEAD responses, 1xx/204/304).
    None,
    /// `Content-Length: n`.
    Length(u64),
    /// `Transfer-Encoding: chunked` (last coding).
    Chunked,
    /// Response without length: the body ends when the server closes.
    CloseDelimited,
}

/// A protocol error, with the status HAProxy answers for it (400, 413, 414, 431, 501 for requests;
/// 502 for responses) and a short reason for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpError {
    pub status: u16,
    pub reason: &'static str,
}

/// Result of feeding bytes to a head parser.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<T> {
    Complete(T),
    /// Need more bytes.
    Partial,
}

/// A parsed request head. All spans index the buffer passed to [`parse_request`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// Bytes of the head including the final CRLFCRLF.
    pub head_len: usize,
    pub method: Span,
    pub uri: Span,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version_minor: u8,
    /// Every header field in received order.
    pub headers: Vec<HeaderSpan>,
    pub body: BodyKind,
    /// `Connection: close` seen (or HTTP/1.0 without `keep-alive`).
    pub conn_close: bool,
    /// `Connection: keep-alive` token seen.
    pub conn_keep_alive: bool,
    /// `Connection: upgrade` token seen and an `Upgrade` header present.
    pub upgrade: bool,
    /// `Expect: 100-continue`.
    pub expect_continue: bool,
    pub is_head: bool,
    /// GET, HEAD, OPTIONS or TRACE: its response may be cached (`option checkcache`).
    pub cacheable_method: bool,
    pub is_connect: bool,
    /// `Content-Length` came as a list or in several fields (all equal, or parsing would
    /// have failed): it is forwarded as one field with one value, as HAProxy does.
    pub cl_rewrite: bool,
    /// `Host` came in several fields, all with the same value: only the first is forwarded,
    /// as HAProxy merges them (many servers answer 400 to a repeated `Host`).
    pub host_dup: bool,
}

/// A parsed response head. All spans index the buffer passed to [`parse_response`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub head_len: usize,
    pub status: u16,
    pub reason: Span,
    pub version_minor: u8,
    pub headers: Vec<HeaderSpan>,
    pub body: BodyKind,
    pub conn_close: bool,
    pub conn_keep_alive: bool,
    /// 101 Switching Protocols (the connection becomes a tunnel after this head).
    pub switching: bool,
    /// `Content-Length` came as a list, in several fields, or beside `Transfer-Encoding`:
    /// it is forwarded as one field with the value [`Self::cl_value`], or not at all when
    /// that is `None` (the body is chunked or read until close).
    pub cl_rewrite: bool,
    pub cl_value: Option<u64>,
}

/// First value of the header named `name` (ASCII case-insensitive), if any.
#[inline]
fn first_header<'a>(buf: &'a [u8], headers: &[HeaderSpan], name: &[u8]) -> Option<&'a [u8]> {
    headers
        .iter()
        .find(|h| header_eq(h.name.of(buf), name))
        .map(|h| h.value.of(buf))
}

impl RequestHead {
    /// The method bytes (e.g. `GET`).
    #[inline]
    pub fn method<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        self.method.of(buf)
    }

    /// The request-target bytes as received.
    #[inline]
    pub fn uri<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        self.uri.of(buf)
    }

    /// Value of the first header named `name` (ASCII case-insensitive).
    #[inline]
    pub fn header<'a>(&self, buf: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
        first_header(buf, &self.headers, name)
    }
}

impl ResponseHead {
    /// Value of the first header named `name` (ASCII case-insensitive).
    #[inline]
    pub fn header<'a>(&self, buf: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
        first_header(buf, &self.headers, name)
    }
}
