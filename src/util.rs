//! `util`: small helpers with no better home (per-thread PRNG, clocks for logs).

use std::cell::Cell;

thread_local! {
    static RNG: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x9e37_79b9_7f4a_7c15);
    // Mix in the thread's stack address so threads started in the same nanosecond differ.
    let local = 0u8;
    t ^ (&local as *const u8 as u64).rotate_left(32) | 1
}

/// The time since the Unix epoch (zero if the clock says earlier).
pub fn since_epoch() -> std::time::Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    since_epoch().as_millis() as u64
}

/// The system's host name (`node`, `hostname`, `%H`, `log-send-hostname`); empty if unknown.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// xorshift64*: fast, per-thread, good enough for `balance random` and spreading.
pub fn rand_u32() -> u32 {
    RNG.with(|r| {
        let mut x = r.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        r.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    })
}

/// Where a name was first referred to (file, line).
pub type At = Option<(String, usize)>;

/// Names a configuration refers to (`userlist`s, stick tables), each with a cell that is
/// filled when its declaration is read: before or after the first reference, as in HAProxy.
/// Kept per parsing thread by its owner module, and reset for each configuration.
pub struct NameRefs<T> {
    refs: std::collections::HashMap<String, (std::sync::Arc<std::sync::OnceLock<T>>, At)>,
    /// References made on the line being parsed, waiting for its file and line.
    fresh: Vec<String>,
}

impl<T> Default for NameRefs<T> {
    fn default() -> Self {
        NameRefs {
            refs: Default::default(),
            fresh: Vec::new(),
        }
    }
}

impl<T> NameRefs<T> {
    /// The cell of `name`, made at its first reference.
    pub fn reference(&mut self, name: &str) -> std::sync::Arc<std::sync::OnceLock<T>> {
        let fresh = &mut self.fresh;
        let e = self.refs.entry(name.to_string()).or_insert_with(|| {
            fresh.push(name.to_string());
            Default::default()
        });
        e.0.clone()
    }

    /// Records where the references made on the current line were made.
    pub fn note_line(&mut self, file: &str, line: usize) {
        for n in std::mem::take(&mut self.fresh) {
            if let Some(e) = self.refs.get_mut(&n) {
                e.1.get_or_insert_with(|| (file.to_string(), line));
            }
        }
    }

    /// Fills `name`'s cell (a declaration is not a reference); `Err(value)` when it was
    /// already declared.
    pub fn declare(&mut self, name: &str, value: T) -> Result<(), T> {
        let cell = self.reference(name);
        self.fresh.retain(|x| x != name);
        cell.set(value)
    }

    /// Forgets everything (a new configuration).
    pub fn clear(&mut self) {
        self.refs.clear();
        self.fresh.clear();
    }

    /// Names referred to but never declared, with where they were first used, sorted.
    pub fn undeclared(&self) -> Vec<(String, At)> {
        let mut v: Vec<(String, At)> = self
            .refs
            .iter()
            .filter(|(_, (cell, _))| cell.get().is_none())
            .map(|(n, (_, at))| (n.clone(), at.clone()))
            .collect();
        v.sort();
        v
    }
}
