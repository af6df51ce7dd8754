//! Dynamic server limits: `minconn` with the backend's `fullconn` (a server accepts
//! `max(minconn, maxconn * load / fullconn)` requests at once, the load counting the
//! backend's queued requests as HAProxy's `beconn` does), and `option prefer-last-server`.

mod common;

use common::*;
use std::path::Path;

fn proxy(be_extra: &str, servers: &str) -> (Sluice, u16, TempDir) {
    let dir = TempDir::new();
    let sock = dir.join("admin.sock");
    let port = free_port();
    let cfg = format!(
        "global\n    stats socket {} level admin\n{DEFAULTS_HTTP}    timeout queue 10s\n\
         frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n\
         backend be\n{be_extra}\n{servers}",
        sock.display()
    );
    (Sluice::start(&cfg), port, dir)
}

fn col(dir: &TempDir, srv: &str, c: &str) -> String {
    stat_column(Path::new(&dir.join("admin.sock")), "be", srv, c)
}

/// Requests each on their own connection, in the background; they answer once `gate` opens.
fn spawn_gets(port: u16, n: usize) -> Vec<std::thread::JoinHandle<u16>> {
    (0..n)
        .map(|i| {
            std::thread::spawn(move || {
                let mut c = HttpClient::connect(port);
                c.get(&format!("/slow{i}")).status
            })
        })
        .collect()
}

#[test]
fn minconn_limits_a_lightly_loaded_backend() {
    let gate = Gate::new();
    let b = HttpBackend::gated("s1", &gate);
    // maxconn 4, fullconn 20: below a load of 10, the limit is minconn 2.
    let (_s, port, dir) = proxy(
        "    fullconn 20",
        &format!("    server s1 {} minconn 2 maxconn 4\n", b.hostport()),
    );
    let clients = spawn_gets(port, 3);
    wait_until("two requests at the server", WAIT, || b.reqs() == 2);
    // Queued in the backend (no server chosen yet).
    wait_until("the third queued", WAIT, || {
        col(&dir, "BACKEND", "qcur") == "1"
    });
    assert_eq!(col(&dir, "s1", "scur"), "2");
    gate.open();
    for c in clients {
        assert_eq!(c.join().unwrap(), 200);
    }
    assert_eq!(b.reqs(), 3);
}

#[test]
fn without_minconn_maxconn_applies_at_once() {
    let gate = Gate::new();
    let b = HttpBackend::gated("s1", &gate);
    let (_s, port, dir) = proxy(
        "    fullconn 20",
        &format!("    server s1 {} maxconn 4\n", b.hostport()),
    );
    let clients = spawn_gets(port, 3);
    wait_until("three requests at the server", WAIT, || b.reqs() == 3);
    assert_eq!(col(&dir, "BACKEND", "qcur"), "0");
    gate.open();
    for c in clients {
        assert_eq!(c.join().unwrap(), 200);
    }
}

#[test]
fn prefer_last_server_keeps_a_connection_on_its_server() {
    let (b1, b2) = (HttpBackend::start("s1"), HttpBackend::start("s2"));
    let servers = format!(
        "    server s1 {}\n    server s2 {}\n",
        b1.hostport(),
        b2.hostport()
    );
    let (_s, port, _dir) = proxy(
        "    balance roundrobin\n    option prefer-last-server",
        &servers,
    );
    let mut c = HttpClient::connect(port);
    let first = c.get("/").server();
    for _ in 0..5 {
        assert_eq!(c.get("/").server(), first);
    }
    drop(c);
    // Without the option, round robin alternates within a connection too.
    let (_s2, port2, _dir2) = proxy("    balance roundrobin", &servers);
    let mut c = HttpClient::connect(port2);
    let a = c.get("/").server();
    let b = c.get("/").server();
    assert_ne!(a, b);
}
