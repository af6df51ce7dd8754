//! `userlist` sections: users, their passwords and groups, and the check of HTTP Basic
//! credentials behind `http_auth(L)`, `http_auth_group(L)` and `http-request auth`. It owns
//! the parsed lists and how proxies refer to them (a list may be declared after its first
//! use, as in HAProxy); it must not do I/O.

use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

use base64::Engine as _;

/// A `userlist NAME` section.
#[derive(Debug, Default)]
pub struct Userlist {
    pub name: String,
    pub users: Vec<User>,
    /// `group NAME [users a,b]`: the groups and the users they list.
    pub groups: Vec<(String, Vec<String>)>,
}

#[derive(Debug)]
pub struct User {
    pub name: String,
    pub password: Password,
    /// `groups a,b` on the user line.
    pub groups: Vec<String>,
}

#[derive(Debug)]
pub enum Password {
    /// `insecure-password`: compared as is.
    Plain(String),
    /// `password HASH`: a crypt(3) hash, checked by hashing the given password with it.
    Crypt(String),
    /// No password on the `user` line: the user never authenticates.
    Missing,
}

/// A list as a rule refers to it: filled when its section is read, before or after the rule.
pub type UserlistRef = Arc<OnceLock<Userlist>>;

impl Userlist {
    /// The user whose name and password the `Authorization: Basic ...` value carries, if
    /// they are valid for this list.
    pub fn authenticate(&self, authorization: &[u8]) -> Option<&User> {
        let v = authorization.strip_prefix(b"Basic ").or_else(|| {
            authorization
                .get(..6)
                .filter(|p| p.eq_ignore_ascii_case(b"basic "))
                .map(|_| &authorization[6..])
        })?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(v.trim_ascii())
            .ok()?;
        let decoded = String::from_utf8(decoded).ok()?;
        let (name, pass) = decoded.split_once(':')?;
        let user = self.users.iter().find(|u| u.name == name)?;
        let ok = match &user.password {
            Password::Plain(p) => p == pass,
            Password::Crypt(h) => crate::sys::crypt(pass, h).is_some_and(|c| &c == h),
            Password::Missing => false,
        };
        ok.then_some(user)
    }

    /// The groups of `user`: those on its line and those whose `users` list it.
    pub fn groups_of<'a>(&'a self, user: &'a User) -> impl Iterator<Item = &'a str> {
        user.groups.iter().map(String::as_str).chain(
            self.groups
                .iter()
                .filter(move |(_, users)| users.contains(&user.name))
                .map(|(g, _)| g.as_str()),
        )
    }
}

thread_local! {
    /// The lists referred to or declared by the configuration being parsed, by name.
    static REFS: RefCell<crate::util::NameRefs<Userlist>> = RefCell::default();
}

/// The list named `name`, for a rule (`http_auth(name)`).
pub fn reference(name: &str) -> UserlistRef {
    REFS.with(|r| r.borrow_mut().reference(name))
}

/// Records where the references made on the current line were made.
pub fn note_line(file: &str, line: usize) {
    REFS.with(|r| r.borrow_mut().note_line(file, line));
}

/// Stores a parsed section; `Err` when a list of that name was already declared.
pub fn declare(list: Userlist) -> Result<(), String> {
    let name = list.name.clone();
    REFS.with(|r| r.borrow_mut().declare(&name, list))
        .map_err(|_| format!("userlist '{name}' is already defined"))
}

/// Starts a new configuration (nothing referred to or declared yet).
pub fn reset() {
    REFS.with(|r| r.borrow_mut().clear());
}

/// The lists referred to but never declared, with where they were first used.
pub fn undeclared() -> Vec<(String, crate::util::At)> {
    REFS.with(|r| r.borrow().undeclared())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user: &str, pass: &str) -> Vec<u8> {
        let b = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
        format!("Basic {b}").into_bytes()
    }

    #[test]
    fn credentials_and_groups() {
        let hash = crate::sys::crypt("s3cret", "$6$saltsalt$").expect("sha512-crypt");
        let l = Userlist {
            name: "L".into(),
            users: vec![
                User {
                    name: "alice".into(),
                    password: Password::Crypt(hash),
                    groups: vec!["admin".into()],
                },
                User {
                    name: "bob".into(),
                    password: Password::Plain("pw".into()),
                    groups: vec![],
                },
            ],
            groups: vec![("ops".into(), vec!["bob".into(), "alice".into()])],
        };
        let a = l.authenticate(&basic("alice", "s3cret")).expect("alice");
        assert_eq!(l.groups_of(a).collect::<Vec<_>>(), ["admin", "ops"]);
        assert!(l.authenticate(&basic("alice", "wrong")).is_none());
        assert!(l.authenticate(&basic("bob", "pw")).is_some());
        assert!(l.authenticate(&basic("carol", "pw")).is_none());
        assert!(l.authenticate(b"Bearer xyz").is_none());
        assert!(l.authenticate(b"Basic !!!").is_none());
    }
}
