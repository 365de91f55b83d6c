//! [`SandboxSupervisor`]: keeps one sandbox alive for a service.
//!
//! Supervised by nobody (the program holds its address); its one child is
//! the current [`SandboxActor`]. It starts a sandbox from its provider and
//! config, runs the setup hook on it (register namespaces there: a new
//! sandbox needs them again), and when the sandbox's server ends by itself
//! — it crashed, was killed, ran out of memory — starts another by its
//! [`RestartPolicy`] (at once, then with backoff; past the policy's
//! intensity it waits out the period, failing calls with `Degraded`). A
//! sandbox that fails to start counts the same way.
//!
//! It answers the same messages as a [`SandboxActor`] and forwards them to
//! the current one; a message that arrives while a sandbox is starting waits
//! for it. Calls in flight when a server dies end with its error
//! (`ServerExited`), as they would on the plain handle. Stopping the
//! supervisor (or dropping every address) deletes the sandbox.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use agentix_actors::restart_policy::{Restart, RestartPolicy};
use agentix_actors::supervision::{ChildEnded, ChildGuard};
use agentix_wire::errors::{ErrorKind, RemoteError};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::config::SandboxConfig;
use crate::provider::Provider;
use crate::sandbox::Sandbox;
use crate::sandbox_actor::{CallJson, RemoteCall, SandboxActor, SandboxHealth, StreamTo};

// ---- messages ------------------------------------------------------------

/// How many times the supervisor started a new sandbox after the first.
#[derive(Debug, Message)]
#[rtype(result = "u64")]
pub struct SandboxRestarts;

/// Stop supervising: the sandbox is deleted and nothing is restarted.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StopSupervising;

// ---- the actor -----------------------------------------------------------

/// Runs once on every sandbox the supervisor starts, before it serves.
pub type SandboxSetup = Arc<dyn Fn(&Sandbox) + Send + Sync>;

#[derive(Clone)]
enum Current {
    Starting,
    Ready(Addr<SandboxActor>),
    /// Past the policy: calls fail with this until the next try.
    Waiting(RemoteError),
    Stopped,
}

/// Keeps a sandbox alive, by policy.
pub struct SandboxSupervisor {
    provider: Arc<dyn Provider>,
    config: SandboxConfig,
    setup: Option<SandboxSetup>,
    policy: RestartPolicy,
    current: watch::Sender<Current>,
    /// Which incarnation the current child is, so a stale end is ignored.
    generation: u64,
    restarts: u64,
}

impl SandboxSupervisor {
    /// A supervisor of sandboxes made by `provider` from `config`: by
    /// default at most 5 restarts within 60 s.
    pub fn new(provider: Arc<dyn Provider>, config: SandboxConfig) -> Self {
        SandboxSupervisor {
            provider,
            config,
            setup: None,
            policy: RestartPolicy::new(5, Duration::from_secs(60)),
            current: watch::channel(Current::Starting).0,
            generation: 0,
            restarts: 0,
        }
    }

    /// Restarts by `policy` instead.
    pub fn policy(mut self, policy: RestartPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Runs `setup` on every new sandbox before it serves (register its
    /// host namespaces there).
    pub fn setup(mut self, setup: impl Fn(&Sandbox) + Send + Sync + 'static) -> Self {
        self.setup = Some(Arc::new(setup));
        self
    }

    /// Starts supervising: on the caller's arbiter in an actix program, on
    /// a background one otherwise. The first sandbox starts at once.
    pub fn start(self) -> Addr<SandboxSupervisor> {
        agentix_actors::actor_home::start_actor(move |_| self)
    }

    fn start_sandbox(&mut self, ctx: &mut Context<Self>) {
        self.generation += 1;
        let generation = self.generation;
        self.current.send_replace(Current::Starting);
        let provider = self.provider.clone();
        let config = self.config.clone();
        let setup = self.setup.clone();
        let parent = ctx.address().recipient();
        ctx.spawn(
            async move {
                let sandbox = provider.session(config).await?;
                if let Some(setup) = setup {
                    setup(&sandbox);
                }
                let guard = ChildGuard::new(generation, parent);
                Ok::<_, crate::ProviderError>(SandboxActor::start_supervised(sandbox, Some(guard)))
            }
            .into_actor(self)
            .map(move |started, act, ctx| {
                if act.generation != generation {
                    return;
                }
                match started {
                    Ok(addr) => {
                        act.current.send_replace(Current::Ready(addr));
                    }
                    Err(e) => {
                        tracing::error!("a supervised sandbox did not start: {e}");
                        act.child_gone(
                            ctx,
                            RemoteError::new(ErrorKind::ServerExited, e.to_string()),
                        );
                    }
                }
            }),
        );
    }

    /// The current sandbox is gone (or never started): start another, by policy.
    fn child_gone(&mut self, ctx: &mut Context<Self>, why: RemoteError) {
        if matches!(*self.current.borrow(), Current::Stopped) {
            return;
        }
        let now = Instant::now();
        match self.policy.on_exit(now) {
            Restart::Now => self.restart(ctx, Duration::ZERO),
            Restart::After(delay) => {
                self.current.send_replace(Current::Starting);
                self.restart(ctx, delay)
            }
            Restart::GiveUp { retry_at } => {
                let wait = retry_at.saturating_duration_since(now);
                tracing::error!(
                    "the supervised sandbox ended more than {} times within {:?}; \
                     trying again in {wait:?}",
                    self.policy.intensity(),
                    self.policy.period()
                );
                let error = RemoteError::new(
                    ErrorKind::Degraded,
                    format!(
                        "the sandbox ended more than {} times within {:?}; the next one \
                         starts in {:.1} s",
                        self.policy.intensity(),
                        self.policy.period(),
                        wait.as_secs_f64()
                    ),
                )
                .with_details(why.to_string());
                self.current.send_replace(Current::Waiting(error));
                self.restart(ctx, wait);
            }
        }
    }

    fn restart(&mut self, ctx: &mut Context<Self>, after: Duration) {
        ctx.run_later(after, |act, ctx| {
            if matches!(*act.current.borrow(), Current::Stopped) {
                return;
            }
            act.restarts += 1;
            act.start_sandbox(ctx);
        });
    }

    /// The current sandbox, once one serves.
    fn ready(&self) -> impl std::future::Future<Output = Result<Addr<SandboxActor>, RemoteError>> {
        let mut current = self.current.subscribe();
        async move {
            let state = current
                .wait_for(|c| !matches!(c, Current::Starting))
                .await
                .map(|c| c.clone())
                .unwrap_or(Current::Stopped);
            match state {
                Current::Ready(addr) => Ok(addr),
                Current::Waiting(error) => Err(error),
                Current::Stopped | Current::Starting => Err(RemoteError::new(
                    ErrorKind::ServerExited,
                    "the sandbox supervisor has stopped",
                )),
            }
        }
    }
}

impl Actor for SandboxSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.start_sandbox(ctx);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        // The child's address goes with it, and the last address of a
        // SandboxActor deletes its sandbox.
        self.current.send_replace(Current::Stopped);
    }
}

impl Handler<ChildEnded<u64>> for SandboxSupervisor {
    type Result = ();

    fn handle(&mut self, msg: ChildEnded<u64>, ctx: &mut Context<Self>) {
        if msg.child != self.generation {
            return;
        }
        let how = if msg.panicked { "panicked" } else { "ended" };
        tracing::warn!("the supervised sandbox {how}; starting another by policy");
        let why = RemoteError::new(ErrorKind::ServerExited, format!("the sandbox {how}"));
        self.child_gone(ctx, why);
    }
}

impl<O: DeserializeOwned + Send + 'static> Handler<RemoteCall<O>> for SandboxSupervisor {
    type Result = ResponseFuture<Result<O, RemoteError>>;

    fn handle(&mut self, msg: RemoteCall<O>, _: &mut Context<Self>) -> Self::Result {
        let ready = self.ready();
        Box::pin(async move { ready.await?.send(msg).await.map_err(gone)? })
    }
}

impl Handler<CallJson> for SandboxSupervisor {
    type Result = ResponseFuture<Result<serde_json::Value, RemoteError>>;

    fn handle(&mut self, msg: CallJson, _: &mut Context<Self>) -> Self::Result {
        let ready = self.ready();
        Box::pin(async move { ready.await?.send(msg).await.map_err(gone)? })
    }
}

impl Handler<SandboxHealth> for SandboxSupervisor {
    type Result = ResponseFuture<Result<serde_json::Value, RemoteError>>;

    fn handle(&mut self, msg: SandboxHealth, _: &mut Context<Self>) -> Self::Result {
        let ready = self.ready();
        Box::pin(async move { ready.await?.send(msg).await.map_err(gone)? })
    }
}

impl<T: serde::de::DeserializeOwned + Send + 'static> Handler<StreamTo<T>> for SandboxSupervisor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: StreamTo<T>, _: &mut Context<Self>) -> Self::Result {
        let ready = self.ready();
        Box::pin(async move {
            match ready.await {
                Ok(addr) => {
                    let to = msg.to.clone();
                    if let Err(e) = addr.send(msg).await {
                        let _ = to
                            .send(crate::sandbox_actor::StreamItem::Failed(gone(e)))
                            .await;
                    }
                }
                Err(error) => {
                    let _ = msg
                        .to
                        .send(crate::sandbox_actor::StreamItem::Failed(error))
                        .await;
                }
            }
        })
    }
}

impl Handler<SandboxRestarts> for SandboxSupervisor {
    type Result = u64;

    fn handle(&mut self, _: SandboxRestarts, _: &mut Context<Self>) -> u64 {
        self.restarts
    }
}

impl Handler<StopSupervising> for SandboxSupervisor {
    type Result = ();

    fn handle(&mut self, _: StopSupervising, ctx: &mut Context<Self>) {
        self.current.send_replace(Current::Stopped);
        ctx.stop();
    }
}

/// A call that reached a sandbox actor which stopped before answering.
fn gone(_: MailboxError) -> RemoteError {
    RemoteError::new(
        ErrorKind::ServerExited,
        "the sandbox ended before the call was answered",
    )
}
