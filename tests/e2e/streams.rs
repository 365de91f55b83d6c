//! Streaming calls: order, volume, flow control, errors, shape checks.

mod support;

use std::time::Duration;

use agentix::{ErrorKind, StreamExt};
use futures_util::future::join_all;
use serde_json::json;
use support::{sandbox, wait_until_async};

#[tokio::test]
async fn a_hundred_thousand_items_arrive_in_order() {
    let sb = sandbox().await;
    let items = sb.stream(agentix_e2e::count, (100_000,)).await.unwrap();
    let got: Vec<u64> = items.map(|i| i.unwrap()).collect().await;
    assert_eq!(got.len(), 100_000);
    assert!(
        got.iter().copied().eq(0..100_000),
        "items out of order or missing"
    );
}

#[tokio::test]
async fn sixty_four_streams_at_once_each_get_their_own_items() {
    let sb = sandbox().await;
    let streams = (0..64u64).map(|k| {
        let sb = &sb;
        async move {
            let n = 2_000 + k * 37;
            let items = sb.stream(agentix_e2e::count, (n,)).await.unwrap();
            let got: Vec<u64> = items.map(|i| i.unwrap()).collect().await;
            (n, got)
        }
    });
    for (n, got) in join_all(streams).await {
        assert!(
            got.iter().copied().eq(0..n),
            "stream of {n} items corrupted"
        );
    }
}

#[tokio::test]
async fn a_slow_reader_holds_the_producer_to_its_window() {
    let sb = sandbox().await;
    const WINDOW: u64 = 64;
    let mut items = sb
        .stream(agentix_e2e::count_counted, (200_000,))
        .window(WINDOW, 1 << 20)
        .await
        .unwrap();
    let mut consumed = 0u64;
    for _ in 0..3 {
        for _ in 0..100 {
            assert_eq!(items.next().await.unwrap().unwrap(), consumed);
            consumed += 1;
        }
        // Give a producer that ignored the window time to run away.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let produced = sb.remote(agentix_e2e::produced, ()).await.unwrap();
        assert!(
            produced <= consumed + WINDOW,
            "the worker produced {produced} items while the host consumed {consumed} (window {WINDOW})"
        );
        assert!(
            produced >= consumed,
            "counter broken: {produced} < {consumed}"
        );
    }
    // Reading on drains the rest, in order.
    while let Some(item) = items.next().await {
        assert_eq!(item.unwrap(), consumed);
        consumed += 1;
    }
    assert_eq!(consumed, 200_000);
}

#[tokio::test]
async fn large_items_respect_the_byte_window_and_arrive_intact() {
    let sb = sandbox().await;
    let size = 256 << 10;
    let items = sb
        .stream(agentix_e2e::blobs, (40, size))
        .window(1_000, 1 << 20)
        .await
        .unwrap();
    let got: Vec<_> = items.map(|b| b.unwrap()).collect().await;
    assert_eq!(got.len(), 40);
    for (i, blob) in got.iter().enumerate() {
        assert_eq!(blob.len(), size);
        assert!(blob.iter().all(|b| *b == i as u8), "blob {i} corrupted");
    }
}

#[tokio::test]
async fn an_error_item_ends_the_stream_after_the_items_before_it() {
    let sb = sandbox().await;
    let mut items = sb
        .stream(agentix_e2e::count_then_fail, (1_000,))
        .await
        .unwrap();
    for want in 0..1_000 {
        assert_eq!(items.next().await.unwrap().unwrap(), want);
    }
    let err = items.next().await.unwrap().unwrap_err();
    assert_eq!(err.kind, ErrorKind::Raised, "{err}");
    assert_eq!(err.message, "cannot divide 1000 by zero");
    assert_eq!(
        err.data_as::<agentix_e2e::MathError>(),
        Ok(agentix_e2e::MathError::DivideByZero { dividend: 1000 })
    );
    assert!(items.next().await.is_none(), "nothing follows the error");
}

#[tokio::test]
async fn a_panic_mid_stream_ends_it_and_the_worker_keeps_serving() {
    let sb = sandbox().await;
    let pid = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    let mut items = sb
        .stream(agentix_e2e::count_then_panic, (500,))
        .await
        .unwrap();
    for want in 0..500 {
        assert_eq!(items.next().await.unwrap().unwrap(), want);
    }
    let err = items.next().await.unwrap().unwrap_err();
    assert_eq!(err.kind, ErrorKind::Panic, "{err}");
    assert!(err.message.contains("stream broke at 500"), "{err}");
    assert!(items.next().await.is_none());
    assert_eq!(sb.remote(agentix_e2e::worker_pid, ()).await.unwrap(), pid);
}

#[tokio::test]
async fn streams_by_name_and_shape_mismatches() {
    let sb = sandbox().await;
    let items = sb
        .stream_json("agentix_e2e::count", json!({ "n": 3 }))
        .await
        .unwrap();
    let got: Vec<_> = items.map(|i| i.unwrap()).collect().await;
    assert_eq!(got, [json!(0), json!(1), json!(2)]);

    let err = sb
        .call_json("agentix_e2e::count", json!([3]))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::TypeMismatch);
    assert!(err.message.contains("Sandbox::stream"), "{err}");

    let mut items = sb
        .stream_json("agentix_e2e::add", json!([1, 2]))
        .await
        .unwrap();
    let err = items.next().await.unwrap().unwrap_err();
    assert_eq!(err.kind, ErrorKind::TypeMismatch);
    assert!(err.message.contains("Sandbox::remote"), "{err}");
    assert!(items.next().await.is_none());
}

#[tokio::test]
async fn dropping_a_stream_cancels_it_and_a_deadline_ends_it() {
    let sb = sandbox().await;
    let mut items = sb.stream(agentix_e2e::tick, (5,)).await.unwrap();
    for want in 0..3 {
        assert_eq!(items.next().await.unwrap().unwrap(), want);
    }
    drop(items);
    wait_until_async("the server to forget the dropped stream", || async {
        sb.health().await.unwrap()["inflight"] == 0
    })
    .await;

    let mut items = sb
        .stream(agentix_e2e::tick, (20,))
        .timeout(Duration::from_millis(300))
        .await
        .unwrap();
    let mut seen = 0;
    let err = loop {
        match items.next().await.unwrap() {
            Ok(_) => seen += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
    assert!(seen > 0, "items before the deadline arrive");
    assert!(items.next().await.is_none());
    wait_until_async("the server to forget the timed-out stream", || async {
        sb.health().await.unwrap()["inflight"] == 0
    })
    .await;
}
