//! A JWT's compact serialization (RFC 7519, RFC 7515): `header.payload.signature`, each part
//! base64url, the header and payload JSON objects. Both validators read tokens through here;
//! the token is bounded before anything is decoded ([`OAUTHBEARER_TOKEN_BYTES_MAX`], the
//! SASL message's own bound), so every allocation below is bounded by it.
//!
//! Decoding is lenient where Kafka's is: base64 padding is accepted and so is the standard
//! alphabet (`+`, `/`), which Kafka's unsecured token reader decodes. A signature covers the
//! exact text of the first two parts, so leniency cannot make two readings of one token.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};

use crate::security::sasl::OAUTHBEARER_TOKEN_BYTES_MAX;

/// A compact JWS, decoded but not verified.
#[derive(Debug)]
pub(crate) struct CompactJws<'a> {
    /// `header.payload` as sent: what the signature signs.
    pub signing_input: &'a str,
    /// The third part as sent (empty for an unsecured JWS).
    pub signature_text: &'a str,
    pub header: Map<String, Value>,
    pub claims: Map<String, Value>,
}

/// Splits and decodes `token`. The error says what is wrong, for the broker's log.
pub(crate) fn parse(token: &str) -> Result<CompactJws<'_>, String> {
    if token.len() > OAUTHBEARER_TOKEN_BYTES_MAX {
        return Err(format!(
            "a token of {} bytes, more than {OAUTHBEARER_TOKEN_BYTES_MAX}",
            token.len()
        ));
    }
    if token.contains("..") {
        return Err("malformed compact serialization contains '..'".into());
    }
    let parts: Vec<&str> = token.split('.').collect();
    let [header, payload, signature] = parts[..] else {
        return Err(format!(
            "a compact serialization has 3 dot-separated parts, this one {}",
            parts.len()
        ));
    };
    Ok(CompactJws {
        signing_input: &token[..header.len() + 1 + payload.len()],
        signature_text: signature,
        header: json_object(header, "header")?,
        claims: json_object(payload, "payload")?,
    })
}

/// Base64url (or base64) text, padded or not, decoded.
pub(crate) fn decode_base64url(text: &str) -> Result<Vec<u8>, String> {
    let unpadded = text.trim_end_matches('=');
    let decoded = if unpadded.contains(['+', '/']) {
        let url: String = unpadded
            .chars()
            .map(|c| match c {
                '+' => '-',
                '/' => '_',
                c => c,
            })
            .collect();
        URL_SAFE_NO_PAD.decode(url)
    } else {
        URL_SAFE_NO_PAD.decode(unpadded)
    };
    decoded.map_err(|error| format!("malformed base64url: {error}"))
}

fn json_object(part: &str, what: &str) -> Result<Map<String, Value>, String> {
    let bytes = decode_base64url(part).map_err(|error| format!("the {what}: {error}"))?;
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(format!("the {what} is not a JSON object")),
        Err(error) => Err(format!("the {what} is not JSON: {error}")),
    }
}

/// A claim or header parameter that must be a string when present.
pub(crate) fn string<'a>(
    map: &'a Map<String, Value>,
    name: &str,
) -> Result<Option<&'a str>, String> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(other) => Err(format!(
            "the '{name}' claim is not a string: {}",
            type_name(other)
        )),
    }
}

/// A NumericDate claim (seconds since the epoch, possibly fractional), when present.
pub(crate) fn seconds(map: &Map<String, Value>, name: &str) -> Result<Option<f64>, String> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(number)) => number
            .as_f64()
            .filter(|seconds| seconds.is_finite())
            .map(Some)
            .ok_or_else(|| format!("the '{name}' claim is not a finite number")),
        Some(other) => Err(format!(
            "the '{name}' claim is not a number: {}",
            type_name(other)
        )),
    }
}

/// Seconds as milliseconds, saturating at the ends of `i64` (a date no clock reaches).
pub(crate) fn seconds_to_ms(seconds: f64) -> i64 {
    // `as` saturates for floats out of range.
    (seconds * 1000.0).round() as i64
}

pub(crate) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `json` as a base64url part.
    pub(crate) fn part(json: &str) -> String {
        URL_SAFE_NO_PAD.encode(json.as_bytes())
    }

    #[test]
    fn a_compact_serialization_splits_into_its_three_parts() {
        let token = format!(
            "{}.{}.sig",
            part(r#"{"alg":"none"}"#),
            part(r#"{"sub":"a"}"#)
        );
        let jws = parse(&token).expect("valid");
        assert_eq!(jws.header["alg"], "none");
        assert_eq!(jws.claims["sub"], "a");
        assert_eq!(jws.signature_text, "sig");
        assert_eq!(jws.signing_input, &token[..token.len() - 4]);
        // Padding and the standard alphabet are read as Kafka reads them.
        assert_eq!(
            decode_base64url("-_8=").unwrap(),
            decode_base64url("+/8").unwrap()
        );
    }

    #[test]
    fn broken_serializations_are_refused_with_a_reason() {
        let header = part(r#"{"alg":"none"}"#);
        for (token, needle) in [
            ("a.b".to_owned(), "3 dot-separated parts"),
            ("a.b.c.d".to_owned(), "3 dot-separated parts"),
            (format!("{header}..sig"), "'..'"),
            (format!("{header}.!!.x"), "base64url"),
            (format!("{header}.{}.", part("[1]")), "not a JSON object"),
            (format!("{header}.{}.", part("{")), "not JSON"),
            ("x".repeat(OAUTHBEARER_TOKEN_BYTES_MAX + 1), "more than"),
        ] {
            let error = parse(&token).expect_err(needle);
            assert!(error.contains(needle), "{needle}: {error}");
        }
    }

    #[test]
    fn claims_are_read_by_type() {
        let claims: Map<String, Value> =
            serde_json::from_str(r#"{"s":"x","n":1.5,"b":true}"#).unwrap();
        assert_eq!(string(&claims, "s"), Ok(Some("x")));
        assert_eq!(string(&claims, "missing"), Ok(None));
        assert!(string(&claims, "n").is_err());
        assert_eq!(seconds(&claims, "n"), Ok(Some(1.5)));
        assert!(seconds(&claims, "b").is_err());
        assert_eq!(seconds_to_ms(1.5), 1500);
        assert_eq!(seconds_to_ms(1e300), i64::MAX);
    }
}
