//! Google-style OIDC tokens for the push tests: a test RSA key that signs
//! them (RS256, with a `kid`), the JWKS that publishes its public half,
//! and a loopback JWKS server that can be told to fail. The keys under
//! `tests/support/oidc-*.pem` are test keys, made for these tests only.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};

/// The key the tests' "Google" signs with.
pub const SIGNER_PEM: &str = include_str!("oidc-test-key.pem");
/// Another key, for forged tokens.
pub const FORGER_PEM: &str = include_str!("oidc-forger-key.pem");

/// The service account and audience the tests' tokens are for.
pub const SERVICE_ACCOUNT: &str = "pusher@hotcount-test.iam.gserviceaccount.com";
pub const AUDIENCE: &str = "https://hotcount.test/pubsub/push";

/// A PKCS#1 PEM key's DER bytes.
fn der(pem: &str) -> Vec<u8> {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("test key PEM is base64")
}

/// Signs tokens as `kid`.
#[derive(Clone)]
pub struct Signer {
    key: Arc<EncodingKey>,
    pub kid: String,
}

impl Signer {
    /// The tests' Google key, as `kid`.
    pub fn google(kid: &str) -> Self {
        Self::of(SIGNER_PEM, kid)
    }

    /// The forger's key, claiming to be `kid`.
    pub fn forger(kid: &str) -> Self {
        Self::of(FORGER_PEM, kid)
    }

    fn of(pem: &str, kid: &str) -> Self {
        Self {
            key: Arc::new(EncodingKey::from_rsa_der(&der(pem))),
            kid: kid.into(),
        }
    }

    /// The JWK of this key's public half.
    pub fn jwk(&self) -> serde_json::Value {
        let mut jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&self.key, Algorithm::RS256)
            .expect("public half of the test key");
        jwk.common.key_id = Some(self.kid.clone());
        serde_json::to_value(jwk).expect("jwk as json")
    }

    /// A token with `claims`, signed RS256 with this key.
    pub fn sign(&self, claims: &serde_json::Value) -> String {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.key).expect("sign test token")
    }

    /// A token with `claims` signed with this key but no `kid` in its header.
    pub fn sign_without_kid(&self, claims: &serde_json::Value) -> String {
        jsonwebtoken::encode(&Header::new(Algorithm::RS256), claims, &self.key)
            .expect("sign test token")
    }

    /// A valid push token: Google's issuer, the tests' audience and
    /// service account, issued now, expiring in an hour.
    pub fn push_token(&self) -> String {
        self.sign(&claims())
    }
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64
}

/// The claims of a valid push token (change them to make an invalid one).
pub fn claims() -> serde_json::Value {
    let now = now();
    serde_json::json!({
        "iss": "https://accounts.google.com",
        "aud": AUDIENCE,
        "azp": "1234567890",
        "sub": "1234567890",
        "email": SERVICE_ACCOUNT,
        "email_verified": true,
        "iat": now,
        "exp": now + 3600,
    })
}

/// A JWKS `{"keys": [...]}` of `signers`.
pub fn jwks(signers: &[&Signer]) -> serde_json::Value {
    serde_json::json!({ "keys": signers.iter().map(|s| s.jwk()).collect::<Vec<_>>() })
}

/// A loopback server of one JWKS at `/certs`, counting its requests; it
/// answers 500 while told to fail.
#[derive(Clone)]
pub struct JwksServer {
    pub addr: SocketAddr,
    state: Arc<ServerState>,
}

struct ServerState {
    body: parking_lot::Mutex<serde_json::Value>,
    failing: AtomicBool,
    requests: AtomicU64,
    cache_control: parking_lot::Mutex<String>,
}

impl JwksServer {
    /// Serves `jwks` until the runtime ends.
    pub async fn start(jwks: serde_json::Value) -> Self {
        let state = Arc::new(ServerState {
            body: parking_lot::Mutex::new(jwks),
            failing: AtomicBool::new(false),
            requests: AtomicU64::new(0),
            cache_control: parking_lot::Mutex::new("public, max-age=3600".into()),
        });
        let serving = state.clone();
        let app = axum::Router::new().route(
            "/certs",
            axum::routing::get(move || {
                let state = serving.clone();
                async move {
                    state.requests.fetch_add(1, Ordering::Relaxed);
                    if state.failing.load(Ordering::Relaxed) {
                        return axum::response::IntoResponse::into_response(
                            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                        );
                    }
                    let cache_control = state.cache_control.lock().clone();
                    axum::response::IntoResponse::into_response((
                        [(axum::http::header::CACHE_CONTROL, cache_control)],
                        axum::Json(state.body.lock().clone()),
                    ))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind JWKS server");
        let addr = listener.local_addr().expect("JWKS server address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, state }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("http://{}/certs", self.addr)
    }

    /// Answers 500 from now on (or serves again).
    pub fn fail(&self, failing: bool) {
        self.state.failing.store(failing, Ordering::Relaxed);
    }

    /// Serves `jwks` from now on.
    pub fn publish(&self, jwks: serde_json::Value) {
        *self.state.body.lock() = jwks;
    }

    /// Answers with this `Cache-Control` from now on.
    pub fn cache_control(&self, value: &str) {
        *self.state.cache_control.lock() = value.into();
    }

    /// Requests served (or failed) so far.
    pub fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::Relaxed)
    }
}
