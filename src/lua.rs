//! Lua scripts (`lua-load`, `lua-load-per-thread`, `lua-prepend-path`, `tune.lua.*`): what
//! HAProxy's Lua API offers to actions (`http-request|http-response|tcp-request content
//! lua.NAME`), sample fetches and converters (`lua.NAME`) and HTTP services (`use-service
//! lua.NAME`).
//!
//! The scripts run once when the configuration is read (to learn what they register, and to
//! report their errors at `file:line`), then once more in a Lua state of each worker thread,
//! where the registered functions run: sluice's threads share nothing, so `lua-load` behaves
//! as `lua-load-per-thread` (globals are per thread). Functions run to completion without
//! yielding: what would make them wait (`core.sleep`, `core.tcp`, `core.httpclient`,
//! `register_task`) is refused with an error naming it. A function running longer than
//! `tune.lua.session-timeout` (`service-timeout` for services) is stopped with an error.
//!
//! This module owns the states and the Lua side of the API; it must not know the stream:
//! actions return their effects ([`Effects`]), which the stream applies.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mlua::{Function, Lua, MultiValue, Table, Value, Variadic};

use crate::config::acl::{HttpView, SampleFetch};
use crate::config::converter::{Conv, Val};
use crate::config::{HeaderAction, LfValue, NameMatch, Re, Reply};

// ---------------------------------------------------------------------------------------------
// Types.

/// A script of `lua-load`: its text is read once, when the configuration is.
#[derive(Debug, Clone)]
struct Script {
    file: String,
    source: Vec<u8>,
    args: Vec<String>,
}

/// `tune.lua.*`.
#[derive(Debug, Clone, Copy)]
pub struct Tune {
    /// `tune.lua.maxmem` (bytes; 0: no limit).
    pub maxmem: usize,
    pub session_timeout: Duration,
    pub service_timeout: Duration,
}

impl Default for Tune {
    fn default() -> Tune {
        // HAProxy's defaults: 4 s for actions, fetches and converters, 4 s for services.
        Tune {
            maxmem: 0,
            session_timeout: Duration::from_secs(4),
            service_timeout: Duration::from_secs(4),
        }
    }
}

/// Which rules an action was registered for (`core.register_action(name, {KINDS}, fn)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    HttpReq,
    HttpRes,
    TcpReq,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::HttpReq => "http-req",
            Kind::HttpRes => "http-res",
            Kind::TcpReq => "tcp-req",
        }
    }
}

/// An action rule's Lua function and the arguments written after its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LuaAction {
    pub name: Box<str>,
    pub args: Box<[String]>,
    /// `KIND NAME`: a script may register one name for several kinds with different
    /// functions (haproxy-lua-cors registers `cors` for `http-req` and `http-res`).
    key: Box<str>,
}

/// A transaction's private Lua value (`txn:set_priv`), kept from one action to the next.
#[derive(Debug, Default)]
pub struct Priv(Option<mlua::RegistryKey>);

/// What the scripts registered, as the configuration sees it.
#[derive(Debug, Clone, Default)]
struct Names {
    /// Name, kind, number of arguments.
    actions: Vec<(String, String, usize)>,
    fetches: Vec<String>,
    converters: Vec<String>,
    /// Name, `http` (else `tcp`).
    services: Vec<(String, bool)>,
}

/// A change a Lua function asked for, which the stream carries out after it returned.
#[derive(Debug)]
pub enum Edit {
    /// On the request (`res: false`) or the response.
    Header { res: bool, action: HeaderAction },
    /// `txn.http:req_set_path|query|uri(v)`.
    Target(crate::config::UriPart, String),
    /// `txn.http:res_set_status(code[, reason])` (the reason is not kept: the status's usual
    /// phrase goes out).
    Status(u16),
}

/// How a Lua action ended the transaction.
#[derive(Debug)]
pub enum End {
    /// `txn:done(reply)`: this answer.
    Reply(Reply),
    /// `txn:done()`: the connection is closed without an answer.
    Close,
    /// `return act.DENY`: HAProxy's 403 (502 on a response).
    Deny,
    /// `return act.ERROR`: HAProxy's 500.
    Error,
    /// `return act.ABORT`: HAProxy 2.6 answers a request with its 503.
    Abort,
}

/// The effects of a Lua action.
#[derive(Debug, Default)]
pub struct Effects {
    pub edits: Vec<Edit>,
    pub end: Option<End>,
    /// `return act.STOP` or `act.DONE`: no more rules of this section.
    pub stop: bool,
}

/// The request a service answers.
pub struct ServiceRequest<'a> {
    pub method: &'a [u8],
    pub uri: &'a [u8],
    pub version: &'a str,
    pub body: &'a [u8],
}

/// A worker thread's Lua state and the functions its scripts registered.
struct State {
    lua: Lua,
    actions: HashMap<String, Function>,
    fetches: HashMap<String, Function>,
    converters: HashMap<String, Function>,
    services: HashMap<String, Function>,
    /// The prelude's constructors of `txn` and `applet` objects.
    make_txn: Function,
    make_applet: Function,
    /// `tune.lua.*`, read once (not locked per call).
    tune: Tune,
}

static SCRIPTS: Mutex<Vec<Script>> = Mutex::new(Vec::new());
static PREPEND: Mutex<Vec<(String, bool)>> = Mutex::new(Vec::new());
static TUNE: Mutex<Option<Tune>> = Mutex::new(None);
static NAMES: Mutex<Option<Names>> = Mutex::new(None);
/// The map and ACL files of the configuration (`core.set_map` and the like edit them).
static PATS: Mutex<Vec<std::sync::Arc<crate::map::PatRef>>> = Mutex::new(Vec::new());

thread_local! {
    /// The state the configuration's scripts run in while it is read.
    static PARSE: RefCell<Option<Lua>> = const { RefCell::new(None) };
    /// This worker thread's state (made at its first use).
    static STATE: RefCell<Option<Rc<State>>> = const { RefCell::new(None) };
    /// When the running function must have returned.
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Fetches and converters the scripts asked for by name, parsed once.
    static FETCHES: RefCell<HashMap<String, Option<Rc<SampleFetch>>>> = RefCell::new(HashMap::new());
    static CONVS: RefCell<HashMap<String, Option<Rc<Conv>>>> = RefCell::new(HashMap::new());
}

/// Marks `txn:done()`: the function ends there (an error that is not one).
const DONE: &str = "\u{1}sluice-txn-done";

// ---------------------------------------------------------------------------------------------
// The configuration.

/// Forgets the scripts of a configuration read before (a new one is read).
pub fn reset() {
    SCRIPTS.lock().unwrap_or_else(|e| e.into_inner()).clear();
    PREPEND.lock().unwrap_or_else(|e| e.into_inner()).clear();
    *TUNE.lock().unwrap_or_else(|e| e.into_inner()) = None;
    *NAMES.lock().unwrap_or_else(|e| e.into_inner()) = None;
    PARSE.with(|p| *p.borrow_mut() = None);
}

/// The configuration's map and ACL files, which `core.set_map` and the like edit.
pub fn set_pat_refs(refs: &[std::sync::Arc<crate::map::PatRef>]) {
    *PATS.lock().unwrap_or_else(|e| e.into_inner()) = refs.to_vec();
}

fn tune() -> Tune {
    TUNE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .unwrap_or_default()
}

/// `tune.lua.maxmem`, `tune.lua.session-timeout`, `tune.lua.service-timeout`.
pub fn set_tune(f: impl FnOnce(&mut Tune)) {
    let mut t = TUNE.lock().unwrap_or_else(|e| e.into_inner());
    let mut v = t.unwrap_or_default();
    f(&mut v);
    *t = Some(v);
}

/// `lua-prepend-path PATH [path|cpath]`.
pub fn prepend_path(path: &str, cpath: bool) {
    PREPEND
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((path.to_string(), cpath));
    PARSE.with(|p| {
        if let Some(lua) = &*p.borrow() {
            let _ = apply_prepend(lua, path, cpath);
        }
    });
}

fn apply_prepend(lua: &Lua, path: &str, cpath: bool) -> mlua::Result<()> {
    let package: Table = lua.globals().get("package")?;
    let key = if cpath { "cpath" } else { "path" };
    let cur: String = package.get(key)?;
    package.set(key, format!("{path};{cur}"))
}

/// `lua-load FILE [ARGS...]` (and `lua-load-per-thread`): runs the script, as HAProxy does
/// when it reads the line, so that later lines may name what it registers.
pub fn load(file: &str, args: &[String]) -> Result<(), String> {
    let source = std::fs::read(file).map_err(|e| format!("cannot read Lua file '{file}': {e}"))?;
    let script = Script {
        file: file.to_string(),
        source,
        args: args.to_vec(),
    };
    PARSE.with(|p| {
        let mut p = p.borrow_mut();
        if p.is_none() {
            let lua = new_lua().map_err(|e| format!("cannot start Lua: {e}"))?;
            for (path, cpath) in PREPEND.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                let _ = apply_prepend(&lua, path, *cpath);
            }
            *p = Some(lua);
        }
        let lua = p.as_ref().expect("made above");
        run_script(lua, &script)
            .map_err(|e| format!("failed to load Lua file '{file}': {}", one_line(&e)))?;
        let names = names_of(lua).map_err(|e| format!("in Lua file '{file}': {e}"))?;
        *NAMES.lock().unwrap_or_else(|e| e.into_inner()) = Some(names);
        Ok::<(), String>(())
    })?;
    SCRIPTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(script);
    // A script may read any fetch (`dst`, `dst_port` need the address asked for).
    crate::config::acl::LOCAL_ADDR_USED.store(true, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

fn with_names<R>(f: impl FnOnce(&Names) -> R) -> R {
    let n = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    f(n.as_ref().unwrap_or(&Names::default()))
}

/// Checks an action rule `lua.NAME ARGS...` of rules of kind `kind`.
pub fn action(name: &str, args: &[String], kind: Kind) -> Result<LuaAction, String> {
    with_names(|n| {
        let kinds: Vec<&str> = n
            .actions
            .iter()
            .filter(|(a, _, _)| a == name)
            .map(|(_, k, _)| k.as_str())
            .collect();
        if kinds.is_empty() {
            return Err(format!(
                "unknown action 'lua.{name}' (no Lua script registers an action '{name}' \
                 with core.register_action)"
            ));
        }
        let Some((_, _, nargs)) = n
            .actions
            .iter()
            .find(|(a, k, _)| a == name && k == kind.name())
        else {
            let mut kinds = kinds;
            kinds.sort_unstable();
            return Err(format!(
                "Lua action '{name}' is not registered for '{}' rules (it is for: {})",
                kind.name(),
                kinds.join(", ")
            ));
        };
        if args.len() < *nargs {
            return Err(format!(
                "Lua action '{name}' expects {nargs} argument(s), got {}",
                args.len()
            ));
        }
        if args.len() > *nargs {
            return Err(format!(
                "Lua action '{name}': unexpected argument '{}' (it takes {nargs}; expected \
                 'if' or 'unless')",
                args[*nargs]
            ));
        }
        Ok(LuaAction {
            name: name.into(),
            args: args.into(),
            key: format!("{} {name}", kind.name()).into(),
        })
    })
}

/// Whether a script registered fetch `name`.
pub fn has_fetch(name: &str) -> bool {
    with_names(|n| n.fetches.iter().any(|f| f == name))
}

/// Whether a script registered converter `name`.
pub fn has_converter(name: &str) -> bool {
    with_names(|n| n.converters.iter().any(|f| f == name))
}

/// Checks `use-service lua.NAME` (an HTTP service: TCP ones are not supported).
pub fn service(name: &str) -> Result<(), String> {
    with_names(|n| match n.services.iter().find(|(s, _)| s == name) {
        Some((_, true)) => Ok(()),
        Some((_, false)) => Err(format!(
            "Lua service '{name}' is a 'tcp' service, which sluice does not run (HTTP \
             services only)"
        )),
        None => Err(format!(
            "unknown service 'lua.{name}' (no Lua script registers a service '{name}' with \
             core.register_service)"
        )),
    })
}

// ---------------------------------------------------------------------------------------------
// States.

/// A fresh state with the API's tables (`core`, `act`) and the prelude.
fn new_lua() -> mlua::Result<Lua> {
    let lua = Lua::new();
    let t = tune();
    if t.maxmem > 0 {
        lua.set_memory_limit(t.maxmem)?;
    }
    // Stops a function past its deadline (checked every 10,000 instructions, HAProxy's
    // `tune.lua.forced-yield` default).
    lua.set_hook(
        mlua::HookTriggers::new().every_nth_instruction(10_000),
        |_, _| match DEADLINE.with(Cell::get) {
            Some(d) if Instant::now() > d => Err(mlua::Error::runtime("execution timeout")),
            _ => Ok(mlua::VmState::Continue),
        },
    );
    let native = lua.create_table()?;
    native.set(
        "log",
        lua.create_function(|_, (level, msg): (i64, mlua::String)| {
            log(level, &msg.to_string_lossy());
            Ok(())
        })?,
    )?;
    native.set(
        "now",
        lua.create_function(|lua, ()| {
            let d = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let t = lua.create_table()?;
            t.set("sec", d.as_secs())?;
            t.set("usec", d.subsec_micros())?;
            Ok(t)
        })?,
    )?;
    native.set(
        "proc_var",
        lua.create_function(|lua, name: String| {
            let Ok(v) = crate::vars::VarName::parse(&name) else {
                return Ok(Value::Nil);
            };
            val_to_lua(lua, crate::vars::Vars::default().get(&v), false)
        })?,
    )?;
    native.set(
        "pat",
        lua.create_function(
            |_, (op, file, key, value): (String, String, String, Option<String>)| {
                let refs = PATS.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if let Some(r) = refs
                    .iter()
                    .find(|r| r.path == file && r.map == (op == "set_map" || op == "del_map"))
                {
                    match op.as_str() {
                        "set_map" => r.rule_set(&key, value.as_deref().unwrap_or("")),
                        "add_acl" => r.rule_add(&key),
                        _ => r.rule_del(&key),
                    }
                }
                Ok(())
            },
        )?,
    )?;
    lua.load(PRELUDE).set_name("=sluice").call::<()>(native)?;
    Ok(lua)
}

fn run_script(lua: &Lua, s: &Script) -> mlua::Result<()> {
    let f = lua
        .load(&s.source[..])
        .set_name(format!("@{}", s.file))
        .into_function()?;
    let args: Vec<Value> = s
        .args
        .iter()
        .map(|a| lua.create_string(a).map(Value::String))
        .collect::<mlua::Result<_>>()?;
    f.call::<()>(MultiValue::from_iter(args))
}

/// What the scripts of `lua` registered.
fn names_of(lua: &Lua) -> mlua::Result<Names> {
    let reg: Table = lua.globals().get("__sluice_reg")?;
    let mut n = Names::default();
    for pair in reg.get::<Table>("actions")?.pairs::<String, Table>() {
        let (_, a) = pair?;
        n.actions.push((
            a.get("name")?,
            a.get("kind")?,
            a.get::<Option<usize>>("nargs")?.unwrap_or(0),
        ));
    }
    n.actions.sort();
    for pair in reg.get::<Table>("fetches")?.pairs::<String, Value>() {
        n.fetches.push(pair?.0);
    }
    for pair in reg.get::<Table>("converters")?.pairs::<String, Value>() {
        n.converters.push(pair?.0);
    }
    for pair in reg.get::<Table>("services")?.pairs::<String, Table>() {
        let (name, s) = pair?;
        n.services.push((name, s.get::<String>("mode")? == "http"));
    }
    Ok(n)
}

/// This thread's state, made (the scripts run, then their `register_init` functions) at its
/// first use; `None` when the configuration loads no script, or when they fail here.
fn state() -> Option<Rc<State>> {
    if let Some(s) = STATE.with(|s| s.borrow().clone()) {
        return Some(s);
    }
    let scripts = SCRIPTS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if scripts.is_empty() {
        return None;
    }
    let made = (|| -> mlua::Result<State> {
        let lua = new_lua()?;
        for (path, cpath) in PREPEND.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            apply_prepend(&lua, path, *cpath)?;
        }
        for s in &scripts {
            run_script(&lua, s)?;
        }
        let reg: Table = lua.globals().get("__sluice_reg")?;
        let fns = |what: &str, field: Option<&str>| -> mlua::Result<HashMap<String, Function>> {
            let mut m = HashMap::new();
            for pair in reg.get::<Table>(what)?.pairs::<String, Value>() {
                let (name, v) = pair?;
                let f = match (field, v) {
                    (Some(k), Value::Table(t)) => t.get::<Function>(k)?,
                    (None, Value::Function(f)) => f,
                    _ => continue,
                };
                m.insert(name, f);
            }
            Ok(m)
        };
        let st = State {
            actions: fns("actions", Some("fn"))?,
            fetches: fns("fetches", None)?,
            converters: fns("converters", None)?,
            services: fns("services", Some("fn"))?,
            make_txn: lua.globals().get("__sluice_txn")?,
            make_applet: lua.globals().get("__sluice_applet")?,
            lua,
            tune: tune(),
        };
        for f in reg.get::<Table>("inits")?.sequence_values::<Function>() {
            if let Err(e) = timed(st.tune.session_timeout, || f?.call::<()>(())) {
                log(3, &format!("Lua init: runtime error: {}", one_line(&e)));
            }
        }
        Ok(st)
    })();
    match made {
        Ok(st) => {
            let st = Rc::new(st);
            STATE.with(|s| *s.borrow_mut() = Some(st.clone()));
            Some(st)
        }
        Err(e) => {
            log(
                3,
                &format!("Lua: cannot load the scripts on this thread: {e}"),
            );
            None
        }
    }
}

/// Runs `f` with a deadline `limit` from now.
fn timed<R>(limit: Duration, f: impl FnOnce() -> mlua::Result<R>) -> mlua::Result<R> {
    let prev = DEADLINE.with(|d| d.replace(Some(Instant::now() + limit)));
    let r = f();
    DEADLINE.with(|d| d.set(prev));
    r
}

/// `core.log`, `txn:log`, `core.Info`...: HAProxy prints them on stderr (and to the proxy's
/// log servers, which sluice does not).
fn log(level: i64, msg: &str) {
    const NAMES: [&str; 8] = [
        "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
    ];
    let name = NAMES.get(level as usize).copied().unwrap_or("info");
    crate::say!("[{name}] (lua) : {msg}");
}

// ---------------------------------------------------------------------------------------------
// Values.

fn val_to_lua(lua: &Lua, v: Option<Val>, text: bool) -> mlua::Result<Value> {
    Ok(match v {
        None if text => Value::String(lua.create_string("")?),
        None => Value::Nil,
        Some(Val::Str(b)) => Value::String(lua.create_string(&b)?),
        Some(Val::Int(i)) if text => Value::String(lua.create_string(i.to_string())?),
        Some(Val::Int(i)) => Value::Integer(i),
        Some(Val::Ip(ip)) => Value::String(lua.create_string(ip.to_string())?),
        Some(Val::Bool(b)) if text => {
            Value::String(lua.create_string(if b { "1" } else { "0" })?)
        }
        Some(Val::Bool(b)) => Value::Boolean(b),
    })
}

fn lua_to_val(v: &Value) -> Option<Val> {
    match v {
        Value::String(s) => Some(Val::Str(s.as_bytes().to_vec())),
        Value::Integer(i) => Some(Val::Int(*i)),
        Value::Number(n) => Some(Val::Int(*n as i64)),
        Value::Boolean(b) => Some(Val::Bool(*b)),
        _ => None,
    }
}

/// The text of a Lua value (arguments of fetches and converters).
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.to_string_lossy(),
        Value::Integer(i) => i.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Boolean(b) => (if *b { "1" } else { "0" }).to_string(),
        _ => String::new(),
    }
}

/// The names a Lua method name may stand for: HAProxy's `req.hdr` is `req_hdr` in Lua.
fn candidates(name: &str) -> Vec<String> {
    let mut c = vec![name.to_string()];
    let under: Vec<usize> = name.match_indices('_').map(|(i, _)| i).collect();
    for &i in &under {
        let mut s = name.to_string();
        s.replace_range(i..i + 1, ".");
        c.push(s);
    }
    if under.len() > 1 {
        c.push(name.replace('_', "."));
    }
    c
}

/// Fetch `name` with `args`, parsed once per thread.
fn fetch_named(name: &str, args: &[String]) -> Option<Rc<SampleFetch>> {
    let key = format!("{name}({})", args.join(","));
    FETCHES.with(|m| {
        if let Some(f) = m.borrow().get(&key) {
            return f.clone();
        }
        let found = candidates(name).into_iter().find_map(|n| {
            let text = if args.is_empty() {
                n
            } else {
                format!("{n}({})", args.join(","))
            };
            // Any fetch: the client's first data (`tcp-request content`), the response's.
            SampleFetch::parse_with_payload(&text)
                .or_else(|_| SampleFetch::on_response(|| SampleFetch::parse(&text)))
                .ok()
                .map(Rc::new)
        });
        m.borrow_mut().insert(key, found.clone());
        found
    })
}

fn conv_named(name: &str, args: &[String]) -> Option<Rc<Conv>> {
    let key = format!("{name}({})", args.join(","));
    CONVS.with(|m| {
        if let Some(c) = m.borrow().get(&key) {
            return c.clone();
        }
        let a = (!args.is_empty()).then_some(args);
        let found = candidates(name).into_iter().find_map(|n| {
            Conv::parse(&n, a, crate::config::acl::SmpType::Str)
                .ok()
                .map(|(c, _)| Rc::new(c))
        });
        m.borrow_mut().insert(key, found.clone());
        found
    })
}

// ---------------------------------------------------------------------------------------------
// Running.

/// The `txn` (or `applet`) primitives of one call, as Lua functions valid during it.
fn primitives<'s>(
    lua: &Lua,
    scope: &'s mlua::Scope<'s, '_>,
    view: &'s dyn HttpView,
    res_ctx: bool,
    eff: &'s RefCell<Effects>,
) -> mlua::Result<Table> {
    let c = lua.create_table()?;
    c.set(
        "fetch",
        scope.create_function(
            move |lua, (name, text, args): (String, bool, Variadic<Value>)| {
                let args: Vec<String> = args.iter().map(text_of).collect();
                let v = fetch_named(&name, &args).and_then(|f| f.value(view));
                val_to_lua(lua, v, text)
            },
        )?,
    )?;
    c.set(
        "conv",
        scope.create_function(
            move |lua, (name, text, input, args): (String, bool, Value, Variadic<Value>)| {
                let args: Vec<String> = args.iter().map(text_of).collect();
                let v = conv_named(&name, &args).and_then(|c| {
                    let input = lua_to_val(&input)?;
                    crate::config::converter::run(
                        std::slice::from_ref(&*c),
                        input.as_sample(),
                        view.sess().vars,
                    )
                });
                val_to_lua(lua, v, text)
            },
        )?,
    )?;
    c.set(
        "get_var",
        scope.create_function(move |lua, name: String| {
            let Ok(v) = crate::vars::VarName::parse(&name) else {
                return Ok(Value::Nil);
            };
            let val = match view.sess().vars {
                Some(vars) => vars.get(&v),
                None => crate::vars::Vars::default().get(&v),
            };
            val_to_lua(lua, val, false)
        })?,
    )?;
    c.set(
        "set_var",
        scope.create_function(
            move |_, (name, value, ifexist): (String, Value, Option<bool>)| {
                let v = crate::vars::VarName::parse(&name).map_err(mlua::Error::runtime)?;
                let Some(val) = lua_to_val(&value) else {
                    return Ok(());
                };
                let conds = if ifexist == Some(true) {
                    vec![crate::vars::SetCond::parse("ifexists").map_err(mlua::Error::runtime)?]
                } else {
                    Vec::new()
                };
                match view.sess().vars {
                    Some(vars) => vars.set(&v, val, &conds),
                    None => crate::vars::Vars::default().set(&v, val, &conds),
                }
                Ok(())
            },
        )?,
    )?;
    c.set(
        "unset_var",
        scope.create_function(move |_, name: String| {
            if let (Ok(v), Some(vars)) = (crate::vars::VarName::parse(&name), view.sess().vars) {
                vars.unset(&v);
            }
            Ok(())
        })?,
    )?;
    c.set(
        "headers",
        scope.create_function(move |lua, res: bool| {
            let t = lua.create_table()?;
            // The request's fields are gone when the response is processed.
            if res == res_ctx {
                let mut err = None;
                view.for_each_field(&mut |n, v| {
                    // As HAProxy's HTX has them: no `Connection` field.
                    if n.eq_ignore_ascii_case(b"connection") {
                        return;
                    }
                    let r = (|| -> mlua::Result<()> {
                        let name = String::from_utf8_lossy(n).to_ascii_lowercase();
                        let list: Table = match t.get::<Option<Table>>(name.as_str())? {
                            Some(l) => l,
                            None => {
                                let l = lua.create_table()?;
                                t.set(name.as_str(), l.clone())?;
                                l
                            }
                        };
                        // HAProxy numbers a field's values from 0.
                        let i = list.raw_len() as i64 + i64::from(list.contains_key(0)?);
                        list.raw_set(i, lua.create_string(v)?)
                    })();
                    if let Err(e) = r {
                        err.get_or_insert(e);
                    }
                });
                if let Some(e) = err {
                    return Err(e);
                }
            }
            Ok(t)
        })?,
    )?;
    c.set(
        "hdr",
        scope.create_function(
            move |_,
                  (res, op, name, value, re): (
                bool,
                String,
                String,
                Option<mlua::String>,
                Option<String>,
            )| {
                let value = value.map(|v| v.to_string_lossy()).unwrap_or_default();
                let action = match op.as_str() {
                    "add" => HeaderAction::AddHeader {
                        name,
                        value: LfValue::Lit(value),
                    },
                    "set" => HeaderAction::SetHeader {
                        name,
                        value: LfValue::Lit(value),
                    },
                    "del" => HeaderAction::DelHeader {
                        name,
                        how: NameMatch::Str,
                    },
                    _ => {
                        let re = regex::bytes::Regex::new(re.as_deref().unwrap_or(""))
                            .map_err(|e| mlua::Error::runtime(format!("bad regex: {e}")))?;
                        HeaderAction::Replace {
                            name,
                            regex: Re(re),
                            value: LfValue::Lit(value),
                            each_value: op == "repv",
                        }
                    }
                };
                eff.borrow_mut().edits.push(Edit::Header { res, action });
                Ok(())
            },
        )?,
    )?;
    c.set(
        "target",
        scope.create_function(move |_, (part, value): (String, String)| {
            use crate::config::UriPart;
            let e = match part.as_str() {
                "method" => {
                    return Err(mlua::Error::runtime(
                        "txn.http:req_set_method is not supported by sluice",
                    ));
                }
                "path" => Edit::Target(UriPart::Path, value),
                "query" => Edit::Target(UriPart::Query, value),
                _ => Edit::Target(UriPart::Uri, value),
            };
            eff.borrow_mut().edits.push(e);
            Ok(())
        })?,
    )?;
    c.set(
        "status",
        scope.create_function(move |_, code: u16| {
            if !(100..=999).contains(&code) {
                return Err(mlua::Error::runtime(format!("invalid status code {code}")));
            }
            eff.borrow_mut().edits.push(Edit::Status(code));
            Ok(())
        })?,
    )?;
    c.set(
        "done",
        scope.create_function(move |_, reply: Option<Table>| {
            let end = match reply {
                None => End::Close,
                Some(r) => End::Reply(reply_of(&r)?),
            };
            eff.borrow_mut().end = Some(end);
            Err::<(), _>(mlua::Error::runtime(DONE))
        })?,
    )?;
    Ok(c)
}

/// A reply object of `txn:reply()` as sluice's [`Reply`].
fn reply_of(r: &Table) -> mlua::Result<Reply> {
    let body: Option<mlua::String> = r.get("body")?;
    let mut headers = Vec::new();
    if let Some(h) = r.get::<Option<Table>>("headers")? {
        for pair in h.pairs::<String, Value>() {
            let (name, v) = pair?;
            match v {
                Value::Table(t) => {
                    for p in t.pairs::<Value, Value>() {
                        headers.push((name.clone(), text_of(&p?.1)));
                    }
                }
                other => headers.push((name, text_of(&other))),
            }
        }
    }
    Ok(reply_from(
        r.get::<Option<u16>>("status")?.unwrap_or(200),
        headers,
        body.map(|b| b.as_bytes().to_vec()).unwrap_or_default(),
    ))
}

/// An answer a script made, as a reply: `Content-Length` is sluice's (the script's framing
/// fields are dropped), the first `Content-Type` is the reply's, the reason phrase is the
/// status's usual one.
fn reply_from(status: u16, fields: Vec<(String, String)>, body: Vec<u8>) -> Reply {
    let mut content_type = None;
    let mut headers = Vec::new();
    for (n, v) in fields {
        match n.to_ascii_lowercase().as_str() {
            "content-length" | "transfer-encoding" => {}
            "content-type" => {
                content_type.get_or_insert(v);
            }
            _ => headers.push((n, v)),
        }
    }
    Reply {
        status,
        content_type,
        body,
        headers,
        formats: None,
        raw: None,
    }
}

/// An error as one line: its message without mlua's wrapping and Lua's traceback.
fn one_line(e: &mlua::Error) -> String {
    let t = e.to_string();
    let first = t.lines().next().unwrap_or("");
    let mut m = first;
    while let Some(r) = m.strip_prefix("runtime error: ") {
        m = r;
    }
    m.to_string()
}

/// Whether `e` is `txn:done()` rather than an error.
fn is_done(e: &mlua::Error) -> bool {
    e.to_string().contains(DONE)
}

/// Runs action `a` on the transaction `view` shows (`res`: an `http-response` rule), with
/// the transaction's private value, if it keeps one.
pub fn run_action(
    a: &LuaAction,
    view: &dyn HttpView,
    res: bool,
    private: Option<&RefCell<Priv>>,
) -> Effects {
    let eff = RefCell::new(Effects::default());
    let Some(st) = state() else {
        return Effects {
            end: Some(End::Error),
            ..Effects::default()
        };
    };
    // Private values of ended transactions leave the registry.
    st.lua.expire_registry_values();
    let Some(f) = st.actions.get(&*a.key) else {
        return Effects {
            end: Some(End::Error),
            ..Effects::default()
        };
    };
    let r = st.lua.scope(|scope| {
        let c = primitives(&st.lua, scope, view, res, &eff)?;
        let txn: Table = st.make_txn.call(c)?;
        if let Some(Priv(Some(k))) = private.map(|p| p.borrow()).as_deref() {
            txn.raw_set("__priv", st.lua.registry_value::<Value>(k)?)?;
        }
        let r = call_args(&st, f, Value::Table(txn.clone()), &a.args);
        if let Some(p) = private {
            let v: Value = txn.raw_get("__priv")?;
            let key = match v {
                Value::Nil => None,
                v => Some(st.lua.create_registry_value(v)?),
            };
            *p.borrow_mut() = Priv(key);
        }
        r
    });
    let mut eff = eff.into_inner();
    match r {
        Ok(Value::Integer(code)) => match code {
            // act.STOP, act.DONE
            1 | 4 => eff.stop = true,
            3 => eff.end = Some(End::Error),
            5 => eff.end = Some(End::Deny),
            6 => eff.end = Some(End::Abort),
            _ => {}
        },
        Ok(_) => {}
        Err(e) if is_done(&e) => {}
        // As in HAProxy: logged, and the transaction goes on (with the edits made before).
        Err(e) => {
            log(
                3,
                &format!("Lua function '{}': runtime error: {}", a.name, one_line(&e)),
            );
        }
    }
    eff
}

/// Fetch `lua.NAME(args)`: `None` when it returns nothing or fails.
pub fn run_fetch(name: &str, args: &[String], view: &dyn HttpView) -> Option<Val> {
    let st = state()?;
    let f = st.fetches.get(name)?;
    let eff = RefCell::new(Effects::default());
    let r = st.lua.scope(|scope| {
        let c = primitives(&st.lua, scope, view, view.status().is_some(), &eff)?;
        let txn: Table = st.make_txn.call(c)?;
        call_args(&st, f, Value::Table(txn), args)
    });
    sample_of(r, "sample-fetch", name)
}

/// Calls `f(first, args...)` within `tune.lua.session-timeout`.
fn call_args(st: &State, f: &Function, first: Value, args: &[String]) -> mlua::Result<Value> {
    let mut a = vec![first];
    for s in args {
        a.push(Value::String(st.lua.create_string(s)?));
    }
    timed(st.tune.session_timeout, || {
        f.call::<Value>(MultiValue::from_iter(a))
    })
}

/// What a fetch or converter returned as a sample; none when it failed (logged).
fn sample_of(r: mlua::Result<Value>, what: &str, name: &str) -> Option<Val> {
    match r {
        Ok(v) => lua_to_val(&v),
        Err(e) => {
            log(
                3,
                &format!("Lua {what} '{name}': runtime error: {}", one_line(&e)),
            );
            None
        }
    }
}

/// Converter `lua.NAME(args)` on `input`.
pub fn run_converter(name: &str, args: &[String], input: &Val) -> Option<Val> {
    let st = state()?;
    let f = st.converters.get(name)?;
    let r = val_to_lua(&st.lua, Some(input.clone()), true).and_then(|v| call_args(&st, f, v, args));
    sample_of(r, "converter", name)
}

/// Runs HTTP service `name` on a request: its answer; `None` when it failed (the client
/// gets a 500).
pub fn run_service(name: &str, req: &ServiceRequest, view: &dyn HttpView) -> Option<Reply> {
    let st = state()?;
    let f = st.services.get(name)?;
    let eff = RefCell::new(Effects::default());
    let r = st.lua.scope(|scope| {
        let c = primitives(&st.lua, scope, view, false, &eff)?;
        let lua = &st.lua;
        let rq = lua.create_table()?;
        rq.set("method", lua.create_string(req.method)?)?;
        let (path, qs) = match memchr::memchr(b'?', req.uri) {
            Some(i) => (&req.uri[..i], &req.uri[i + 1..]),
            None => (req.uri, &b""[..]),
        };
        rq.set("path", lua.create_string(path)?)?;
        rq.set("qs", lua.create_string(qs)?)?;
        rq.set("version", req.version)?;
        rq.set("body", lua.create_string(req.body)?)?;
        let (applet, resp): (Table, Table) = st.make_applet.call((c, rq))?;
        timed(st.tune.service_timeout, || f.call::<()>(applet))?;
        let mut headers = Vec::new();
        for h in resp.get::<Table>("headers")?.sequence_values::<Table>() {
            let h = h?;
            headers.push((h.get::<String>(1)?, text_of(&h.get::<Value>(2)?)));
        }
        let body: Vec<u8> = {
            let parts: Table = resp.get("body")?;
            let mut b = Vec::new();
            for p in parts.sequence_values::<mlua::String>() {
                b.extend_from_slice(&p?.as_bytes());
            }
            b
        };
        Ok(reply_from(
            resp.get::<Option<u16>>("status")?.unwrap_or(200),
            headers,
            body,
        ))
    });
    match r {
        Ok(a) => Some(a),
        Err(e) if is_done(&e) => None,
        Err(e) => {
            log(
                3,
                &format!("Lua applet http '{name}': runtime error: {}", one_line(&e)),
            );
            None
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The Lua side of the API.

/// HAProxy's `core`, `act`, and the constructors of the objects functions get. `native`
/// (the first argument) holds the functions written in Rust that need no transaction.
const PRELUDE: &str = r#"
local native = ...
local reg = {actions = {}, fetches = {}, converters = {}, services = {}, inits = {}}
__sluice_reg = reg

core = {emerg = 0, alert = 1, crit = 2, err = 3, warning = 4, notice = 5, info = 6, debug = 7}
act = {CONTINUE = 0, STOP = 1, YIELD = 2, ERROR = 3, DONE = 4, DENY = 5, ABORT = 6, INVALID = 7}

local kinds = {["tcp-req"] = true, ["tcp-res"] = true, ["http-req"] = true, ["http-res"] = true}

local function need(cond, fname, what)
  if not cond then error(fname .. ": " .. what, 3) end
end

function core.register_action(name, list, fn, nargs)
  need(type(name) == "string" and name ~= "", "core.register_action", "the name must be a string")
  need(type(list) == "table", "core.register_action", "the second argument must be a table of action kinds")
  for _, k in ipairs(list) do
    need(kinds[k], "core.register_action", "unknown action kind '" .. tostring(k) .. "'")
  end
  need(type(fn) == "function", "core.register_action", "the third argument must be a function")
  need(nargs == nil or math.type(nargs) == "integer", "core.register_action", "the number of arguments must be an integer")
  for _, k in ipairs(list) do
    reg.actions[k .. " " .. name] = {fn = fn, name = name, kind = k, nargs = nargs or 0}
  end
end

function core.register_fetches(name, fn)
  need(type(name) == "string" and name ~= "", "core.register_fetches", "the name must be a string")
  need(type(fn) == "function", "core.register_fetches", "the second argument must be a function")
  reg.fetches[name] = fn
end

function core.register_converters(name, fn)
  need(type(name) == "string" and name ~= "", "core.register_converters", "the name must be a string")
  need(type(fn) == "function", "core.register_converters", "the second argument must be a function")
  reg.converters[name] = fn
end

function core.register_service(name, mode, fn)
  need(type(name) == "string" and name ~= "", "core.register_service", "the name must be a string")
  need(mode == "http" or mode == "tcp", "core.register_service", "the mode must be 'http' or 'tcp'")
  need(type(fn) == "function", "core.register_service", "the third argument must be a function")
  reg.services[name] = {fn = fn, mode = mode}
end

function core.register_init(fn)
  need(type(fn) == "function", "core.register_init", "the argument must be a function")
  reg.inits[#reg.inits + 1] = fn
end

local function refused(name, why)
  return function() error(name .. " is not supported by sluice (" .. why .. ")", 2) end
end
local waits = "sluice runs Lua functions to completion, without yielding"
core.register_task = refused("core.register_task", waits)
core.register_cli = refused("core.register_cli", "no Lua commands on the stats socket")
core.sleep = refused("core.sleep", waits)
core.msleep = refused("core.msleep", waits)
core.tcp = refused("core.tcp", waits)
core.httpclient = refused("core.httpclient", waits)
core.set_nice = function() end
core.yield = function() end

function core.log(level, msg) native.log(level, tostring(msg)) end
function core.Debug(msg) native.log(core.debug, tostring(msg)) end
function core.Info(msg) native.log(core.info, tostring(msg)) end
function core.Warning(msg) native.log(core.warning, tostring(msg)) end
function core.Alert(msg) native.log(core.alert, tostring(msg)) end
core.now = native.now
core.get_var = native.proc_var
core.thread = 0
function core.set_map(file, key, value) native.pat("set_map", file, key, value) end
function core.del_map(file, key) native.pat("del_map", file, key) end
function core.add_acl(file, key) native.pat("add_acl", file, key) end
function core.del_acl(file, key) native.pat("del_acl", file, key) end

function core.tokenize(str, seps, noblank)
  local out = {}
  local cur = {}
  for i = 1, #str do
    local ch = str:sub(i, i)
    if seps:find(ch, 1, true) then
      local w = table.concat(cur)
      if not noblank or w ~= "" then out[#out + 1] = w end
      cur = {}
    else
      cur[#cur + 1] = ch
    end
  end
  local w = table.concat(cur)
  if not noblank or w ~= "" then out[#out + 1] = w end
  return out
end

function core.concat()
  local parts = {}
  local c = {}
  function c:add(s) parts[#parts + 1] = tostring(s) end
  function c:dump() return table.concat(parts) end
  return c
end

local function fetcher(call, text)
  return setmetatable({}, {__index = function(t, name)
    local f = function(_, ...) return call(name, text, ...) end
    rawset(t, name, f)
    return f
  end})
end

local function converter(call, text)
  return setmetatable({}, {__index = function(t, name)
    local f = function(_, input, ...) return call(name, text, input, ...) end
    rawset(t, name, f)
    return f
  end})
end

local function common(o, c)
  o.sf = fetcher(c.fetch, true)
  o.f = fetcher(c.fetch, false)
  o.c = converter(c.conv, false)
  o.sc = converter(c.conv, true)
  function o:get_var(n) return c.get_var(n) end
  function o:set_var(n, v, ifexist) c.set_var(n, v, ifexist) end
  function o:unset_var(n) c.unset_var(n) end
  function o:get_priv() return rawget(self, "__priv") end
  function o:set_priv(v) rawset(self, "__priv", v) end
end

function __sluice_txn(c)
  local txn = {}
  common(txn, c)
  local http = {}
  for _, side in ipairs({"req", "res"}) do
    local res = side == "res"
    http[side .. "_get_headers"] = function(_) return c.headers(res) end
    http[side .. "_add_header"] = function(_, n, v) c.hdr(res, "add", n, tostring(v)) end
    http[side .. "_set_header"] = function(_, n, v) c.hdr(res, "set", n, tostring(v)) end
    http[side .. "_del_header"] = function(_, n) c.hdr(res, "del", n) end
    http[side .. "_rep_header"] = function(_, n, re, v) c.hdr(res, "rep", n, v, re) end
    http[side .. "_rep_value"] = function(_, n, re, v) c.hdr(res, "repv", n, v, re) end
  end
  function http:req_set_method(m) c.target("method", m) end
  function http:req_set_path(p) c.target("path", p) end
  function http:req_set_query(q) c.target("query", q) end
  function http:req_set_uri(u) c.target("uri", u) end
  function http:res_set_status(s, r) c.status(s, r) end
  txn.http = http
  function txn:log(level, msg) native.log(level, tostring(msg)) end
  function txn:Debug(msg) native.log(core.debug, tostring(msg)) end
  function txn:Info(msg) native.log(core.info, tostring(msg)) end
  function txn:Warning(msg) native.log(core.warning, tostring(msg)) end
  function txn:Alert(msg) native.log(core.alert, tostring(msg)) end
  function txn:set_loglevel(_) end
  function txn:done(reply) c.done(reply) end
  function txn:reply(t)
    t = t or {}
    local r = {status = t.status or 200, reason = t.reason, headers = {}, body = t.body or ""}
    for n, v in pairs(t.headers or {}) do
      if type(v) == "table" then r.headers[n] = v else r.headers[n] = {v} end
    end
    function r:set_status(s, reason) self.status = s; self.reason = reason end
    function r:add_header(n, v)
      local h = self.headers[n] or {}
      h[#h + 1] = tostring(v)
      self.headers[n] = h
    end
    function r:del_header(n) self.headers[n] = nil end
    function r:set_body(b) self.body = b end
    return r
  end
  return txn
end

function __sluice_applet(c, rq)
  local a = {method = rq.method, path = rq.path, qs = rq.qs, version = rq.version,
             length = #rq.body}
  common(a, c)
  a.headers = c.headers(false)
  local resp = {status = 200, headers = {}, body = {}}
  local pos = 1
  local body = rq.body
  function a:set_status(s, reason) resp.status = s; resp.reason = reason end
  function a:add_header(n, v) resp.headers[#resp.headers + 1] = {n, tostring(v)} end
  function a:start_response() end
  function a:send(s) resp.body[#resp.body + 1] = tostring(s) end
  function a:getline()
    local i = body:find("\n", pos, true)
    local line
    if i then line = body:sub(pos, i); pos = i + 1 else line = body:sub(pos); pos = #body + 1 end
    return line
  end
  function a:receive(n)
    local s
    if n == nil then s = body:sub(pos) else s = body:sub(pos, pos + n - 1) end
    pos = pos + #s
    return s
  end
  return a, resp
end
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lua_method_names_stand_for_dotted_fetch_names() {
        assert_eq!(candidates("src"), vec!["src"]);
        let c = candidates("req_hdr");
        assert!(c.contains(&"req.hdr".to_string()));
        let c = candidates("req_ssl_sni");
        assert!(c.contains(&"req.ssl_sni".to_string()));
        assert!(c.contains(&"req.ssl.sni".to_string()));
    }

    #[test]
    fn the_prelude_loads_and_registers() {
        let lua = new_lua().unwrap();
        lua.load(
            r#"core.register_action("a", {"http-req"}, function(txn) end, 1)
               core.register_fetches("f", function(txn) return 1 end)
               core.register_service("s", "http", function(applet) end)"#,
        )
        .exec()
        .unwrap();
        let n = names_of(&lua).unwrap();
        assert_eq!(n.actions, vec![("a".into(), "http-req".into(), 1)]);
        assert_eq!(n.fetches, vec!["f".to_string()]);
        assert_eq!(n.services, vec![("s".to_string(), true)]);
        let e = lua
            .load(r#"core.register_action("b", {"http-foo"}, function() end)"#)
            .exec()
            .unwrap_err();
        assert!(
            e.to_string().contains("unknown action kind 'http-foo'"),
            "{e}"
        );
        let e = lua.load("core.sleep(1)").exec().unwrap_err();
        assert!(e.to_string().contains("core.sleep is not supported"), "{e}");
    }

    #[test]
    fn tokenize_and_concat_behave_as_haproxys() {
        let lua = new_lua().unwrap();
        let (n, first, third): (i64, String, String) = lua
            .load(r#"local t = core.tokenize("a,b,,c", ",", false) return #t, t[1], t[3]"#)
            .eval()
            .unwrap();
        assert_eq!((n, first.as_str(), third.as_str()), (4, "a", ""));
        let n: i64 = lua
            .load(r#"return #core.tokenize("a,b,,c", ",", true)"#)
            .eval()
            .unwrap();
        assert_eq!(n, 3);
        let s: String = lua
            .load(r#"local c = core.concat() c:add("x") c:add(1) return c:dump()"#)
            .eval()
            .unwrap();
        assert_eq!(s, "x1");
    }
}
