//! `spoe`: the Stream Processing Offload Engine. `filter spoe [engine NAME] config FILE`, the
//! SPOE file it names (`spoe-agent`, `spoe-message`, `spoe-group`), `send-spoe-group`, and
//! SPOP 2.0, the protocol spoken to the agents (HAProxy's `doc/SPOE.txt`).
//!
//! On an event (`on-frontend-http-request`...) or a `send-spoe-group` rule, the messages that
//! apply are encoded into one NOTIFY frame, sent to an agent of the engine's `use-backend`,
//! and the stream waits for its ACK, whose `set-var`/`unset-var` actions set variables under
//! the agent's prefix (`txn.PREFIX.NAME`). Connections to agents are per thread, each owned by a
//! task that writes the frames streams queue and hands every ACK back to its stream: up to
//! `max-waiting-frames` in flight when the agent pipelines, else one.
//!
//! This module does not know HTTP: callers give it a view to evaluate samples on, and the
//! session's variables. It must never block its thread: every exchange is bounded by
//! `timeout processing`, and a failing agent costs the stream that time at most.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::acl::{AclSet, parse_cond};
use crate::config::converter::Val;
use crate::config::{Cond, HttpView, SampleFetch};
use crate::peers::wire::{get_varint, put_varint};
use crate::vars::{Scope, VarName, Vars};

// ---------------------------------------------------------------------------------------------
// Types.

/// When the messages of an engine are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    ClientSession,
    FrontendTcpRequest,
    BackendTcpRequest,
    FrontendHttpRequest,
    BackendHttpRequest,
    HttpResponse,
}

/// One `filter spoe` line with the scope of its SPOE file.
#[derive(Debug, Clone)]
pub struct Engine {
    /// The filter's `engine` name, else the agent's name.
    pub id: Box<str>,
    pub agent: Agent,
    pub messages: Vec<Message>,
    /// The `spoe-group` sections the agent lists (`groups`), in that order.
    pub groups: Vec<Group>,
    /// The backend of the agents (`use-backend`), resolved when all proxies are known.
    pub backend_name: Box<str>,
    pub backend: usize,
    /// The `filter spoe` line (file, line), for errors found later.
    pub at: (String, usize),
    /// This engine's key in the per-thread connection pool.
    uid: usize,
    /// A random id sent in HELLO frames (`engine-id`): agents group connections by it.
    engine_id: Box<str>,
}

/// The `spoe-agent` section.
#[derive(Debug, Clone)]
pub struct Agent {
    pub name: Box<str>,
    pub var_prefix: Box<str>,
    pub timeout_hello: Option<Duration>,
    pub timeout_idle: Option<Duration>,
    pub timeout_processing: Option<Duration>,
    pub max_frame_size: u32,
    /// `option set-on-error|set-process-time|set-total-time NAME`: `txn.PREFIX.NAME` (the
    /// prefix is added once the section is read).
    pub set_on_error: Option<VarName>,
    pub set_process_time: Option<VarName>,
    pub set_total_time: Option<VarName>,
    pub continue_on_error: bool,
    pub force_set_var: bool,
    pub pipelining: bool,
    /// `max-waiting-frames` (default 20): frames in flight on one pipelined connection.
    pub max_waiting: usize,
    /// Messages sent on their events (`messages`): indexes into [`Engine::messages`].
    pub on_events: Vec<usize>,
}

/// A `spoe-message` section.
#[derive(Debug, Clone)]
pub struct Message {
    pub name: Box<str>,
    /// `args [NAME=]SAMPLE...`: unnamed arguments have an empty name.
    pub args: Vec<(Box<str>, SampleFetch)>,
    pub event: Option<Event>,
    pub cond: Option<Cond>,
}

/// A `spoe-group` section: messages sent together by `send-spoe-group`.
#[derive(Debug, Clone)]
pub struct Group {
    pub name: Box<str>,
    pub messages: Vec<usize>,
}

/// `send-spoe-group ENGINE GROUP`: names, resolved against the proxy's engines once its
/// section is read (the `filter` line may come after the rule).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRef {
    pub engine_name: Box<str>,
    pub group_name: Box<str>,
    /// Index into the proxy's `spoe` engines, and into that engine's groups.
    pub engine: usize,
    pub group: usize,
}

/// What a stream keeps between the engines' exchanges of one transaction.
#[derive(Debug, Default)]
pub struct TxnState {
    /// Engines (by uid) disabled for the rest of the transaction by an error.
    off: Vec<usize>,
    /// This transaction's SPOP stream id, taken at its first exchange.
    sid: Option<u64>,
    fid: u64,
    /// Sum of the processing times of the transaction's exchanges (`set-total-time`), in ms.
    total_ms: i64,
}

/// Why an exchange failed: the value of the `set-on-error` variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpoeError(pub i64);

impl SpoeError {
    /// `timeout processing` expired.
    const TIMEOUT: SpoeError = SpoeError(1);
    /// The NOTIFY frame is over the agreed frame size.
    const TOO_BIG: SpoeError = SpoeError(3);
    /// A SPOP error: 256 + the SPOP status code (1 I/O, 2 timeout, 4 invalid frame...).
    fn spop(code: u64) -> SpoeError {
        SpoeError(256 + code.min(u32::MAX as u64) as i64)
    }
}

/// An open connection to an agent, after its HELLO.
struct AgentConn {
    conn: crate::stream::ServerConn,
    /// The frame size both sides agreed on.
    max_frame: u32,
    /// Bytes read past the last frame: one read usually brings a whole frame, length and
    /// all.
    rbuf: Vec<u8>,
    /// The agent announced `pipelining` too: several frames may be in flight.
    pipelining: bool,
}

/// A connection to an agent, owned by its task ([`pipe_task`]); exchanges hand it their
/// NOTIFY frames through this handle and get their ACKs back by (stream id, frame id).
#[derive(Clone)]
struct Pipe {
    uid: usize,
    tx: tokio::sync::mpsc::UnboundedSender<Job>,
    /// Frames written (or queued) and not answered yet: counted up by the exchange that
    /// queues one, down by the task as the ACK comes.
    inflight: Rc<Cell<usize>>,
    /// Frames it takes at once: `max-waiting-frames` when both sides pipeline, else 1.
    room: usize,
    max_frame: u32,
}

/// One NOTIFY for a pipe's task, and where its ACK goes.
struct Job {
    frame: Vec<u8>,
    key: (u64, u64),
    done: tokio::sync::oneshot::Sender<Result<Vec<u8>, Failure>>,
}

/// Marks a connection being opened for an engine on this thread; when it is done (opened,
/// failed or cancelled) the exchanges that waited for it look again. Only as many wait as
/// the connection is expected to take (`max-waiting-frames` for an agent that pipelined on
/// this thread before, else none): the others open their own at once.
struct Opening(Rc<OpeningState>);

struct OpeningState {
    uid: usize,
    notify: tokio::sync::Notify,
    waiters: Cell<usize>,
    room: usize,
}

impl Opening {
    fn new(uid: usize, room: usize) -> Opening {
        let st = Rc::new(OpeningState {
            uid,
            notify: tokio::sync::Notify::new(),
            waiters: Cell::new(0),
            room,
        });
        CONNECTING.with(|c| c.borrow_mut().push(st.clone()));
        Opening(st)
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        CONNECTING.with(|c| c.borrow_mut().retain(|o| !Rc::ptr_eq(o, &self.0)));
        self.0.notify.notify_waiters();
    }
}

// SPOP frame types and codes.
const HAPROXY_HELLO: u8 = 1;
const HAPROXY_DISCONNECT: u8 = 2;
const NOTIFY: u8 = 3;
const AGENT_HELLO: u8 = 101;
const AGENT_DISCONNECT: u8 = 102;
const ACK: u8 = 103;
const FLAG_FIN: u32 = 1;
const FLAG_ABORT: u32 = 2;
const ACTION_SET_VAR: u8 = 1;
const ACTION_UNSET_VAR: u8 = 2;
const T_NULL: u8 = 0;
const T_BOOL: u8 = 1;
const T_INT32: u8 = 2;
const T_UINT32: u8 = 3;
const T_INT64: u8 = 4;
const T_UINT64: u8 = 5;
const T_IPV4: u8 = 6;
const T_IPV6: u8 = 7;
const T_STR: u8 = 8;
const T_BIN: u8 = 9;
const ERR_IO: u64 = 1;
const ERR_TIMEOUT: u64 = 2;
const ERR_INVALID: u64 = 4;
const ERR_NO_VERSION: u64 = 5;
const ERR_NO_FRAME_SIZE: u64 = 6;
const ERR_BAD_VERSION: u64 = 8;
const ERR_BAD_FRAME_SIZE: u64 = 9;
const ERR_NO_FRAGMENTS: u64 = 10;

/// The pause between attempts to reach an agent while an exchange waits for one.
const CONNECT_RETRY: Duration = Duration::from_millis(100);

static NEXT_UID: AtomicUsize = AtomicUsize::new(1);
static NEXT_SID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// `tune.bufsize` while a configuration is read: it bounds `max-frame-size`.
    pub static BUFSIZE: Cell<usize> = const { Cell::new(16384) };
    /// This thread's agent connections, of all engines.
    static PIPES: RefCell<Vec<Pipe>> = const { RefCell::new(Vec::new()) };
    /// The connections this thread is opening, and who waits for them.
    static CONNECTING: RefCell<Vec<Rc<OpeningState>>> = const { RefCell::new(Vec::new()) };
    /// Engines (by uid) whose agent did not announce `pipelining` on this thread.
    static NO_PIPELINING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

// ---------------------------------------------------------------------------------------------
// Configuration.

/// `txn.NAME`, before the agent's prefix is known.
fn txn_var(name: Box<str>) -> VarName {
    VarName {
        scope: Scope::Txn,
        name,
    }
}

impl Agent {
    /// The variable `SCOPE.PREFIX.NAME` an agent's `NAME` stands for.
    fn var(&self, scope: Scope, name: &str) -> VarName {
        VarName {
            scope,
            name: format!("{}.{name}", self.var_prefix).into(),
        }
    }

    /// An agent's defaults: its name as the variable prefix, no timeouts, pipelining.
    fn new(name: &str, max_frame_size: u32) -> Agent {
        Agent {
            name: name.into(),
            var_prefix: name.into(),
            timeout_hello: None,
            timeout_idle: None,
            timeout_processing: None,
            max_frame_size,
            set_on_error: None,
            set_process_time: None,
            set_total_time: None,
            continue_on_error: false,
            force_set_var: false,
            pipelining: true,
            max_waiting: 20,
            on_events: Vec::new(),
        }
    }
}

impl Event {
    fn parse(s: &str) -> Result<Event, String> {
        Ok(match s {
            "on-client-session" => Event::ClientSession,
            "on-frontend-tcp-request" => Event::FrontendTcpRequest,
            "on-backend-tcp-request" => Event::BackendTcpRequest,
            "on-frontend-http-request" => Event::FrontendHttpRequest,
            "on-backend-http-request" => Event::BackendHttpRequest,
            "on-http-response" => Event::HttpResponse,
            "on-server-session" | "on-tcp-response" => {
                return Err(format!("event '{s}' is not supported by sluice"));
            }
            o => {
                return Err(format!(
                    "unknown event '{o}' (on-client-session, on-frontend-tcp-request, \
                     on-backend-tcp-request, on-frontend-http-request, \
                     on-backend-http-request, on-http-response)"
                ));
            }
        })
    }
}

/// The `spoe-agent` section being read: names are resolved once the scope is read.
struct AgentDraft {
    agent: Agent,
    at: String,
    backend: Option<String>,
    messages: Vec<String>,
    groups: Vec<String>,
}

/// A message being read: its `args` are parsed once its event says whether they are taken
/// on the request or on the response.
struct MsgDraft {
    name: String,
    at: String,
    args: Vec<(String, String)>,
    event: Option<(Event, Option<Vec<String>>)>,
    acls: AclSet,
}

fn valid_var_part(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'_')
}

/// Reads the scope of SPOE file `path` for `filter spoe [engine NAME]` (`engine` None: the
/// whole file, which then must have no scope line). `bufsize` bounds `max-frame-size`.
pub fn load(path: &str, engine: Option<&str>, bufsize: usize) -> Result<Engine, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read SPOE configuration file '{path}': {e}"))?;
    let (lines, errors) =
        crate::config::tokenizer::tokenize(path, &text, &crate::config::tokenizer::env_var);
    if let Some(e) = errors.into_iter().next() {
        return Err(e.to_string());
    }
    // Scope lines (`[name]`) are whole lines; the tokenizer keeps them as one word.
    let mut in_scope = engine.is_none();
    let mut found_scope = false;
    let mut agent: Option<AgentDraft> = None;
    let mut msgs: Vec<MsgDraft> = Vec::new();
    let mut groups: Vec<(String, String, Vec<String>)> = Vec::new();
    #[derive(PartialEq)]
    enum Sec {
        None,
        Agent,
        Message,
        Group,
    }
    let mut sec = Sec::None;
    let max_frame_cap = bufsize.saturating_sub(4).max(256) as u32;
    for l in &lines {
        let at = format!("{}:{}", l.file, l.line);
        let fail = |m: String| Err(format!("{at}: {m}"));
        let w = &l.words;
        let kw = w[0].as_str();
        if kw.starts_with('[') {
            let Some(name) = kw.strip_prefix('[').and_then(|s| s.strip_suffix(']')) else {
                return fail(format!("invalid scope line '{kw}' (expected '[NAME]')"));
            };
            if w.len() > 1 {
                return fail(format!("unexpected '{}' after scope '[{name}]'", w[1]));
            }
            match engine {
                None => {
                    return fail(format!(
                        "scope '[{name}]' found, but the 'filter spoe' line names no engine \
                         (add 'engine {name}')"
                    ));
                }
                Some(e) => {
                    in_scope = e == name;
                    found_scope |= in_scope;
                }
            }
            sec = Sec::None;
            continue;
        }
        if !in_scope {
            continue;
        }
        match kw {
            "spoe-agent" => {
                let Some(name) = w.get(1) else {
                    return fail("'spoe-agent' expects a name".into());
                };
                if agent.is_some() {
                    return fail(format!(
                        "a second 'spoe-agent' ('{name}'): a scope has one agent"
                    ));
                }
                agent = Some(AgentDraft {
                    agent: Agent::new(name, max_frame_cap),
                    at: at.clone(),
                    backend: None,
                    messages: Vec::new(),
                    groups: Vec::new(),
                });
                sec = Sec::Agent;
                continue;
            }
            "spoe-message" => {
                let Some(name) = w.get(1) else {
                    return fail("'spoe-message' expects a name".into());
                };
                if msgs.iter().any(|m| &m.name == name) {
                    return fail(format!("'spoe-message {name}' is defined twice"));
                }
                msgs.push(MsgDraft {
                    name: name.clone(),
                    at: at.clone(),
                    args: Vec::new(),
                    event: None,
                    acls: AclSet::new(),
                });
                sec = Sec::Message;
                continue;
            }
            "spoe-group" => {
                let Some(name) = w.get(1) else {
                    return fail("'spoe-group' expects a name".into());
                };
                if groups.iter().any(|g| &g.0 == name) {
                    return fail(format!("'spoe-group {name}' is defined twice"));
                }
                groups.push((name.clone(), at.clone(), Vec::new()));
                sec = Sec::Group;
                continue;
            }
            _ => {}
        }
        let r = match sec {
            Sec::None => Err(format!(
                "'{kw}' outside of a 'spoe-agent', 'spoe-message' or 'spoe-group' section"
            )),
            Sec::Agent => {
                let a = agent.as_mut().expect("in an agent section");
                agent_kw(a, w, max_frame_cap)
            }
            Sec::Message => message_kw(msgs.last_mut().expect("in a message section"), w, &at),
            Sec::Group => match kw {
                "messages" if w.len() > 1 => {
                    groups
                        .last_mut()
                        .expect("in a group section")
                        .2
                        .extend(w[1..].iter().cloned());
                    Ok(())
                }
                "messages" => Err("'messages' expects message names".into()),
                o => Err(format!("unknown keyword '{o}' in 'spoe-group' (messages)")),
            },
        };
        if let Err(m) = r {
            return fail(m);
        }
    }
    if let Some(e) = engine
        && !found_scope
    {
        return Err(format!(
            "{path}: no scope '[{e}]' in this SPOE configuration file"
        ));
    }
    let Some(AgentDraft {
        mut agent,
        at: agent_at,
        backend,
        messages: msg_names,
        groups: group_names,
    }) = agent
    else {
        return Err(match engine {
            Some(e) => format!("{path}: scope '[{e}]' has no 'spoe-agent' section"),
            None => format!("{path}: no 'spoe-agent' section"),
        });
    };
    let Some(backend_name) = backend else {
        return Err(format!(
            "{agent_at}: 'spoe-agent {}' has no 'use-backend'",
            agent.name
        ));
    };
    if agent.timeout_hello.is_none()
        || agent.timeout_idle.is_none()
        || agent.timeout_processing.is_none()
    {
        crate::config::warn(format!(
            "{agent_at}: missing timeouts for SPOE agent '{}': set 'timeout hello', 'timeout \
             idle' and 'timeout processing' (a missing one never expires)",
            agent.name
        ));
    }
    // Messages: parse their samples now that their event is known.
    let mut messages = Vec::with_capacity(msgs.len());
    for m in msgs {
        messages.push(finish_message(m)?);
    }
    let find = |name: &str, at: &str| {
        messages
            .iter()
            .position(|m| &*m.name == name)
            .ok_or_else(|| format!("{at}: unknown SPOE message '{name}'"))
    };
    for n in &msg_names {
        let i = find(n, &agent_at)?;
        if messages[i].event.is_none() {
            crate::config::warn(format!(
                "{agent_at}: SPOE message '{n}' has no 'event': 'messages' ignores it"
            ));
            continue;
        }
        if !agent.on_events.contains(&i) {
            agent.on_events.push(i);
        }
    }
    let mut out_groups = Vec::new();
    for g in &group_names {
        let Some((name, at, members)) = groups.iter().find(|x| &x.0 == g) else {
            return Err(format!("{agent_at}: unknown SPOE group '{g}'"));
        };
        let mut idx = Vec::new();
        for m in members {
            idx.push(find(m, at)?);
        }
        out_groups.push(Group {
            name: name.as_str().into(),
            messages: idx,
        });
    }
    let uid = NEXT_UID.fetch_add(1, Relaxed);
    let engine_id: String = {
        let mut b = [0u8; 16];
        let _ = aws_lc_rs::rand::fill(&mut b);
        b.iter().map(|x| format!("{x:02x}")).collect()
    };
    // The variables the agent's options name take its prefix, known now.
    let prefix = agent.var_prefix.clone();
    for v in [
        &mut agent.set_on_error,
        &mut agent.set_process_time,
        &mut agent.set_total_time,
    ]
    .into_iter()
    .flatten()
    {
        v.name = format!("{prefix}.{}", v.name).into();
    }
    Ok(Engine {
        id: engine.unwrap_or(&agent.name).into(),
        agent,
        messages,
        groups: out_groups,
        backend_name: backend_name.into(),
        backend: usize::MAX,
        at: (String::new(), 0),
        uid,
        engine_id: engine_id.into(),
    })
}

fn agent_kw(d: &mut AgentDraft, w: &[String], max_frame_cap: u32) -> Result<(), String> {
    let AgentDraft {
        agent: a,
        backend,
        messages: msgs,
        groups,
        ..
    } = d;
    let arg = |i: usize, what: &str| {
        w.get(i)
            .map(String::as_str)
            .ok_or_else(|| format!("'{}' expects {what}", w[..i].join(" ")))
    };
    let var_name = |i: usize| -> Result<Box<str>, String> {
        let v = arg(i, "a variable name")?;
        if !valid_var_part(v) {
            return Err(format!(
                "invalid variable name '{v}' (only 'a-z', 'A-Z', '0-9', '.' and '_')"
            ));
        }
        Ok(v.into())
    };
    match w[0].as_str() {
        "messages" => msgs.extend(w[1..].iter().cloned()),
        "groups" => groups.extend(w[1..].iter().cloned()),
        "use-backend" => *backend = Some(arg(1, "a backend name")?.to_string()),
        "timeout" => {
            let t = crate::config::parser::parse_time_pub(arg(2, "a time")?)?;
            let t = (!t.is_zero()).then_some(t);
            match arg(1, "'hello', 'idle' or 'processing'")? {
                "hello" => a.timeout_hello = t,
                "idle" => a.timeout_idle = t,
                "processing" => a.timeout_processing = t,
                o => return Err(format!("unknown timeout '{o}' (hello, idle or processing)")),
            }
        }
        "max-frame-size" => {
            let n: u32 = arg(1, "a size")?
                .parse()
                .map_err(|_| format!("invalid size '{}'", w[1]))?;
            if !(256..=max_frame_cap).contains(&n) {
                return Err(format!(
                    "'max-frame-size' must be between 256 and {max_frame_cap} (tune.bufsize - 4)"
                ));
            }
            a.max_frame_size = n;
        }
        // Limits of HAProxy's applet scheduling; sluice opens a connection per concurrent
        // exchange, up to the servers' `maxconn`.
        "max-waiting-frames" => {
            a.max_waiting = arg(1, "a number")?
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("invalid number '{}'", w[1]))?;
        }
        "maxconnrate" | "maxerrrate" => {
            arg(1, "a number")?
                .parse::<u32>()
                .map_err(|_| format!("invalid number '{}'", w[1]))?;
        }
        "register-var-names" => {
            for i in 1..w.len() {
                var_name(i)?;
            }
        }
        "log" => {
            crate::config::warn(format!(
                "'{}' in 'spoe-agent {}': sluice does not log SPOE processing; the stream's \
                 own log line is kept",
                w.join(" "),
                a.name
            ));
        }
        "no" if w.get(1).is_some_and(|x| x == "log") => {}
        "option" | "no" => {
            let neg = w[0] == "no";
            let base = if neg { 2 } else { 1 };
            if neg && w.get(1).is_none_or(|x| x != "option") {
                return Err("'no' expects 'option' or 'log'".into());
            }
            let name = arg(base, "an option name")?;
            match (name, neg) {
                ("var-prefix", false) => a.var_prefix = var_name(base + 1)?,
                ("set-on-error", false) => a.set_on_error = Some(txn_var(var_name(base + 1)?)),
                ("set-process-time", false) => {
                    a.set_process_time = Some(txn_var(var_name(base + 1)?))
                }
                ("set-total-time", false) => a.set_total_time = Some(txn_var(var_name(base + 1)?)),
                ("continue-on-error", false) => a.continue_on_error = true,
                ("force-set-var", false) => a.force_set_var = true,
                ("pipelining", n) => a.pipelining = !n,
                // Always off in sluice: an ACK must come back on its NOTIFY's connection.
                ("async", _) | ("send-frag-payload", _) | ("dontlog-normal", _) => {}
                (o, _) => {
                    return Err(format!(
                        "unknown option '{o}' (var-prefix, set-on-error, set-process-time, \
                         set-total-time, continue-on-error, force-set-var, pipelining, async, \
                         send-frag-payload, dontlog-normal)"
                    ));
                }
            }
        }
        o => {
            return Err(format!(
                "unknown keyword '{o}' in 'spoe-agent' (messages, groups, use-backend, timeout, \
                 option, max-frame-size, register-var-names, log, maxconnrate, maxerrrate, \
                 max-waiting-frames)"
            ));
        }
    }
    Ok(())
}

fn message_kw(m: &mut MsgDraft, w: &[String], at: &str) -> Result<(), String> {
    match w[0].as_str() {
        "acl" => m.acls.add(&w[1..]),
        "args" => {
            for a in &w[1..] {
                // `name=sample`; a sample with `=` in its arguments has a `(` before it.
                let (name, expr) = match a.split_once('=') {
                    Some((n, e)) if !n.contains('(') => (n.to_string(), e.to_string()),
                    _ => (String::new(), a.clone()),
                };
                m.args.push((name, expr));
            }
            Ok(())
        }
        "event" => {
            let ev = Event::parse(w.get(1).ok_or("'event' expects an event name")?)?;
            let cond = match w.get(2) {
                None => None,
                Some(k) if k == "if" || k == "unless" => Some(w[2..].to_vec()),
                Some(o) => return Err(format!("unexpected '{o}' (expected 'if' or 'unless')")),
            };
            m.event = Some((ev, cond));
            Ok(())
        }
        // HAProxy 2.6 skips unknown lines here without a word (a `;` "comment", say):
        // sluice skips them too, but says so.
        o => {
            crate::config::warn(format!(
                "unknown keyword '{o}' in 'spoe-message {}' ignored, as HAProxy does (at {})",
                m.name, at
            ));
            Ok(())
        }
    }
}

fn finish_message(m: MsgDraft) -> Result<Message, String> {
    let on_response = matches!(m.event, Some((Event::HttpResponse, _)));
    let at = &m.at;
    // Samples may read the client's first data (`req.payload`) for the tcp events; on a
    // response event, the response. A group's messages may be sent from `http-response`
    // rules too: response samples are allowed there (request ones then give NULL).
    let parse_args = |rsp: bool| -> Result<Vec<(Box<str>, SampleFetch)>, String> {
        let mut out = Vec::new();
        for (name, expr) in &m.args {
            let f = if rsp {
                SampleFetch::on_response(|| SampleFetch::parse_with_payload(expr))
            } else {
                SampleFetch::parse_with_payload(expr)
            };
            out.push((name.as_str().into(), f?));
        }
        Ok(out)
    };
    let args = match parse_args(on_response) {
        Ok(a) => a,
        Err(e) if m.event.is_none() => match parse_args(true) {
            Ok(a) => a,
            Err(_) => return Err(format!("{at}: 'spoe-message {}': {e}", m.name)),
        },
        Err(e) => return Err(format!("{at}: 'spoe-message {}': {e}", m.name)),
    };
    let (event, cond) = match m.event {
        None => (None, None),
        Some((ev, None)) => (Some(ev), None),
        Some((ev, Some(words))) => {
            let c = parse_cond(&words, &m.acls)
                .map_err(|e| format!("{at}: 'spoe-message {}': {e}", m.name))?;
            if c.uses_response() && ev != Event::HttpResponse {
                return Err(format!(
                    "{at}: 'spoe-message {}': the condition reads the response, which \
                     this event does not see",
                    m.name
                ));
            }
            (Some(ev), Some(c))
        }
    };
    Ok(Message {
        name: m.name.into(),
        args,
        event,
        cond,
    })
}

// ---------------------------------------------------------------------------------------------
// Encoding and decoding.

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// A KV-list item whose value is a STRING.
fn put_kv_str(out: &mut Vec<u8>, key: &[u8], v: &[u8]) {
    put_str(out, key);
    out.push(T_STR);
    put_str(out, v);
}

/// A KV-list item whose value is a UINT32.
fn put_kv_u32(out: &mut Vec<u8>, key: &[u8], v: u32) {
    put_str(out, key);
    out.push(T_UINT32);
    put_varint(out, v.into());
}

fn put_typed(out: &mut Vec<u8>, v: Option<&Val>, binary: bool) {
    match v {
        None => out.push(T_NULL),
        Some(Val::Bool(b)) => out.push(T_BOOL | if *b { 0x10 } else { 0 }),
        Some(Val::Int(n)) => {
            // HAProxy's integers are signed 64 bits; varints carry the two's complement.
            out.push(T_INT64);
            put_varint(out, *n as u64);
        }
        Some(Val::Ip(std::net::IpAddr::V4(a))) => {
            out.push(T_IPV4);
            out.extend_from_slice(&a.octets());
        }
        Some(Val::Ip(std::net::IpAddr::V6(a))) => {
            out.push(T_IPV6);
            out.extend_from_slice(&a.octets());
        }
        Some(Val::Str(s)) => {
            out.push(if binary { T_BIN } else { T_STR });
            put_str(out, s);
        }
    }
}

/// Starts a frame: room for its length, then type, flags, stream and frame ids.
fn frame_start(out: &mut Vec<u8>, kind: u8, sid: u64, fid: u64) {
    out.extend_from_slice(&[0; 4]);
    out.push(kind);
    out.extend_from_slice(&FLAG_FIN.to_be_bytes());
    put_varint(out, sid);
    put_varint(out, fid);
}

fn frame_end(out: &mut [u8]) {
    let n = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&n.to_be_bytes());
}

fn get_str<'b>(b: &mut &'b [u8]) -> Option<&'b [u8]> {
    let n = usize::try_from(get_varint(b)?).ok()?;
    if b.len() < n {
        return None;
    }
    let (s, rest) = b.split_at(n);
    *b = rest;
    Some(s)
}

/// Reads one typed value; `Some(None)` for NULL.
fn get_typed(b: &mut &[u8]) -> Option<Option<Val>> {
    let (&t, rest) = b.split_first()?;
    *b = rest;
    let take = |b: &mut &[u8], n: usize| -> Option<Vec<u8>> {
        if b.len() < n {
            return None;
        }
        let (x, rest) = b.split_at(n);
        *b = rest;
        Some(x.to_vec())
    };
    Some(Some(match t & 0x0F {
        T_NULL => return Some(None),
        T_BOOL => Val::Bool(t & 0x10 != 0),
        T_INT32 | T_INT64 => Val::Int(get_varint(b)? as i64),
        T_UINT32 | T_UINT64 => Val::Int(get_varint(b)?.min(i64::MAX as u64) as i64),
        T_IPV4 => {
            let o: [u8; 4] = take(b, 4)?.try_into().ok()?;
            Val::Ip(std::net::Ipv4Addr::from(o).into())
        }
        T_IPV6 => {
            let o: [u8; 16] = take(b, 16)?.try_into().ok()?;
            Val::Ip(std::net::Ipv6Addr::from(o).into())
        }
        T_STR | T_BIN => Val::Str(get_str(b)?.to_vec()),
        _ => return None,
    }))
}

/// A frame's type, stream id, frame id and payload.
fn parse_frame(f: &[u8]) -> Option<(u8, u32, u64, u64, &[u8])> {
    let (&kind, mut b) = f.split_first()?;
    let flags = u32::from_be_bytes(b.get(..4)?.try_into().ok()?);
    b = &b[4..];
    let sid = get_varint(&mut b)?;
    let fid = get_varint(&mut b)?;
    Some((kind, flags, sid, fid, b))
}

/// The items of a KV-LIST payload (HELLO, DISCONNECT).
fn kv_list(mut b: &[u8]) -> Option<Vec<(&[u8], Option<Val>)>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let k = get_str(&mut b)?;
        let v = get_typed(&mut b)?;
        out.push((k, v));
    }
    Some(out)
}

fn kv_int(kv: &[(&[u8], Option<Val>)], key: &[u8]) -> Option<i64> {
    kv.iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| match v {
            Some(Val::Int(n)) => Some(*n),
            _ => None,
        })
}

fn kv_str<'k>(kv: &'k [(&[u8], Option<Val>)], key: &[u8]) -> Option<&'k [u8]> {
    kv.iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| match v {
            Some(Val::Str(s)) => Some(s.as_slice()),
            _ => None,
        })
}

// ---------------------------------------------------------------------------------------------
// Behaviour.

impl Engine {
    /// Whether some message of the agent's `messages` is sent on `ev`.
    pub fn has_event(&self, ev: Event) -> bool {
        self.agent
            .on_events
            .iter()
            .any(|&i| self.messages[i].event == Some(ev))
    }

    /// The index of group `name` of the agent, for `send-spoe-group`.
    pub fn group(&self, name: &str) -> Option<usize> {
        self.groups.iter().position(|g| &*g.name == name)
    }

    /// Encodes the NOTIFY frame of `msgs` (those whose condition holds); `None` when none
    /// does, and then nothing is sent.
    fn notify(
        &self,
        msgs: &mut dyn Iterator<Item = &Message>,
        view: &dyn HttpView,
        sid: u64,
        fid: u64,
    ) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(256);
        frame_start(&mut out, NOTIFY, sid, fid);
        let start = out.len();
        for m in msgs {
            if m.cond.as_ref().is_some_and(|c| !c.eval(view)) {
                continue;
            }
            put_str(&mut out, m.name.as_bytes());
            out.push(m.args.len().min(255) as u8);
            for (name, f) in m.args.iter().take(255) {
                put_str(&mut out, name.as_bytes());
                let v = f.value(view);
                put_typed(&mut out, v.as_ref(), f.is_binary());
            }
        }
        if out.len() == start {
            return None;
        }
        frame_end(&mut out);
        Some(out)
    }

    /// Runs the messages of event `ev` (or of group `group`) for a stream: encodes them on
    /// `view`, exchanges them with an agent, and applies the agent's actions to `vars`.
    /// Does nothing when the engine is off for the transaction.
    pub async fn process(
        &self,
        ctx: &crate::stream::SessionCtx,
        st: &mut TxnState,
        what: Result<Event, usize>,
        view: &dyn HttpView,
        vars: &Vars,
    ) {
        if st.off.contains(&self.uid) {
            return;
        }
        let started = Instant::now();
        let sid = *st.sid.get_or_insert_with(|| NEXT_SID.fetch_add(1, Relaxed));
        st.fid += 1;
        let fid = st.fid;
        let frame = match what {
            Ok(ev) => {
                let mut it = self
                    .agent
                    .on_events
                    .iter()
                    .map(|&i| &self.messages[i])
                    .filter(|m| m.event == Some(ev));
                self.notify(&mut it, view, sid, fid)
            }
            Err(g) => {
                let Some(g) = self.groups.get(g) else { return };
                let mut it = g.messages.iter().map(|&i| &self.messages[i]);
                self.notify(&mut it, view, sid, fid)
            }
        };
        let Some(frame) = frame else { return };
        // Without `timeout processing`, the agents' backend `timeout server` bounds the
        // exchange (as it bounds HAProxy's SPOE streams): an agent never holds a stream
        // forever.
        let limit = self.agent.timeout_processing.or_else(|| {
            ctx.shared()
                .cfg
                .proxies
                .get(self.backend)
                .and_then(|b| b.timeouts.server)
        });
        let res = if frame.len() - 4 > self.agent.max_frame_size as usize {
            Err(SpoeError::TOO_BIG)
        } else {
            // Boxed: the connect and handshake futures are large, and would otherwise
            // grow every HTTP session's future, SPOE or not.
            match limit {
                Some(t) => {
                    let x = Box::pin(self.exchange(ctx, &frame, sid, fid, true));
                    tokio::time::timeout(t, x)
                        .await
                        .unwrap_or(Err(SpoeError::TIMEOUT))
                }
                None => Box::pin(self.exchange(ctx, &frame, sid, fid, false)).await,
            }
        };
        let ms = started.elapsed().as_millis() as i64;
        st.total_ms += ms;
        if let Some(v) = &self.agent.set_process_time {
            vars.set(v, Val::Int(ms), &[]);
        }
        if let Some(v) = &self.agent.set_total_time {
            vars.set(v, Val::Int(st.total_ms), &[]);
        }
        match res {
            Ok(ack) => self.apply(&ack, vars),
            Err(e) => {
                if let Some(v) = &self.agent.set_on_error {
                    vars.set(v, Val::Int(e.0), &[]);
                }
                if !self.agent.continue_on_error {
                    st.off.push(self.uid);
                }
            }
        }
    }

    /// Applies the actions of an ACK payload.
    fn apply(&self, mut b: &[u8], vars: &Vars) {
        while let Some((&kind, rest)) = b.split_first() {
            b = rest;
            let Some((&nargs, rest)) = b.split_first() else {
                return;
            };
            b = rest;
            // VAR-SCOPE and VAR-NAME: the variable under the agent's prefix (`None` for a
            // name no variable can have).
            let var = |b: &mut &[u8]| -> Option<Option<VarName>> {
                let (&s, rest) = b.split_first()?;
                *b = rest;
                let scope = match s {
                    0 => Scope::Proc,
                    1 => Scope::Sess,
                    2 => Scope::Txn,
                    3 => Scope::Req,
                    4 => Scope::Res,
                    _ => return None,
                };
                let n = std::str::from_utf8(get_str(b)?).ok()?;
                Some(valid_var_part(n).then(|| self.agent.var(scope, n)))
            };
            match (kind, nargs) {
                (ACTION_SET_VAR, 3) => {
                    let Some(name) = var(&mut b) else { return };
                    let Some(v) = get_typed(&mut b) else { return };
                    let (Some(v), Some(name)) = (v, name) else {
                        continue;
                    };
                    // A process variable the configuration does not name is created only
                    // with `force-set-var` (HAProxy's rule since variables are hashed:
                    // other scopes are always set).
                    if name.scope == Scope::Proc
                        && !self.agent.force_set_var
                        && !crate::vars::proc_exists(&name.name)
                    {
                        continue;
                    }
                    vars.set(&name, v, &[]);
                }
                (ACTION_UNSET_VAR, 2) => match var(&mut b) {
                    None => return,
                    Some(None) => {}
                    Some(Some(name)) => vars.unset(&name),
                },
                // An unknown action: its arguments are typed data, skipped.
                _ => {
                    for _ in 0..nargs {
                        if get_typed(&mut b).is_none() {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Sends `frame` on an agent connection and waits for its ACK; returns the ACK's
    /// payload. A connection reused from the pool that turns out closed is replaced once.
    /// `bounded`: a timeout runs around it, and an agent that cannot be reached is tried
    /// again until then.
    async fn exchange(
        &self,
        ctx: &crate::stream::SessionCtx,
        frame: &[u8],
        sid: u64,
        fid: u64,
        bounded: bool,
    ) -> Result<Vec<u8>, SpoeError> {
        let mut fresh_tried = false;
        loop {
            let (pipe, reused) = match self.pick_pipe() {
                Some(p) => (p, true),
                None => {
                    // A connection being opened for this engine: wait for it rather than
                    // open one more (a burst would open one per exchange).
                    let opening = CONNECTING.with(|c| {
                        c.borrow()
                            .iter()
                            .find(|o| o.uid == self.uid && o.waiters.get() + 1 < o.room)
                            .cloned()
                    });
                    if let Some(o) = opening {
                        let woken = o.notify.notified();
                        o.waiters.set(o.waiters.get() + 1);
                        woken.await;
                        continue;
                    }
                    let room = if self.agent.pipelining
                        && !NO_PIPELINING.with(|n| n.borrow().contains(&self.uid))
                    {
                        self.agent.max_waiting
                    } else {
                        1
                    };
                    let _opening = Opening::new(self.uid, room);
                    fresh_tried = true;
                    match self.connect(ctx).await {
                        Ok(c) => (self.start_pipe(c), false),
                        // As HAProxy, the stream waits for an agent it cannot reach until
                        // `timeout processing` (error 1) rather than failing at once; an
                        // agent that answers the HELLO with an error fails it at once.
                        Err((_, true)) if bounded => {
                            tokio::time::sleep(CONNECT_RETRY).await;
                            fresh_tried = false;
                            continue;
                        }
                        Err((e, _)) => return Err(e),
                    }
                }
            };
            // The agent may have agreed to less than the engine's frame size.
            if frame.len() - 4 > pipe.max_frame as usize {
                return Err(SpoeError::TOO_BIG);
            }
            // Counted until its ACK comes (or the connection ends), by the pipe's task: an
            // exchange that gives up leaves its frame at the agent all the same.
            pipe.inflight.set(pipe.inflight.get() + 1);
            let (done, ack) = tokio::sync::oneshot::channel();
            let job = Job {
                frame: frame.to_vec(),
                key: (sid, fid),
                done,
            };
            let res = match pipe.tx.send(job) {
                Ok(()) => ack.await.unwrap_or(Err(Failure::Io)),
                Err(_) => {
                    pipe.inflight.set(pipe.inflight.get().saturating_sub(1));
                    Err(Failure::Io)
                }
            };
            match res {
                Ok(ack) => return Ok(ack),
                // A reused connection the agent closed (or is closing, AGENT-DISCONNECT)
                // while it was idle: once more on a new one.
                Err(Failure::Io | Failure::Disconnect(_)) if reused && !fresh_tried => continue,
                Err(Failure::Io) => return Err(SpoeError::spop(ERR_IO)),
                Err(Failure::Spop(code) | Failure::Disconnect(code)) => {
                    return Err(SpoeError::spop(code));
                }
            }
        }
    }

    /// Opens a connection to an agent of the backend and runs the HELLO handshake.
    /// `Err((e, true))`: no agent could be reached (worth another try); `false`: one
    /// answered, with an error.
    async fn connect(
        &self,
        ctx: &crate::stream::SessionCtx,
    ) -> Result<AgentConn, (SpoeError, bool)> {
        let input = crate::backend::PickInput {
            src: ctx.peer.map(|a| a.ip()),
            uri: b"",
            hdr: None,
            persist: None,
        };
        let mut conn = crate::stream::connect_server(ctx, self.backend, &input)
            .await
            .map_err(|_| (SpoeError::spop(ERR_IO), true))?;
        let caps: &[u8] = if self.agent.pipelining {
            b"pipelining"
        } else {
            b""
        };
        let hello = hello_frame(self.agent.max_frame_size, caps, |f| {
            put_kv_str(f, b"engine-id", self.engine_id.as_bytes())
        });
        let max = self.agent.max_frame_size;
        let mut rbuf = Vec::new();
        let handshake = async {
            conn.stream
                .write_all(&hello)
                .await
                .map_err(|_| SpoeError::spop(ERR_IO))?;
            let f = read_frame(&mut conn.stream, &mut rbuf, max)
                .await
                .map_err(|e| SpoeError::spop(e.code()))?;
            let Some((kind, _, _, _, payload)) = parse_frame(&f) else {
                return Err(SpoeError::spop(ERR_INVALID));
            };
            let Some(kv) = kv_list(payload) else {
                return Err(SpoeError::spop(ERR_INVALID));
            };
            match kind {
                AGENT_HELLO => {}
                AGENT_DISCONNECT => {
                    return Err(SpoeError::spop(
                        kv_int(&kv, b"status-code").unwrap_or(99).max(0) as u64,
                    ));
                }
                _ => return Err(SpoeError::spop(ERR_INVALID)),
            }
            let Some(version) = kv_str(&kv, b"version") else {
                return Err(SpoeError::spop(ERR_NO_VERSION));
            };
            let major = version.split(|&c| c == b'.').next().unwrap_or(b"");
            if major.trim_ascii() != b"2" {
                return Err(SpoeError::spop(ERR_BAD_VERSION));
            }
            let Some(size) = kv_int(&kv, b"max-frame-size") else {
                return Err(SpoeError::spop(ERR_NO_FRAME_SIZE));
            };
            let caps = kv_str(&kv, b"capabilities").unwrap_or(b"");
            let pipelining = caps
                .split(|&c| c == b',')
                .any(|c| c.trim_ascii() == b"pipelining");
            if size < 256 || size > i64::from(max) {
                return Err(SpoeError::spop(ERR_BAD_FRAME_SIZE));
            }
            Ok((size as u32, pipelining))
        };
        let (size, pipelining) = match self.agent.timeout_hello {
            Some(t) => tokio::time::timeout(t, handshake)
                .await
                .unwrap_or(Err(SpoeError::spop(ERR_TIMEOUT))),
            None => handshake.await,
        }
        .map_err(|e| (e, false))?;
        Ok(AgentConn {
            conn,
            max_frame: size,
            rbuf,
            pipelining,
        })
    }

    /// This thread's open connection of this engine with the fewest frames in flight, if
    /// one has room for another.
    fn pick_pipe(&self) -> Option<Pipe> {
        PIPES.with(|p| {
            let mut p = p.borrow_mut();
            p.retain(|x| !x.tx.is_closed());
            p.iter()
                .filter(|x| x.uid == self.uid && x.inflight.get() < x.room)
                .min_by_key(|x| x.inflight.get())
                .cloned()
        })
    }

    /// Hands a new agent connection to its task, and lists it for this thread's exchanges.
    fn start_pipe(&self, c: AgentConn) -> Pipe {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let pipe = Pipe {
            uid: self.uid,
            tx,
            inflight: Rc::new(Cell::new(0)),
            room: if self.agent.pipelining && c.pipelining {
                self.agent.max_waiting
            } else {
                1
            },
            max_frame: c.max_frame,
        };
        NO_PIPELINING.with(|n| {
            let mut n = n.borrow_mut();
            n.retain(|&u| u != self.uid);
            if !c.pipelining {
                n.push(self.uid);
            }
        });
        PIPES.with(|p| p.borrow_mut().push(pipe.clone()));
        let quiet = self.agent.timeout_idle.or(self.agent.timeout_processing);
        tokio::task::spawn_local(pipe_task(c, rx, pipe.inflight.clone(), quiet));
        pipe
    }
}

/// Owns one agent connection: writes the NOTIFY frames exchanges queue (those that queued
/// together in one write), hands each ACK to its exchange, and ends (failing what is in
/// flight) when the connection fails or the agent disconnects. `quiet` (`timeout idle`, else
/// `timeout processing`) bounds each write and the time without any traffic: then the
/// connection ends with a HAPROXY-DISCONNECT (status 0 when nothing was in flight, else 2,
/// a timeout), as HAProxy ends an agent connection that stopped answering. `inflight` counts
/// the frames written and not answered, which `pick_pipe` compares with the room.
async fn pipe_task(
    mut c: AgentConn,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Job>,
    inflight: Rc<Cell<usize>>,
    quiet: Option<Duration>,
) {
    type Done = tokio::sync::oneshot::Sender<Result<Vec<u8>, Failure>>;
    let mut pending: Vec<((u64, u64), Done)> = Vec::new();
    let mut out = Vec::new();
    let mut last = tokio::time::Instant::now();
    let max = c.max_frame;
    let (mut rd, mut wr) = tokio::io::split(&mut c.conn.stream);
    let rbuf = &mut c.rbuf;
    let end = |pending: &mut Vec<((u64, u64), Done)>, f: Failure| {
        for (_, done) in pending.drain(..) {
            let _ = done.send(Err(f));
        }
    };
    let mut bye = None;
    loop {
        let quiet_at = quiet.map(|t| last + t);
        tokio::select! {
            job = rx.recv() => {
                let Some(job) = job else { break };
                out.extend_from_slice(&job.frame);
                pending.push((job.key, job.done));
                while let Ok(j) = rx.try_recv() {
                    out.extend_from_slice(&j.frame);
                    pending.push((j.key, j.done));
                }
                let write = wr.write_all(&out);
                let written = match quiet {
                    Some(t) => tokio::time::timeout(t, write).await.unwrap_or(Err(
                        std::io::ErrorKind::TimedOut.into(),
                    )),
                    None => write.await,
                };
                if written.is_err() {
                    end(&mut pending, Failure::Io);
                    break;
                }
                out.clear();
                last = tokio::time::Instant::now();
            }
            f = read_frame(&mut rd, rbuf, max) => {
                last = tokio::time::Instant::now();
                let f = match f {
                    Ok(f) => f,
                    Err(e) => {
                        end(&mut pending, e);
                        break;
                    }
                };
                let Some((kind, flags, sid, fid, payload)) = parse_frame(&f) else {
                    end(&mut pending, Failure::Spop(ERR_INVALID));
                    bye = Some(ERR_INVALID);
                    break;
                };
                match kind {
                    ACK => {
                        if let Some(i) = pending.iter().position(|(k, _)| *k == (sid, fid)) {
                            let (_, done) = pending.swap_remove(i);
                            inflight.set(inflight.get().saturating_sub(1));
                            // Fragmented or aborted: sluice does not announce fragmentation.
                            let r = if flags & FLAG_FIN == 0 || flags & FLAG_ABORT != 0 {
                                Err(Failure::Spop(ERR_NO_FRAGMENTS))
                            } else {
                                Ok(payload.to_vec())
                            };
                            // (Its exchange may have given up: the ACK is dropped.)
                            let _ = done.send(r);
                        }
                    }
                    AGENT_DISCONNECT => {
                        let code = kv_list(payload)
                            .and_then(|kv| kv_int(&kv, b"status-code"))
                            .unwrap_or(99);
                        end(&mut pending, Failure::Disconnect(code.max(0) as u64));
                        break;
                    }
                    // An unknown frame: skipped.
                    _ => {}
                }
            }
            _ = async {
                match quiet_at {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            } => {
                let status = if pending.is_empty() { 0 } else { ERR_TIMEOUT };
                end(&mut pending, Failure::Spop(ERR_TIMEOUT));
                bye = Some(status);
                break;
            }
        }
    }
    // Closing the channel tells `pick_pipe` this connection is gone.
    rx.close();
    if let Some(status) = bye {
        let f = disconnect_frame(status);
        let _ = tokio::time::timeout(Duration::from_millis(100), wr.write_all(&f)).await;
    }
}

/// A HAPROXY-HELLO announcing SPOP 2.0, frame size `max_frame` and `caps`; `more` adds the
/// items of its kind (`engine-id`, `healthcheck`).
fn hello_frame(max_frame: u32, caps: &[u8], more: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut f = Vec::with_capacity(128);
    frame_start(&mut f, HAPROXY_HELLO, 0, 0);
    put_kv_str(&mut f, b"supported-versions", b"2.0");
    put_kv_u32(&mut f, b"max-frame-size", max_frame);
    put_kv_str(&mut f, b"capabilities", caps);
    more(&mut f);
    frame_end(&mut f);
    f
}

/// The HAPROXY-HELLO of `option spop-check`: a health check, after which the agent closes.
pub fn health_hello() -> Vec<u8> {
    hello_frame(16380, b"", |f| {
        put_str(f, b"healthcheck");
        put_typed(f, Some(&Val::Bool(true)), false);
    })
}

/// HAPROXY-DISCONNECT with `status` (0: the connection ends normally).
fn disconnect_frame(status: u64) -> Vec<u8> {
    let mut f = Vec::with_capacity(48);
    frame_start(&mut f, HAPROXY_DISCONNECT, 0, 0);
    put_kv_u32(&mut f, b"status-code", status.min(u32::MAX as u64) as u32);
    let m: &[u8] = match status {
        0 => b"normal",
        ERR_TIMEOUT => b"a timeout occurred",
        _ => b"invalid frame received",
    };
    put_kv_str(&mut f, b"message", m);
    frame_end(&mut f);
    f
}

/// How a round trip failed.
#[derive(Debug, Clone, Copy)]
enum Failure {
    /// The connection failed (closed, reset): another may do.
    Io,
    /// The agent sent an invalid frame.
    Spop(u64),
    /// The agent said AGENT-DISCONNECT, with this status.
    Disconnect(u64),
}

impl Failure {
    fn code(&self) -> u64 {
        match self {
            Failure::Io => ERR_IO,
            Failure::Spop(c) | Failure::Disconnect(c) => *c,
        }
    }
}

/// Reads one frame (without its length), at most `max` bytes, through `buf`.
async fn read_frame<R: tokio::io::AsyncRead + Unpin>(
    s: &mut R,
    buf: &mut Vec<u8>,
    max: u32,
) -> Result<Vec<u8>, Failure> {
    loop {
        if let Some(len) = buf.get(..4) {
            let n = u32::from_be_bytes(len.try_into().expect("4 bytes"));
            if n > max || n == 0 {
                return Err(Failure::Spop(3));
            }
            let total = 4 + n as usize;
            if buf.len() >= total {
                let f = buf[4..total].to_vec();
                buf.drain(..total);
                return Ok(f);
            }
            buf.reserve(total - buf.len());
        } else {
            buf.reserve(256);
        }
        match s.read_buf(buf).await {
            Ok(0) | Err(_) => return Err(Failure::Io),
            Ok(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_values_round_trip() {
        let vals = [
            Val::Bool(true),
            Val::Bool(false),
            Val::Int(-5),
            Val::Int(1 << 40),
            Val::Ip("10.1.2.3".parse().unwrap()),
            Val::Ip("::1".parse().unwrap()),
            Val::Str(b"hello".to_vec()),
        ];
        let mut b = Vec::new();
        for v in &vals {
            put_typed(&mut b, Some(v), false);
        }
        put_typed(&mut b, None, false);
        let mut r = b.as_slice();
        for v in &vals {
            assert_eq!(get_typed(&mut r), Some(Some(v.clone())));
        }
        assert_eq!(get_typed(&mut r), Some(None));
        assert!(r.is_empty());
        // Booleans carry their value in the flags nibble.
        let mut t = Vec::new();
        put_typed(&mut t, Some(&Val::Bool(true)), false);
        assert_eq!(t, [0x11]);
    }

    proptest::proptest! {
        /// Whatever an agent sends, decoding never panics, and what it decodes is within
        /// the bytes it was given.
        #[test]
        fn agent_bytes_never_panic(b in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let _ = parse_frame(&b);
            let _ = kv_list(&b);
            let mut r = b.as_slice();
            while !r.is_empty() && get_typed(&mut r).is_some() {}
            let e = test_engine();
            let vars = Vars::default();
            e.apply(&b, &vars);
        }

        /// Typed values survive an encode and a decode.
        #[test]
        fn typed_round_trip(n in proptest::num::i64::ANY, s in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            let mut b = Vec::new();
            put_typed(&mut b, Some(&Val::Int(n)), false);
            put_typed(&mut b, Some(&Val::Str(s.clone())), true);
            let mut r = b.as_slice();
            proptest::prop_assert_eq!(get_typed(&mut r), Some(Some(Val::Int(n))));
            proptest::prop_assert_eq!(get_typed(&mut r), Some(Some(Val::Str(s))));
            proptest::prop_assert!(r.is_empty());
        }
    }

    fn test_engine() -> Engine {
        Engine {
            id: "e".into(),
            agent: Agent {
                var_prefix: "p".into(),
                ..Agent::new("a", 16380)
            },
            messages: Vec::new(),
            groups: Vec::new(),
            backend_name: "b".into(),
            backend: 0,
            at: (String::new(), 0),
            uid: 0,
            engine_id: "x".into(),
        }
    }

    #[test]
    fn ack_actions_set_prefixed_variables() {
        let e = test_engine();
        let vars = Vars::default();
        let mut ack = vec![ACTION_SET_VAR, 3, 2];
        put_str(&mut ack, b"score");
        put_typed(&mut ack, Some(&Val::Int(7)), false);
        // A process variable that does not exist is not created without force-set-var.
        ack.extend([ACTION_SET_VAR, 3, 0]);
        put_str(&mut ack, b"nope");
        put_typed(&mut ack, Some(&Val::Int(1)), false);
        ack.extend([ACTION_SET_VAR, 3, 1]);
        put_str(&mut ack, b"gone");
        put_typed(&mut ack, Some(&Val::Bool(true)), false);
        ack.extend([ACTION_UNSET_VAR, 2, 1]);
        put_str(&mut ack, b"gone");
        // One the configuration names is set.
        ack.extend([ACTION_SET_VAR, 3, 0]);
        put_str(&mut ack, b"named");
        put_typed(&mut ack, Some(&Val::Int(2)), false);
        let named = VarName::parse("proc.p.named").unwrap();
        e.apply(&ack, &vars);
        let get = |s: &str| vars.get(&VarName::parse(s).unwrap());
        assert_eq!(get("txn.p.score"), Some(Val::Int(7)));
        assert!(!crate::vars::proc_exists("p.nope"));
        assert_eq!(vars.get(&named), Some(Val::Int(2)));
        assert_eq!(get("sess.p.gone"), None);
    }

    #[test]
    fn frames_have_their_length_and_ids() {
        let mut f = Vec::new();
        frame_start(&mut f, NOTIFY, 300, 2);
        put_str(&mut f, b"m");
        frame_end(&mut f);
        assert_eq!(
            u32::from_be_bytes(f[..4].try_into().unwrap()) as usize,
            f.len() - 4
        );
        let (kind, flags, sid, fid, payload) = parse_frame(&f[4..]).unwrap();
        assert_eq!((kind, flags, sid, fid), (NOTIFY, FLAG_FIN, 300, 2));
        assert_eq!(payload, [1, b'm']);
        assert_eq!(&f[5..9], &FLAG_FIN.to_be_bytes());
    }
}
