//! [`RestartPolicy`]: when a supervisor restarts a child that died, as a
//! pure value (no processes, no clock of its own), so every case is a unit
//! test.
//!
//! OTP's rule: at most `intensity` restarts within any `period`; one more
//! death inside the period and the supervisor gives up. Here giving up is
//! not forever: once `period` has passed since the last restart, the
//! budget is whole again and the child is tried once more, so a sandbox
//! whose code crashed in a burst comes back by itself. Restarts after the
//! first in a period wait an exponential backoff.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What to do about a child that just died.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// Start it again at once.
    Now,
    /// Start it again after this long.
    After(Duration),
    /// Too many deaths within the period: leave it down until `retry_at`.
    GiveUp {
        /// When the budget is whole again and one more start may be tried.
        retry_at: Instant,
    },
}

/// Restart intensity, period and backoff, and the restarts counted so far.
#[derive(Debug, Clone)]
pub struct RestartPolicy {
    intensity: u32,
    period: Duration,
    backoff_base: Duration,
    backoff_max: Duration,
    recent: VecDeque<Instant>,
}

impl RestartPolicy {
    /// At most `intensity` restarts within any `period`.
    pub fn new(intensity: u32, period: Duration) -> Self {
        RestartPolicy {
            intensity,
            period,
            backoff_base: Duration::from_millis(50),
            backoff_max: Duration::from_secs(3),
            recent: VecDeque::new(),
        }
    }

    /// The wait before the second restart within a period, doubled for each
    /// one after it up to `max`.
    pub fn with_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.backoff_base = base;
        self.backoff_max = max;
        self
    }

    /// The child died at `now`: decide, and count the restart if there is one.
    pub fn on_exit(&mut self, now: Instant) -> Restart {
        self.forget_before(now);
        let n = self.recent.len() as u32;
        if n >= self.intensity {
            let last = self.recent.back().copied().unwrap_or(now);
            return Restart::GiveUp {
                retry_at: last + self.period,
            };
        }
        self.recent.push_back(now);
        match n {
            0 => Restart::Now,
            n => {
                let factor = 1u32.checked_shl(n - 1).unwrap_or(u32::MAX);
                Restart::After(
                    self.backoff_base
                        .saturating_mul(factor)
                        .min(self.backoff_max),
                )
            }
        }
    }

    /// Restarts counted within the period before `now`.
    pub fn recent(&mut self, now: Instant) -> u32 {
        self.forget_before(now);
        self.recent.len() as u32
    }

    /// Forgets every restart counted (a restart on request).
    pub fn reset(&mut self) {
        self.recent.clear();
    }

    /// Most restarts within a period.
    pub fn intensity(&self) -> u32 {
        self.intensity
    }

    /// The period restarts are counted over.
    pub fn period(&self) -> Duration {
        self.period
    }

    fn forget_before(&mut self, now: Instant) {
        while self
            .recent
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= self.period)
        {
            self.recent.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn restarts_at_once_then_backs_off_then_gives_up_within_the_period() {
        let t0 = Instant::now();
        let mut p = RestartPolicy::new(4, 1000 * MS).with_backoff(10 * MS, 25 * MS);
        let table = [
            (0, Restart::Now),
            (1, Restart::After(10 * MS)),
            (2, Restart::After(20 * MS)),
            (3, Restart::After(25 * MS)),
        ];
        for (at, want) in table {
            assert_eq!(p.on_exit(t0 + at * MS), want, "death at {at} ms");
        }
        assert_eq!(p.recent(t0 + 4 * MS), 4);
        assert_eq!(
            p.on_exit(t0 + 4 * MS),
            Restart::GiveUp {
                retry_at: t0 + 1003 * MS
            }
        );
        // Giving up counts no restart.
        assert_eq!(p.recent(t0 + 5 * MS), 4);
    }

    #[test]
    fn deaths_spread_wider_than_the_period_never_give_up() {
        let t0 = Instant::now();
        let mut p = RestartPolicy::new(2, 100 * MS);
        for i in 0..50u32 {
            let r = p.on_exit(t0 + i * 60 * MS);
            assert!(!matches!(r, Restart::GiveUp { .. }), "death {i}: {r:?}");
        }
    }

    #[test]
    fn the_budget_is_whole_again_once_the_period_has_passed() {
        let t0 = Instant::now();
        let mut p = RestartPolicy::new(2, 100 * MS);
        p.on_exit(t0);
        p.on_exit(t0 + MS);
        let Restart::GiveUp { retry_at } = p.on_exit(t0 + 2 * MS) else {
            panic!("a third death within the period gives up")
        };
        assert_eq!(retry_at, t0 + 101 * MS);
        assert_eq!(p.recent(retry_at), 0);
        assert_eq!(p.on_exit(retry_at), Restart::Now);
    }

    #[test]
    fn no_budget_means_no_restart_and_a_reset_restores_it() {
        let t0 = Instant::now();
        let mut p = RestartPolicy::new(0, 100 * MS);
        assert!(matches!(p.on_exit(t0), Restart::GiveUp { .. }));
        let mut p = RestartPolicy::new(1, 100 * MS);
        p.on_exit(t0);
        assert!(matches!(p.on_exit(t0), Restart::GiveUp { .. }));
        p.reset();
        assert_eq!(p.on_exit(t0), Restart::Now);
    }

    #[test]
    fn a_huge_count_cannot_overflow_the_backoff() {
        let t0 = Instant::now();
        let mut p = RestartPolicy::new(100, Duration::from_secs(3600));
        let mut last = Restart::Now;
        for i in 0..100u32 {
            last = p.on_exit(t0 + i * MS);
        }
        assert_eq!(last, Restart::After(Duration::from_secs(3)));
    }
}
