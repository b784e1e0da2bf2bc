//! SASL/OAUTHBEARER against real `sluice server` processes, configured as Kafka is:
//!
//! - a listener with Kafka's default (unsecured) validator: the broker warns once at start;
//!   confluent-kafka and kcat log in with librdkafka's built-in unsecured token, produce and
//!   consume, and confluent-kafka keeps producing across sessions its 3 s tokens bound
//!   (KIP-368, with `connections.max.reauth.ms` unset); the SDK's Admin logs in with Kafka's unsecured login
//!   options; a refused token gets RFC 7628's error challenge, then SASL_AUTHENTICATION_FAILED
//!   with it, and a session past its token's expiry is closed.
//! - a listener with Kafka's `OAuthBearerValidatorCallbackHandler` and a JWKS file: tokens
//!   signed here (RS256 with the test key of `src/security/oauth/testdata`, ES256 with a key
//!   made by ring) log kafka-python and confluent-kafka in; a bad signature, an expired token,
//!   another audience and an unsecured token are refused; a key rotated into the file is used
//!   at once.
//!
//! The client side of the third-party cases is `tests/clients/oauth_suite.py`.

mod support;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, MetadataRequest, MetadataResponse, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair, RsaPublicKeyComponents};
use support::raw::Client;
use support::{SingleNode, run_client};

const MECHANISMS: &str = "listener.name.sasl_plaintext.sasl.enabled.mechanisms=OAUTHBEARER";
const JAAS: &str = "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=\
    org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \
    unsecuredLoginStringClaim_sub=\"admin\";";
const ISSUER: &str = "https://issuer.test";

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

fn part(json: &str) -> String {
    URL_SAFE_NO_PAD.encode(json.as_bytes())
}

/// An unsecured token (Kafka's and librdkafka's form) for `sub`, expiring at `exp`.
fn unsecured_token(sub: &str, exp: u64) -> String {
    format!(
        "{}.{}.",
        part(r#"{"alg":"none"}"#),
        part(&format!(
            r#"{{"sub":"{sub}","iat":{},"exp":{exp}}}"#,
            now_s()
        ))
    )
}

/// The client's OAUTHBEARER message carrying `token`, with authorization id `authzid`.
fn bearer_message(authzid: &str, token: &str) -> Vec<u8> {
    format!("n,{authzid},\x01auth=Bearer {token}\x01\x01").into_bytes()
}

fn handshake(client: &mut Client) -> SaslHandshakeResponse {
    client.call(
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("OAUTHBEARER")),
    )
}

fn authenticate(client: &mut Client, bytes: &[u8]) -> SaslAuthenticateResponse {
    client
        .try_call(
            ApiKey::SaslAuthenticate,
            2,
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(bytes)),
        )
        .expect("SaslAuthenticate answered")
}

fn metadata(client: &mut Client) -> Result<MetadataResponse, String> {
    client.try_call(ApiKey::Metadata, 12, &MetadataRequest::default())
}

/// A new connection that sends `token`: the broker's first answer.
fn log_in(port: u16, token: &str) -> (Client, SaslAuthenticateResponse) {
    let mut client = Client::connect(port);
    assert_eq!(handshake(&mut client).error_code, 0);
    let answer = authenticate(&mut client, &bearer_message("", token));
    (client, answer)
}

/// Asserts `token` is refused as Kafka refuses it: the error challenge (no error code), the
/// client's `%x01`, then SASL_AUTHENTICATION_FAILED carrying the challenge, and no service.
fn assert_refused(port: u16, token: &str) {
    let (mut client, challenge) = log_in(port, token);
    assert_eq!(challenge.error_code, 0, "{challenge:?}");
    assert_eq!(
        challenge.auth_bytes.as_ref(),
        br#"{"status":"invalid_token"}"#,
        "{challenge:?}"
    );
    let failed = authenticate(&mut client, b"\x01");
    assert_eq!(
        failed.error_code, 58,
        "SASL_AUTHENTICATION_FAILED: {failed:?}"
    );
    assert_eq!(
        failed.error_message.as_deref(),
        Some(r#"{"status":"invalid_token"}"#)
    );
    assert!(metadata(&mut client).is_err(), "served after a refusal");
}

#[test]
fn unsecured_tokens_log_in_third_party_clients_and_bound_their_sessions() {
    let node = SingleNode::start_with_listeners(&["SASL_PLAINTEXT"], &[MECHANISMS, JAAS]);
    let port = node.listener_port("SASL_PLAINTEXT");
    let bootstrap = format!("127.0.0.1:{port}");
    assert_eq!(
        node.logs().matches("accepts unsecured tokens").count(),
        1,
        "one warning at start:\n{}",
        node.logs()
    );

    // connections.max.reauth.ms is unset: the token's 3 s bound the session, the client is
    // told so, and past them a request closes the connection.
    let (mut client, done) = log_in(port, &unsecured_token("alice", now_s() + 3));
    assert_eq!(done.error_code, 0, "{done:?}");
    assert!(done.auth_bytes.is_empty());
    assert!(
        (1..=3000).contains(&done.session_lifetime_ms),
        "session_lifetime_ms {}",
        done.session_lifetime_ms
    );
    assert!(metadata(&mut client).is_ok());
    std::thread::sleep(Duration::from_millis(done.session_lifetime_ms as u64 + 500));
    assert!(
        metadata(&mut client).is_err(),
        "served past the token's expiry"
    );

    // Expired, unsecured tokens with another shape, and an authorization id that is not the
    // token's principal.
    assert_refused(port, &unsecured_token("alice", now_s() - 60));
    assert_refused(port, "not-a-jwt");
    let (_, mismatch) = {
        let mut client = Client::connect(port);
        assert_eq!(handshake(&mut client).error_code, 0);
        let token = unsecured_token("alice", now_s() + 60);
        let answer = authenticate(&mut client, &bearer_message("a=bob", &token));
        (client, answer)
    };
    assert_eq!(mismatch.error_code, 58, "{mismatch:?}");
    assert_eq!(
        mismatch.error_message.as_deref(),
        Some(
            "Authentication failed: Client requested an authorization id (bob) that is \
             different from the token's principal name (alice)"
        )
    );
    // A malformed message: Kafka's one sentence.
    let mut client = Client::connect(port);
    assert_eq!(handshake(&mut client).error_code, 0);
    let malformed = authenticate(&mut client, b"n,,auth=Bearer x");
    assert_eq!(malformed.error_code, 58);
    assert_eq!(
        malformed.error_message.as_deref(),
        Some(
            "Authentication failed during authentication due to invalid credentials with SASL \
             mechanism OAUTHBEARER"
        )
    );

    run_client(
        &node,
        "python3",
        &[
            "oauth_suite.py",
            &bootstrap,
            "confluent-unsecured-roundtrip",
            "oauth-unsecured",
            "alice",
        ],
    );
    // librdkafka's tokens live 3 s: it makes new ones and renews its sessions in place.
    run_client(
        &node,
        "python3",
        &[
            "oauth_suite.py",
            &bootstrap,
            "confluent-reauthenticates",
            "oauth-reauth",
            "8",
        ],
    );
    let renewed = node
        .gauge("sluice_sasl_reauthentications_total")
        .unwrap_or(0);
    assert!(renewed >= 1, "no session was renewed ({renewed})");

    // kcat (Debian's librdkafka 2.0) with librdkafka's unsecured token.
    let oauth = [
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        "sasl.mechanisms=OAUTHBEARER",
        "-X",
        "enable.sasl.oauthbearer.unsecure.jwt=true",
        "-X",
        "sasl.oauthbearer.config=principal=carol",
    ];
    let mut produce = vec!["-b", bootstrap.as_str(), "-t", "oauth-kcat", "-P"];
    produce.extend_from_slice(&oauth);
    let mut child = std::process::Command::new("kcat")
        .args(&produce)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("kcat (scripts/test installs it)");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"one\ntwo\nthree\n").expect("write");
    }
    assert!(child.wait().expect("kcat").success(), "kcat produce failed");
    let mut consume = vec![
        "-b",
        bootstrap.as_str(),
        "-t",
        "oauth-kcat",
        "-C",
        "-e",
        "-o",
        "beginning",
    ];
    consume.extend_from_slice(&oauth);
    let read = run_client(&node, "kcat", &consume);
    assert_eq!(read.lines().collect::<Vec<_>>(), ["one", "two", "three"]);

    let logs = node.logs();
    assert!(
        logs.contains("SASL authentication failed") && logs.contains("Expiration Time"),
        "the broker did not log why a token was refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_logs_in_with_kafkas_unsecured_login_and_reconnects_as_tokens_expire() {
    use sluice::client::{Admin, ClientConfig, NewTopic};
    let node = SingleNode::start_with_listeners(&["SASL_PLAINTEXT"], &[MECHANISMS, JAAS]);
    let bootstrap = format!("127.0.0.1:{}", node.listener_port("SASL_PLAINTEXT"));
    let config = ClientConfig::new(&bootstrap)
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanism", "OAUTHBEARER")
        .set(
            "sasl.jaas.config",
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \
             unsecuredLoginStringClaim_sub=\"alice\" unsecuredLoginLifetimeSeconds=\"2\";",
        );
    let admin = Admin::new(config).expect("admin");
    admin
        .create_topics(&[NewTopic::new("oauth-sdk", 1, 1)], false)
        .await
        .expect("create as alice");
    // Past the first token's life: the SDK gave up the session before the broker ended it
    // and logged in again with a new token.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let topics = admin.list_topics(false).await.expect("list after 2.5 s");
    assert!(topics.contains(&"oauth-sdk".to_owned()), "{topics:?}");
    admin.close();
    assert!(node.gauge("sluice_sasl_authentications_total").unwrap_or(0) >= 2);
}

/// A test signer (ring) and its JWK.
enum Signer {
    Rsa(RsaKeyPair),
    Ec(EcdsaKeyPair),
}

impl Signer {
    /// The test-only RSA key of `src/security/oauth/testdata` (ring cannot make RSA keys).
    fn rsa() -> Signer {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("src/security/oauth/testdata/rsa-2048.pem");
        let pem = std::fs::read_to_string(path).expect("RSA test key");
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = STANDARD.decode(body).expect("base64");
        Signer::Rsa(RsaKeyPair::from_pkcs8(&der).expect("PKCS#8"))
    }

    fn ec() -> Signer {
        let rng = SystemRandom::new();
        let algorithm = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(algorithm, &rng).expect("key");
        Signer::Ec(EcdsaKeyPair::from_pkcs8(algorithm, pkcs8.as_ref(), &rng).expect("key"))
    }

    fn jwk(&self, kid: &str) -> String {
        match self {
            Signer::Rsa(key) => {
                let public = RsaPublicKeyComponents::<Vec<u8>>::from(key.public());
                format!(
                    r#"{{"kty":"RSA","kid":"{kid}","use":"sig","alg":"RS256","n":"{}","e":"{}"}}"#,
                    URL_SAFE_NO_PAD.encode(&public.n),
                    URL_SAFE_NO_PAD.encode(&public.e)
                )
            }
            Signer::Ec(key) => {
                let point = key.public_key().as_ref();
                format!(
                    r#"{{"kty":"EC","kid":"{kid}","crv":"P-256","x":"{}","y":"{}"}}"#,
                    URL_SAFE_NO_PAD.encode(&point[1..33]),
                    URL_SAFE_NO_PAD.encode(&point[33..])
                )
            }
        }
    }

    fn sign(&self, kid: &str, claims: &str) -> String {
        let alg = match self {
            Signer::Rsa(_) => "RS256",
            Signer::Ec(_) => "ES256",
        };
        let header = format!(r#"{{"alg":"{alg}","typ":"JWT","kid":"{kid}"}}"#);
        let input = format!("{}.{}", part(&header), part(claims));
        let rng = SystemRandom::new();
        let signature = match self {
            Signer::Rsa(key) => {
                let mut out = vec![0; key.public().modulus_len()];
                key.sign(
                    &signature::RSA_PKCS1_SHA256,
                    &rng,
                    input.as_bytes(),
                    &mut out,
                )
                .expect("sign");
                out
            }
            Signer::Ec(key) => key
                .sign(&rng, input.as_bytes())
                .expect("sign")
                .as_ref()
                .to_vec(),
        };
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
    }
}

/// The claims of a token for `sub` and `aud`, valid from now until `exp`.
fn claims(sub: &str, aud: &str, exp: u64) -> String {
    format!(
        r#"{{"sub":"{sub}","iss":"{ISSUER}","aud":"{aud}","iat":{},"exp":{exp},"scope":"kafka"}}"#,
        now_s()
    )
}

fn jwks(keys: &[String]) -> String {
    format!(r#"{{"keys":[{}]}}"#, keys.join(","))
}

#[test]
fn signed_tokens_are_checked_against_the_jwks_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let jwks_path = dir.path().join("jwks.json");
    let rsa = Signer::rsa();
    let ec = Signer::ec();
    std::fs::write(&jwks_path, jwks(&[rsa.jwk("rsa-1"), ec.jwk("ec-1")])).expect("jwks");
    let url = format!(
        "listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.jwks.endpoint.url=file://{}",
        jwks_path.display()
    );
    let node = SingleNode::start_with_listeners(
        &["SASL_PLAINTEXT"],
        &[
            MECHANISMS,
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=\
             org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;",
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class=\
             org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            &url,
            "sasl.oauthbearer.expected.audience=kafka",
            &format!("sasl.oauthbearer.expected.issuer={ISSUER}"),
        ],
    );
    let port = node.listener_port("SASL_PLAINTEXT");
    let bootstrap = format!("127.0.0.1:{port}");
    assert!(
        !node.logs().contains("accepts unsecured tokens"),
        "the JWKS listener warned of unsecured tokens"
    );
    let write = |name: &str, token: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, token).expect("token file");
        path.display().to_string()
    };
    let exp = now_s() + 600;
    let rs256 = write("rs256", &rsa.sign("rsa-1", &claims("alice", "kafka", exp)));
    let es256 = write("es256", &ec.sign("ec-1", &claims("bob", "kafka", exp)));
    let good = rsa.sign("rsa-1", &claims("alice", "kafka", exp));
    let (header, rest) = good.split_once('.').expect("jws");
    let (_, signature) = rest.split_once('.').expect("jws");
    let forged = format!(
        "{header}.{}.{signature}",
        part(&claims("admin", "kafka", exp))
    );
    let forged_file = write("forged", &forged);
    let expired = rsa.sign("rsa-1", &claims("alice", "kafka", now_s() - 120));
    let expired_file = write("expired", &expired);

    let suite = |args: &[&str]| {
        let mut all = vec!["oauth_suite.py", bootstrap.as_str()];
        all.extend_from_slice(args);
        run_client(&node, "python3", &all)
    };
    suite(&["kafka-python-token-roundtrip", "oauth-kafka-python", &rs256]);
    suite(&["confluent-token-roundtrip", "oauth-confluent", &es256]);
    // (librdkafka itself refuses to send a token past its exp: the forged one goes to it.)
    suite(&["kafka-python-token-refused", &expired_file]);
    suite(&["confluent-token-refused", &forged_file]);
    let logs = node.logs();
    assert!(
        logs.contains("signature does not verify") && logs.contains("no longer valid"),
        "the broker did not log why the tokens were refused"
    );

    assert_refused(port, &forged);
    assert_refused(port, &expired);
    assert_refused(port, &rsa.sign("rsa-1", &claims("alice", "elsewhere", exp)));
    assert_refused(port, &unsecured_token("alice", exp));
    // A key the file does not hold yet.
    let rotated = Signer::ec();
    let token = rotated.sign("ec-2", &claims("carol", "kafka", exp));
    assert_refused(port, &token);

    // Rotated in: the unknown kid makes the broker read the file again (at most once a
    // second), and the new key is used at once.
    std::fs::write(
        &jwks_path,
        jwks(&[rsa.jwk("rsa-1"), ec.jwk("ec-1"), rotated.jwk("ec-2")]),
    )
    .expect("jwks");
    std::thread::sleep(Duration::from_millis(1100));
    let (mut client, done) = log_in(port, &token);
    assert_eq!(done.error_code, 0, "the rotated key: {done:?}");
    assert!(metadata(&mut client).is_ok());
    assert!(node.logs().contains("OAUTHBEARER JWKS reloaded"));

    // The token's expiry bounds the session (connections.max.reauth.ms is unset).
    let short = rsa.sign("rsa-1", &claims("alice", "kafka", now_s() + 5));
    let (_, done) = log_in(port, &short);
    assert_eq!(done.error_code, 0, "{done:?}");
    assert!(
        (1..=5000).contains(&done.session_lifetime_ms),
        "session_lifetime_ms {}",
        done.session_lifetime_ms
    );
}
