//! [`ProgressDisplay`]: what a run shows while it runs. On a terminal a
//! live bar (indicatif); elsewhere a plain line every few seconds; both
//! also as a `tracing` event (target `agentix_fleet::progress`) with the
//! [`PoolStats`] fields, so a service can export them.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use crate::pool_stats::PoolStats;

/// How a run shows its progress.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProgressDisplay {
    /// A bar when stderr is a terminal, plain lines otherwise.
    #[default]
    Auto,
    /// A live bar on stderr.
    Bar,
    /// A plain line on stderr every few seconds.
    Lines,
    /// Only the `tracing` events.
    Off,
}

/// How often a plain line (and the tracing event) comes.
const LINE_EVERY: Duration = Duration::from_secs(5);
/// How often the bar is redrawn.
const BAR_EVERY: Duration = Duration::from_millis(200);

/// One line of progress: counts, rate and time left.
pub fn describe(stats: &PoolStats, elapsed: Duration) -> String {
    let ended = stats.done + stats.failed;
    let rate = ended as f64 / elapsed.as_secs_f64().max(1e-3);
    let eta = match rate > 0.0 {
        true => format!("{:.0}s", stats.remaining() as f64 / rate),
        false => "?".to_owned(),
    };
    format!(
        "{ended}/{} ended: {} done, {} failed, {} retrying, {} running, {} starting \
         (limit {}), {} warm, {} sandboxes; {rate:.1}/s, eta {eta}",
        stats.tasks,
        stats.done,
        stats.failed,
        stats.retrying,
        stats.running,
        stats.starting,
        stats.start_limit,
        stats.warm,
        stats.sandboxes,
    )
}

/// Shows `stats()` as `display` says until `finished` resolves; the last
/// state is shown once more at the end.
pub(crate) async fn show(
    display: ProgressDisplay,
    stats: impl Fn() -> PoolStats,
    finished: impl std::future::Future<Output = ()>,
) {
    let started = Instant::now();
    let bar = match display {
        ProgressDisplay::Bar => true,
        ProgressDisplay::Auto => std::io::stderr().is_terminal(),
        ProgressDisplay::Lines | ProgressDisplay::Off => false,
    };
    let lines = display != ProgressDisplay::Off && !bar;
    let progress = bar.then(|| {
        let bar = indicatif::ProgressBar::new(stats().tasks);
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        bar
    });
    let report = |last: &mut Instant, force: bool| {
        let now = stats();
        if let Some(bar) = &progress {
            bar.set_length(now.tasks);
            bar.set_position(now.done + now.failed);
            bar.set_message(describe(&now, started.elapsed()));
        }
        if force || last.elapsed() >= LINE_EVERY {
            *last = Instant::now();
            tracing::info!(
                target: "agentix_fleet::progress",
                tasks = now.tasks,
                done = now.done,
                failed = now.failed,
                retries = now.retries,
                running = now.running,
                starting = now.starting,
                start_limit = now.start_limit,
                warm = now.warm,
                sandboxes = now.sandboxes,
                "fleet progress"
            );
            if lines {
                eprintln!("fleet: {}", describe(&now, started.elapsed()));
            }
        }
    };
    if let Some(bar) = &progress {
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
    }
    let mut last = Instant::now();
    tokio::pin!(finished);
    let tick = if bar { BAR_EVERY } else { LINE_EVERY };
    loop {
        tokio::select! {
            () = &mut finished => break,
            () = tokio::time::sleep(tick) => report(&mut last, false),
        }
    }
    report(&mut last, true);
    if let Some(bar) = progress {
        bar.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_says_what_ended_how_fast_and_how_long_is_left() {
        let stats = PoolStats {
            tasks: 100,
            done: 40,
            failed: 10,
            running: 8,
            start_limit: 8,
            sandboxes: 8,
            ..PoolStats::default()
        };
        let line = describe(&stats, Duration::from_secs(10));
        assert!(
            line.starts_with("50/100 ended: 40 done, 10 failed"),
            "{line}"
        );
        assert!(line.contains("5.0/s, eta 10s"), "{line}");
    }
}
