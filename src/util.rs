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
