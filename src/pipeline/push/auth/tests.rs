//! Push token verification against a loopback JWKS server and test keys:
//! what passes, each way a token is refused (with its reason), and how
//! the keys are fetched (once, shared, rate-limited, stale on failure).

use std::time::Duration;

use axum::http::HeaderValue;

use super::*;

#[path = "../../../../tests/support/oidc.rs"]
mod oidc;

use oidc::{claims, now, JwksServer, Signer, AUDIENCE, SERVICE_ACCOUNT};

const KID: &str = "key-1";

fn google(url: String) -> GoogleAuth {
    GoogleAuth {
        audience: AUDIENCE.into(),
        service_account: SERVICE_ACCOUNT.into(),
        jwks_url: url,
    }
}

/// A verifier over `server`'s keys with short fetch windows.
fn verifier(server: &JwksServer) -> Verifier {
    let jwks = JwksConfig {
        unknown_kid_refetch: Duration::from_millis(300),
        failed_retry: Duration::from_millis(300),
        min_ttl: Duration::from_millis(200),
        ..JwksConfig::new(server.url())
    };
    Verifier::new(&google(server.url()), jwks, Arc::new(Stats::default()))
}

async fn server_of(signer: &Signer) -> JwksServer {
    JwksServer::start(oidc::jwks(&[signer])).await
}

/// The reason `result` was refused for.
fn reason(result: Result<(), Refusal>) -> AuthFailure {
    match result {
        Err(Refusal::Unauthenticated(failure, _)) | Err(Refusal::Forbidden(failure, _)) => failure,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// `claims()` with `key` set to `value` (or removed when null).
fn with(key: &str, value: serde_json::Value) -> serde_json::Value {
    let mut claims = claims();
    let map = claims.as_object_mut().expect("claims are an object");
    if value.is_null() {
        map.remove(key);
    } else {
        map.insert(key.into(), value);
    }
    claims
}

#[tokio::test]
async fn a_valid_push_token_passes_and_its_signature_is_checked_once() {
    let signer = Signer::google(KID);
    let server = server_of(&signer).await;
    let verifier = verifier(&server);
    let token = signer.push_token();
    assert_eq!(verifier.verify(&token).await, Ok(()));
    assert_eq!(verifier.verify(&token).await, Ok(()));
    assert_eq!(server.requests(), 1, "the key set is fetched once");
    assert_eq!(
        verifier.verified.lock().len(),
        1,
        "remembered once verified"
    );
    // Both spellings of Google's issuer.
    let bare = signer.sign(&with("iss", "accounts.google.com".into()));
    assert_eq!(verifier.verify(&bare).await, Ok(()));
}

#[tokio::test]
async fn forged_expired_and_misaddressed_tokens_are_refused_with_their_reason() {
    let signer = Signer::google(KID);
    let server = server_of(&signer).await;
    let verifier = verifier(&server);
    let now = now();
    let cases: Vec<(&str, String, AuthFailure)> = vec![
        (
            "signed by another key under the same key id",
            Signer::forger(KID).push_token(),
            AuthFailure::Signature,
        ),
        (
            "expired a minute ago",
            signer.sign(&with("exp", (now - 60).into())),
            AuthFailure::Expired,
        ),
        (
            "issued two minutes from now",
            signer.sign(&with("iat", (now + 120).into())),
            AuthFailure::Expired,
        ),
        (
            "for another audience",
            signer.sign(&with("aud", "https://elsewhere.example/push".into())),
            AuthFailure::Audience,
        ),
        (
            "without an audience",
            signer.sign(&with("aud", serde_json::Value::Null)),
            AuthFailure::Audience,
        ),
        (
            "from another issuer",
            signer.sign(&with("iss", "https://issuer.example".into())),
            AuthFailure::Issuer,
        ),
        (
            "without an expiry",
            signer.sign(&with("exp", serde_json::Value::Null)),
            AuthFailure::Malformed,
        ),
        (
            "of another service account",
            signer.sign(&with(
                "email",
                "intruder@other.iam.gserviceaccount.com".into(),
            )),
            AuthFailure::Email,
        ),
        (
            "with an unverified email",
            signer.sign(&with("email_verified", false.into())),
            AuthFailure::Email,
        ),
        (
            "without email_verified",
            signer.sign(&with("email_verified", serde_json::Value::Null)),
            AuthFailure::Email,
        ),
        (
            "without an email",
            signer.sign(&with("email", serde_json::Value::Null)),
            AuthFailure::Email,
        ),
        ("not a JWT", "not-a-token".into(), AuthFailure::Malformed),
        (
            "signed with a shared secret (HS256)",
            jsonwebtoken::encode(
                &jsonwebtoken::Header {
                    kid: Some(KID.into()),
                    ..jsonwebtoken::Header::new(Algorithm::HS256)
                },
                &claims(),
                &jsonwebtoken::EncodingKey::from_secret(b"guessable"),
            )
            .expect("hs256 token"),
            AuthFailure::Malformed,
        ),
        (
            "without a key id",
            signer.sign_without_kid(&claims()),
            AuthFailure::Malformed,
        ),
    ];
    for (what, token, want) in cases {
        assert_eq!(
            reason(verifier.verify(&token).await),
            want,
            "a token {what}"
        );
    }
    // Within the skew: expired 10 s ago still passes.
    let late = signer.sign(&with("exp", (now - 10).into()));
    assert_eq!(verifier.verify(&late).await, Ok(()));
    assert!(
        verifier.verified.lock().len() == 1,
        "no refused token is remembered"
    );
}

#[tokio::test]
async fn a_missing_or_non_bearer_authorization_is_refused_before_any_key_is_fetched() {
    let signer = Signer::google(KID);
    let server = server_of(&signer).await;
    let auth = Authenticator::Google(Box::new(verifier(&server)));
    let mut headers = HeaderMap::new();
    assert_eq!(
        reason(auth.check(&headers, &TokenMemo::default()).await),
        AuthFailure::Missing
    );
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_static("Basic dTpw"),
    );
    assert_eq!(
        reason(auth.check(&headers, &TokenMemo::default()).await),
        AuthFailure::Malformed
    );
    headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
    assert_eq!(
        reason(auth.check(&headers, &TokenMemo::default()).await),
        AuthFailure::Malformed
    );
    assert_eq!(server.requests(), 0);
    let token = format!("bearer {}", signer.push_token());
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&token).expect("header value"),
    );
    assert_eq!(auth.check(&headers, &TokenMemo::default()).await, Ok(()));
}

#[tokio::test]
async fn an_unknown_key_id_refetches_the_keys_at_most_once_per_window() {
    let old = Signer::google(KID);
    let server = server_of(&old).await;
    let verifier = verifier(&server);
    assert_eq!(verifier.verify(&old.push_token()).await, Ok(()));
    // Google rotates: tokens signed with a key the cached set lacks.
    let rotated = Signer::google("key-2");
    assert_eq!(
        reason(verifier.verify(&rotated.push_token()).await),
        AuthFailure::UnknownKey
    );
    assert_eq!(server.requests(), 1, "fetched at most once per window");
    server.publish(oidc::jwks(&[&old, &rotated]));
    // A flood of unknown key ids within the window costs no fetch.
    for i in 0..20 {
        let forged = Signer::forger(&format!("made-up-{i}")).push_token();
        assert_eq!(
            reason(verifier.verify(&forged).await),
            AuthFailure::UnknownKey
        );
    }
    assert_eq!(server.requests(), 1);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(verifier.verify(&rotated.push_token()).await, Ok(()));
    assert_eq!(server.requests(), 2, "the new key was fetched");
}

#[tokio::test]
async fn keys_that_cannot_be_fetched_answer_unavailable_and_cached_keys_keep_serving() {
    let signer = Signer::google(KID);
    let server = server_of(&signer).await;
    server.fail(true);
    let verifier = verifier(&server);
    let token = signer.push_token();
    assert!(matches!(
        verifier.verify(&token).await,
        Err(Refusal::KeysUnavailable(_))
    ));
    assert!(matches!(
        verifier.verify(&signer.sign(&claims())).await,
        Err(Refusal::KeysUnavailable(_))
    ));
    assert_eq!(
        server.requests(),
        1,
        "no second fetch right after a failure"
    );
    server.fail(false);
    // Kept no longer than the answer says (at least the 200 ms minimum here).
    server.cache_control("max-age=0");
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(verifier.verify(&token).await, Ok(()));
    // The set expires (its 200 ms minimum here) and the server fails
    // again: the cached key keeps serving a new token, a key the set
    // lacks is unavailable (not unknown).
    server.fail(true);
    tokio::time::sleep(Duration::from_millis(250)).await;
    let fresh = signer.sign(&with("iat", (now() - 1).into()));
    assert_eq!(verifier.verify(&fresh).await, Ok(()));
    let unknown = verifier.verify(&Signer::google("key-9").push_token()).await;
    assert!(
        matches!(unknown, Err(Refusal::KeysUnavailable(_))),
        "{unknown:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_verifications_all_pass_and_share_one_fetch() {
    let signer = Signer::google(KID);
    let server = server_of(&signer).await;
    let verifier = Arc::new(verifier(&server));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..64 {
        let token = signer.sign(&with("azp", format!("client-{i}").into()));
        let verifier = verifier.clone();
        tasks.spawn(async move { verifier.verify(&token).await });
    }
    while let Some(result) = tasks.join_next().await {
        assert_eq!(result.expect("task"), Ok(()));
    }
    assert_eq!(server.requests(), 1);
    assert_eq!(verifier.verified.lock().len(), 64);
}

#[tokio::test]
async fn a_connections_memo_proves_only_the_token_it_verified_and_only_until_it_expires() {
    let signer = Signer::google(KID);
    let server = server_of(&signer).await;
    let auth = Authenticator::Google(Box::new(verifier(&server)));
    let memo = TokenMemo::default();
    let bearer = |token: &str| {
        let mut headers = HeaderMap::new();
        let value = HeaderValue::from_str(&format!("Bearer {token}")).expect("header value");
        headers.insert(header::AUTHORIZATION, value);
        headers
    };
    let now = now() as u64;
    let exp = now + 600;
    let token = signer.sign(&with("exp", exp.into()));
    assert!(!memo.proves(&token, now), "nothing remembered yet");
    assert_eq!(auth.check(&bearer(&token), &memo).await, Ok(()));
    assert!(memo.proves(&token, now), "remembered once verified");
    // Another token, even one with the same claims, is checked in full:
    // a forged one is refused and the memo keeps the proved one.
    let forged = Signer::forger(KID).sign(&with("exp", exp.into()));
    assert!(!memo.proves(&forged, now));
    assert_eq!(
        reason(auth.check(&bearer(&forged), &memo).await),
        AuthFailure::Signature
    );
    assert!(memo.proves(&token, now));
    // Past its exp (and the skew allowed), the remembered token proves
    // nothing.
    assert!(memo.proves(&token, exp + CLOCK_SKEW_SECS));
    assert!(!memo.proves(&token, exp + CLOCK_SKEW_SECS + 1));
}
