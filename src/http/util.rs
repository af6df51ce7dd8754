//! Small allocation-free helpers over header names, comma-separated token lists and URIs.

use super::HeaderSpan;

/// ASCII case-insensitive comparison of a header name (or any token) with `want`.
#[inline]
pub fn header_eq(name: &[u8], want: &[u8]) -> bool {
    name.len() == want.len() && name.eq_ignore_ascii_case(want)
}

/// `true` for optional whitespace (SP / HTAB).
#[inline]
pub(crate) fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// Strips leading and trailing SP / HTAB.
#[inline]
pub(crate) fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !is_ows(*first) {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !is_ows(*last) {
            break;
        }
        s = rest;
    }
    s
}

/// Iterates the non-empty, OWS-trimmed elements of a comma-separated list (RFC 9110 §5.6.1).
#[inline]
pub(crate) fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim_ows)
        .filter(|e| !e.is_empty())
}

/// Index of the first byte that is not part of the leading empty lines.
#[inline]
pub(crate) fn skip_leading_newlines(data: &[u8]) -> usize {
    data.iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(data.len())
}

/// The start line of a message head (request or status line) without its line ending,
/// after the empty lines a peer may send before it (RFC 9112 §2.2: ignored, as httparse and
/// HAProxy do). Stray CRLFs after a body are common (old clients add one after a POST).
pub fn start_line(head: &[u8]) -> &[u8] {
    let rest = &head[skip_leading_newlines(head)..];
    let mut line = &rest[..memchr::memchr(b'\n', rest).unwrap_or(rest.len())];
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    line
}

/// The first element of a comma-separated header value, trimmed (`a, b` -> `a`), as
/// HAProxy's header lookups return it: a comma inside a quoted string does not end the
/// element (`"b,c", d` -> `"b,c"`, quotes kept).
pub fn trim_first_element(value: &[u8]) -> &[u8] {
    let mut quoted = false;
    let mut escaped = false;
    let mut end = value.len();
    for (i, &c) in value.iter().enumerate() {
        match (quoted, c) {
            _ if escaped => escaped = false,
            (true, b'\\') => escaped = true,
            (_, b'"') => quoted = !quoted,
            (false, b',') => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    trim_ows(&value[..end])
}

/// `true` if the comma-separated list `value` contains `token` (ASCII case-insensitive,
/// elements trimmed of surrounding whitespace).
#[inline]
pub fn has_token(value: &[u8], token: &[u8]) -> bool {
    list_elements(value).any(|e| header_eq(e, token))
}

/// `tchar` from RFC 9110 §5.6.2.
#[inline]
pub(crate) fn is_tchar(b: u8) -> bool {
    matches!(b,
        b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9'
        | b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+'
        | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~')
}

/// `true` if `s` is a non-empty RFC 9110 token.
#[inline]
pub(crate) fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

/// Hop-by-hop header fields a proxy must not forward as-is: `Connection`, `Keep-Alive`,
/// `Proxy-Connection`, `TE`, `Upgrade`.
///
/// Deliberately *not* included:
/// - `Transfer-Encoding`: sluice forwards chunked bodies verbatim, so the framing header must go
///   with them;
/// - `Trailer`: it describes the trailer section that is forwarded verbatim inside the chunked
///   body.
///
/// For an upgrade request (`RequestHead::upgrade`) the engine must keep (or re-add)
/// `Connection: upgrade` and the `Upgrade` header. Headers named by a `Connection` token are also
/// hop-by-hop: see [`connection_tokens_contain`].
#[inline]
pub fn is_hop_by_hop(name: &[u8]) -> bool {
    match name.len() {
        2 => header_eq(name, b"te"),
        7 => header_eq(name, b"upgrade"),
        10 => header_eq(name, b"connection") || header_eq(name, b"keep-alive"),
        16 => header_eq(name, b"proxy-connection"),
        _ => false,
    }
}

/// `true` if any `Connection` header in `headers` (spans into `buf`) lists `name` as a token,
/// i.e. the sender declared the header field `name` hop-by-hop (RFC 9110 §7.6.1).
pub fn connection_tokens_contain(buf: &[u8], headers: &[HeaderSpan], name: &[u8]) -> bool {
    headers
        .iter()
        .any(|h| header_eq(h.name.of(buf), b"connection") && has_token(h.value.of(buf), name))
}

/// Standard reason phrase for `status` (IANA registry); `"Unknown"` for unregistered codes.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        102 => "Processing",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        207 => "Multi-Status",
        208 => "Already Reported",
        226 => "IM Used",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        305 => "Use Proxy",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Payload Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        418 => "I'm a teapot",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        423 => "Locked",
        424 => "Failed Dependency",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        506 => "Variant Also Negotiates",
        507 => "Insufficient Storage",
        508 => "Loop Detected",
        510 => "Not Extended",
        511 => "Network Authentication Required",
        _ => "Unknown",
    }
}

/// Length of an RFC 3986 `scheme "://"` prefix at the start of `uri`, if there is one.
#[inline]
pub(crate) fn scheme_prefix_len(uri: &[u8]) -> Option<usize> {
    let first = *uri.first()?;
    if !first.is_ascii_alphabetic() {
        return None;
    }
    let mut i = 1;
    while i < uri.len() && (uri[i].is_ascii_alphanumeric() || matches!(uri[i], b'+' | b'-' | b'.'))
    {
        i += 1;
    }
    if uri[i..].starts_with(b"://") {
        Some(i + 3)
    } else {
        None
    }
}

/// The path of a request-target, like HAProxy's `path` fetch: from the first `/` up to (not
/// including) `?` or `#`.
///
/// - origin-form `/a/b?q` → `/a/b`;
/// - absolute-form `http://host:80/a?q` → `/a` (empty if there is no path: `http://host?q`);
/// - authority-form (`CONNECT host:443`) and asterisk-form (`*`) → empty.
///
/// The result is always a sub-slice of `uri` (an empty path is the empty slice where the path
/// would start: before the `?` of `http://host?q`, at the end otherwise), so the caller may take
/// its offset in `uri`, e.g. to get "path and query" as `&uri[offset..]`.
#[inline]
pub fn path_of(uri: &[u8]) -> &[u8] {
    let start = if uri.first() == Some(&b'/') {
        0
    } else if let Some(n) = scheme_prefix_len(uri) {
        // Skip the authority: the path starts at the first '/', '?' or '#' after it.
        uri[n..]
            .iter()
            .position(|&b| matches!(b, b'/' | b'?' | b'#'))
            .map_or(uri.len(), |i| n + i)
    } else {
        uri.len()
    };
    let rest = &uri[start..];
    let end = rest
        .iter()
        .position(|&b| b == b'?' || b == b'#')
        .unwrap_or(rest.len());
    &rest[..end]
}

/// The query string of a request-target (after the first `?`, without it, up to any `#`);
/// `None` when there is no `?`. `Some(b"")` for a bare trailing `?`.
#[inline]
pub fn query_of(uri: &[u8]) -> Option<&[u8]> {
    let q = memchr::memchr(b'?', uri)?;
    let rest = &uri[q + 1..];
    let end = memchr::memchr(b'#', rest).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// `application/x-www-form-urlencoded` (a POSTed form or a query string) as (name, value)
/// pairs, `%XX` and `+` decoded; `None` for a name without `=`. Invalid escapes stay as they
/// are. Allocates: for the stats page and the exporter, not for proxied traffic.
pub fn urlencoded_pairs(s: &[u8]) -> Vec<(String, Option<String>)> {
    fn dec(s: &[u8]) -> String {
        let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        let mut out = Vec::with_capacity(s.len());
        let mut i = 0;
        while i < s.len() {
            match s[i] {
                b'%' if i + 2 < s.len() => match (hex(s[i + 1]), hex(s[i + 2])) {
                    (Some(a), Some(b)) => {
                        out.push(a << 4 | b);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                },
                b'+' => out.push(b' '),
                c => out.push(c),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    s.split(|&c| c == b'&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.iter().position(|&c| c == b'=') {
            Some(e) => (dec(&p[..e]), Some(dec(&p[e + 1..]))),
            None => (dec(p), None),
        })
        .collect()
}

/// `timeout=N` (seconds) and `max=M` of a `Keep-Alive` header value (RFC 2068 §19.7.1,
/// still sent by Apache, Node.js and others). Unknown parameters and bad numbers are ignored.
pub fn keep_alive_params(v: &[u8]) -> (Option<std::time::Duration>, Option<u32>) {
    let (mut timeout, mut max) = (None, None);
    for param in v.split(|&b| b == b',') {
        let Some(eq) = param.iter().position(|&b| b == b'=') else {
            continue;
        };
        let name = param[..eq].trim_ascii();
        let Some(n) = std::str::from_utf8(param[eq + 1..].trim_ascii())
            .ok()
            .and_then(|s| s.trim_matches('"').parse::<u32>().ok())
        else {
            continue;
        };
        if name.eq_ignore_ascii_case(b"timeout") {
            timeout = Some(std::time::Duration::from_secs(n.into()));
        } else if name.eq_ignore_ascii_case(b"max") {
            max = Some(n);
        }
    }
    (timeout, max)
}

/// Whether `buf` starts with an HTTP/1 request head: `Some(true)` for a whole one,
/// `Some(false)` for bytes that cannot start one, `None` while it may still become one (the
/// `HTTP` ACL of a `mode tcp` proxy waits for the head, as HAProxy's `req.proto_http`).
pub fn request_head_state(buf: &[u8]) -> Option<bool> {
    // The HTTP/2 preface reads as a request head too (`PRI * HTTP/2.0`), as in HAProxy: a
    // `mode tcp` frontend's `HTTP` ACL matches it, and the upgraded session speaks HTTP/2.
    const PRI: &[u8] = b"PRI * HTTP/2.0\r\n\r\n";
    let n = buf.len().min(PRI.len());
    if n > 0 && buf[..n] == PRI[..n] {
        return (n == PRI.len()).then_some(true);
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    match httparse::Request::new(&mut headers).parse(buf) {
        Ok(httparse::Status::Complete(_)) | Err(httparse::Error::TooManyHeaders) => Some(true),
        Ok(httparse::Status::Partial) => None,
        Err(_) => Some(false),
    }
}

/// The request target after a rewrite of `part` (`set-path`, `replace-uri`, ...): with no
/// `regex`, the part becomes `value`; with one, the part becomes `value` with `\1`..`\9`
/// replaced by the regex's groups when the regex matches it (`None` when it does not), as
/// HAProxy's `replace-*` actions do (the whole part is replaced, not only the match).
pub fn rewrite_target(
    uri: &[u8],
    part: crate::config::UriPart,
    regex: Option<&regex::bytes::Regex>,
    value: &[u8],
) -> Option<Vec<u8>> {
    use crate::config::UriPart;
    let path = path_of(uri);
    let ps = path.as_ptr() as usize - uri.as_ptr() as usize;
    let pe = ps + path.len();
    let q = memchr::memchr(b'?', &uri[pe..]).map(|i| pe + i);
    let current = match part {
        UriPart::Path => &uri[ps..pe],
        UriPart::PathQ => &uri[ps..],
        UriPart::Query => q.map_or(&b""[..], |q| &uri[q + 1..]),
        UriPart::Uri => uri,
    };
    let expanded;
    let value = match regex {
        None => value,
        Some(re) => {
            let caps = re.captures(current)?;
            expanded = expand_groups(value, &caps);
            &expanded[..]
        }
    };
    let mut out = Vec::with_capacity(uri.len() + value.len());
    match part {
        UriPart::Path => {
            out.extend_from_slice(&uri[..ps]);
            out.extend_from_slice(value);
            out.extend_from_slice(&uri[pe..]);
        }
        UriPart::PathQ => {
            out.extend_from_slice(&uri[..ps]);
            out.extend_from_slice(value);
        }
        // HAProxy's `set-query`: a `?` is added only for a value, and never removed.
        UriPart::Query => match q {
            Some(q) => {
                out.extend_from_slice(&uri[..=q]);
                out.extend_from_slice(value);
            }
            None => {
                out.extend_from_slice(uri);
                if !value.is_empty() {
                    out.push(b'?');
                    out.extend_from_slice(value);
                }
            }
        },
        UriPart::Uri => out.extend_from_slice(value),
    }
    Some(out)
}

/// `replace-header`: when `re` matches `value`, the whole value becomes `fmt` with its `\N`
/// expanded; `None` when it does not match.
pub fn replace_whole(value: &[u8], re: &regex::bytes::Regex, fmt: &[u8]) -> Option<Vec<u8>> {
    re.captures(value).map(|caps| expand_groups(fmt, &caps))
}

/// `replace-value`: the same applied to each comma-separated value (the separators and the
/// blanks after them kept); `None` when no value matched.
pub fn replace_each_value(value: &[u8], re: &regex::bytes::Regex, fmt: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(value.len() + fmt.len());
    let mut changed = false;
    for (i, part) in value.split(|&c| c == b',').enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let lead = part
            .iter()
            .position(|c| !matches!(c, b' ' | b'\t'))
            .unwrap_or(part.len());
        out.extend_from_slice(&part[..lead]);
        match replace_whole(&part[lead..], re, fmt) {
            Some(new) => {
                changed = true;
                out.extend_from_slice(&new);
            }
            None => out.extend_from_slice(&part[lead..]),
        }
    }
    changed.then_some(out)
}

/// `value` with each `\N` (N a digit) replaced by group N of `caps` (nothing for a group that
/// did not take part); other bytes are kept.
pub fn expand_groups(value: &[u8], caps: &regex::bytes::Captures) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        if value[i] == b'\\' && value.get(i + 1).is_some_and(u8::is_ascii_digit) {
            let n = usize::from(value[i + 1] - b'0');
            if let Some(m) = caps.get(n) {
                out.extend_from_slice(m.as_bytes());
            }
            i += 2;
        } else {
            out.push(value[i]);
            i += 1;
        }
    }
    out
}

/// Whether a whole response (an `errorfile`'s bytes) asks for the connection to close: a
/// `Connection` header with `close`, or a head that does not parse.
pub fn says_close(resp: &[u8]) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    match r.parse(resp) {
        Ok(httparse::Status::Complete(_)) => r
            .headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("connection") && has_token(h.value, b"close")),
        _ => true,
    }
}

#[cfg(test)]
mod rewrite_tests {
    use super::rewrite_target;
    use crate::config::UriPart::*;

    fn set(uri: &str, part: crate::config::UriPart, v: &str) -> String {
        String::from_utf8(rewrite_target(uri.as_bytes(), part, None, v.as_bytes()).unwrap())
            .unwrap()
    }

    fn replace(uri: &str, part: crate::config::UriPart, re: &str, v: &str) -> Option<String> {
        let re = regex::bytes::Regex::new(re).unwrap();
        rewrite_target(uri.as_bytes(), part, Some(&re), v.as_bytes())
            .map(|b| String::from_utf8(b).unwrap())
    }

    #[test]
    fn request_head_detection() {
        use super::request_head_state as st;
        assert_eq!(st(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"), Some(true));
        assert_eq!(st(b"GET / HTTP/1.1\r\nHo"), None, "wait for the rest");
        assert_eq!(st(b"GET /"), None);
        assert_eq!(st(b"SSH-2.0-OpenSSH_9.2\r\n"), Some(false));
        assert_eq!(st(&[0, 1, 2, 3]), Some(false));
    }

    #[test]
    fn set_parts() {
        assert_eq!(set("/a/b?x=1", Path, "/c"), "/c?x=1");
        assert_eq!(set("http://h:8/a?x", Path, "/c"), "http://h:8/c?x");
        assert_eq!(set("/a?x=1", PathQ, "/c?y"), "/c?y");
        assert_eq!(set("/a?x=1", Query, "y=2"), "/a?y=2");
        assert_eq!(set("/a", Query, "y=2"), "/a?y=2");
        assert_eq!(set("/a", Query, ""), "/a", "no '?' added for nothing");
        assert_eq!(set("/a?x", Query, ""), "/a?", "the '?' stays");
        assert_eq!(set("/a?x", Uri, "/z"), "/z");
    }

    #[test]
    fn replace_parts() {
        // The whole part is replaced by the expansion, as HAProxy's exp_replace does.
        assert_eq!(
            replace("/api/v1/users?x", Path, "^/api/(.*)", "/\\1").as_deref(),
            Some("/v1/users?x")
        );
        assert_eq!(
            replace("/x/foo/bar", Path, "/foo/(.*)", "/\\1").as_deref(),
            Some("/bar")
        );
        assert_eq!(
            replace("/a", Path, "(.*)", "/prefix\\1").as_deref(),
            Some("/prefix/a")
        );
        assert_eq!(
            replace("/a", Path, "^/b", "/c"),
            None,
            "no match, no change"
        );
        assert_eq!(
            replace("/a?q=1", PathQ, "^/a\\?(.*)", "/b?\\1&r=2").as_deref(),
            Some("/b?q=1&r=2")
        );
        assert_eq!(
            replace("/a", Uri, "^(/a)(x)?$", "\\1\\2\\9!").as_deref(),
            Some("/a!"),
            "groups that did not match expand to nothing"
        );
    }
}
