//! sluice: a HAProxy-compatible TCP/HTTP load balancer and reverse proxy.
//!
//! Map (see DESIGN.md): `config` reads haproxy.cfg; `listener` binds and admits; `worker` runs
//! one event loop per thread; `stream` carries a connection (`tcp` tunnel or `http`
//! transactions); `backend` + `lb` pick servers and queue; `log` writes access logs; `stats`
//! renders counters (CSV, `show info`), `prometheus` the `/metrics` exposition with the
//! latency histograms `histogram` keeps, and `cli` serves the `stats socket` commands; `tls`
//! owns certificates, rustls configurations and handshakes, `handshake` when client
//! handshakes may start on a thread.

/// `eprintln!` in a single write: lines from the master and its workers (or from several
/// threads) share stderr, and a line written in one `write` (under `PIPE_BUF`) never
/// interleaves with another, where `eprintln!`'s piecewise writes do.
#[macro_export]
macro_rules! say {
    ($($t:tt)*) => {{
        let mut line = format!($($t)*);
        line.push('\n');
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    }};
}

pub mod backend;
pub mod cache;
pub mod check;
pub mod cli;
pub mod cli_args;
pub mod compression;
pub mod config;
pub mod cookie;
pub mod errorfile;
pub mod handshake;
pub mod histogram;
pub mod http;
pub mod lb;
pub mod listener;
pub mod log;
pub mod lua;
pub mod map;
pub mod master;
pub mod peers;
pub mod pool;
pub mod prometheus;
pub mod reload;
pub mod resolvers;
pub mod runtime;
pub mod send_proxy;
pub mod spoe;
pub mod stats;
pub mod stats_page;
pub mod stick;
pub mod stream;
pub mod sys;
pub mod tls;
pub mod userlist;
pub mod util;
pub mod vars;
pub mod worker;

pub use runtime::{run, version_string};
