//! `parser`: sections and keywords → [`super::Config`].
//!
//! Each line from the tokenizer is either a section header (`global`, `defaults`, `frontend`,
//! `backend`, `listen`, or a HAProxy section sluice does not support) or a keyword of the
//! current section. Every problem is recorded and parsing continues, so one run reports them
//! all. Cross-references (`log global`, backend names, ids, tune limits) are resolved once every
//! file has been read, as HAProxy does.
//!
//! Submodules: `values` (numbers, times, sizes, addresses), `global`, `logs` (`log` targets),
//! `proxy` (proxy keywords and `defaults` inheritance), `server` (`bind`, `server`,
//! `default-server`), `rules` (`http-request`, `http-response`, `use_backend`).

mod checks;
mod global;
mod logs;
mod options;
mod proxy;
mod rules;
mod server;
pub use server::{check_needs, dynamic_server};

/// A time as HAProxy writes it (`100ms`, `5s`; milliseconds by default), for other modules'
/// sections.
pub fn parse_time_pub(s: &str) -> Result<std::time::Duration, String> {
    values::parse_time(s)
}
#[cfg(test)]
mod tests;
mod values;

use std::collections::HashMap;
use std::path::PathBuf;

use super::tokenizer::{EnvOverlay, Line, tokenize_with};
use super::{BindAddr, Config, ConfigError, Global, Origin, ProxyKind, UseBackend, did_you_mean};

use proxy::{Draft, LogEntry};

/// A `stick-table` line's definition (`w[0]` is the keyword), for `table` lines of `peers`
/// sections.
pub fn stick_table_def(w: &[String]) -> Result<crate::stick::TableDef, String> {
    proxy::stick_table(w)
}

/// Loads one logical configuration from `(file name, text)` pairs, in order.
pub fn load(
    sources: &[(String, String)],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, Vec<ConfigError>> {
    let mut st = State::default();
    crate::userlist::reset();
    crate::stick::reset();
    crate::cache::reset();
    let _ = crate::config::acl::take_named();
    crate::map::reset();
    crate::lua::reset();
    crate::errorfile::reset();
    // `setenv` and its kin in one file are seen by the files after it. All files are read
    // first: `env()` fetches see the environment as every such line left it, as HAProxy's
    // run-time lookups do.
    let mut overlay = EnvOverlay::default();
    let mut files = Vec::with_capacity(sources.len());
    for (file, text) in sources {
        let (lines, errors) = tokenize_with(file, text, env, &mut overlay);
        st.errors.extend(errors);
        files.push(lines);
    }
    super::tokenizer::set_final_env(overlay);
    let _cwd = CwdGuard;
    for (lines, (file, _)) in files.iter().zip(sources) {
        // A `default-path` of an earlier file applies to this one's relative paths.
        if let Err(e) = enter_default_path(file) {
            st.errors.push(ConfigError {
                file: file.clone(),
                line: 0,
                message: e,
            });
        }
        for l in lines {
            st.line(l);
        }
        // A section never continues into the next file (defaults still apply).
        st.close_section();
        leave_default_path();
    }
    let order: Vec<&str> = sources.iter().map(|(f, _)| f.as_str()).collect();
    st.finish(&order)
}

/// `default-path`: where the relative paths of the configuration files (certificates, maps,
/// error files, Lua scripts...) start from. As in HAProxy, the process changes to that
/// directory while it reads each file, and back after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum DefaultPath {
    /// Where the process started (the default).
    Current,
    /// The directory of the configuration file being read.
    Config,
    /// Its parent.
    Parent,
    Origin(PathBuf),
}

thread_local! {
    /// The policy in force, and the directory the process started in.
    static DEFAULT_PATH: std::cell::RefCell<Option<(DefaultPath, PathBuf)>> =
        const { std::cell::RefCell::new(None) };
}

/// Applies `policy` from now on, starting with `file`, the file being read.
pub(super) fn set_default_path(policy: DefaultPath, file: &str) -> Result<(), String> {
    let start = match DEFAULT_PATH.with(|d| d.borrow().as_ref().map(|(_, s)| s.clone())) {
        Some(s) => s,
        None => std::env::current_dir()
            .map_err(|e| format!("cannot tell the current directory: {e}"))?,
    };
    DEFAULT_PATH.with(|d| *d.borrow_mut() = Some((policy, start)));
    enter_default_path(file)
}

fn enter_default_path(file: &str) -> Result<(), String> {
    let Some((policy, start)) = DEFAULT_PATH.with(|d| d.borrow().clone()) else {
        return Ok(());
    };
    let dir_of = |f: &str| f.rfind('/').map(|i| PathBuf::from(&f[..i.max(1)]));
    let dir = match policy {
        DefaultPath::Current => start,
        DefaultPath::Config => dir_of(file).unwrap_or(start),
        DefaultPath::Parent => dir_of(file).map_or(PathBuf::from(".."), |d| d.join("..")),
        DefaultPath::Origin(p) => p,
    };
    std::env::set_current_dir(&dir)
        .map_err(|e| format!("'default-path': cannot change to '{}': {e}", dir.display()))
}

fn leave_default_path() {
    if let Some((_, start)) = DEFAULT_PATH.with(|d| d.borrow().clone()) {
        let _ = std::env::set_current_dir(start);
    }
}

/// Ends a load: back to the starting directory, and no `default-path` for the next load
/// (a reload, a test).
struct CwdGuard;

impl Drop for CwdGuard {
    fn drop(&mut self) {
        leave_default_path();
        DEFAULT_PATH.with(|d| *d.borrow_mut() = None);
    }
}

/// Loads files (or directories, whose `*.cfg` files load sorted by name), with variables taken
/// from the process environment.
pub fn load_files(paths: &[PathBuf]) -> Result<Config, Vec<ConfigError>> {
    let mut sources = Vec::new();
    let mut errors = Vec::new();
    for p in paths {
        let name = p.display().to_string();
        if p.is_dir() {
            match std::fs::read_dir(p) {
                Ok(rd) => {
                    let mut files: Vec<PathBuf> = rd
                        .filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|f| f.extension().is_some_and(|x| x == "cfg") && !f.is_dir())
                        .collect();
                    files.sort();
                    for f in files {
                        read_source(&f, &mut sources, &mut errors);
                    }
                }
                Err(e) => errors.push(ConfigError {
                    file: name,
                    line: 0,
                    message: format!("cannot read directory: {e}"),
                }),
            }
        } else {
            read_source(p, &mut sources, &mut errors);
        }
    }
    // `$HAPROXY_LOCALPEER`: the local peer's name, as HAProxy sets it for its configuration.
    let env = |k: &str| match k {
        "HAPROXY_LOCALPEER" => Some(crate::peers::env_local_name()),
        _ => std::env::var(k).ok(),
    };
    match load(&sources, &env) {
        Ok(cfg) if errors.is_empty() => Ok(cfg),
        Ok(_) => Err(errors),
        Err(e) => {
            errors.extend(e);
            Err(errors)
        }
    }
}

fn read_source(p: &PathBuf, sources: &mut Vec<(String, String)>, errors: &mut Vec<ConfigError>) {
    let name = p.display().to_string();
    match std::fs::read(p) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => sources.push((name, text)),
            Err(e) => {
                // HAProxy reads bytes; keep going with a lossy conversion rather than failing.
                sources.push((name, String::from_utf8_lossy(e.as_bytes()).into_owned()));
            }
        },
        Err(e) => errors.push(ConfigError {
            file: name,
            line: 0,
            message: format!("cannot open configuration file: {e}"),
        }),
    }
}

/// An error from a keyword handler: a reason (the caller prefixes `'kw' in <section>: `) or a
/// complete message.
pub(super) enum KwErr {
    Reason(String),
    Full(String),
}

impl From<String> for KwErr {
    fn from(s: String) -> Self {
        KwErr::Reason(s)
    }
}

thread_local! {
    /// Warnings of the line being parsed (see [`warn`]).
    static WARNINGS: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Records a warning about the configuration line being parsed. Option parsers deep in other
/// modules (`tls`) call this rather than threading a list through every signature; the parser
/// takes the warnings after each line, so that each names its `file:line`, and the CLI after
/// `add server`.
pub fn warn(message: String) {
    WARNINGS.with(|w| w.borrow_mut().push(message));
}

/// The warnings recorded on this thread since the last call.
pub fn take_warnings() -> Vec<String> {
    WARNINGS.with(|w| std::mem::take(&mut *w.borrow_mut()))
}

/// Section headers sluice understands.
const SECTIONS: &[&str] = &[
    "global",
    "defaults",
    "frontend",
    "backend",
    "listen",
    "userlist",
    "resolvers",
    "http-errors",
    "cache",
    "peers",
];
/// HAProxy sections sluice does not support (reported once, their lines skipped).
const UNSUPPORTED_SECTIONS: &[&str] = &[
    "mailers",
    "ring",
    "program",
    "fcgi-app",
    "log-forward",
    "dynamic-update",
    "crt-store",
    "traces",
];

#[derive(Default)]
enum Section {
    #[default]
    None,
    Global,
    /// An unsupported section: its lines are skipped (the header was reported).
    Skip,
    Defaults(Box<Draft>),
    Proxy(Box<Draft>),
    Userlist(Box<crate::userlist::Userlist>, Origin),
    Resolvers(Box<crate::resolvers::Resolvers>),
    /// An `http-errors` section (its pages go to the `errorfile` registry as they come).
    HttpErrors(String),
    Cache(Box<crate::cache::Draft>),
    Peers(Box<crate::peers::Draft>),
}

/// Global-section facts needed after parsing.
#[derive(Default)]
pub(super) struct GlobalExtra {
    /// `cpu-map` lines using `all`/`odd`/`even` threads: (index in `cpu_map`, selector).
    pub cpu_sets: Vec<(usize, global::ThreadSel)>,
}

#[derive(Default)]
struct State {
    errors: Vec<ConfigError>,
    /// Accepted, but the operator should know (printed at start-up and by `-c`).
    warnings: Vec<ConfigError>,
    global: Global,
    gx: GlobalExtra,
    section: Section,
    /// The `defaults` section that applies to the following proxies.
    defaults: Option<Draft>,
    named_defaults: HashMap<String, Draft>,
    proxies: Vec<Draft>,
    resolvers: Vec<crate::resolvers::Resolvers>,
    peers: Vec<crate::peers::Draft>,
    peers_tables: Vec<std::sync::Arc<crate::stick::Table>>,
}

impl State {
    fn err(&mut self, l: &Line, message: String) {
        self.errors.push(ConfigError {
            file: l.file.clone(),
            line: l.line,
            message,
        });
    }

    fn line(&mut self, l: &Line) {
        crate::map::note_line(&l.file, l.line);
        self.line_inner(l);
        crate::userlist::note_line(&l.file, l.line);
        crate::stick::note_line(&l.file, l.line);
        crate::cache::note_line(&l.file, l.line);
        crate::config::acl::note_line(&l.file, l.line);
        for message in l.warnings.iter().cloned().chain(take_warnings()) {
            self.warnings.push(ConfigError {
                file: l.file.clone(),
                line: l.line,
                message,
            });
        }
    }

    fn line_inner(&mut self, l: &Line) {
        let Some(kw) = l.words.first() else { return };
        let kw = kw.as_str();
        if SECTIONS.contains(&kw) || UNSUPPORTED_SECTIONS.contains(&kw) {
            self.close_section();
            self.open_section(l);
            return;
        }
        match std::mem::take(&mut self.section) {
            Section::None => {
                let msg = format!(
                    "keyword '{kw}' appears before any section (expected 'global', 'defaults', \
                     'frontend', 'backend' or 'listen' first){}",
                    did_you_mean(kw, SECTIONS.iter().copied())
                );
                self.err(l, msg);
            }
            Section::Skip => self.section = Section::Skip,
            Section::Global => {
                if let Err(e) = global::keyword(&mut self.global, &mut self.gx, l) {
                    let msg = match e {
                        KwErr::Reason(r) => format!("'{kw}' in 'global' section: {r}"),
                        KwErr::Full(m) => m,
                    };
                    self.err(l, msg);
                }
                self.section = Section::Global;
            }
            Section::Defaults(mut d) => {
                self.proxy_keyword(&mut d, l);
                self.section = Section::Defaults(d);
            }
            Section::Proxy(mut d) => {
                self.proxy_keyword(&mut d, l);
                self.section = Section::Proxy(d);
            }
            Section::Userlist(mut u, o) => {
                if let Err(r) = userlist_keyword(&mut u, &l.words) {
                    let msg = format!("'{kw}' in userlist '{}': {r}", u.name);
                    self.err(l, msg);
                }
                self.section = Section::Userlist(u, o);
            }
            Section::HttpErrors(name) => {
                let w = &l.words;
                let r = if w[0] == "errorfile" {
                    proxy::errorfile_page(w).map(|(code, body)| {
                        crate::errorfile::add(&name, code, body);
                    })
                } else {
                    Err(format!(
                        "unknown keyword '{}' in http-errors section (only 'errorfile CODE \
                         FILE')",
                        w[0]
                    ))
                };
                if let Err(e) = r {
                    let msg = format!("'{kw}' in http-errors '{name}': {e}");
                    self.err(l, msg);
                }
                self.section = Section::HttpErrors(name);
            }
            Section::Cache(mut c) => {
                if let Err(e) = c.keyword(&l.words) {
                    let msg = format!("'{kw}' in cache '{}': {e}", c.name);
                    self.err(l, msg);
                }
                self.section = Section::Cache(c);
            }
            Section::Peers(mut p) => {
                if let Err(e) = p.keyword(&l.words) {
                    let msg = format!("'{kw}' in peers '{}': {e}", p.name);
                    self.err(l, msg);
                }
                self.section = Section::Peers(p);
            }
            Section::Resolvers(mut r) => {
                if let Err(e) = r.keyword(&l.words) {
                    let msg = format!("'{kw}' in resolvers '{}': {e}", r.name);
                    self.err(l, msg);
                }
                self.section = Section::Resolvers(r);
            }
        }
    }

    fn proxy_keyword(&mut self, d: &mut Draft, l: &Line) {
        crate::spoe::BUFSIZE.set(self.global.bufsize);
        if let Err(e) = proxy::keyword(d, l) {
            let msg = match e {
                KwErr::Reason(r) => format!("'{}' in {}: {r}", l.words[0], d.describe()),
                KwErr::Full(m) => m,
            };
            self.err(l, msg);
        }
    }

    fn open_section(&mut self, l: &Line) {
        let kw = l.words[0].as_str();
        let origin = Origin {
            file: l.file.clone(),
            line: l.line,
        };
        if UNSUPPORTED_SECTIONS.contains(&kw) {
            self.err(l, format!("section '{kw}' is not supported by sluice"));
            self.section = Section::Skip;
            return;
        }
        if kw == "userlist" {
            match l.words.get(1..) {
                Some([name]) => {
                    let u = crate::userlist::Userlist {
                        name: name.clone(),
                        ..Default::default()
                    };
                    self.section = Section::Userlist(Box::new(u), origin);
                }
                _ => {
                    self.err(l, "'userlist' expects one name".to_string());
                    self.section = Section::Skip;
                }
            }
            return;
        }
        if kw == "http-errors" {
            match l.words.get(1..) {
                Some([name]) => {
                    if !crate::errorfile::declare(name) {
                        self.err(l, format!("http-errors '{name}' is already defined"));
                    }
                    self.section = Section::HttpErrors(name.clone());
                }
                _ => {
                    self.err(l, "'http-errors' expects one name".to_string());
                    self.section = Section::Skip;
                }
            }
            return;
        }
        if kw == "peers" {
            match l.words.get(1..) {
                Some([name]) => {
                    if self.peers.iter().any(|p| p.name == *name) {
                        self.err(l, format!("peers '{name}' is already defined"));
                        self.section = Section::Skip;
                    } else {
                        let d = crate::peers::Draft::new(name, &l.file, l.line);
                        self.section = Section::Peers(Box::new(d));
                    }
                }
                _ => {
                    self.err(l, "'peers' expects one name".to_string());
                    self.section = Section::Skip;
                }
            }
            return;
        }
        if kw == "cache" {
            match l.words.get(1..) {
                Some([name]) => {
                    let c = crate::cache::Draft::new(name, origin);
                    self.section = Section::Cache(Box::new(c));
                }
                _ => {
                    self.err(l, "'cache' expects one name".to_string());
                    self.section = Section::Skip;
                }
            }
            return;
        }
        if kw == "resolvers" {
            match l.words.get(1..) {
                Some([name]) => {
                    if let Some(prev) = self.resolvers.iter().find(|r| r.name == *name) {
                        let msg = format!(
                            "resolvers '{name}' is already defined at {}:{}",
                            prev.origin.file, prev.origin.line
                        );
                        self.err(l, msg);
                    }
                    let r = crate::resolvers::Resolvers::new(name, origin);
                    self.section = Section::Resolvers(Box::new(r));
                }
                _ => {
                    self.err(l, "'resolvers' expects one name".to_string());
                    self.section = Section::Skip;
                }
            }
            return;
        }
        if kw == "global" {
            if let Some(w) = l.words.get(1) {
                self.err(l, format!("'global' section takes no argument (got '{w}')"));
            }
            self.section = Section::Global;
            return;
        }
        // `defaults [NAME] [from D]`, `frontend|backend|listen NAME [from D]`.
        let mut name: Option<&str> = None;
        let mut from: Option<&str> = None;
        let mut bad = false;
        let mut i = 1;
        while i < l.words.len() {
            let w = l.words[i].as_str();
            if w == "from" {
                match l.words.get(i + 1) {
                    Some(f) if from.is_none() => from = Some(f),
                    Some(_) => {
                        self.err(l, format!("'{kw}': 'from' given twice"));
                        bad = true;
                    }
                    None => {
                        self.err(
                            l,
                            format!("'{kw}': missing defaults section name after 'from'"),
                        );
                        bad = true;
                    }
                }
                i += 2;
            } else if name.is_none() && from.is_none() {
                name = Some(w);
                i += 1;
            } else {
                self.err(
                    l,
                    format!(
                        "'{kw}': unexpected argument '{w}' (listening addresses go on 'bind' \
                         lines)"
                    ),
                );
                bad = true;
                i += 1;
            }
        }
        if let Some(n) = name
            && !valid_name(n)
        {
            self.err(
                l,
                format!(
                    "'{kw}': invalid name '{n}' (only letters, digits, '-', '_', '.' and ':' \
                     are allowed)"
                ),
            );
            bad = true;
        }
        let base = match from {
            None if kw == "defaults" => None,
            None => self.defaults.clone(),
            Some(f) => match self.named_defaults.get(f) {
                Some(d) if Some(f) != name || kw != "defaults" => Some(d.clone()),
                _ => {
                    let cands: Vec<&str> = self.named_defaults.keys().map(String::as_str).collect();
                    let msg = format!(
                        "'{kw}': unknown defaults section '{f}'{}",
                        did_you_mean(f, cands)
                    );
                    self.err(l, msg);
                    bad = true;
                    None
                }
            },
        };
        let kind = match kw {
            "frontend" => ProxyKind::Frontend,
            "backend" => ProxyKind::Backend,
            "listen" => ProxyKind::Listen,
            _ => {
                let mut d = Draft::new_defaults(name.unwrap_or(""), origin, base.as_ref());
                d.tls_defaults = self.global.tls.clone();
                self.section = Section::Defaults(Box::new(d));
                return;
            }
        };
        let Some(name) = name else {
            self.err(l, format!("'{kw}' section requires a name"));
            // Parse the body anyway, to report its errors too.
            let mut d = Draft::new_proxy("", kind, origin, base.as_ref());
            d.tls_defaults = self.global.tls.clone();
            self.section = Section::Proxy(Box::new(d));
            return;
        };
        if !bad {
            self.check_duplicate(name, kind, l);
        }
        let mut d = Draft::new_proxy(name, kind, origin, base.as_ref());
        d.tls_defaults = self.global.tls.clone();
        self.section = Section::Proxy(Box::new(d));
    }

    /// Two proxies may share a name only if their capabilities do not overlap.
    fn check_duplicate(&mut self, name: &str, kind: ProxyKind, l: &Line) {
        let clash = self.proxies.iter().find(|p| {
            p.p.name == name
                && ((p.p.kind.has_frontend() && kind.has_frontend())
                    || (p.p.kind.has_backend() && kind.has_backend()))
        });
        if let Some(p) = clash {
            let msg = format!(
                "{} '{name}' has the same name as {} '{name}' declared at {}:{}",
                kind_name(kind),
                kind_name(p.p.kind),
                p.p.origin.file,
                p.p.origin.line
            );
            self.err(l, msg);
        }
    }

    fn close_section(&mut self) {
        match std::mem::take(&mut self.section) {
            Section::Defaults(d) => {
                if !d.p.name.is_empty() {
                    self.named_defaults.insert(d.p.name.clone(), (*d).clone());
                }
                self.defaults = Some(*d);
            }
            Section::Proxy(mut d) => {
                let errs = d.finish(&mut self.warnings);
                self.errors.extend(errs);
                self.proxies.push(*d);
            }
            Section::Userlist(u, o) => {
                let mut problems = Vec::new();
                for user in &u.users {
                    for g in &user.groups {
                        if !u.groups.iter().any(|(n, _)| n == g) {
                            problems.push(format!(
                                "userlist '{}': no such group '{g}' specified in user '{}'",
                                u.name, user.name
                            ));
                        }
                    }
                }
                for (g, users) in &u.groups {
                    for n in users {
                        if !u.users.iter().any(|x| x.name == *n) {
                            problems.push(format!(
                                "userlist '{}': no such user '{n}' specified in group '{g}'",
                                u.name
                            ));
                        }
                    }
                }
                if let Err(e) = crate::userlist::declare(*u) {
                    problems.push(e);
                }
                for message in problems {
                    self.errors.push(ConfigError {
                        file: o.file.clone(),
                        line: o.line,
                        message,
                    });
                }
            }
            Section::Cache(c) => {
                let origin = c.origin.clone();
                if let Err(message) = c.finish().and_then(crate::cache::declare) {
                    self.errors.push(ConfigError {
                        file: origin.file,
                        line: origin.line,
                        message,
                    });
                }
            }
            Section::Peers(p) => self.peers.push(*p),
            Section::Resolvers(mut r) => {
                if let Err(message) = r.finish() {
                    self.errors.push(ConfigError {
                        file: r.origin.file.clone(),
                        line: r.origin.line,
                        message,
                    });
                }
                self.resolvers.push(*r);
            }
            Section::None | Section::Global | Section::Skip | Section::HttpErrors(_) => {}
        }
    }

    /// The `peers` sections that run, with the proxies' tables that name them attached.
    fn finish_peers(
        &mut self,
        proxies: &[crate::config::Proxy],
        errors: &mut Vec<ConfigError>,
    ) -> Vec<std::sync::Arc<crate::peers::Section>> {
        let local = crate::peers::local_name(self.global.localpeer.as_deref());
        let mut sections = Vec::new();
        let mut removed = Vec::new();
        for d in std::mem::take(&mut self.peers) {
            self.peers_tables.extend(d.tables().iter().cloned());
            let (file, line, name) = (d.file.clone(), d.line, d.name.clone());
            match d.finish(&local) {
                Ok((Some(s), _)) => sections.push(s),
                Ok((None, warning)) => {
                    removed.push(name);
                    if let Some(message) = warning {
                        self.warnings.push(ConfigError {
                            file,
                            line,
                            message,
                        });
                    }
                }
                Err(message) => errors.push(ConfigError {
                    file,
                    line,
                    message,
                }),
            }
        }
        for p in proxies {
            let Some(t) = &p.stick_table else { continue };
            let Some(want) = &t.def.peers else { continue };
            match sections.iter_mut().find(|s| s.name == *want) {
                Some(s) => s.tables.push(t.clone()),
                None if removed.contains(want) => {}
                None => errors.push(ConfigError {
                    file: p.origin.file.clone(),
                    line: p.origin.line,
                    message: format!(
                        "proxy '{}': unable to find sync peers '{want}' (no 'peers {want}' \
                         section)",
                        p.name
                    ),
                }),
            }
        }
        sections
            .into_iter()
            .map(|s| {
                // Changes are queued for remote peers only: a section of the local peer
                // alone (tables kept across reloads) hands its entries over from the table
                // itself, and its requests need not queue anything.
                if !s.disabled && s.peers.len() > 1 {
                    for t in &s.tables {
                        t.start_sync();
                    }
                }
                std::sync::Arc::new(s)
            })
            .collect()
    }

    fn finish(mut self, order: &[&str]) -> Result<Config, Vec<ConfigError>> {
        self.close_section();
        let mut errors = std::mem::take(&mut self.errors);
        for (name, at) in crate::userlist::undeclared() {
            let (file, line) = at.unwrap_or_default();
            errors.push(ConfigError {
                file,
                line,
                message: format!("unknown userlist '{name}' (no 'userlist {name}' section)"),
            });
        }
        for (name, at) in crate::stick::undeclared() {
            let (file, line) = at.unwrap_or_default();
            errors.push(ConfigError {
                file,
                line,
                message: format!(
                    "unable to find stick-table '{name}' (no proxy named '{name}' declares \
                     a 'stick-table')"
                ),
            });
        }
        for (name, at) in crate::cache::undeclared() {
            let (file, line) = at.unwrap_or_default();
            errors.push(ConfigError {
                file,
                line,
                message: format!("unable to find cache '{name}' (no 'cache {name}' section)"),
            });
        }
        global::finish(&mut self.global, &self.gx);
        // `errorfiles NAME` naming a section declared later in the files.
        for d in &mut self.proxies {
            for (name, codes, at) in std::mem::take(&mut d.pending_errorfiles) {
                match crate::errorfile::section(&name, &codes) {
                    Some(pages) => d.p.errorfiles.extend(pages),
                    None => errors.push(ConfigError {
                        file: at.file.clone(),
                        line: at.line,
                        message: format!(
                            "'errorfiles' in {}: unknown http-errors section '{name}'",
                            d.describe()
                        ),
                    }),
                }
            }
        }
        // `option external-check` needs the global permission and a command (HAProxy's
        // messages), in the proxies themselves (a `defaults` only passes them on).
        for d in &self.proxies {
            let p = &d.p;
            if p.options.check_type != crate::config::CheckType::External {
                continue;
            }
            let missing = if !self.global.external_check {
                "'global.external-check'"
            } else if p.options.external_check.command.is_none() {
                "'external-check command'"
            } else {
                continue;
            };
            errors.push(ConfigError {
                file: p.origin.file.clone(),
                line: p.origin.line,
                message: format!(
                    "Proxy '{}' : 'option external-check' unable to find required {missing}.",
                    p.name
                ),
            });
        }
        let mut proxies = resolve(&self.global, std::mem::take(&mut self.proxies), &mut errors);
        // A table that `stick` rules write keeps `server_id` from the start: `show table`
        // prints it, and peers hear of it in the table's first definition.
        for r in proxies.iter().flat_map(|p| &p.sticks).filter(|r| r.stores) {
            if let Some(t) = r.table.get() {
                t.note_stick_rule();
            }
        }
        // `server ... resolvers NAME`: the section by index. As HAProxy, a section named
        // `default` exists without being written, with the nameservers of /etc/resolv.conf.
        let wants_default = proxies.iter().flat_map(|p| p.servers.iter()).any(|s| {
            s.resolve
                .as_ref()
                .is_some_and(|r| r.section_name == "default")
        });
        if wants_default && !self.resolvers.iter().any(|r| r.name == "default") {
            let mut r = crate::resolvers::Resolvers::new(
                "default",
                Origin {
                    file: "/etc/resolv.conf".into(),
                    line: 0,
                },
            );
            if r.keyword(&["parse-resolv-conf".to_string()]).is_ok() && r.finish().is_ok() {
                self.resolvers.push(r);
            }
        }
        for p in &mut proxies {
            for sv in &mut p.servers {
                if let Some(sr) = &mut sv.resolve {
                    match self
                        .resolvers
                        .iter()
                        .position(|r| r.name == sr.section_name)
                    {
                        Some(i) => sr.section = i,
                        None => errors.push(ConfigError {
                            file: sv.origin.file.clone(),
                            line: sv.origin.line,
                            message: format!(
                                "'server {}' in {} '{}': unknown resolvers section '{}'{}",
                                sv.name,
                                kind_name(p.kind),
                                p.name,
                                sr.section_name,
                                did_you_mean(
                                    &sr.section_name,
                                    self.resolvers.iter().map(|r| r.name.as_str())
                                )
                            ),
                        }),
                    }
                }
            }
        }
        checks::resolve_tracks(&mut proxies, &mut errors);
        // Proxies and servers named by `nbsrv(B)`, `srv_conn(B/S)`, ...: they must exist.
        // (A format may be parsed twice: one report per place and name.)
        let mut named = crate::config::acl::take_named();
        named.sort_by(|a, b| (&a.at, &a.name, &a.server).cmp(&(&b.at, &b.name, &b.server)));
        named.dedup_by(|a, b| (&a.at, &a.name, &a.server) == (&b.at, &b.name, &b.server));
        for r in named {
            let p = proxies.iter().find(|p| {
                p.name == r.name
                    && if r.backend {
                        p.kind.has_backend()
                    } else {
                        p.kind.has_frontend()
                    }
            });
            let problem = match (p, &r.server) {
                (None, _) => Some(format!(
                    "'{}': unable to find {} '{}'",
                    r.fetch,
                    if r.backend { "backend" } else { "frontend" },
                    r.name
                )),
                (Some(p), Some(sv)) if !p.servers.iter().any(|s| s.name == *sv) => Some(format!(
                    "'{}': unable to find server '{sv}' in backend '{}'",
                    r.fetch, r.name
                )),
                _ => None,
            };
            if let Some(message) = problem {
                let (file, line) = r.at.unwrap_or_default();
                errors.push(ConfigError {
                    file,
                    line,
                    message,
                });
            }
        }
        // `fullconn` left unset where a server has `minconn`: 10 % of the maxconn of the
        // frontends that can route to the backend, as HAProxy (a frontend without maxconn
        // counts the global one, else HAProxy's 2000).
        for b in 0..proxies.len() {
            if proxies[b].fullconn.is_some()
                || proxies[b].servers.iter().all(|s| s.minconn.is_none())
            {
                continue;
            }
            let sum: u64 = proxies
                .iter()
                .filter(|f| {
                    f.kind.has_frontend()
                        && (f.default_backend == Some(b)
                            || f.use_backends.iter().any(|u| u.backend == Some(b)))
                })
                .map(|f| u64::from(f.maxconn.or(self.global.maxconn).unwrap_or(2000)))
                .sum();
            proxies[b].fullconn = Some(sum.div_ceil(10).clamp(1, u64::from(u32::MAX)) as u32);
        }
        // `unix-bind prefix`: every UNIX socket path goes under it (HAProxy prepends it as
        // is, before any chroot).
        if let Some(prefix) = &self.global.unix_bind.prefix {
            let under = |p: &mut std::path::PathBuf| {
                *p = format!("{prefix}{}", p.display()).into();
            };
            for s in &mut self.global.stats_sockets {
                if let BindAddr::Unix(p) = &mut s.addr {
                    under(p);
                }
            }
            for b in proxies.iter_mut().flat_map(|p| p.binds.iter_mut()) {
                if let BindAddr::Unix(p) = &mut b.addr {
                    under(p);
                }
            }
        }
        let peers = self.finish_peers(&proxies, &mut errors);
        if errors.is_empty() {
            let pat_refs = crate::map::take_refs();
            crate::lua::set_pat_refs(&pat_refs);
            return Ok(Config {
                global: self.global,
                proxies,
                resolvers: self.resolvers,
                pat_refs,
                caches: crate::cache::take_declared(),
                peers,
                peers_tables: self.peers_tables,
                warnings: self.warnings,
            });
        }
        // Report in file order, then line order (resolution errors were found last).
        let rank = |f: &str| order.iter().position(|o| *o == f).unwrap_or(usize::MAX);
        errors.sort_by_key(|e| (rank(&e.file), e.line));
        Err(errors)
    }
}

pub(super) fn kind_name(k: ProxyKind) -> &'static str {
    match k {
        ProxyKind::Frontend => "frontend",
        ProxyKind::Backend => "backend",
        ProxyKind::Listen => "listen",
    }
}

/// Proxy and defaults names: HAProxy's allowed characters.
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// Cross-proxy resolution: `log global`, backend names, mode compatibility, proxy ids.
fn resolve(
    global: &Global,
    drafts: Vec<Draft>,
    errors: &mut Vec<ConfigError>,
) -> Vec<super::Proxy> {
    let at = |o: &Origin, message: String| ConfigError {
        file: o.file.clone(),
        line: o.line,
        message,
    };
    let backend_names: Vec<&str> = drafts
        .iter()
        .filter(|d| d.p.kind.has_backend())
        .map(|d| d.p.name.as_str())
        .collect();
    // Returns the index of backend `name` for proxy `me`, or an error message.
    let lookup = |me: &Draft, kw: &str, name: &str| -> Result<usize, String> {
        let prefix = format!("'{kw}' in {}", me.describe());
        let Some(i) = drafts
            .iter()
            .position(|d| d.p.name == name && d.p.kind.has_backend())
        else {
            if drafts.iter().any(|d| d.p.name == name) {
                return Err(format!(
                    "{prefix}: '{name}' is a frontend, it cannot be used as a backend"
                ));
            }
            return Err(format!(
                "{prefix}: unknown backend '{name}'{}",
                did_you_mean(name, backend_names.iter().copied())
            ));
        };
        let be = &drafts[i].p;
        // A `mode tcp` frontend may pick an HTTP backend: the session becomes HTTP then
        // (HAProxy's implicit upgrade). The other way round is an error.
        if be.mode != me.p.mode && me.p.mode == super::Mode::Http {
            return Err(format!(
                "{prefix}: unable to use backend '{name}' (mode {}) from {} '{}' (mode {})",
                mode_name(be.mode),
                kind_name(me.p.kind),
                me.p.name,
                mode_name(me.p.mode)
            ));
        }
        Ok(i)
    };

    let mut out = Vec::with_capacity(drafts.len());
    let mut ids: HashMap<u32, &Draft> = HashMap::new();
    for (idx, d) in drafts.iter().enumerate() {
        let mut p = d.p.clone();
        p.logs = Vec::new();
        for e in &d.logs {
            match e {
                LogEntry::Global => p.logs.extend(global.logs.iter().cloned()),
                LogEntry::Target(t) => p.logs.push(t.clone()),
            }
        }
        if let Some((name, origin)) = &d.default_backend {
            match lookup(d, "default_backend", name) {
                Ok(i) if i == idx => errors.push(at(
                    origin,
                    format!(
                        "'default_backend' in {}: loop detected ('{name}' is this proxy itself)",
                        d.describe()
                    ),
                )),
                Ok(i) => p.default_backend = Some(i),
                Err(m) => errors.push(at(origin, m)),
            }
        } else if d.p.kind == ProxyKind::Listen {
            p.default_backend = Some(idx);
        }
        // `use-backend` of the SPOE agents: a backend in `mode tcp`.
        for e in &mut p.spoe {
            let name = &*e.backend_name;
            let origin = Origin {
                file: e.at.0.clone(),
                line: e.at.1,
            };
            match drafts
                .iter()
                .position(|b| b.p.name == name && b.p.kind.has_backend())
            {
                Some(i) if drafts[i].p.mode == super::Mode::Tcp => {
                    std::sync::Arc::make_mut(e).backend = i;
                }
                Some(_) => errors.push(at(
                    &origin,
                    format!(
                        "'filter spoe' in {}: backend '{name}' of SPOE agent '{}' is in 'mode \
                         http' (SPOP needs 'mode tcp')",
                        d.describe(),
                        e.agent.name
                    ),
                )),
                None => errors.push(at(
                    &origin,
                    format!(
                        "'filter spoe' in {}: unknown backend '{name}' for SPOE agent '{}'{}",
                        d.describe(),
                        e.agent.name,
                        did_you_mean(name, backend_names.iter().copied())
                    ),
                )),
            }
        }
        for (name, dynamic, cond, origin) in &d.use_backends {
            if dynamic.is_some() {
                p.use_backends.push(UseBackend {
                    backend: None,
                    dynamic: dynamic.clone(),
                    cond: cond.clone(),
                });
                continue;
            }
            match lookup(d, "use_backend", name) {
                Ok(i) => p.use_backends.push(UseBackend {
                    backend: Some(i),
                    dynamic: None,
                    cond: cond.clone(),
                }),
                Err(m) => errors.push(at(origin, m)),
            }
        }
        if let (Some(id), Some(origin)) = (d.p.id, &d.id_at) {
            if let Some(other) = ids.get(&id) {
                let msg = format!(
                    "'id' in {}: id {id} is already used by {} (at {}:{})",
                    d.describe(),
                    other.describe(),
                    other.p.origin.file,
                    other.p.origin.line
                );
                errors.push(at(origin, msg));
            } else {
                ids.insert(id, d);
            }
        }
        out.push(p);
    }
    out
}

pub(super) fn mode_name(m: super::Mode) -> &'static str {
    match m {
        super::Mode::Tcp => "tcp",
        super::Mode::Http => "http",
    }
}

/// `group NAME [users U,...]` and `user NAME [password HASH|insecure-password PASS]
/// [groups G,...]` in a `userlist` section.
fn userlist_keyword(u: &mut crate::userlist::Userlist, w: &[String]) -> Result<(), String> {
    use crate::userlist::{Password, User};
    let list = |v: &str| -> Vec<String> {
        v.split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    let name = w
        .get(1)
        .ok_or_else(|| format!("'{}' expects a name", w[0]))?
        .clone();
    match w[0].as_str() {
        "group" => {
            if u.groups.iter().any(|(g, _)| *g == name) {
                return Err(format!("group '{name}' is already defined"));
            }
            let users = match &w[2..] {
                [] => Vec::new(),
                [k, v] if k == "users" => list(v),
                _ => return Err("expects 'group NAME [users U1,U2,...]'".into()),
            };
            u.groups.push((name, users));
        }
        "user" => {
            if u.users.iter().any(|x| x.name == name) {
                return Err(format!("user '{name}' is already defined"));
            }
            let mut user = User {
                name,
                password: Password::Missing,
                groups: Vec::new(),
            };
            let mut i = 2;
            while i < w.len() {
                let v = w
                    .get(i + 1)
                    .ok_or_else(|| format!("'{}' expects a value", w[i]))?;
                match w[i].as_str() {
                    "password" => user.password = Password::Crypt(v.clone()),
                    "insecure-password" => user.password = Password::Plain(v.clone()),
                    "groups" => user.groups = list(v),
                    o => {
                        return Err(format!(
                            "unknown option '{o}' (expected 'password', 'insecure-password' or \
                             'groups'){}",
                            did_you_mean(o, ["password", "insecure-password", "groups"])
                        ));
                    }
                }
                i += 2;
            }
            if let Password::Crypt(h) = &user.password
                && crate::sys::crypt("", h).is_none()
            {
                return Err(format!(
                    "the password of user '{}' is not a hash this system's crypt(3) knows",
                    user.name
                ));
            }
            u.users.push(user);
        }
        k => {
            return Err(format!(
                "unknown keyword (expected 'group' or 'user'){}",
                did_you_mean(k, ["group", "user"])
            ));
        }
    }
    Ok(())
}
