//! `histogram`: latency histograms with fixed buckets — per server, the queue, connect,
//! response and total times of every request (HAProxy's Tw, Tc, Tr, Ta/Tt), and the duration
//! of health checks — for the Prometheus exporter.
//!
//! It owns the bucket bounds and the counters. The request path records into counters that
//! only its own worker thread writes (one cache-line-aligned block per thread and server), so
//! recording is a few relaxed loads and stores: no lock, no atomic read-modify-write, no
//! cache line shared with another thread, no allocation. A scrape sums every thread's block.
//! It must not do I/O or know about the text format (that is `prometheus`).

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// Upper bounds of the buckets, in microseconds: 0.5 ms to 60 s, roughly doubling (1-2-5).
/// A value equal to a bound falls in that bound's bucket, as Prometheus' `le` says.
pub const BOUNDS_US: [u64; 16] = [
    500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000,
    2_000_000, 5_000_000, 10_000_000, 20_000_000, 60_000_000,
];

/// The same bounds as the `le` label shows them, in seconds.
pub const BOUNDS_LE: [&str; 16] = [
    "0.0005", "0.001", "0.002", "0.005", "0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1", "2",
    "5", "10", "20", "60",
];

/// Buckets kept: one per bound, plus the overflow (`+Inf`).
pub const BUCKETS: usize = BOUNDS_US.len() + 1;

/// One histogram's counters. Buckets are stored non-cumulative (each value lands in exactly
/// one); the exporter accumulates them when it writes `le` buckets.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS],
    sum_us: AtomicU64,
}

/// A histogram read at one moment (summed over threads), non-cumulative like the storage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub counts: [u64; BUCKETS],
    pub sum_us: u64,
}

/// The request timers sluice keeps a histogram of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// Waiting for a server slot (HAProxy's Tw).
    Queue = 0,
    /// Establishing a new server connection (Tc); reused connections are not counted.
    Connect = 1,
    /// From the request sent to the server until its response head arrived (Tr).
    Response = 2,
    /// The whole request (HTTP: first request byte to last response byte, Ta) or the whole
    /// TCP session (Tt).
    Total = 3,
}

/// Every timer, in storage order.
pub const TIMERS: [Timer; 4] = [Timer::Queue, Timer::Connect, Timer::Response, Timer::Total];

/// The timers one request or TCP session reached; `None` for a phase it did not go through.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timings {
    pub queue: Option<Duration>,
    pub connect: Option<Duration>,
    pub response: Option<Duration>,
    pub total: Option<Duration>,
}

/// One thread's histograms of one server. The alignment keeps two threads' blocks off each
/// other's cache lines (4 × 144 bytes = 9 lines).
#[repr(align(64))]
#[derive(Debug, Default)]
struct ThreadBlock([Histogram; 4]);

/// The request timers of one server: a block per worker thread, summed when read.
#[derive(Debug)]
pub struct Timers {
    threads: Box<[ThreadBlock]>,
}

impl Histogram {
    fn bucket(us: u64) -> usize {
        BOUNDS_US.partition_point(|&b| b < us)
    }

    /// Records a value from any thread (health checks: a server's checks may move between
    /// threads, and they are far from the request path).
    pub fn record(&self, d: Duration) {
        let us = micros(d);
        self.counts[Self::bucket(us)].fetch_add(1, Relaxed);
        self.sum_us.fetch_add(us, Relaxed);
    }

    /// Records a value, for a histogram that only the calling thread ever writes: a plain load
    /// and store per counter (no locked instruction). Readers on other threads may see the
    /// count and the sum one value apart, never a torn or lost update.
    fn record_owned(&self, us: u64) {
        let c = &self.counts[Self::bucket(us)];
        c.store(c.load(Relaxed) + 1, Relaxed);
        self.sum_us
            .store(self.sum_us.load(Relaxed).wrapping_add(us), Relaxed);
    }

    /// Back to zero (`clear counters all`). A value recorded by another thread at the same
    /// moment may survive it; for the per-thread blocks, call `Timers::clear` instead.
    pub fn clear(&self) {
        for c in &self.counts {
            c.store(0, Relaxed);
        }
        self.sum_us.store(0, Relaxed);
    }

    /// Adds this histogram's counters to `s`.
    pub fn add_to(&self, s: &mut Snapshot) {
        for (acc, c) in s.counts.iter_mut().zip(&self.counts) {
            *acc += c.load(Relaxed);
        }
        s.sum_us = s.sum_us.wrapping_add(self.sum_us.load(Relaxed));
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::default();
        self.add_to(&mut s);
        s
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Snapshot {
    /// Number of values recorded (the `+Inf` bucket and `_count`).
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Sum of the values, in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_us as f64 / 1e6
    }

    /// Adds another snapshot (a backend sums its servers).
    pub fn merge(&mut self, o: &Snapshot) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.sum_us = self.sum_us.wrapping_add(o.sum_us);
    }
}

impl Timers {
    /// Timers for `nbthread` worker threads (at least one block).
    pub fn new(nbthread: usize) -> Timers {
        Timers {
            threads: (0..nbthread.max(1))
                .map(|_| ThreadBlock::default())
                .collect(),
        }
    }

    /// Records what a finished request or session reached. `thread` is the calling worker's
    /// id: each worker writes only its own block.
    pub fn record(&self, thread: usize, t: &Timings) {
        let n = self.threads.len();
        let block = &self.threads[thread % n].0;
        let vals = [t.queue, t.connect, t.response, t.total];
        for (h, v) in block.iter().zip(vals) {
            if let Some(d) = v {
                if thread < n {
                    h.record_owned(micros(d));
                } else {
                    // Not a worker of the configured set (never expected): stay correct
                    // with a shared update rather than race another thread's block.
                    h.record(d);
                }
            }
        }
    }

    /// Zeroes the block of worker `thread`. Call it on that thread only: being the block's
    /// only writer, it cannot lose a reset to a concurrent record.
    pub fn clear(&self, thread: usize) {
        if let Some(b) = self.threads.get(thread) {
            for h in &b.0 {
                h.clear();
            }
        }
    }

    /// Timer `t` summed over every thread.
    pub fn snapshot(&self, t: Timer) -> Snapshot {
        let mut s = Snapshot::default();
        for b in self.threads.iter() {
            b.0[t as usize].add_to(&mut s);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn le_labels_match_the_bounds() {
        for (us, le) in BOUNDS_US.iter().zip(BOUNDS_LE) {
            let secs: f64 = le.parse().unwrap();
            assert_eq!((secs * 1e6).round() as u64, *us, "{le}");
        }
        assert!(BOUNDS_US.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn values_land_in_the_first_bucket_whose_bound_is_not_below_them() {
        assert_eq!(Histogram::bucket(0), 0);
        assert_eq!(Histogram::bucket(500), 0);
        assert_eq!(Histogram::bucket(501), 1);
        assert_eq!(Histogram::bucket(60_000_000), 15);
        assert_eq!(Histogram::bucket(60_000_001), 16);
        let h = Histogram::default();
        h.record(Duration::from_millis(3));
        h.record(Duration::from_secs(100));
        let s = h.snapshot();
        assert_eq!(s.counts[3], 1, "3 ms is in le=0.005");
        assert_eq!(s.counts[16], 1, "100 s is only in +Inf");
        assert_eq!(s.count(), 2);
        assert_eq!(s.sum_us, 100_003_000);
    }

    #[test]
    fn threads_record_apart_and_a_snapshot_sums_them() {
        let t = Timers::new(2);
        let total = |ms| Timings {
            total: Some(Duration::from_millis(ms)),
            ..Default::default()
        };
        std::thread::scope(|s| {
            for th in 0..2 {
                let t = &t;
                s.spawn(move || {
                    for _ in 0..1000 {
                        t.record(th, &total(1));
                    }
                });
            }
        });
        // Only the thread's own block was written.
        assert_eq!(
            t.threads[0].0[Timer::Total as usize].snapshot().count(),
            1000
        );
        assert_eq!(
            t.threads[1].0[Timer::Total as usize].snapshot().count(),
            1000
        );
        let s = t.snapshot(Timer::Total);
        assert_eq!(s.count(), 2000);
        assert_eq!(s.counts[1], 2000, "1 ms is in le=0.001");
        assert_eq!(s.sum_us, 2_000_000);
        assert_eq!(t.snapshot(Timer::Response).count(), 0);
        // An unexpected thread id still counts.
        t.record(7, &total(1));
        assert_eq!(t.snapshot(Timer::Total).count(), 2001);
        // Clearing is per thread.
        t.clear(0);
        assert_eq!(t.snapshot(Timer::Total).count(), 1001);
        t.clear(1);
        assert_eq!(t.snapshot(Timer::Total), Snapshot::default());
    }

    #[test]
    fn blocks_do_not_share_cache_lines() {
        assert_eq!(std::mem::align_of::<ThreadBlock>(), 64);
        assert_eq!(std::mem::size_of::<ThreadBlock>() % 64, 0);
    }
}
