//! SPOE: `filter spoe` with a real SPOP agent started by the test (a TCP server speaking
//! SPOP 2.0: HELLO, NOTIFY/ACK, DISCONNECT), events and `send-spoe-group`, variables set by
//! the agent, errors and timeouts, and the configuration errors.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A typed SPOP value as the agent decoded it: (type nibble, bytes or integer as text).
#[derive(Debug, Clone, PartialEq)]
struct Arg {
    name: String,
    kind: u8,
    value: Vec<u8>,
}

#[derive(Debug, Clone)]
struct Notify {
    conn: usize,
    messages: Vec<(String, Vec<Arg>)>,
}

/// What the agent answers a NOTIFY with.
#[derive(Clone)]
enum Answer {
    /// ACK with these actions (already encoded).
    Ack(Vec<u8>),
    /// No answer at all (the exchange times out).
    Silence,
    /// AGENT-DISCONNECT with this status code.
    Disconnect(u64),
}

/// The HELLO frames' items, one list per connection.
type Hellos = Arc<Mutex<Vec<Vec<(String, Vec<u8>)>>>>;

struct Agent {
    addr: std::net::SocketAddr,
    notifies: Arc<Mutex<Vec<Notify>>>,
    hellos: Hellos,
    /// The status codes of the HAPROXY-DISCONNECT frames received.
    disconnects: Arc<Mutex<Vec<String>>>,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    if v < 240 {
        out.push(v as u8);
        return;
    }
    out.push((v as u8) | 240);
    v = (v - 240) >> 4;
    while v >= 128 {
        out.push((v as u8) | 128);
        v = (v - 128) >> 7;
    }
    out.push(v as u8);
}

fn get_varint(b: &[u8], p: &mut usize) -> u64 {
    let first = b[*p];
    *p += 1;
    if first < 240 {
        return first as u64;
    }
    let mut v = first as u64;
    let mut shift = 4;
    loop {
        let x = b[*p];
        *p += 1;
        v += (x as u64) << shift;
        shift += 7;
        if x < 128 {
            return v;
        }
    }
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s);
}

fn get_str(b: &[u8], p: &mut usize) -> Vec<u8> {
    let n = get_varint(b, p) as usize;
    let s = b[*p..*p + n].to_vec();
    *p += n;
    s
}

/// Decodes one typed value into (type, bytes): integers as decimal text, addresses as text.
fn get_typed(b: &[u8], p: &mut usize) -> (u8, Vec<u8>) {
    let t = b[*p];
    *p += 1;
    match t & 0x0F {
        0 => (0, vec![]),
        1 => (1, vec![(t >> 4) & 1]),
        2..=5 => (t & 0x0F, get_varint(b, p).to_string().into_bytes()),
        6 => {
            let a: [u8; 4] = b[*p..*p + 4].try_into().unwrap();
            *p += 4;
            (6, std::net::Ipv4Addr::from(a).to_string().into_bytes())
        }
        7 => {
            let a: [u8; 16] = b[*p..*p + 16].try_into().unwrap();
            *p += 16;
            (7, std::net::Ipv6Addr::from(a).to_string().into_bytes())
        }
        k => (k, get_str(b, p)),
    }
}

fn frame(kind: u8, sid: u64, fid: u64, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![kind];
    f.extend_from_slice(&1u32.to_be_bytes());
    put_varint(&mut f, sid);
    put_varint(&mut f, fid);
    f.extend_from_slice(payload);
    let mut out = (f.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&f);
    out
}

fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut f = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut f).ok()?;
    Some(f)
}

/// `set-var` action: scope (0 proc .. 4 res), name, string value.
fn set_var_str(scope: u8, name: &str, v: &str) -> Vec<u8> {
    let mut a = vec![1, 3, scope];
    put_str(&mut a, name.as_bytes());
    a.push(8);
    put_str(&mut a, v.as_bytes());
    a
}

fn set_var_int(scope: u8, name: &str, v: u64) -> Vec<u8> {
    let mut a = vec![1, 3, scope];
    put_str(&mut a, name.as_bytes());
    a.push(3);
    put_varint(&mut a, v);
    a
}

impl Agent {
    fn start(answer: impl Fn(&Notify) -> Answer + Send + Sync + 'static) -> Agent {
        Agent::start_with(false, answer)
    }

    /// `pipelining`: the agent announces it, and answers the NOTIFY frames that arrived
    /// together in reverse order (ACKs need not come in order).
    fn start_with(
        pipelining: bool,
        answer: impl Fn(&Notify) -> Answer + Send + Sync + 'static,
    ) -> Agent {
        let l = TcpListener::bind(lo(0)).unwrap();
        let addr = l.local_addr().unwrap();
        let notifies = Arc::new(Mutex::new(Vec::new()));
        let hellos = Arc::new(Mutex::new(Vec::new()));
        let disconnects = Arc::new(Mutex::new(Vec::new()));
        let (n2, h2, d2) = (notifies.clone(), hellos.clone(), disconnects.clone());
        let answer = Arc::new(answer);
        std::thread::spawn(move || {
            for (conn, s) in l.incoming().enumerate() {
                let Ok(mut s) = s else { return };
                let (n3, h3, a3, d3) = (n2.clone(), h2.clone(), answer.clone(), d2.clone());
                std::thread::spawn(move || {
                    let mut held: Vec<Vec<u8>> = Vec::new();
                    while let Some(f) = read_frame(&mut s) {
                        let kind = f[0];
                        let mut p = 5;
                        let sid = get_varint(&f, &mut p);
                        let fid = get_varint(&f, &mut p);
                        match kind {
                            1 => {
                                let mut kv = Vec::new();
                                while p < f.len() {
                                    let k = String::from_utf8(get_str(&f, &mut p)).unwrap();
                                    kv.push((k, get_typed(&f, &mut p).1));
                                }
                                h3.lock().unwrap().push(kv);
                                let mut pl = Vec::new();
                                put_str(&mut pl, b"version");
                                pl.push(8);
                                put_str(&mut pl, b"2.0");
                                put_str(&mut pl, b"max-frame-size");
                                pl.push(3);
                                put_varint(&mut pl, 16380);
                                put_str(&mut pl, b"capabilities");
                                pl.push(8);
                                put_str(&mut pl, if pipelining { b"pipelining" } else { b"" });
                                if s.write_all(&frame(101, 0, 0, &pl)).is_err() {
                                    return;
                                }
                            }
                            3 => {
                                let mut messages = Vec::new();
                                while p < f.len() {
                                    let name = String::from_utf8(get_str(&f, &mut p)).unwrap();
                                    let n = f[p];
                                    p += 1;
                                    let mut args = Vec::new();
                                    for _ in 0..n {
                                        let an = String::from_utf8(get_str(&f, &mut p)).unwrap();
                                        let (kind, value) = get_typed(&f, &mut p);
                                        args.push(Arg {
                                            name: an,
                                            kind,
                                            value,
                                        });
                                    }
                                    messages.push((name, args));
                                }
                                let n = Notify { conn, messages };
                                let ans = a3(&n);
                                n3.lock().unwrap().push(n);
                                let out = match ans {
                                    Answer::Ack(actions) => frame(103, sid, fid, &actions),
                                    Answer::Silence => continue,
                                    Answer::Disconnect(code) => {
                                        let mut pl = Vec::new();
                                        put_str(&mut pl, b"status-code");
                                        pl.push(3);
                                        put_varint(&mut pl, code);
                                        put_str(&mut pl, b"message");
                                        pl.push(8);
                                        put_str(&mut pl, b"go away");
                                        let _ = s.write_all(&frame(102, 0, 0, &pl));
                                        return;
                                    }
                                };
                                held.push(out);
                                // More frames already there: answered after them.
                                let more = pipelining && {
                                    s.set_nonblocking(true).unwrap();
                                    let m = s.peek(&mut [0u8; 1]).is_ok_and(|n| n > 0);
                                    s.set_nonblocking(false).unwrap();
                                    m
                                };
                                if !more {
                                    for out in held.drain(..).rev() {
                                        if s.write_all(&out).is_err() {
                                            return;
                                        }
                                    }
                                }
                            }
                            2 => {
                                // HAPROXY-DISCONNECT: its status-code, then the end.
                                let _ = get_str(&f, &mut p);
                                d3.lock()
                                    .unwrap()
                                    .push(String::from_utf8(get_typed(&f, &mut p).1).unwrap());
                                return;
                            }
                            _ => return,
                        }
                    }
                });
            }
        });
        Agent {
            addr,
            notifies,
            hellos,
            disconnects,
        }
    }

    fn notifies(&self) -> Vec<Notify> {
        self.notifies.lock().unwrap().clone()
    }
}

/// sluice with frontend `fe` (`fe_extra` lines), an echo backend, and backend `agents` with
/// the agent; the SPOE file holds `spoe`.
fn start(spoe: &str, fe_extra: &str, agent: &Agent) -> (Sluice, u16, TempDir, HttpBackend) {
    start_with(spoe, fe_extra, &format!("server a1 {}", agent.addr))
}

/// [`start`], with `agents` as the lines of backend `agents` (its servers, its timeouts).
fn start_with(spoe: &str, fe_extra: &str, agents: &str) -> (Sluice, u16, TempDir, HttpBackend) {
    let dir = TempDir::new();
    let conf = dir.write("spoe.conf", spoe);
    let be = HttpBackend::start("S");
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    filter spoe engine e1 config {}\n\
         {fe_extra}\n    default_backend app\n\
         backend app\n    server s {}\n\
         backend agents\n    mode tcp\n    {agents}\n",
        conf.display(),
        be.hostport(),
    );
    (Sluice::start(&cfg), port, dir, be)
}

const AGENT: &str = "[e1]\nspoe-agent a\n    messages check\n    option var-prefix iprep\n    \
                     option set-on-error err\n    option set-process-time ptime\n    \
                     timeout hello 2s\n    timeout idle 30s\n    timeout processing 2s\n    \
                     use-backend agents\n";

#[test]
fn event_message_sets_variables_the_rules_read() {
    let mut actions = set_var_int(2, "score", 42);
    actions.extend(set_var_str(1, "user", "bob"));
    let agent = Agent::start(move |_| Answer::Ack(actions.clone()));
    let spoe = format!(
        "{AGENT}spoe-message check\n    args ip=src path=path meth=method hdrs=req.hdrs ver=req.ver\n    \
         event on-frontend-http-request\n"
    );
    let (_s, port, _d, _app) = start(
        &spoe,
        "    http-request deny deny_status 403 if { var(txn.iprep.score) -m int lt 10 }\n    \
         http-response set-header x-score %[var(txn.iprep.score)]\n    \
         http-response set-header x-user %[var(sess.iprep.user)]\n    \
         http-response set-header x-err %[var(txn.iprep.err)]\n    \
         http-response set-header x-ptime %[var(txn.iprep.ptime)]",
        &agent,
    );
    let mut c = HttpClient::connect(port);
    for path in ["/first", "/second?q=1"] {
        let r = c.request(format!("GET {path} HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n\r\n"));
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("x-score"), Some("42"));
        assert_eq!(r.header("x-user"), Some("bob"));
        assert_eq!(r.header("x-err"), Some(""), "no error");
        assert!(r.header("x-ptime").unwrap().parse::<u64>().is_ok());
    }
    let n = agent.notifies();
    assert_eq!(n.len(), 2);
    let (name, args) = &n[0].messages[0];
    assert_eq!(name, "check");
    let by = |k: &str| args.iter().find(|a| a.name == k).cloned().unwrap();
    assert_eq!((by("ip").kind, by("ip").value), (6, b"127.0.0.1".to_vec()));
    assert_eq!((by("path").kind, by("path").value), (8, b"/first".to_vec()));
    assert_eq!(by("meth").value, b"GET");
    assert_eq!(by("ver").value, b"1.1");
    let hdrs = String::from_utf8(by("hdrs").value).unwrap();
    assert!(hdrs.starts_with("host: h\r\nx-a: 1\r\n"), "{hdrs:?}");
    assert!(hdrs.ends_with("\r\n\r\n"), "{hdrs:?}");
    assert_eq!(n[1].messages[0].1[1].value, b"/second");
    // One client connection, one thread: the agent connection was kept and reused.
    assert_eq!(n[0].conn, n[1].conn);
    let hello = agent.hellos.lock().unwrap()[0].clone();
    let get = |k: &str| hello.iter().find(|(n, _)| n == k).map(|x| x.1.clone());
    assert_eq!(get("supported-versions"), Some(b"2.0".to_vec()));
    assert_eq!(get("max-frame-size"), Some(b"16380".to_vec()));
    assert!(get("engine-id").is_some_and(|v| v.len() == 32));
}

#[test]
fn agent_answer_can_deny_a_request() {
    let agent = Agent::start(|n| {
        let path = &n.messages[0].1[0].value;
        let score = if path.starts_with(b"/bad") { 5 } else { 90 };
        Answer::Ack(set_var_int(2, "score", score))
    });
    let spoe =
        format!("{AGENT}spoe-message check\n    args path\n    event on-frontend-http-request\n");
    let (_s, port, _d, _app) = start(
        &spoe,
        "    http-request deny deny_status 403 if { var(txn.iprep.score) -m int lt 10 }",
        &agent,
    );
    assert_eq!(http_get(port, "/bad").status, 403);
    assert_eq!(http_get(port, "/good").status, 200);
    // An unnamed argument has an empty name.
    assert_eq!(agent.notifies()[0].messages[0].1[0].name, "");
}

#[test]
fn send_spoe_group_from_rules_and_message_conditions() {
    let agent = Agent::start(|n| {
        let names: Vec<&str> = n.messages.iter().map(|m| m.0.as_str()).collect();
        Answer::Ack(set_var_str(2, "sent", &names.join(",")))
    });
    let spoe = "[e1]\nspoe-agent a\n    messages on-ev\n    groups grp\n    option var-prefix g\n    \
                timeout hello 2s\n    timeout idle 30s\n    timeout processing 2s\n    use-backend agents\n\
                spoe-message on-ev\n    args src\n    event on-frontend-http-request if { path_beg /ev }\n\
                spoe-message in-grp\n    args x=str(hello) n=int(7) b=bool(1)\n\
                spoe-group grp\n    messages in-grp\n";
    let (_s, port, _d, _app) = start(
        spoe,
        "    http-request set-var(txn.before) var(txn.g.sent)\n    \
         http-request send-spoe-group e1 grp if { path_beg /grp }\n    \
         http-response set-header x-sent %[var(txn.g.sent)]\n    \
         http-response set-header x-before %[var(txn.before)]",
        &agent,
    );
    let r = http_get(port, "/grp");
    assert_eq!(r.header("x-sent"), Some("in-grp"));
    // The rule before send-spoe-group ran before the exchange.
    assert_eq!(r.header("x-before"), Some(""));
    let r = http_get(port, "/ev");
    assert_eq!(r.header("x-sent"), Some("on-ev"));
    // Neither the event's condition nor the group's rule: nothing is sent.
    let before = agent.notifies().len();
    let r = http_get(port, "/other");
    assert_eq!(r.header("x-sent"), Some(""));
    assert_eq!(agent.notifies().len(), before);
    let grp = &agent.notifies()[0].messages[0].1;
    assert_eq!((grp[0].kind, &grp[0].value[..]), (8, &b"hello"[..]));
    assert_eq!((grp[1].kind, &grp[1].value[..]), (4, &b"7"[..]));
    assert_eq!((grp[2].kind, &grp[2].value[..]), (1, &b"\x01"[..]));
}

#[test]
fn errors_set_the_error_variable_and_the_request_goes_on() {
    // An agent that never answers: `timeout processing` (status 1).
    let silent = Agent::start(|_| Answer::Silence);
    let spoe = AGENT.replace("timeout processing 2s", "timeout processing 300ms")
        + "spoe-message check\n    args src\n    event on-frontend-http-request\n";
    let (_s, port, _d, _app) = start(
        &spoe,
        "    http-response set-header x-err %[var(txn.iprep.err)]",
        &silent,
    );
    let r = http_get(port, "/");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-err"), Some("1"));

    // AGENT-DISCONNECT with status 42: 256 + 42.
    let rude = Agent::start(|_| Answer::Disconnect(42));
    let spoe = AGENT.to_string()
        + "spoe-message check\n    args src\n    event on-frontend-http-request\n";
    let (_s2, port, _d2, _app2) = start(
        &spoe,
        "    http-response set-header x-err %[var(txn.iprep.err)]",
        &rude,
    );
    let r = http_get(port, "/");
    assert_eq!((r.status, r.header("x-err")), (200, Some("298")));
}

#[test]
fn unreachable_agent_times_out_the_exchange() {
    let spoe = AGENT.replace("timeout processing 2s", "timeout processing 300ms")
        + "spoe-message check\n    args src\n    event on-frontend-http-request\n";
    let (_s, port, _d, _app) = start_with(
        &spoe,
        "    http-response set-header x-err %[var(txn.iprep.err)]",
        &format!("server a1 127.0.0.1:{}", closed_port()),
    );
    // HAProxy 2.6.12 answers the same way: the stream waits for an agent connection until
    // `timeout processing`.
    let r = http_get(port, "/");
    assert_eq!((r.status, r.header("x-err")), (200, Some("1")));
}

#[test]
fn request_body_and_response_event() {
    let agent = Agent::start(|n| match n.messages[0].0.as_str() {
        "req" => Answer::Ack(set_var_int(2, "len", n.messages[0].1[0].value.len() as u64)),
        _ => Answer::Ack(set_var_str(
            2,
            "status",
            std::str::from_utf8(&n.messages[0].1[0].value).unwrap(),
        )),
    });
    let spoe = "[e1]\nspoe-agent a\n    messages req rsp\n    option var-prefix b\n    timeout hello 2s\n    \
                timeout idle 30s\n    timeout processing 2s\n    use-backend agents\n\
                spoe-message req\n    args body=req.body size=req.body_size\n    event on-frontend-http-request\n\
                spoe-message rsp\n    args status=status ver=res.ver\n    event on-http-response\n";
    let (_s, port, _d, _app) = start(
        spoe,
        "    option http-buffer-request\n    \
         http-response set-header x-len %[var(txn.b.len)]\n    \
         http-response set-header x-status %[var(txn.b.status)]",
        &agent,
    );
    let mut c = HttpClient::connect(port);
    let r = c.request("POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhello world");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-len"), Some("11"));
    // The response event ran before the http-response rules.
    assert_eq!(r.header("x-status"), Some("200"));
    let n = agent.notifies();
    let body = &n[0].messages[0].1[0];
    assert_eq!((body.kind, &body.value[..]), (9, &b"hello world"[..]));
    assert_eq!(n[0].messages[0].1[1].value, b"11");
    let st = &n[1].messages[0].1;
    assert_eq!(
        (st[0].kind, &st[0].value[..], &st[1].value[..]),
        (4, &b"200"[..], &b"1.1"[..])
    );
}

#[test]
fn configuration_errors_name_the_line() {
    let dir = TempDir::new();
    let ok = AGENT.to_string()
        + "spoe-message check\n    args src\n    event on-frontend-http-request\n";
    let conf = dir.write("spoe.conf", &ok);
    let port = free_port();
    let base = |fe: &str, agents_mode: &str| {
        format!(
            "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n{fe}\n    default_backend agents2\n\
             backend agents2\n    server s 127.0.0.1:1\nbackend agents\n    mode {agents_mode}\n    server a 127.0.0.1:1\n"
        )
    };
    let f = |e: &str| format!("    filter spoe engine {e} config {}", conf.display());
    let (code, err) = Sluice::check(&base(&f("e1"), "tcp"));
    assert_eq!(code, 0, "{err}");
    let (code, err) = Sluice::check(&base(&f("nope"), "tcp"));
    assert_ne!(code, 0);
    assert!(err.contains("no scope '[nope]'"), "{err}");
    let (code, err) = Sluice::check(&base(&f("e1"), "http"));
    assert_ne!(code, 0);
    assert!(err.contains("is in 'mode http'"), "{err}");
    let rule = format!("{}\n    http-request send-spoe-group e1 nogroup", f("e1"));
    let (code, err) = Sluice::check(&base(&rule, "tcp"));
    assert_ne!(code, 0);
    assert!(
        err.contains(":9:") && err.contains("unable to find SPOE group 'nogroup'"),
        "{err}"
    );
    let bad = dir.write(
        "bad.conf",
        ok.replace("event on-frontend-http-request", "event on-nothing"),
    );
    let (code, err) = Sluice::check(&base(
        &format!("    filter spoe engine e1 config {}", bad.display()),
        "tcp",
    ));
    assert_ne!(code, 0);
    assert!(
        err.contains("bad.conf:13: unknown event 'on-nothing'"),
        "{err}"
    );
}

#[test]
fn tcp_mode_session_event_feeds_content_rules() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let score = Arc::new(AtomicU64::new(5));
    let s2 = score.clone();
    let agent =
        Agent::start(move |_| Answer::Ack(set_var_int(1, "score", s2.load(Ordering::SeqCst))));
    let dir = TempDir::new();
    let conf = dir.write(
        "spoe.conf",
        AGENT.to_string() + "spoe-message check\n    args ip=src\n    event on-client-session\n",
    );
    let echo = TcpBackend::echo();
    let port = free_port();
    let cfg = format!(
        "defaults\n    mode tcp\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n\
         listen l\n    bind 127.0.0.1:{port}\n    filter spoe engine e1 config {}\n    \
         tcp-request content reject if {{ var(sess.iprep.score) -m int lt 10 }}\n    server s {}\n\
         backend agents\n    server a1 {}\n",
        conf.display(),
        echo.addr,
        agent.addr
    );
    let _s = Sluice::start(&cfg);
    let send = || {
        let mut c = TcpStream::connect(lo(port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = c.write_all(b"ping");
        let _ = c.shutdown(std::net::Shutdown::Write);
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        out
    };
    assert_eq!(send(), b"", "score 5: rejected");
    score.store(90, Ordering::SeqCst);
    assert_eq!(send(), b"ping", "score 90: through");
    let n = agent.notifies();
    assert_eq!(n.len(), 2);
    assert_eq!(n[0].messages[0].1[0].value, b"127.0.0.1");
}

#[test]
fn spop_check_marks_the_agent_up_or_down() {
    let agent = Agent::start(|_| Answer::Ack(Vec::new()));
    let dead = closed_port();
    let dir = TempDir::new();
    let sock = dir.path().join("stats.sock");
    let cfg = format!(
        "global\n    stats socket {}\n{DEFAULTS_HTTP}\
         backend agents\n    mode tcp\n    option spop-check\n    \
         server up {} check inter 100ms\n    server down 127.0.0.1:{dead} check inter 100ms\n",
        sock.display(),
        agent.addr
    );
    let _s = Sluice::start(&cfg);
    wait_until("spop-check verdicts", Duration::from_secs(10), || {
        stat_column(&sock, "agents", "up", "status") == "UP"
            && stat_column(&sock, "agents", "down", "status") == "DOWN"
    });
    // The check's HELLO says it is one, and opens no NOTIFY exchange.
    let hello = agent.hellos.lock().unwrap()[0].clone();
    assert!(
        hello
            .iter()
            .any(|(k, v)| k == "healthcheck" && v == &vec![1]),
        "{hello:?}"
    );
    assert!(agent.notifies().is_empty());
}

#[test]
fn http_response_send_spoe_group_sees_the_response() {
    let agent = Agent::start(|n| {
        let st = std::str::from_utf8(&n.messages[0].1[0].value)
            .unwrap()
            .to_string();
        Answer::Ack(set_var_str(2, "seen", &st))
    });
    let spoe = "[e1]\nspoe-agent a\n    groups rsp\n    option var-prefix r\n    timeout hello 2s\n    \
                timeout idle 30s\n    timeout processing 2s\n    use-backend agents\n\
                spoe-message m\n    args status x=res.hdr(x-from)\nspoe-group rsp\n    messages m\n";
    let (_s, port, _d, _app) = start(
        spoe,
        "    http-response set-header x-from fe\n    \
         http-response set-header x-before %[var(txn.r.seen)]\n    \
         http-response send-spoe-group e1 rsp\n    \
         http-response set-header x-after %[var(txn.r.seen)]",
        &agent,
    );
    let r = http_get(port, "/");
    assert_eq!(r.header("x-before"), Some(""));
    assert_eq!(r.header("x-after"), Some("200"));
    let args = &agent.notifies()[0].messages[0].1;
    // The rules before it have run: the header it reads was set by one.
    assert_eq!(args[1].value, b"fe");
}

#[test]
fn frontend_engine_gets_backend_events_and_absolute_targets() {
    let agent = Agent::start(|_| Answer::Ack(set_var_int(2, "n", 1)));
    let spoe = format!(
        "{AGENT}spoe-message check\n    args pq=pathq ver=req_ver\n    event on-backend-http-request\n"
    );
    let (_s, port, _d, _app) = start(
        &spoe,
        "    http-response set-header x-n %[var(txn.iprep.n)]",
        &agent,
    );
    // Absolute-form targets, with and without a path.
    for (target, pq) in [
        ("http://h/a?b", "/a?b"),
        ("http://h", ""),
        ("http://h?x", "?x"),
    ] {
        let mut c = HttpClient::connect(port);
        let r = c.request(format!(
            "GET {target} HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
        ));
        assert_eq!((r.status, r.header("x-n")), (200, Some("1")), "{target}");
        let n = agent.notifies();
        assert_eq!(
            n.last().unwrap().messages[0].1[0].value,
            pq.as_bytes(),
            "{target}"
        );
    }
}

#[test]
fn without_processing_timeout_the_backend_timeout_server_bounds_an_exchange() {
    let silent = Agent::start(|_| Answer::Silence);
    let spoe = AGENT.replace("    timeout processing 2s\n", "")
        + "spoe-message check\n    args src\n    event on-frontend-http-request\n";
    let (s, port, _d, _app) = start_with(
        &spoe,
        "    http-response set-header x-err %[var(txn.iprep.err)]",
        &format!("timeout server 300ms\n    server a1 {}", silent.addr),
    );
    assert!(
        s.stderr
            .text()
            .contains("missing timeouts for SPOE agent 'a'"),
        "{}",
        s.stderr.text()
    );
    let r = http_get(port, "/");
    assert_eq!((r.status, r.header("x-err")), (200, Some("1")));
}

#[test]
fn pipelined_agent_shares_one_connection_and_acks_find_their_streams() {
    // Each answer carries the request's own path back.
    let agent = Agent::start_with(true, |n| {
        let path = String::from_utf8(n.messages[0].1[0].value.clone()).unwrap();
        Answer::Ack(set_var_str(2, "path", &path))
    });
    let dir = TempDir::new();
    let conf = dir.write(
        "spoe.conf",
        AGENT.to_string()
            + "spoe-message check\n    args path\n    event on-frontend-http-request\n",
    );
    let port = free_port();
    let cfg = format!(
        "global\n    nbthread 1\n{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    \
         filter spoe engine e1 config {}\n    \
         http-request return status 200 content-type text/plain lf-string \"%[var(txn.iprep.path)]\"\n\
         backend agents\n    mode tcp\n    server a1 {}\n",
        conf.display(),
        agent.addr
    );
    let _s = Sluice::start(&cfg);
    let clients: Vec<_> = (0..16)
        .map(|i| {
            std::thread::spawn(move || {
                let mut c = HttpClient::connect(port);
                (0..20).all(|j| c.get(&format!("/c{i}/r{j}")).body_str() == format!("/c{i}/r{j}"))
            })
        })
        .collect();
    for c in clients {
        assert!(c.join().unwrap(), "an answer went to the wrong request");
    }
    let n = agent.notifies();
    assert_eq!(n.len(), 320);
    // One thread, an agent that pipelines: one connection carried them all.
    assert!(
        n.iter().all(|x| x.conn == n[0].conn),
        "more than one agent connection"
    );
    let hello = agent.hellos.lock().unwrap()[0].clone();
    assert!(
        hello
            .iter()
            .any(|(k, v)| k == "capabilities" && v == b"pipelining")
    );
}

#[test]
fn a_connection_whose_agent_stopped_answering_ends_with_a_timeout_disconnect() {
    let agent = Agent::start_with(true, |_| Answer::Silence);
    let spoe = AGENT
        .replace("timeout processing 2s", "timeout processing 200ms")
        .replace("timeout idle 30s", "timeout idle 600ms")
        + "spoe-message check\n    args src\n    event on-frontend-http-request\n";
    let (_s, port, _d, _app) = start(
        &spoe,
        "    http-response set-header x-err %[var(txn.iprep.err)]",
        &agent,
    );
    let r = http_get(port, "/");
    assert_eq!((r.status, r.header("x-err")), (200, Some("1")));
    // Nothing came back within `timeout idle`: sluice ends the connection, status 2.
    wait_until("a HAPROXY-DISCONNECT", Duration::from_secs(10), || {
        !agent.disconnects.lock().unwrap().is_empty()
    });
    assert_eq!(agent.disconnects.lock().unwrap()[0], "2");
    // The next exchange opens a new connection (and times out the same way).
    let r = http_get(port, "/");
    assert_eq!(r.header("x-err"), Some("1"));
    let n = agent.notifies();
    assert_ne!(n[0].conn, n[1].conn);
}
