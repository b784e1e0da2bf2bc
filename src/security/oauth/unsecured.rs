//! Kafka's default OAUTHBEARER validator, `OAuthBearerUnsecuredValidatorCallbackHandler`:
//! tokens are unsecured JWS (`{"alg":"none"}`, no signature), so it checks their shape and
//! times and nothing proves who made them. It exists for tests and development; a listener
//! that uses it accepts any identity a client claims (the broker warns at start).
//!
//! What is checked, in Kafka's order (`OAuthBearerUnsecuredJws`, `OAuthBearerValidationUtils`):
//! the serialization, `alg` is `none`, no signature, the scope claim's type, `exp` present
//! and a number, the principal claim (`sub`, or `unsecuredValidatorPrincipalClaimName`) a
//! non-blank string, `iat` (if present) not after now plus the allowed clock skew, `exp`
//! after now minus the skew, `exp` after `iat`, and every scope of
//! `unsecuredValidatorRequiredScope` in the token's. A missing required scope is answered
//! `insufficient_scope` with the required scope; everything else `invalid_token`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::jwt;
use crate::security::sasl::{BearerToken, TokenRejection};

/// The validator's options, from the listener's JAAS config (`unsecuredValidator*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsecuredSettings {
    /// `unsecuredValidatorPrincipalClaimName` (default `sub`).
    pub principal_claim: String,
    /// `unsecuredValidatorScopeClaimName` (default `scope`).
    pub scope_claim: String,
    /// `unsecuredValidatorRequiredScope`: space-separated scopes every token must carry.
    pub required_scope: Vec<String>,
    /// `unsecuredValidatorAllowableClockSkewMs` (default 0).
    pub clock_skew_ms: u64,
}

impl Default for UnsecuredSettings {
    fn default() -> Self {
        UnsecuredSettings {
            principal_claim: "sub".into(),
            scope_claim: "scope".into(),
            required_scope: Vec::new(),
            clock_skew_ms: 0,
        }
    }
}

impl UnsecuredSettings {
    /// The options as Kafka reads them: blank names fall back to the defaults, the clock
    /// skew is a non-negative int, each required scope is RFC 6749's scope token. Other
    /// options are not the validator's (a broker's own `unsecuredLogin*` options, for one)
    /// and are left alone, as Kafka leaves them.
    pub fn from_jaas_options(options: &BTreeMap<String, String>) -> Result<Self, String> {
        let name = |key: &str, default: &str| {
            options
                .get(key)
                .map(|value| value.trim())
                .filter(|value| !value.is_empty())
                .unwrap_or(default)
                .to_owned()
        };
        let mut required_scope = Vec::new();
        if let Some(scope) = options.get("unsecuredValidatorRequiredScope") {
            for item in scope.split(' ').filter(|item| !item.is_empty()) {
                if !is_scope_token(item) {
                    return Err(format!(
                        "unsecuredValidatorRequiredScope: invalid scope value {item:?}"
                    ));
                }
                required_scope.push(item.to_owned());
            }
        }
        let clock_skew_ms = match options
            .get("unsecuredValidatorAllowableClockSkewMs")
            .map(|text| text.trim())
            .filter(|text| !text.is_empty())
        {
            None => 0,
            Some(text) => text
                .parse::<i32>()
                .ok()
                .and_then(|ms| u64::try_from(ms).ok())
                .ok_or_else(|| {
                    format!(
                        "unsecuredValidatorAllowableClockSkewMs: {text:?} is not a non-negative \
                         number of milliseconds"
                    )
                })?,
        };
        Ok(UnsecuredSettings {
            principal_claim: name("unsecuredValidatorPrincipalClaimName", "sub"),
            scope_claim: name("unsecuredValidatorScopeClaimName", "scope"),
            required_scope,
            clock_skew_ms,
        })
    }
}

/// RFC 6749's scope-token: `%x21 / %x23-5B / %x5D-7E`.
fn is_scope_token(item: &str) -> bool {
    !item.is_empty()
        && item
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b))
}

/// Validates an unsecured token at `now_ms` (UNIX milliseconds).
pub fn validate(
    token: &str,
    settings: &UnsecuredSettings,
    now_ms: u64,
) -> Result<BearerToken, TokenRejection> {
    let invalid = TokenRejection::invalid_token;
    let jws = jwt::parse(token).map_err(invalid)?;
    if jwt::string(&jws.header, "alg").map_err(invalid)? != Some("none") {
        return Err(invalid(
            "an unsecured JWS must have 'none' for an algorithm".into(),
        ));
    }
    if !jws.signature_text.is_empty() {
        return Err(invalid(
            "an unsecured JWS must not contain a digital signature".into(),
        ));
    }
    let scope = token_scope(&jws.claims, &settings.scope_claim).map_err(invalid)?;
    let expires_at = jwt::seconds(&jws.claims, "exp")
        .map_err(invalid)?
        .ok_or_else(|| invalid("no expiration time (exp) in the JWT".into()))?;
    let principal = match jwt::string(&jws.claims, &settings.principal_claim).map_err(invalid)? {
        Some(principal) if !principal.trim().is_empty() => principal.to_owned(),
        _ => {
            return Err(invalid(format!(
                "no principal name in JWT claim {}",
                settings.principal_claim
            )));
        }
    };
    let issued_at = jwt::seconds(&jws.claims, "iat").map_err(invalid)?;
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    let skew = i64::try_from(settings.clock_skew_ms).unwrap_or(i64::MAX);
    if let Some(issued_at) = issued_at
        && jwt::seconds_to_ms(issued_at) > now.saturating_add(skew)
    {
        return Err(invalid(format!(
            "the Issued At value ({issued_at} seconds) was after the indicated time ({now} ms) \
             plus allowable clock skew ({skew} ms)"
        )));
    }
    let expires_at_ms = jwt::seconds_to_ms(expires_at);
    if now.saturating_sub(skew) >= expires_at_ms {
        return Err(invalid(format!(
            "the indicated time ({now} ms) minus allowable clock skew ({skew} ms) was on or \
             after the Expiration Time value ({expires_at} seconds)"
        )));
    }
    if let Some(issued_at) = issued_at
        && expires_at <= issued_at
    {
        return Err(invalid(format!(
            "the Expiration Time ({expires_at} seconds) was not after the Issued At time \
             ({issued_at} seconds)"
        )));
    }
    if let Some(missing) = settings
        .required_scope
        .iter()
        .find(|required| !scope.contains(required))
    {
        return Err(TokenRejection::insufficient_scope(
            // Java's List.toString, as Kafka's challenge carries it.
            format!("[{}]", settings.required_scope.join(", ")),
            format!("the token's scope {scope:?} is missing the required scope {missing:?}"),
        ));
    }
    Ok(BearerToken {
        principal,
        expires_at_ms: u64::try_from(expires_at_ms).unwrap_or(0),
    })
}

/// The token's scope as Kafka reads it: a string is one scope (trimmed; blank is none), an
/// array holds several (blank elements skipped), no claim is none.
fn token_scope(
    claims: &serde_json::Map<String, Value>,
    scope_claim: &str,
) -> Result<Vec<String>, String> {
    match claims.get(scope_claim) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(scope)) if scope.trim().is_empty() => Ok(Vec::new()),
        Some(Value::String(scope)) => Ok(vec![scope.trim().to_owned()]),
        Some(Value::Array(items)) => Ok(items
            .iter()
            .map(|item| match item {
                Value::String(text) => text.trim().to_owned(),
                other => other.to_string(),
            })
            .filter(|item| !item.is_empty())
            .collect()),
        Some(other) => Err(format!(
            "the '{scope_claim}' claim is not a list: {}",
            jwt::type_name(other)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::oauth::jwt::tests::part;

    const NOW: u64 = 1_700_000_000_000;
    const NOW_S: i64 = 1_700_000_000;

    fn token(claims: &str) -> String {
        format!("{}.{}.", part(r#"{"alg":"none"}"#), part(claims))
    }

    fn reason(result: Result<BearerToken, TokenRejection>) -> String {
        let rejection = result.expect_err("refused");
        assert_eq!(rejection.status, "invalid_token", "{rejection:?}");
        rejection.reason
    }

    #[test]
    fn a_good_token_names_its_principal_and_expiry() {
        let settings = UnsecuredSettings::default();
        let claims = format!(
            r#"{{"sub":"alice","iat":{NOW_S},"exp":{},"scope":"read"}}"#,
            NOW_S + 60
        );
        let token = validate(&token(&claims), &settings, NOW).expect("valid");
        assert_eq!(
            token,
            BearerToken {
                principal: "alice".into(),
                expires_at_ms: NOW + 60_000
            }
        );
        // librdkafka's and Kafka's own unsecured tokens.
        let login = crate::security::sasl::UnsecuredLogin::from_librdkafka_config(
            "principal=bob scope=a,b",
        )
        .unwrap();
        let token = validate(&login.token(NOW), &settings, NOW).expect("librdkafka's form");
        assert_eq!(token.principal, "bob");
        assert_eq!(token.expires_at_ms, NOW + 3_600_000);
    }

    #[test]
    fn expired_future_and_inconsistent_tokens_are_refused() {
        let settings = UnsecuredSettings::default();
        let check = |claims: String, needle: &str| {
            let why = reason(validate(&token(&claims), &settings, NOW));
            assert!(why.contains(needle), "{claims}: {why}");
        };
        check(
            format!(r#"{{"sub":"a","exp":{NOW_S}}}"#),
            "on or after the Expiration Time",
        );
        check(
            format!(r#"{{"sub":"a","exp":{}}}"#, NOW_S - 10),
            "on or after the Expiration Time",
        );
        check(
            format!(r#"{{"sub":"a","iat":{},"exp":{}}}"#, NOW_S + 5, NOW_S + 60),
            "was after the indicated time",
        );
        check(r#"{"sub":"a"}"#.into(), "no expiration time");
        check(
            format!(r#"{{"sub":"a","exp":"{}"}}"#, NOW_S + 60),
            "'exp' claim is not a number",
        );
        check(format!(r#"{{"exp":{}}}"#, NOW_S + 60), "no principal name");
        check(
            format!(r#"{{"sub":"  ","exp":{}}}"#, NOW_S + 60),
            "no principal name",
        );
        check(
            format!(r#"{{"sub":7,"exp":{}}}"#, NOW_S + 60),
            "'sub' claim is not a string",
        );
        check(
            format!(r#"{{"sub":"a","scope":{{}},"exp":{}}}"#, NOW_S + 60),
            "'scope' claim is not a list",
        );
    }

    #[test]
    fn clock_skew_lets_a_token_be_slightly_early_or_late() {
        let settings = UnsecuredSettings {
            clock_skew_ms: 10_000,
            ..UnsecuredSettings::default()
        };
        let early = format!(r#"{{"sub":"a","iat":{},"exp":{}}}"#, NOW_S + 5, NOW_S + 60);
        assert!(validate(&token(&early), &settings, NOW).is_ok());
        let late = format!(r#"{{"sub":"a","exp":{}}}"#, NOW_S - 5);
        assert!(validate(&token(&late), &settings, NOW).is_ok());
        let too_late = format!(r#"{{"sub":"a","exp":{}}}"#, NOW_S - 10);
        assert!(validate(&token(&too_late), &settings, NOW).is_err());
    }

    #[test]
    fn signed_or_signature_bearing_tokens_are_not_unsecured() {
        let settings = UnsecuredSettings::default();
        let claims = part(&format!(r#"{{"sub":"a","exp":{}}}"#, NOW_S + 60));
        let rs256 = format!("{}.{claims}.", part(r#"{"alg":"RS256"}"#));
        assert!(reason(validate(&rs256, &settings, NOW)).contains("'none'"));
        let no_alg = format!("{}.{claims}.", part(r#"{"typ":"JWT"}"#));
        assert!(reason(validate(&no_alg, &settings, NOW)).contains("'none'"));
        let signed = format!("{}.{claims}.c2ln", part(r#"{"alg":"none"}"#));
        assert!(reason(validate(&signed, &settings, NOW)).contains("digital signature"));
        assert!(reason(validate("not-a-jwt", &settings, NOW)).contains("3 dot-separated"));
    }

    #[test]
    fn a_missing_required_scope_is_insufficient_scope() {
        let options: BTreeMap<String, String> = [
            ("unsecuredValidatorRequiredScope", "read write"),
            ("unsecuredValidatorScopeClaimName", "roles"),
            ("unsecuredValidatorPrincipalClaimName", "azp"),
            (
                "unsecuredLoginStringClaim_sub",
                "broker: its own login, left alone",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let settings = UnsecuredSettings::from_jaas_options(&options).expect("valid");
        assert_eq!(settings.required_scope, ["read", "write"]);
        let claims = |roles: &str| {
            token(&format!(
                r#"{{"azp":"svc","roles":{roles},"exp":{}}}"#,
                NOW_S + 60
            ))
        };
        let ok = validate(&claims(r#"["write"," read ","x"]"#), &settings, NOW).expect("ok");
        assert_eq!(ok.principal, "svc");
        let rejection = validate(&claims(r#"["read"]"#), &settings, NOW).expect_err("narrow");
        assert_eq!(rejection.status, "insufficient_scope");
        assert_eq!(rejection.scope.as_deref(), Some("[read, write]"));
        assert_eq!(
            rejection.challenge(),
            r#"{"status":"insufficient_scope", "scope":"[read, write]"}"#
        );
        let rejection = validate(&claims(r#""read""#), &settings, NOW).expect_err("one");
        assert_eq!(rejection.status, "insufficient_scope");
    }

    #[test]
    fn bad_validator_options_are_refused() {
        for (key, value) in [
            ("unsecuredValidatorAllowableClockSkewMs", "-1"),
            ("unsecuredValidatorAllowableClockSkewMs", "soon"),
            ("unsecuredValidatorRequiredScope", "a\"b"),
        ] {
            let options: BTreeMap<String, String> = [(key.to_owned(), value.to_owned())].into();
            let error = UnsecuredSettings::from_jaas_options(&options).expect_err(value);
            assert!(error.contains(key), "{error}");
        }
        let options: BTreeMap<String, String> = [(
            "unsecuredValidatorAllowableClockSkewMs".to_owned(),
            " 250 ".to_owned(),
        )]
        .into();
        assert_eq!(
            UnsecuredSettings::from_jaas_options(&options)
                .unwrap()
                .clock_skew_ms,
            250
        );
    }
}
