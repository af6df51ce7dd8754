//! `sys`: the only module with `unsafe` code — system calls that socket2, nix and std do not
//! wrap safely. Each block carries a `// SAFETY:` comment. Nothing else may use `unsafe`.

use std::io;
use std::os::fd::FromRawFd;

/// The kernel's `TCP_INFO` for a TCP socket (`fc_rtt`, `fc_retrans`, ... fetches).
pub fn tcp_info(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<libc::tcp_info> {
    use std::os::fd::AsRawFd;
    // SAFETY: `tcp_info` is a C struct of integers only, for which all-zero bytes are a valid
    // value.
    let mut ti: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `ti` and `len` are valid out-parameters on our stack, `len` holding the size of
    // `ti`, which the kernel never writes past; `fd` is borrowed, hence open, for the call.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut ti as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ti)
}

/// Takes ownership of an inherited, already-listening socket (`bind fd@N`).
///
/// Fails if `fd` is not open or is not a socket, so a typo in the config cannot make us
/// adopt (and later close) an unrelated descriptor such as a log file.
pub fn adopt_listening_fd(fd: i32) -> io::Result<socket2::Socket> {
    if fd < 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "negative file descriptor",
        ));
    }
    // SAFETY: fcntl(F_GETFD) on an integer reads the descriptor table only; it touches no
    // memory of ours and is defined for any value (EBADF if not open).
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut ty: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `ty` and `len` are valid, properly sized out-parameters living on our stack for
    // the duration of the call.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut ty as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if ty == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "file descriptor is a socket but is not listening",
        ));
    }
    // SAFETY: the descriptor is open and is a listening socket (checked above); the config
    // names it exactly once, so ownership is transferred to us exactly once.
    Ok(unsafe { socket2::Socket::from_raw_fd(fd) })
}

/// `bind ... defer-accept`: TCP_DEFER_ACCEPT, so accept() returns only once data arrived.
pub fn set_defer_accept(sock: &socket2::Socket, secs: i32) -> io::Result<()> {
    set_tcp_int(sock, libc::TCP_DEFER_ACCEPT, secs)
}

/// `bind ... tfo`: TCP_FASTOPEN on a listening socket, with the queue of pending Fast Open
/// requests `qlen` long (HAProxy gives the listener's backlog). Whether clients' data in the
/// SYN is accepted also depends on the kernel's `net.ipv4.tcp_fastopen`.
pub fn set_fastopen(sock: &socket2::Socket, qlen: i32) -> io::Result<()> {
    set_tcp_int(sock, libc::TCP_FASTOPEN, qlen)
}

/// An `int` option at the IPPROTO_TCP level, which socket2 does not wrap.
fn set_tcp_int(sock: &socket2::Socket, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: `v` is a valid c_int on our stack and its exact size is passed; the descriptor
    // is owned by `sock`, which outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Takes ownership of descriptors just received in an `SCM_RIGHTS` message (`-x`).
pub fn own_received_fds(fds: &[std::os::fd::RawFd]) -> Vec<std::os::fd::OwnedFd> {
    fds.iter()
        .filter(|&&fd| fd >= 0)
        // SAFETY: the kernel installed each of these descriptors in our table for this one
        // message (recvmsg with SCM_RIGHTS); nothing else refers to them, so each is owned
        // exactly once, here.
        .map(|&fd| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
        .collect()
}

/// What a connected socket holds right now, without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerState {
    /// Bytes are waiting to be read.
    pub readable: bool,
    /// The peer shut its side down (FIN, even behind unread bytes) or the connection failed
    /// (RST, error).
    pub gone: bool,
}

/// `poll()` with a zero timeout for `POLLIN | POLLRDHUP` on one socket. Unlike a peek, it sees
/// a FIN that arrived after data not yet read; unlike tokio's cached readiness, it is never
/// an assumption.
pub fn peer_state(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<PeerState> {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd on our stack and the count passed is 1; the timeout is
    // zero, so the call never blocks; the descriptor is borrowed for the whole call.
    let rc = unsafe { libc::poll(&mut p, 1, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerState {
        readable: p.revents & libc::POLLIN != 0,
        gone: p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0,
    })
}

/// Dissolves a TCP socket's connection and keeps the descriptor: `connect()` to an
/// `AF_UNSPEC` address, which Linux turns into `tcp_disconnect()` (a reset when the
/// connection is established, as a close with linger 0 would send). The socket is then like a
/// new, unbound one and may connect again; no descriptor, file or socket is freed and
/// reallocated, which is most of the kernel's cost of a layer-4 check besides the handshake.
pub fn disconnect(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let addr = libc::sockaddr {
        sa_family: libc::AF_UNSPEC as libc::sa_family_t,
        sa_data: [0; 14],
    };
    // SAFETY: `addr` is a valid, fully initialised sockaddr on our stack and the length passed
    // is its size; connect() only reads it. The descriptor is borrowed for the whole call.
    let rc = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            &addr,
            std::mem::size_of::<libc::sockaddr>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[link(name = "crypt")]
unsafe extern "C" {
    fn crypt_rn(
        phrase: *const libc::c_char,
        setting: *const libc::c_char,
        data: *mut libc::c_void,
        size: libc::c_int,
    ) -> *mut libc::c_char;
}

/// crypt(3) of the system's libcrypt (libxcrypt): the hash of `phrase` with the method and
/// salt of `setting` (a stored hash: `$6$...`, `$5$...`, `$y$...`, ...), as HAProxy checks
/// `userlist` passwords. `None` when the method is unknown or the strings hold a NUL.
pub fn crypt(phrase: &str, setting: &str) -> Option<String> {
    let phrase = std::ffi::CString::new(phrase).ok()?;
    let setting = std::ffi::CString::new(setting).ok()?;
    // libxcrypt's `struct crypt_data` is 32 KiB; crypt_rn takes its size.
    let mut data = vec![0u8; 32768];
    // SAFETY: both strings are NUL-terminated and live across the call; `data` is a writable
    // buffer of the size passed, which crypt_rn uses as its work area and for the result.
    // The result is NULL on failure or points into `data`, which outlives the copy below.
    let out = unsafe {
        crypt_rn(
            phrase.as_ptr(),
            setting.as_ptr(),
            data.as_mut_ptr().cast(),
            data.len() as libc::c_int,
        )
    };
    if out.is_null() {
        return None;
    }
    // SAFETY: a non-NULL result is a NUL-terminated string inside `data`.
    let s = unsafe { std::ffi::CStr::from_ptr(out) };
    Some(s.to_string_lossy().into_owned())
}
