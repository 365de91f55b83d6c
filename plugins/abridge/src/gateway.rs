//! [`Gateway`]: the host half, one per upstream: an OpenAI-compatible one
//! (OpenAI, vLLM, SGLang, any compatible server) or Anthropic's (see
//! [`crate::upstream_shape`]). It holds the key; the sandbox never sees it.
//! Its `namespace()`, which serves a sandbox and starts the actor that
//! hears about its streams, lives with that actor in
//! [`crate::gateway_actor`].

use std::time::Duration;

use agentix::protocol::ReplyThen;
use agentix::trace::{self, SpanContext};
use agentix::{HostEnd, JsonText};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::OwnedSemaphorePermit;

use crate::anthropic;
use crate::exchange::{Api, StreamHead, StreamOpen, UpstreamAnswer, UpstreamRequest};
use crate::exchange_log::ExchangeLog;
use crate::gateway_stream::{Pump, Pumping, Started, StreamControl, StreamPumps};
use crate::observation::{Observation, CLIENT_GONE};
use crate::upstream::{self, send, Outgoing, UpstreamClient};
use crate::upstream_shape::{UpstreamCall, UpstreamShape};
use crate::Abridge;

/// How long an upstream may take to answer in full, unless set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// Requests one sandbox may have in flight at once, unless set.
pub const DEFAULT_MAX_CONCURRENT: usize = 64;

/// An upstream, with its key and an optional model that replaces whatever
/// model the agent asked for, and how sandboxes reach it.
#[derive(Debug, Clone)]
pub struct Gateway {
    shape: UpstreamShape,
    base_url: String,
    key: Option<String>,
    model: Option<String>,
    timeout: Duration,
    log: Option<ExchangeLog>,
    max_concurrent: usize,
    extra_roots: Vec<Vec<u8>>,
    client: Result<UpstreamClient, String>,
}

impl Gateway {
    /// A gateway to the OpenAI-compatible API at `base_url`
    /// (`http://127.0.0.1:8000/v1`: the part before `/chat/completions`).
    pub fn openai(base_url: impl Into<String>) -> Self {
        Gateway::new(UpstreamShape::OpenAi, base_url.into())
    }

    /// A gateway to Anthropic's Messages API at `base_url`
    /// (`https://api.anthropic.com/v1`: the part before `/messages`).
    pub fn anthropic(base_url: impl Into<String>) -> Self {
        Gateway::new(UpstreamShape::Anthropic, base_url.into())
    }

    fn new(shape: UpstreamShape, base_url: String) -> Self {
        Gateway {
            shape,
            base_url: base_url.trim_end_matches('/').to_owned(),
            key: None,
            model: None,
            timeout: DEFAULT_TIMEOUT,
            log: None,
            max_concurrent: DEFAULT_MAX_CONCURRENT,
            extra_roots: Vec::new(),
            client: agentix_upstream::client_config(&[]).map(agentix_upstream::client),
        }
    }

    /// The key sent upstream: as `Authorization: Bearer` to an OpenAI
    /// upstream, as `x-api-key` to Anthropic.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sends every request to `model`, whatever the agent asked for (the
    /// policy being trained, say).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// How long an upstream answer may take (10 minutes unless set); past
    /// it the agent gets a 504.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = limit;
        self
    }

    /// Also trusts the DER-encoded certificate `der` for `https://`
    /// upstreams (a private CA's, say); the public roots are trusted
    /// anyway. A certificate that does not parse makes every request a 502
    /// saying so.
    pub fn add_root_certificate(mut self, der: impl Into<Vec<u8>>) -> Self {
        self.extra_roots.push(der.into());
        self.client =
            agentix_upstream::client_config(&self.extra_roots).map(agentix_upstream::client);
        self
    }

    /// How many requests one sandbox may have in flight at once (64 unless
    /// set); past it the agent gets a 429 with `Retry-After: 1`, which the
    /// SDKs retry.
    pub fn max_concurrent(mut self, requests: usize) -> Self {
        self.max_concurrent = requests;
        self
    }

    /// Sends a record of every exchange to `log` (see
    /// [`crate::exchange_log`]).
    pub fn record_to(mut self, log: ExchangeLog) -> Self {
        self.log = Some(log);
        self
    }

    /// How many requests one sandbox may have in flight.
    pub(crate) fn concurrency(&self) -> usize {
        self.max_concurrent
    }

    /// The answer past the concurrency limit, in the agent's API's words.
    pub(crate) fn busy(&self, api: Api) -> UpstreamAnswer {
        let message = format!(
            "this sandbox already has {} requests in flight, the gateway's limit; retry",
            self.max_concurrent
        );
        let mut answer = for_agent(
            api,
            UpstreamAnswer::error(429, "too_many_requests", message),
        );
        answer.retry_after = Some("1".into());
        answer
    }

    /// Answers one forwarded request, its span under the current one.
    pub async fn answer(&self, request: Value) -> UpstreamAnswer {
        self.answer_under(JsonText::from_value(&request), trace::current())
            .await
    }

    /// Answers `request` (the text of an [`UpstreamRequest`]), its span
    /// under `parent`.
    async fn answer_under(&self, request: JsonText, parent: Option<SpanContext>) -> UpstreamAnswer {
        match serde_json::from_str(request.as_str()) {
            Ok(request) => self.answer_request(request, parent).await,
            Err(e) => UpstreamAnswer::error(400, "invalid_request", format!("not a request: {e}")),
        }
    }

    /// Answers an agent's `request`, its body still the agent's text, its
    /// span under `parent`.
    pub(crate) async fn answer_request(
        &self,
        request: UpstreamRequest<Box<RawValue>>,
        parent: Option<SpanContext>,
    ) -> UpstreamAnswer {
        let api = request.api;
        let (mut ready, mut watch) = match self.prepare(request, parent) {
            Prepared::Ready(ready, watch) => (ready, watch),
            Prepared::Refused { answer, watch } => return refuse(answer, watch).await,
        };
        // Dropped here (the agent went away), the request closes its
        // upstream connection and `watch` records the exchange as gone.
        let answer = send(self.outgoing(&mut ready, "application/json")).await;
        watch.usage(&answer.body["usage"]);
        let answer = for_agent(api, self.shape.answer(api, answer));
        watch
            .end(answer.status, Some(&answer.body), None, None)
            .await;
        answer
    }

    /// The call for an agent's request, whole or streamed, and the start
    /// of its observation: its body passed on as it came where nothing
    /// needs to change it, otherwise read and rewritten.
    fn prepare(
        &self,
        request: UpstreamRequest<Box<RawValue>>,
        parent: Option<SpanContext>,
    ) -> Prepared {
        if self.passes_untouched(request.api) {
            self.untouched(request, parent)
        } else {
            self.translated(request, parent)
        }
    }

    /// Whether an agent's body for `api` goes upstream as the agent wrote
    /// it: the upstream speaks the agent's API, no model is put in and no
    /// record is kept, so the gateway reads only the model and the stream
    /// flag, without building the rest (an agent's whole history).
    fn passes_untouched(&self, api: Api) -> bool {
        self.model.is_none() && self.log.is_none() && self.shape.speaks(api)
    }

    /// The call for a body that goes upstream as it came.
    fn untouched(
        &self,
        request: UpstreamRequest<Box<RawValue>>,
        parent: Option<SpanContext>,
    ) -> Prepared {
        /// What the gateway reads of a body it passes on.
        #[derive(Deserialize)]
        struct Headline {
            model: Option<Value>,
            stream: Option<Value>,
        }
        let headline = serde_json::from_str::<Headline>(request.body.get());
        let summary = match headline {
            Ok(Headline { model, stream }) => json!({"model": model, "stream": stream}),
            Err(_) => Value::Null,
        };
        let api = request.api;
        let watch = self.observe(&UpstreamRequest { api, body: summary }, parent);
        // The agent's text itself, not a copy.
        let body = Box::<str>::from(request.body).into_string().into_bytes();
        let call = UpstreamRequest {
            api,
            body: Value::Null,
        };
        match self.upstream_call(call) {
            Ok((call, client)) => Prepared::Ready(
                Ready {
                    call,
                    client,
                    body: Some(body),
                },
                watch,
            ),
            Err(answer) => Prepared::Refused {
                answer,
                watch: Some(watch),
            },
        }
    }

    /// The call for a body the gateway reads and may rewrite.
    fn translated(
        &self,
        request: UpstreamRequest<Box<RawValue>>,
        parent: Option<SpanContext>,
    ) -> Prepared {
        let body = match serde_json::from_str(request.body.get()) {
            Ok(body) => body,
            Err(e) => {
                let refused = UpstreamAnswer::error(
                    400,
                    "invalid_request",
                    format!("the request body is not JSON: {e}"),
                );
                return Prepared::Refused {
                    answer: for_agent(request.api, refused),
                    watch: None,
                };
            }
        };
        let request = UpstreamRequest {
            api: request.api,
            body,
        };
        let watch = self.observe(&request, parent);
        match self.upstream_call(request) {
            Ok((call, client)) => Prepared::Ready(
                Ready {
                    body: call.body.as_ref().map(json_bytes),
                    call,
                    client,
                },
                watch,
            ),
            Err(answer) => Prepared::Refused {
                answer,
                watch: Some(watch),
            },
        }
    }

    fn observe(&self, request: &UpstreamRequest, parent: Option<SpanContext>) -> Observation {
        Observation::begin(
            request.api,
            &request.body,
            self.model.as_deref(),
            parent,
            self.log.clone(),
        )
    }

    /// Answers a `stream` request (`open`, already known to the pumps so a
    /// cancel finds it through `control`) with the upstream's head, and the
    /// pump that sends its body once the head has gone out (so no item
    /// competes with it on the way).
    pub(crate) async fn open_stream(
        &self,
        end: HostEnd<Abridge>,
        open: StreamOpen<Box<RawValue>>,
        control: StreamControl,
        parent: Option<SpanContext>,
        slot: Option<OwnedSemaphorePermit>,
    ) -> ReplyThen<StreamHead> {
        let Some(slot) = slot else {
            return ReplyThen::reply(Ok(StreamHead::whole(self.busy(open.request.api))));
        };
        let api = open.request.api;
        let prepared = self.prepare(open.request, parent);
        let (head, pump) = self.stream_head(end, api, prepared, control, slot).await;
        let answer = ReplyThen::reply(Ok(head));
        // Even if the head is lost: the pump then ends at its first item,
        // and ends the exchange's observation with it.
        match pump {
            Some(pump) => answer.then(pump.run()),
            None => answer,
        }
    }

    async fn stream_head(
        &self,
        end: HostEnd<Abridge>,
        api: Api,
        prepared: Prepared,
        control: StreamControl,
        slot: OwnedSemaphorePermit,
    ) -> (StreamHead, Option<Box<Pump>>) {
        let (mut ready, watch) = match prepared {
            Prepared::Ready(ready, watch) => (ready, watch),
            Prepared::Refused { answer, watch } => {
                let refused = refuse(answer, watch).await;
                let head = StreamHead::whole(UpstreamAnswer {
                    retry_after: None,
                    ..refused
                });
                return (head, None);
            }
        };
        let outgoing = self.outgoing(&mut ready, "text/event-stream");
        let translate = self.shape.stream_translator(api);
        // The agent may leave before the upstream says a word: dropping the
        // request then closes its connection, so the upstream stops too.
        let opened = tokio::select! {
            opened = tokio::time::timeout(self.timeout, upstream::open(outgoing)) => opened,
            _ = control.cancelled() => {
                let why = "the agent went away before the upstream answered";
                watch.end(CLIENT_GONE, None, None, Some(why.into())).await;
                return (refused(CLIENT_GONE, "client_closed_request", why), None);
            }
        };
        let (mut head, watch) = match opened {
            Ok(Ok(opened)) => {
                let pumping = Pumping {
                    limit: self.timeout,
                    translate,
                    watch,
                    slot,
                };
                match StreamPumps::start(end, control, opened, pumping).await {
                    Started::Answered(head, watch) => (head, *watch),
                    Started::Streaming(head, pump) => return (head, Some(pump)),
                }
            }
            Ok(Err(unreachable)) => (refused(502, "upstream_unreachable", unreachable), watch),
            Err(_) => (
                refused(
                    504,
                    "upstream_timeout",
                    format!("the upstream did not answer within {:?}", self.timeout),
                ),
                watch,
            ),
        };
        if let Some(body) = head.body.take() {
            let answer = UpstreamAnswer {
                status: head.status,
                body,
                retry_after: None,
            };
            head.body = Some(for_agent(api, answer).body);
        }
        watch.end(head.status, head.body.as_ref(), None, None).await;
        (head, None)
    }

    /// `ready`'s request as it goes upstream, its body taken, asking for
    /// `accept` (JSON, or server-sent events for a stream).
    fn outgoing<'a>(&'a self, ready: &'a mut Ready, accept: &'static str) -> Outgoing<'a> {
        Outgoing {
            method: ready.call.method.clone(),
            url: &ready.call.url,
            headers: self.shape.auth_headers(self.key.as_deref()),
            body: ready.body.take(),
            timeout: self.timeout,
            accept,
            client: &ready.client,
        }
    }

    /// The upstream call for an agent's request (the model overridden if
    /// the gateway says so) and the connections to make it on, or the
    /// answer that refuses it.
    fn upstream_call(
        &self,
        request: UpstreamRequest,
    ) -> Result<(UpstreamCall, UpstreamClient), UpstreamAnswer> {
        let api = request.api;
        let client = self.client.clone().map_err(|why| {
            for_agent(
                api,
                UpstreamAnswer::error(502, "gateway_misconfigured", why),
            )
        })?;
        let mut body = request.body;
        if let (Some(model), Some(fields)) = (&self.model, body.as_object_mut()) {
            fields.insert("model".into(), model.clone().into());
        }
        let call = self
            .shape
            .call(&self.base_url, api, body)
            .map_err(|refused| for_agent(api, refused))?;
        Ok((call, client))
    }
}

/// `answer` as an agent of `api` reads it: an error in Anthropic's words
/// for an Anthropic agent, unless it already is.
fn for_agent(api: Api, answer: UpstreamAnswer) -> UpstreamAnswer {
    let anthropic_agent = matches!(api, Api::Messages | Api::CountTokens);
    if anthropic_agent && answer.status >= 400 && answer.body["type"] != "error" {
        return UpstreamAnswer {
            body: anthropic::error_from_openai(answer.status, &answer.body),
            ..answer
        };
    }
    answer
}

/// A request, whole or streamed, ready to go or refused before it went
/// out; either way with its exchange's watch, if it began.
// Made once per request and taken apart at once: boxing the larger
// variant would only add an allocation.
#[allow(clippy::large_enum_variant)]
enum Prepared {
    /// Ready, and watched.
    Ready(Ready, Observation),
    /// The answer that refuses it, and its watch if it began.
    Refused {
        answer: UpstreamAnswer,
        watch: Option<Observation>,
    },
}

/// A request ready to go upstream.
struct Ready {
    /// Where and how.
    call: UpstreamCall,
    /// The connections to make it on.
    client: UpstreamClient,
    /// The body's bytes, until they go.
    body: Option<Vec<u8>>,
}

/// `answer`, a request refused before it went upstream, with the end of
/// its observation if one began.
async fn refuse(answer: UpstreamAnswer, watch: Option<Observation>) -> UpstreamAnswer {
    if let Some(watch) = watch {
        let why = answer.body["error"]["message"].as_str().map(str::to_owned);
        watch
            .end(answer.status, Some(&answer.body), None, why)
            .await;
    }
    answer
}

/// A head that ends a stream before it starts.
fn refused(status: u16, kind: &str, message: impl Into<String>) -> StreamHead {
    StreamHead::whole(UpstreamAnswer::error(status, kind, message))
}

/// A request body for the upstream: written straight into bytes (a
/// value's `to_string` goes through the formatter, several times slower
/// on an agent's long context).
fn json_bytes(body: &Value) -> Vec<u8> {
    serde_json::to_vec(body).unwrap_or_default()
}
