//! The push floors (`--delivery push`): hyper's HTTP/1.1 server alone on
//! `POST /pubsub/push` (no router, no authentication), each connection in
//! a task of its own with keep-alive, as Pub/Sub pushes. Each request's
//! body is read whole, then answered 204:
//! - at once, or after `--ack-delay-ms` ([`Answer::After`]): what one HTTP
//!   request per message costs by itself;
//! - with `--commit-writes` ([`Answer::Committed`]), once the event in
//!   its body (the envelope's `message.data`, base64) is in a Commit that
//!   answered ([`crate::write_floor::Pushed`]): the write floor (and with
//!   `--preconditions --rollups`, the exact floor) of a push consumer.
//!
//! Any other method or path is answered 404, a body that broke off or an
//! envelope without base64 data 400 (Pub/Sub pushes it again).
//! Invariant: a request is answered 204 only when its message may be
//! forgotten: at once for the plain floor, after its Commit for the write
//! floors.

use std::borrow::Cow;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use http_body_util::{BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};

use crate::write_floor::Pushed;

/// The path Pub/Sub pushes to (as `hotcount run --delivery push` serves).
pub const PUSH_PATH: &str = "/pubsub/push";

/// When a pushed request is answered 204.
#[derive(Clone)]
pub enum Answer {
    /// After this long (zero: at once).
    After(Duration),
    /// Once its event's group has committed.
    Committed(Arc<Pushed>),
}

/// The push envelope's part the write floor reads.
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    message: Message<'a>,
}

/// The pushed message's data, base64 as the envelope carries it.
#[derive(serde::Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    data: Cow<'a, str>,
}

/// The event a push envelope carries (its `message.data` decoded), or
/// `None` for a body that is no envelope.
fn event_of(body: &[u8]) -> Option<Bytes> {
    let envelope: Envelope<'_> = serde_json::from_slice(body).ok()?;
    base64::engine::general_purpose::STANDARD
        .decode(envelope.message.data.as_bytes())
        .ok()
        .map(Bytes::from)
}

/// One push request answered as `answer` says.
async fn answer_push(
    request: Request<Incoming>,
    answer: Answer,
) -> Result<Response<Empty<Bytes>>, Infallible> {
    let status = if request.method() != Method::POST || request.uri().path() != PUSH_PATH {
        StatusCode::NOT_FOUND
    } else {
        match (request.into_body().collect().await, answer) {
            (Err(_), _) => StatusCode::BAD_REQUEST,
            (Ok(_), Answer::After(delay)) => {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                StatusCode::NO_CONTENT
            }
            (Ok(body), Answer::Committed(pushed)) => {
                // The body is let go before the wait: it shares the
                // connection's read buffer, which hyper would otherwise
                // replace for the next request.
                let event = event_of(&body.to_bytes());
                match event {
                    None => StatusCode::BAD_REQUEST,
                    Some(event) => match pushed.offer(event).await {
                        Ok(()) => StatusCode::NO_CONTENT,
                        // Its Commit's task ended without answering: pushed again.
                        Err(_) => StatusCode::SERVICE_UNAVAILABLE,
                    },
                }
            }
        }
    };
    let mut response = Response::new(Empty::new());
    *response.status_mut() = status;
    Ok(response)
}

/// Serves a push floor on `addr` until SIGTERM/SIGINT.
pub async fn serve(addr: SocketAddr, answer: Answer) -> std::process::ExitCode {
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("hotcount-null-consumer: binding {addr}: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let accept = async {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    eprintln!("hotcount-null-consumer: accept: {error}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let answer = answer.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |request| answer_push(request, answer.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = accept => {}
    }
    std::process::ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_is_the_envelopes_data_decoded_and_a_body_without_it_is_none() {
        let event = br#"{"type":"like.added"}"#;
        let data = base64::engine::general_purpose::STANDARD.encode(event);
        let body = format!(
            r#"{{"message":{{"data":"{data}","messageId":"7","attributes":{{"a":"b"}}}},"subscription":"s"}}"#
        );
        assert_eq!(event_of(body.as_bytes()).as_deref(), Some(&event[..]));
        for broken in [
            &b"not json"[..],
            br#"{"message":{"messageId":"7"}}"#,
            br#"{"message":{"data":"%%%"}}"#,
        ] {
            assert_eq!(
                event_of(broken),
                None,
                "{}",
                String::from_utf8_lossy(broken)
            );
        }
    }
}
