//! A real third-party client: curl (skipped, with a message, where it is not installed).

mod common;

use common::*;
use std::process::Command;

fn curl_available() -> bool {
    let ok = Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("curl is not installed: skipping (apt-get install curl)");
    }
    ok
}

fn curl(args: &[&str]) -> (i32, String, String) {
    let o = Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .output()
        .expect("run curl");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn proxy(b: &HttpBackend) -> (Sluice, u16) {
    let port = free_port();
    let cfg = format!(
        "{DEFAULTS_HTTP}frontend fe\n    bind 127.0.0.1:{port}\n    monitor-uri /up\n    default_backend be\n{}",
        backend_section("be", "", &[b])
    );
    (Sluice::start(&cfg), port)
}

#[test]
fn curl_get_post_and_keep_alive() {
    if !curl_available() {
        return;
    }
    let b = HttpBackend::with_handler("s1", |r| Reply::echo_target("s1", r));
    let (_s, port) = proxy(&b);
    let base = format!("http://127.0.0.1:{port}");

    let (code, out, err) = curl(&["-i", &format!("{base}/hello?x=1")]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.ends_with("/hello?x=1"), "{out}");

    // Two URLs in one curl run share one keep-alive connection through sluice.
    let (code, out, err) = curl(&["-v", &format!("{base}/a"), &format!("{base}/b")]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "/a/b");
    assert!(
        err.contains("Re-using existing connection") || err.contains("Reusing existing"),
        "curl did not reuse its connection:\n{err}"
    );
    let reqs = b.requests();
    let (a, bb) = (&reqs[reqs.len() - 2], &reqs[reqs.len() - 1]);
    assert_eq!(
        a.conn_id, bb.conn_id,
        "sluice kept its server connection within the client connection"
    );

    // A POST body larger than one buffer, with curl's own Expect: 100-continue.
    let dir = std::env::temp_dir().join(format!("sluice-it-curl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("body");
    std::fs::write(&file, "z".repeat(200_000)).unwrap();
    let (code, out, err) = curl(&[
        "-H",
        "Expect: 100-continue",
        "--data-binary",
        &format!("@{}", file.display()),
        &format!("{base}/post"),
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "/post");
    assert_eq!(b.last_request().body.len(), 200_000);

    // monitor-uri answers without the server.
    let before = b.reqs();
    let (code, out, _) = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("{base}/up"),
    ]);
    assert_eq!((code, out.as_str()), (0, "200"));
    assert_eq!(b.reqs(), before);
}
