//! Signed JWTs checked against a JSON Web Key Set: Kafka's `OAuthBearerValidatorCallbackHandler`
//! (KIP-768), whose `ValidatorAccessTokenValidator` has jose4j check the token. Sluice reads
//! the key set from a file (`sasl.oauthbearer.jwks.endpoint.url=file:///...`, Kafka's
//! `JwksFileVerificationKeyResolver`): it has no HTTP client, so an operator keeps the file
//! current (a cron job, a sidecar, a mounted secret) and the broker re-reads it when it
//! changes ([`JwksFile`]), which Kafka does not do for files.
//!
//! # What is checked, in jose4j's order
//! 1. The serialization (three parts), the header's `alg`: RS256/384/512, PS256/384/512,
//!    ES256, ES384 or EdDSA (`none`, HMAC and the rest are refused), no `crit` parameter
//!    (jose4j understands none either).
//! 2. The key: the JWKS keys whose `kid` is the header's (any key when the header has none),
//!    whose type fits `alg` and whose `alg`, if given, is the header's; the signature must
//!    verify with one of them. A `kid` no key has makes the broker re-read the file (at most
//!    once a second), so a key rotated in is used at once.
//! 3. `exp` and `iat` present; `exp` after now minus `sasl.oauthbearer.clock.skew.seconds`
//!    (default 30), `nbf` (if present) not after now plus the skew.
//! 4. `iss` equals `sasl.oauthbearer.expected.issuer` when that is set.
//! 5. `aud` holds one of `sasl.oauthbearer.expected.audience` when that is set; a token with
//!    an `aud` is refused when it is not (jose4j's default, so Kafka's: set the audience).
//! 6. The subject claim (`sasl.oauthbearer.sub.claim.name`, default `sub`) a non-blank
//!    string: the principal; the scope claim (`sasl.oauthbearer.scope.claim.name`) a string
//!    or a list of distinct non-blank strings.
//!
//! Every refusal is `invalid_token` to the client, the reason in the broker's log, as in
//! Kafka. Everything read is bounded: the token by the SASL message, the file by
//! [`JWKS_FILE_BYTES_MAX`], the keys by [`JWKS_KEYS_MAX`], each key's size by its type.

use std::fmt;
use std::io::Read;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde_json::{Map, Value};

use super::jwt;
use crate::security::sasl::BearerToken;

/// The largest JWKS file read.
pub const JWKS_FILE_BYTES_MAX: u64 = 1 << 20;
/// The most keys a JWKS may hold.
pub const JWKS_KEYS_MAX: usize = 256;
/// The longest `kid` kept.
const KID_BYTES_MAX: usize = 256;
/// RSA moduli of 2048 to 8192 bits, ring's (and jose4j's) bounds.
const RSA_MODULUS_BYTES_MIN: usize = 256;
const RSA_MODULUS_BYTES_MAX: usize = 1024;
/// ring accepts public exponents of at most 33 bits.
const RSA_EXPONENT_BYTES_MAX: usize = 5;
/// How often a validation looks whether the JWKS file changed.
pub const JWKS_CHECK_INTERVAL: Duration = Duration::from_secs(10);
/// How often a token whose `kid` no key has may make the broker look at the file again.
pub const JWKS_MISS_RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// The JWKS validator's settings: Kafka's `sasl.oauthbearer.*` broker keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwksSettings {
    /// `sasl.oauthbearer.jwks.endpoint.url`, as configured (a `file:` URL).
    pub url: String,
    /// The file it names.
    pub path: PathBuf,
    /// `sasl.oauthbearer.expected.audience` (empty: none expected, and none accepted).
    pub expected_audience: Vec<String>,
    /// `sasl.oauthbearer.expected.issuer`.
    pub expected_issuer: Option<String>,
    /// `sasl.oauthbearer.sub.claim.name` (default `sub`).
    pub sub_claim: String,
    /// `sasl.oauthbearer.scope.claim.name` (default `scope`).
    pub scope_claim: String,
    /// `sasl.oauthbearer.clock.skew.seconds` (default 30).
    pub clock_skew_seconds: u64,
}

/// Why a JWKS could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwksError {
    #[error("cannot read the JWKS file {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("the JWKS file {path} is {bytes} bytes, more than {JWKS_FILE_BYTES_MAX}")]
    TooLarge { path: PathBuf, bytes: u64 },
    #[error("the JWKS in {path} is unusable: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

/// A curve of an EC key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Curve {
    P256,
    P384,
}

impl Curve {
    fn coordinate_bytes(self) -> usize {
        match self {
            Curve::P256 => 32,
            Curve::P384 => 48,
        }
    }
}

/// A public key's material, checked for size when read.
#[derive(Clone, PartialEq, Eq)]
enum KeyMaterial {
    /// Big-endian modulus and exponent, leading zeros removed.
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// The uncompressed point, `04 || x || y`.
    Ec {
        curve: Curve,
        point: Vec<u8>,
    },
    Ed25519(Vec<u8>),
}

/// One usable key of the set.
#[derive(Clone, PartialEq, Eq)]
struct Jwk {
    kid: Option<String>,
    alg: Option<String>,
    material: KeyMaterial,
}

impl fmt::Debug for Jwk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.material {
            KeyMaterial::Rsa { n, .. } => format!("RSA-{}", n.len() * 8),
            KeyMaterial::Ec { curve, .. } => format!("EC {curve:?}"),
            KeyMaterial::Ed25519(_) => "Ed25519".into(),
        };
        f.debug_struct("Jwk")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .field("kind", &kind)
            .finish()
    }
}

/// The keys of a JWKS Sluice can verify with; the others skipped, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySet {
    keys: Vec<Jwk>,
    /// What was skipped and why (symmetric keys, other curves, `use` other than `sig`).
    pub skipped: Vec<String>,
}

impl KeySet {
    /// Reads a JWKS document (`{"keys":[...]}`). Keys Sluice cannot use are skipped (and said
    /// in `skipped`); a set with no usable key is an error, since it would refuse every token.
    pub fn parse(bytes: &[u8]) -> Result<KeySet, String> {
        let document: Value =
            serde_json::from_slice(bytes).map_err(|error| format!("not JSON: {error}"))?;
        let entries = document
            .get("keys")
            .and_then(Value::as_array)
            .ok_or("no \"keys\" array")?;
        if entries.len() > JWKS_KEYS_MAX {
            return Err(format!("{} keys, more than {JWKS_KEYS_MAX}", entries.len()));
        }
        let mut keys = Vec::new();
        let mut skipped = Vec::new();
        for (index, entry) in entries.iter().enumerate() {
            match parse_key(entry) {
                Ok(key) => keys.push(key),
                Err(reason) => skipped.push(format!("key {index}: {reason}")),
            }
        }
        if keys.is_empty() {
            return Err(format!(
                "no key Sluice can verify with ({})",
                if skipped.is_empty() {
                    "the set is empty".to_owned()
                } else {
                    skipped.join("; ")
                }
            ));
        }
        Ok(KeySet { keys, skipped })
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

fn parse_key(entry: &Value) -> Result<Jwk, String> {
    let entry = entry.as_object().ok_or("not a JSON object")?;
    let text = |name: &str| jwt::string(entry, name);
    if let Some(usage) = text("use")?
        && usage != "sig"
    {
        return Err(format!("\"use\" is {usage:?}, not \"sig\""));
    }
    let kid = text("kid")?.map(str::to_owned);
    if kid.as_ref().is_some_and(|kid| kid.len() > KID_BYTES_MAX) {
        return Err(format!("a kid longer than {KID_BYTES_MAX} bytes"));
    }
    let alg = text("alg")?.map(str::to_owned);
    let bytes = |name: &str| -> Result<Vec<u8>, String> {
        let value = text(name)?.ok_or_else(|| format!("no \"{name}\""))?;
        // Bounded: the largest member is an 8192-bit modulus.
        if value.len() > 2 * RSA_MODULUS_BYTES_MAX {
            return Err(format!("\"{name}\" is too long"));
        }
        jwt::decode_base64url(value).map_err(|error| format!("\"{name}\": {error}"))
    };
    let kty = text("kty")?.ok_or("no \"kty\"")?;
    let material = match kty {
        "RSA" => {
            let n = strip_leading_zeros(bytes("n")?);
            let e = strip_leading_zeros(bytes("e")?);
            if !(RSA_MODULUS_BYTES_MIN..=RSA_MODULUS_BYTES_MAX).contains(&n.len()) {
                return Err(format!(
                    "an RSA modulus of {} bits, outside 2048..=8192",
                    n.len() * 8
                ));
            }
            if e.is_empty() || e.len() > RSA_EXPONENT_BYTES_MAX {
                return Err("an RSA exponent out of range".into());
            }
            KeyMaterial::Rsa { n, e }
        }
        "EC" => {
            let curve = match text("crv")? {
                Some("P-256") => Curve::P256,
                Some("P-384") => Curve::P384,
                other => return Err(format!("EC curve {other:?} is not served (P-256, P-384)")),
            };
            let (x, y) = (bytes("x")?, bytes("y")?);
            let size = curve.coordinate_bytes();
            if x.len() != size || y.len() != size {
                return Err(format!("EC coordinates of {curve:?} must be {size} bytes"));
            }
            let mut point = Vec::with_capacity(1 + 2 * size);
            point.push(0x04);
            point.extend_from_slice(&x);
            point.extend_from_slice(&y);
            KeyMaterial::Ec { curve, point }
        }
        "OKP" => match text("crv")? {
            Some("Ed25519") => {
                let x = bytes("x")?;
                if x.len() != signature::ED25519_PUBLIC_KEY_LEN {
                    return Err("an Ed25519 key must be 32 bytes".into());
                }
                KeyMaterial::Ed25519(x)
            }
            other => return Err(format!("OKP curve {other:?} is not served (Ed25519)")),
        },
        "oct" => return Err("symmetric (oct) keys are not served".into()),
        other => return Err(format!("key type {other:?} is not served")),
    };
    Ok(Jwk { kid, alg, material })
}

fn strip_leading_zeros(mut bytes: Vec<u8>) -> Vec<u8> {
    let zeros = bytes.iter().take_while(|b| **b == 0).count();
    bytes.drain(..zeros);
    bytes
}

/// A JWS algorithm Sluice verifies.
#[derive(Clone, Copy)]
enum Algorithm {
    Rsa(&'static signature::RsaParameters),
    Ecdsa(&'static signature::EcdsaVerificationAlgorithm, Curve),
    Ed25519,
}

fn algorithm(name: &str) -> Option<Algorithm> {
    Some(match name {
        "RS256" => Algorithm::Rsa(&signature::RSA_PKCS1_2048_8192_SHA256),
        "RS384" => Algorithm::Rsa(&signature::RSA_PKCS1_2048_8192_SHA384),
        "RS512" => Algorithm::Rsa(&signature::RSA_PKCS1_2048_8192_SHA512),
        "PS256" => Algorithm::Rsa(&signature::RSA_PSS_2048_8192_SHA256),
        "PS384" => Algorithm::Rsa(&signature::RSA_PSS_2048_8192_SHA384),
        "PS512" => Algorithm::Rsa(&signature::RSA_PSS_2048_8192_SHA512),
        "ES256" => Algorithm::Ecdsa(&signature::ECDSA_P256_SHA256_FIXED, Curve::P256),
        "ES384" => Algorithm::Ecdsa(&signature::ECDSA_P384_SHA384_FIXED, Curve::P384),
        "EdDSA" => Algorithm::Ed25519,
        _ => return None,
    })
}

impl Algorithm {
    fn fits(self, key: &KeyMaterial) -> bool {
        match (self, key) {
            (Algorithm::Rsa(_), KeyMaterial::Rsa { .. }) => true,
            (
                Algorithm::Ecdsa(_, curve),
                KeyMaterial::Ec {
                    curve: key_curve, ..
                },
            ) => curve == *key_curve,
            (Algorithm::Ed25519, KeyMaterial::Ed25519(_)) => true,
            _ => false,
        }
    }

    fn verify(self, key: &KeyMaterial, message: &[u8], signature: &[u8]) -> bool {
        match (self, key) {
            (Algorithm::Rsa(parameters), KeyMaterial::Rsa { n, e }) => {
                RsaPublicKeyComponents { n, e }
                    .verify(parameters, message, signature)
                    .is_ok()
            }
            (Algorithm::Ecdsa(algorithm, _), KeyMaterial::Ec { point, .. }) => {
                UnparsedPublicKey::new(algorithm, point)
                    .verify(message, signature)
                    .is_ok()
            }
            (Algorithm::Ed25519, KeyMaterial::Ed25519(x)) => {
                UnparsedPublicKey::new(&signature::ED25519, x)
                    .verify(message, signature)
                    .is_ok()
            }
            _ => false,
        }
    }
}

/// Why a signed token was refused: no key of the set could be used for it (the set may be
/// out of date: worth a re-read), or anything else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignedRefusal {
    NoKey(String),
    Invalid(String),
}

impl SignedRefusal {
    pub fn reason(self) -> String {
        match self {
            SignedRefusal::NoKey(reason) | SignedRefusal::Invalid(reason) => reason,
        }
    }
}

/// Validates a signed token against `keys` at `now_ms` (UNIX milliseconds): the module's
/// checks, in order.
pub fn validate_signed(
    token: &str,
    settings: &JwksSettings,
    keys: &KeySet,
    now_ms: u64,
) -> Result<BearerToken, SignedRefusal> {
    let invalid = SignedRefusal::Invalid;
    let jws = jwt::parse(token).map_err(invalid)?;
    let alg_name = jwt::string(&jws.header, "alg")
        .map_err(invalid)?
        .ok_or_else(|| invalid("the JWS header has no alg".into()))?;
    if alg_name == "none" {
        return Err(invalid(
            "an unsecured JWS (alg none) is not accepted: this listener checks signatures".into(),
        ));
    }
    let alg = algorithm(alg_name).ok_or_else(|| {
        invalid(format!(
            "JWS algorithm {alg_name:?} is not served (RS256/384/512, PS256/384/512, ES256, \
             ES384, EdDSA)"
        ))
    })?;
    if jws.header.contains_key("crit") {
        return Err(invalid(
            "the JWS header has critical parameters (crit), none of which is understood".into(),
        ));
    }
    let kid = jwt::string(&jws.header, "kid").map_err(invalid)?;
    let candidates: Vec<&Jwk> = keys
        .keys
        .iter()
        .filter(|key| kid.is_none_or(|kid| key.kid.as_deref() == Some(kid)))
        .filter(|key| alg.fits(&key.material))
        .filter(|key| key.alg.as_deref().is_none_or(|key_alg| key_alg == alg_name))
        .collect();
    if candidates.is_empty() {
        return Err(SignedRefusal::NoKey(match kid {
            Some(kid) => format!("no {alg_name} key with kid {kid:?} in the JWKS"),
            None => format!("no {alg_name} key in the JWKS"),
        }));
    }
    let signature = jwt::decode_base64url(jws.signature_text)
        .map_err(|error| invalid(format!("the signature: {error}")))?;
    let input = jws.signing_input.as_bytes();
    if !candidates
        .iter()
        .any(|key| alg.verify(&key.material, input, &signature))
    {
        return Err(invalid(format!(
            "the {alg_name} signature does not verify with the JWKS key{}",
            kid.map_or(String::new(), |kid| format!(" {kid:?}"))
        )));
    }
    check_claims(&jws.claims, settings, now_ms).map_err(invalid)
}

/// The claims' checks (3 to 6 of the module's list).
fn check_claims(
    claims: &Map<String, Value>,
    settings: &JwksSettings,
    now_ms: u64,
) -> Result<BearerToken, String> {
    // jose4j reads a NumericDate as whole seconds.
    let date_ms =
        |name: &str| -> Result<Option<i64>, String> {
            Ok(jwt::seconds(claims, name)?
                .map(|seconds| (seconds.trunc() as i64).saturating_mul(1000)))
        };
    let expires_at_ms = date_ms("exp")?.ok_or("no Expiration Time (exp) claim present")?;
    let issued_at_ms = date_ms("iat")?.ok_or("no Issued At (iat) claim present")?;
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    let skew_ms =
        i64::try_from(settings.clock_skew_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    if now.saturating_sub(skew_ms) >= expires_at_ms {
        return Err(format!(
            "the JWT is no longer valid: now ({now} ms) minus the clock skew ({skew_ms} ms) is \
             on or after its exp ({expires_at_ms} ms)"
        ));
    }
    if let Some(not_before_ms) = date_ms("nbf")?
        && now.saturating_add(skew_ms) < not_before_ms
    {
        return Err(format!(
            "the JWT is not yet valid: now ({now} ms) plus the clock skew ({skew_ms} ms) is \
             before its nbf ({not_before_ms} ms)"
        ));
    }
    if issued_at_ms < 0 {
        return Err("iat value must be non-negative".into());
    }
    if let Some(expected) = &settings.expected_issuer {
        match jwt::string(claims, "iss")? {
            Some(issuer) if issuer == expected => {}
            Some(issuer) => {
                return Err(format!(
                    "issuer (iss) {issuer:?} is not the expected {expected:?}"
                ));
            }
            None => return Err("no Issuer (iss) claim present".into()),
        }
    }
    check_audience(claims, &settings.expected_audience)?;
    let subject = jwt::string(claims, &settings.sub_claim)
        .map_err(|_| format!("could not extract the '{}' claim", settings.sub_claim))?
        .map(str::trim)
        .filter(|subject| !subject.is_empty())
        .ok_or_else(|| format!("{} value must be a non-blank string", settings.sub_claim))?;
    check_scope(claims, &settings.scope_claim)?;
    Ok(BearerToken {
        principal: subject.to_owned(),
        expires_at_ms: u64::try_from(expires_at_ms).unwrap_or(0),
    })
}

/// jose4j's audience rule: with an expected audience, `aud` must be present and name one of
/// it; without one, a token must not carry `aud` at all.
fn check_audience(claims: &Map<String, Value>, expected: &[String]) -> Result<(), String> {
    let audience: Vec<&str> = match claims.get("aud") {
        None | Some(Value::Null) => {
            if expected.is_empty() {
                return Ok(());
            }
            return Err("no Audience (aud) claim present".into());
        }
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many
            .iter()
            .map(|item| item.as_str().ok_or("the aud claim holds a non-string"))
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(format!(
                "the aud claim is {}, not a string or list",
                jwt::type_name(other)
            ));
        }
    };
    if expected.is_empty() {
        return Err(format!(
            "audience (aud) {audience:?} present in the JWT but no expected audience is \
             configured (sasl.oauthbearer.expected.audience)"
        ));
    }
    if !audience.iter().any(|aud| expected.iter().any(|e| e == aud)) {
        return Err(format!(
            "audience (aud) {audience:?} does not contain an expected one {expected:?}"
        ));
    }
    Ok(())
}

/// Kafka's `ClaimValidationUtils.validateScopes`: a string or a list of distinct non-blank
/// strings; any other type is no scope.
fn check_scope(claims: &Map<String, Value>, scope_claim: &str) -> Result<(), String> {
    let items: Vec<&Value> = match claims.get(scope_claim) {
        Some(Value::String(_)) => claims.get(scope_claim).into_iter().collect(),
        Some(Value::Array(items)) => items.iter().collect(),
        _ => return Ok(()),
    };
    let mut seen = Vec::with_capacity(items.len());
    for item in items {
        let scope = item
            .as_str()
            .map(str::trim)
            .filter(|scope| !scope.is_empty())
            .ok_or_else(|| format!("{scope_claim} holds a blank or non-string value"))?;
        if seen.contains(&scope) {
            return Err(format!(
                "{scope_claim} value must not contain duplicates - {scope} already present"
            ));
        }
        seen.push(scope);
    }
    Ok(())
}

/// What says the file changed: its modification time and length.
type Stamp = (Option<SystemTime>, u64);

/// Where watching the file stands.
#[derive(Debug, Default)]
struct Watch {
    /// The stamp of the file last read (successfully or not).
    seen: Option<Stamp>,
    /// When the file was last looked at.
    checked_at: Option<Instant>,
    /// The last failure said in the log, so one broken file is said once.
    failing: Option<String>,
}

/// A JWKS file, read at start and re-read when it changes: a validation looks at the file's
/// modification time and length every [`JWKS_CHECK_INTERVAL`], and after a `kid` no key has
/// (at most every [`JWKS_MISS_RELOAD_INTERVAL`]). A changed file that does not load is said
/// once in the log and the keys read before keep serving. The reads are small and rare,
/// made by the connection that happens to validate: one at a time, others go on with the
/// current keys.
pub struct JwksFile {
    path: PathBuf,
    keys: RwLock<Option<Arc<KeySet>>>,
    watch: Mutex<Watch>,
}

impl fmt::Debug for JwksFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JwksFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl JwksFile {
    /// A file not read yet (the first [`JwksFile::load`] or validation reads it).
    pub fn new(path: PathBuf) -> JwksFile {
        JwksFile {
            path,
            keys: RwLock::new(None),
            watch: Mutex::new(Watch::default()),
        }
    }

    /// Reads the file now: the broker's start, which fails if the file does not load.
    pub fn load(&self) -> Result<Arc<KeySet>, JwksError> {
        self.load_at(Instant::now())
    }

    fn load_at(&self, now: Instant) -> Result<Arc<KeySet>, JwksError> {
        let mut watch = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
        watch.seen = self.stamp();
        watch.checked_at = Some(now);
        let keys = Arc::new(self.read()?);
        *self.keys.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&keys));
        watch.failing = None;
        Ok(keys)
    }

    /// The current keys, after looking at the file if it is time to.
    pub fn keys(&self, now: Instant) -> Result<Arc<KeySet>, JwksError> {
        let current = self.current();
        let Some(current) = current else {
            return self.load_at(now);
        };
        self.refresh_if_older(now, JWKS_CHECK_INTERVAL);
        Ok(self.current().unwrap_or(current))
    }

    /// After a token named a key the set lacks: the file re-read if it changed and it was not
    /// looked at in the last [`JWKS_MISS_RELOAD_INTERVAL`]. `Some`: new keys to try.
    pub fn refresh_after_miss(&self, now: Instant) -> Option<Arc<KeySet>> {
        if self.refresh_if_older(now, JWKS_MISS_RELOAD_INTERVAL) {
            self.current()
        } else {
            None
        }
    }

    fn current(&self) -> Option<Arc<KeySet>> {
        self.keys
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Re-reads the file if it was last looked at more than `interval` ago and changed since.
    /// Whether new keys were loaded.
    fn refresh_if_older(&self, now: Instant, interval: Duration) -> bool {
        // Another connection looking already: go on with the current keys.
        let Ok(mut watch) = self.watch.try_lock() else {
            return false;
        };
        if watch
            .checked_at
            .is_some_and(|checked| now.saturating_duration_since(checked) < interval)
        {
            return false;
        }
        watch.checked_at = Some(now);
        let stamp = self.stamp();
        if stamp == watch.seen {
            return false;
        }
        watch.seen = stamp;
        match self.read() {
            Ok(keys) => {
                tracing::info!(
                    path = %self.path.display(),
                    keys = keys.len(),
                    skipped = keys.skipped.len(),
                    "OAUTHBEARER JWKS reloaded"
                );
                *self.keys.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(keys));
                watch.failing = None;
                true
            }
            Err(error) => {
                let said = error.to_string();
                if watch.failing.as_deref() != Some(said.as_str()) {
                    tracing::error!(error = %said, "OAUTHBEARER JWKS changed but does not load: the keys read before still serve; fix the file");
                    watch.failing = Some(said);
                }
                false
            }
        }
    }

    fn stamp(&self) -> Option<Stamp> {
        // `metadata` follows symbolic links, so a swapped Kubernetes secret is seen.
        let metadata = std::fs::metadata(&self.path).ok()?;
        Some((metadata.modified().ok(), metadata.len()))
    }

    /// The file read (bounded) and parsed.
    fn read(&self) -> Result<KeySet, JwksError> {
        let path = self.path.clone();
        let failed = |error: std::io::Error| JwksError::Read {
            path: path.clone(),
            reason: error.to_string(),
        };
        let file = std::fs::File::open(&self.path).map_err(failed)?;
        let length = file.metadata().map_err(failed)?.len();
        if length > JWKS_FILE_BYTES_MAX {
            return Err(JwksError::TooLarge {
                path,
                bytes: length,
            });
        }
        let mut bytes = Vec::new();
        file.take(JWKS_FILE_BYTES_MAX + 1)
            .read_to_end(&mut bytes)
            .map_err(failed)?;
        if bytes.len() as u64 > JWKS_FILE_BYTES_MAX {
            return Err(JwksError::TooLarge {
                path,
                bytes: bytes.len() as u64,
            });
        }
        KeySet::parse(&bytes).map_err(|reason| JwksError::Invalid { path, reason })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::security::oauth::jwt::tests::part;
    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair};

    const NOW: u64 = 1_700_000_000_000;
    const NOW_S: u64 = 1_700_000_000;

    /// A test signer and its JWK.
    pub(crate) enum Signer {
        Rsa(RsaKeyPair),
        Ec(EcdsaKeyPair, &'static str),
        Ed(Ed25519KeyPair),
    }

    /// The test-only RSA key of `testdata/` (ring cannot make RSA keys).
    pub(crate) fn rsa_signer() -> Signer {
        let pem = include_str!("testdata/rsa-2048.pem");
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = STANDARD.decode(body).expect("base64");
        Signer::Rsa(RsaKeyPair::from_pkcs8(&der).expect("PKCS#8 RSA key"))
    }

    pub(crate) fn ec_signer(curve: &'static str) -> Signer {
        let rng = SystemRandom::new();
        let algorithm = match curve {
            "P-256" => &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            _ => &signature::ECDSA_P384_SHA384_FIXED_SIGNING,
        };
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(algorithm, &rng).unwrap();
        Signer::Ec(
            EcdsaKeyPair::from_pkcs8(algorithm, pkcs8.as_ref(), &rng).unwrap(),
            curve,
        )
    }

    fn ed_signer() -> Signer {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        Signer::Ed(Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap())
    }

    impl Signer {
        pub(crate) fn jwk(&self, kid: &str) -> String {
            let b64 = |bytes: &[u8]| URL_SAFE_NO_PAD.encode(bytes);
            match self {
                Signer::Rsa(key) => {
                    let public = RsaPublicKeyComponents::<Vec<u8>>::from(key.public());
                    format!(
                        r#"{{"kty":"RSA","kid":"{kid}","use":"sig","n":"{}","e":"{}"}}"#,
                        b64(&public.n),
                        b64(&public.e)
                    )
                }
                Signer::Ec(key, curve) => {
                    let point = key.public_key().as_ref();
                    let size = (point.len() - 1) / 2;
                    format!(
                        r#"{{"kty":"EC","kid":"{kid}","crv":"{curve}","x":"{}","y":"{}"}}"#,
                        b64(&point[1..1 + size]),
                        b64(&point[1 + size..])
                    )
                }
                Signer::Ed(key) => format!(
                    r#"{{"kty":"OKP","kid":"{kid}","crv":"Ed25519","x":"{}"}}"#,
                    b64(key.public_key().as_ref())
                ),
            }
        }

        /// A token of `claims` signed with `alg`, naming `kid`.
        pub(crate) fn sign(&self, alg: &str, kid: Option<&str>, claims: &str) -> String {
            let header = match kid {
                Some(kid) => format!(r#"{{"alg":"{alg}","typ":"JWT","kid":"{kid}"}}"#),
                None => format!(r#"{{"alg":"{alg}"}}"#),
            };
            let input = format!("{}.{}", part(&header), part(claims));
            let rng = SystemRandom::new();
            let signature = match self {
                Signer::Rsa(key) => {
                    let padding: &dyn signature::RsaEncoding = match alg {
                        "PS256" => &signature::RSA_PSS_SHA256,
                        "RS384" => &signature::RSA_PKCS1_SHA384,
                        "RS512" => &signature::RSA_PKCS1_SHA512,
                        _ => &signature::RSA_PKCS1_SHA256,
                    };
                    let mut out = vec![0; key.public().modulus_len()];
                    key.sign(padding, &rng, input.as_bytes(), &mut out).unwrap();
                    out
                }
                Signer::Ec(key, _) => key.sign(&rng, input.as_bytes()).unwrap().as_ref().to_vec(),
                Signer::Ed(key) => key.sign(input.as_bytes()).as_ref().to_vec(),
            };
            format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
        }
    }

    pub(crate) fn jwks(keys: &[String]) -> String {
        format!(r#"{{"keys":[{}]}}"#, keys.join(","))
    }

    fn settings() -> JwksSettings {
        JwksSettings {
            url: "file:///jwks.json".into(),
            path: "/jwks.json".into(),
            expected_audience: vec!["kafka".into()],
            expected_issuer: Some("https://issuer".into()),
            sub_claim: "sub".into(),
            scope_claim: "scope".into(),
            clock_skew_seconds: 30,
        }
    }

    fn claims(extra: &str) -> String {
        format!(
            r#"{{"sub":"alice","iss":"https://issuer","aud":["kafka","other"],"iat":{NOW_S},"exp":{}{extra}}}"#,
            NOW_S + 300
        )
    }

    fn refused(result: Result<BearerToken, SignedRefusal>, needle: &str) {
        let reason = result.expect_err(needle).reason();
        assert!(reason.contains(needle), "{needle}: {reason}");
    }

    #[test]
    fn rs256_es256_es384_and_eddsa_tokens_verify_against_their_keys() {
        let signers = [
            ("RS256", rsa_signer()),
            ("ES256", ec_signer("P-256")),
            ("ES384", ec_signer("P-384")),
            ("EdDSA", ed_signer()),
        ];
        let keys: Vec<String> = signers
            .iter()
            .map(|(alg, signer)| signer.jwk(alg))
            .collect();
        let set = KeySet::parse(jwks(&keys).as_bytes()).expect("JWKS");
        assert_eq!(set.len(), 4);
        for (alg, signer) in &signers {
            let token = signer.sign(alg, Some(alg), &claims(""));
            let accepted = validate_signed(&token, &settings(), &set, NOW)
                .unwrap_or_else(|e| panic!("{alg}: {e:?}"));
            assert_eq!(
                accepted,
                BearerToken {
                    principal: "alice".into(),
                    expires_at_ms: NOW + 300_000
                }
            );
            // Without a kid, the keys that fit the algorithm are tried.
            let token = signer.sign(alg, None, &claims(""));
            assert!(
                validate_signed(&token, &settings(), &set, NOW).is_ok(),
                "{alg}"
            );
        }
        // The RSA key verifies RS384, RS512 and PS256 too.
        let (_, rsa) = &signers[0];
        for alg in ["RS384", "RS512", "PS256"] {
            let token = rsa.sign(alg, Some("RS256"), &claims(""));
            assert!(
                validate_signed(&token, &settings(), &set, NOW).is_ok(),
                "{alg}"
            );
        }
    }

    #[test]
    fn a_bad_signature_a_wrong_key_or_an_unknown_kid_is_refused() {
        let rsa = rsa_signer();
        let ec = ec_signer("P-256");
        let set = KeySet::parse(jwks(&[rsa.jwk("r"), ec.jwk("e")]).as_bytes()).unwrap();
        // A claim changed after signing.
        let token = ec.sign("ES256", Some("e"), &claims(""));
        let (input, signature) = token.rsplit_once('.').unwrap();
        let (header, _) = input.split_once('.').unwrap();
        let forged = format!("{header}.{}.{signature}", part(&claims(r#","admin":true"#)));
        refused(
            validate_signed(&forged, &settings(), &set, NOW),
            "does not verify",
        );
        // A signature by another key under a kid of the set.
        let other = ec_signer("P-256");
        let token = other.sign("ES256", Some("e"), &claims(""));
        refused(
            validate_signed(&token, &settings(), &set, NOW),
            "does not verify",
        );
        // A kid the set lacks: worth a re-read.
        let token = other.sign("ES256", Some("new"), &claims(""));
        assert!(matches!(
            validate_signed(&token, &settings(), &set, NOW),
            Err(SignedRefusal::NoKey(_))
        ));
        // An RSA kid for an EC signature: no key fits.
        let token = ec.sign("ES256", Some("r"), &claims(""));
        assert!(matches!(
            validate_signed(&token, &settings(), &set, NOW),
            Err(SignedRefusal::NoKey(_))
        ));
        // alg none, HMAC and a crit header.
        let unsigned = format!("{}.{}.", part(r#"{"alg":"none"}"#), part(&claims("")));
        refused(
            validate_signed(&unsigned, &settings(), &set, NOW),
            "alg none",
        );
        let hmac = format!("{}.{}.c2ln", part(r#"{"alg":"HS256"}"#), part(&claims("")));
        refused(validate_signed(&hmac, &settings(), &set, NOW), "not served");
        let crit = format!(
            "{}.{}.c2ln",
            part(r#"{"alg":"ES256","kid":"e","crit":["exp"]}"#),
            part(&claims(""))
        );
        refused(validate_signed(&crit, &settings(), &set, NOW), "crit");
    }

    #[test]
    fn audience_issuer_times_and_subject_are_checked_as_jose4j_checks_them() {
        let ec = ec_signer("P-256");
        let set = KeySet::parse(jwks(&[ec.jwk("e")]).as_bytes()).unwrap();
        let check = |claims: String, settings: &JwksSettings, needle: &str| {
            let token = ec.sign("ES256", Some("e"), &claims);
            refused(validate_signed(&token, settings, &set, NOW), needle);
        };
        let s = settings();
        let dated = |iat: u64, exp: u64, rest: &str| {
            format!(
                r#"{{"sub":"alice","iss":"https://issuer","aud":"kafka","iat":{iat},"exp":{exp}{rest}}}"#
            )
        };
        check(dated(NOW_S - 100, NOW_S - 31, ""), &s, "no longer valid");
        check(
            dated(NOW_S, NOW_S + 300, &format!(r#","nbf":{}"#, NOW_S + 31)),
            &s,
            "not yet valid",
        );
        // Within the skew both ways.
        let ok = ec.sign(
            "ES256",
            Some("e"),
            &dated(NOW_S, NOW_S - 29, &format!(r#","nbf":{}"#, NOW_S + 29)),
        );
        assert!(validate_signed(&ok, &s, &set, NOW).is_ok());
        check(
            format!(
                r#"{{"sub":"a","iss":"https://issuer","aud":"kafka","exp":{}}}"#,
                NOW_S + 9
            ),
            &s,
            "no Issued At",
        );
        check(
            format!(r#"{{"sub":"a","iss":"https://issuer","aud":"kafka","iat":{NOW_S}}}"#),
            &s,
            "no Expiration Time",
        );
        check(
            claims("").replace("https://issuer", "https://evil"),
            &s,
            "not the expected",
        );
        check(
            claims("").replace(r#""iss":"https://issuer","#, ""),
            &s,
            "no Issuer",
        );
        check(
            claims("").replace(r#"["kafka","other"]"#, r#""other""#),
            &s,
            "does not contain an expected one",
        );
        check(
            claims("").replace(r#""aud":["kafka","other"],"#, ""),
            &s,
            "no Audience",
        );
        // No expected audience configured: a token with aud is refused (jose4j), one
        // without is served.
        let open = JwksSettings {
            expected_audience: Vec::new(),
            expected_issuer: None,
            ..settings()
        };
        check(claims(""), &open, "no expected audience is configured");
        let token = ec.sign(
            "ES256",
            Some("e"),
            &claims("").replace(r#""aud":["kafka","other"],"#, ""),
        );
        assert!(validate_signed(&token, &open, &set, NOW).is_ok());
        check(
            claims("").replace(r#""sub":"alice""#, r#""sub":" ""#),
            &s,
            "non-blank",
        );
        check(
            claims("").replace(r#""sub":"alice""#, r#""sub":5"#),
            &s,
            "extract",
        );
        check(claims(r#","scope":["a","a"]"#), &s, "duplicates");
        // Another subject claim.
        let azp = JwksSettings {
            sub_claim: "azp".into(),
            ..settings()
        };
        let token = ec.sign("ES256", Some("e"), &claims(r#","azp":" svc ""#));
        assert_eq!(
            validate_signed(&token, &azp, &set, NOW).unwrap().principal,
            "svc"
        );
    }

    #[test]
    fn key_sets_are_bounded_and_unusable_keys_skipped() {
        let ec = ec_signer("P-256");
        let set = KeySet::parse(
            jwks(&[
                r#"{"kty":"oct","k":"c2VjcmV0"}"#.into(),
                r#"{"kty":"EC","crv":"P-521","x":"AA","y":"AA"}"#.into(),
                ec.jwk("enc").replace(r#""kty""#, r#""use":"enc","kty""#),
                ec.jwk("e"),
            ])
            .as_bytes(),
        )
        .expect("one usable key");
        assert_eq!(set.len(), 1);
        assert_eq!(set.skipped.len(), 3, "{:?}", set.skipped);
        for (document, needle) in [
            ("[]".to_owned(), "no \"keys\""),
            ("{".to_owned(), "not JSON"),
            (jwks(&[]), "the set is empty"),
            (
                jwks(&[r#"{"kty":"oct","k":"c2VjcmV0"}"#.into()]),
                "symmetric",
            ),
            (jwks(&vec![ec.jwk("e"); JWKS_KEYS_MAX + 1]), "more than"),
            (
                jwks(&[r#"{"kty":"RSA","n":"AQAB","e":"AQAB"}"#.into()]),
                "outside 2048..=8192",
            ),
            (
                jwks(&[format!(
                    r#"{{"kty":"RSA","n":"{}","e":"AQAB"}}"#,
                    "A".repeat(5000)
                )]),
                "too long",
            ),
        ] {
            let error = KeySet::parse(document.as_bytes()).expect_err(needle);
            assert!(error.contains(needle), "{needle}: {error}");
        }
    }

    #[test]
    fn the_file_is_reread_when_it_changes_and_on_an_unknown_kid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwks.json");
        let first = ec_signer("P-256");
        let second = ec_signer("P-256");
        std::fs::write(&path, jwks(&[first.jwk("one")])).unwrap();
        let file = JwksFile::new(path.clone());
        let start = Instant::now();
        assert_eq!(file.keys(start).unwrap().len(), 1, "read on first use");
        // Rotated: the new key is found after a miss, once the interval has passed.
        std::fs::write(&path, jwks(&[first.jwk("one"), second.jwk("two")])).unwrap();
        assert!(
            file.refresh_after_miss(start).is_none(),
            "within the interval"
        );
        let later = start + JWKS_MISS_RELOAD_INTERVAL;
        assert_eq!(file.refresh_after_miss(later).expect("reloaded").len(), 2);
        // Unchanged: nothing read.
        assert!(
            file.refresh_after_miss(later + JWKS_CHECK_INTERVAL)
                .is_none()
        );
        // A broken file keeps the old keys; the periodic check sees a change.
        std::fs::write(&path, "{broken").unwrap();
        let much_later = later + 3 * JWKS_CHECK_INTERVAL;
        assert_eq!(file.keys(much_later).unwrap().len(), 2);
        std::fs::write(&path, jwks(&[second.jwk("two")])).unwrap();
        assert_eq!(
            file.keys(much_later + 2 * JWKS_CHECK_INTERVAL)
                .unwrap()
                .len(),
            1
        );
        // Loading at start fails on a missing or oversized file.
        assert!(matches!(
            JwksFile::new(dir.path().join("none")).load(),
            Err(JwksError::Read { .. })
        ));
        let big = dir.path().join("big.json");
        std::fs::write(&big, vec![b' '; JWKS_FILE_BYTES_MAX as usize + 1]).unwrap();
        assert!(matches!(
            JwksFile::new(big).load(),
            Err(JwksError::TooLarge { .. })
        ));
    }
}
