//! [`configure_logging`]: a readable default for the host's own log output.
//!
//! The host's own lines read `time LEVEL [context] target: message`, with
//! `default_context` (say `"host"`) as context; lines replayed from a
//! sandbox read `time LEVEL target: [sandbox-id] message`, keeping the
//! sandbox's own target, with the time the sandbox made the record (UTC,
//! RFC 3339, to the microsecond), not the time it arrived. `RUST_LOG`
//! filters both the usual way.

use std::fmt;

use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::log_replay::REPLAY_MODULE;

/// Installs a global `tracing` subscriber (with the `log` bridge) printing
/// host and sandbox lines to stderr, filtered by `RUST_LOG` (default
/// `info`). Fails if the program already installed one.
pub fn configure_logging(
    default_context: &str,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .event_format(ContextFormat {
            context: default_context.to_owned(),
        })
        .try_init()
}

/// Prefixes host lines with the host's context; sandbox lines carry theirs.
struct ContextFormat {
    context: String,
}

impl<S, N> FormatEvent<S, N> for ContextFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        let sandbox_time = crate::log_replay::SANDBOX_TIME.with(|t| t.get());
        let time = match sandbox_time {
            Some(us) => std::time::UNIX_EPOCH + std::time::Duration::from_micros(us),
            None => std::time::SystemTime::now(),
        };
        write!(writer, "{}", humantime::format_rfc3339_micros(time))?;
        write!(writer, " {:>5} ", meta.level())?;
        // A replayed message starts with its sandbox id in brackets.
        if meta.module_path() != Some(REPLAY_MODULE) {
            write!(writer, "[{}] ", self.context)?;
        }
        write!(writer, "{}: ", meta.target())?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Collects what the formatter writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_replayed_line_shows_the_time_the_sandbox_made_it() {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .event_format(ContextFormat {
                context: "host".into(),
            })
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            // 2001-09-09T01:46:40.000123Z
            crate::log_replay::SANDBOX_TIME.with(|t| t.set(Some(1_000_000_000_000_123)));
            tracing::info!("from the sandbox");
            crate::log_replay::SANDBOX_TIME.with(|t| t.set(None));
            tracing::info!("from the host");
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("2001-09-09T01:46:40.000123Z  INFO "),
            "{text}"
        );
        assert!(!lines[1].starts_with("2001"), "host lines show now: {text}");
    }
}
