//! Remote calls that succeed: typed, by name, concurrent, large.

mod support;

use std::time::Duration;

use agentix::{Blob, ErrorKind, JsonValue, StreamExt};
use agentix_e2e::Person;
use futures_util::future::join_all;
use serde_json::json;
use support::sandbox;

#[tokio::test]
async fn typed_call_returns_the_value() {
    let sb = sandbox().await;
    assert_eq!(
        sb.remote(agentix_e2e::echo, ("hi there".into(),))
            .await
            .unwrap(),
        "hi there"
    );
    assert_eq!(sb.remote(agentix_e2e::add, (40, 2)).await.unwrap(), 42);
    let person = Person {
        name: "Ada".into(),
        age: 36,
        tags: vec![],
    };
    let older = sb
        .remote(agentix_e2e::birthday, (person, Some("math".into())))
        .await
        .unwrap();
    assert_eq!(
        older,
        Person {
            name: "Ada".into(),
            age: 37,
            tags: vec!["math".into()]
        }
    );
    let pid = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    assert_ne!(pid, std::process::id(), "the call ran in another process");
    sb.delete().await;
}

#[tokio::test]
async fn call_by_name_takes_arrays_objects_and_bare_values() {
    let sb = sandbox().await;
    let sum = sb
        .call_json("agentix_e2e::add", json!([2, 3]))
        .await
        .unwrap();
    assert_eq!(sum, json!(5));
    let sum = sb
        .call_json("agentix_e2e::add", json!({"b": 10, "a": 1}))
        .await
        .unwrap();
    assert_eq!(sum, json!(11));
    let echoed = sb
        .call_json("agentix_e2e::echo", json!("bare"))
        .await
        .unwrap();
    assert_eq!(echoed, JsonValue::String("bare".into()));
    let person = sb
        .call_json(
            "agentix_e2e::birthday",
            json!({"person": {"name": "Bo", "age": 1, "tags": ["x"]}, "tag": null}),
        )
        .await
        .unwrap();
    assert_eq!(person, json!({"name": "Bo", "age": 2, "tags": ["x"]}));
    let pid = sb
        .call_json("agentix_e2e::worker_pid", json!([]))
        .await
        .unwrap();
    assert!(pid.as_u64().is_some_and(|p| p > 1), "{pid}");
}

#[tokio::test]
async fn a_thousand_concurrent_calls_each_get_their_own_answer() {
    let sb = sandbox().await;
    let calls = (0..1000i64).map(|i| {
        let sb = &sb;
        async move { (i, sb.remote(agentix_e2e::add, (i, 1_000_000)).await) }
    });
    let results = join_all(calls).await;
    assert_eq!(results.len(), 1000);
    for (i, result) in results {
        assert_eq!(
            result.unwrap(),
            i + 1_000_000,
            "call {i} got another call's answer"
        );
    }
}

#[tokio::test]
async fn four_mib_argument_and_result_arrive_byte_exact() {
    let sb = sandbox().await;
    // Every byte value, including 0x1e (the byte that breaks binary events).
    let data: Vec<u8> = (0..4 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    assert!(data.contains(&0x1e));
    let back = sb
        .remote(agentix_e2e::echo_blob, (Blob::from(data.clone()),))
        .await
        .unwrap();
    assert_eq!(back.len(), data.len());
    assert!(
        back.as_slice() == data.as_slice(),
        "payload changed in transit"
    );
}

#[tokio::test]
async fn a_slow_call_does_not_block_others() {
    let sb = sandbox().await;
    let slow = sb.remote(agentix_e2e::sleep_ms, (1500,));
    let fast = async {
        // Let the slow call reach the worker first.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let answer = sb.remote(agentix_e2e::add, (1, 1)).await.unwrap();
        (answer, std::time::Instant::now())
    };
    let (slow, (fast, fast_done)) = tokio::join!(slow, fast);
    let slow_done = std::time::Instant::now();
    assert_eq!(slow.unwrap(), 1500);
    assert_eq!(fast, 2);
    assert!(
        fast_done < slow_done,
        "the fast call waited for the slow one"
    );
}

#[tokio::test]
async fn a_panicking_call_is_an_error_and_the_worker_keeps_serving() {
    let sb = sandbox().await;
    let pid_before = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    let err = sb
        .remote(agentix_e2e::explode, ("kaboom 42".into(),))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Panic);
    assert_eq!(err.type_name, "Panic");
    assert!(err.message.contains("kaboom 42"), "{err}");
    assert!(err.message.contains("agentix_e2e::explode"), "{err}");
    assert_eq!(sb.remote(agentix_e2e::add, (2, 2)).await.unwrap(), 4);
    let pid_after = sb.remote(agentix_e2e::worker_pid, ()).await.unwrap();
    assert_eq!(
        pid_before, pid_after,
        "the worker was restarted instead of surviving"
    );
}

#[tokio::test]
async fn one_argument_calls_take_the_bare_value() {
    let sb = sandbox().await;
    // The bare value and the 1-tuple are the same call.
    assert_eq!(
        sb.remote(agentix_e2e::echo, "bare".to_string())
            .await
            .unwrap(),
        "bare"
    );
    assert_eq!(
        sb.remote(agentix_e2e::echo, ("tuple".to_string(),))
            .await
            .unwrap(),
        "tuple"
    );
    let items: Vec<u64> = sb
        .stream(agentix_e2e::count, 3u64)
        .await
        .unwrap()
        .map(|item| item.unwrap())
        .collect()
        .await;
    assert_eq!(items, [0, 1, 2]);
}
