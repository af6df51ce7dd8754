//! `peers` sections: two sluice processes keep their stick tables in step over HAProxy's
//! peers protocol (the same bytes HAProxy 2.6 exchanges; `bench/peers_diff.py` runs sluice
//! against HAProxy 2.6.12 itself). Real processes, real sockets, counters read back over
//! each process's stats socket.

mod common;

use common::*;
use std::net::Ipv4Addr;

/// Two peers' configurations: peer `a` and peer `b`, each with a stats socket, an HTTP
/// frontend that counts requests per `x-user` header in the section's table `t`, and a
/// backend table (`b_ip`, by source address) shared through `stick-table ... peers`.
struct Pair {
    dir: TempDir,
    http: [u16; 2],
    peer: [u16; 2],
}

impl Pair {
    fn new() -> Pair {
        Pair {
            dir: TempDir::new(),
            http: [free_port(), free_port()],
            peer: [free_port(), free_port()],
        }
    }

    fn sock(&self, i: usize) -> std::path::PathBuf {
        self.dir.join(&format!("{i}.sock"))
    }

    fn config(&self, i: usize) -> String {
        format!(
            "global\n    stats socket {} level admin\n\
defaults\n    mode http\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
peers mesh\n    peer a 127.0.0.1:{}\n    peer b 127.0.0.1:{}\n\
\x20   table t type string len 32 size 100 expire 60s store gpc0,http_req_cnt,http_req_rate(10s)\n\
backend b_ip\n    stick-table type ip size 100 expire 60s store gpc0 peers mesh\n\
frontend fe\n    bind 127.0.0.1:{}\n\
\x20   http-request track-sc0 req.hdr(x-user) table mesh/t\n\
\x20   http-request sc-inc-gpc0(0)\n\
\x20   http-request track-sc1 src table b_ip\n\
\x20   http-request sc-inc-gpc0(1)\n\
\x20   http-request return status 200\n",
            self.sock(i).display(),
            self.peer[0],
            self.peer[1],
            self.http[i]
        )
    }

    /// Starts peer `i` (`a` or `b`, chosen with `-L`).
    fn start(&self, i: usize) -> Sluice {
        Sluice::builder(&self.config(i))
            .arg("-L")
            .arg(["a", "b"][i])
            .start()
    }

    fn request(&self, i: usize, user: &str) {
        let r = http_raw(
            self.http[i],
            format!("GET / HTTP/1.1\r\nHost: x\r\nx-user: {user}\r\nConnection: close\r\n\r\n"),
        );
        assert_eq!(r.status, 200);
    }

    /// The line of `key` in table `table` of peer `i`, once `ready` holds for it; if it does
    /// not in time, the failure shows the line and both processes' `show peers`.
    fn entry(&self, i: usize, table: &str, key: &str, ready: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let last = table_entry(&self.sock(i), table, key);
            if let Some(l) = last.as_deref().filter(|l| ready(l)) {
                return l.to_string();
            }
            if std::time::Instant::now() > deadline {
                panic!(
                    "timed out waiting for entry {key} of {table} on peer {i}; last: {last:?}\n\
                     a: {}\nb: {}",
                    stats_cli(&self.sock(0), "show peers"),
                    stats_cli(&self.sock(1), "show peers")
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

#[test]
fn two_processes_keep_their_tables_in_step_both_ways() {
    let p = Pair::new();
    let _a = p.start(0);
    let _b = p.start(1);
    // Three requests of alice on a: b's table has alice's counters and rate.
    for _ in 0..3 {
        p.request(0, "alice");
    }
    let line = p.entry(1, "mesh/t", "alice", |l| l.contains("http_req_cnt=3"));
    assert!(line.contains("gpc0=3"), "{line}");
    assert!(line.contains("http_req_rate(10000)=3"), "{line}");
    // The backend's table too (by source address); then the other way. (Peers exchange
    // values, not increments: each process counts on from what it was last taught.)
    p.entry(1, "b_ip", "127.0.0.1", |l| l.contains("gpc0=3"));
    p.request(1, "bob");
    let line = p.entry(0, "mesh/t", "bob", |l| l.contains("http_req_cnt=1"));
    assert!(line.contains("gpc0=1"), "{line}");
    p.entry(0, "b_ip", "127.0.0.1", |l| l.contains("gpc0=4"));
    p.entry(1, "b_ip", "127.0.0.1", |l| l.contains("gpc0=4"));
    // A CLI change is an update like any other.
    stats_cli(&p.sock(1), "set table mesh/t key carol data.gpc0 7");
    p.entry(0, "mesh/t", "carol", |l| l.contains("gpc0=7"));
    // `show peers`: b is a remote peer with an established session, its tables listed.
    let out = stats_cli(&p.sock(0), "show peers");
    let b_line = out
        .lines()
        .find(|l| l.contains(" id=b("))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        b_line.contains("id=b(remote,active)") && b_line.contains("last_status=ESTA"),
        "{out}"
    );
    assert!(out.contains(" id=a(local,"), "{out}");
    assert!(out.contains("id=mesh/t local_id=1"), "{out}");
    assert!(out.contains("id=b_ip local_id=2"), "{out}");
    assert_eq!(stats_cli(&p.sock(0), "show peers nosuch"), "\n");
}

#[test]
fn a_restarted_process_learns_the_tables_from_its_peer() {
    let p = Pair::new();
    let _a = p.start(0);
    let b = p.start(1);
    p.request(0, "alice");
    p.request(1, "bob");
    p.entry(1, "mesh/t", "alice", |l| l.contains("gpc0=1"));
    p.entry(0, "mesh/t", "bob", |l| l.contains("gpc0=1"));
    // b goes away and comes back empty: it asks a for everything (a resync), including
    // what it had taught a itself.
    drop(b);
    let _b = p.start(1);
    let line = p.entry(1, "mesh/t", "alice", |l| l.contains("gpc0=1"));
    assert!(line.contains("http_req_cnt=1"), "{line}");
    p.entry(1, "mesh/t", "bob", |l| l.contains("gpc0=1"));
    // The entries keep their time left (sent with each entry of a resync).
    let exp: u64 = line
        .split(" exp=")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("exp=");
    assert!(exp > 0 && exp <= 60_000, "{line}");
}

#[test]
fn peers_sections_are_checked_as_haproxy_checks_them() {
    let good = "peers mesh\n    peer a 127.0.0.1:10000\n    peer b 127.0.0.1:10001\n";
    // The local peer by `-L`, by `localpeer`, in `$HAPROXY_LOCALPEER`.
    let cfg = format!(
        "{good}backend x\n    stick-table type ip size 10 peers mesh\n    server s 127.0.0.1:1\n"
    );
    let dir = TempDir::new();
    let f = dir.write("p.cfg", &cfg);
    let out = run_cli(&["-c", "-L", "a", "-f", f.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!out.stderr.contains("Removing"), "{}", out.stderr);
    // No peer has this process's name: the section is dropped with a warning, as HAProxy
    // does, and the file is valid.
    let out = run_cli(&["-c", "-L", "zz", "-f", f.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("Removing incomplete section 'peers mesh' (no peer named 'zz')"),
        "{}",
        out.stderr
    );
    let (code, err) = Sluice::check(&format!("global\n    localpeer b\n{good}"));
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("Removing"), "{err}");
    let f2 = dir.write(
        "env.cfg",
        "peers mesh\n    peer \"$HAPROXY_LOCALPEER\" 127.0.0.1:10000\n",
    );
    let out = run_cli(&["-c", "-L", "node7", "-f", f2.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!out.stderr.contains("Removing"), "{}", out.stderr);
    // Errors name the line and the reason.
    for (cfg, want) in [
        (
            "peers mesh\n    peer a\n",
            ":2: 'peer' in peers 'mesh': 'peer' expects a name and an address",
        ),
        (
            "peers mesh\n    peer a 127.0.0.1:1 shard 1\n",
            "'peer' option 'shard' is not supported by sluice in a peers section",
        ),
        (
            "peers mesh\n    pear a 127.0.0.1:1\n",
            "unknown keyword 'pear' in peers section",
        ),
        (
            "peers mesh\n    peer a 127.0.0.1:1\n    peer a 127.0.0.1:2\n",
            "peer 'a' is already defined in this section",
        ),
        (
            "backend x\n    stick-table type ip size 10 peers nowhere\n",
            "unable to find sync peers 'nowhere'",
        ),
    ] {
        let (code, err) = Sluice::check(cfg);
        assert_eq!(code, 1, "{cfg}");
        assert!(err.contains(want), "{cfg}\n{err}");
    }
}

#[test]
fn a_reload_hands_the_tables_over_to_the_next_process() {
    // HAProxy's usual way to keep stick tables through reloads: a peers section with the
    // local peer alone. The old process teaches the new one on the local peer's address.
    let dir = TempDir::new();
    let (peer, http) = (free_port(), free_port());
    let sock = dir.join("s.sock");
    let cfg = format!(
        "global\n    stats socket {} level admin\n{DEFAULTS_HTTP}\
peers local\n    peer me 127.0.0.1:{peer}\n\
\x20   table t type string len 32 size 100 expire 60s store gpc0,http_req_cnt\n\
frontend fe\n    bind 127.0.0.1:{http}\n\
\x20   http-request track-sc0 req.hdr(x-user) table local/t\n\
\x20   http-request sc-inc-gpc0(0)\n\
\x20   http-request return status 200\n",
        sock.display()
    );
    let s = Sluice::builder(&cfg).arg("-W").arg("-L").arg("me").start();
    let first = worker_pids(&s)[0];
    for _ in 0..2 {
        let r = http_raw(
            http,
            "GET / HTTP/1.1\r\nHost: x\r\nx-user: alice\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(r.status, 200);
    }
    let line = |want: &str| table_entry_when(&sock, "local/t", "alice", |l| l.contains(want));
    line("gpc0=2");
    s.signal(nix::sys::signal::Signal::SIGUSR2);
    wait_until("the first worker gone", WAIT, || former_exited(&s, first));
    // The new worker answers on the stats socket with the entry it was taught.
    let l = line("gpc0=2");
    assert!(l.contains("http_req_cnt=2"), "{l}");
    assert_eq!(worker_pids(&s).len(), 2);
}

#[test]
fn stickiness_follows_to_the_peer() {
    // `stick on src` with a shared table: the server a client was sent to on one process is
    // the one the other process sends it to (the table's `server_id` travels, though the
    // table does not declare it: `stick` rules add it).
    let s1 = HttpBackend::start("s1");
    let s2 = HttpBackend::start("s2");
    let dir = TempDir::new();
    let (peer, http) = ([free_port(), free_port()], [free_port(), free_port()]);
    let cfg = |i: usize| {
        format!(
            "global\n    stats socket {} level admin\n{DEFAULTS_HTTP}\
peers mesh\n    peer a 127.0.0.1:{}\n    peer b 127.0.0.1:{}\n\
frontend fe\n    bind 127.0.0.1:{}\n    default_backend be\n\
backend be\n    balance roundrobin\n    stick-table type ip size 100 expire 60s peers mesh\n\
\x20   stick on src\n    server s1 {}\n    server s2 {}\n",
            dir.join(&format!("{i}.sock")).display(),
            peer[0],
            peer[1],
            http[i],
            s1.hostport(),
            s2.hostport()
        )
    };
    let _a = Sluice::builder(&cfg(0)).arg("-L").arg("a").start();
    let _b = Sluice::builder(&cfg(1)).arg("-L").arg("b").start();
    // Another client first, so that a sends this one to s2, which b's roundrobin would not
    // pick first: b can only send it there by what a taught it.
    let other = HttpClient::from_tcp(connect_from(Ipv4Addr::new(127, 0, 0, 2), lo(http[0])))
        .get("/")
        .server();
    let first = http_get(http[0], "/").server();
    assert_ne!(first, other, "roundrobin on a");
    let sid = |i: usize| {
        table_entry(&dir.join(&format!("{i}.sock")), "be", "127.0.0.1")
            .map(|l| table_col(&l, "server_id").to_string())
            .unwrap_or_default()
    };
    wait_until("b learns the server", WAIT, || !sid(1).is_empty());
    assert_eq!(sid(1), sid(0));
    assert_ne!(sid(1), "0");
    // b sends this client where a did, every time, whatever roundrobin would choose.
    for _ in 0..3 {
        assert_eq!(http_get(http[1], "/").server(), first);
    }
}

/// The test acting as peer `b` towards a sluice that is peer `a`: it says hello, reads the
/// binary messages, and acknowledges only when told to.
struct FakePeer {
    s: std::net::TcpStream,
    buf: Vec<u8>,
    /// The table the next update is for (sluice's id, from its definition or switch).
    table: u64,
}

impl FakePeer {
    fn connect(port: u16) -> FakePeer {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(lo(port)).expect("connect to the peer port");
        s.set_read_timeout(Some(WAIT)).unwrap();
        s.write_all(b"HAProxyS 2.1\na\nb 4242 1\n").unwrap();
        let mut status = [0u8; 4];
        s.read_exact(&mut status).expect("hello status");
        assert_eq!(&status, b"200\n");
        FakePeer {
            s,
            buf: Vec::new(),
            table: 0,
        }
    }

    /// HAProxy's variable-length integer at the start of `b`, and its length.
    fn varint(b: &[u8]) -> Option<(u64, usize)> {
        let mut v = *b.first()? as u64;
        let mut n = 1;
        if v >= 240 {
            let mut shift = 4;
            loop {
                let c = *b.get(n)?;
                n += 1;
                v += (c as u64) << shift;
                shift += 7;
                if c < 128 {
                    break;
                }
            }
        }
        Some((v, n))
    }

    /// The next message (class, kind, body); `None` when sluice closed the session.
    fn next(&mut self) -> Option<(u8, u8, Vec<u8>)> {
        use std::io::Read;
        loop {
            if self.buf.len() >= 2 {
                let (class, kind) = (self.buf[0], self.buf[1]);
                if kind & 0x80 == 0 {
                    self.buf.drain(..2);
                    return Some((class, kind, Vec::new()));
                }
                if let Some((len, n)) = Self::varint(&self.buf[2..]) {
                    let start = 2 + n;
                    if self.buf.len() >= start + len as usize {
                        let body = self.buf[start..start + len as usize].to_vec();
                        self.buf.drain(..start + len as usize);
                        return Some((class, kind, body));
                    }
                }
            }
            let mut chunk = [0u8; 4096];
            match self.s.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => panic!("reading the peer session: {e}"),
            }
        }
    }

    /// Reads updates until one carries `key`: every key seen before it, and the (table,
    /// update id) to acknowledge it with.
    fn update_of(&mut self, key: &str) -> (Vec<String>, (u64, u32)) {
        let mut seen = Vec::new();
        loop {
            let (class, kind, body) = self
                .next()
                .unwrap_or_else(|| panic!("session closed before an update of {key}"));
            match (class, kind) {
                // A definition or a switch: the table id first.
                (10, 0x82) | (10, 0x83) => self.table = Self::varint(&body).unwrap().0,
                (10, 0x80) | (10, 0x85) => {
                    let id = u32::from_be_bytes(body[..4].try_into().unwrap());
                    let text = String::from_utf8_lossy(&body[4..]).to_string();
                    if text.contains(key) {
                        return (seen, (self.table, id));
                    }
                    seen.push(text);
                }
                _ => {}
            }
        }
    }

    fn ack(&mut self, (table, id): (u64, u32)) {
        use std::io::Write;
        assert!(table < 240, "one-byte table id");
        let mut m = vec![10, 0x84, 5, table as u8];
        m.extend_from_slice(&id.to_be_bytes());
        self.s.write_all(&m).unwrap();
    }

    /// Closes its side and reads until sluice has ended the session (so that sluice has
    /// read everything sent before).
    fn close(mut self) {
        self.s.shutdown(std::net::Shutdown::Write).unwrap();
        while self.next().is_some() {}
    }
}

#[test]
fn an_update_the_peer_did_not_acknowledge_goes_again() {
    // Peer b is this test. An update sent on a session that ends (or that a newer session
    // replaces) before b acknowledged it is sent again: on the newer session, or on the next.
    let p = Pair::new();
    let _a = p.start(0);
    // Changes by the CLI: an HTTP request would touch its entry again when its stream ends,
    // whenever that is.
    let set = |key: &str| {
        stats_cli(
            &p.sock(0),
            &format!("set table mesh/t key {key} data.gpc0 7"),
        )
    };
    let mut first = FakePeer::connect(p.peer[0]);
    set("alice");
    first.update_of("alice");
    // Both sides connecting at once: the newer session replaces the older one.
    let mut second = FakePeer::connect(p.peer[0]);
    second.update_of("alice");
    first.close();
    second.close();
    // No session: alice waits for the next one; acknowledged there, it is not sent again.
    let mut third = FakePeer::connect(p.peer[0]);
    let (_, acked) = third.update_of("alice");
    third.ack(acked);
    third.close();
    let mut fourth = FakePeer::connect(p.peer[0]);
    set("carol");
    let (before, _) = fourth.update_of("carol");
    assert!(
        !before.iter().any(|k| k.contains("alice")),
        "sent again after its acknowledgement: {before:?}"
    );
    fourth.close();
}
