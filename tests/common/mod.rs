//! Shared helpers for sluice's integration tests (`tests/it_*.rs`).
//!
//! * [`Sluice`]: runs the real binary (`-d -f cfg`) and waits for its readiness line; collects
//!   stdout/stderr lines so tests can wait (condvar, no sleeps) for access-log lines.
//! * [`HttpBackend`] / [`TcpBackend`]: test servers on their own threads, recording what they
//!   receive and answering as each test tells them ([`Reply`]).
//! * [`HttpClient`]: a blocking HTTP/1.x client over a raw socket, so tests choose exact bytes.
//! * small utilities: [`free_port`], [`TempDir`], [`Gate`], [`Blackhole`], [`wait_consumed`].
//!
//! Every wait is bounded (see [`WAIT`]) and returns as soon as the awaited event happens.

#![allow(dead_code)]

pub mod h2server;

/// Trailer fields of a chunked body.
pub type Trailers = Vec<(String, String)>;

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Upper bound for every "this should happen" wait. Generous: the machine may be loaded.
pub const WAIT: Duration = Duration::from_secs(10);
/// The line sluice prints on stderr under `-d` once every listener is bound.
pub const READY: &str = "worker thread(s), global maxconn";

/// The binary under test: sluice, or whatever `SLUICE_IT_BIN` names (e.g. the HAProxy shim in
/// `tests/fixtures/it/haproxy-shim.py`, to check the tests themselves against HAProxy).
pub fn sluice_bin() -> String {
    std::env::var("SLUICE_IT_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_sluice").to_string())
}

pub fn lo(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

// ---------------------------------------------------------------------------------------------
// Ports and temporary directories
// ---------------------------------------------------------------------------------------------

/// A port on 127.0.0.1 that nothing listens on right now.
///
/// Ports are taken below the kernel's ephemeral range (32768+), so a test backend bound to port 0
/// or an outgoing connection can never be handed the same port afterwards; each test process
/// starts at its own offset and never hands out a port twice.
pub fn free_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    const LOW: u32 = 12000;
    const SPAN: u32 = 20000;
    let _ = NEXT.compare_exchange(
        0,
        (LOW + (std::process::id().wrapping_mul(7919) % SPAN)) as u16,
        SeqCst,
        SeqCst,
    );
    for _ in 0..SPAN {
        let p = NEXT.fetch_add(1, SeqCst) as u32;
        let p = LOW + (p - LOW) % SPAN;
        if let Ok(l) = TcpListener::bind(lo(p as u16)) {
            drop(l);
            return p as u16;
        }
    }
    panic!("no free port");
}

/// A port with no listener: connecting to it is refused.
pub fn closed_port() -> u16 {
    free_port()
}

/// A directory under the system temp dir, removed on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let path = std::env::temp_dir().join(format!(
            "sluice-it-{}-{}-{}",
            std::process::id(),
            N.fetch_add(1, SeqCst),
            nanos
        ));
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Writes `contents` to `name` in this directory and returns its path.
    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let p = self.path.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, contents).expect("write temp file");
        p
    }
}

impl Default for TempDir {
    fn default() -> Self {
        TempDir::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

// ---------------------------------------------------------------------------------------------
// Collected output lines
// ---------------------------------------------------------------------------------------------

/// Lines of one output stream of a child process, appended by a reader thread.
#[derive(Default)]
pub struct Lines {
    inner: Mutex<(Vec<String>, bool)>,
    cv: Condvar,
}

impl Lines {
    fn push(&self, l: String) {
        self.inner.lock().unwrap().0.push(l);
        self.cv.notify_all();
    }

    fn close(&self) {
        self.inner.lock().unwrap().1 = true;
        self.cv.notify_all();
    }

    pub fn snapshot(&self) -> Vec<String> {
        self.inner.lock().unwrap().0.clone()
    }

    /// Waits until the stream has ended (the reader thread saw EOF), up to `timeout`.
    pub fn wait_end(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut g = self.inner.lock().unwrap();
        while !g.1 {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            g = self.cv.wait_timeout(g, deadline - now).unwrap().0;
        }
        true
    }

    pub fn text(&self) -> String {
        self.snapshot().join("\n")
    }

    /// Waits until at least `n` lines (counted from the start) satisfy `pred`; returns them,
    /// or `None` if the stream ended or `timeout` passed first.
    pub fn wait_n(
        &self,
        n: usize,
        pred: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Option<Vec<String>> {
        let deadline = Instant::now() + timeout;
        let mut g = self.inner.lock().unwrap();
        loop {
            let found: Vec<String> = g.0.iter().filter(|l| pred(l)).cloned().collect();
            if found.len() >= n {
                return Some(found);
            }
            if g.1 {
                return None;
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            g = self.cv.wait_timeout(g, deadline - now).unwrap().0;
        }
    }

    /// Waits for the first line satisfying `pred`.
    pub fn wait(&self, pred: impl Fn(&str) -> bool, timeout: Duration) -> Option<String> {
        self.wait_n(1, pred, timeout).map(|mut v| v.swap_remove(0))
    }
}

fn spawn_line_reader(r: impl Read + Send + 'static, lines: Arc<Lines>) {
    thread::spawn(move || {
        let mut r = BufReader::new(r);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    while matches!(buf.last(), Some(b'\n' | b'\r')) {
                        buf.pop();
                    }
                    lines.push(String::from_utf8_lossy(&buf).into_owned());
                }
            }
        }
        lines.close();
    });
}

// ---------------------------------------------------------------------------------------------
// The sluice process
// ---------------------------------------------------------------------------------------------

/// Outcome of a sluice run that is expected to exit by itself (`-c`, `-v`, ...).
#[derive(Debug)]
pub struct CliOutput {
    /// Exit code (-1 if killed by a signal).
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `sluice ARGS` to completion (10 s at most) with extra environment variables.
pub fn run_cli_env(args: &[&str], env: &[(&str, &str)]) -> CliOutput {
    let mut cmd = Command::new(sluice_bin());
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().expect("spawn sluice");
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(WAIT) {
        Ok(o) => o.expect("wait for sluice"),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("sluice {args:?} did not exit within {WAIT:?}");
        }
    };
    CliOutput {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub fn run_cli(args: &[&str]) -> CliOutput {
    run_cli_env(args, &[])
}

/// A running `sluice -d -f CFG`. Killed (SIGKILL) on drop if still running.
pub struct Sluice {
    pid: i32,
    /// Holds the configuration file (and anything else a test puts there).
    pub dir: TempDir,
    pub cfg_path: PathBuf,
    pub stdout: Arc<Lines>,
    pub stderr: Arc<Lines>,
    exit: Arc<(Mutex<Option<ExitStatus>>, Condvar)>,
}

/// How to start sluice: extra arguments, environment, inherited descriptors.
pub struct SluiceBuilder {
    cfg: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    env_remove: Vec<String>,
    inherit: Vec<RawFd>,
    debug: bool,
}

impl SluiceBuilder {
    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    pub fn env_remove(mut self, k: &str) -> Self {
        self.env_remove.push(k.into());
        self
    }

    /// Lets the child inherit descriptor `fd` (same number), for `bind fd@N`.
    pub fn inherit_fd(mut self, fd: RawFd) -> Self {
        self.inherit.push(fd);
        self
    }

    /// Starts with `-db` instead of `-d` (no readiness line: use [`Self::spawn`]).
    pub fn no_debug(mut self) -> Self {
        self.debug = false;
        self
    }

    /// Starts sluice and returns at once.
    pub fn spawn(self) -> Sluice {
        let dir = TempDir::new();
        let cfg_path = dir.write("sluice.cfg", &self.cfg);
        let mut cmd = Command::new(sluice_bin());
        cmd.arg(if self.debug { "-d" } else { "-db" })
            .arg("-f")
            .arg(&cfg_path)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        for k in &self.env_remove {
            cmd.env_remove(k);
        }
        if !self.inherit.is_empty() {
            keep_fds_open(&mut cmd, self.inherit.clone());
        }
        let mut child = cmd.spawn().expect("spawn sluice");
        let stdout = Arc::new(Lines::default());
        let stderr = Arc::new(Lines::default());
        spawn_line_reader(child.stdout.take().unwrap(), stdout.clone());
        spawn_line_reader(child.stderr.take().unwrap(), stderr.clone());
        let pid = child.id() as i32;
        let exit: Arc<(Mutex<Option<ExitStatus>>, Condvar)> =
            Arc::new((Mutex::new(None), Condvar::new()));
        let e2 = exit.clone();
        thread::spawn(move || {
            let st = child.wait().expect("wait sluice");
            *e2.0.lock().unwrap() = Some(st);
            e2.1.notify_all();
        });
        Sluice {
            pid,
            dir,
            cfg_path,
            stdout,
            stderr,
            exit,
        }
    }

    /// Starts sluice and waits for its readiness line; panics (with its stderr) if it exits or
    /// does not get ready in time.
    pub fn start(self) -> Sluice {
        assert!(self.debug, "start() needs -d for the readiness line");
        let s = self.spawn();
        s.wait_ready();
        s
    }
}

/// Clears FD_CLOEXEC on `fds` in the child between fork and exec.
fn keep_fds_open(cmd: &mut Command, fds: Vec<RawFd>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec; it only calls fcntl(2), which is
    // async-signal-safe, on descriptor numbers copied in beforehand, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &fds {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

impl Sluice {
    pub fn builder(cfg: &str) -> SluiceBuilder {
        SluiceBuilder {
            cfg: cfg.to_string(),
            args: Vec::new(),
            env: Vec::new(),
            env_remove: Vec::new(),
            inherit: Vec::new(),
            debug: true,
        }
    }

    /// Writes `cfg_text` to a temp file, runs `sluice -d -f FILE`, waits until it is ready.
    pub fn start(cfg_text: &str) -> Sluice {
        Sluice::builder(cfg_text).start()
    }

    /// `sluice -c -f FILE`: (exit code, stderr).
    pub fn check(cfg_text: &str) -> (i32, String) {
        let o = Sluice::check_full(cfg_text, &[]);
        (o.code, o.stderr)
    }

    /// `sluice -c -f FILE` with extra environment; the file is `<tmp>/sluice.cfg`, and its path
    /// is substituted for `@CFG@` in the returned stderr so messages can be compared exactly.
    pub fn check_full(cfg_text: &str, env: &[(&str, &str)]) -> CliOutput {
        let dir = TempDir::new();
        let p = dir.write("sluice.cfg", cfg_text);
        let ps = p.to_str().unwrap().to_string();
        let mut o = run_cli_env(&["-c", "-f", &ps], env);
        o.stderr = o.stderr.replace(&ps, "@CFG@");
        o.stdout = o.stdout.replace(&ps, "@CFG@");
        o
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Everything written to stderr so far (for failure messages).
    pub fn stderr_text(&self) -> String {
        self.stderr.text()
    }

    fn wait_ready(&self) {
        let ok = self
            .stderr
            .wait(|l| l.contains(READY), Duration::from_secs(20));
        if ok.is_none() {
            let st = self.wait_exit(Duration::from_millis(200));
            panic!(
                "sluice did not become ready (exit status {st:?}).\nconfig:\n{}\nstderr:\n{}\nstdout:\n{}",
                std::fs::read_to_string(&self.cfg_path).unwrap_or_default(),
                self.stderr.text(),
                self.stdout.text()
            );
        }
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        if self.exit_status().is_none() {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid), sig).expect("kill");
        }
    }

    pub fn exit_status(&self) -> Option<ExitStatus> {
        *self.exit.0.lock().unwrap()
    }

    /// Waits for the process to exit.
    pub fn wait_exit(&self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        let mut g = self.exit.0.lock().unwrap();
        loop {
            if let Some(s) = *g {
                drop(g);
                // The process is gone; its output is complete once the readers hit EOF (a
                // daemonised child may keep the pipes open, so this wait is bounded).
                let left = deadline.saturating_duration_since(Instant::now());
                let left = left.min(Duration::from_secs(2));
                self.stdout.wait_end(left);
                self.stderr.wait_end(left);
                return Some(s);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            g = self.exit.1.wait_timeout(g, deadline - now).unwrap().0;
        }
    }

    /// Waits for a stdout line (e.g. an access-log line) satisfying `pred`; panics with the
    /// collected output if none comes within `timeout`.
    pub fn wait_log_line(&self, pred: impl Fn(&str) -> bool, timeout: Duration) -> String {
        match self.stdout.wait(pred, timeout) {
            Some(l) => l,
            None => panic!(
                "no matching stdout line within {timeout:?}.\nstdout:\n{}\nstderr:\n{}",
                self.stdout.text(),
                self.stderr.text()
            ),
        }
    }

    /// Waits until `n` stdout lines satisfy `pred`; returns them.
    pub fn wait_log_lines(
        &self,
        n: usize,
        pred: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Vec<String> {
        match self.stdout.wait_n(n, pred, timeout) {
            Some(l) => l,
            None => panic!(
                "fewer than {n} matching stdout lines within {timeout:?}.\nstdout:\n{}\nstderr:\n{}",
                self.stdout.text(),
                self.stderr.text()
            ),
        }
    }

    /// Like [`Self::wait_log_line`] for stderr.
    pub fn wait_stderr_line(&self, pred: impl Fn(&str) -> bool, timeout: Duration) -> String {
        match self.stderr.wait(pred, timeout) {
            Some(l) => l,
            None => panic!(
                "no matching stderr line within {timeout:?}.\nstderr:\n{}",
                self.stderr.text()
            ),
        }
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        if self.exit_status().is_none() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = self.wait_exit(WAIT);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Gate: lets a test hold backend responses and release them one by one
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Default)]
pub struct Gate {
    inner: Arc<(Mutex<(usize, bool)>, Condvar)>,
}

impl Gate {
    pub fn new() -> Gate {
        Gate::default()
    }

    /// Blocks until a permit is released or the gate is opened (60 s at most, so a failed test
    /// does not leave threads behind forever).
    pub fn wait(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut g = self.inner.0.lock().unwrap();
        loop {
            if g.1 {
                return;
            }
            if g.0 > 0 {
                g.0 -= 1;
                return;
            }
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            g = self.inner.1.wait_timeout(g, deadline - now).unwrap().0;
        }
    }

    /// Lets `n` waiters through.
    pub fn release(&self, n: usize) {
        self.inner.0.lock().unwrap().0 += n;
        self.inner.1.notify_all();
    }

    /// Lets every present and future waiter through.
    pub fn open(&self) {
        self.inner.0.lock().unwrap().1 = true;
        self.inner.1.notify_all();
    }
}

// ---------------------------------------------------------------------------------------------
// Byte-level connection reader shared by the client and the test servers
// ---------------------------------------------------------------------------------------------

/// A stream plus a read-ahead buffer.
pub struct Wire<S> {
    pub stream: S,
    pub buf: Vec<u8>,
}

/// `read(2)` that retries `EINTR`. On Linux a socket with `SO_RCVTIMEO` fails a blocked read
/// with `EINTR` when the process is stopped and continued (a CI runner freezing the job), even
/// with no signal handler installed; that is no event of the test's.
pub fn read_retrying(s: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match s.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

impl<S: Read + Write> Wire<S> {
    pub fn new(stream: S) -> Self {
        Wire {
            stream,
            buf: Vec::new(),
        }
    }

    /// Reads more bytes into the buffer; Ok(0) at end of stream.
    pub fn fill(&mut self) -> io::Result<usize> {
        let mut tmp = [0u8; 65536];
        let n = read_retrying(&mut self.stream, &mut tmp)?;
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(n)
    }

    /// Bytes up to and including `pat`; `Ok(None)` if the stream ends first with nothing
    /// buffered; an error if it ends in the middle.
    pub fn read_until(&mut self, pat: &[u8]) -> io::Result<Option<Vec<u8>>> {
        let mut from = 0;
        loop {
            if let Some(i) = find(&self.buf[from..], pat) {
                let end = from + i + pat.len();
                return Ok(Some(self.buf.drain(..end).collect()));
            }
            from = self.buf.len().saturating_sub(pat.len());
            if self.fill()? == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "stream ended mid-message",
                ));
            }
        }
    }

    pub fn take(&mut self, n: usize) -> io::Result<Vec<u8>> {
        while self.buf.len() < n {
            if self.fill()? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "stream ended mid-body",
                ));
            }
        }
        Ok(self.buf.drain(..n).collect())
    }

    pub fn read_to_end(&mut self) -> io::Result<Vec<u8>> {
        while self.fill()? > 0 {}
        Ok(std::mem::take(&mut self.buf))
    }

    /// Decodes a chunked body; returns (data, trailers).
    pub fn read_chunked(&mut self) -> io::Result<(Vec<u8>, Trailers)> {
        let mut body = Vec::new();
        loop {
            let line = self
                .read_until(b"\r\n")?
                .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "eof in chunk size"))?;
            let s = String::from_utf8_lossy(&line[..line.len() - 2]).into_owned();
            let hex = s.split(';').next().unwrap().trim();
            let n = usize::from_str_radix(hex, 16).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidData, format!("bad chunk size {s:?}"))
            })?;
            if n == 0 {
                break;
            }
            body.extend(self.take(n)?);
            let crlf = self.take(2)?;
            if crlf != b"\r\n" {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "missing CRLF after chunk",
                ));
            }
        }
        let mut trailers = Vec::new();
        loop {
            let line = self
                .read_until(b"\r\n")?
                .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "eof in trailers"))?;
            if line == b"\r\n" {
                break;
            }
            trailers.push(split_header(&line[..line.len() - 2]));
        }
        Ok((body, trailers))
    }
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

fn split_header(line: &[u8]) -> (String, String) {
    let s = String::from_utf8_lossy(line);
    match s.split_once(':') {
        Some((n, v)) => (n.to_string(), v.trim().to_string()),
        None => (s.to_string(), String::new()),
    }
}

fn get_header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn get_headers<'a>(h: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    h.iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect()
}

/// Parses a head (start line + header lines, CRLF-terminated) into (start line, headers).
fn parse_head(raw: &[u8]) -> (String, Vec<(String, String)>) {
    let text = &raw[..raw.len().saturating_sub(4)];
    let mut lines = text
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let start = String::from_utf8_lossy(lines.next().unwrap_or_default()).into_owned();
    let headers = lines.filter(|l| !l.is_empty()).map(split_header).collect();
    (start, headers)
}

// ---------------------------------------------------------------------------------------------
// HTTP client
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Default)]
pub struct Response {
    pub version: String,
    pub status: u16,
    pub reason: String,
    /// In received order and case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub trailers: Vec<(String, String)>,
    pub chunked: bool,
    /// The body ran until the connection closed.
    pub close_delimited: bool,
    /// The head exactly as received (status line + headers + blank line).
    pub raw_head: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        get_header(&self.headers, name)
    }

    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        get_headers(&self.headers, name)
    }

    pub fn body_str(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The value of the `X-Server` header our test backends set (which server answered).
    pub fn server(&self) -> String {
        self.header("x-server").unwrap_or("<none>").to_string()
    }

    /// Whether a `Connection` header carries `close`.
    pub fn conn_close(&self) -> bool {
        self.headers_named("connection")
            .iter()
            .any(|v| v.to_ascii_lowercase().contains("close"))
    }
}

/// What a read on a connection that should be closing saw.
#[derive(Debug, PartialEq, Eq)]
pub enum Closed {
    /// Orderly end of stream (FIN).
    Eof,
    /// Reset by peer.
    Reset,
    /// Still open at the deadline.
    StillOpen,
    /// Bytes arrived instead.
    Data(Vec<u8>),
}

impl Closed {
    pub fn is_closed(&self) -> bool {
        matches!(self, Closed::Eof | Closed::Reset)
    }
}

/// A blocking HTTP/1.x client over any stream (TCP by default, unix sockets too).
pub struct HttpClient<S = TcpStream> {
    pub wire: Wire<S>,
}

impl HttpClient<TcpStream> {
    pub fn connect(port: u16) -> Self {
        Self::connect_addr(lo(port))
    }

    pub fn connect_addr(addr: SocketAddr) -> Self {
        let s = TcpStream::connect_timeout(&addr, WAIT)
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        Self::from_tcp(s)
    }

    pub fn from_tcp(s: TcpStream) -> Self {
        s.set_read_timeout(Some(WAIT)).unwrap();
        s.set_write_timeout(Some(WAIT)).unwrap();
        s.set_nodelay(true).unwrap();
        HttpClient { wire: Wire::new(s) }
    }

    pub fn tcp(&self) -> &TcpStream {
        &self.wire.stream
    }

    pub fn local_port(&self) -> u16 {
        self.wire.stream.local_addr().unwrap().port()
    }

    pub fn shutdown_write(&self) {
        self.wire.stream.shutdown(Shutdown::Write).unwrap();
    }

    pub fn set_read_timeout(&self, d: Duration) {
        self.wire.stream.set_read_timeout(Some(d)).unwrap();
    }

    /// Reads until the connection closes or `timeout` passes, and says which.
    pub fn wait_closed(&mut self, timeout: Duration) -> Closed {
        if !self.wire.buf.is_empty() {
            return Closed::Data(std::mem::take(&mut self.wire.buf));
        }
        self.set_read_timeout(timeout);
        let mut b = [0u8; 4096];
        let r = read_retrying(&mut self.wire.stream, &mut b);
        self.set_read_timeout(WAIT);
        match r {
            Ok(0) => Closed::Eof,
            Ok(n) => Closed::Data(b[..n].to_vec()),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Closed::Reset,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Closed::StillOpen
            }
            Err(e) => panic!("read: {e}"),
        }
    }

    /// Panics unless the connection closes (FIN or RST) within [`WAIT`].
    pub fn expect_closed(&mut self) {
        let c = self.wait_closed(WAIT);
        assert!(
            c.is_closed(),
            "expected the connection to be closed, got {c:?}"
        );
    }

    /// Panics unless nothing arrives and the connection stays open for `d` (a negative check:
    /// it necessarily takes `d`).
    pub fn expect_silent_for(&mut self, d: Duration) {
        let c = self.wait_closed(d);
        assert_eq!(
            c,
            Closed::StillOpen,
            "expected no data and an open connection for {d:?}"
        );
    }
}

impl<S: Read + Write> HttpClient<S> {
    pub fn from_stream(s: S) -> Self {
        HttpClient { wire: Wire::new(s) }
    }

    pub fn send(&mut self, bytes: impl AsRef<[u8]>) {
        self.wire.stream.write_all(bytes.as_ref()).expect("send");
        self.wire.stream.flush().unwrap();
    }

    /// Reads the next response (1xx included). `head_req`: the request was HEAD (no body).
    pub fn try_read_response(&mut self, head_req: bool) -> io::Result<Response> {
        let raw = self.wire.read_until(b"\r\n\r\n")?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before a response",
            )
        })?;
        let (start, headers) = parse_head(&raw);
        let mut parts = start.splitn(3, ' ');
        let version = parts.next().unwrap_or("").to_string();
        let status: u16 = parts.next().and_then(|s| s.parse().ok()).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad status line {start:?}"),
            )
        })?;
        let reason = parts.next().unwrap_or("").to_string();
        let mut r = Response {
            version,
            status,
            reason,
            headers,
            raw_head: raw,
            ..Default::default()
        };
        if (100..200).contains(&status) || head_req || status == 204 || status == 304 {
            return Ok(r);
        }
        let te = r
            .header("transfer-encoding")
            .map(|v| v.to_ascii_lowercase());
        if te.as_deref().is_some_and(|t| t.contains("chunked")) {
            let (b, t) = self.wire.read_chunked()?;
            r.body = b;
            r.trailers = t;
            r.chunked = true;
        } else if let Some(cl) = r.header("content-length") {
            let n: usize = cl
                .trim()
                .parse()
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad content-length"))?;
            r.body = self.wire.take(n)?;
        } else {
            r.body = self.wire.read_to_end()?;
            r.close_delimited = true;
        }
        Ok(r)
    }

    /// Reads the next response (1xx included); panics on error.
    pub fn read_response(&mut self) -> Response {
        self.try_read_response(false)
            .unwrap_or_else(|e| panic!("reading a response: {e}"))
    }

    /// Reads responses until a final (non-1xx) one.
    pub fn read_final(&mut self, head_req: bool) -> Response {
        loop {
            let r = self
                .try_read_response(head_req)
                .unwrap_or_else(|e| panic!("reading a response: {e}"));
            if r.status >= 200 || r.status == 101 {
                return r;
            }
        }
    }

    /// Sends `raw` and reads the final response.
    pub fn request(&mut self, raw: impl AsRef<[u8]>) -> Response {
        let raw = raw.as_ref();
        self.send(raw);
        self.read_final(raw.starts_with(b"HEAD "))
    }

    /// `GET path` with keep-alive.
    pub fn get(&mut self, path: &str) -> Response {
        self.request(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n"))
    }

    /// `GET path` with extra raw header lines (each ending in `\r\n`).
    pub fn get_with(&mut self, path: &str, extra_headers: &str) -> Response {
        self.request(format!(
            "GET {path} HTTP/1.1\r\nHost: test\r\n{extra_headers}\r\n"
        ))
    }
}

/// One `GET path` on a fresh connection with `Connection: close`.
pub fn http_get(port: u16, path: &str) -> Response {
    let mut c = HttpClient::connect(port);
    c.request(format!(
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    ))
}

/// One raw request on a fresh connection; returns the final response.
pub fn http_raw(port: u16, raw: impl AsRef<[u8]>) -> Response {
    let mut c = HttpClient::connect(port);
    c.request(raw)
}

/// Connects from a chosen loopback source address (127.0.0.x), for `balance source` tests.
pub fn connect_from(src: Ipv4Addr, dst: SocketAddr) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .unwrap();
    let s = rt
        .block_on(async {
            let sock = tokio::net::TcpSocket::new_v4()?;
            sock.bind(SocketAddr::new(src.into(), 0))?;
            tokio::time::timeout(WAIT, sock.connect(dst))
                .await
                .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
        })
        .unwrap_or_else(|e| panic!("connect {src} -> {dst}: {e}"));
    let s = s.into_std().unwrap();
    s.set_nonblocking(false).unwrap();
    s
}

// ---------------------------------------------------------------------------------------------
// HTTP test backend
// ---------------------------------------------------------------------------------------------

/// A request as the backend received it.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Which accepted connection (0-based, in accept order) carried it.
    pub conn_id: usize,
    pub method: String,
    pub target: String,
    pub version: String,
    /// In received order and case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub trailers: Vec<(String, String)>,
    pub chunked: bool,
    /// The head exactly as received.
    pub raw_head: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        get_header(&self.headers, name)
    }

    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        get_headers(&self.headers, name)
    }

    pub fn header_names(&self) -> Vec<&str> {
        self.headers.iter().map(|(n, _)| n.as_str()).collect()
    }

    fn wants_close(&self) -> bool {
        let conn = self
            .headers_named("connection")
            .iter()
            .map(|v| v.to_ascii_lowercase())
            .collect::<Vec<_>>()
            .join(",");
        if conn.contains("close") {
            return true;
        }
        self.version == "HTTP/1.0" && !conn.contains("keep-alive")
    }
}

/// What a test backend does with a request.
pub enum Reply {
    /// `status` with these headers and body; `content-length` is added unless a
    /// `content-length` or `transfer-encoding` header is given (and never for 1xx/204/304); the
    /// body is not sent for HEAD, 204 and 304.
    Full {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// These bytes verbatim; the connection stays open for the next request.
    Raw(Vec<u8>),
    /// These bytes verbatim, then close.
    RawClose(Vec<u8>),
    /// Close without answering.
    Close,
    /// Never answer; read until the peer closes.
    Hang,
    /// `101 Switching Protocols` (websocket), then echo every byte until the peer closes.
    Upgrade,
}

impl Reply {
    /// 200 with `X-Server: name` and body `name`.
    pub fn named(name: &str) -> Reply {
        Reply::Full {
            status: 200,
            headers: vec![
                ("X-Server".into(), name.into()),
                ("Content-Type".into(), "text/plain".into()),
            ],
            body: name.as_bytes().to_vec(),
        }
    }

    pub fn status(status: u16, name: &str, body: impl Into<Vec<u8>>) -> Reply {
        Reply::Full {
            status,
            headers: vec![("X-Server".into(), name.into())],
            body: body.into(),
        }
    }

    /// 200 whose body is the request target (path + query).
    pub fn echo_target(name: &str, r: &Request) -> Reply {
        Reply::status(200, name, r.target.clone())
    }
}

pub type Handler = Arc<dyn Fn(&Request) -> Reply + Send + Sync>;

/// The WebSocket key of RFC 6455's example handshake, and the accept value that goes with it
/// (the upgrade server answers it; HAProxy checks it).
pub const WS_SAMPLE_KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
pub const WS_SAMPLE_ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

struct BackendState {
    conns: AtomicUsize,
    open_conns: AtomicUsize,
    reqs: AtomicUsize,
    log: Mutex<Vec<Request>>,
    cv: Condvar,
    stop: AtomicBool,
    send_continue: AtomicBool,
}

/// An HTTP/1.1 test server. Stops listening on drop.
pub struct HttpBackend {
    pub name: String,
    pub addr: SocketAddr,
    state: Arc<BackendState>,
}

impl HttpBackend {
    /// Echoes the target, but requests whose target contains `slow` wait for `gate` first and
    /// those with `hang` never get an answer.
    pub fn gated(name: &str, gate: &Gate) -> HttpBackend {
        let g = gate.clone();
        let n = name.to_string();
        HttpBackend::with_handler(name, move |r| {
            if r.target.contains("slow") {
                g.wait();
            }
            if r.target.contains("hang") {
                return Reply::Hang;
            }
            Reply::echo_target(&n, r)
        })
    }

    /// Answers every request with [`Reply::named`].
    pub fn start(name: &str) -> HttpBackend {
        let n = name.to_string();
        Self::with_handler(name, move |_| Reply::named(&n))
    }

    pub fn with_handler(
        name: &str,
        f: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> HttpBackend {
        let listener = TcpListener::bind(lo(0)).expect("bind backend");
        Self::serve(name, listener, f)
    }

    /// Serves [`Reply::named`] on an already bound listener (a server that comes back on a
    /// port that was closed).
    pub fn from_listener(name: &str, listener: TcpListener) -> HttpBackend {
        let n = name.to_string();
        Self::serve(name, listener, move |_| Reply::named(&n))
    }

    fn serve(
        name: &str,
        listener: TcpListener,
        f: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> HttpBackend {
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(BackendState {
            conns: AtomicUsize::new(0),
            open_conns: AtomicUsize::new(0),
            reqs: AtomicUsize::new(0),
            log: Mutex::new(Vec::new()),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            send_continue: AtomicBool::new(true),
        });
        let handler: Handler = Arc::new(f);
        let st = state.clone();
        thread::spawn(move || {
            for conn in listener.incoming() {
                if st.stop.load(SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let id = st.conns.fetch_add(1, SeqCst);
                st.open_conns.fetch_add(1, SeqCst);
                st.cv.notify_all();
                let st2 = st.clone();
                let h = handler.clone();
                thread::spawn(move || {
                    let _ = serve_http_conn(conn, id, &st2, &h);
                    st2.open_conns.fetch_sub(1, SeqCst);
                    st2.cv.notify_all();
                });
            }
        });
        HttpBackend {
            name: name.to_string(),
            addr,
            state,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `IP:PORT` for a `server` line.
    pub fn hostport(&self) -> String {
        self.addr.to_string()
    }

    /// Whether to answer `Expect: 100-continue` with an interim 100 (default true).
    pub fn set_send_continue(&self, on: bool) {
        self.state.send_continue.store(on, SeqCst);
    }

    /// Connections accepted so far.
    pub fn conns(&self) -> usize {
        self.state.conns.load(SeqCst)
    }

    /// Connections currently open.
    pub fn open_conns(&self) -> usize {
        self.state.open_conns.load(SeqCst)
    }

    /// Complete request heads received so far.
    pub fn reqs(&self) -> usize {
        self.state.reqs.load(SeqCst)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.state.log.lock().unwrap().clone()
    }

    pub fn last_request(&self) -> Request {
        self.requests().pop().expect("backend received no request")
    }

    /// Waits until at least `n` requests have arrived (their heads and bodies read; recorded
    /// before the handler runs); returns all of them.
    pub fn wait_requests(&self, n: usize, timeout: Duration) -> Vec<Request> {
        let deadline = Instant::now() + timeout;
        let mut g = self.state.log.lock().unwrap();
        while g.len() < n {
            let now = Instant::now();
            assert!(
                now < deadline,
                "backend {} got {} requests, expected {n} within {timeout:?}",
                self.name,
                g.len()
            );
            g = self.state.cv.wait_timeout(g, deadline - now).unwrap().0;
        }
        g.clone()
    }

    /// Waits until the number of open connections satisfies `pred`.
    pub fn wait_open_conns(&self, pred: impl Fn(usize) -> bool, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        let mut g = self.state.log.lock().unwrap();
        loop {
            let n = self.open_conns();
            if pred(n) {
                return n;
            }
            let now = Instant::now();
            assert!(
                now < deadline,
                "backend {}: open connections stuck at {n}",
                self.name
            );
            g = self
                .state
                .cv
                .wait_timeout(g, (deadline - now).min(Duration::from_millis(50)))
                .unwrap()
                .0;
        }
    }
}

impl Drop for HttpBackend {
    fn drop(&mut self) {
        self.state.stop.store(true, SeqCst);
        // Wake the accept loop so it sees the flag and closes the listener.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Whatever",
    }
}

fn serve_http_conn(stream: TcpStream, id: usize, st: &BackendState, h: &Handler) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut w = Wire::new(stream);
    loop {
        if st.stop.load(SeqCst) && w.buf.is_empty() {
            // The test dropped this backend; stop serving on old connections too.
            return Ok(());
        }
        let Some(raw) = w.read_until(b"\r\n\r\n")? else {
            return Ok(());
        };
        let (start, headers) = parse_head(&raw);
        let mut parts = start.splitn(3, ' ');
        let mut req = Request {
            conn_id: id,
            method: parts.next().unwrap_or("").to_string(),
            target: parts.next().unwrap_or("").to_string(),
            version: parts.next().unwrap_or("").to_string(),
            headers,
            raw_head: raw,
            ..Default::default()
        };
        let expect_continue = req
            .header("expect")
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
        if expect_continue && st.send_continue.load(SeqCst) {
            w.stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        }
        let te = req
            .header("transfer-encoding")
            .map(|v| v.to_ascii_lowercase());
        if te.is_some_and(|t| t.contains("chunked")) {
            let (b, t) = w.read_chunked()?;
            req.body = b;
            req.trailers = t;
            req.chunked = true;
        } else if let Some(n) = req
            .header("content-length")
            .and_then(|v| v.trim().parse::<usize>().ok())
        {
            req.body = w.take(n)?;
        }
        let is_head = req.method == "HEAD";
        let close_after = req.wants_close();
        {
            st.reqs.fetch_add(1, SeqCst);
            st.log.lock().unwrap().push(req.clone());
            st.cv.notify_all();
        }
        let keep = match h(&req) {
            Reply::Full {
                status,
                headers,
                body,
            } => {
                let mut out = format!("HTTP/1.1 {status} {}\r\n", reason(status));
                let no_body = (100..200).contains(&status) || status == 204 || status == 304;
                let framed = get_header(&headers, "content-length").is_some()
                    || get_header(&headers, "transfer-encoding").is_some();
                for (n, v) in &headers {
                    out.push_str(&format!("{n}: {v}\r\n"));
                }
                if !framed && !no_body {
                    out.push_str(&format!("Content-Length: {}\r\n", body.len()));
                }
                out.push_str("\r\n");
                let mut bytes = out.into_bytes();
                if !is_head && !no_body {
                    bytes.extend_from_slice(&body);
                }
                w.stream.write_all(&bytes)?;
                !close_after
            }
            Reply::Raw(b) => {
                w.stream.write_all(&b)?;
                !close_after
            }
            Reply::RawClose(b) => {
                w.stream.write_all(&b)?;
                false
            }
            Reply::Close => false,
            Reply::Hang => {
                let mut sink = [0u8; 4096];
                while matches!(read_retrying(&mut w.stream, &mut sink), Ok(n) if n > 0) {}
                false
            }
            Reply::Upgrade => {
                let accept = match req.header("sec-websocket-key") {
                    Some(WS_SAMPLE_KEY) => format!("Sec-WebSocket-Accept: {WS_SAMPLE_ACCEPT}\r\n"),
                    _ => String::new(),
                };
                w.stream.write_all(
                    format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n{accept}\r\n")
                        .as_bytes(),
                )?;
                if !w.buf.is_empty() {
                    let b = std::mem::take(&mut w.buf);
                    w.stream.write_all(&b)?;
                }
                echo_until_eof(&mut w.stream)?;
                false
            }
        };
        if !keep {
            let _ = w.stream.shutdown(Shutdown::Write);
            // Drain so the close is a FIN, not a reset caused by unread data.
            let _ = w.stream.set_read_timeout(Some(Duration::from_secs(2)));
            let mut sink = [0u8; 4096];
            while matches!(read_retrying(&mut w.stream, &mut sink), Ok(n) if n > 0) {}
            return Ok(());
        }
    }
}

fn echo_until_eof(s: &mut TcpStream) -> io::Result<()> {
    let mut b = [0u8; 65536];
    loop {
        let n = read_retrying(s, &mut b)?;
        if n == 0 {
            let _ = s.shutdown(Shutdown::Write);
            return Ok(());
        }
        s.write_all(&b[..n])?;
    }
}

// ---------------------------------------------------------------------------------------------
// TCP test backend
// ---------------------------------------------------------------------------------------------

/// A raw TCP server: one thread per connection running a handler.
pub struct TcpBackend {
    pub addr: SocketAddr,
    conns: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl TcpBackend {
    /// Echoes every byte; half-closes when the client does.
    pub fn echo() -> TcpBackend {
        Self::with_handler(|mut s, _| {
            let _ = echo_until_eof(&mut s);
        })
    }

    /// `f(stream, connection index)` runs on its own thread for each connection.
    pub fn with_handler(f: impl Fn(TcpStream, usize) + Send + Sync + 'static) -> TcpBackend {
        let listener = TcpListener::bind(lo(0)).expect("bind tcp backend");
        let addr = listener.local_addr().unwrap();
        let conns = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let f = Arc::new(f);
        let (c2, s2) = (conns.clone(), stop.clone());
        thread::spawn(move || {
            for conn in listener.incoming() {
                if s2.load(SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let id = c2.fetch_add(1, SeqCst);
                let f = f.clone();
                thread::spawn(move || f(conn, id));
            }
        });
        TcpBackend { addr, conns, stop }
    }

    pub fn hostport(&self) -> String {
        self.addr.to_string()
    }

    pub fn conns(&self) -> usize {
        self.conns.load(SeqCst)
    }
}

impl Drop for TcpBackend {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

// ---------------------------------------------------------------------------------------------
// A server address whose connections never complete
// ---------------------------------------------------------------------------------------------

/// A listener with a backlog of 0 whose accept queue is full and never accepted from: further
/// SYNs are dropped by the kernel, so a connect() to it hangs until the caller's timeout.
pub struct Blackhole {
    pub addr: SocketAddr,
    _listener: TcpListener,
    _fillers: Vec<TcpStream>,
}

impl Blackhole {
    pub fn new() -> Blackhole {
        use std::os::fd::FromRawFd;
        // SAFETY: plain socket syscalls on a descriptor we create here; `sa` and `len` are valid
        // stack values of the sizes passed. The descriptor is owned by the TcpListener below
        // exactly once.
        let listener = unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0, "socket: {}", io::Error::last_os_error());
            let mut sa: libc::sockaddr_in = std::mem::zeroed();
            sa.sin_family = libc::AF_INET as libc::sa_family_t;
            sa.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
            sa.sin_port = 0;
            let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            assert_eq!(
                libc::bind(fd, (&sa as *const libc::sockaddr_in).cast(), len),
                0,
                "bind"
            );
            assert_eq!(libc::listen(fd, 0), 0, "listen");
            TcpListener::from_raw_fd(fd)
        };
        let addr = listener.local_addr().unwrap();
        let mut fillers = Vec::new();
        for _ in 0..16 {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
                Ok(s) => fillers.push(s),
                Err(_) => {
                    // This connect did not complete: the accept queue is full.
                    return Blackhole {
                        addr,
                        _listener: listener,
                        _fillers: fillers,
                    };
                }
            }
        }
        panic!("could not fill the accept queue of a backlog-0 listener");
    }

    pub fn hostport(&self) -> String {
        self.addr.to_string()
    }
}

// ---------------------------------------------------------------------------------------------
// Observing sockets through /proc/net/tcp
// ---------------------------------------------------------------------------------------------

fn proc_addr(a: SocketAddr) -> Option<String> {
    match a {
        SocketAddr::V4(v4) => Some(format!(
            "{:08X}:{:04X}",
            u32::from_ne_bytes(v4.ip().octets()),
            v4.port()
        )),
        SocketAddr::V6(_) => None,
    }
}

/// (tx_queue, rx_queue) of the TCP socket with this local and remote address, if any.
fn proc_queues(local: &str, remote: &str) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/net/tcp").ok()?;
    for l in text.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() > 4 && f[1] == local && f[2] == remote {
            let (tx, rx) = f[4].split_once(':')?;
            return Some((
                u64::from_str_radix(tx, 16).ok()?,
                u64::from_str_radix(rx, 16).ok()?,
            ));
        }
    }
    None
}

/// Waits until everything written on `client` has been read by the process at the other end
/// (acknowledged by the peer's kernel and no longer waiting in the peer socket's receive queue).
/// This is how a test knows sluice has taken a request in, e.g. before queuing the next one.
pub fn wait_consumed(client: &TcpStream) {
    let me = client.local_addr().unwrap();
    let peer = client.peer_addr().unwrap();
    let (Some(me_s), Some(peer_s)) = (proc_addr(me), proc_addr(peer)) else {
        panic!("wait_consumed supports IPv4 only");
    };
    let deadline = Instant::now() + WAIT;
    loop {
        let mine = proc_queues(&me_s, &peer_s);
        let theirs = proc_queues(&peer_s, &me_s);
        if let (Some((0, _)), Some((_, 0))) = (mine, theirs) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "peer did not read our bytes within {WAIT:?} ({mine:?} / {theirs:?})"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// Waits (polling) until `f` returns true; panics after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Whether a TCP connect to `port` on 127.0.0.1 is refused right now.
pub fn connect_refused(port: u16) -> bool {
    match TcpStream::connect_timeout(&lo(port), Duration::from_secs(2)) {
        Err(e) => e.kind() == io::ErrorKind::ConnectionRefused,
        Ok(_) => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Config snippets
// ---------------------------------------------------------------------------------------------

/// `defaults` for HTTP tests: short connect, generous client/server timeouts.
pub const DEFAULTS_HTTP: &str = "defaults
    mode http
    timeout connect 2s
    timeout client 10s
    timeout server 10s
";

/// Sends one command line to a `stats socket` and returns the reply, read until sluice
/// closes the connection.
pub fn stats_cli(path: &Path, line: &str) -> String {
    let mut s = std::os::unix::net::UnixStream::connect(path).expect("connect to stats socket");
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(format!("{line}\n").as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read reply");
    out
}

/// Column `col` of the `show stat` row of server `be/srv`, read over the stats socket.
pub fn stat_column(sock: &Path, be: &str, srv: &str, col: &str) -> String {
    let csv = stats_cli(sock, "show stat");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines
        .next()
        .expect("header")
        .trim_start_matches("# ")
        .split(',')
        .collect();
    let row: Vec<&str> = lines
        .find(|l| l.starts_with(&format!("{be},{srv},")))
        .unwrap_or_else(|| panic!("no row for {be}/{srv}:\n{csv}"))
        .split(',')
        .collect();
    let i = header
        .iter()
        .position(|h| *h == col)
        .unwrap_or_else(|| panic!("no column {col}"));
    row[i].to_string()
}

/// `global` + `defaults` with HAProxy-format access logs on stdout.
pub const LOGGED_HTTP: &str = "global
    log stdout format raw local0
defaults
    mode http
    log global
    option httplog
    timeout connect 2s
    timeout client 10s
    timeout server 10s
";

/// `global` + `defaults` for `mode tcp` with `option tcplog` lines on stdout.
pub const LOGGED_TCP: &str = "global
    log stdout format raw local0
defaults
    mode tcp
    log global
    option tcplog
    timeout connect 2s
    timeout client 10s
    timeout server 10s
";

/// A `backend NAME` section with the given backends as servers s1, s2, ...
pub fn backend_section(name: &str, extra: &str, servers: &[&HttpBackend]) -> String {
    let mut s = format!("backend {name}\n{extra}");
    if !extra.is_empty() && !extra.ends_with('\n') {
        s.push('\n');
    }
    for (i, b) in servers.iter().enumerate() {
        s.push_str(&format!("    server {} {}\n", b.name, b.hostport()));
        let _ = i;
    }
    s
}

/// `key=value` pairs of the `show pools` line of server `name` (`be/srv`), and of each of
/// its thread lines.
pub fn pool_line(
    sock: &std::path::Path,
    name: &str,
) -> (
    std::collections::HashMap<String, u64>,
    Vec<std::collections::HashMap<String, u64>>,
) {
    let out = stats_cli(sock, "show pools");
    let kv = |l: &str| {
        l.split_whitespace()
            .filter_map(|w| w.split_once('='))
            .filter_map(|(k, v)| Some((k.to_string(), v.trim_end_matches("ms").parse().ok()?)))
            .collect()
    };
    let mut lines = out
        .lines()
        .skip_while(|l| !l.starts_with(&format!("{name}:")));
    let server = lines
        .next()
        .map(kv)
        .unwrap_or_else(|| panic!("no {name} line: {out}"));
    let threads = lines
        .take_while(|l| l.trim_start().starts_with("thread "))
        .map(kv)
        .collect();
    (server, threads)
}

/// `TCP_INFO` of a client socket: (segments received, of which carrying data).
pub fn segments_in(c: &std::net::TcpStream) -> (u32, u32) {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed `tcp_info` is a valid value, and getsockopt writes at most `len`
    // bytes into it, on a socket this test owns.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let r = libc::getsockopt(
            c.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        assert_eq!(r, 0, "TCP_INFO: {}", std::io::Error::last_os_error());
        (info.tcpi_segs_in, info.tcpi_data_segs_in)
    }
}

// ---------------------------------------------------------------------------------------------
// TCP: a ClientHello to route by, a server that records what it gets
// ---------------------------------------------------------------------------------------------

/// A TLS 1.2-style ClientHello record offering one cipher suite and, if given, an SNI.
pub fn client_hello(sni: Option<&str>) -> Vec<u8> {
    client_hello_alpn(sni, &[])
}

/// [`client_hello`] with an ALPN extension listing `alpn` (none when empty).
pub fn client_hello_alpn(sni: Option<&str>, alpn: &[&str]) -> Vec<u8> {
    let mut ext = Vec::new();
    if !alpn.is_empty() {
        let list: Vec<u8> = alpn
            .iter()
            .flat_map(|p| [&[p.len() as u8][..], p.as_bytes()].concat())
            .collect();
        ext.extend_from_slice(&[0, 16]); // application_layer_protocol_negotiation
        ext.extend_from_slice(&(list.len() as u16 + 2).to_be_bytes());
        ext.extend_from_slice(&(list.len() as u16).to_be_bytes());
        ext.extend_from_slice(&list);
    }
    if let Some(name) = sni {
        let n = name.len() as u16;
        ext.extend_from_slice(&[0, 0]); // server_name
        ext.extend_from_slice(&(n + 5).to_be_bytes());
        ext.extend_from_slice(&(n + 3).to_be_bytes());
        ext.push(0); // host_name
        ext.extend_from_slice(&n.to_be_bytes());
        ext.extend_from_slice(name.as_bytes());
    }
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7u8; 32]); // random
    body.push(0); // session id
    body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
    body.extend_from_slice(&[1, 0]); // null compression
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut hs = vec![1, 0];
    hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 3, 1];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

/// A server that records the first bytes each connection sends, then answers its name.
pub struct Recorder {
    pub b: TcpBackend,
    pub seen: Arc<Mutex<Vec<Vec<u8>>>>,
}

pub fn recorder(name: &'static str) -> Recorder {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let b = TcpBackend::with_handler(move |mut s, _| {
        let mut buf = vec![0u8; 4096];
        s.set_read_timeout(Some(WAIT)).unwrap();
        if let Ok(n) = s.read(&mut buf) {
            s2.lock().unwrap().push(buf[..n].to_vec());
            let _ = s.write_all(name.as_bytes());
        }
    });
    Recorder { b, seen }
}

/// Sends `data` on a new connection to `port` and reads until sluice closes it.
pub fn tcp_send(port: u16, data: &[u8]) -> Vec<u8> {
    let mut c = TcpStream::connect(lo(port)).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(data).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    out
}

/// A TLS client configuration (aws-lc-rs) that accepts any server certificate (signatures
/// are still checked: sluice's own `verify none` verifier), offering `alpn` and `versions`.
pub fn insecure_client(
    alpn: &[&str],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> std::sync::Arc<rustls::ClientConfig> {
    use std::sync::Arc;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut c = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(sluice::tls::NoVerify(provider)))
        .with_no_client_auth();
    c.alpn_protocols = alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
    Arc::new(c)
}

/// `body` in the chunked transfer coding, in chunks of at most `size` bytes, with the last
/// chunk and no trailers.
pub fn chunked(body: &[u8], size: usize) -> Vec<u8> {
    let mut raw = Vec::with_capacity(body.len() + 64);
    for c in body.chunks(size) {
        raw.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        raw.extend_from_slice(c);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    raw
}

/// The pids of the workers a master (`-W`) started, in order (its "New worker (PID) forked").
pub fn worker_pids(s: &Sluice) -> Vec<i32> {
    // The master's stderr is read on another thread: a started sluice may not have had its
    // first "New worker" line read yet.
    s.wait_stderr_line(|l| l.contains("New worker ("), WAIT);
    s.stderr
        .snapshot()
        .iter()
        .filter_map(|l| {
            let rest = l.split("New worker (").nth(1)?;
            rest.split(')').next()?.parse().ok()
        })
        .collect()
}

/// Whether the master said that worker `pid` (a former one) has exited.
pub fn former_exited(s: &Sluice, pid: i32) -> bool {
    s.stderr
        .snapshot()
        .iter()
        .any(|l| l.contains(&format!("Former worker ({pid}) exited")))
}

/// The `show table TABLE` line of `key` on the stats socket `sock`, if the table holds it.
pub fn table_entry(sock: &Path, table: &str, key: &str) -> Option<String> {
    let out = stats_cli(sock, &format!("show table {table}"));
    out.lines()
        .find(|l| l.contains(&format!(": key={key} ")))
        .map(str::to_string)
}

/// The `show table` line of `key` once `ready` holds for it.
pub fn table_entry_when(
    sock: &Path,
    table: &str,
    key: &str,
    ready: impl Fn(&str) -> bool,
) -> String {
    let mut last = None;
    wait_until(&format!("entry {key} of {table}"), WAIT, || {
        last = table_entry(sock, table, key);
        last.as_deref().is_some_and(&ready)
    });
    last.expect("checked by wait_until")
}

/// The value of column `col` (`http_req_cnt`, `server_id`, `use`, ...) in a `show table` line.
pub fn table_col(line: &str, col: &str) -> u64 {
    line.split(' ')
        .find_map(|w| w.strip_prefix(&format!("{col}=")))
        .unwrap_or_else(|| panic!("no {col} in {line}"))
        .parse()
        .unwrap()
}
