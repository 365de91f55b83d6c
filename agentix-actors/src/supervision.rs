//! Supervision building blocks: how a parent actor learns that a child
//! ended, and how the rest of a program keeps reaching a child its parent
//! replaces.
//!
//! An actix actor that panics in a handler is dropped by its arbiter, and
//! nobody is told: its address just stops answering. A child that holds a
//! [`ChildGuard`] tells its parent in both cases — it stopped, or it
//! panicked — because the guard reports from its `Drop`. The parent decides
//! (with a [`RestartPolicy`](crate::restart_policy::RestartPolicy)) whether
//! and when to start another, and puts the new address in the child's
//! [`ChildAddr`], which everyone who sends to the child holds instead of an
//! `Addr` of one incarnation.

use std::sync::{Arc, RwLock};

use actix::{Actor, Addr, Message, Recipient};

/// Child `child` of the receiving parent ended; `panicked` says whether a
/// panic ended it (otherwise it stopped).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ChildEnded<K: Send + 'static> {
    /// Which child, as its parent names it.
    pub child: K,
    /// Whether a panic ended it.
    pub panicked: bool,
}

/// Held in a child actor's state: reports [`ChildEnded`] to the parent when
/// the actor is dropped, whichever way it ended.
pub struct ChildGuard<K: Clone + Send + 'static> {
    child: K,
    parent: Recipient<ChildEnded<K>>,
    armed: bool,
}

impl<K: Clone + Send + 'static> ChildGuard<K> {
    /// A guard that reports the end of `child` to `parent`.
    pub fn new(child: K, parent: Recipient<ChildEnded<K>>) -> Self {
        ChildGuard {
            child,
            parent,
            armed: true,
        }
    }

    /// The child ends on its parent's order (a shutdown): nothing to report.
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl<K: Clone + Send + 'static> Drop for ChildGuard<K> {
    fn drop(&mut self) {
        if self.armed {
            // `do_send`: a parent hears of each end of a child once, which
            // no peer can make happen faster than the parent restarts it.
            self.parent.do_send(ChildEnded {
                child: self.child.clone(),
                panicked: std::thread::panicking(),
            });
        }
    }
}

/// The address of a child that its parent may replace: cheap to clone, and
/// always the incarnation that runs now.
pub struct ChildAddr<A: Actor>(Arc<RwLock<Addr<A>>>);

impl<A: Actor> Clone for ChildAddr<A> {
    fn clone(&self) -> Self {
        ChildAddr(self.0.clone())
    }
}

impl<A: Actor> ChildAddr<A> {
    /// A shared address, for now `addr`.
    pub fn new(addr: Addr<A>) -> Self {
        ChildAddr(Arc::new(RwLock::new(addr)))
    }

    /// The current incarnation's address.
    pub fn get(&self) -> Addr<A> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Points every holder at a new incarnation.
    pub fn replace(&self, addr: Addr<A>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = addr;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix::prelude::*;

    #[derive(Message)]
    #[rtype(result = "()")]
    struct Crash;

    #[derive(Message)]
    #[rtype(result = "()")]
    struct Stop;

    struct Child {
        _guard: ChildGuard<&'static str>,
    }

    impl Actor for Child {
        type Context = Context<Self>;
    }

    impl Handler<Crash> for Child {
        type Result = ();
        fn handle(&mut self, _: Crash, _: &mut Context<Self>) {
            panic!("a handler bug");
        }
    }

    impl Handler<Stop> for Child {
        type Result = ();
        fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
            ctx.stop();
        }
    }

    #[derive(Default)]
    struct Parent {
        heard: Vec<(&'static str, bool)>,
    }

    impl Actor for Parent {
        type Context = Context<Self>;
    }

    impl Handler<ChildEnded<&'static str>> for Parent {
        type Result = ();
        fn handle(&mut self, msg: ChildEnded<&'static str>, _: &mut Context<Self>) {
            self.heard.push((msg.child, msg.panicked));
        }
    }

    #[derive(Message)]
    #[rtype(result = "Vec<(&'static str, bool)>")]
    struct Heard;

    impl Handler<Heard> for Parent {
        type Result = MessageResult<Heard>;
        fn handle(&mut self, _: Heard, _: &mut Context<Self>) -> Self::Result {
            MessageResult(self.heard.clone())
        }
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[actix_rt::test]
    async fn a_parent_hears_of_a_child_that_panicked_and_of_one_that_stopped() {
        let parent = Parent::default().start();
        let guard = |name| ChildGuard::new(name, parent.clone().recipient());
        let crashing = Child {
            _guard: guard("crashing"),
        }
        .start();
        let stopping = Child {
            _guard: guard("stopping"),
        }
        .start();
        let mut disarmed = guard("disarmed");
        disarmed.disarm();
        drop(disarmed);

        crashing.do_send(Crash);
        stopping.do_send(Stop);
        settle().await;

        let mut heard = parent.send(Heard).await.unwrap();
        heard.sort();
        assert_eq!(heard, vec![("crashing", true), ("stopping", false)]);
        assert!(!crashing.connected(), "a panicked actor answers no more");
    }

    #[actix_rt::test]
    async fn a_child_addr_reaches_the_incarnation_put_in_last() {
        let parent = Parent::default().start();
        let first = Parent::default().start();
        let shared = ChildAddr::new(first.clone());
        let holder = shared.clone();
        shared.replace(parent.clone());
        holder.get().do_send(ChildEnded {
            child: "x",
            panicked: false,
        });
        assert_eq!(parent.send(Heard).await.unwrap(), vec![("x", false)]);
        assert!(first.send(Heard).await.unwrap().is_empty());
    }
}
