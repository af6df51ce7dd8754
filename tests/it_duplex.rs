//! Full duplex: a request body keeps flowing to the server after the server's response has
//! started (streaming APIs that answer each piece of the request as it comes, gRPC's
//! bidirectional streams, servers that answer before reading the whole body), from HTTP/1.1
//! and HTTP/2 clients; and a server that stops reading the body still gets its answer out.
//! Real sockets: the servers are threads of the test speaking raw HTTP/1.1.

mod common;

use bytes::Bytes;
use common::*;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

/// A server that answers a chunked request at once with a chunked response, then echoes
/// each chunk of the request body as a chunk of the response as it arrives (a response
/// that cannot end before the request does). One connection.
fn echo_server() -> (u16, std::thread::JoinHandle<Vec<Vec<u8>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        let mut w = Wire::new(s);
        let head = w.read_until(b"\r\n\r\n").unwrap().unwrap();
        assert!(
            String::from_utf8_lossy(&head)
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked"),
            "{}",
            String::from_utf8_lossy(&head)
        );
        w.stream
            .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            .unwrap();
        let mut seen = Vec::new();
        loop {
            let line = w.read_until(b"\r\n").unwrap().unwrap();
            let n =
                usize::from_str_radix(std::str::from_utf8(&line[..line.len() - 2]).unwrap(), 16)
                    .unwrap();
            if n == 0 {
                assert_eq!(w.read_until(b"\r\n").unwrap().unwrap(), b"\r\n");
                w.stream.write_all(b"0\r\n\r\n").unwrap();
                return seen;
            }
            let data = w.take(n).unwrap();
            w.take(2).unwrap();
            let mut out = format!("{:x}\r\n", n + 5).into_bytes();
            out.extend_from_slice(b"echo ");
            out.extend_from_slice(&data);
            out.extend_from_slice(b"\r\n");
            w.stream.write_all(&out).unwrap();
            seen.push(data);
        }
    });
    (port, h)
}

/// Over HTTP/2 with prior knowledge, a POST to `path` whose body is `{word}1` ..
/// `{word}{n}`, each piece sent once the echo of the one before has come back (gRPC's
/// content type when `grpc`): all of the answer's body, and its stream for the trailers.
async fn h2_chat(
    port: u16,
    path: &str,
    grpc: bool,
    word: &str,
    n: usize,
) -> (Vec<u8>, h2::RecvStream) {
    let tcp = tokio::net::TcpStream::connect(lo(port)).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut send = send.ready().await.unwrap();
    let mut req = http::Request::builder()
        .method("POST")
        .uri(format!("http://127.0.0.1:{port}{path}"));
    if grpc {
        req = req.header("content-type", "application/grpc");
    }
    let (rsp, mut tx) = send.send_request(req.body(()).unwrap(), false).unwrap();
    tx.send_data(Bytes::from(format!("{word}1")), false)
        .unwrap();
    let rsp = tokio::time::timeout(T, rsp).await.unwrap().unwrap();
    assert_eq!(rsp.status(), 200);
    let mut body = rsp.into_body();
    let mut got = Vec::new();
    for i in 1..=n {
        let want = format!("echo {word}{i}");
        while !String::from_utf8_lossy(&got).contains(&want) {
            let d = tokio::time::timeout(T, body.data())
                .await
                .unwrap_or_else(|_| panic!("no echo of piece {i}"))
                .unwrap()
                .unwrap();
            let _ = body.flow_control().release_capacity(d.len());
            got.extend_from_slice(&d);
        }
        if i < n {
            tx.send_data(Bytes::from(format!("{word}{}", i + 1)), false)
                .unwrap();
        }
    }
    tx.send_data(Bytes::new(), true).unwrap();
    while let Some(d) = tokio::time::timeout(T, body.data()).await.unwrap() {
        got.extend_from_slice(&d.unwrap());
    }
    (got, body)
}

fn proxy(server_port: u16, fe_extra: &str) -> (Sluice, u16) {
    let port = free_port();
    let cfg = format!(
        "defaults\n    mode http\n    timeout connect 2s\n    timeout client 30s\n    timeout server 30s\n\
frontend fe\n    bind 127.0.0.1:{port}\n    log stdout format raw local0\n    option httplog\n{fe_extra}\
\x20   default_backend be\n\
backend be\n    server s1 127.0.0.1:{server_port}\n"
    );
    (Sluice::start(&cfg), port)
}

#[test]
fn http1_request_body_flows_while_the_response_streams() {
    let (sport, server) = echo_server();
    let (s, port) = proxy(sport, "");
    let c = TcpStream::connect(lo(port)).unwrap();
    // Well under `timeout server`: without full duplex the second echo never comes.
    c.set_read_timeout(Some(T)).unwrap();
    let mut w = Wire::new(c);
    w.stream
        .write_all(
            b"POST /chat HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nping1\r\n",
        )
        .unwrap();
    let head = w.read_until(b"\r\n\r\n").unwrap().unwrap();
    assert!(head.starts_with(b"HTTP/1.1 200"), "{head:?}");
    // Each piece is answered before the next is sent: the client waits for its echo. Each
    // echo leaves at once: a piece of a streamed answer corked in the socket (`MSG_MORE`)
    // waited 200 ms for a next one, which the server sends only after the next question.
    let mut waits = Vec::new();
    let mut sent_at = std::time::Instant::now();
    for i in 1..=3 {
        let got = w
            .read_until(format!("echo ping{i}\r\n").as_bytes())
            .unwrap();
        assert!(got.is_some(), "no echo of piece {i}");
        if i > 1 {
            waits.push(sent_at.elapsed());
        }
        if i < 3 {
            sent_at = std::time::Instant::now();
            write!(w.stream, "5\r\nping{}\r\n", i + 1).unwrap();
        }
    }
    // The quicker of two round trips (a loaded machine may delay one).
    waits.sort();
    assert!(
        waits[0] < Duration::from_millis(150),
        "echo round trips {waits:?}: held back"
    );
    w.stream.write_all(b"0\r\n\r\n").unwrap();
    assert_eq!(w.read_until(b"0\r\n\r\n").unwrap().unwrap(), b"0\r\n\r\n");
    assert_eq!(
        server.join().unwrap(),
        [b"ping1".to_vec(), b"ping2".to_vec(), b"ping3".to_vec()]
    );
    // The whole exchange is one transaction, logged with the server's status.
    let line = s.wait_log_line(|l| l.contains("POST /chat"), T);
    assert!(line.contains(" 200 "), "{line}");
    // The head went out before the request was over: it said the connection closes, and
    // it does, once both bodies are complete.
    assert!(
        String::from_utf8_lossy(&head)
            .to_ascii_lowercase()
            .contains("connection: close"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    assert_eq!(w.fill().unwrap(), 0, "the connection must end");
}

#[test]
fn http2_stream_body_flows_while_the_response_streams() {
    let (sport, server) = echo_server();
    let (_s, port) = proxy(sport, "");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let got = rt.block_on(async { h2_chat(port, "/chat", false, "ping", 3).await.0 });
    assert_eq!(got, b"echo ping1echo ping2echo ping3");
    assert_eq!(server.join().unwrap().len(), 3);
}

#[test]
fn a_server_that_stops_reading_the_body_still_gets_its_answer_through() {
    // The server reads the head only, answers 1 MB, and never reads the 16 MB body: more than
    // the sockets between can hold, so the proxy's writes to it stall. The answer must not
    // wait behind them.
    const ANSWER: usize = 1 << 20;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let sport = l.local_addr().unwrap().port();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        let mut w = Wire::new(s);
        w.read_until(b"\r\n\r\n").unwrap().unwrap();
        w.stream
            .write_all(format!("HTTP/1.1 200 OK\r\ncontent-length: {ANSWER}\r\n\r\n").as_bytes())
            .unwrap();
        let piece = vec![b'a'; 64 * 1024];
        for _ in 0..ANSWER / piece.len() {
            w.stream.write_all(&piece).unwrap();
        }
        // Held open, unread, until the test is over.
        let _ = done_rx.recv_timeout(T * 3);
    });
    let (s, port) = proxy(sport, "");
    let c = TcpStream::connect(lo(port)).unwrap();
    c.set_read_timeout(Some(T)).unwrap();
    const BODY: usize = 16 << 20;
    let mut writer = c.try_clone().unwrap();
    let upload = std::thread::spawn(move || {
        let _ = writer.write_all(
            format!("POST /up HTTP/1.1\r\nhost: x\r\ncontent-length: {BODY}\r\n\r\n").as_bytes(),
        );
        let piece = vec![b'b'; 64 * 1024];
        let mut sent = 0;
        while sent < BODY {
            // Fails once the proxy closes: the answer is complete by then.
            if writer.write_all(&piece).is_err() {
                break;
            }
            sent += piece.len();
        }
    });
    let mut w = Wire::new(c);
    let head = w.read_until(b"\r\n\r\n").unwrap().unwrap();
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    // Said at once: the request is not over when the answer starts.
    assert!(head.contains("connection: close"), "{head}");
    let body = w.take(ANSWER).expect("the whole answer");
    assert!(body.iter().all(|&b| b == b'a'));
    let line = s.wait_log_line(|l| l.contains("POST /up"), T);
    assert!(line.contains(" 200 "), "{line}");
    // Then the connection ends (lingering: the rest of the upload is read and dropped).
    let mut rest = Vec::new();
    loop {
        match w.fill() {
            Ok(0) | Err(_) => break,
            Ok(_) => rest.append(&mut w.buf),
        }
    }
    assert!(rest.is_empty(), "bytes after the answer: {}", rest.len());
    drop(w);
    upload.join().unwrap();
    let _ = done_tx.send(());
    server.join().unwrap();
}

/// An HTTP/2 server (h2c) that answers each request at once with a gRPC-like stream: every
/// DATA frame of the request is echoed as one, and the answer ends with trailers after the
/// request ends.
fn h2_echo_server() -> u16 {
    common::h2server::tokio_server(|s| async move {
        let Ok(mut conn) = h2::server::handshake(s).await else {
            return;
        };
        while let Some(Ok((req, mut respond))) = conn.accept().await {
            tokio::spawn(async move {
                let rsp = http::Response::builder()
                    .status(200)
                    .header("content-type", "application/grpc")
                    .body(())
                    .unwrap();
                let mut tx = respond.send_response(rsp, false).unwrap();
                let mut body = req.into_body();
                while let Some(Ok(d)) = body.data().await {
                    let _ = body.flow_control().release_capacity(d.len());
                    if d.is_empty() {
                        continue;
                    }
                    let mut out = b"echo ".to_vec();
                    out.extend_from_slice(&d);
                    if tx.send_data(Bytes::from(out), false).is_err() {
                        return;
                    }
                }
                let mut t = http::HeaderMap::new();
                t.insert("grpc-status", "0".parse().unwrap());
                let _ = tx.send_trailers(t);
            });
        }
    })
}

#[test]
fn grpc_style_streams_go_both_ways_through_http2_on_both_sides() {
    let sport = h2_echo_server();
    let port = free_port();
    let cfg = format!(
        "defaults\n    mode http\n    timeout connect 2s\n    timeout client 30s\n    timeout server 30s\n\
frontend fe\n    bind 127.0.0.1:{port} proto h2\n    default_backend be\n\
backend be\n    server s1 127.0.0.1:{sport} proto h2\n"
    );
    let _s = Sluice::start(&cfg);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (got, mut body) = h2_chat(port, "/echo.Echo/Chat", true, "m", 4).await;
        assert_eq!(got, b"echo m1echo m2echo m3echo m4");
        let trailers = tokio::time::timeout(T, body.trailers())
            .await
            .unwrap()
            .unwrap()
            .expect("trailers");
        assert_eq!(trailers["grpc-status"], "0");
    });
}
