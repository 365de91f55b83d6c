//! [`StartThrottle`]: how many sandbox creates are in flight at once,
//! adapted to how the provider holds up.
//!
//! Additive increase, multiplicative decrease, on what each create shows: a
//! provider error halves the limit, a create much slower than the fastest
//! seen (and slower than [`QUICK`] in itself) cuts it by a fifth, any other
//! adds one, up to the pool's `max_starting`. A Docker engine under load
//! answers slower long before it fails, so the pool backs off before the
//! errors start, and comes back as soon as creates are fast again. No fixed
//! sleep anywhere. The fastest create seen drifts up by 1% a create, so a
//! provider that is slower for good becomes the new normal.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// A create slower than this many times the fastest seen counts as slow.
const SLOW: f64 = 1.5;
/// A create this quick is never slow, however much quicker the fastest
/// was: a provider that answers within a quarter second is not overloaded.
/// Local creates (a few milliseconds alone) on a machine busy with
/// hundreds of sandboxes vary by more than [`SLOW`] around their fastest,
/// and judged by that alone the limit sat at 1–4 with half the CPU idle:
/// 1,000 local sandboxes took 1.11 times as long through a pool as all at
/// once (median of 3 runs). A Docker create takes about 170 ms, so its
/// slowing down is still seen.
const QUICK: Duration = Duration::from_millis(250);
/// How far a slow create cuts the limit.
const SLOW_CUT: f64 = 0.8;
/// How far a failed create cuts it.
const ERROR_CUT: f64 = 0.5;
/// How far the fastest create seen drifts up with each create.
const BASELINE_DRIFT: f64 = 1.01;

/// The limit on creates in flight, and the creates holding it.
#[derive(Debug)]
pub struct StartThrottle {
    max: usize,
    state: Mutex<State>,
    freed: Notify,
}

#[derive(Debug)]
struct State {
    limit: f64,
    in_flight: usize,
    fastest: Option<Duration>,
}

/// One create's place under the limit; say how it went with
/// [`StartPermit::finished`] (dropping it counts as neither fast nor slow).
#[derive(Debug)]
pub struct StartPermit {
    throttle: Arc<StartThrottle>,
}

impl StartThrottle {
    /// A throttle allowing up to `max` creates at once, starting there.
    pub fn new(max: usize) -> Arc<StartThrottle> {
        let max = max.max(1);
        Arc::new(StartThrottle {
            max,
            state: Mutex::new(State {
                limit: max as f64,
                in_flight: 0,
                fastest: None,
            }),
            freed: Notify::new(),
        })
    }

    /// Waits for a place under the current limit.
    pub async fn acquire(self: &Arc<Self>) -> StartPermit {
        loop {
            let freed = self.freed.notified();
            {
                let mut state = self.lock();
                if (state.in_flight as f64) < state.limit.floor().max(1.0) {
                    state.in_flight += 1;
                    return StartPermit {
                        throttle: self.clone(),
                    };
                }
            }
            freed.await;
        }
    }

    /// The current limit on creates in flight.
    pub fn limit(&self) -> usize {
        self.lock().limit.floor().max(1.0) as usize
    }

    /// Creates in flight now.
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn learn(&self, took: Duration, failed: bool) {
        let mut state = self.lock();
        let fastest = match state.fastest {
            Some(fastest) => fastest.mul_f64(BASELINE_DRIFT).min(took),
            None => took,
        };
        state.fastest = Some(fastest);
        state.limit = if failed {
            (state.limit * ERROR_CUT).max(1.0)
        } else if took > QUICK && took.as_secs_f64() > fastest.as_secs_f64() * SLOW {
            (state.limit * SLOW_CUT).max(1.0)
        } else {
            (state.limit + 1.0).min(self.max as f64)
        };
    }
}

impl StartPermit {
    /// Ends the create: it took `took`, and `failed` says whether the
    /// provider refused or failed it (which cuts the limit hardest).
    pub fn finished(self, took: Duration, failed: bool) {
        self.throttle.learn(took, failed);
    }
}

impl Drop for StartPermit {
    fn drop(&mut self) {
        self.throttle.lock().in_flight -= 1;
        self.throttle.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `n` creates of `ms` each, one after another, through `throttle`.
    async fn creates(throttle: &Arc<StartThrottle>, n: usize, ms: u64, failed: bool) {
        for _ in 0..n {
            let permit = throttle.acquire().await;
            permit.finished(Duration::from_millis(ms), failed);
        }
    }

    #[tokio::test]
    async fn the_limit_falls_when_creates_slow_down_and_rises_when_they_recover() {
        let throttle = StartThrottle::new(32);
        creates(&throttle, 50, 200, false).await;
        assert_eq!(throttle.limit(), 32);
        creates(&throttle, 10, 400, false).await;
        let slowed = throttle.limit();
        assert!(slowed <= 4, "twice as slow, the limit is {slowed}");
        creates(&throttle, 40, 200, false).await;
        assert_eq!(throttle.limit(), 32, "recovered");
        creates(&throttle, 3, 200, true).await;
        assert_eq!(throttle.limit(), 4, "halved by each failure");
    }

    #[tokio::test]
    async fn quick_creates_never_cut_the_limit_however_they_vary() {
        let throttle = StartThrottle::new(32);
        creates(&throttle, 20, 5, false).await;
        // Ten to fifty times the fastest, all under a quarter second.
        for ms in [50, 240, 120, 200, 90, 249].repeat(5) {
            creates(&throttle, 1, ms, false).await;
        }
        assert_eq!(throttle.limit(), 32);
        // Past it, slowing down counts again.
        creates(&throttle, 5, 1000, false).await;
        assert!(throttle.limit() < 32, "the limit is {}", throttle.limit());
    }

    #[tokio::test]
    async fn no_more_creates_than_the_limit_are_in_flight() {
        let throttle = StartThrottle::new(3);
        let held: Vec<StartPermit> =
            futures_util::future::join_all((0..3).map(|_| throttle.acquire())).await;
        assert_eq!(throttle.in_flight(), 3);
        let fourth = tokio::time::timeout(Duration::from_millis(50), throttle.acquire()).await;
        assert!(fourth.is_err(), "a fourth create got a place");
        drop(held);
        let fourth = tokio::time::timeout(Duration::from_millis(50), throttle.acquire()).await;
        assert!(fourth.is_ok());
    }
}
