//! `errorfile`: the responses sluice generates itself — built-in error pages (shaped like
//! HAProxy's: a small HTML body, `cache-control: no-cache`, `connection: close` unless the
//! connection stays open, as after a `deny`) and their
//! `errorfile CODE FILE` overrides (sent verbatim, as HAProxy does).

use std::borrow::Cow;

use crate::config::Proxy;

fn message(status: u16) -> &'static str {
    match status {
        200 => "Service ready.",
        400 => "Your browser sent a request this server could not understand.",
        401 => "This resource requires authentication.",
        403 => "Access to this resource is forbidden.",
        404 => "The requested resource was not found.",
        405 => "The request method is not allowed for this resource.",
        407 => "Proxy authentication is required.",
        408 => "The request was not received completely in time.",
        410 => "The requested resource is gone.",
        413 => "The request is larger than this server accepts.",
        414 => "The request URI is longer than this server accepts.",
        425 => "The request was sent too early.",
        429 => "Too many requests were sent in a given amount of time.",
        431 => "The request header fields are larger than this server accepts.",
        500 => "An internal error occurred while handling the request.",
        501 => "The request uses a feature this server does not implement.",
        502 => "The server returned an invalid or incomplete response.",
        503 => "No server is available to handle this request.",
        504 => "The server did not respond in time.",
        _ => "The request could not be handled.",
    }
}

/// The built-in response for `status`, for a connection that stays open (`deny`, as in
/// HAProxy 2.6): no `connection: close`.
pub fn builtin_open(status: u16) -> Vec<u8> {
    page(status, false)
}

/// The built-in response for `status` (error pages close the connection).
pub fn builtin(status: u16) -> Vec<u8> {
    page(status, status != 200)
}

fn page(status: u16, close: bool) -> Vec<u8> {
    let reason = crate::http::reason_phrase(status);
    let body = format!(
        "<html><body><h1>{status} {reason}</h1>\n{}\n</body></html>\n",
        message(status)
    );
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-length: {}\r\ncache-control: no-cache\r\ncontent-type: text/html\r\n",
        body.len()
    );
    if close {
        out.push_str("connection: close\r\n");
    }
    out.push_str("\r\n");
    out.push_str(&body);
    out.into_bytes()
}

/// The response for `status`: the backend's `errorfile` if it has one, else the frontend's,
/// else the built-in page.
pub fn response<'a>(fe: &'a Proxy, be: Option<&'a Proxy>, status: u16) -> Cow<'a, [u8]> {
    if let Some(f) = be.and_then(|b| b.errorfiles.get(&status)) {
        return Cow::Borrowed(f);
    }
    if let Some(f) = fe.errorfiles.get(&status) {
        return Cow::Borrowed(f);
    }
    Cow::Owned(builtin(status))
}

// ---------------------------------------------------------------------------------------------
// `http-errors` sections, by name, while the configuration is read.

type Section = std::collections::HashMap<u16, Vec<u8>>;

thread_local! {
    static SECTIONS: std::cell::RefCell<std::collections::HashMap<String, Section>> =
        std::cell::RefCell::default();
}

/// Starts a new configuration.
pub fn reset() {
    SECTIONS.with(|s| s.borrow_mut().clear());
}

/// Declares an `http-errors` section (`false`: the name is taken).
pub fn declare(name: &str) -> bool {
    SECTIONS.with(|s| {
        let mut s = s.borrow_mut();
        if s.contains_key(name) {
            return false;
        }
        s.insert(name.to_string(), Section::new());
        true
    })
}

/// `errorfile CODE FILE` in section `name`.
pub fn add(name: &str, code: u16, body: Vec<u8>) {
    SECTIONS.with(|s| {
        if let Some(sec) = s.borrow_mut().get_mut(name) {
            sec.insert(code, body);
        }
    });
}

/// The pages of section `name` (all, or those of `codes`); `None` when there is no such
/// section.
pub fn section(name: &str, codes: &[u16]) -> Option<Vec<(u16, Vec<u8>)>> {
    SECTIONS.with(|s| {
        s.borrow().get(name).map(|sec| {
            sec.iter()
                .filter(|(c, _)| codes.is_empty() || codes.contains(c))
                .map(|(c, b)| (*c, b.clone()))
                .collect()
        })
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn builtin_is_well_framed() {
        let r = String::from_utf8(super::builtin(503)).unwrap();
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(head.contains("connection: close"));
    }
}
