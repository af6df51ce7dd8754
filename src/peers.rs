//! `peers` sections: the other processes (sluice or HAProxy) this one keeps its stick tables
//! in step with, over HAProxy's peers protocol (version 2.1, as HAProxy 2.6 speaks it).
//!
//! This module owns the sections' configuration (`peer`, `bind`, `server`, `table`, the local
//! peer's name) and the replication tasks: a listener on the local peer's address, one
//! connection to each remote peer, the updates of every table that names the section
//! (`stick-table ... peers NAME`) pushed as they happen and applied as they arrive. It must
//! not touch the request path: sessions only mark entries as changed (`stick::Table::touch`),
//! and the tasks, on the first worker thread, take it from there.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use crate::stick::Table;

pub(crate) mod wire;

pub use wire::spawn;

/// One `peer` (or `server`) line.
#[derive(Debug, Clone)]
pub struct Peer {
    pub name: String,
    /// `None`: the local peer declared with `server NAME` alone (its address is `bind`'s).
    pub addr: Option<SocketAddr>,
}

/// A `peers` section that has the local peer: what runs.
#[derive(Debug)]
pub struct Section {
    pub name: String,
    pub peers: Vec<Peer>,
    /// Index of the local peer in `peers`.
    pub local: usize,
    /// Where the other peers connect.
    pub listen: SocketAddr,
    /// `disabled`: declared, nothing runs.
    pub disabled: bool,
    /// The tables kept in step (declared here with `table`, or `stick-table ... peers NAME`).
    pub tables: Vec<Arc<Table>>,
    /// Each peer's session counters, as `show peers` reports them (written by the peers
    /// tasks on the first worker thread, read by the CLI on any).
    pub stats: Box<[PeerStats]>,
    /// Learnt the others' entries since start (or gave up waiting).
    pub synced: AtomicBool,
}

/// One peer's session state and counters (HAProxy's `show peers` names).
#[derive(Debug, Default)]
pub struct PeerStats {
    /// A session is established now.
    pub active: AtomicBool,
    /// The last hello's status code (0: none yet).
    pub last_status: AtomicU16,
    /// When the last session was established, in ms since the Unix epoch (0: never).
    pub last_hdshk_ms: AtomicU64,
    /// Outgoing connections tried.
    pub new_conn: AtomicU64,
    pub tx_hbt: AtomicU64,
    pub rx_hbt: AtomicU64,
    /// Sessions closed because the peer fell silent.
    pub no_hbt: AtomicU64,
    pub proto_err: AtomicU64,
    /// Sessions replaced by a newer one with the same peer.
    pub coll: AtomicU64,
    /// Resync confirmations received.
    pub confirm: AtomicU64,
}

impl PeerStats {
    pub(crate) fn established(&self) {
        self.active.store(true, Relaxed);
        self.last_status.store(200, Relaxed);
        self.last_hdshk_ms.store(crate::util::unix_ms(), Relaxed);
    }

    pub(crate) fn bump(c: &AtomicU64) {
        c.fetch_add(1, Relaxed);
    }
}

/// HAProxy's four-letter name of a hello status.
fn status_name(code: u16) -> &'static str {
    match code {
        0 => "NONE",
        200 => "ESTA",
        300 => "RETR",
        501 => "PROT",
        502 => "VERS",
        503 => "HOST",
        504 => "PEER",
        _ => "UNKN",
    }
}

/// `show peers [SECTION]`: each running section, its peers' session state and counters,
/// and its tables, in the layout of HAProxy's (its internal addresses and task details
/// aside).
pub fn cli_show(sections: &[Arc<Section>], name: Option<&str>) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let now = crate::util::unix_ms();
    let ago = |ms: u64| match ms {
        0 => "<NEVER>".to_string(),
        t => format!("{}s", now.saturating_sub(t) / 1000),
    };
    let mut date = String::new();
    crate::log::Tm::from_system(std::time::SystemTime::now()).haproxy(&mut date);
    let date = date.split('.').next().unwrap_or("").to_string();
    for s in sections.iter().filter(|s| name.is_none_or(|n| n == s.name)) {
        let _ = writeln!(
            out,
            "{:p}: [{date}] id={} disabled={} flags=0x0 resync={}",
            Arc::as_ptr(s),
            s.name,
            u8::from(s.disabled),
            if s.synced.load(Relaxed) {
                "done"
            } else {
                "pending"
            }
        );
        for (i, p) in s.peers.iter().enumerate() {
            let st = &s.stats[i];
            let local = i == s.local;
            let addr = p.addr.unwrap_or(s.listen);
            let active = st.active.load(Relaxed);
            let _ = writeln!(
                out,
                "  {:p}: id={}({},{}) addr={addr} last_status={} last_hdshk={}",
                p,
                p.name,
                if local { "local" } else { "remote" },
                if active { "active" } else { "inactive" },
                status_name(st.last_status.load(Relaxed)),
                ago(st.last_hdshk_ms.load(Relaxed)),
            );
            let _ = writeln!(
                out,
                "        confirm={} tx_hbt={} rx_hbt={} no_hbt={} new_conn={} proto_err={} coll={}",
                st.confirm.load(Relaxed),
                st.tx_hbt.load(Relaxed),
                st.rx_hbt.load(Relaxed),
                st.no_hbt.load(Relaxed),
                st.new_conn.load(Relaxed),
                st.proto_err.load(Relaxed),
                st.coll.load(Relaxed),
            );
            let _ = writeln!(out, "        shared tables:");
            for (t, table) in s.tables.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "          table:{:p} id={} local_id={} used={}",
                    Arc::as_ptr(table),
                    table.name,
                    t + 1,
                    table.used()
                );
            }
        }
        out.push('\n');
    }
    out
}

impl Section {
    pub fn local_name(&self) -> &str {
        &self.peers[self.local].name
    }

    /// The remote peers.
    pub fn remotes(&self) -> impl Iterator<Item = &Peer> {
        self.peers
            .iter()
            .enumerate()
            .filter(move |(i, _)| *i != self.local)
            .map(|(_, p)| p)
    }
}

/// A `peers` section being read.
#[derive(Debug)]
pub struct Draft {
    pub name: String,
    pub file: String,
    pub line: usize,
    peers: Vec<Peer>,
    bind: Option<SocketAddr>,
    disabled: bool,
    tables: Vec<Arc<Table>>,
}

/// The sections' listening sockets, bound at start-up (before the process says it is ready,
/// so that a previous process handing its tables over on a reload finds this one there), taken
/// by the peers tasks once they run.
static LISTENERS: std::sync::Mutex<Vec<Option<std::net::TcpListener>>> =
    std::sync::Mutex::new(Vec::new());

/// Binds the local peer's address of each running section (`SO_REUSEPORT`: the next process
/// binds it while this one still runs, and takes the tables over on it).
pub fn bind_all(sections: &[Arc<Section>]) -> Result<(), String> {
    use socket2::{Domain, Socket, Type};
    let mut out = Vec::with_capacity(sections.len());
    for s in sections {
        if s.disabled {
            out.push(None);
            continue;
        }
        let addr = s.listen;
        let bind = || -> std::io::Result<std::net::TcpListener> {
            let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
            sock.set_reuse_address(true)?;
            sock.set_reuse_port(true)?;
            sock.set_nonblocking(true)?;
            sock.bind(&addr.into())?;
            sock.listen(64)?;
            Ok(sock.into())
        };
        out.push(Some(bind().map_err(|e| {
            format!(
                "peers '{}': cannot listen on {addr} (the local peer's address): {e}",
                s.name
            )
        })?));
    }
    *LISTENERS.lock().unwrap_or_else(|e| e.into_inner()) = out;
    Ok(())
}

/// The listening socket of section `i`, bound by [`bind_all`] (once).
pub(crate) fn take_listener(i: usize) -> Option<std::net::TcpListener> {
    LISTENERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_mut(i)
        .and_then(Option::take)
}

/// The local peer's name given on the command line (`-L`), if any.
static CLI_LOCAL: OnceLock<String> = OnceLock::new();

/// Notes `-L NAME` (before the configuration is read).
pub fn set_cli_local(name: String) {
    let _ = CLI_LOCAL.set(name);
}

/// The local peer's name: `-L`, else global `localpeer`, else the host name (HAProxy's
/// order). It is also `$HAPROXY_LOCALPEER` in the configuration.
pub fn local_name(localpeer: Option<&str>) -> String {
    match (CLI_LOCAL.get(), localpeer) {
        (Some(n), _) => n.clone(),
        (None, Some(n)) => n.to_string(),
        (None, None) => crate::util::hostname(),
    }
}

/// `$HAPROXY_LOCALPEER` as the configuration reads it: `-L`, else the host name.
pub fn env_local_name() -> String {
    local_name(None)
}

fn addr(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let t = text
        .strip_prefix("ipv4@")
        .or_else(|| text.strip_prefix("ipv6@"))
        .unwrap_or(text);
    let t = t.strip_prefix("*:").map_or_else(
        || match t.strip_prefix(':') {
            Some(port) => format!("0.0.0.0:{port}"),
            None => t.to_string(),
        },
        |port| format!("0.0.0.0:{port}"),
    );
    match t.to_socket_addrs() {
        Ok(mut a) => a.next().ok_or_else(|| format!("no address for '{text}'")),
        Err(_) => Err(format!("invalid address '{text}' (expected ADDR:PORT)")),
    }
}

impl Draft {
    pub fn new(name: &str, file: &str, line: usize) -> Draft {
        Draft {
            name: name.to_string(),
            file: file.to_string(),
            line,
            peers: Vec::new(),
            bind: None,
            disabled: false,
            tables: Vec::new(),
        }
    }

    /// The tables its `table` lines declare.
    pub fn tables(&self) -> &[Arc<Table>] {
        &self.tables
    }

    fn add_peer(&mut self, name: &str, addr: Option<SocketAddr>) -> Result<(), String> {
        if self.peers.iter().any(|p| p.name == name) {
            return Err(format!("peer '{name}' is already defined in this section"));
        }
        self.peers.push(Peer {
            name: name.to_string(),
            addr,
        });
        Ok(())
    }

    /// One line of the section.
    pub fn keyword(&mut self, w: &[String]) -> Result<(), String> {
        let no_options = |from: usize, what: &str| -> Result<(), String> {
            match w.get(from) {
                None => Ok(()),
                Some(o) => Err(format!(
                    "'{what}' option '{o}' is not supported by sluice in a peers section"
                )),
            }
        };
        match w[0].as_str() {
            "peer" => {
                let (Some(name), Some(a)) = (w.get(1), w.get(2)) else {
                    return Err("'peer' expects a name and an address (peer NAME ADDR:PORT)".into());
                };
                no_options(3, "peer")?;
                self.add_peer(name, Some(addr(a)?))
            }
            "server" => {
                let Some(name) = w.get(1) else {
                    return Err("'server' expects a name (and an address for remote peers)".into());
                };
                let a = w.get(2).map(|a| addr(a)).transpose()?;
                no_options(3, "server")?;
                self.add_peer(name, a)
            }
            "bind" => {
                let Some(a) = w.get(1) else {
                    return Err("'bind' expects an address".into());
                };
                if self.bind.is_some() {
                    return Err("only one 'bind' per peers section".into());
                }
                no_options(2, "bind")?;
                self.bind = Some(addr(a)?);
                Ok(())
            }
            "disabled" => {
                self.disabled = true;
                Ok(())
            }
            "enable" | "enabled" => {
                self.disabled = false;
                Ok(())
            }
            "default-server" | "default-bind" => match w.get(1) {
                None => Ok(()),
                Some(o) => Err(format!(
                    "'{}' option '{o}' is not supported by sluice in a peers section",
                    w[0]
                )),
            },
            "table" => {
                let Some(tname) = w.get(1) else {
                    return Err("'table' expects a name, then stick-table arguments".into());
                };
                let mut args = vec!["stick-table".to_string()];
                args.extend_from_slice(&w[2..]);
                let mut def = crate::config::parser::stick_table_def(&args)?;
                if def.peers.is_some() {
                    return Err("'peers' is implied for a table of a peers section".into());
                }
                def.peers = Some(self.name.clone());
                // Referred to as `SECTION/NAME` (`track-sc0 src table SECTION/NAME`).
                let full = format!("{}/{tname}", self.name);
                let t = crate::stick::declare(&full, def)
                    .map_err(|_| format!("table '{tname}' is already defined in this section"))?;
                self.tables.push(t);
                Ok(())
            }
            k => Err(format!(
                "unknown keyword '{k}' in peers section (expected peer, server, bind, table, \
                 disabled, enabled, default-server or default-bind){}",
                crate::config::did_you_mean(
                    k,
                    ["peer", "server", "bind", "table", "disabled", "enabled"]
                )
            )),
        }
    }

    /// The section, once every file is read: `Ok(None)` (with a warning) when it lacks the
    /// local peer, as HAProxy drops such a section.
    pub fn finish(self, local: &str) -> Result<(Option<Section>, Option<String>), String> {
        let Some(li) = self.peers.iter().position(|p| p.name == local) else {
            return Ok((
                None,
                Some(format!(
                    "Removing incomplete section 'peers {}' (no peer named '{local}'): its \
                     tables are not kept in step",
                    self.name
                )),
            ));
        };
        let listen = match (self.peers[li].addr, self.bind) {
            (_, Some(b)) => b,
            (Some(a), None) => a,
            (None, None) => {
                return Err(format!(
                    "peers '{}': the local peer '{local}' has no address (give it one, or a \
                     'bind' line)",
                    self.name
                ));
            }
        };
        for p in &self.peers {
            if p.addr.is_none() && p.name != local {
                return Err(format!(
                    "peers '{}': remote peer '{}' has no address",
                    self.name, p.name
                ));
            }
        }
        Ok((
            Some(Section {
                name: self.name,
                stats: self.peers.iter().map(|_| PeerStats::default()).collect(),
                peers: self.peers,
                local: li,
                listen,
                disabled: self.disabled,
                tables: self.tables,
                synced: AtomicBool::new(false),
            }),
            None,
        ))
    }
}
