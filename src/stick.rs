//! `stick-table`: per-key counters kept for a proxy and shared by every thread — the keys a
//! session tracks (`track-sc0..2`), the counters those sessions move (connections, requests,
//! errors, bytes, general-purpose counters and their rates), their expiry, and what the CLI
//! prints of them (`show table`).
//!
//! It owns the tables' memory and clocks; it must not know how a request is parsed or
//! routed (the `stream` module tells it what happened, through [`Tracked`]).
//!
//! A table is a fixed set of shards, each a `Mutex<HashMap>` of entries. The shard lock is
//! held only to find or insert an entry; counters live in the entry under its own small
//! lock, so sessions of different keys never wait on each other.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// The type of a table's keys (`stick-table type ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    Ip,
    Ipv6,
    Integer,
    /// `string [len N]` (N bytes; 31 without `len`, as HAProxy): longer keys are cut.
    String(usize),
    /// `binary [len N]` (default 32): keys are cut or padded with zeros to N bytes.
    Binary(usize),
}

impl KeyType {
    pub fn name(&self) -> &'static str {
        match self {
            KeyType::Ip => "ip",
            KeyType::Ipv6 => "ipv6",
            KeyType::Integer => "integer",
            KeyType::String(_) => "string",
            KeyType::Binary(_) => "binary",
        }
    }
}

/// A key, in its table's type.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    V4([u8; 4]),
    V6([u8; 16]),
    Int(u32),
    Bytes(Box<[u8]>),
}

/// What a table stores per key (`store ...`), in HAProxy's numbering: `show table` prints
/// the stored ones in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Data {
    ServerId,
    Gpt0,
    Gpc0,
    Gpc0Rate,
    ConnCnt,
    ConnRate,
    ConnCur,
    SessCnt,
    SessRate,
    HttpReqCnt,
    HttpReqRate,
    HttpErrCnt,
    HttpErrRate,
    BytesInCnt,
    BytesInRate,
    BytesOutCnt,
    BytesOutRate,
    Gpc1,
    Gpc1Rate,
    HttpFailCnt,
    HttpFailRate,
}

/// Every data type, in order.
pub const ALL_DATA: [Data; 21] = [
    Data::ServerId,
    Data::Gpt0,
    Data::Gpc0,
    Data::Gpc0Rate,
    Data::ConnCnt,
    Data::ConnRate,
    Data::ConnCur,
    Data::SessCnt,
    Data::SessRate,
    Data::HttpReqCnt,
    Data::HttpReqRate,
    Data::HttpErrCnt,
    Data::HttpErrRate,
    Data::BytesInCnt,
    Data::BytesInRate,
    Data::BytesOutCnt,
    Data::BytesOutRate,
    Data::Gpc1,
    Data::Gpc1Rate,
    Data::HttpFailCnt,
    Data::HttpFailRate,
];

impl Data {
    pub fn name(self) -> &'static str {
        match self {
            Data::ServerId => "server_id",
            Data::Gpt0 => "gpt0",
            Data::Gpc0 => "gpc0",
            Data::Gpc0Rate => "gpc0_rate",
            Data::ConnCnt => "conn_cnt",
            Data::ConnRate => "conn_rate",
            Data::ConnCur => "conn_cur",
            Data::SessCnt => "sess_cnt",
            Data::SessRate => "sess_rate",
            Data::HttpReqCnt => "http_req_cnt",
            Data::HttpReqRate => "http_req_rate",
            Data::HttpErrCnt => "http_err_cnt",
            Data::HttpErrRate => "http_err_rate",
            Data::BytesInCnt => "bytes_in_cnt",
            Data::BytesInRate => "bytes_in_rate",
            Data::BytesOutCnt => "bytes_out_cnt",
            Data::BytesOutRate => "bytes_out_rate",
            Data::Gpc1 => "gpc1",
            Data::Gpc1Rate => "gpc1_rate",
            Data::HttpFailCnt => "http_fail_cnt",
            Data::HttpFailRate => "http_fail_rate",
        }
    }

    pub fn by_name(name: &str) -> Option<Data> {
        ALL_DATA.iter().copied().find(|d| d.name() == name)
    }

    /// A rate over a period (`conn_rate(10s)`), as opposed to a counter or tag.
    pub fn is_rate(self) -> bool {
        matches!(
            self,
            Data::Gpc0Rate
                | Data::Gpc1Rate
                | Data::ConnRate
                | Data::SessRate
                | Data::HttpReqRate
                | Data::HttpErrRate
                | Data::BytesInRate
                | Data::BytesOutRate
                | Data::HttpFailRate
        )
    }

    /// The counter a rate's events are also counted in, and the reverse (`gpc0` and
    /// `gpc0_rate` move together).
    fn pair(self) -> Option<Data> {
        Some(match self {
            Data::Gpc0 => Data::Gpc0Rate,
            Data::Gpc0Rate => Data::Gpc0,
            Data::Gpc1 => Data::Gpc1Rate,
            Data::Gpc1Rate => Data::Gpc1,
            Data::ConnCnt => Data::ConnRate,
            Data::ConnRate => Data::ConnCnt,
            Data::SessCnt => Data::SessRate,
            Data::SessRate => Data::SessCnt,
            Data::HttpReqCnt => Data::HttpReqRate,
            Data::HttpReqRate => Data::HttpReqCnt,
            Data::HttpErrCnt => Data::HttpErrRate,
            Data::HttpErrRate => Data::HttpErrCnt,
            Data::BytesInCnt => Data::BytesInRate,
            Data::BytesInRate => Data::BytesInCnt,
            Data::BytesOutCnt => Data::BytesOutRate,
            Data::BytesOutRate => Data::BytesOutCnt,
            Data::HttpFailCnt => Data::HttpFailRate,
            Data::HttpFailRate => Data::HttpFailCnt,
            Data::ServerId | Data::Gpt0 | Data::ConnCur => return None,
        })
    }
}

/// A table's definition, as `stick-table` declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDef {
    pub key: KeyType,
    pub size: usize,
    /// `expire`: an entry nobody tracks is removed this long after its last update;
    /// `None`: never (the oldest unused entries make room when the table is full).
    pub expire_ms: Option<u64>,
    /// `nopurge`: a full table refuses new keys instead of dropping old ones.
    pub nopurge: bool,
    /// What is stored, with each rate's period in ms (0 for counters).
    pub store: Vec<(Data, u32)>,
    /// `peers NAME`: the `peers` section its entries are kept in step with.
    pub peers: Option<String>,
}

/// One value of an entry: a counter (`a`), or a rate's window (`a` the start of the
/// current period in ms, `b` events in it, `c` events in the previous one).
#[derive(Debug, Clone, Copy, Default)]
struct Cell {
    a: u64,
    b: u32,
    c: u32,
}

impl Cell {
    /// Counts `n` events of a rate over `period` ms at `now`.
    fn rate_add(&mut self, period: u64, now: u64, n: u32) {
        let period = period.max(1);
        let el = now.saturating_sub(self.a);
        if el >= period {
            if el >= 2 * period {
                // Both periods are over: the window starts afresh now.
                self.c = 0;
                self.a = now;
            } else {
                self.c = self.b;
                self.a += period;
            }
            self.b = 0;
        }
        self.b = self.b.saturating_add(n);
    }

    /// The events of the last `period` ms: the current period's, plus the previous one's
    /// weighted by how much of it the sliding window still covers.
    fn rate_read(&self, period: u64, now: u64) -> u64 {
        let period = period.max(1);
        let mut el = now.saturating_sub(self.a);
        let (mut cur, mut prev) = (self.b as u64, self.c as u64);
        if el >= period {
            prev = if el >= 2 * period { 0 } else { cur };
            cur = 0;
            el -= period;
            if el >= period {
                el = period;
            }
        }
        cur + prev * (period - el) / period
    }
}

/// One key's counters.
pub struct Entry {
    key: Key,
    cells: Mutex<Box<[Cell]>>,
    /// Sessions tracking it now (`use=`): a tracked entry never expires.
    refs: AtomicU32,
    /// When it expires, in [`now_ms`] time (0: never).
    exp: AtomicU64,
    /// Order of its last update in its table, for choosing what to drop from a full table.
    touched: AtomicU64,
    /// In its table's queue of changes for the peers (`peers`), not yet sent.
    queued: std::sync::atomic::AtomicBool,
}

impl Entry {
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Sessions tracking it now.
    pub fn trackers(&self) -> u32 {
        self.refs.load(Relaxed)
    }
}

const SHARDS: usize = 16;

/// How many unused entries a full table compares to choose the one it drops (HAProxy keeps
/// an expiry tree for an exact choice; a bounded sample keeps sluice's cost flat).
const EVICT_SAMPLE: usize = 64;

type Shard = Mutex<HashMap<Key, Arc<Entry>, foldhash::fast::RandomState>>;

/// A table and its entries. Shared by every thread (inside the configuration's `Arc`).
pub struct Table {
    pub name: String,
    pub def: TableDef,
    /// Position of each data type in an entry's cells (`u8::MAX`: not stored).
    slot: [u8; ALL_DATA.len()],
    shards: Box<[Shard]>,
    /// Entries in the table (`used:`).
    used: AtomicUsize,
    /// Last expiry sweep, in [`now_ms`] time.
    swept: AtomicU64,
    /// Update order (entries' `touched`): finer than the clock, so the least recently used
    /// entry is well defined.
    seq: AtomicU64,
    /// `server_id` is printed: stored explicitly, or written by a `stick` rule.
    show_server_id: std::sync::atomic::AtomicBool,
    /// Set when the table is kept in step with peers: the entries changed locally since the
    /// peers task last took them.
    changes: OnceLock<Changes>,
}

/// One value of an entry as the peers exchange it: the type, then a counter's value (or a
/// rate's period start in [`now_ms`] time), and a rate's current and previous counts.
pub type Value = (Data, u64, u32, u32);

/// The keys of a table's entries changed on this process, for its peers: each key once,
/// however often it changed (the update sent carries the entry's values when it is sent).
#[derive(Default)]
pub struct Changes {
    keys: Mutex<Vec<Key>>,
    /// Wakes the peers task when the first change arrives.
    pub ready: tokio::sync::Notify,
}

impl Changes {
    /// Takes the keys changed since the last call.
    pub fn take(&self) -> Vec<Key> {
        std::mem::take(&mut *self.keys.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("name", &self.name)
            .field("def", &self.def)
            .finish_non_exhaustive()
    }
}

/// A table referred to by name (`track-sc0 src table T`, `sc_*`, `src_*`), set once the
/// configuration is read. Tables are proxies' (one per proxy that declares one).
pub type TableRef = Arc<OnceLock<Arc<Table>>>;

/// Milliseconds on the process's monotonic clock (never 0). It starts far from 0 (2^32
/// ms), so that a time a peer gives as "so long ago" (a rate's period start) is a point on
/// it even when that is before this process started: a young process must not take an old
/// window for a current one.
pub fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    start.elapsed().as_millis() as u64 + (1 << 32)
}

impl Table {
    pub fn new(name: &str, mut def: TableDef) -> Table {
        // `stick on|match|store-request` keep the server in every table they use, declared
        // or not: its place is reserved, and shown for tables such a rule writes (noted when
        // the configuration is loaded).
        let show_server_id = def.store.iter().any(|(d, _)| *d == Data::ServerId);
        if !show_server_id {
            def.store.insert(0, (Data::ServerId, 0));
        }
        let mut slot = [u8::MAX; ALL_DATA.len()];
        for (i, (d, _)) in def.store.iter().enumerate() {
            slot[*d as usize] = i as u8;
        }
        Table {
            name: name.to_string(),
            def,
            slot,
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::default()))
                .collect(),
            used: AtomicUsize::new(0),
            swept: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            show_server_id: std::sync::atomic::AtomicBool::new(show_server_id),
            changes: OnceLock::new(),
        }
    }

    /// Whether `server_id` is one of the table's types as the operator sees them (stored
    /// explicitly, or written by a `stick` rule), as opposed to its reserved place.
    pub fn shares_server_id(&self) -> bool {
        self.show_server_id.load(Relaxed)
    }

    /// Notes that a `stick` rule writes servers to this table (`show table` prints them).
    pub fn note_stick_rule(&self) {
        self.show_server_id.store(true, Relaxed);
    }

    pub fn used(&self) -> usize {
        self.used.load(Relaxed)
    }

    pub fn stores(&self, d: Data) -> bool {
        self.slot[d as usize] != u8::MAX
    }

    fn shard(&self, k: &Key) -> &Shard {
        use std::hash::BuildHasher;
        let h = foldhash::fast::FixedState::default().hash_one(k);
        &self.shards[h as usize % SHARDS]
    }

    fn expired(&self, e: &Entry, now: u64) -> bool {
        let exp = e.exp.load(Relaxed);
        e.refs.load(Relaxed) == 0 && exp != 0 && exp <= now
    }

    /// The key of a sample, in this table's type; `None` when it has none (an IPv6 address
    /// in an `ip` table, text that is not a number in an `integer` one).
    pub fn key_of(&self, s: KeySample<'_>) -> Option<Key> {
        Some(match (self.def.key, s) {
            (KeyType::Ip, KeySample::Ip(ip)) => match ip {
                IpAddr::V4(a) => Key::V4(a.octets()),
                IpAddr::V6(a) => Key::V4(a.to_ipv4_mapped()?.octets()),
            },
            (KeyType::Ip, KeySample::Str(t)) => {
                return self.key_of(KeySample::Ip(std::str::from_utf8(t).ok()?.parse().ok()?));
            }
            (KeyType::Ipv6, KeySample::Ip(ip)) => Key::V6(match ip {
                IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
                IpAddr::V6(a) => a.octets(),
            }),
            (KeyType::Ipv6, KeySample::Str(t)) => {
                return self.key_of(KeySample::Ip(std::str::from_utf8(t).ok()?.parse().ok()?));
            }
            (KeyType::Integer, KeySample::Int(n)) => Key::Int(n as u32),
            (KeyType::Integer, KeySample::Str(t)) => {
                Key::Int(std::str::from_utf8(t).ok()?.trim().parse::<i64>().ok()? as u32)
            }
            (KeyType::Integer, KeySample::Ip(_)) => return None,
            (KeyType::String(len), s) => {
                let mut b = s.to_text();
                b.truncate(len);
                Key::Bytes(b.into_boxed_slice())
            }
            (KeyType::Binary(len), s) => {
                let mut b = match s {
                    KeySample::Ip(IpAddr::V4(a)) => a.octets().to_vec(),
                    KeySample::Ip(IpAddr::V6(a)) => a.octets().to_vec(),
                    s => s.to_text(),
                };
                b.resize(len, 0);
                Key::Bytes(b.into_boxed_slice())
            }
            (KeyType::Ip | KeyType::Ipv6, KeySample::Int(_)) => return None,
        })
    }

    /// The key as `show table` prints it, and as the CLI's `key` arguments are read.
    pub fn key_text(&self, k: &Key) -> String {
        match k {
            Key::V4(a) => std::net::Ipv4Addr::from(*a).to_string(),
            Key::V6(a) => std::net::Ipv6Addr::from(*a).to_string(),
            Key::Int(n) => n.to_string(),
            Key::Bytes(b) => match self.def.key {
                KeyType::Binary(_) => b.iter().map(|c| format!("{c:02X}")).collect(),
                // As HAProxy prints them: spaces escaped.
                _ => String::from_utf8_lossy(b).replace(' ', "\\ "),
            },
        }
    }

    /// Reads a key typed on the CLI (binary keys in hex).
    pub fn parse_key(&self, text: &str) -> Result<Key, String> {
        let bad = || {
            format!(
                "Invalid key '{text}' for a table of type {}",
                self.def.key.name()
            )
        };
        match self.def.key {
            KeyType::Binary(len) => {
                if !text.len().is_multiple_of(2) || text.len() / 2 > len {
                    return Err(bad());
                }
                let mut b = (0..text.len() / 2)
                    .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16))
                    .collect::<Result<Vec<u8>, _>>()
                    .map_err(|_| bad())?;
                b.resize(len, 0);
                Ok(Key::Bytes(b.into_boxed_slice()))
            }
            KeyType::Integer => text.parse::<u32>().map(Key::Int).map_err(|_| bad()),
            _ => self.key_of(KeySample::Str(text.as_bytes())).ok_or_else(bad),
        }
    }

    /// The entry of `k`, if there is a live one (`src_*` reads, `table_*`).
    pub fn lookup(&self, k: &Key) -> Option<Arc<Entry>> {
        let now = now_ms();
        let g = self.shard(k).lock().unwrap_or_else(|e| e.into_inner());
        g.get(k).filter(|e| !self.expired(e, now)).cloned()
    }

    /// The entry of `k`, made when there is none; `None` when the table is full and cannot
    /// make room (`nopurge`, or every entry in use).
    pub fn get_or_create(&self, k: Key) -> Option<Arc<Entry>> {
        let now = now_ms();
        self.maybe_sweep(now);
        {
            let mut g = self.shard(&k).lock().unwrap_or_else(|e| e.into_inner());
            if let Some(e) = g.get(&k) {
                if !self.expired(e, now) {
                    return Some(e.clone());
                }
                // Expired and untracked: it starts again from zero.
                g.remove(&k);
                self.used.fetch_sub(1, Relaxed);
            }
        }
        if self.used.load(Relaxed) >= self.def.size && !self.make_room(now) {
            return None;
        }
        let e = Arc::new(Entry {
            key: k.clone(),
            cells: Mutex::new(vec![Cell::default(); self.def.store.len()].into_boxed_slice()),
            refs: AtomicU32::new(0),
            exp: AtomicU64::new(self.def.expire_ms.map_or(0, |x| now + x)),
            touched: AtomicU64::new(self.seq.fetch_add(1, Relaxed)),
            queued: std::sync::atomic::AtomicBool::new(false),
        });
        let mut g = self.shard(&k).lock().unwrap_or_else(|e| e.into_inner());
        // Another thread may have made it meanwhile: theirs is kept.
        let e = g.entry(k).or_insert_with(|| {
            self.used.fetch_add(1, Relaxed);
            e
        });
        Some(e.clone())
    }

    /// Removes expired entries, at most about once per second (and never while another
    /// thread does it).
    fn maybe_sweep(&self, now: u64) {
        let last = self.swept.load(Relaxed);
        if self.def.expire_ms.is_none() || now < last + 1000 {
            return;
        }
        if self
            .swept
            .compare_exchange(last, now, Relaxed, Relaxed)
            .is_err()
        {
            return;
        }
        self.sweep(now);
    }

    fn sweep(&self, now: u64) {
        for s in self.shards.iter() {
            let mut g = s.lock().unwrap_or_else(|e| e.into_inner());
            let before = g.len();
            g.retain(|_, e| !self.expired(e, now));
            self.used.fetch_sub(before - g.len(), Relaxed);
        }
    }

    /// Makes room for one more entry in a full table: the least recently updated of up to
    /// [`EVICT_SAMPLE`] entries nobody tracks (with `nopurge`, only an expired one). The
    /// sample bounds the cost of a new key in a full table, whatever its size: a flood of
    /// new client addresses must not turn each of them into a scan of the whole table.
    fn make_room(&self, now: u64) -> bool {
        let mut oldest: Option<(u64, usize, Key)> = None;
        let mut seen = 0;
        // Start at a shard that moves with every eviction, so the sample moves too.
        let first = self.seq.load(Relaxed) as usize;
        'shards: for n in 0..SHARDS {
            let i = (first + n) % SHARDS;
            let g = self.shards[i].lock().unwrap_or_else(|e| e.into_inner());
            for (k, e) in g.iter() {
                if e.refs.load(Relaxed) != 0 || (self.def.nopurge && !self.expired(e, now)) {
                    continue;
                }
                let t = if self.expired(e, now) {
                    0
                } else {
                    e.touched.load(Relaxed)
                };
                if oldest.as_ref().is_none_or(|o| t < o.0) {
                    oldest = Some((t, i, k.clone()));
                }
                seen += 1;
                if seen >= EVICT_SAMPLE {
                    break 'shards;
                }
            }
        }
        let Some((_, i, k)) = oldest else {
            return false;
        };
        let mut g = self.shards[i].lock().unwrap_or_else(|e| e.into_inner());
        if g.get(&k).is_some_and(|e| e.refs.load(Relaxed) == 0) {
            g.remove(&k);
            self.used.fetch_sub(1, Relaxed);
        }
        self.seq.fetch_add(1, Relaxed);
        true
    }

    /// Pushes an entry's expiry to `expire` from now (any update does), and queues it for
    /// the peers when the table has some.
    fn touch(&self, e: &Entry, now: u64) {
        e.touched.store(self.seq.fetch_add(1, Relaxed), Relaxed);
        if let Some(x) = self.def.expire_ms {
            e.exp.store(now + x, Relaxed);
        }
        if let Some(c) = self.changes.get()
            && !e.queued.load(Relaxed)
            && !e.queued.swap(true, Relaxed)
        {
            let mut keys = c.keys.lock().unwrap_or_else(|e| e.into_inner());
            keys.push(e.key.clone());
            if keys.len() == 1 {
                c.ready.notify_one();
            }
        }
    }

    /// Starts queueing local changes for the peers (`peers` section that runs).
    pub fn start_sync(&self) {
        let _ = self.changes.set(Changes::default());
    }

    /// The queue of local changes, when the table is kept in step with peers.
    pub fn changes(&self) -> Option<&Changes> {
        self.changes.get()
    }

    /// An entry's values for an update to the peers: each stored type in the table's order,
    /// a counter as `(value, 0, 0)`, a rate as (period start in [`now_ms`] time, events in
    /// it, events in the one before); and the ms left before it expires (0: never). Marks it
    /// as sent. `None` when the entry is gone.
    pub fn snapshot(&self, k: &Key) -> Option<(Vec<Value>, u64)> {
        let e = {
            let g = self.shard(k).lock().unwrap_or_else(|e| e.into_inner());
            g.get(k).cloned()
        }?;
        e.queued.store(false, Relaxed);
        let now = now_ms();
        if self.expired(&e, now) {
            return None;
        }
        let cells = e.cells.lock().unwrap_or_else(|e| e.into_inner());
        let vals = self
            .def
            .store
            .iter()
            .zip(cells.iter())
            .map(|((d, _), c)| (*d, c.a, c.b, c.c))
            .collect();
        let exp = match e.exp.load(Relaxed) {
            0 => 0,
            x => x.saturating_sub(now),
        };
        Some((vals, exp))
    }

    /// Applies an update from a peer: the entry is made if needed, the values given are set
    /// (a rate as its window, see [`Table::snapshot`]), and its expiry is `expire` from now
    /// (the table's when `None`). Not queued for the peers: what a peer taught is not sent
    /// back. `false` when the table is full.
    pub fn apply_remote(&self, k: Key, vals: &[Value], expire: Option<u64>) -> bool {
        let Some(e) = self.get_or_create(k) else {
            return false;
        };
        let now = now_ms();
        {
            let mut cells = e.cells.lock().unwrap_or_else(|e| e.into_inner());
            for &(d, a, b, c) in vals {
                let i = self.slot[d as usize];
                if i == u8::MAX {
                    continue;
                }
                let cell = &mut cells[i as usize];
                if d.is_rate() {
                    *cell = Cell { a, b, c };
                } else {
                    cell.a = a;
                }
            }
        }
        e.touched.store(self.seq.fetch_add(1, Relaxed), Relaxed);
        if let Some(x) = expire.or(self.def.expire_ms) {
            e.exp.store(now + x, Relaxed);
        }
        true
    }

    /// Adds `n` to data type `d` of `e`, and to its counter/rate pair; `false` when the
    /// table stores neither.
    pub fn add(&self, e: &Entry, d: Data, n: u64) -> bool {
        // Most tables store a few types: the others cost no lock and no clock read (every
        // request adds its bytes and its status class to whatever it tracks).
        let stored = |d: Data| Some(d).filter(|&d| self.slot[d as usize] != u8::MAX);
        let both = [stored(d), d.pair().and_then(stored)];
        if both == [None, None] {
            return false;
        }
        let now = now_ms();
        {
            let mut cells = e.cells.lock().unwrap_or_else(|e| e.into_inner());
            for d in both.into_iter().flatten() {
                let i = self.slot[d as usize] as usize;
                let c = &mut cells[i];
                if d.is_rate() {
                    let period = self.def.store[i].1;
                    c.rate_add(period as u64, now, n.min(u32::MAX as u64) as u32);
                } else {
                    c.a = c.a.saturating_add(n);
                }
            }
        }
        self.touch(e, now);
        true
    }

    /// Sets counter or tag `d` of `e` (`sc-set-gpt0`, `clear`, `set table`); `false` when
    /// it is not stored.
    pub fn set(&self, e: &Entry, d: Data, v: u64) -> bool {
        let i = self.slot[d as usize];
        if i == u8::MAX {
            return false;
        }
        let now = now_ms();
        {
            let mut cells = e.cells.lock().unwrap_or_else(|e| e.into_inner());
            let c = &mut cells[i as usize];
            if d.is_rate() {
                *c = Cell::default();
                c.rate_add(self.def.store[i as usize].1 as u64, now, v as u32);
            } else {
                c.a = v;
            }
        }
        self.touch(e, now);
        true
    }

    /// Data type `d` of `e` (a rate read over its period); `None` when it is not stored.
    pub fn get(&self, e: &Entry, d: Data) -> Option<u64> {
        let i = self.slot[d as usize];
        if i == u8::MAX {
            return None;
        }
        let (_, period) = self.def.store[i as usize];
        let cells = e.cells.lock().unwrap_or_else(|e| e.into_inner());
        let c = cells[i as usize];
        Some(if d.is_rate() {
            c.rate_read(period as u64, now_ms())
        } else {
            c.a
        })
    }

    /// Counts one more session (or request) tracking `e`: `conn_cur`, and `conn_cnt` with
    /// its rate, which HAProxy counts per tracking whatever the level.
    fn acquire(&self, e: &Entry) {
        e.refs.fetch_add(1, Relaxed);
        self.add(e, Data::ConnCur, 1);
        self.add(e, Data::ConnCnt, 1);
    }

    /// The entries, sorted by key, for the CLI.
    pub fn entries(&self) -> Vec<Arc<Entry>> {
        let now = now_ms();
        let mut v: Vec<Arc<Entry>> = Vec::with_capacity(self.used());
        for s in self.shards.iter() {
            let g = s.lock().unwrap_or_else(|e| e.into_inner());
            v.extend(g.values().filter(|e| !self.expired(e, now)).cloned());
        }
        v.sort_by(|a, b| a.key.cmp(&b.key));
        v
    }

    /// Removes `k`'s entry unless a session tracks it; `false` when one does.
    pub fn remove(&self, k: &Key) -> bool {
        let mut g = self.shard(k).lock().unwrap_or_else(|e| e.into_inner());
        match g.get(k) {
            Some(e) if e.refs.load(Relaxed) > 0 => false,
            Some(_) => {
                g.remove(k);
                self.used.fetch_sub(1, Relaxed);
                true
            }
            None => true,
        }
    }

    /// Removes every entry no session tracks (`clear table NAME`).
    pub fn clear(&self) {
        for s in self.shards.iter() {
            let mut g = s.lock().unwrap_or_else(|e| e.into_inner());
            let before = g.len();
            g.retain(|_, e| e.refs.load(Relaxed) > 0);
            self.used.fetch_sub(before - g.len(), Relaxed);
        }
    }

    /// The `# table: ...` line of `show table`.
    pub fn header_line(&self) -> String {
        format!(
            "# table: {}, type: {}, size:{}, used:{}\n",
            self.name,
            self.def.key.name(),
            self.def.size,
            self.used()
        )
    }

    /// One entry as `show table` prints it.
    pub fn entry_line(&self, e: &Arc<Entry>) -> String {
        use std::fmt::Write as _;
        let now = now_ms();
        let exp = match e.exp.load(Relaxed) {
            0 => 0,
            x => x.saturating_sub(now),
        };
        let mut s = format!(
            "{:p}: key={} use={} exp={}",
            Arc::as_ptr(e),
            self.key_text(&e.key),
            e.refs.load(Relaxed),
            exp
        );
        for d in ALL_DATA {
            let i = self.slot[d as usize];
            if i == u8::MAX || (d == Data::ServerId && !self.show_server_id.load(Relaxed)) {
                continue;
            }
            let v = self.get(e, d).unwrap_or(0);
            if d.is_rate() {
                let _ = write!(s, " {}({})={v}", d.name(), self.def.store[i as usize].1);
            } else {
                let _ = write!(s, " {}={v}", d.name());
            }
        }
        s.push('\n');
        s
    }
}

/// A sample made into a key (see [`Table::key_of`]).
#[derive(Debug, Clone, Copy)]
pub enum KeySample<'a> {
    Str(&'a [u8]),
    Int(i64),
    Ip(IpAddr),
}

impl KeySample<'_> {
    fn to_text(self) -> Vec<u8> {
        match self {
            KeySample::Str(b) => b.to_vec(),
            KeySample::Int(n) => n.to_string().into_bytes(),
            KeySample::Ip(ip) => ip.to_string().into_bytes(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The configuration's tables, by name, while it is read.

thread_local! {
    /// The tables referred to or declared by the configuration being parsed, by name.
    static REFS: std::cell::RefCell<crate::util::NameRefs<Arc<Table>>> = std::cell::RefCell::default();
}

thread_local! {
    /// The proxy section being parsed (`None` in `defaults`): its table is the one rules and
    /// fetches without a `table` argument use.
    static CURRENT: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Notes the proxy section being parsed.
pub fn set_current(proxy: Option<&str>) {
    CURRENT.with(|c| *c.borrow_mut() = proxy.map(str::to_string));
}

/// The current proxy's table (a fetch without a `table` argument); `Err` in `defaults`.
pub fn current() -> Result<TableRef, String> {
    match CURRENT.with(|c| c.borrow().clone()) {
        Some(n) => Ok(reference(&n)),
        None => Err("a 'table' argument is needed here (a defaults section has no table)".into()),
    }
}

/// The table named `name` (a proxy's name), as a rule refers to it.
pub fn reference(name: &str) -> TableRef {
    REFS.with(|r| r.borrow_mut().reference(name))
}

/// Records where the references made on the current line were made.
pub fn note_line(file: &str, line: usize) {
    REFS.with(|r| r.borrow_mut().note_line(file, line));
}

/// Declares proxy `name`'s table; `Err` when it already has one.
pub fn declare(name: &str, def: TableDef) -> Result<Arc<Table>, String> {
    let t = Arc::new(Table::new(name, def));
    REFS.with(|r| r.borrow_mut().declare(name, t.clone()))
        .map_err(|_| format!("only one stick-table per proxy is allowed ('{name}' has one)"))?;
    Ok(t)
}

/// Starts a new configuration.
pub fn reset() {
    set_current(None);
    REFS.with(|r| r.borrow_mut().clear());
}

/// Tables referred to that no proxy declares, with where they were first used.
pub fn undeclared() -> Vec<(String, crate::util::At)> {
    REFS.with(|r| r.borrow().undeclared())
}

// ---------------------------------------------------------------------------------------------
// The CLI: `show table`, `clear table`, `set table`, with HAProxy's replies.

/// A `data.TYPE OP VALUE` filter of `show table` and `clear table`.
struct Filter {
    data: Data,
    op: &'static str,
    value: u64,
}

impl Filter {
    fn holds(&self, t: &Table, e: &Entry) -> bool {
        let v = t.get(e, self.data).unwrap_or(0);
        match self.op {
            "eq" => v == self.value,
            "ne" => v != self.value,
            "le" => v <= self.value,
            "ge" => v >= self.value,
            "lt" => v < self.value,
            _ => v > self.value,
        }
    }
}

/// What follows the table name: `key K`, or `data.T OP V` filters (ANDed).
enum Select {
    All(Vec<Filter>),
    Key(Key),
    /// A key that cannot be in the table (`show` prints nothing for it, as HAProxy).
    NoKey,
}

fn select(t: &Table, args: &[&str]) -> Result<Select, String> {
    match args {
        [] => Ok(Select::All(Vec::new())),
        ["key"] => Err("Key value expected".into()),
        ["key", k, ..] => match t.def.key {
            KeyType::Ip | KeyType::Ipv6 | KeyType::String(_) => {
                Ok(t.parse_key(k).map_or(Select::NoKey, Select::Key))
            }
            KeyType::Integer => t
                .parse_key(k)
                .map(Select::Key)
                .map_err(|_| "Invalid key".into()),
            KeyType::Binary(_) => Err(
                "Showing keys from tables of type other than ip, ipv6, string and integer is not \
                 supported"
                    .into(),
            ),
        },
        _ => {
            let mut filters = Vec::new();
            for (i, w) in args.chunks(3).enumerate() {
                let n = i + 1;
                let Some(name) = w[0].strip_prefix("data.") else {
                    return Err(format!("Filter entry #{n}: Unknown data type"));
                };
                let Some(data) = Data::by_name(name) else {
                    return Err(format!("Filter entry #{n}: Unknown data type"));
                };
                if !t.stores(data) {
                    return Err(format!(
                        "Filter entry #{n}: Data type not stored in this table"
                    ));
                }
                let op = match w.get(1).copied() {
                    Some("eq") => "eq",
                    Some("ne") => "ne",
                    Some("le") => "le",
                    Some("ge") => "ge",
                    Some("lt") => "lt",
                    Some("gt") => "gt",
                    _ => {
                        return Err(format!(
                            "Filter entry #{n}: Require and operator among \"eq\", \"ne\", \
                             \"le\", \"ge\", \"lt\", \"gt\""
                        ));
                    }
                };
                let Some(value) = w.get(2).and_then(|v| v.parse::<u64>().ok()) else {
                    return Err(format!(
                        "Filter entry #{n}: Require a valid integer value to compare against"
                    ));
                };
                filters.push(Filter { data, op, value });
            }
            Ok(Select::All(filters))
        }
    }
}

/// `show table [NAME [key K | data.T OP V...]]`; `tables` in declaration order.
pub fn cli_show(tables: &[&Arc<Table>], args: &[&str]) -> String {
    let Some(name) = args.first() else {
        // Without a name: every table's header, the last declared first, as HAProxy.
        return tables.iter().rev().map(|t| t.header_line()).collect();
    };
    let Some(t) = tables.iter().find(|t| t.name == *name) else {
        return "No such table\n".into();
    };
    match select(t, &args[1..]) {
        Err(e) => e + "\n",
        Ok(Select::NoKey) => String::new(),
        Ok(Select::Key(k)) => match t.lookup(&k) {
            Some(e) => t.header_line() + &t.entry_line(&e),
            None => String::new(),
        },
        Ok(Select::All(filters)) => {
            let mut out = t.header_line();
            for e in t.entries() {
                if filters.iter().all(|f| f.holds(t, &e)) {
                    out.push_str(&t.entry_line(&e));
                }
            }
            out
        }
    }
}

/// `clear table NAME [key K | data.T OP V...]`: removes the entries no session tracks.
pub fn cli_clear(tables: &[&Arc<Table>], args: &[&str]) -> String {
    let Some(name) = args.first() else {
        return "Required arguments: <table> \"data.<store_data_type>\" <operator> <value> or \
                <table> key <key>\n"
            .into();
    };
    let Some(t) = tables.iter().find(|t| t.name == *name) else {
        return "No such table\n".into();
    };
    match select(t, &args[1..]) {
        Err(e) => e + "\n",
        Ok(Select::NoKey) => String::new(),
        Ok(Select::Key(k)) => {
            if t.remove(&k) {
                String::new()
            } else {
                "Entry currently in use, cannot remove\n".into()
            }
        }
        Ok(Select::All(filters)) if filters.is_empty() => {
            t.clear();
            String::new()
        }
        Ok(Select::All(filters)) => {
            for e in t.entries() {
                if filters.iter().all(|f| f.holds(t, &e)) {
                    t.remove(e.key());
                }
            }
            String::new()
        }
    }
}

/// `set table NAME key K [data.T V]...`: makes the entry if needed and sets its values.
pub fn cli_set(tables: &[&Arc<Table>], args: &[&str]) -> String {
    let Some(name) = args.first() else {
        return "Required arguments: <table> key <key> [data.<store_data_type> <value>]*\n".into();
    };
    let Some(t) = tables.iter().find(|t| t.name == *name) else {
        return "No such table\n".into();
    };
    let (key, rest) = match &args[1..] {
        ["key", k, rest @ ..] => (k, rest),
        ["key"] => return "Key value expected\n".into(),
        _ => {
            return "content-based lookup is only supported with the \"show\" and \"clear\" \
                    actions\n"
                .into();
        }
    };
    // HAProxy reads an address it cannot parse as 0.0.0.0.
    let k = match (t.parse_key(key), t.def.key) {
        (Ok(k), _) => k,
        (Err(_), KeyType::Ip) => Key::V4([0; 4]),
        (Err(_), KeyType::Ipv6) => Key::V6([0; 16]),
        (Err(e), _) => return e + "\n",
    };
    let mut sets = Vec::new();
    for w in rest.chunks(2) {
        let Some(data) = w[0].strip_prefix("data.").and_then(Data::by_name) else {
            return "Unknown data type\n".into();
        };
        if !t.stores(data) {
            return "Data type not stored in this table\n".into();
        }
        let Some(v) = w.get(1).and_then(|v| v.parse::<u64>().ok()) else {
            return "Require a valid integer value to store\n".into();
        };
        sets.push((data, v));
    }
    let Some(e) = t.get_or_create(k) else {
        return "Unable to allocate a new entry\n".into();
    };
    t.touch(&e, now_ms());
    for (d, v) in sets {
        t.set(&e, d, v);
    }
    String::new()
}

// ---------------------------------------------------------------------------------------------
// Tracking.

/// An entry a session or a request tracks (`track-scN`): while it lives the entry counts
/// it in `conn_cur` and cannot expire.
pub struct Tracked {
    pub table: Arc<Table>,
    pub entry: Arc<Entry>,
    /// Whether this tracking counts a connection (`conn_cur`); the streams of an HTTP/2
    /// connection share its entries without counting again.
    counts_conn: bool,
}

impl Tracked {
    /// Starts tracking `k` in `t`; `None` when the table has no room for it.
    pub fn start(t: &Arc<Table>, k: Key) -> Option<Tracked> {
        let entry = t.get_or_create(k)?;
        t.acquire(&entry);
        Some(Tracked {
            table: t.clone(),
            entry,
            counts_conn: true,
        })
    }

    /// The same entry, tracked by one stream of the connection that tracks it: it keeps the
    /// entry alive and counts the stream's requests, not another connection.
    pub fn share(&self) -> Tracked {
        self.entry.refs.fetch_add(1, Relaxed);
        Tracked {
            table: self.table.clone(),
            entry: self.entry.clone(),
            counts_conn: false,
        }
    }

    pub fn add(&self, d: Data, n: u64) {
        self.table.add(&self.entry, d, n);
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if self.counts_conn {
            let i = self.table.slot[Data::ConnCur as usize];
            if i != u8::MAX {
                let mut cells = self.entry.cells.lock().unwrap_or_else(|e| e.into_inner());
                let c = &mut cells[i as usize];
                c.a = c.a.saturating_sub(1);
            }
        }
        self.table.touch(&self.entry, now_ms());
        self.entry.refs.fetch_sub(1, Relaxed);
    }
}

/// The three tracking slots (`sc0`, `sc1`, `sc2`) of a session or of one request.
pub const SLOTS: usize = 3;

#[derive(Default)]
pub struct Trackers(pub [Option<Tracked>; SLOTS]);

impl Trackers {
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }

    /// The same entries, for a stream of this HTTP/2 connection ([`Tracked::share`]).
    pub fn share(&self) -> Trackers {
        Trackers(std::array::from_fn(|i| {
            self.0[i].as_ref().map(Tracked::share)
        }))
    }

    /// Adds `n` to `d` in every tracked entry.
    pub fn add(&self, d: Data, n: u64) {
        for t in self.0.iter().flatten() {
            t.add(d, n);
        }
    }
}

/// What rules see of the tracked entries: a request's own slot first, else the session's.
#[derive(Clone, Copy, Default)]
pub struct ScView<'a> {
    pub sess: Option<&'a Trackers>,
    pub txn: Option<&'a Trackers>,
}

impl<'a> ScView<'a> {
    pub fn get(&self, n: usize) -> Option<&'a Tracked> {
        self.txn
            .and_then(|t| t.0.get(n)?.as_ref())
            .or_else(|| self.sess.and_then(|t| t.0.get(n)?.as_ref()))
    }
}

impl std::fmt::Debug for ScView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = (0..SLOTS).filter(|&i| self.get(i).is_some()).count();
        write!(f, "ScView({n} tracked)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(store: Vec<(Data, u32)>, size: usize, expire_ms: Option<u64>) -> TableDef {
        TableDef {
            peers: None,
            key: KeyType::Ip,
            size,
            expire_ms,
            nopurge: false,
            store,
        }
    }

    #[test]
    fn rate_window_weights_the_previous_period() {
        let mut c = Cell::default();
        for _ in 0..10 {
            c.rate_add(1000, 5000, 1);
        }
        assert_eq!(c.rate_read(1000, 5000), 10);
        assert_eq!(c.rate_read(1000, 5999), 10);
        // A quarter into the next period, three quarters of the last one still count.
        assert_eq!(c.rate_read(1000, 6250), 7);
        assert_eq!(c.rate_read(1000, 6999), 0);
        assert_eq!(c.rate_read(1000, 7000), 0);
        c.rate_add(1000, 6500, 4);
        assert_eq!(c.rate_read(1000, 6500), 4 + 5);
        // Two periods later everything is gone, and the window restarts at the event.
        c.rate_add(1000, 9000, 1);
        assert_eq!(c.rate_read(1000, 9000), 1);
    }

    #[test]
    fn counters_and_their_rates_move_together() {
        let t = Arc::new(Table::new(
            "t",
            def(
                vec![
                    (Data::HttpReqRate, 10_000),
                    (Data::Gpc0, 0),
                    (Data::ConnCur, 0),
                ],
                10,
                None,
            ),
        ));
        let k = t
            .key_of(KeySample::Ip("10.0.0.1".parse().unwrap()))
            .unwrap();
        let a = Tracked::start(&t, k.clone()).unwrap();
        let b = Tracked::start(&t, k).unwrap();
        a.add(Data::HttpReqCnt, 1);
        b.add(Data::HttpReqCnt, 1);
        assert_eq!(t.get(&a.entry, Data::HttpReqRate), Some(2));
        assert_eq!(t.get(&a.entry, Data::HttpReqCnt), None);
        assert_eq!(t.get(&a.entry, Data::ConnCur), Some(2));
        drop(b);
        assert_eq!(t.get(&a.entry, Data::ConnCur), Some(1));
        assert_eq!(t.used(), 1);
        assert!(!t.remove(a.entry.key()), "a tracked entry stays");
        drop(a);
        assert!(t.remove(&Key::V4([10, 0, 0, 1])));
        assert_eq!(t.used(), 0);
    }

    #[test]
    fn a_full_table_drops_its_oldest_unused_entry_unless_nopurge() {
        let t = Arc::new(Table::new("t", def(vec![(Data::Gpc0, 0)], 2, None)));
        let k = |n: u8| Key::V4([10, 0, 0, n]);
        let e1 = t.get_or_create(k(1)).unwrap();
        t.set(&e1, Data::Gpc0, 1);
        let held = Tracked::start(&t, k(2)).unwrap();
        assert!(t.get_or_create(k(3)).is_some());
        assert!(t.lookup(&k(1)).is_none(), "the untracked entry made room");
        assert!(t.lookup(&k(2)).is_some());
        assert_eq!(t.used(), 2);
        drop(held);

        let mut d = def(vec![(Data::Gpc0, 0)], 1, None);
        d.nopurge = true;
        let t = Table::new("n", d);
        assert!(t.get_or_create(k(1)).is_some());
        assert!(t.get_or_create(k(2)).is_none());
        assert!(
            t.get_or_create(k(1)).is_some(),
            "a present key is still found"
        );
    }

    #[test]
    fn keys_take_the_tables_type() {
        let mk = |key| {
            Table::new(
                "t",
                TableDef {
                    key,
                    ..def(vec![], 1, None)
                },
            )
        };
        let v4: IpAddr = "127.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(
            mk(KeyType::Ip).key_of(KeySample::Ip(mapped)),
            Some(Key::V4([127, 0, 0, 1]))
        );
        assert_eq!(
            mk(KeyType::Ip).key_of(KeySample::Ip("::1".parse().unwrap())),
            None
        );
        let six = mk(KeyType::Ipv6);
        let k = six.key_of(KeySample::Ip(v4)).unwrap();
        assert_eq!(six.key_text(&k), "::ffff:127.0.0.1");
        let s = mk(KeyType::String(4));
        let k = s.key_of(KeySample::Str(b"/abcdef")).unwrap();
        assert_eq!(s.key_text(&k), "/abc");
        let b = mk(KeyType::Binary(4));
        let k = b.key_of(KeySample::Str(b"AB")).unwrap();
        assert_eq!(b.key_text(&k), "41420000");
        assert_eq!(b.parse_key("4142").unwrap(), k);
        let i = mk(KeyType::Integer);
        assert_eq!(i.key_of(KeySample::Str(b"42")), Some(Key::Int(42)));
        assert!(i.parse_key("x").is_err());
    }
}
