//! [`RetryPolicy`]: how often, and after how long, a task the
//! infrastructure failed runs again.

use std::time::Duration;

/// Attempts per task and the backoff between them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (at least 1).
    pub max_attempts: u32,
    /// The wait before the second attempt; doubled for each further one.
    pub first_backoff: Duration,
    /// The longest wait between attempts.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// Three attempts, 100 ms then 200 ms apart, give or take a quarter.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            first_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// No retry: one attempt per task.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// The wait after failed attempt `attempt` (1 is the first), spread by
    /// `spread` (any number; the task id's hash, say) by up to a quarter
    /// either way, so that tasks failed by one event do not retry at once.
    pub fn backoff(&self, attempt: u32, spread: u64) -> Duration {
        let doubled = self
            .first_backoff
            .saturating_mul(1 << attempt.saturating_sub(1).min(20));
        let base = doubled.min(self.max_backoff);
        let quarter = base / 4;
        let offset = (spread % 1000) as u32;
        base - quarter + quarter * 2 * offset / 1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_ceiling_and_spreads_by_a_quarter() {
        let policy = RetryPolicy {
            max_attempts: 10,
            first_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
        };
        assert_eq!(policy.backoff(1, 500), Duration::from_millis(100));
        assert_eq!(policy.backoff(2, 500), Duration::from_millis(200));
        assert_eq!(policy.backoff(3, 500), Duration::from_millis(350));
        assert_eq!(policy.backoff(9, 500), Duration::from_millis(350));
        let low = policy.backoff(1, 0);
        let high = policy.backoff(1, 999);
        assert!(low >= Duration::from_millis(75) && high <= Duration::from_millis(125));
        assert!(low < high);
    }
}
