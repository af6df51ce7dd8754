//! `reload`: seamless reloads, HAProxy's way. A process whose stats socket has
//! `expose-fd listeners` hands its listening sockets to a new process that starts with
//! `-x <that socket>` (command `_getsocks`); the new one accepts on the very same kernel
//! sockets, so the connections waiting in their accept queues while the old process soft-stops
//! (`-sf`) are served by the new one instead of being reset when the old one closes them.
//!
//! It owns the exposed copies of the listening sockets, the wire format of `_getsocks` (lines
//! `fd tcp ADDR` / `fd unix PATH`, one per descriptor and in the same order as the descriptors
//! passed with `SCM_RIGHTS`, then `end`), and the fetch on the new process's side. It must not
//! bind or accept: `listener` does, with what `fetch` returned.

use std::collections::HashMap;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

use crate::config::BindAddr;
use crate::listener::{BoundListener, StdListener};

/// The command a new process sends (HAProxy's name for it).
pub const GETSOCKS: &str = "_getsocks";

/// Descriptors passed per message (each message's control buffer holds this many).
const CHUNK: usize = 64;

/// How a bind's sockets are named between processes: its configured address, which both
/// configurations share when the bind stayed the same.
pub fn bind_key(addr: &BindAddr) -> Option<String> {
    match addr {
        BindAddr::Tcp(a) => Some(format!("tcp {a}")),
        BindAddr::Unix(p) => Some(format!("unix {}", p.display())),
        BindAddr::Abns(n) => Some(format!("abns {n}")),
        // Inherited from the parent: the new process inherits its own.
        BindAddr::Fd(_) => None,
    }
}

/// Copies of this process's listening sockets that a new process may take (`expose-fd
/// listeners`).
#[derive(Default)]
pub struct Exposed {
    /// (bind key, socket) for every thread's socket of every bind, in bind order. Emptied
    /// at soft stop when no process took them, so that a plain stop closes the listeners.
    fds: Mutex<Vec<(String, OwnedFd)>>,
    /// A new process took them: the listeners (and UNIX socket files) are its now.
    handed_out: AtomicBool,
}

impl Exposed {
    /// Duplicates the sockets of `listeners`.
    pub fn of(listeners: &[BoundListener]) -> io::Result<Exposed> {
        let mut fds = Vec::new();
        for l in listeners {
            let Some(key) = bind_key(&l.bind.addr) else {
                continue;
            };
            for s in &l.sockets {
                let fd = match s {
                    StdListener::Tcp(t) => t.as_fd().try_clone_to_owned()?,
                    StdListener::Unix(u) => u.as_fd().try_clone_to_owned()?,
                };
                fds.push((key.clone(), fd));
            }
        }
        Ok(Exposed {
            fds: Mutex::new(fds),
            handed_out: AtomicBool::new(false),
        })
    }

    /// Whether a new process took the listeners.
    pub fn handed_out(&self) -> bool {
        self.handed_out.load(Relaxed)
    }

    /// Soft stop: unless a new process took them, the copies close with the listeners.
    pub fn release_unless_handed_out(&self) {
        if !self.handed_out() {
            self.fds.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
    }

    /// Sends every exposed socket over `conn` (the CLI connection that asked `_getsocks`).
    pub async fn send(&self, conn: &tokio::net::UnixStream) -> io::Result<usize> {
        // Raw descriptors of the copies, valid while the copies live (until soft stop, after
        // which nothing is sent).
        let (keys, raw): (Vec<String>, Vec<RawFd>) = {
            let fds = self.fds.lock().unwrap_or_else(|e| e.into_inner());
            fds.iter()
                .map(|(k, fd)| (k.clone(), fd.as_raw_fd()))
                .unzip()
        };
        if raw.is_empty() && self.handed_out() {
            return Err(io::Error::other("the listeners were already released"));
        }
        for (ks, fs) in keys.chunks(CHUNK).zip(raw.chunks(CHUNK)) {
            let text: String = ks.iter().map(|k| format!("fd {k}\n")).collect();
            send_all(conn, text.as_bytes(), fs).await?;
        }
        send_all(conn, b"end\n", &[]).await?;
        self.handed_out.store(true, Relaxed);
        Ok(raw.len())
    }
}

/// Writes `data`, with `fds` attached to its first byte.
async fn send_all(conn: &tokio::net::UnixStream, mut data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut fds = fds;
    while !data.is_empty() {
        conn.writable().await?;
        let r = conn.try_io(tokio::io::Interest::WRITABLE, || {
            let rights = [ControlMessage::ScmRights(fds)];
            let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
            sendmsg::<()>(
                conn.as_raw_fd(),
                &[IoSlice::new(data)],
                cmsgs,
                MsgFlags::MSG_NOSIGNAL,
                None,
            )
            .map_err(io::Error::from)
        });
        match r {
            Ok(n) => {
                data = &data[n..];
                fds = &[];
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Listening sockets taken from an old process, by bind key, in the order it listed them.
#[derive(Default)]
pub struct Inherited(HashMap<String, Vec<OwnedFd>>);

impl Inherited {
    /// The sockets of the bind named `key` (all of them; the caller keeps what it needs).
    pub fn take(&mut self, key: &str) -> Vec<OwnedFd> {
        self.0.remove(key).unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.0.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `-x PATH`: asks the process behind the stats socket at `path` for its listening sockets.
pub fn fetch(path: &Path) -> Result<Inherited, String> {
    let fail = |e: &dyn std::fmt::Display| {
        format!(
            "cannot get the listening sockets from '{}': {e}",
            path.display()
        )
    };
    let mut s = UnixStream::connect(path).map_err(|e| fail(&e))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| fail(&e))?;
    s.write_all(format!("{GETSOCKS}\n").as_bytes())
        .map_err(|e| fail(&e))?;
    let mut text = Vec::new();
    let mut fds: Vec<OwnedFd> = Vec::new();
    let mut buf = [0u8; 16384];
    let mut space = nix::cmsg_space!([RawFd; CHUNK]);
    loop {
        let (n, got) = {
            let mut iov = [IoSliceMut::new(&mut buf)];
            let msg = recvmsg::<()>(
                s.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            )
            .map_err(|e| fail(&e))?;
            let mut got = Vec::new();
            for c in msg.cmsgs().map_err(|e| fail(&e))? {
                if let ControlMessageOwned::ScmRights(v) = c {
                    got.extend(v);
                }
            }
            (msg.bytes, got)
        };
        fds.extend(crate::sys::own_received_fds(&got));
        if n == 0 {
            return Err(fail(&"the connection closed before the list ended"));
        }
        text.extend_from_slice(&buf[..n]);
        if text.ends_with(b"end\n") {
            break;
        }
        if !text.starts_with(b"fd ") && !text.starts_with(b"end") {
            // Not a sluice exposing its listeners (an error message, say).
            let mut rest = String::new();
            let _ = s.read_to_string(&mut rest);
            let reply = String::from_utf8_lossy(&text).into_owned() + &rest;
            return Err(fail(&reply.trim()));
        }
    }
    let text = String::from_utf8_lossy(&text);
    let keys: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("fd ")).collect();
    if keys.len() != fds.len() {
        return Err(fail(&format!(
            "{} sockets announced, {} received",
            keys.len(),
            fds.len()
        )));
    }
    let mut out = Inherited::default();
    for (k, fd) in keys.into_iter().zip(fds) {
        out.0.entry(k.to_string()).or_default().push(fd);
    }
    Ok(out)
}
