//! The stats page in a real browser: headless Chromium loads it, and the test checks the DOM
//! the browser built (every server row with its state) and the screenshot (the state colours
//! are painted). Chromium comes from Debian (`apt-get install chromium`, done by `.ci/run`);
//! without it the test says so on stderr and checks nothing.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn chromium() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("SLUICE_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Runs headless Chromium on `url` with `what` (`--dump-dom` or `--screenshot=PATH`).
fn run_chromium(bin: &Path, profile: &Path, what: &str, url: &str) -> String {
    let out = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1600,1200",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(what)
        .arg(url)
        .output()
        .expect("start chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Pixels of the screenshot with exactly colour `rgb`.
fn count_colour(png_path: &Path, rgb: [u8; 3]) -> usize {
    let dec = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(png_path).expect("screenshot written"),
    ));
    let mut reader = dec.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let step = match info.color_type {
        png::ColorType::Rgba => 4,
        png::ColorType::Rgb => 3,
        other => panic!("unexpected PNG colour type {other:?}"),
    };
    buf[..info.buffer_size()]
        .chunks(step)
        .filter(|p| p[..3] == rgb)
        .count()
}

#[test]
fn stats_page_renders_in_chromium_with_state_colours() {
    let Some(bin) = chromium() else {
        eprintln!("SKIPPED: no Chromium (apt-get install chromium, or set SLUICE_CHROMIUM)");
        return;
    };
    let dir = TempDir::new();
    let sock = dir.join("admin.sock");
    let port = free_port();
    let b1 = HttpBackend::start("s1");
    let b2 = HttpBackend::start("s2");
    let dead = closed_port();
    let cfg = format!(
        "global\n    stats socket {} level admin\n{DEFAULTS_HTTP}\
         backend be\n    server up1 {}\n    server maint1 {} disabled\n    server down1 127.0.0.1:{dead} check inter 100ms fall 1\n    server drain1 {}\n\
         listen stats\n    bind 127.0.0.1:{port}\n    stats uri /stats\n",
        sock.display(),
        b1.hostport(),
        b2.hostport(),
        b2.hostport(),
    );
    let _s = Sluice::start(&cfg);
    assert_eq!(stats_cli(&sock, "set server be/drain1 state drain"), "\n");
    wait_until("down1 checked down", WAIT, || {
        stat_column(&sock, "be", "down1", "status") == "DOWN"
    });
    let url = format!("http://127.0.0.1:{port}/stats");

    // The DOM Chromium built: every server row, with its state.
    let dom = run_chromium(&bin, &dir.join("profile1"), "--dump-dom", &url);
    for (sv, status) in [
        ("up1", "no check"),
        ("maint1", "MAINT"),
        ("down1", "DOWN"),
        ("drain1", "DRAIN"),
    ] {
        let key = format!("id=\"be/{sv}\" data-status=\"{status}\"");
        assert!(dom.contains(&key), "{key} not in the rendered DOM:\n{dom}");
    }

    // The screenshot: HAProxy's state colours are painted.
    let shot = dir.join("stats.png");
    run_chromium(
        &bin,
        &dir.join("profile2"),
        &format!("--screenshot={}", shot.display()),
        &url,
    );
    for (what, rgb) in [
        ("no check grey", [0xe0, 0xe0, 0xe0]),
        ("MAINT brown", [0xc0, 0x78, 0x20]),
        ("DOWN red", [0xff, 0x90, 0x90]),
        ("DRAIN blue", [0x20, 0xa0, 0xff]),
        ("table header cyan", [0x20, 0xd0, 0xd0]),
        ("proxy name bar", [0xb0, 0x00, 0x40]),
    ] {
        let n = count_colour(&shot, rgb);
        assert!(n > 200, "{what} ({rgb:02x?}): only {n} pixels");
    }
}
