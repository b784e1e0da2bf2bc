//! OAUTHBEARER (RFC 7628) as Kafka speaks it (KIP-255): the client's one message, the error
//! challenge a refused token gets, and the unsecured tokens a client makes for tests.
//!
//! # The exchange
//! ```text
//! client: n,[a=<authzid>],\x01auth=Bearer <token>\x01[<key>=<value>\x01]*\x01
//! server: ""                              token accepted: done, principal User:<sub>
//!         {"status":"invalid_token"}      token refused: RFC 7628's error challenge ...
//! client: \x01                            ... which the client acknowledges (kvsep) ...
//! server: SASL_AUTHENTICATION_FAILED      ... and the failure's message is that JSON.
//! ```
//! The grammar is Kafka's `OAuthBearerClientInitialResponse`: a gs2 header `n,` (no channel
//! binding) with an optional authorization id (a saslname: `=2C` and `=3D` escapes, compared
//! as written with the token's principal, as Kafka compares it), then `key=value` pairs
//! separated by `\x01` (keys `[A-Za-z]+`, values `[\x21-\x7E \t\r\n]+`), of which `auth` is
//! required and the others are SASL extensions. Kafka's default validators accept every
//! extension and use none; so does Sluice. A key given twice is refused (Kafka keeps the last
//! one; a message that says two things about its token is not one to guess about).
//!
//! # Unsecured tokens
//! Kafka's clients make an unsigned JWS (`{"alg":"none"}`) from their JAAS options
//! (`OAuthBearerUnsecuredLoginCallbackHandler`: `unsecuredLoginStringClaim_sub="alice"`),
//! librdkafka from `sasl.oauthbearer.config` (`principal=alice`). [`UnsecuredLogin`] makes
//! the same tokens. They prove nothing: only a broker configured to accept unsecured tokens
//! (Kafka's default OAUTHBEARER validator, meant for tests) takes them.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::{Mechanism, SASL_MESSAGE_BYTES_MAX, SaslError};

/// RFC 7628's key-value separator, `%x01`; alone, the client's acknowledgement of an error
/// challenge.
pub const KVSEP: u8 = 0x01;

/// The longest token either side accepts (it travels inside one SASL message).
pub const OAUTHBEARER_TOKEN_BYTES_MAX: usize = SASL_MESSAGE_BYTES_MAX;

/// The most SASL extensions one message may carry.
const EXTENSIONS_MAX: usize = 64;

/// The longest lifetime an unsecured token is made with (a year).
const UNSECURED_LIFETIME_SECONDS_MAX: u64 = 365 * 24 * 3600;

/// The client's message, parsed. Borrowed from the message bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInitialResponse<'a> {
    /// `a=` of the gs2 header, as written (escapes kept, as Kafka keeps them).
    pub authorization_id: Option<&'a str>,
    /// The bearer token (a compact JWS for Kafka's validators).
    pub token: &'a str,
    /// The SASL extensions, in the order sent.
    pub extensions: Vec<(&'a str, &'a str)>,
}

fn malformed(what: impl Into<String>) -> SaslError {
    SaslError::Malformed {
        mechanism: Mechanism::OAuthBearer,
        what: what.into(),
    }
}

/// Parses the client's message (see the module's grammar). Every field is checked before it
/// is used; the message is bounded first.
pub fn parse_client_initial_response(
    message: &[u8],
) -> Result<ClientInitialResponse<'_>, SaslError> {
    if message.len() > SASL_MESSAGE_BYTES_MAX {
        return Err(malformed(format!(
            "{} bytes, more than {SASL_MESSAGE_BYTES_MAX}",
            message.len()
        )));
    }
    // Every part of the grammar is ASCII.
    if !message.is_ascii() {
        return Err(malformed("a byte outside ASCII"));
    }
    let text = std::str::from_utf8(message).map_err(|_| malformed("not UTF-8"))?;
    let rest = text
        .strip_prefix("n,")
        .ok_or_else(|| malformed("the gs2 header is not \"n,\" (channel binding is not served)"))?;
    let (authorization_id, rest) = match rest.strip_prefix("a=") {
        Some(after) => {
            let end = after
                .find(',')
                .ok_or_else(|| malformed("the authorization id has no ',' after it"))?;
            let authzid = &after[..end];
            check_saslname(authzid)?;
            (Some(authzid), &after[end + 1..])
        }
        None => (
            None,
            rest.strip_prefix(',')
                .ok_or_else(|| malformed("the gs2 header is not followed by ','"))?,
        ),
    };
    let mut pairs = rest
        .strip_prefix(char::from(KVSEP))
        .and_then(|pairs| pairs.strip_suffix(char::from(KVSEP)))
        .ok_or_else(|| malformed("the key-value pairs are not framed by %x01"))?;
    let mut auth = None;
    let mut extensions: Vec<(&str, &str)> = Vec::new();
    while !pairs.is_empty() {
        let end = pairs
            .find(char::from(KVSEP))
            .ok_or_else(|| malformed("a key-value pair is not ended by %x01"))?;
        let pair = &pairs[..end];
        pairs = &pairs[end + 1..];
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| malformed("a key-value pair without '='"))?;
        if key == "auth" {
            if auth.replace(value).is_some() {
                return Err(malformed("auth given twice"));
            }
            continue;
        }
        check_extension(key, value).map_err(malformed)?;
        if extensions.iter().any(|(seen, _)| *seen == key) {
            return Err(malformed(format!("extension {key:?} given twice")));
        }
        if extensions.len() == EXTENSIONS_MAX {
            return Err(malformed(format!(
                "more than {EXTENSIONS_MAX} SASL extensions"
            )));
        }
        extensions.push((key, value));
    }
    let auth = auth.ok_or_else(|| malformed("'auth' not specified"))?;
    let (scheme, token) = auth
        .split_once(' ')
        .ok_or_else(|| malformed("invalid 'auth' format: no space after the scheme"))?;
    if scheme.is_empty()
        || !scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(malformed("invalid 'auth' format: the scheme is not a word"));
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(malformed(format!(
            "invalid scheme {scheme:?}: only Bearer is served"
        )));
    }
    let token = token.trim_start_matches(' ');
    check_token(token).map_err(malformed)?;
    Ok(ClientInitialResponse {
        authorization_id,
        token,
        extensions,
    })
}

/// A saslname (RFC 5802): characters `\x01`..`\x7F` but `,` and `=`, which are written
/// `=2C` and `=3D`.
fn check_saslname(name: &str) -> Result<(), SaslError> {
    if name.is_empty() {
        return Err(malformed("an empty authorization id"));
    }
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        if !(rest[at..].starts_with("=2C") || rest[at..].starts_with("=3D")) {
            return Err(malformed("a bad escape in the authorization id"));
        }
        rest = &rest[at + 3..];
    }
    if name.bytes().any(|b| b == 0) {
        return Err(malformed("a NUL in the authorization id"));
    }
    Ok(())
}

/// Kafka's token grammar (`[-_~+/.a-zA-Z0-9]+=*`, base64url or base64 with dots), bounded.
fn check_token(token: &str) -> Result<(), String> {
    if token.len() > OAUTHBEARER_TOKEN_BYTES_MAX {
        return Err(format!(
            "a token of {} bytes, more than {OAUTHBEARER_TOKEN_BYTES_MAX}",
            token.len()
        ));
    }
    let body = token.trim_end_matches('=');
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"-_~+/.".contains(&b);
    if body.is_empty() || !body.bytes().all(allowed) {
        return Err("the token is empty or has a character outside [-_~+/.a-zA-Z0-9]".into());
    }
    Ok(())
}

/// A SASL extension as RFC 7628 (and Kafka) allow it: a key of letters, not `auth`, and a
/// value of printable ASCII, spaces, tabs and line ends.
pub fn check_extension(key: &str, value: &str) -> Result<(), String> {
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(format!("extension name {key:?} is invalid (letters only)"));
    }
    if key == "auth" {
        return Err("extension name auth is reserved".into());
    }
    let allowed = |b: u8| (0x21..=0x7E).contains(&b) || b" \t\r\n".contains(&b);
    if value.is_empty() || !value.bytes().all(allowed) {
        return Err(format!("the value of extension {key} is invalid"));
    }
    Ok(())
}

/// The client's message for `token` (Kafka's `OAuthBearerClientInitialResponse.toBytes`).
/// The caller checked the token and extensions ([`check_extension`]).
pub(crate) fn format_client_initial_response(
    token: &str,
    extensions: &[(String, String)],
) -> Vec<u8> {
    let sep = char::from(KVSEP);
    let mut message = format!("n,,{sep}auth=Bearer {token}");
    for (key, value) in extensions {
        message.push(sep);
        message.push_str(key);
        message.push('=');
        message.push_str(value);
    }
    message.push(sep);
    message.push(sep);
    message.into_bytes()
}

/// `text` as a JSON string literal.
pub(crate) fn json_string(text: &str) -> String {
    let mut json = String::with_capacity(text.len() + 2);
    json.push('"');
    for c in text.chars() {
        match c {
            '"' => json.push_str("\\\""),
            '\\' => json.push_str("\\\\"),
            '\n' => json.push_str("\\n"),
            '\r' => json.push_str("\\r"),
            '\t' => json.push_str("\\t"),
            c if u32::from(c) < 0x20 => json.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => json.push(c),
        }
    }
    json.push('"');
    json
}

/// A claim an unsecured token carries besides `iat` and `exp`.
#[derive(Debug, Clone, PartialEq)]
enum Claim {
    String(String),
    Number(f64),
    List(Vec<String>),
}

/// How a client makes unsecured tokens (`{"alg":"none"}`, no signature): Kafka's
/// `OAuthBearerUnsecuredLoginCallbackHandler` options, or librdkafka's
/// `sasl.oauthbearer.config`. Each connection gets a fresh token (`iat` now, `exp` after the
/// lifetime), so a long-lived client never sends an expired one.
#[derive(Debug, Clone, PartialEq)]
pub struct UnsecuredLogin {
    principal: String,
    lifetime_seconds: u64,
    /// By claim name (sorted, so the token is the same for the same options).
    claims: BTreeMap<String, Claim>,
    extensions: Vec<(String, String)>,
}

fn bad_config(what: String) -> SaslError {
    SaslError::BadConfig { what }
}

impl UnsecuredLogin {
    /// Kafka's JAAS options (`OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="alice";`):
    /// `unsecuredLoginStringClaim_<name>`, `unsecuredLoginNumberClaim_<name>`,
    /// `unsecuredLoginListClaim_<name>` (the first character is the separator: `=",a,b"`;
    /// empty elements are dropped), `unsecuredLoginExtension_<name>`,
    /// `unsecuredLoginPrincipalClaimName` (default `sub`) and `unsecuredLoginLifetimeSeconds`
    /// (default 3600). Other options are not the unsecured login's and are left alone, as
    /// Kafka leaves them.
    pub fn from_jaas_options(options: &BTreeMap<String, String>) -> Result<Self, SaslError> {
        const PREFIX: &str = "unsecuredLogin";
        let ours = || options.keys().filter(|key| key.starts_with(PREFIX));
        if ours().count() == 0 {
            return Err(bad_config(
                "no unsecuredLogin options: the login has no token to send (e.g. \
                 unsecuredLoginStringClaim_sub=\"alice\")"
                    .into(),
            ));
        }
        if ours().all(|key| key.starts_with("unsecuredLoginExtension_")) {
            return Err(bad_config(
                "extensions provided in the login without a token".into(),
            ));
        }
        let principal_claim = options
            .get("unsecuredLoginPrincipalClaimName")
            .map(|name| name.trim())
            .filter(|name| !name.is_empty())
            .unwrap_or("sub")
            .to_owned();
        let lifetime_seconds = match options.get("unsecuredLoginLifetimeSeconds") {
            Some(text) => parse_lifetime("unsecuredLoginLifetimeSeconds", text)?,
            None => 3600,
        };
        let mut claims = BTreeMap::new();
        let mut extensions = Vec::new();
        for (key, value) in options {
            let (name, claim) = if let Some(name) = key.strip_prefix("unsecuredLoginStringClaim_") {
                (name, Claim::String(value.clone()))
            } else if let Some(name) = key.strip_prefix("unsecuredLoginNumberClaim_") {
                let number = value
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|n| n.is_finite())
                    .ok_or_else(|| bad_config(format!("{key}: {value:?} is not a number")))?;
                (name, Claim::Number(number))
            } else if let Some(name) = key.strip_prefix("unsecuredLoginListClaim_") {
                (name, Claim::List(java_list(value)))
            } else if let Some(name) = key.strip_prefix("unsecuredLoginExtension_") {
                check_extension(name, value).map_err(bad_config)?;
                extensions.push((name.to_owned(), value.clone()));
                continue;
            } else {
                continue;
            };
            if name.is_empty() {
                continue;
            }
            if name == "iat" || name == "exp" {
                return Err(bad_config(format!(
                    "cannot explicitly set the '{name}' claim"
                )));
            }
            claims.insert(name.to_owned(), claim);
        }
        let principal = match claims.get(&principal_claim) {
            Some(Claim::String(principal)) if !principal.trim().is_empty() => principal.clone(),
            _ => {
                return Err(bad_config(format!(
                    "no principal name in JWT claim {principal_claim}: set \
                     unsecuredLoginStringClaim_{principal_claim}=\"<name>\""
                )));
            }
        };
        Ok(UnsecuredLogin {
            principal,
            lifetime_seconds,
            claims,
            extensions,
        })
    }

    /// librdkafka's `sasl.oauthbearer.config` (with `enable.sasl.oauthbearer.unsecure.jwt`):
    /// space-separated `principal=<name>` (required), `principalClaimName=` (default `sub`),
    /// `scopeClaimName=` (default `scope`), `scope=a,b` (a list claim), `lifeSeconds=`
    /// (default 3600) and `extension_<name>=<value>`. Anything else is refused, as librdkafka
    /// refuses it.
    pub fn from_librdkafka_config(text: &str) -> Result<Self, SaslError> {
        let mut principal = None;
        let mut principal_claim = "sub".to_owned();
        let mut scope_claim = "scope".to_owned();
        let mut scope = None;
        let mut lifetime_seconds = 3600;
        let mut extensions = Vec::new();
        for pair in text.split(' ').filter(|pair| !pair.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .filter(|(_, value)| !value.is_empty())
                .ok_or_else(|| bad_config(format!("{pair:?} is not key=value")))?;
            match key {
                "principal" => principal = Some(value.to_owned()),
                "principalClaimName" => principal_claim = value.to_owned(),
                "scopeClaimName" => scope_claim = value.to_owned(),
                "scope" => {
                    scope = Some(
                        value
                            .split(',')
                            .filter(|s| !s.is_empty())
                            .map(str::to_owned)
                            .collect::<Vec<_>>(),
                    );
                }
                "lifeSeconds" => lifetime_seconds = parse_lifetime("lifeSeconds", value)?,
                _ => match key.strip_prefix("extension_") {
                    Some(name) => {
                        check_extension(name, value).map_err(bad_config)?;
                        extensions.push((name.to_owned(), value.to_owned()));
                    }
                    None => {
                        return Err(bad_config(format!(
                            "unrecognized key {key:?} (librdkafka's are principal, \
                             principalClaimName, scopeClaimName, scope, lifeSeconds, \
                             extension_<name>)"
                        )));
                    }
                },
            }
        }
        let principal = principal
            .ok_or_else(|| bad_config("no principal=<name>: the token would name nobody".into()))?;
        let mut claims = BTreeMap::new();
        claims.insert(principal_claim, Claim::String(principal.clone()));
        if let Some(scope) = scope {
            claims.insert(scope_claim, Claim::List(scope));
        }
        if claims.contains_key("iat") || claims.contains_key("exp") {
            return Err(bad_config(
                "iat and exp cannot name the principal or the scope".into(),
            ));
        }
        Ok(UnsecuredLogin {
            principal,
            lifetime_seconds,
            claims,
            extensions,
        })
    }

    /// Who the token names.
    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// The SASL extensions the client sends with the token.
    pub fn extensions(&self) -> &[(String, String)] {
        &self.extensions
    }

    /// An unsecured token issued at `now_ms` (UNIX milliseconds): `{"alg":"none"}`, the
    /// claims with `iat` and `exp`, an empty signature.
    pub fn token(&self, now_ms: u64) -> String {
        let seconds = |ms: u64| format!("{}.{:03}", ms / 1000, ms % 1000);
        let expires_ms = now_ms.saturating_add(self.lifetime_seconds.saturating_mul(1000));
        let mut claims = format!(
            "{{\"exp\":{},\"iat\":{}",
            seconds(expires_ms),
            seconds(now_ms)
        );
        for (name, claim) in &self.claims {
            claims.push(',');
            claims.push_str(&json_string(name));
            claims.push(':');
            match claim {
                Claim::String(value) => claims.push_str(&json_string(value)),
                Claim::Number(value) => claims.push_str(&format!("{value}")),
                Claim::List(values) => {
                    let items: Vec<String> = values.iter().map(|v| json_string(v)).collect();
                    claims.push_str(&format!("[{}]", items.join(",")));
                }
            }
        }
        claims.push('}');
        format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD.encode(claims.as_bytes())
        )
    }
}

fn parse_lifetime(key: &str, text: &str) -> Result<u64, SaslError> {
    text.trim()
        .parse::<u64>()
        .ok()
        .filter(|s| (1..=UNSECURED_LIFETIME_SECONDS_MAX).contains(s))
        .ok_or_else(|| {
            bad_config(format!(
                "{key}: {text:?} is not a lifetime of 1 to {UNSECURED_LIFETIME_SECONDS_MAX} seconds"
            ))
        })
}

/// Kafka's list claim value: its first character separates the elements that follow.
fn java_list(value: &str) -> Vec<String> {
    let mut chars = value.chars();
    let Some(separator) = chars.next() else {
        return Vec::new();
    };
    chars
        .as_str()
        .split(separator)
        .filter(|element| !element.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(message: &str) -> Result<ClientInitialResponse<'_>, SaslError> {
        parse_client_initial_response(message.as_bytes())
    }

    fn is_malformed(result: &Result<ClientInitialResponse<'_>, SaslError>) -> bool {
        matches!(result, Err(SaslError::Malformed { .. }))
    }

    #[test]
    fn kafkas_client_message_parses_with_its_extensions() {
        let message = "n,,\x01auth=Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.\x01\x01";
        let parsed = parse(message).expect("Kafka's form");
        assert_eq!(parsed.token, "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.");
        assert_eq!(parsed.authorization_id, None);
        assert!(parsed.extensions.is_empty());

        let message = "n,a=alice,\x01auth=bearer  abc.def.ghi\x01traceId=a b\tc\x01logicalCluster=lkc-1\x01\x01";
        let parsed = parse(message).expect("authzid and extensions");
        assert_eq!(parsed.authorization_id, Some("alice"));
        assert_eq!(parsed.token, "abc.def.ghi");
        assert_eq!(
            parsed.extensions,
            [("traceId", "a b\tc"), ("logicalCluster", "lkc-1")]
        );
        // Base64 padding after the token, and a saslname's escapes.
        let parsed = parse("n,a=a=2Cb,\x01auth=Bearer abc==\x01\x01").expect("padding");
        assert_eq!(parsed.token, "abc==");
        assert_eq!(parsed.authorization_id, Some("a=2Cb"));
    }

    #[test]
    fn the_message_the_client_formats_is_the_one_the_server_parses() {
        let extensions = vec![("traceId".to_owned(), "42".to_owned())];
        let message = format_client_initial_response("a.b.c", &extensions);
        assert_eq!(message, b"n,,\x01auth=Bearer a.b.c\x01traceId=42\x01\x01");
        let parsed = parse_client_initial_response(&message).expect("parses");
        assert_eq!(parsed.token, "a.b.c");
        assert_eq!(parsed.extensions, [("traceId", "42")]);
    }

    #[test]
    fn truncated_unframed_or_odd_messages_are_malformed() {
        for message in [
            "",
            "n,,",
            "n,,\x01auth=Bearer abc\x01",    // truncated: no final kvsep
            "n,,auth=Bearer abc\x01\x01",    // no kvsep after the gs2 header
            "n,,\x01auth=Bearer abc",        // no kvsep at all
            "n,,\x01\x01",                   // no auth
            "n,,\x01traceId=1\x01\x01",      // no auth, an extension only
            "n,,\x01auth=Basic abc\x01\x01", // another scheme
            "n,,\x01auth=Bearer\x01\x01",    // no token
            "n,,\x01auth=Bearer a b\x01\x01", // a space in the token
            "n,,\x01auth=Bearer a\"b\x01\x01", // a character outside the token's set
            "n,,\x01auth=Bearer a\x01auth=Bearer b\x01\x01", // auth twice
            "n,,\x01auth=Bearer a\x01k=1\x01k=2\x01\x01", // an extension twice
            "n,,\x01auth=Bearer a\x01k1=1\x01\x01", // an extension name with a digit
            "n,,\x01auth=Bearer a\x01k=\x01\x01", // an empty extension value
            "n,,\x01auth=Bearer a\x01noequals\x01\x01",
            "y,,\x01auth=Bearer a\x01\x01", // channel binding
            "p=tls-unique,,\x01auth=Bearer a\x01\x01",
            "n,a=al=ice,\x01auth=Bearer a\x01\x01", // a bad saslname escape
            "n,a=,\x01auth=Bearer a\x01\x01",
            "n,a=alice\x01auth=Bearer a\x01\x01", // the authzid not ended by ','
            "n,,\x01auth=Bearer a\x01k=caf\u{e9}\x01\x01", // not ASCII
        ] {
            let result = parse(message);
            assert!(is_malformed(&result), "{message:?} gave {result:?}");
        }
    }

    #[test]
    fn oversized_messages_and_tokens_are_refused_before_parsing() {
        let huge = format!(
            "n,,\x01auth=Bearer {}\x01\x01",
            "a".repeat(SASL_MESSAGE_BYTES_MAX)
        );
        assert!(is_malformed(&parse(&huge)));
        let many: String = (0..=EXTENSIONS_MAX)
            .map(|i| {
                let name: String = format!("{i:03}")
                    .bytes()
                    .map(|b| char::from(b'a' + (b - b'0')))
                    .collect();
                format!("{name}=v\x01")
            })
            .collect();
        let message = format!("n,,\x01auth=Bearer a\x01{many}\x01");
        assert!(is_malformed(&parse(&message)), "too many extensions");
    }

    fn decode_claims(token: &str) -> String {
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3, "{token}");
        assert_eq!(
            URL_SAFE_NO_PAD.decode(parts[0]).unwrap(),
            br#"{"alg":"none"}"#
        );
        assert_eq!(parts[2], "", "an unsecured token has no signature");
        String::from_utf8(URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap()
    }

    #[test]
    fn kafkas_unsecured_login_options_make_a_token() {
        let options: BTreeMap<String, String> = [
            ("unsecuredLoginStringClaim_sub", "al\"ice"),
            ("unsecuredLoginNumberClaim_level", "3"),
            ("unsecuredLoginListClaim_scope", ",read,,write"),
            ("unsecuredLoginLifetimeSeconds", "60"),
            ("unsecuredLoginExtension_traceId", "42"),
            ("clientId", "ignored: not the unsecured login's"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let login = UnsecuredLogin::from_jaas_options(&options).expect("valid");
        assert_eq!(login.principal(), "al\"ice");
        assert_eq!(login.extensions(), [("traceId".into(), "42".into())]);
        let claims = decode_claims(&login.token(1_700_000_000_250));
        assert_eq!(
            claims,
            r#"{"exp":1700000060.250,"iat":1700000000.250,"level":3,"scope":["read","write"],"sub":"al\"ice"}"#
        );
        let refused = |pairs: &[(&str, &str)], needle: &str| {
            let options: BTreeMap<String, String> = pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            let error = UnsecuredLogin::from_jaas_options(&options).expect_err(needle);
            assert!(error.to_string().contains(needle), "{error}");
        };
        refused(&[], "no unsecuredLogin options");
        refused(
            &[("unsecuredLoginExtension_a", "1")],
            "extensions provided in the login without a token",
        );
        refused(
            &[("unsecuredLoginStringClaim_name", "alice")],
            "no principal name in JWT claim sub",
        );
        refused(
            &[
                ("unsecuredLoginStringClaim_sub", "alice"),
                ("unsecuredLoginNumberClaim_exp", "5"),
            ],
            "cannot explicitly set the 'exp' claim",
        );
        refused(
            &[
                ("unsecuredLoginStringClaim_sub", "alice"),
                ("unsecuredLoginNumberClaim_n", "x"),
            ],
            "not a number",
        );
        refused(
            &[
                ("unsecuredLoginStringClaim_sub", "alice"),
                ("unsecuredLoginLifetimeSeconds", "0"),
            ],
            "not a lifetime",
        );
        refused(
            &[
                ("unsecuredLoginStringClaim_sub", "alice"),
                ("unsecuredLoginExtension_auth", "x"),
            ],
            "reserved",
        );
        // Another principal claim.
        let options: BTreeMap<String, String> = [
            ("unsecuredLoginPrincipalClaimName", "azp"),
            ("unsecuredLoginStringClaim_azp", "svc"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(
            UnsecuredLogin::from_jaas_options(&options)
                .expect("azp")
                .principal(),
            "svc"
        );
    }

    #[test]
    fn librdkafkas_unsecured_config_makes_a_token() {
        let login = UnsecuredLogin::from_librdkafka_config(
            "principal=alice scope=read,write lifeSeconds=5 extension_traceId=7",
        )
        .expect("valid");
        assert_eq!(login.principal(), "alice");
        assert_eq!(login.extensions(), [("traceId".into(), "7".into())]);
        let claims = decode_claims(&login.token(1_000));
        assert_eq!(
            claims,
            r#"{"exp":6.000,"iat":1.000,"scope":["read","write"],"sub":"alice"}"#
        );
        let login = UnsecuredLogin::from_librdkafka_config("principal=svc principalClaimName=azp")
            .expect("azp");
        assert!(decode_claims(&login.token(0)).contains(r#""azp":"svc""#));
        for (text, needle) in [
            ("", "no principal"),
            ("scope=a", "no principal"),
            ("principal=a colour=blue", "unrecognized key"),
            ("principal=a lifeSeconds=-1", "not a lifetime"),
            ("principal", "not key=value"),
            ("principal=a principalClaimName=exp", "iat and exp"),
        ] {
            let error = UnsecuredLogin::from_librdkafka_config(text).expect_err(text);
            assert!(error.to_string().contains(needle), "{text}: {error}");
        }
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("a\"b\\c\n\u{1}"), r#""a\"b\\c\n\u0001""#);
    }
}
