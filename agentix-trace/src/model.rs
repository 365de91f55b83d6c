//! The data every trace processor sees: traces, spans and their events.
//!
//! The same values travel worker -> server -> host (CBOR on the side pipe,
//! JSON on `/trace`), so a host processor sees a sandbox span exactly as a
//! sandbox processor would, plus `origin` naming the sandbox it came from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A trace id: 32 hex digits.
pub type TraceId = String;
/// A span id: 16 hex digits.
pub type SpanId = String;

/// A trace: the root a group of spans belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceData {
    /// Its id.
    pub trace_id: TraceId,
    /// Its name (`eval`).
    pub name: String,
    /// Start, in microseconds since the Unix epoch.
    pub start_us: u64,
    /// End, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_us: Option<u64>,
    /// The sandbox it was replayed from; `None` where it was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

/// How a span ended.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "code", content = "message")]
pub enum SpanStatus {
    /// Nobody said.
    #[default]
    Unset,
    /// It succeeded.
    Ok,
    /// It failed, with this message.
    Error(String),
}

/// Something that happened at one moment inside a span (`first_token`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanEvent {
    /// Its name.
    pub name: String,
    /// When, in microseconds since the Unix epoch.
    pub ts_us: u64,
    /// Its attributes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, serde_json::Value>,
}

/// A span: one timed step inside a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanData {
    /// The trace it belongs to.
    pub trace_id: TraceId,
    /// Its id.
    pub span_id: SpanId,
    /// The enclosing span, if any (possibly in another process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<SpanId>,
    /// Its name (`agent.step`).
    pub name: String,
    /// Start, in microseconds since the Unix epoch.
    pub start_us: u64,
    /// End, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_us: Option<u64>,
    /// Its attributes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, serde_json::Value>,
    /// Events recorded on it, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<SpanEvent>,
    /// How it ended.
    #[serde(default)]
    pub status: SpanStatus,
    /// The sandbox it was replayed from; `None` where it was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

/// One lifecycle event, as processors receive them and the wire carries them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "data", rename_all = "snake_case")]
pub enum TraceEvent {
    /// A trace started.
    TraceStart(TraceData),
    /// A trace ended.
    TraceEnd(TraceData),
    /// A span started.
    SpanStart(SpanData),
    /// A span ended.
    SpanEnd(SpanData),
}

impl TraceEvent {
    /// Marks the event as replayed from sandbox `origin`.
    pub fn with_origin(mut self, origin: &str) -> Self {
        let slot = match &mut self {
            TraceEvent::TraceStart(t) | TraceEvent::TraceEnd(t) => &mut t.origin,
            TraceEvent::SpanStart(s) | TraceEvent::SpanEnd(s) => &mut s.origin,
        };
        slot.get_or_insert_with(|| origin.to_owned());
        self
    }
}

/// A fresh random id of `bytes` (8 or 16) bytes, hex-encoded. Each thread
/// runs its own generator seeded from the kernel, so ids from different
/// processes and threads do not collide and making one costs no syscall.
pub fn random_id(bytes: usize) -> String {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new(seed());
    }
    let mut out = String::with_capacity(bytes * 2);
    for _ in 0..bytes.div_ceil(8) {
        let word = STATE.with(|s| {
            // splitmix64: a full-period generator with well-mixed output.
            let next = s.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
            s.set(next);
            let mut z = next;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        });
        out.push_str(&format!("{word:016x}"));
    }
    out.truncate(bytes * 2);
    out
}

/// 64 random bits from the kernel (time and pid if it cannot give them).
fn seed() -> u64 {
    let mut buf = [0u8; 8];
    // SAFETY: getrandom writes at most `buf.len()` bytes into `buf`.
    let got = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if got == buf.len() as isize {
        u64::from_ne_bytes(buf)
    } else {
        now_us() ^ (u64::from(std::process::id()) << 40)
    }
}

/// Microseconds since the Unix epoch.
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}
