//! Token buckets keyed by a string: the per-key request rate, and the per-address rate of
//! key lookups. The number of buckets is bounded, so keys a client makes up cannot grow it
//! without end.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Buckets a [`RateLimiter`] keeps before it forgets idle ones.
const MAX_BUCKETS: usize = 100_000;

/// A token bucket per key (an API key, a client address): `rate` requests a second, bursts
/// of `burst`. It keeps at most [`MAX_BUCKETS`] buckets: beyond, the ones that have refilled
/// (idle keys) are forgotten, then the least recently used tenth.
#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    /// A limiter; `rate == 0` lets everything through.
    pub fn new(rate: u32, burst: u32) -> Self {
        RateLimiter {
            rate: f64::from(rate),
            burst: f64::from(burst.max(rate).max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Forgets the buckets that have refilled (they would start full anyway); if that frees
    /// less than a tenth, also the least recently used tenth (one pass for many inserts).
    fn make_room(&self, buckets: &mut HashMap<String, (f64, Instant)>, now: Instant) {
        let (rate, burst) = (self.rate, self.burst);
        buckets.retain(|_, (tokens, at)| {
            *tokens + now.duration_since(*at).as_secs_f64() * rate < burst
        });
        if buckets.len() >= MAX_BUCKETS - MAX_BUCKETS / 10 {
            let mut ages: Vec<(Instant, String)> = buckets
                .iter()
                .map(|(k, (_, at))| (*at, k.clone()))
                .collect();
            let cut = ages.len() / 10;
            ages.select_nth_unstable_by_key(cut, |(at, _)| *at);
            for (_, key) in &ages[..cut] {
                buckets.remove(key);
            }
        }
    }

    /// Takes a token for `key`; `Err(wait)` when its bucket is empty.
    pub fn take(&self, key: &str) -> Result<(), Duration> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(key) {
            self.make_room(&mut buckets, now);
        }
        let (tokens, at) = buckets.entry(key.to_owned()).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.rate).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *tokens) / self.rate))
        }
    }
}
