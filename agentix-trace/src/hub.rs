//! [`TraceHub`]: a set of trace processors a program owns, and where the
//! spans made in its scope are published.
//!
//! A program makes a hub, adds its processors, and hands the hub to the
//! sandboxes it creates (`SandboxConfig::trace_hub`); each sandbox's spans
//! are published to a child hub of its own (its per-sandbox processors),
//! which passes them on to its parent. So two hosts in one process, each
//! with its own hub, see only their own sandboxes' spans. Spans made where
//! no hub is in scope go to [`TraceHub::unscoped`] (a sandbox's worker
//! forwards that one's events to its host).
//!
//! A hub's processors are fed through lanes ([`super::processor_lane`]):
//! bounded, drained by tasks on one small runtime per root hub (a thread,
//! started with the first processor), a full lane refusing and counting.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use actix::Recipient;
use tokio::sync::oneshot;

use super::model::TraceEvent;
use super::processor::Processor;
use super::processor_lane::{Control, Lane};

/// Blocking threads a root hub's runtime may run sync processors on.
const BLOCKING_THREADS: usize = 8;

/// How long a dropped hub's runtime waits for a processor still working.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Processors, and where spans made in its scope go. Cheap to clone: the
/// clones are one hub.
#[derive(Clone, Default)]
pub struct TraceHub {
    inner: Arc<HubInner>,
}

#[derive(Default)]
struct HubInner {
    lanes: RwLock<Vec<Lane>>,
    /// Whether `lanes` holds any (read without the lock on every span).
    has_lanes: AtomicBool,
    /// Where every event goes next.
    parent: Option<TraceHub>,
    /// The runtime that drains the lanes: a root's own, started lazily.
    delivery: OnceLock<Option<Delivery>>,
}

/// A root hub's runtime: a thread that stops when the hub is dropped.
struct Delivery {
    handle: tokio::runtime::Handle,
    _stop: oneshot::Sender<()>,
}

impl std::fmt::Debug for TraceHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceHub")
            .field("processors", &self.lanes().len())
            .field("child", &self.inner.parent.is_some())
            .finish()
    }
}

impl TraceHub {
    /// A hub with no processors.
    pub fn new() -> Self {
        TraceHub::default()
    }

    /// A hub whose events also go to this one: a sandbox's own.
    pub fn child(&self) -> TraceHub {
        TraceHub {
            inner: Arc::new(HubInner {
                parent: Some(self.clone()),
                ..HubInner::default()
            }),
        }
    }

    /// The hub of spans made where no hub is in scope (code that names
    /// none, and the free functions of v0.1). A sandbox's worker forwards
    /// its events to the host.
    pub fn unscoped() -> &'static TraceHub {
        static UNSCOPED: OnceLock<TraceHub> = OnceLock::new();
        UNSCOPED.get_or_init(TraceHub::new)
    }

    /// Whether `self` and `other` are one hub.
    pub fn same(&self, other: &TraceHub) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Adds `processor` for every event published here from now on.
    pub fn add_processor(&self, processor: impl Processor) {
        let lane = match self.runtime() {
            Some(runtime) => Lane::for_processor(runtime, Box::new(processor)),
            None => Lane::Inline(std::sync::Mutex::new(Box::new(processor))),
        };
        self.add_lane(lane);
    }

    /// Adds the actor behind `actor` as a processor: it is sent every event
    /// published here from now on, in order, each once the last is handled.
    pub fn add_actor(&self, actor: Recipient<TraceEvent>) {
        match self.runtime() {
            Some(runtime) => self.add_lane(Lane::for_actor(runtime, actor)),
            None => tracing::error!("no trace runtime: the actor processor is not added"),
        }
    }

    /// Adds `processor`, called where each event is published, in the
    /// traced code's own time: only for a processor that is a bounded
    /// queue of its own whose producer may wait (a worker's side pipe to
    /// its host); any other goes through [`TraceHub::add_processor`].
    pub fn add_inline(&self, processor: impl Processor) {
        self.add_lane(Lane::Inline(std::sync::Mutex::new(Box::new(processor))));
    }

    fn add_lane(&self, lane: Lane) {
        self.lanes_mut().push(lane);
        self.inner.has_lanes.store(true, Ordering::Release);
    }

    /// Whether an event published here would reach any processor (lets
    /// traced code skip the work).
    pub fn listening(&self) -> bool {
        self.inner.has_lanes.load(Ordering::Acquire)
            || self.inner.parent.as_ref().is_some_and(TraceHub::listening)
    }

    /// Hands `event` to this hub's processors, then its parent's.
    pub fn publish(&self, event: TraceEvent) {
        if let Some(parent) = &self.inner.parent {
            if !self.inner.has_lanes.load(Ordering::Acquire) {
                return parent.publish(event);
            }
            if parent.listening() {
                parent.publish(event.clone());
            }
        }
        if !self.inner.has_lanes.load(Ordering::Acquire) {
            return;
        }
        let lanes = self.lanes();
        if let Some((last, rest)) = lanes.split_last() {
            for lane in rest {
                lane.offer(event.clone());
            }
            last.offer(event);
        }
    }

    /// Events this hub's processors refused (a full queue or a stopped
    /// processor), its parent's not included.
    pub fn refused(&self) -> u64 {
        self.lanes().iter().map(Lane::refused).sum()
    }

    /// Waits until this hub's processors and its parents' have handled
    /// every event published before, and have flushed.
    pub async fn flush(&self) {
        self.control(Control::Flush).await;
    }

    /// [`TraceHub::flush`] for sync code; it blocks the thread, so async
    /// code awaits `flush` instead.
    pub fn force_flush(&self) {
        futures_executor::block_on(self.flush());
    }

    /// Flushes and shuts down this hub's processors (not its parents');
    /// later events reach none of them.
    pub async fn shutdown(&self) {
        let lanes = std::mem::take(&mut *self.lanes_mut());
        self.inner.has_lanes.store(false, Ordering::Release);
        for pending in lanes.iter().filter_map(|l| l.control(Control::Shutdown)) {
            pending.wait().await;
        }
    }

    async fn control(&self, what: Control) {
        let mut hub = Some(self);
        while let Some(at) = hub {
            // Collected first: the lock is not held across the waits.
            let pending: Vec<_> = at.lanes().iter().filter_map(|l| l.control(what)).collect();
            for one in pending {
                one.wait().await;
            }
            hub = at.inner.parent.as_ref();
        }
    }

    fn lanes(&self) -> std::sync::RwLockReadGuard<'_, Vec<Lane>> {
        self.inner.lanes.read().unwrap_or_else(|p| p.into_inner())
    }

    fn lanes_mut(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Lane>> {
        self.inner.lanes.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The root hub's runtime, started on first use; `None` if no thread
    /// could be started.
    fn runtime(&self) -> Option<&tokio::runtime::Handle> {
        if let Some(parent) = &self.inner.parent {
            return parent.runtime();
        }
        self.inner
            .delivery
            .get_or_init(|| match start_delivery() {
                Ok(delivery) => Some(delivery),
                Err(e) => {
                    tracing::error!("cannot start the trace runtime: {e}");
                    None
                }
            })
            .as_ref()
            .map(|d| &d.handle)
    }
}

fn start_delivery() -> std::io::Result<Delivery> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .thread_name("agentix-trace")
        .max_blocking_threads(BLOCKING_THREADS)
        .build()?;
    let handle = runtime.handle().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("agentix-trace".into())
        .spawn(move || {
            let _ = runtime.block_on(stopped);
            runtime.shutdown_timeout(SHUTDOWN_GRACE);
        })?;
    Ok(Delivery {
        handle,
        _stop: stop,
    })
}
