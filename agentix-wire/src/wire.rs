//! Every message that crosses a process boundary.
//!
//! Server <-> worker traffic is [`Frame`], encoded as CBOR by [`crate::codec`].
//! Host <-> server traffic is Socket.IO events whose payloads are the
//! `*Event` structs below: small fields as JSON, and call arguments, results,
//! stream batches, log and trace batches as CBOR bytes in binary attachments
//! ([`Attachment`]), never base64.
//!
//! Log records and trace events leave the worker on a pipe of their own
//! (fd 5) as [`SideBatch`]es, which the server passes to hosts on `/log` and
//! `/trace` without decoding them; hosts ack each batch.
//!
//! A streaming call carries a [`Window`]: the worker sends items in batches
//! and stops when the window is full; the host acknowledges what it consumed,
//! which reopens the window. So a slow consumer slows the producer, and no
//! process buffers more than one window of a stream.

use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;

pub use crate::attachment::{decode_event, Attachment, WithAttachments};
use crate::errors::RemoteError;
use crate::frame_bytes::FrameBytes;
use crate::log_record::LogRecord;
use agentix_trace::{SpanContext, TraceEvent};

/// Socket.IO namespace of the remote-call protocol.
pub const RPC_NAMESPACE: &str = "/rpc";
/// Host -> server: start a call ([`CallEvent`]).
pub const EVENT_CALL: &str = "call";
/// Host -> server: cancel a call ([`CancelEvent`]).
pub const EVENT_CANCEL: &str = "cancel";
/// Server -> host: a call ended with a value ([`ResultEvent`]).
pub const EVENT_RESULT: &str = "call:result";
/// Server -> host: a call ended with an error ([`ErrorEvent`]).
pub const EVENT_ERROR: &str = "call:error";
/// Server -> host: the next items of a streaming call ([`ItemsEvent`]).
pub const EVENT_ITEMS: &str = "call:items";
/// Server -> host: a streaming call ended after its last item ([`EndEvent`]).
pub const EVENT_END: &str = "call:end";
/// Host -> server: the host consumed items of a streaming call ([`AckEvent`]).
pub const EVENT_ACK: &str = "call:ack";
/// Either way: one part of a call's arguments (host -> server) or result
/// (server -> host) past [`crate::part::SPLIT_ABOVE`] bytes ([`PartEvent`]);
/// the `call` or `call:result` event that follows carries the last part.
pub const EVENT_PART: &str = "call:part";
/// Host -> server: the host received one `call:part` of a result
/// ([`PartAckEvent`]); the server keeps only a few parts unacknowledged, so
/// a large result never queues far ahead of other replies.
pub const EVENT_PART_ACK: &str = "call:part:ack";
/// Host -> server, echoed back unchanged: proves the server still answers.
pub const EVENT_HEARTBEAT: &str = "heartbeat";

/// Socket.IO namespace on which the server sends what the sandbox logged.
pub const LOG_NAMESPACE: &str = "/log";
/// Server -> host on `/log`: a batch of records ([`LogsEvent`]).
pub const EVENT_RECORDS: &str = "records";

/// Namespaces Agentix itself uses; plugins cannot claim them.
pub const RESERVED_NAMESPACES: [&str; 3] = [RPC_NAMESPACE, LOG_NAMESPACE, TRACE_NAMESPACE];

/// Why `path` cannot be a plugin namespace, if it cannot.
pub fn check_plugin_path(path: &str) -> Result<(), String> {
    if RESERVED_NAMESPACES.contains(&path) {
        return Err(format!(
            "`{path}` is reserved: /rpc, /log and /trace belong to Agentix; give the plugin a namespace of its own"
        ));
    }
    if !path.starts_with('/') || path.len() < 2 || path.contains(['?', '#', ' ']) {
        return Err(format!(
            "`{path}` is not a namespace path: it must start with `/`, like `/my-plugin`"
        ));
    }
    Ok(())
}

/// Host -> server on `/log` and `/trace`: one batch was handled (flow control:
/// the server sends a host only a few unacknowledged batches).
pub const EVENT_SIDE_ACK: &str = "ack";
/// Socket.IO namespace on which the server sends the sandbox's trace events.
pub const TRACE_NAMESPACE: &str = "/trace";
/// Server -> host on `/trace`: a batch of trace events ([`TracesEvent`]).
pub const EVENT_TRACE_EVENTS: &str = "events";

/// File descriptor on which the worker reads frames from the server.
pub const WORKER_FRAME_IN_FD: i32 = 3;
/// File descriptor on which the worker writes frames to the server.
pub const WORKER_FRAME_OUT_FD: i32 = 4;
/// File descriptor on which the worker writes side-channel frames (logs):
/// a pipe of its own, so a flood of logs never delays a call's result.
pub const WORKER_SIDE_OUT_FD: i32 = 5;
/// The read end of the worker's own stdout pipe, for it to capture its
/// output in order with its logs (see `agentix_worker::output_capture`).
pub const WORKER_STDOUT_FD: i32 = 6;
/// The read end of the worker's own stderr pipe.
pub const WORKER_STDERR_FD: i32 = 7;
/// Environment variable holding the filter of `tracing` spans a worker
/// bridges into agentix spans.
pub const ENV_TRACING_SPANS: &str = "AGENTIX_TRACING_SPANS";
/// Environment variable naming the directory the files plugin keeps every
/// path beneath (the sandbox's own directory, for the local provider).
pub const ENV_FILES_ROOT: &str = "AGENTIX_FILES_ROOT";
/// Environment variable carrying the worker id the server assigned.
pub const ENV_WORKER_ID: &str = "AGENTIX_WORKER_ID";

/// One frame on the server <-> worker pipes, tagged by its variant name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
// Externally tagged (`{"call": {..}}`): an internally tagged enum makes
// serde buffer each frame as a generic tree before decoding it, which
// dominated the cost of large `logs` frames.
pub enum Frame {
    /// Worker -> server, once at boot: the worker is ready to take calls.
    #[serde(rename = "ready")]
    Ready {
        /// Id the server gave this worker (`AGENTIX_WORKER_ID`).
        worker_id: String,
        /// The worker's process id.
        pid: u32,
        /// Number of remote functions linked into the worker.
        functions: u32,
        /// Agentix version of the worker.
        version: String,
        /// Whether the worker reads its own stdout and stderr; if not, the
        /// server does.
        #[serde(default)]
        captures_output: bool,
    },
    /// Server -> worker: run `target` with CBOR `args`.
    #[serde(rename = "call")]
    Call {
        /// Call id, unique per worker lifetime.
        id: u64,
        /// Wire name of the remote function (`module::path::name`).
        target: String,
        /// CBOR-encoded arguments (an array, or a map by parameter name);
        /// the frame's tail on the pipe.
        args: FrameBytes,
        /// For a streaming call, how far the worker may run ahead of the host.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<Window>,
        /// The host's trace context: the call's spans are its children.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<SpanContext>,
    },
    /// Server -> worker: the host consumed this much of stream `id`, which
    /// frees that much of its window.
    #[serde(rename = "ack")]
    Ack {
        /// Call id.
        id: u64,
        /// Items consumed since the last ack.
        items: u64,
        /// Their size in bytes of CBOR.
        bytes: u64,
    },
    /// Server -> worker: stop call `id`; the worker drops its task.
    #[serde(rename = "cancel")]
    Cancel {
        /// Call id to cancel.
        id: u64,
    },
    /// Worker -> server: call `id` returned this CBOR value.
    #[serde(rename = "result")]
    Result {
        /// Call id.
        id: u64,
        /// CBOR-encoded return value; the frame's tail on the pipe.
        value: FrameBytes,
    },
    /// Worker -> server: the next items of stream `id`, each CBOR-encoded.
    #[serde(rename = "items")]
    Items {
        /// Call id.
        id: u64,
        /// The items, in order.
        items: Vec<ByteBuf>,
    },
    /// Worker -> server: stream `id` ended after its last item.
    #[serde(rename = "end")]
    End {
        /// Call id.
        id: u64,
    },
    /// Either way: a part of the arguments (server -> worker) or the result
    /// (worker -> server) of call `id`; the `call` or `result` frame that
    /// follows carries the last part ([`crate::part`]).
    #[serde(rename = "part")]
    Part {
        /// Call id.
        id: u64,
        /// Size of the whole payload, parts and last piece together.
        total: u64,
        /// This part; the frame's tail on the pipe.
        bytes: FrameBytes,
    },
    /// Server -> worker: answer with `pong` at once (a frozen worker does
    /// not, which `/health` reports).
    #[serde(rename = "ping")]
    Ping {
        /// Echoed in the pong.
        seq: u64,
    },
    /// Worker -> server: the answer to `ping` `seq`.
    #[serde(rename = "pong")]
    Pong {
        /// The ping's sequence number.
        seq: u64,
    },
    /// Worker -> server: open plugin namespace `path` (forward its events).
    #[serde(rename = "sio_open")]
    SioOpen {
        /// The namespace path, like `/my-plugin`.
        path: String,
    },
    /// Worker -> server: emit `event` with `data` to the hosts on `path`;
    /// server -> worker: a host emitted `event` with `data` on `path`.
    #[serde(rename = "sio_event")]
    SioEvent {
        /// The namespace path.
        path: String,
        /// The event name (any string; `:` included).
        event: String,
        /// The payload, as the JSON text it is (never parsed on the way);
        /// binary attachments are placeholders in it.
        data: crate::json_text::JsonText,
        /// The payload's binary attachments, in placeholder order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attachments: Vec<FrameBytes>,
    },
    /// Worker -> server, on the side pipe: log records, in order (the
    /// worker already appended them to the sandbox log file).
    #[serde(rename = "logs")]
    Logs {
        /// The records, encoded once and passed on undecoded.
        batch: SideBatch,
        /// The last stdout and stderr lines among them, as text: what the
        /// server quotes if the worker dies (it never decodes batches).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        output: Vec<String>,
    },
    /// Worker -> server, on the side pipe: trace events, in order.
    #[serde(rename = "traces")]
    Traces {
        /// The events, encoded once and passed on undecoded.
        batch: SideBatch,
    },
    /// Worker -> server: call `id` ended with an error.
    #[serde(rename = "error")]
    Error {
        /// Call id.
        id: u64,
        /// What went wrong.
        error: RemoteError,
    },
}

impl Frame {
    /// The bytes of payload it carries: what holding it in a queue costs,
    /// give or take a few fixed fields.
    pub fn payload_len(&self) -> usize {
        match self {
            Frame::Call { target, args, .. } => target.len() + args.0.len(),
            Frame::Result { value, .. } => value.0.len(),
            Frame::Items { items, .. } => items.iter().map(|item| item.len()).sum(),
            Frame::Part { bytes, .. } => bytes.0.len(),
            Frame::SioOpen { path } => path.len(),
            Frame::SioEvent {
                path,
                event,
                data,
                attachments,
            } => {
                path.len()
                    + event.len()
                    + data.raw().get().len()
                    + attachments.iter().map(|a| a.0.len()).sum::<usize>()
            }
            Frame::Logs { batch, output } => {
                batch.cbor.len() + output.iter().map(String::len).sum::<usize>()
            }
            Frame::Traces { batch } => batch.cbor.len(),
            Frame::Ready { .. }
            | Frame::Ack { .. }
            | Frame::Cancel { .. }
            | Frame::End { .. }
            | Frame::Ping { .. }
            | Frame::Pong { .. }
            | Frame::Error { .. } => 0,
        }
    }
}

/// How far a streaming call may run ahead of its consumer: at most `items`
/// items and about `bytes` bytes (one item may overshoot) produced but not
/// yet acknowledged by the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// Items produced but not yet consumed.
    pub items: u64,
    /// Bytes of CBOR produced but not yet consumed.
    pub bytes: u64,
}

impl Window {
    /// The window a stream gets unless the caller picks one.
    pub const DEFAULT: Window = Window {
        items: 4096,
        bytes: 4 << 20,
    };

    /// Whether `items` and `bytes` outstanding still leave room for another item.
    pub fn has_room(&self, items: u64, bytes: u64) -> bool {
        items < self.items && bytes < self.bytes
    }
}

/// Payload of the host's `call` event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CallEvent {
    /// Call id chosen by the host, unique per connection.
    pub id: u64,
    /// Wire name of the remote function.
    pub target: String,
    /// The CBOR-encoded arguments.
    pub args: Attachment,
    /// Present for a streaming call: its flow-control window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<Window>,
    /// The host's trace context, when the call was made inside a span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<SpanContext>,
    /// The host takes a large result as `call:part` events and acknowledges
    /// each with `call:part:ack`; without it, the result comes as one event.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub parts: bool,
}

/// Payload of the host's `call:part:ack` event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartAckEvent {
    /// The host's call id.
    pub id: u64,
}

/// Payload of a `call:part` event: one part of call `id`'s arguments or
/// result, sent before the event that carries the last part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartEvent {
    /// The host's call id.
    pub id: u64,
    /// Size of the whole payload, every part and the last piece together.
    pub total: u64,
    /// This part.
    pub bytes: Attachment,
}

/// Payload of the host's `call:ack` event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AckEvent {
    /// The host's call id.
    pub id: u64,
    /// Items consumed since the last ack.
    pub items: u64,
    /// Their size in bytes of CBOR.
    pub bytes: u64,
}

/// Payload of the server's `call:items` event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ItemsEvent {
    /// The host's call id.
    pub id: u64,
    /// A CBOR array of byte strings, each one CBOR-encoded item.
    pub items: Attachment,
}

/// Payload of the server's `call:end` event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EndEvent {
    /// The host's call id.
    pub id: u64,
}

/// Payload of the host's `cancel` event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CancelEvent {
    /// The host's call id.
    pub id: u64,
}

/// Payload of the server's `call:result` event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResultEvent {
    /// The host's call id.
    pub id: u64,
    /// The CBOR-encoded return value.
    pub value: Attachment,
}

/// Payload of the server's `call:error` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorEvent {
    /// The host's call id.
    pub id: u64,
    /// What went wrong.
    pub error: RemoteError,
}

impl ErrorEvent {
    /// Call `id`'s error, [bounded](RemoteError::bounded) to what one
    /// socket message carries.
    pub fn new(id: u64, error: RemoteError) -> Self {
        ErrorEvent {
            id,
            error: error.bounded(),
        }
    }
}

/// Payload of the server's `records` event on `/log`: a CBOR array of
/// [`LogRecord`]s, in the order the sandbox produced them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LogsEvent {
    /// The CBOR-encoded records.
    pub cbor: Attachment,
}

/// Side-channel items (log records or trace events) as one CBOR array: the
/// worker encodes a batch once, the server passes it to hosts as is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideBatch {
    /// How many items the array holds.
    pub count: u32,
    /// The CBOR array.
    pub cbor: ByteBuf,
}

impl SideBatch {
    /// Encodes `items`.
    pub fn encode<T: Serialize>(items: &[T]) -> Self {
        let mut bytes = Vec::new();
        // Writing into a Vec cannot fail, and these types always serialise.
        ciborium::into_writer(items, &mut bytes).expect("side-channel items encode");
        SideBatch {
            count: items.len() as u32,
            cbor: ByteBuf::from(bytes),
        }
    }

    /// Decodes the items.
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<Vec<T>, String> {
        decode_cbor(&self.cbor)
    }

    /// The CBOR array as an attachment, without copying it.
    pub fn into_attachment(self) -> Attachment {
        Attachment::new(self.cbor.into_vec())
    }
}

impl LogsEvent {
    /// The event carrying `batch`, without decoding it.
    pub fn from_batch(batch: SideBatch) -> Self {
        LogsEvent {
            cbor: batch.into_attachment(),
        }
    }

    /// Decodes the records.
    pub fn decode(&self) -> Result<Vec<LogRecord>, String> {
        decode_cbor(self.cbor.as_bytes())
    }
}

fn decode_cbor<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    ciborium::from_reader(bytes).map_err(|e| {
        format!(
            "not the expected CBOR: {}",
            crate::cbor::decode_error_text(e)
        )
    })
}

/// Payload of the server's `events` event on `/trace`: a CBOR array of
/// [`TraceEvent`]s, in the order the sandbox produced them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TracesEvent {
    /// The CBOR-encoded events.
    pub cbor: Attachment,
}

impl TracesEvent {
    /// The event carrying `batch`, without decoding it.
    pub fn from_batch(batch: SideBatch) -> Self {
        TracesEvent {
            cbor: batch.into_attachment(),
        }
    }

    /// Decodes the events.
    pub fn decode(&self) -> Result<Vec<TraceEvent>, String> {
        decode_cbor(self.cbor.as_bytes())
    }
}

macro_rules! with_attachments {
    ($($event:ty => $($field:ident),+;)+) => {$(
        impl WithAttachments for $event {
            fn attachments_mut(&mut self) -> Vec<&mut Attachment> {
                vec![$(&mut self.$field),+]
            }
        }
    )+};
}

with_attachments! {
    CallEvent => args;
    PartEvent => bytes;
    ResultEvent => value;
    ItemsEvent => items;
    LogsEvent => cbor;
    TracesEvent => cbor;
}

macro_rules! without_attachments {
    ($($event:ty),+) => {$(
        impl WithAttachments for $event {
            fn attachments_mut(&mut self) -> Vec<&mut Attachment> {
                Vec::new()
            }
        }
    )+};
}

without_attachments!(
    AckEvent,
    PartAckEvent,
    CancelEvent,
    EndEvent,
    ErrorEvent,
    serde_json::Value
);
