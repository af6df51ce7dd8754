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
use std::sync::{Arc, OnceLock};

use crate::stick::Table;

mod wire;

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
                peers: self.peers,
                local: li,
                listen,
                disabled: self.disabled,
                tables: self.tables,
            }),
            None,
        ))
    }
}
