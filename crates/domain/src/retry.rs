//! How long a fire waits before its next attempt (`retryBackoff`): the
//! same interval every time (`fixed`, SPEC §5), or doubling from
//! `retryIntervalMs` up to `retryMaxIntervalMs` (`exponential`); either
//! with optional full jitter (a uniform wait between 0 and that delay, so
//! many jobs failing together do not retry together).
//!
//! Pure: the jitter's randomness is a seed the caller passes (the engine
//! mixes the fire and attempt), so every delay can be tested by value.

use crate::schedule::mix64;

/// How the wait between attempts grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryBackoff {
    Fixed,
    Exponential,
}

impl RetryBackoff {
    pub fn as_str(self) -> &'static str {
        match self {
            RetryBackoff::Fixed => "fixed",
            RetryBackoff::Exponential => "exponential",
        }
    }

    pub fn parse(s: &str) -> Option<RetryBackoff> {
        match s {
            "fixed" => Some(RetryBackoff::Fixed),
            "exponential" => Some(RetryBackoff::Exponential),
            _ => None,
        }
    }
}

/// A job's retry timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryTiming {
    pub backoff: RetryBackoff,
    /// `retryIntervalMs`: the first wait (every wait when fixed).
    pub interval_ms: i64,
    /// `retryMaxIntervalMs`: the longest wait of `exponential`.
    pub max_interval_ms: i64,
    /// `retryJitter`: wait a uniform random part of the delay instead.
    pub jitter: bool,
}

impl RetryTiming {
    /// The wait in ms before retry `n` (1 before the second attempt, 2
    /// before the third…); `seed` picks the jittered part.
    pub fn delay_ms(&self, n: u32, seed: u64) -> u64 {
        let interval = self.interval_ms.max(0) as u64;
        let delay = match self.backoff {
            RetryBackoff::Fixed => interval,
            RetryBackoff::Exponential => {
                let cap = self.max_interval_ms.max(0) as u64;
                // 2^(n−1), saturating: past 63 doublings every delay is capped.
                let factor = 1u64.checked_shl(n.saturating_sub(1)).unwrap_or(u64::MAX);
                interval.saturating_mul(factor).min(cap)
            }
        };
        if self.jitter && delay > 0 {
            mix64(seed) % (delay + 1)
        } else {
            delay
        }
    }
}

/// The seed of a fire's retry `n`: its id and the retry mixed, so fires
/// that fail together spread their retries.
pub fn jitter_seed(fire_id: i64, n: u32) -> u64 {
    mix64((fire_id as u64).rotate_left(17) ^ u64::from(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(backoff: RetryBackoff, interval: i64, max: i64, jitter: bool) -> RetryTiming {
        RetryTiming {
            backoff,
            interval_ms: interval,
            max_interval_ms: max,
            jitter,
        }
    }

    #[test]
    fn delays_table() {
        use RetryBackoff::{Exponential, Fixed};
        let cases: [(RetryTiming, u32, u64); 12] = [
            (timing(Fixed, 1000, 3_600_000, false), 1, 1000),
            (timing(Fixed, 1000, 3_600_000, false), 7, 1000),
            // The cap is for growth only: a fixed interval stays as set.
            (timing(Fixed, 5000, 1000, false), 3, 5000),
            (timing(Exponential, 1000, 3_600_000, false), 1, 1000),
            (timing(Exponential, 1000, 3_600_000, false), 2, 2000),
            (timing(Exponential, 1000, 3_600_000, false), 3, 4000),
            (timing(Exponential, 1000, 3_600_000, false), 10, 512_000),
            (timing(Exponential, 1000, 5000, false), 4, 5000),
            (timing(Exponential, 1000, 5000, false), 64, 5000),
            (
                timing(Exponential, 3_600_000, 86_400_000, false),
                200,
                86_400_000,
            ),
            (timing(Exponential, 0, 5000, false), 5, 0),
            (timing(Exponential, 0, 0, true), 5, 0),
        ];
        for (t, n, want) in cases {
            assert_eq!(t.delay_ms(n, 42), want, "{t:?} retry {n}");
        }
    }

    #[test]
    fn full_jitter_stays_within_the_delay_and_spreads() {
        let t = timing(RetryBackoff::Exponential, 1000, 60_000, true);
        for n in 1..=8 {
            let ceiling = timing(RetryBackoff::Exponential, 1000, 60_000, false).delay_ms(n, 0);
            let waits: Vec<u64> = (0..200)
                .map(|fire| t.delay_ms(n, jitter_seed(fire, n)))
                .collect();
            assert!(waits.iter().all(|w| *w <= ceiling), "retry {n}: {waits:?}");
            // Spread over the whole range, not bunched at one end.
            let low = waits.iter().filter(|w| **w < ceiling / 2).count();
            assert!(
                (60..=140).contains(&low),
                "retry {n}: {low} of 200 below half"
            );
        }
        // The same fire and retry always wait the same.
        assert_eq!(
            t.delay_ms(3, jitter_seed(9, 3)),
            t.delay_ms(3, jitter_seed(9, 3))
        );
        let fixed = timing(RetryBackoff::Fixed, 800, 0, true);
        assert!((0..50).all(|f| fixed.delay_ms(1, jitter_seed(f, 1)) <= 800));
    }

    #[test]
    fn names_round_trip() {
        for b in [RetryBackoff::Fixed, RetryBackoff::Exponential] {
            assert_eq!(RetryBackoff::parse(b.as_str()), Some(b));
        }
        assert_eq!(RetryBackoff::parse("linear"), None);
    }
}
