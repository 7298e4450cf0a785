//! Unit tests of the parent module.

use super::*;

/// A request that records when it is first polled, then answers `outcome`
/// at once (`Err` on the first poll: it failed unsent) or after one wait.
fn request(
    id: u32,
    outcome: Result<u64, String>,
    at_once: bool,
    polled: Arc<parking_lot::Mutex<Vec<u32>>>,
) -> Request<'static, u64, String> {
    Box::pin(async move {
        polled.lock().push(id);
        if !at_once {
            tokio::task::yield_now().await;
        }
        outcome
    })
}

#[tokio::test]
async fn requests_are_sent_in_order_and_nothing_after_one_that_failed_unsent() {
    let polled = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let all_sent = vec![
        request(1, Ok(1), false, polled.clone()),
        request(2, Err("refused".into()), false, polled.clone()),
        request(3, Ok(3), false, polled.clone()),
    ];
    let results = pipeline(all_sent).await;
    assert_eq!(*polled.lock(), [1, 2, 3]);
    assert_eq!(
        results,
        [Some(Ok(1)), Some(Err("refused".into())), Some(Ok(3))],
        "an error answered by the server stops nothing"
    );

    polled.lock().clear();
    let unsent = vec![
        request(1, Ok(1), false, polled.clone()),
        request(2, Err("cannot encode".into()), true, polled.clone()),
        request(3, Ok(3), false, polled.clone()),
    ];
    let results = pipeline(unsent).await;
    assert_eq!(*polled.lock(), [1, 2], "the COMMIT after it is never sent");
    assert_eq!(
        results,
        [Some(Ok(1)), Some(Err("cannot encode".into())), None]
    );
}
