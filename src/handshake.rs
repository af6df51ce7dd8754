//! `handshake`: when client TLS handshakes may start, per worker thread (DESIGN §6).
//!
//! The first step of a server handshake (the ClientHello: key exchange and signature) is the
//! most expensive thing sluice does. Started all at once, a storm of them starves established
//! connections and, worse, delays each other until clients time out and retry (HAProxy issue
//! #822). So each thread lets at most [`STARTS_PER_ROUND`] handshakes start per event-loop
//! round; the others wait in arrival order. A round ends when the thread has polled its
//! sockets again: the [`HandshakeSched::run_rounds`] task refills the allowance after a
//! `yield_now`, which tokio's current-thread scheduler defers until the I/O driver has run,
//! so every ready connection gets its turn between two starts.
//!
//! Handshakes wait for their ClientHello before queueing (an idle TLS connection takes no
//! place), and a handshake whose client closed or reset meanwhile is dropped when its turn
//! comes, before any crypto (see `stream::serve_tls`).
//!
//! The queue is also the thread's measure of pending work for `tune.runqueue-depth`: when
//! that many handshakes wait, the thread stops accepting on its `ssl` listeners (connections
//! wait in the kernel backlog) until half of them have started. Only work that waits for the
//! CPU counts: established connections, however busy, and idle TLS connections never pause a
//! listener, and plain listeners are never paused (HAProxy's first attempt, which paused on
//! the whole run queue, blocked new connections under heavy regular traffic and was reverted).
//! tokio's stable metrics offer no per-thread run-queue depth to use instead.
//!
//! The same scheduler, with a few starts per round and no depth, paces the starts of health
//! checks (`Worker::check_starts`, `check::STARTS_PER_ROUND`).
//!
//! Everything here belongs to one thread: `Cell`s and a `VecDeque` whose buffer is reused,
//! no lock and no allocation per handshake once the queue has grown.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Handshakes a thread starts per event-loop round (HAProxy: one heavy task per round).
pub const STARTS_PER_ROUND: u32 = 1;

/// A place in the queue.
enum Place {
    Waiting(Option<Waker>),
    /// Its handshake was dropped (timeout, client gone, connection killed) before its turn.
    Left,
}

/// One thread's handshake queue and its counters (`show activity`).
pub struct HandshakeSched {
    /// Starts allowed per round.
    per_round: u32,
    /// Starts left in this round.
    left: Cell<u32>,
    /// Ticket of `queue[0]`; a ticket below it has had its turn.
    base: Cell<u64>,
    queue: RefCell<VecDeque<Place>>,
    /// `Waiting` places in `queue`.
    waiting: Cell<u32>,
    /// The round task, while it sleeps with nothing to refill.
    rounds: RefCell<Option<Waker>>,
    /// Handshakes started (crypto begun).
    pub started: Cell<u64>,
    /// Handshakes dropped because their client had gone before they started.
    pub dropped: Cell<u64>,
    /// The longest the queue has been.
    pub queue_max: Cell<u32>,
    /// `tune.runqueue-depth`.
    depth: u32,
    /// `ssl` listeners of this thread are paused (the queue reached `depth`).
    paused: Cell<bool>,
    /// Woken when they may accept again.
    resumed: tokio::sync::Notify,
    /// Times the `ssl` listeners were paused.
    pub pauses: Cell<u64>,
}

impl HandshakeSched {
    /// `depth`: `tune.runqueue-depth`.
    pub fn new(depth: u32) -> HandshakeSched {
        HandshakeSched::with_starts(depth, STARTS_PER_ROUND)
    }

    /// A scheduler that lets `per_round` starts through per round.
    pub fn with_starts(depth: u32, per_round: u32) -> HandshakeSched {
        let per_round = per_round.max(1);
        HandshakeSched {
            per_round,
            left: Cell::new(per_round),
            base: Cell::new(0),
            queue: RefCell::new(VecDeque::new()),
            waiting: Cell::new(0),
            rounds: RefCell::new(None),
            started: Cell::new(0),
            dropped: Cell::new(0),
            queue_max: Cell::new(0),
            depth: depth.max(1),
            paused: Cell::new(false),
            resumed: tokio::sync::Notify::new(),
            pauses: Cell::new(0),
        }
    }

    /// Resolves once this thread's `ssl` listeners may accept (at once, unless the queue
    /// reached `tune.runqueue-depth` and has not drained to half of it yet).
    pub async fn accept_allowed(&self) {
        loop {
            let resumed = self.resumed.notified();
            tokio::pin!(resumed);
            resumed.as_mut().enable();
            if !self.paused.get() {
                return;
            }
            resumed.await;
        }
    }

    /// One more handshake waits.
    fn queued_one(&self) {
        let n = self.waiting.get() + 1;
        self.waiting.set(n);
        if n > self.queue_max.get() {
            self.queue_max.set(n);
        }
        if n >= self.depth && !self.paused.get() {
            self.paused.set(true);
            self.pauses.set(self.pauses.get() + 1);
        }
    }

    /// One handshake less waits (it started, or left).
    fn unqueued_one(&self) {
        let n = self.waiting.get() - 1;
        self.waiting.set(n);
        if self.paused.get() && n <= self.depth / 2 {
            self.paused.set(false);
            self.resumed.notify_waiters();
        }
    }

    /// Handshakes waiting for their turn now.
    pub fn queued(&self) -> u32 {
        self.waiting.get()
    }

    /// Resolves when the caller's handshake may start. Dropping it gives its place up.
    pub fn turn(&self) -> Turn<'_> {
        Turn {
            s: self,
            ticket: None,
            done: false,
        }
    }

    /// Runs for the thread's lifetime: at each round, refills the allowance and hands it to
    /// the oldest waiters. Sleeps while there is nothing to refill.
    pub async fn run_rounds(&self) {
        loop {
            std::future::poll_fn(|cx| {
                if self.left.get() < self.per_round || self.waiting.get() > 0 {
                    Poll::Ready(())
                } else {
                    *self.rounds.borrow_mut() = Some(cx.waker().clone());
                    Poll::Pending
                }
            })
            .await;
            // Deferred by tokio until the I/O driver has run: the next round.
            tokio::task::yield_now().await;
            self.left.set(self.per_round);
            self.grant();
        }
    }

    /// Returns a start taken by a handshake that was then dropped without crypto (its client
    /// had gone): the next waiter gets it in this same round.
    pub fn give_back(&self) {
        if self.left.get() < self.per_round {
            self.left.set(self.left.get() + 1);
            self.grant();
        }
    }

    fn wake_rounds(&self) {
        if let Some(w) = self.rounds.borrow_mut().take() {
            w.wake();
        }
    }

    /// Gives what is left of this round's allowance to the oldest waiters.
    fn grant(&self) {
        let mut q = self.queue.borrow_mut();
        while self.left.get() > 0 {
            match q.pop_front() {
                None => break,
                Some(Place::Left) => self.base.set(self.base.get() + 1),
                Some(Place::Waiting(w)) => {
                    self.base.set(self.base.get() + 1);
                    self.left.set(self.left.get() - 1);
                    self.unqueued_one();
                    if let Some(w) = w {
                        w.wake();
                    }
                }
            }
        }
        while let Some(Place::Left) = q.front() {
            q.pop_front();
            self.base.set(self.base.get() + 1);
        }
    }
}

/// See [`HandshakeSched::turn`].
pub struct Turn<'a> {
    s: &'a HandshakeSched,
    ticket: Option<u64>,
    done: bool,
}

impl Future for Turn<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let s = self.s;
        match self.ticket {
            None => {
                if s.waiting.get() == 0 && s.left.get() > 0 {
                    // Nobody ahead and room in this round: start now.
                    s.left.set(s.left.get() - 1);
                    s.wake_rounds();
                    self.done = true;
                    return Poll::Ready(());
                }
                let mut q = s.queue.borrow_mut();
                self.ticket = Some(s.base.get() + q.len() as u64);
                q.push_back(Place::Waiting(Some(cx.waker().clone())));
                drop(q);
                s.queued_one();
                s.wake_rounds();
                Poll::Pending
            }
            Some(t) if t < s.base.get() => {
                self.done = true;
                Poll::Ready(())
            }
            Some(t) => {
                let i = (t - s.base.get()) as usize;
                if let Some(Place::Waiting(w)) = s.queue.borrow_mut().get_mut(i)
                    && !w.as_ref().is_some_and(|w| w.will_wake(cx.waker()))
                {
                    *w = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let Some(t) = self.ticket else { return };
        if self.done || t < self.s.base.get() {
            // Had its turn (if never used, this round's start is lost: harmless).
            return;
        }
        let i = (t - self.s.base.get()) as usize;
        let left = match self.s.queue.borrow_mut().get_mut(i) {
            Some(p) => {
                *p = Place::Left;
                true
            }
            None => false,
        };
        if left {
            self.s.unqueued_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// Many handshakes at once start one per round, in arrival order, and one that gives up
    /// its place is skipped without using a start.
    #[test]
    fn starts_are_spread_over_rounds_in_order() {
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt(), async {
            let s = Rc::new(HandshakeSched::new(200));
            {
                let s = s.clone();
                tokio::task::spawn_local(async move { s.run_rounds().await });
            }
            let order = Rc::new(RefCell::new(Vec::new()));
            let mut tasks = Vec::new();
            for i in 0..10 {
                let (s, order) = (s.clone(), order.clone());
                tasks.push(tokio::task::spawn_local(async move {
                    s.turn().await;
                    order.borrow_mut().push(i);
                }));
            }
            // Let every task take its place.
            tokio::task::yield_now().await;
            tokio::task::yield_now().await;
            assert!(s.queued() >= 6, "queued {}", s.queued());
            tasks[7].abort();
            // A "round counter": a task that yields once per round, as the scheduler does.
            let rounds = Rc::new(Cell::new(0u32));
            let counter = {
                let rounds = rounds.clone();
                tokio::task::spawn_local(async move {
                    loop {
                        tokio::task::yield_now().await;
                        rounds.set(rounds.get() + 1);
                    }
                })
            };
            for (i, t) in tasks.into_iter().enumerate() {
                if i != 7 {
                    t.await.unwrap();
                }
            }
            counter.abort();
            assert_eq!(*order.borrow(), vec![0, 1, 2, 3, 4, 5, 6, 8, 9]);
            // At most 3 had started before the counter ran: one round per later start.
            assert!(rounds.get() >= 5, "{} rounds", rounds.get());
            assert_eq!(s.queued(), 0);
            assert!(s.queue.borrow().is_empty());
        });
    }

    /// With N starts per round, a crowd starts N per round, in order (check starts).
    #[test]
    fn several_starts_per_round() {
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt(), async {
            let s = Rc::new(HandshakeSched::with_starts(u32::MAX, 4));
            let started = Rc::new(RefCell::new(Vec::new()));
            let mut tasks = Vec::new();
            for i in 0..10 {
                let (s, started) = (s.clone(), started.clone());
                tasks.push(tokio::task::spawn_local(async move {
                    s.turn().await;
                    started.borrow_mut().push(i);
                }));
            }
            // Every task polled once, no round run yet: the first four went through.
            while s.queued() + (started.borrow().len() as u32) < 10 {
                tokio::task::yield_now().await;
            }
            assert_eq!(*started.borrow(), vec![0, 1, 2, 3]);
            assert_eq!(s.queued(), 6);
            assert!(!s.paused.get(), "no depth: never pauses");
            {
                let s = s.clone();
                tokio::task::spawn_local(async move { s.run_rounds().await });
            }
            for t in tasks {
                t.await.unwrap();
            }
            assert_eq!(*started.borrow(), (0..10).collect::<Vec<_>>());
        });
    }

    /// At `depth` waiting handshakes the `ssl` listeners pause; they resume at half of it.
    #[test]
    fn listeners_pause_at_depth_and_resume_at_half() {
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt(), async {
            let s = Rc::new(HandshakeSched::new(4));
            s.turn().await;
            let mut tasks = Vec::new();
            for _ in 0..5 {
                let s = s.clone();
                tasks.push(tokio::task::spawn_local(async move { s.turn().await }));
            }
            while s.queued() < 5 {
                tokio::task::yield_now().await;
            }
            assert!(s.paused.get());
            assert_eq!(s.pauses.get(), 1);
            let accepting = {
                let s = s.clone();
                tokio::task::spawn_local(async move {
                    s.accept_allowed().await;
                    s.queued()
                })
            };
            {
                let s = s.clone();
                tokio::task::spawn_local(async move { s.run_rounds().await });
            }
            assert_eq!(accepting.await.unwrap(), 2, "resumed at half the depth");
            for t in tasks {
                t.await.unwrap();
            }
            assert_eq!(s.pauses.get(), 1);
            assert!(!s.paused.get());
            s.accept_allowed().await;
        });
    }
}
