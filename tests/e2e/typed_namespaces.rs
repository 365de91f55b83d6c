//! Typed namespace protocols: both halves handle and send only what the
//! protocol declares, events keep their order under awaiting handlers,
//! requests go both ways with replies, faults, bad bodies, concurrency and
//! cancellation. The protocol and its sandbox half are in
//! `tests/src/typed_plugin.rs`.

mod support;

use std::time::Duration;

use agentix::actix::{Actor, AtomicResponse, Context, Handler, WrapFuture};
use agentix::Attachment;
use agentix::{HostEnd, HostHalf, NamespaceFault, Received, RemoteSioError};
use agentix_e2e::typed_plugin::{
    open_typed, AskHalf, Chunk, Count, CountUp, Counted, Counting, Double, Doubled, Finish,
    HalfAnswer, Halve, Halved, Meet, Reversed, Stall, Stopped, Tally,
};
use serde_json::json;
use support::{next_event, sandbox};
use tokio::sync::mpsc;

/// Events through a handler that awaits: 10,000 each way.
const EVENTS: u64 = 10_000;

/// Host half actor: keeps every `Counted`, awaiting inside its handler
/// (earlier ones longer), and reports each once handled. `AtomicResponse`
/// is how an actor's awaiting handler keeps its mailbox's order.
struct Tallier(mpsc::UnboundedSender<u64>);

impl Actor for Tallier {
    type Context = Context<Self>;
}

impl Handler<Received<HostEnd<Counting>, Counted>> for Tallier {
    type Result = AtomicResponse<Self, ()>;

    fn handle(
        &mut self,
        msg: Received<HostEnd<Counting>, Counted>,
        _: &mut Context<Self>,
    ) -> Self::Result {
        let report = self.0.clone();
        let Counted(i) = msg.event;
        AtomicResponse::new(Box::pin(
            async move {
                if i % 64 < 3 {
                    tokio::time::sleep(Duration::from_millis(3 - i % 64)).await;
                }
                tokio::task::yield_now().await;
                let _ = report.send(i);
            }
            .into_actor(self),
        ))
    }
}

/// The host half the tests register: `Counted` to a [`Tallier`], the rest
/// to channels, `halve` answered (odd numbers refused).
struct Reports {
    counted: mpsc::UnboundedReceiver<u64>,
    tallies: mpsc::UnboundedReceiver<Vec<u64>>,
    stopped: mpsc::UnboundedReceiver<String>,
    halves: mpsc::UnboundedReceiver<Result<u64, String>>,
    reversed: mpsc::UnboundedReceiver<Reversed>,
}

fn host_half() -> (HostHalf<Counting>, Reports) {
    let (counted_tx, counted) = mpsc::unbounded_channel();
    let (tally_tx, tallies) = mpsc::unbounded_channel();
    let (stopped_tx, stopped) = mpsc::unbounded_channel();
    let (half_tx, halves) = mpsc::unbounded_channel();
    let (reversed_tx, reversed) = mpsc::unbounded_channel();
    let tallier = agentix::start_actor(move |_| Tallier(counted_tx));
    let half = HostHalf::<Counting>::new()
        .on_actor::<Counted>(tallier)
        .on(move |_, Tally(numbers)| {
            let _ = tally_tx.send(numbers);
            async {}
        })
        .on(move |_, Stopped { tag }| {
            let _ = stopped_tx.send(tag);
            async {}
        })
        .on(move |_, HalfAnswer(answer)| {
            let _ = half_tx.send(answer);
            async {}
        })
        .on(move |_, back: Reversed| {
            let _ = reversed_tx.send(back);
            async {}
        })
        .answer(|_, Halve(n), _| async move {
            if n % 2 == 1 {
                return Err(NamespaceFault::new("Odd", format!("{n} is odd")));
            }
            Ok(Halved(n / 2))
        });
    let reports = Reports {
        counted,
        tallies,
        stopped,
        halves,
        reversed,
    };
    (half, reports)
}

async fn typed_sandbox() -> (agentix::Sandbox, HostEnd<Counting>, Reports) {
    let sb = sandbox().await;
    let (half, reports) = host_half();
    sb.register_namespace(half).unwrap();
    assert_eq!(sb.remote(open_typed, ()).await.unwrap(), "open");
    let end = sb.namespace::<Counting>().await.unwrap();
    (sb, end, reports)
}

#[tokio::test]
async fn ten_thousand_events_each_way_are_handled_in_the_order_they_were_sent() {
    let (_sb, end, mut reports) = typed_sandbox().await;
    let expected: Vec<u64> = (0..EVENTS).collect();

    // Host to sandbox: a closure handler that awaits.
    for i in 0..EVENTS {
        end.emit(&Count(i)).await.unwrap();
    }
    end.emit(&Finish).await.unwrap();
    let tally = next_event(&mut reports.tallies, "the sandbox's tally").await;
    assert_eq!(tally.len(), expected.len(), "every event arrives");
    assert_eq!(tally, expected, "every event, in the order it was sent");

    // Sandbox to host: an actor whose handler awaits.
    end.emit(&CountUp(EVENTS)).await.unwrap();
    let mut seen = Vec::with_capacity(EVENTS as usize);
    while seen.len() < EVENTS as usize {
        seen.push(next_event(&mut reports.counted, "every counted number").await);
    }
    assert_eq!(seen, expected, "every event, in the order it was sent");
}

#[tokio::test]
async fn typed_requests_go_both_ways_with_replies_faults_and_bad_bodies_refused() {
    let (_sb, end, mut reports) = typed_sandbox().await;

    // Host to sandbox.
    assert_eq!(end.request(&Double(21)).await, Ok(Doubled(42)));
    assert_eq!(
        end.request(&Double(u64::MAX)).await,
        Err(RemoteSioError::Raised {
            type_name: "Overflow".into(),
            message: format!("{} doubled", u64::MAX),
        })
    );
    // What a client outside the protocol might send: refused, with why.
    let timeout = Duration::from_secs(10);
    let bad = end
        .untyped()
        .request("Double", &json!("twenty"), timeout)
        .await;
    let Err(RemoteSioError::Raised { type_name, message }) = bad else {
        panic!("a body that is not a `Double` must be refused: {bad:?}");
    };
    assert_eq!(type_name, "BadRequest");
    assert!(message.contains("`Double`"), "{message}");
    let unknown = end.untyped().request("Triple", &json!(1), timeout).await;
    assert!(
        matches!(&unknown, Err(RemoteSioError::Raised { type_name, .. }) if type_name == "NoHandler"),
        "{unknown:?}"
    );

    // Sandbox to host, answered by the host half's closure.
    end.emit(&AskHalf(10)).await.unwrap();
    assert_eq!(
        next_event(&mut reports.halves, "the half of 10").await,
        Ok(5)
    );
    end.emit(&AskHalf(7)).await.unwrap();
    assert_eq!(
        next_event(&mut reports.halves, "the half of 7").await,
        Err("Odd: 7 is odd".into())
    );
}

#[tokio::test]
async fn requests_run_side_by_side_and_a_cancel_stops_one_at_once() {
    let (_sb, end, mut reports) = typed_sandbox().await;

    // Each `Meet` is answered only once a second one arrives.
    let both = tokio::time::timeout(
        Duration::from_secs(10),
        futures_util::future::join(end.request(&Meet), end.request(&Meet)),
    )
    .await
    .expect("two requests run side by side");
    assert!(both.0.is_ok() && both.1.is_ok(), "{both:?}");

    // A long request keeps running; a short one behind it is cancelled by
    // its timeout, and its handler stops at once, not after the first.
    let long = {
        let end = end.clone();
        tokio::spawn(async move {
            let stall = Stall { tag: "long".into() };
            end.request_with_timeout(&stall, Duration::from_secs(600))
                .await
        })
    };
    let short = Stall {
        tag: "short".into(),
    };
    let timed_out = end
        .request_with_timeout(&short, Duration::from_millis(300))
        .await;
    assert!(
        matches!(timed_out, Err(RemoteSioError::Timeout { .. })),
        "{timed_out:?}"
    );
    assert_eq!(
        next_event(&mut reports.stopped, "the short stall stops").await,
        "short"
    );
    // Dropping the long one's future cancels it too.
    long.abort();
    assert_eq!(
        next_event(&mut reports.stopped, "the long stall stops").await,
        "long"
    );
    // And the namespace answers on.
    assert_eq!(end.request(&Double(2)).await, Ok(Doubled(4)));
}

#[tokio::test]
async fn a_request_for_a_namespace_the_sandbox_has_not_opened_is_answered_at_once() {
    let sb = sandbox().await;
    let (half, _reports) = host_half();
    sb.register_namespace(half).unwrap();
    // The sandbox half is never registered in this worker.
    let end = sb.namespace::<Counting>().await.unwrap();
    let started = std::time::Instant::now();
    let reply = end
        .request_with_timeout(&Double(1), Duration::from_secs(60))
        .await;
    assert!(
        matches!(&reply, Err(RemoteSioError::Raised { type_name, .. }) if type_name == "NoHandler"),
        "{reply:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "answered, not timed out"
    );
}

#[tokio::test]
async fn bytes_travel_both_ways_as_binary_attachments_of_typed_events() {
    let (_sb, end, mut reports) = typed_sandbox().await;
    // Empty, small, and past one part (they travel as parts, joined again).
    let sizes = [0usize, 1, 1000, (3 << 20) + 7];
    for (seq, size) in sizes.iter().enumerate() {
        let bytes: Vec<u8> = (0..*size).map(|i| (i * 7 + seq) as u8).collect();
        end.emit(&Chunk {
            seq: seq as u64,
            bytes: Attachment::new(bytes),
        })
        .await
        .unwrap();
    }
    for (seq, size) in sizes.iter().enumerate() {
        let back = next_event(&mut reports.reversed, "a chunk back").await;
        assert_eq!(back.seq, seq as u64, "in order");
        assert_eq!(back.len, *size as u64, "the sandbox read every byte");
        let mut expected: Vec<u8> = (0..*size).map(|i| (i * 7 + seq) as u8).collect();
        expected.reverse();
        assert!(
            back.bytes.as_bytes() == expected,
            "chunk {seq} came back changed"
        );
    }
}
