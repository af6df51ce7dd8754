//! Health-check settings of the configuration model: the rule sequences of `http-check` and
//! `tcp-check`, and the per-server check, agent, observe, slowstart and track settings.
//!
//! Plain data, validated by `parser::checks`; `check` runs it. Nothing here does I/O.

use std::net::IpAddr;
use std::time::Duration;

/// Which kind of health check a backend runs (the last of `option httpchk` / `option
/// tcp-check` wins, as in HAProxy; neither: a plain TCP connect).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CheckType {
    #[default]
    Connect,
    Http,
    Tcp,
    /// `option external-check`: a program's exit status.
    External,
}

/// `external-check command CMD` / `external-check path PATH`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExternalCheck {
    /// The program, run without a shell (a name without `/` is looked up in `path`, as
    /// HAProxy's execvp does with the PATH it gives the child).
    pub command: Option<String>,
    /// The PATH it gets (HAProxy's default: empty).
    pub path: Option<String>,
}

/// One step of a check sequence (`http-check connect|send|expect`, `tcp-check
/// connect|send|send-binary|expect`).
#[derive(Debug, Clone)]
pub enum CheckRule {
    Connect(ConnectRule),
    Send(SendRule),
    Expect(ExpectRule),
}

impl CheckRule {
    pub fn comment(&self) -> Option<&str> {
        match self {
            CheckRule::Connect(c) => c.comment.as_deref(),
            CheckRule::Send(s) => s.comment.as_deref(),
            CheckRule::Expect(e) => e.comment.as_deref(),
        }
    }
}

/// The HTTP version an HTTP check connection speaks (`check-proto`, `http-check connect
/// proto`): HAProxy's multiplexer names `h1` and `h2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckProto {
    H1,
    H2,
}

impl CheckProto {
    pub fn parse(v: &str) -> Option<CheckProto> {
        match v {
            "h1" => Some(CheckProto::H1),
            "h2" => Some(CheckProto::H2),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CheckProto::H1 => "h1",
            CheckProto::H2 => "h2",
        }
    }
}

/// `connect [default] [port N] [addr A] [send-proxy] [ssl] [sni S] [alpn A] [proto P]
/// [linger]`.
#[derive(Debug, Clone, Default)]
pub struct ConnectRule {
    pub port: Option<u16>,
    pub addr: Option<IpAddr>,
    /// Send a PROXY protocol v1 header first (`send-proxy`; `default` inherits the server's
    /// `check-send-proxy`).
    pub send_proxy: bool,
    /// `default`: take the server's check settings (port, address, `check-send-proxy`,
    /// `check-ssl`, `check-sni`, `check-alpn`).
    pub default: bool,
    /// `ssl`: this connection runs TLS, with the server line's TLS settings.
    pub ssl: bool,
    /// `sni NAME`: the SNI of this TLS connection.
    pub sni: Option<String>,
    /// `alpn LIST`: the ALPN protocols this TLS connection offers.
    pub alpn: Option<Vec<Vec<u8>>>,
    /// `proto h1|h2` (`http-check` only): the HTTP version of this connection.
    pub proto: Option<CheckProto>,
    pub comment: Option<String>,
}

/// `send ...`: raw bytes (`tcp-check send` / `send-binary`, with `send-lf` not supported) or
/// one HTTP request (`http-check send`).
#[derive(Debug, Clone)]
pub struct SendRule {
    pub data: SendData,
    pub comment: Option<String>,
}

#[derive(Debug, Clone)]
pub enum SendData {
    Bytes(Vec<u8>),
    Http(HttpSend),
}

/// `http-check send [meth M] [uri U] [ver V] [hdr N V]... [body S]`: unset parts come from
/// `option httpchk` (or its defaults `OPTIONS / HTTP/1.0`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpSend {
    pub meth: Option<String>,
    pub uri: Option<String>,
    pub ver: Option<String>,
    pub hdrs: Vec<(String, String)>,
    pub body: Option<String>,
}

/// `expect [min-recv N] [comment C] [ok-status S] [error-status S] [tout-status S]
/// [on-success TEXT] [on-error TEXT] [!] MATCH PATTERN`.
#[derive(Debug, Clone, Default)]
pub struct ExpectRule {
    pub negate: bool,
    pub kind: ExpectKind,
    /// `min-recv N`: wait for at least N bytes before matching (tcp-check).
    pub min_recv: Option<usize>,
    pub comment: Option<String>,
    /// `ok-status`, `error-status`, `tout-status` (tcp-check): the check status code
    /// (`L7OK`, `L6RSP`, ...) this rule gives when it passes, fails, or times out.
    pub ok_status: Option<&'static str>,
    pub error_status: Option<&'static str>,
    pub tout_status: Option<&'static str>,
    /// `on-success` / `on-error` (tcp-check): the check's info text instead of sluice's.
    pub on_success: Option<String>,
    pub on_error: Option<String>,
}

#[derive(Debug, Clone)]
pub enum ExpectKind {
    /// Status codes or ranges (`200`, `200-399`, `200,302`).
    Status(Vec<(u16, u16)>),
    RStatus(regex::Regex),
    /// HTTP: the body contains it; TCP: the data received contains it.
    String(Vec<u8>),
    RString(regex::bytes::Regex),
    /// `tcp-check expect binary HEX`: the data contains these bytes.
    Binary(Vec<u8>),
    /// `tcp-check expect rbinary RE`: RE matches the hex form (upper case) of the data.
    RBinary(regex::Regex),
    /// `option mysql-check`: one MySQL packet, the server's greeting (`ok: false`: protocol
    /// 10, its version string is the check's info) or the answer to a login (`ok: true`: an
    /// OK packet); an error packet fails with its code and message, as HAProxy reports them.
    Mysql {
        ok: bool,
    },
    /// `http-check expect hdr|fhdr name [-m M] N [value [-m M] V]`.
    Hdr {
        name: Match,
        value: Option<Match>,
        /// `fhdr` (or `full`): values are not split on commas.
        full: bool,
    },
}

impl Default for ExpectKind {
    fn default() -> ExpectKind {
        ExpectKind::String(Vec::new())
    }
}

/// A pattern with its `-m` method.
#[derive(Debug, Clone)]
pub struct Match {
    pub method: MatchMethod,
    pub pattern: String,
    /// Compiled for `-m reg`.
    pub regex: Option<regex::Regex>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchMethod {
    Str,
    Beg,
    End,
    Sub,
    Reg,
}

impl Match {
    /// Case-insensitive for header names (`ci`), exact otherwise.
    pub fn matches(&self, s: &str, ci: bool) -> bool {
        let (s, p) = if ci {
            (s.to_ascii_lowercase(), self.pattern.to_ascii_lowercase())
        } else {
            (s.to_string(), self.pattern.clone())
        };
        match self.method {
            MatchMethod::Str => s == p,
            MatchMethod::Beg => s.starts_with(&p),
            MatchMethod::End => s.ends_with(&p),
            MatchMethod::Sub => s.contains(&p),
            MatchMethod::Reg => self.regex.as_ref().is_some_and(|r| r.is_match(&s)),
        }
    }
}

/// `observe layer4|layer7`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observe {
    Layer4,
    Layer7,
}

/// `on-error` (default `fail-check`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnError {
    Fastinter,
    #[default]
    FailCheck,
    SuddenDeath,
    MarkDown,
}

/// `agent-check` and its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCfg {
    /// `agent-port` (required).
    pub port: u16,
    /// `agent-addr` (default: the server's address).
    pub addr: Option<IpAddr>,
    /// `agent-inter` (default: `inter`, 2 s).
    pub inter: Duration,
    /// `agent-send STRING`: sent after connecting.
    pub send: Option<String>,
}

/// Health settings of a `server` line besides `check` itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HealthCfg {
    pub agent: Option<AgentCfg>,
    pub observe: Option<Observe>,
    /// `error-limit` (default 10).
    pub error_limit: u32,
    pub on_error: OnError,
    /// `on-marked-down shutdown-sessions`.
    pub down_kills_sessions: bool,
    /// `on-marked-up shutdown-backup-sessions`.
    pub up_kills_backup_sessions: bool,
    /// `slowstart`: weight and maxconn ramp up over this time after coming back.
    pub slowstart: Option<Duration>,
    /// `track [BACKEND/]SERVER` as written (backend `None`: this backend).
    pub track: Option<(Option<String>, String)>,
    /// `track`, resolved: (proxy index, server index).
    pub track_idx: Option<(usize, usize)>,
}

/// Global check scheduling settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GlobalChecks {
    /// `spread-checks N`: each interval varies randomly by up to N% (0..=50).
    pub spread: u32,
    /// `max-spread-checks T`: the start-up spread of first checks lasts at most T.
    pub max_spread: Option<Duration>,
    /// `tune.max-checks-per-thread N`: at most N checks run at once on a thread (0 = no limit).
    pub max_per_thread: u32,
}
