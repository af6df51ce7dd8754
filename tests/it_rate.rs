//! `maxconnrate`, `maxsessrate` (global) and `rate-limit sessions` (frontend): beyond the
//! per-second limit, connections wait in the backlog for the next second; none is lost.

mod common;

use common::*;
use std::time::{Duration, Instant};

/// `n` clients at once, each one GET on its own connection; returns how long until all had
/// their answer (all must be 200).
fn burst(port: u16, n: usize) -> Duration {
    let t = Instant::now();
    let hs: Vec<_> = (0..n)
        .map(|i| std::thread::spawn(move || http_get(port, &format!("/c{i}")).status))
        .collect();
    for h in hs {
        assert_eq!(h.join().unwrap(), 200);
    }
    t.elapsed()
}

fn start(global: &str, fe: &str) -> (Sluice, u16, HttpBackend, TempDir) {
    let b = HttpBackend::start("s1");
    let dir = TempDir::new();
    let port = free_port();
    let cfg = format!(
        "global\n    stats socket {} level admin\n{global}\n{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n{fe}\n    default_backend be\nbackend be\n    server s1 {}\n",
        dir.join("admin.sock").display(),
        b.hostport()
    );
    (Sluice::start(&cfg), port, b, dir)
}

/// 12 connections at 5 per second span at least three one-second windows: the last ones
/// cannot be answered before a second has passed. All are answered.
#[test]
fn rate_limit_sessions_spreads_a_burst_over_seconds() {
    let (_s, port, b, dir) = start("", "    rate-limit sessions 5");
    let took = burst(port, 12);
    assert!(
        took >= Duration::from_secs(1),
        "12 sessions at 5/s took {took:?}"
    );
    assert_eq!(b.reqs(), 12);
    assert_eq!(
        stat_column(&dir.join("admin.sock"), "fe", "FRONTEND", "rate_lim"),
        "5"
    );
}

#[test]
fn maxconnrate_and_maxsessrate_limit_the_whole_process() {
    for kw in ["maxconnrate", "maxsessrate"] {
        let (_s, port, b, _dir) = start(&format!("    {kw} 4"), "");
        let took = burst(port, 9);
        assert!(
            took >= Duration::from_secs(1),
            "{kw}: 9 connections at 4/s took {took:?}"
        );
        assert_eq!(b.reqs(), 9);
    }
}

#[test]
fn without_a_limit_a_burst_is_not_held() {
    let (_s, port, b, _dir) = start("", "");
    let took = burst(port, 12);
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(b.reqs(), 12);
}

#[test]
fn rate_limit_config_errors() {
    let (code, err) = Sluice::check(
        "defaults\n    mode http\nfrontend fe\n    bind 127.0.0.1:8080\n    rate-limit connections 3\n",
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("rate-limit") && err.contains("'sessions'"),
        "{err}"
    );
    let (code, err) = Sluice::check("global\n    maxconnrate lots\n");
    assert_ne!(code, 0);
    assert!(err.contains("maxconnrate"), "{err}");
    let (code, err) = Sluice::check(
        "global\n    maxsessrate 100\ndefaults\n    mode http\n    rate-limit sessions 10\nfrontend fe\n    bind 127.0.0.1:8080\n",
    );
    assert_eq!(code, 0, "{err}");
}
