//! Server connection pools: `http-reuse never|safe|aggressive|always`, replay of idempotent
//! requests whose reused connection failed unanswered, `pool-max-conn`, the idle cap.

mod common;

use common::*;
use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

/// One worker thread: pools are per thread, and which thread accepts a connection is the
/// kernel's choice (SO_REUSEPORT), so reuse across client connections is deterministic only
/// with one.
fn proxy(b: &HttpBackend, be_extra: &str, server_opts: &str) -> (Sluice, u16) {
    let port = free_port();
    let global = LOGGED_HTTP.replacen("global\n", "global\n    nbthread 1\n", 1);
    let cfg = format!(
        "{global}    retries 2\nfrontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n{be_extra}\n    server s1 {} {server_opts}\n",
        b.hostport()
    );
    (Sluice::start(&cfg), port)
}

fn post(port: u16, path: &str) -> Response {
    http_raw(
        port,
        format!(
            "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi"
        ),
    )
}

/// `n` clients at once, each a `Connection: close` GET of `/slow<i>` (held by a gated
/// backend until its gate opens).
fn slow_gets(port: u16, n: usize) -> Vec<std::thread::JoinHandle<u16>> {
    (0..n)
        .map(|i| std::thread::spawn(move || http_get(port, &format!("/slow{i}")).status))
        .collect()
}

/// Waits for the clients of [`slow_gets`]; each must have got a 200.
fn all_ok(clients: Vec<std::thread::JoinHandle<u16>>) {
    for c in clients {
        assert_eq!(c.join().unwrap(), 200);
    }
}

/// Server connection ids of the requests the backend saw, in order.
fn conn_ids(b: &HttpBackend) -> Vec<usize> {
    b.requests().iter().map(|r| r.conn_id).collect()
}

#[test]
fn safe_reuses_for_replayable_first_requests_only() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b, "", "");
    // Three `Connection: close` clients in turn, each with one GET: one server connection.
    for i in 0..3 {
        assert_eq!(http_get(port, &format!("/g{i}")).status, 200);
    }
    assert_eq!(
        conn_ids(&b),
        vec![0, 0, 0],
        "GETs share the pooled connection"
    );
    // A first request with a body cannot be replayed: never on a connection that served
    // another client (HAProxy's `safe` rule).
    assert_eq!(post(port, "/p").status, 200);
    assert_ne!(b.last_request().conn_id, 0);
    assert_eq!(b.conns(), 2);
}

/// A later request of a client connection (here a POST, which a first request could not
/// send on a connection another client used) may take an idle pooled connection under
/// `safe`, `aggressive` and `always`; under `never` it gets a new one. The client's own kept
/// connection goes to the other backend, so the pool is what decides.
#[test]
fn later_requests_use_pooled_connections_unless_never() {
    for (mode, reused) in [
        ("safe", true),
        ("aggressive", true),
        ("always", true),
        ("never", false),
    ] {
        let b1 = HttpBackend::start("one");
        let b2 = HttpBackend::start("two");
        let port = free_port();
        let cfg = format!(
            "global\n    nbthread 1\n{DEFAULTS_HTTP}    http-reuse {mode}\n    retries 2\nfrontend fe\n    bind 127.0.0.1:{port}\n    use_backend be2 if {{ path_beg /two }}\n    default_backend be1\nbackend be1\n    server s1 {}\nbackend be2\n    server s2 {}\n",
            b1.hostport(),
            b2.hostport()
        );
        let _s = Sluice::start(&cfg);
        // Another client leaves a connection to be2 behind (in the pool unless `never`).
        assert_eq!(http_get(port, "/two/x").status, 200, "{mode}");
        let mut c = HttpClient::connect(port);
        let post =
            |path: &str| format!("POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi");
        assert_eq!(c.request(post("/one")).status, 200, "{mode}");
        assert_eq!(c.request(post("/two/p")).status, 200, "{mode}");
        let want = if reused { 1 } else { 2 };
        assert_eq!(b2.conns(), want, "{mode}: connections to be2");
        assert_eq!(b2.last_request().target, "/two/p", "{mode}");
    }
}

#[test]
fn never_keeps_server_connections_private() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b, "    http-reuse never", "");
    for i in 0..3 {
        assert_eq!(http_get(port, &format!("/g{i}")).status, 200);
    }
    assert_eq!(conn_ids(&b), vec![0, 1, 2]);
    // Within one client connection the server connection is still kept.
    let mut c = HttpClient::connect(port);
    for i in 0..3 {
        let r = c.request(format!("GET /k{i} HTTP/1.1\r\nHost: t\r\n\r\n"));
        assert_eq!(r.status, 200);
    }
    let ids = conn_ids(&b);
    assert_eq!(&ids[3..], &[3, 3, 3]);
}

#[test]
fn always_reuses_even_for_a_first_post() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b, "    http-reuse always", "");
    assert_eq!(http_get(port, "/g").status, 200);
    assert_eq!(post(port, "/p").status, 200);
    assert_eq!(conn_ids(&b), vec![0, 0]);
}

#[test]
fn aggressive_needs_a_connection_that_proved_reusable_for_a_first_post() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b, "    http-reuse aggressive", "");
    assert_eq!(http_get(port, "/g0").status, 200);
    // The pooled connection has carried one request only: a first POST opens a new one.
    assert_eq!(post(port, "/p0").status, 200);
    assert_eq!(conn_ids(&b), vec![0, 1]);
    // Only one connection was ever in use at once, so only one stays idle (conn 0; conn 1 was
    // closed as surplus). A GET reuses it: it has now carried two requests...
    assert_eq!(http_get(port, "/g1").status, 200);
    assert_eq!(b.last_request().conn_id, 0);
    // ...so a first POST may use it.
    assert_eq!(post(port, "/p1").status, 200);
    assert_eq!(b.last_request().conn_id, 0);
    assert_eq!(b.conns(), 2);
}

#[test]
fn pool_max_conn_zero_disables_pooling() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b, "", "pool-max-conn 0");
    for i in 0..3 {
        assert_eq!(http_get(port, &format!("/g{i}")).status, 200);
    }
    assert_eq!(conn_ids(&b), vec![0, 1, 2]);
}

/// `pool-max-conn 2`: of four server connections used at once, two stay idle, the others
/// are closed as they are released.
#[test]
fn pool_max_conn_keeps_at_most_n_idle() {
    let gate = Gate::new();
    let b = HttpBackend::gated("s1", &gate);
    let (_s, port) = proxy(&b, "", "pool-max-conn 2");
    let clients = slow_gets(port, 4);
    b.wait_requests(4, WAIT);
    assert_eq!(b.open_conns(), 4);
    gate.open();
    all_ok(clients);
    wait_until("two idle server connections left", WAIT, || {
        b.open_conns() == 2
    });
    // The two kept ones serve the next clients: no new connection.
    for i in 0..4 {
        assert_eq!(http_get(port, &format!("/again{i}")).status, 200);
    }
    assert_eq!(b.conns(), 4);
}

#[test]
fn max_reuse_retires_a_connection() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b, "", "max-reuse 2");
    for i in 0..5 {
        assert_eq!(http_get(port, &format!("/g{i}")).status, 200);
    }
    assert_eq!(conn_ids(&b), vec![0, 0, 1, 1, 2]);
}

/// A server that answers the first request of each connection and closes the connection,
/// unanswered, on the next one (the idle-close race, made certain).
fn closes_reused_connections() -> HttpBackend {
    let served: Arc<Mutex<HashMap<usize, usize>>> = Arc::default();
    HttpBackend::with_handler("s1", move |r| {
        let mut m = served.lock().unwrap();
        let n = m.entry(r.conn_id).or_insert(0);
        *n += 1;
        if *n > 1 {
            Reply::Close
        } else {
            Reply::echo_target("s1", r)
        }
    })
}

/// The close race: the server drops a reused connection without answering. The GET is
/// replayed on a new connection and the client never sees an error.
#[test]
fn get_on_a_connection_the_server_closed_is_replayed() {
    let b = closes_reused_connections();
    let (s, port) = proxy(&b, "", "");
    assert_eq!(http_get(port, "/first").status, 200);
    let r = http_get(port, "/second");
    assert_eq!(r.status, 200, "{}", r.body_str());
    assert_eq!(r.body_str(), "/second");
    let targets: Vec<(usize, String)> = b
        .requests()
        .iter()
        .map(|r| (r.conn_id, r.target.clone()))
        .collect();
    assert_eq!(
        targets,
        vec![
            (0, "/first".to_string()),
            (0, "/second".to_string()),
            (1, "/second".to_string())
        ]
    );
    let line = s.wait_log_line(|l| l.contains("/second"), WAIT);
    assert!(line.contains(" 200 "), "{line}");
}

/// The replay of a lost GET is counted: `show pools` (server and thread), the CSV's
/// `pool_replayed`; the failed connection counts as a reuse, the replay as a new connection.
#[test]
fn a_replayed_request_is_counted() {
    let b = closes_reused_connections();
    let (_s, port, dir) = proxy1(b.addr, "    retries 2\n", "", "");
    let sock = dir.join("admin.sock");
    assert_eq!(http_get(port, "/first").status, 200);
    wait_until("the first connection is pooled", WAIT, || {
        pools(&sock).0["safe"] + pools(&sock).0["idle"] == 1
    });
    assert_eq!(pools(&sock).0["replayed"], 0);
    let r = http_get(port, "/second");
    assert_eq!(r.status, 200, "{}", r.body_str());
    wait_until("the replay is counted", WAIT, || {
        pools(&sock).0["replayed"] == 1
    });
    let (srv, threads) = pools(&sock);
    assert_eq!(threads[0]["replayed"], 1, "counted for the thread too");
    assert_eq!(srv["new"], 2, "the first connection and the replay's");
    assert_eq!(stat_column(&sock, "be", "s1", "pool_replayed"), "1");
    assert_eq!(b.reqs(), 3);
}

/// A server that answers one request per connection, then, once the connection has been
/// idle until `speak` opens, sends an unsolicited `408` and closes (what HAProxy, nginx and
/// Apache do to idle clients). The pooled connection is dropped when the 408 arrives; the next
/// request goes on a new connection and never sees that 408.
#[test]
fn an_unsolicited_408_on_an_idle_connection_never_reaches_a_client() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let speak = Gate::new();
    let opened = Arc::new(AtomicUsize::new(0));
    let server = {
        let (speak, opened) = (speak.clone(), opened.clone());
        TcpBackend::with_handler(move |c, _| {
            let n = opened.fetch_add(1, SeqCst);
            let mut w = Wire::new(c);
            if let Ok(Some(head)) = w.read_until(b"\r\n\r\n") {
                // The POST's 2-byte body: read, so that the close below is not a reset.
                if head.starts_with(b"POST") && w.take(2).is_err() {
                    return;
                }
                let body = format!("c{n}");
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = w.stream.write_all(resp.as_bytes());
                speak.wait();
                let _ = w.stream.write_all(
                    b"HTTP/1.1 408 Request Time-out\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            }
        })
    };
    let addr = server.addr;
    let (_s, port, dir) = proxy1(
        addr,
        "    retries 2\n",
        "    http-reuse always\n",
        "pool-purge-delay 1h",
    );
    let sock = dir.join("admin.sock");
    let r = http_get(port, "/a");
    assert_eq!((r.status, r.body_str()), (200, "c0".to_string()));
    wait_until("the connection is idle", WAIT, || {
        let (s, _) = pools(&sock);
        s["idle"] == 1 && s["idle_max"] == 1
    });
    speak.open();
    wait_until("the connection that spoke is dropped", WAIT, || {
        let (s, _) = pools(&sock);
        s["idle"] == 0 && s["purged"] == 1
    });
    // Under `always` a POST would take any idle connection: there is none left to take.
    let r = post(port, "/p");
    assert_eq!((r.status, r.body_str()), (200, "c1".to_string()));
    assert_eq!(opened.load(SeqCst), 2);
    assert_eq!(pools(&sock).0["replayed"], 0, "nothing was lost: no replay");
}

/// With `retries 0` sluice cannot replay anything, so `safe` is HAProxy's own rule again: a
/// first GET goes on a new connection, never on one that served another client, and the
/// close race cannot cost it a 502.
#[test]
fn safe_without_retries_puts_first_gets_on_new_connections() {
    let b = closes_reused_connections();
    let (_s, port) = proxy(&b, "    retries 0", "");
    for i in 0..3 {
        let r = http_get(port, &format!("/g{i}"));
        assert_eq!(r.status, 200, "{}", r.body_str());
    }
    assert_eq!(
        conn_ids(&b),
        vec![0, 1, 2],
        "one new connection per first request"
    );
}

/// Under `always`, a POST that a reused connection loses cannot be replayed: 502, as HAProxy.
#[test]
fn post_lost_on_a_reused_connection_is_not_replayed() {
    let b = closes_reused_connections();
    let (_s, port) = proxy(&b, "    http-reuse always", "");
    assert_eq!(http_get(port, "/first").status, 200);
    assert_eq!(post(port, "/p").status, 502);
    assert_eq!(b.reqs(), 2, "the POST was sent once");
}

/// Idle connections never outnumber what was in use at once: sequential `Connection: close`
/// clients keep one server connection, not one per request.
#[test]
fn sequential_close_clients_keep_one_server_connection() {
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b, "", "");
    for i in 0..20 {
        assert_eq!(http_get(port, &format!("/r{i}")).status, 200);
    }
    assert_eq!(b.conns(), 1);
    assert_eq!(b.open_conns(), 1);
}

/// The pools are visible: `show pools` and the CSV's idle-connection columns.
#[test]
fn pool_state_is_visible_on_the_stats_socket() {
    let b = HttpBackend::start("s1");
    let (_s, port, dir) = proxy1(b.addr, "", "", "pool-max-conn 8");
    let sock = dir.join("admin.sock");
    for i in 0..3 {
        assert_eq!(http_get(port, &format!("/r{i}")).status, 200);
    }
    // Counters are updated after the response is sent: poll until the last one is in.
    let mut out = String::new();
    wait_until("show pools counts 3 requests", WAIT, || {
        out = stats_cli(&sock, "show pools");
        out.contains("be/s1: idle=0 safe=1 used=0 new=1 reused=2 ")
    });
    assert!(out.contains("replayed=0"), "{out}");
    let col = |name: &str| stat_column(&sock, "be", "s1", name);
    assert_eq!(col("srv_icur"), "1");
    assert_eq!(col("src_ilim"), "8");
    assert_eq!(col("safe_conn_cur"), "1");
    assert_eq!(col("idle_conn_cur"), "0");
    assert_eq!(col("used_conn_cur"), "0");
    assert_eq!(col("reuse"), "2");
    assert_eq!(col("pool_idle_max"), "1");
    assert_eq!(col("pool_purged"), "0");
    assert_eq!(col("pool_replayed"), "0");
    assert_eq!(col("pool_takeovers"), "0");
}

/// One worker thread and an admin stats socket (`admin.sock` in the returned directory);
/// `defaults_extra` and `be_extra` are whole lines, `server_opts` go on the one server.
fn proxy1(
    server: std::net::SocketAddr,
    defaults_extra: &str,
    be_extra: &str,
    server_opts: &str,
) -> (Sluice, u16, TempDir) {
    let dir = TempDir::new();
    let port = free_port();
    let cfg = format!(
        "global\n    nbthread 1\n    stats socket {} level admin\n{DEFAULTS_HTTP}{defaults_extra}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n{be_extra}    server s1 {server} {server_opts}\n",
        dir.join("admin.sock").display(),
    );
    (Sluice::start(&cfg), port, dir)
}

/// Two worker threads and a stats socket; `server_opts` on the one server, `global_extra`
/// in `global`.
fn proxy2(b: &HttpBackend, global_extra: &str, server_opts: &str) -> (Sluice, u16, TempDir) {
    let dir = TempDir::new();
    let port = free_port();
    let cfg = format!(
        "global\n    nbthread 2\n    stats socket {} level admin\n{global_extra}\n{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    server s1 {} {server_opts}\n",
        dir.join("admin.sock").display(),
        b.hostport()
    );
    (Sluice::start(&cfg), port, dir)
}

/// `key=value` of the `be/s1` line of `show pools`, and the same of each thread line.
fn pools(sock: &std::path::Path) -> (HashMap<String, u64>, Vec<HashMap<String, u64>>) {
    pool_line(sock, "be/s1")
}

/// Sequential `Connection: close` clients, each waiting until the previous server connection
/// is back in its pool; returns the per-thread lines at the end.
fn sequential_clients(port: u16, sock: &std::path::Path, n: usize) -> Vec<HashMap<String, u64>> {
    for i in 0..n {
        assert_eq!(http_get(port, &format!("/r{i}")).status, 200);
        wait_until("the server connection is released", WAIT, || {
            pools(sock).0["used"] == 0
        });
    }
    let (_, threads) = pools(sock);
    assert_eq!(threads.len(), 2);
    // Which thread accepts a client is the kernel's choice (SO_REUSEPORT hashing): over 24
    // clients both are all but certain to serve some.
    for t in &threads {
        assert!(
            t["new"] + t["reused"] + t["takeovers"] > 0,
            "a thread served no client: {threads:?}"
        );
    }
    threads
}

/// With two threads, the one idle server connection follows the clients: the thread that
/// accepts a client without an idle connection of its own takes the other's over.
#[test]
fn takeover_moves_the_idle_connection_to_the_thread_that_needs_it() {
    let b = HttpBackend::start("s1");
    let (_s, port, dir) = proxy2(&b, "", "");
    let sock = dir.join("admin.sock");
    sequential_clients(port, &sock, 24);
    assert_eq!(b.conns(), 1, "one server connection served both threads");
    let (srv, threads) = pools(&sock);
    assert!(srv["takeovers"] >= 1, "{srv:?}");
    assert_eq!(
        srv["takeovers"],
        threads.iter().map(|t| t["takeovers"]).sum::<u64>()
    );
    assert_eq!(srv["new"], 1);
    // The stats CSV (and so the page) shows the same count, for the server and its backend.
    let takeovers = srv["takeovers"].to_string();
    assert_eq!(stat_column(&sock, "be", "s1", "pool_takeovers"), takeovers);
    assert_eq!(
        stat_column(&sock, "be", "BACKEND", "pool_takeovers"),
        takeovers
    );
}

/// `pool-max-conn` bounds the server's idle connections over all threads, as HAProxy's
/// per-server limit does: eight clients at once on two threads leave one idle connection,
/// not one per thread.
#[test]
fn pool_max_conn_counts_every_thread() {
    let gate = Gate::new();
    let b = HttpBackend::gated("s1", &gate);
    let (_s, port, dir) = proxy2(&b, "", "pool-max-conn 1");
    let sock = dir.join("admin.sock");
    let clients = slow_gets(port, 8);
    b.wait_requests(8, WAIT);
    assert_eq!(
        pools(&sock).0["used"],
        8,
        "eight server connections in use at once"
    );
    gate.open();
    all_ok(clients);
    wait_until("every server connection is released", WAIT, || {
        pools(&sock).0["used"] == 0
    });
    let (srv, threads) = pools(&sock);
    assert_eq!(srv["idle"] + srv["safe"], 1, "{srv:?} {threads:?}");
    assert_eq!(
        threads.iter().map(|t| t["idle"]).sum::<u64>(),
        1,
        "{threads:?}"
    );
    wait_until("the others are closed", WAIT, || b.open_conns() == 1);
}

/// `Connection: close` clients at once on two threads (HAProxy 2.0's pile-up case): the
/// server connections left at the end stay within twice the client concurrency, and most
/// requests reuse a pooled connection.
#[test]
fn concurrent_close_clients_do_not_pile_up_server_connections() {
    const CLIENTS: usize = 8;
    const EACH: usize = 25;
    let b = HttpBackend::start("s1");
    let (_s, port, dir) = proxy2(&b, "", "");
    let sock = dir.join("admin.sock");
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            std::thread::spawn(move || {
                for i in 0..EACH {
                    assert_eq!(http_get(port, &format!("/c{c}/{i}")).status, 200);
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    wait_until("every server connection is released", WAIT, || {
        pools(&sock).0["used"] == 0
    });
    assert_eq!(b.reqs(), CLIENTS * EACH);
    assert!(
        b.open_conns() <= 2 * CLIENTS,
        "{} server connections left open for {CLIENTS} clients",
        b.open_conns()
    );
    assert!(
        b.conns() * 4 <= CLIENTS * EACH,
        "{} server connections for {} requests",
        b.conns(),
        CLIENTS * EACH
    );
}

/// Below `pool-low-conn` a thread connects instead of taking over: each thread ends up with
/// a connection of its own, and nothing moves.
#[test]
fn no_takeover_below_pool_low_conn() {
    let b = HttpBackend::start("s1");
    let (_s, port, dir) = proxy2(&b, "", "pool-low-conn 2");
    let sock = dir.join("admin.sock");
    sequential_clients(port, &sock, 24);
    assert_eq!(b.conns(), 2, "one server connection per thread");
    assert_eq!(pools(&sock).0["takeovers"], 0);
}

/// `tune.idle-pool.shared off`: threads never take each other's idle connections.
#[test]
fn no_takeover_when_idle_pools_are_not_shared() {
    let b = HttpBackend::start("s1");
    let (_s, port, dir) = proxy2(&b, "    tune.idle-pool.shared off", "");
    let sock = dir.join("admin.sock");
    sequential_clients(port, &sock, 24);
    assert_eq!(b.conns(), 2);
    assert_eq!(pools(&sock).0["takeovers"], 0);
}

/// An idle server connection the server closes leaves the pool at once, without waiting for
/// a request or the purge (`pool-purge-delay` is an hour here).
#[test]
fn an_idle_connection_closed_by_the_server_leaves_the_pool_at_once() {
    // A server that answers one request, keeps the connection, and closes it when told.
    let close = Gate::new();
    let server = {
        let close = close.clone();
        TcpBackend::with_handler(move |c, _| {
            let mut w = Wire::new(c);
            if let Ok(Some(_)) = w.read_until(b"\r\n\r\n") {
                let _ = w
                    .stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
                close.wait();
            }
        })
    };
    let addr = server.addr;
    let (_s, port, dir) = proxy1(addr, "", "", "pool-purge-delay 1h");
    let sock = dir.join("admin.sock");
    assert_eq!(http_get(port, "/a").status, 200);
    wait_until("the connection is idle", WAIT, || {
        pools(&sock).0["idle"] == 1
    });
    assert_eq!(pools(&sock).0["purged"], 0);
    // Idle for a while (the idle time is what is learned; closes sooner than 100 ms are not
    // taken for a timeout).
    std::thread::sleep(std::time::Duration::from_millis(150));
    close.open();
    wait_until("the closed connection is dropped", WAIT, || {
        let (s, _) = pools(&sock);
        s["idle"] == 0 && s["purged"] == 1
    });
    assert_eq!(pools(&sock).1[0]["purged"], 1, "counted for the thread too");
    // The idle time after which the server closed is learned as its keep-alive timeout.
    let learned = pools(&sock).0.get("ka_timeout").copied();
    assert!(
        learned.is_some_and(|ms| ms >= 150),
        "{learned:?} {}",
        stats_cli(&sock, "show pools")
    );
}

/// A server whose responses carry `Keep-Alive: KA`.
fn announces_keep_alive(ka: &'static str) -> HttpBackend {
    HttpBackend::with_handler("s1", move |r| Reply::Full {
        status: 200,
        headers: vec![("Keep-Alive".into(), ka.into())],
        body: r.target.clone().into_bytes(),
    })
}

/// `Keep-Alive: timeout=1`: a connection idle for most of that second is not reused (the
/// server may be closing it right now); a new one is opened instead, and the old one closed.
/// The same wait without the header reuses the connection.
#[test]
fn a_learned_keep_alive_timeout_is_respected() {
    let idle = std::time::Duration::from_millis(800);
    let b = announces_keep_alive("timeout=1, max=50");
    let (s, port) = proxy(&b, "", "");
    assert_eq!(http_get(port, "/a").status, 200);
    // The elapsed idle time is what is tested here, not a synchronisation.
    std::thread::sleep(idle);
    let r = http_get(port, "/b");
    assert_eq!(r.status, 200);
    assert_eq!(
        conn_ids(&b),
        vec![0, 1],
        "not reused after 3/4 of the timeout"
    );
    // The header is hop-by-hop: the client never sees it.
    assert!(r.header("keep-alive").is_none());
    drop(s);
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b, "", "");
    assert_eq!(http_get(port, "/a").status, 200);
    std::thread::sleep(idle);
    assert_eq!(http_get(port, "/b").status, 200);
    assert_eq!(conn_ids(&b), vec![0, 0], "reused without a known timeout");
}

/// `Keep-Alive: max=0`: the server allows no further request on the connection; it is not
/// pooled.
#[test]
fn a_connection_with_no_requests_left_is_not_pooled() {
    let b = announces_keep_alive("timeout=5, max=0");
    let (_s, port) = proxy(&b, "", "");
    for i in 0..3 {
        assert_eq!(http_get(port, &format!("/r{i}")).status, 200);
    }
    assert_eq!(conn_ids(&b), vec![0, 1, 2]);
}

/// A server closing idle connections after `idle`: each request is answered 200 with its
/// target (and, for a body, the body); the targets seen are recorded in order.
fn closes_idle_after(idle: std::time::Duration) -> (TcpBackend, Arc<Mutex<Vec<String>>>) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let server = TcpBackend::with_handler(move |c, _| {
        c.set_read_timeout(Some(idle)).unwrap();
        let mut w = Wire::new(c);
        // Idle past the timeout (or the peer closed): the read fails and the connection closes.
        while let Ok(Some(head)) = w.read_until(b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
            let target = head.split(' ').nth(1).unwrap_or("").to_string();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if w.take(len).is_err() {
                return;
            }
            log.lock().unwrap().push(target.clone());
            let resp = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{target}",
                target.len()
            );
            if w.stream.write_all(resp.as_bytes()).is_err() {
                return;
            }
        }
    });
    (server, seen)
}

/// A server that closes idle connections after 200 ms, asked again right around that time:
/// no GET ever fails (lost races are replayed), no POST is ever sent twice, and once the
/// close was seen, its timeout is learned and reuse stops before it.
#[test]
fn a_server_closing_idle_connections_never_costs_a_get_and_never_duplicates_a_post() {
    let pause = std::time::Duration::from_millis(200);
    let (server, seen) = closes_idle_after(pause);
    let addr = server.addr;
    let port = free_port();
    let global = LOGGED_HTTP.replacen("global\n", "global\n    nbthread 1\n", 1);
    let cfg = format!(
        "{global}frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\nbackend be\n    http-reuse always\n    server s1 {addr}\n"
    );
    let _s = Sluice::start(&cfg);
    let mut c = HttpClient::connect(port);
    let mut posts_ok = 0;
    for i in 0..8 {
        let r = c.request(format!("GET /g{i} HTTP/1.1\r\nHost: t\r\n\r\n"));
        assert_eq!(r.status, 200, "GET {i}: {}", r.body_str());
        // The pause races the server's idle close: the point of the test.
        std::thread::sleep(pause);
        let r = c.request(format!(
            "POST /p{i} HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi"
        ));
        if r.status == 200 {
            posts_ok += 1;
        } else {
            assert_eq!(r.status, 502);
            c = HttpClient::connect(port);
        }
        std::thread::sleep(pause);
    }
    let seen = seen.lock().unwrap();
    for i in 0..8 {
        let p = format!("/p{i}");
        assert!(
            seen.iter().filter(|t| **t == p).count() <= 1,
            "{p} sent twice: {seen:?}"
        );
    }
    // After the first observed close the timeout is known: later POSTs go on new
    // connections instead of racing.
    assert!(posts_ok >= 6, "{posts_ok} of 8 POSTs answered: {seen:?}");
}

/// A server that challenges requests without `Authorization` with a 401 carrying
/// `WWW-Authenticate: SCHEME`.
fn challenges(scheme: &'static str) -> HttpBackend {
    HttpBackend::with_handler("s1", move |r| {
        if r.header("authorization").is_some() {
            Reply::echo_target("s1", r)
        } else {
            Reply::Full {
                status: 401,
                headers: vec![("WWW-Authenticate".into(), scheme.into())],
                body: b"auth".to_vec(),
            }
        }
    })
}

/// NTLM authenticates the connection, not the request: after such a challenge the server
/// connection stays with its client, even under `http-reuse always`, and another client never
/// gets it. A per-request scheme (Basic) leaves the connection shared.
#[test]
fn connection_based_auth_makes_the_connection_private() {
    for (scheme, private) in [
        ("NTLM", true),
        ("Negotiate", true),
        ("Basic realm=\"x\"", false),
    ] {
        let b = challenges(scheme);
        let (_s, port) = proxy(&b, "    http-reuse always", "");
        let mut a = HttpClient::connect(port);
        assert_eq!(a.get("/a1").status, 401);
        let first = b.last_request().conn_id;
        // Another client meanwhile.
        let r = http_raw(
            port,
            "GET /b HTTP/1.1\r\nHost: t\r\nAuthorization: x\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(r.status, 200);
        let other = b.last_request().conn_id;
        let r = a.request("GET /a2 HTTP/1.1\r\nHost: t\r\nAuthorization: NTLM abc\r\n\r\n");
        assert_eq!(r.status, 200);
        let again = b.last_request().conn_id;
        if private {
            assert_ne!(
                other, first,
                "{scheme}: another client got the private connection"
            );
            assert_eq!(
                again, first,
                "{scheme}: the client lost its authenticated connection"
            );
        } else {
            assert_eq!(other, first, "{scheme}: the connection is shared as usual");
        }
    }
}

/// `pool-conn-name req.hdr(host)`: an idle connection is reused only for a request with the
/// same Host; `str(...)` names them all alike.
#[test]
fn pool_conn_name_separates_idle_connections() {
    let get = |port: u16, host: &str, path: &str| {
        let r = http_raw(
            port,
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        );
        assert_eq!(r.status, 200);
    };
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b, "", "pool-conn-name req.hdr(host)");
    get(port, "a.example", "/1");
    get(port, "b.example", "/2");
    get(port, "A.example", "/3");
    get(port, "a.example", "/4");
    // Host values are compared as sent (HAProxy compares the expression's string).
    assert_eq!(conn_ids(&b), vec![0, 1, 2, 0]);
    let b = HttpBackend::start("s1");
    let (_s, port) = proxy(&b, "", "pool-conn-name str(all)");
    get(port, "a.example", "/1");
    get(port, "b.example", "/2");
    assert_eq!(conn_ids(&b), vec![0, 0]);
    let (code, err) = Sluice::check(
        "defaults\n    mode http\nbackend be\n    server s1 127.0.0.1:1 pool-conn-name req.hdr(host),lower\n",
    );
    assert_ne!(code, 0);
    assert!(
        err.contains(":4") && err.contains("unsupported expression"),
        "{err}"
    );
}

/// `pool-purge-delay`: idle connections beyond what the last period needed are closed, half
/// of the surplus per period, until none is left once traffic stopped.
#[test]
fn purge_closes_idle_connections_no_longer_needed() {
    let gate = Gate::new();
    let b = HttpBackend::gated("s1", &gate);
    let (_s, port, dir) = proxy1(b.addr, "", "", "pool-purge-delay 200ms");
    let sock = dir.join("admin.sock");
    // Four requests held by the server at once: four server connections in use together.
    let hs = slow_gets(port, 4);
    wait_until("four server connections", WAIT, || b.open_conns() == 4);
    gate.open();
    all_ok(hs);
    wait_until("all four idle", WAIT, || {
        let (s, _) = pools(&sock);
        s["idle"] + s["safe"] == 4 || s["purged"] > 0
    });
    // No more traffic: every period closes half of what is left (4 -> 2 -> 1 -> 0).
    wait_until("the purge emptied the pool", WAIT, || {
        let (s, _) = pools(&sock);
        s["idle"] + s["safe"] == 0 && s["purged"] == 4
    });
    wait_until("the server saw them close", WAIT, || b.open_conns() == 0);
}
