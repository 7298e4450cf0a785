//! OIDC tokens for push requests: the emulator's own RSA key, the RS256 JWTs
//! it signs (Google's claims: `iss`, `aud`, `azp`, `sub`, `email`,
//! `email_verified`, `iat`, `exp`) and the JWKS that publishes its public key,
//! so a push endpoint can verify tokens locally as it verifies Google's.
//!
//! Invariant: one key per emulator, made on first use and never changed, so
//! every token an emulator ever signs verifies against its JWKS; a token is
//! reused for at most [`TOKEN_REUSE`] and is valid for [`TOKEN_LIFETIME`] from
//! its `iat` (real time: endpoints check tokens against their own clock).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::{KeyPair, KeySize};
use aws_lc_rs::signature::{KeyPair as _, RSA_PKCS1_SHA256};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use parking_lot::Mutex;
use serde_json::{json, Value};

/// The issuer Google's push tokens carry.
pub const ISSUER: &str = "https://accounts.google.com";

/// How long a token is valid after it is issued (Google's ID tokens: 1 h).
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// How long a token is reused for the same service account and audience
/// before a new one is signed (Google's push tokens may be reused too).
pub const TOKEN_REUSE: Duration = Duration::from_secs(600);

/// The emulator's signing key and the tokens it signed recently.
pub struct Signer {
    key: KeyPair,
    kid: String,
    /// (service account, audience) -> (token, issued at).
    recent: Mutex<HashMap<(String, String), (String, SystemTime)>>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer").field("kid", &self.kid).finish()
    }
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Signer {
    /// A new 2048-bit RSA key; its `kid` is 40 hex digits (as Google's are)
    /// from a SHA-256 of the public key.
    pub fn generate() -> Result<Self, String> {
        let key = KeyPair::generate(KeySize::Rsa2048)
            .map_err(|_| "RSA key generation failed".to_string())?;
        let public = key.public_key();
        let mut material = public.modulus().big_endian_without_leading_zero().to_vec();
        material.extend_from_slice(public.exponent().big_endian_without_leading_zero());
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &material);
        let kid = digest.as_ref()[..20]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(Self {
            key,
            kid,
            recent: Mutex::new(HashMap::new()),
        })
    }

    /// The key id every token's header names.
    #[cfg(test)]
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key as a JSON Web Key Set, in the shape of
    /// `https://www.googleapis.com/oauth2/v3/certs`.
    pub fn jwks(&self) -> Value {
        let public = self.key.public_key();
        json!({
            "keys": [{
                "kty": "RSA",
                "alg": "RS256",
                "use": "sig",
                "kid": self.kid,
                "n": b64(public.modulus().big_endian_without_leading_zero()),
                "e": b64(public.exponent().big_endian_without_leading_zero()),
            }]
        })
    }

    /// A token for a push request by `email` to `audience`, issued within
    /// the last [`TOKEN_REUSE`] of `now` or signed anew.
    #[cfg(test)]
    pub fn token(&self, email: &str, audience: &str, now: SystemTime) -> Result<String, String> {
        self.token_issued(email, audience, now)
            .map(|(token, _)| token)
    }

    /// [`Signer::token`] with the time it was issued: a caller may reuse
    /// it itself while [`reusable`] says so, as this would.
    pub fn token_issued(
        &self,
        email: &str,
        audience: &str,
        now: SystemTime,
    ) -> Result<(String, SystemTime), String> {
        let key = (email.to_string(), audience.to_string());
        if let Some((token, issued)) = self.recent.lock().get(&key) {
            if reusable(*issued, now) {
                return Ok((token.clone(), *issued));
            }
        }
        let token = self.sign(&claims(email, audience, now))?;
        self.recent.lock().insert(key, (token.clone(), now));
        Ok((token, now))
    }

    /// A compact RS256 JWS of `claims` with this key's `kid`.
    pub fn sign(&self, claims: &Value) -> Result<String, String> {
        let header = json!({ "alg": "RS256", "kid": self.kid, "typ": "JWT" });
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let mut signature = vec![0; self.key.public_modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                input.as_bytes(),
                &mut signature,
            )
            .map_err(|_| "RS256 signing failed".to_string())?;
        Ok(format!("{input}.{}", b64(&signature)))
    }
}

/// Whether a token issued at `issued` is still reused at `now` (less than
/// [`TOKEN_REUSE`] old).
pub fn reusable(issued: SystemTime, now: SystemTime) -> bool {
    now.duration_since(issued)
        .is_ok_and(|age| age < TOKEN_REUSE)
}

/// The claims of a push token: Google's set, with `sub` and `azp` (the
/// service account's numeric id in production) derived from the email so
/// they are stable.
pub fn claims(email: &str, audience: &str, now: SystemTime) -> Value {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, email.as_bytes());
    let mut id = [0u8; 8];
    id.copy_from_slice(&digest.as_ref()[..8]);
    let numeric = format!("1{:020}", u64::from_be_bytes(id));
    let iat = secs(now);
    json!({
        "aud": audience,
        "azp": numeric,
        "email": email,
        "email_verified": true,
        "exp": iat + TOKEN_LIFETIME.as_secs(),
        "iat": iat,
        "iss": ISSUER,
        "sub": numeric,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(part: &str) -> Value {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
    }

    #[test]
    fn tokens_verify_against_the_jwks_and_carry_googles_claims() {
        let signer = Signer::generate().unwrap();
        let now = SystemTime::now();
        let token = signer
            .token(
                "push@p.iam.gserviceaccount.com",
                "https://example.com/push",
                now,
            )
            .unwrap();
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header = decode(parts[0]);
        assert_eq!(header["alg"], "RS256");
        assert_eq!(header["kid"], signer.kid());
        let claims = decode(parts[1]);
        assert_eq!(claims["iss"], ISSUER);
        assert_eq!(claims["aud"], "https://example.com/push");
        assert_eq!(claims["email"], "push@p.iam.gserviceaccount.com");
        assert_eq!(claims["email_verified"], true);
        assert_eq!(
            claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(),
            3600
        );
        let jwk = &signer.jwks()["keys"][0];
        assert_eq!(jwk["kid"], signer.kid());
        let n = URL_SAFE_NO_PAD.decode(jwk["n"].as_str().unwrap()).unwrap();
        let e = URL_SAFE_NO_PAD.decode(jwk["e"].as_str().unwrap()).unwrap();
        let public = aws_lc_rs::signature::RsaPublicKeyComponents { n: &n, e: &e };
        let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        let signed = format!("{}.{}", parts[0], parts[1]);
        public
            .verify(
                &aws_lc_rs::signature::RSA_PKCS1_2048_8192_SHA256,
                signed.as_bytes(),
                &signature,
            )
            .expect("the JWKS key verifies the signature");
        // Reused within TOKEN_REUSE, signed anew after.
        let again = signer
            .token(
                "push@p.iam.gserviceaccount.com",
                "https://example.com/push",
                now,
            )
            .unwrap();
        assert_eq!(again, token);
        let later = signer
            .token(
                "push@p.iam.gserviceaccount.com",
                "https://example.com/push",
                now + TOKEN_REUSE,
            )
            .unwrap();
        assert_ne!(later, token);
    }
}
