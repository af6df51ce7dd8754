//! Variables: `set-var(SCOPE.NAME)`, `set-var-fmt`, `unset-var`, the `var()` fetch and the
//! converters that read one (`add(txn.n)`, `concat`, `strcmp`...).
//!
//! Scopes as HAProxy's: `proc` (the process, shared by all threads: a small mutex-guarded
//! map, written by `global set-var` and rare rules), `sess` (the client connection), `txn`
//! (one request and its response), `req` and `res` (the request or response processing).
//! Session and transaction variables live with their session on its thread, behind a
//! `RefCell` because rules read them through shared views while actions write them. This
//! module knows nothing of requests: it stores typed samples by name.

use std::cell::RefCell;
use std::sync::Mutex;

use crate::config::converter::Val;

// ---------------------------------------------------------------------------------------------
// Types.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Proc,
    Sess,
    Txn,
    Req,
    Res,
}

/// A variable's scope and name (`txn.user` → `Txn`, `user`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VarName {
    pub scope: Scope,
    pub name: Box<str>,
}

/// The conditions of `set-var(NAME,COND...)`: all must hold for the variable to be set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetCond {
    IfExists,
    IfNotExists,
    IfEmpty,
    IfNotEmpty,
    IfSet,
    IfNotSet,
    IfGt,
    IfLt,
}

/// The variables of one session (its `sess` ones and its current transaction's).
#[derive(Debug, Default)]
pub struct Vars {
    items: RefCell<Vec<(Scope, Box<str>, Val)>>,
}

/// The process's variables.
static PROC: Mutex<Vec<(Box<str>, Val)>> = Mutex::new(Vec::new());

/// The `proc` variable names a configuration mentions: HAProxy creates them when it reads
/// the configuration, so that an SPOE agent may set them (and no others).
static PROC_NAMES: Mutex<Vec<Box<str>>> = Mutex::new(Vec::new());

// ---------------------------------------------------------------------------------------------
// Behaviour.

impl VarName {
    /// Parses `SCOPE.NAME`; the name may hold `a-z A-Z 0-9 . _`.
    pub fn parse(s: &str) -> Result<VarName, String> {
        let (scope, name) = s.split_once('.').ok_or_else(|| {
            format!(
                "invalid variable name '{s}': it must start with a scope ('proc.', 'sess.', \
                 'txn.', 'req.' or 'res.')"
            )
        })?;
        let scope = match scope {
            "proc" => Scope::Proc,
            "sess" => Scope::Sess,
            "txn" => Scope::Txn,
            "req" => Scope::Req,
            "res" => Scope::Res,
            o => {
                return Err(format!(
                    "invalid variable name '{s}': unknown scope '{o}' (proc, sess, txn, req \
                     or res)"
                ));
            }
        };
        if name.is_empty()
            || !name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.')
        {
            return Err(format!(
                "invalid variable name '{s}': a name holds only letters, digits, '.' and '_'"
            ));
        }
        if scope == Scope::Proc {
            let mut known = PROC_NAMES.lock().unwrap_or_else(|e| e.into_inner());
            if !known.iter().any(|n| &**n == name) {
                known.push(name.into());
            }
        }
        Ok(VarName {
            scope,
            name: name.into(),
        })
    }
}

/// Whether `proc.NAME` exists: named by the configuration, or set since.
pub fn proc_exists(name: &str) -> bool {
    PROC_NAMES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|n| &**n == name)
        || PROC
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|(n, _)| &**n == name)
}

impl SetCond {
    pub fn parse(s: &str) -> Result<SetCond, String> {
        Ok(match s {
            "ifexists" => SetCond::IfExists,
            "ifnotexists" => SetCond::IfNotExists,
            "ifempty" => SetCond::IfEmpty,
            "ifnotempty" => SetCond::IfNotEmpty,
            "ifset" => SetCond::IfSet,
            "ifnotset" => SetCond::IfNotSet,
            "ifgt" => SetCond::IfGt,
            "iflt" => SetCond::IfLt,
            o => {
                return Err(format!(
                    "unknown set-var condition '{o}' (ifexists, ifnotexists, ifempty, \
                     ifnotempty, ifset, ifnotset, ifgt, iflt)"
                ));
            }
        })
    }
}

/// Whether `conds` allow setting a variable whose value is `old` to `new`.
fn allowed(conds: &[SetCond], scope: Scope, old: Option<&Val>, new: &Val) -> bool {
    let empty = matches!(new, Val::Str(b) if b.is_empty());
    conds.iter().all(|c| match c {
        // `proc` variables exist from the configuration on.
        SetCond::IfExists => old.is_some() || scope == Scope::Proc,
        SetCond::IfNotExists => old.is_none() && scope != Scope::Proc,
        SetCond::IfEmpty => empty,
        SetCond::IfNotEmpty => !empty,
        SetCond::IfSet => old.is_some(),
        SetCond::IfNotSet => old.is_none(),
        SetCond::IfGt | SetCond::IfLt => match (old, new) {
            (Some(Val::Int(o)), Val::Int(n)) => {
                if *c == SetCond::IfGt {
                    o > n
                } else {
                    o < n
                }
            }
            _ => true,
        },
    })
}

impl Vars {
    /// The value of `v` (a copy), from this session or the process.
    pub fn get(&self, v: &VarName) -> Option<Val> {
        if v.scope == Scope::Proc {
            return proc_get(&v.name);
        }
        self.items
            .borrow()
            .iter()
            .find(|(s, n, _)| *s == v.scope && *n == v.name)
            .map(|e| e.2.clone())
    }

    /// Sets `v` to `val` when `conds` allow it.
    pub fn set(&self, v: &VarName, val: Val, conds: &[SetCond]) {
        if v.scope == Scope::Proc {
            proc_set(&v.name, val, conds);
            return;
        }
        let mut items = self.items.borrow_mut();
        match items
            .iter_mut()
            .find(|(s, n, _)| *s == v.scope && *n == v.name)
        {
            Some(e) => {
                if allowed(conds, v.scope, Some(&e.2), &val) {
                    e.2 = val;
                }
            }
            None => {
                if allowed(conds, v.scope, None, &val) {
                    items.push((v.scope, v.name.clone(), val));
                }
            }
        }
    }

    pub fn unset(&self, v: &VarName) {
        if v.scope == Scope::Proc {
            PROC.lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(n, _)| *n != v.name);
            return;
        }
        self.items
            .borrow_mut()
            .retain(|(s, n, _)| !(*s == v.scope && *n == v.name));
    }

    /// Forgets the variables of `scopes` (a new transaction, the end of request processing).
    /// A new set holding a copy of this one's `sess` variables: what a stream of an HTTP/2
    /// connection starts with.
    pub fn sess_copy(&self) -> Vars {
        let items = self
            .items
            .borrow()
            .iter()
            .filter(|(s, _, _)| *s == Scope::Sess)
            .cloned()
            .collect();
        Vars {
            items: RefCell::new(items),
        }
    }

    pub fn clear(&self, scopes: &[Scope]) {
        let mut items = self.items.borrow_mut();
        if !items.is_empty() {
            items.retain(|(s, _, _)| !scopes.contains(s));
        }
    }
}

fn proc_get(name: &str) -> Option<Val> {
    PROC.lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(n, _)| &**n == name)
        .map(|e| e.1.clone())
}

/// Sets a process variable (`global set-var`, or a rule writing `proc.NAME`).
pub fn proc_set(name: &str, val: Val, conds: &[SetCond]) {
    let mut p = PROC.lock().unwrap_or_else(|e| e.into_inner());
    match p.iter_mut().find(|(n, _)| &**n == name) {
        Some(e) => {
            if allowed(conds, Scope::Proc, Some(&e.1), &val) {
                e.1 = val;
            }
        }
        None => {
            if allowed(conds, Scope::Proc, None, &val) {
                p.push((name.into(), val));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> VarName {
        VarName::parse(s).unwrap()
    }

    #[test]
    fn names() {
        assert_eq!(n("txn.a.b_1").scope, Scope::Txn);
        assert!(VarName::parse("foo").unwrap_err().contains("scope"));
        assert!(
            VarName::parse("tx.a")
                .unwrap_err()
                .contains("unknown scope 'tx'")
        );
        assert!(VarName::parse("txn.a-b").unwrap_err().contains("letters"));
    }

    #[test]
    fn scopes_and_conditions() {
        let v = Vars::default();
        v.set(&n("txn.a"), Val::Int(5), &[]);
        v.set(&n("sess.a"), Val::Str(b"s".to_vec()), &[]);
        assert_eq!(v.get(&n("txn.a")), Some(Val::Int(5)));
        v.set(&n("txn.a"), Val::Int(9), &[SetCond::IfLt]);
        assert_eq!(v.get(&n("txn.a")), Some(Val::Int(9)), "5 < 9");
        v.set(&n("txn.a"), Val::Int(20), &[SetCond::IfGt]);
        assert_eq!(v.get(&n("txn.a")), Some(Val::Int(9)), "9 is not > 20");
        v.set(&n("txn.b"), Val::Str(vec![]), &[SetCond::IfNotEmpty]);
        assert_eq!(v.get(&n("txn.b")), None);
        v.set(&n("txn.c"), Val::Int(1), &[SetCond::IfExists]);
        assert_eq!(v.get(&n("txn.c")), None);
        v.clear(&[Scope::Txn, Scope::Req, Scope::Res]);
        assert_eq!(v.get(&n("txn.a")), None);
        assert_eq!(v.get(&n("sess.a")), Some(Val::Str(b"s".to_vec())));
        v.unset(&n("sess.a"));
        assert_eq!(v.get(&n("sess.a")), None);
    }
}
