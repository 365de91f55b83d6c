//! [`start_actor`]: where an agentix actor runs, with or without an actix
//! `System` in the program.
//!
//! Called on an actix arbiter (an actix or actix-web program), the actor
//! runs there, beside the caller's own. Called anywhere else — a plain
//! `#[tokio::main]` host, a worker's handler — it runs on one shared
//! background arbiter, a thread with an actix `System` of its own that
//! starts with the first such actor and lives as long as the process. So
//! user actors compose with agentix's in either kind of program.

use std::sync::OnceLock;

use actix::{Actor, Addr, Context};
use actix_rt::ArbiterHandle;

/// Starts the actor `make` builds: on the current arbiter if there is one,
/// else on the shared background arbiter.
pub fn start_actor<A, F>(make: F) -> Addr<A>
where
    A: Actor<Context = Context<A>>,
    F: FnOnce(&mut Context<A>) -> A + Send + 'static,
{
    match actix_rt::Arbiter::try_current() {
        Some(_) => A::create(make),
        None => A::start_in_arbiter(background(), make),
    }
}

/// The shared background arbiter, started on first use.
fn background() -> &'static ArbiterHandle {
    static HOME: OnceLock<ArbiterHandle> = OnceLock::new();
    HOME.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("agentix-actors".into())
            .spawn(move || {
                let system = actix_rt::System::new();
                let _ = tx.send(actix_rt::Arbiter::current());
                system.run()
            })
            .expect("a thread for the background arbiter");
        rx.recv().expect("the background arbiter starts")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix::prelude::*;

    struct WhereAmI;

    impl Actor for WhereAmI {
        type Context = Context<Self>;
    }

    #[derive(Message)]
    #[rtype(result = "Option<String>")]
    struct Thread;

    impl Handler<Thread> for WhereAmI {
        type Result = Option<String>;
        fn handle(&mut self, _: Thread, _: &mut Context<Self>) -> Option<String> {
            std::thread::current().name().map(str::to_owned)
        }
    }

    #[tokio::test]
    async fn without_a_system_an_actor_runs_on_the_background_arbiter() {
        let addr = start_actor(|_| WhereAmI);
        let thread = addr.send(Thread).await.unwrap();
        assert_eq!(thread.as_deref(), Some("agentix-actors"));
    }

    #[actix_rt::test]
    async fn on_an_arbiter_an_actor_runs_beside_its_caller() {
        let here = std::thread::current().name().map(str::to_owned);
        let addr = start_actor(|_| WhereAmI);
        assert_eq!(addr.send(Thread).await.unwrap(), here);
    }
}
