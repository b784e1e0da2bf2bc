//! OAUTHBEARER listeners, configured as on Kafka (KIP-255, KIP-768):
//!
//! ```properties
//! listener.name.sasl_ssl.sasl.enabled.mechanisms=OAUTHBEARER
//! listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;
//! listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
//! sasl.oauthbearer.jwks.endpoint.url=file:///etc/sluice/jwks.json
//! sasl.oauthbearer.expected.audience=kafka
//! ```
//!
//! The JAAS config is required (Kafka's broker needs one for each mechanism it enables); its
//! `unsecuredValidator*` options configure the unsecured validator, the one used when no
//! callback handler class is set (Kafka's default). A `sasl.oauthbearer.*` key is read as
//! Kafka reads it for a listener: `listener.name.<l>.oauthbearer.sasl.oauthbearer.<key>`,
//! then `listener.name.<l>.sasl.oauthbearer.<key>`, then `sasl.oauthbearer.<key>`.
//!
//! Refused at load, naming the key: a JWKS URL that is not `file:` (Sluice has no HTTP
//! client), another callback handler class, a JWKS setting where the unsecured validator
//! would ignore it (Kafka's would, silently), an `unsecuredValidator*` option where the JWKS
//! validator would, and any OAUTHBEARER setting of a listener that does not enable it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::registry::ConfigError;
use super::security::ListenerSecurity;
use crate::security::oauth::{
    BearerValidator, JWKS_VALIDATOR_CLASS, JWKS_VALIDATOR_CLASS_OLD, JwksSettings,
    UNSECURED_VALIDATOR_CLASS, UnsecuredSettings, ValidatorSettings,
};
use crate::security::sasl::{self, Mechanism};

/// The `sasl.oauthbearer.*` broker keys Sluice serves, all read by the JWKS validator. The
/// last three are Kafka's refresh settings for an `https://` JWKS, which Kafka reads for no
/// `file:` URL either (Sluice watches the file instead).
pub const JWKS_KEYS: &[&str] = &[
    "sasl.oauthbearer.jwks.endpoint.url",
    "sasl.oauthbearer.expected.audience",
    "sasl.oauthbearer.expected.issuer",
    "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.scope.claim.name",
    "sasl.oauthbearer.clock.skew.seconds",
    "sasl.oauthbearer.jwks.endpoint.refresh.ms",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
];

const JAAS_SETTING: &str = "oauthbearer.sasl.jaas.config";
const HANDLER_SETTING: &str = "oauthbearer.sasl.server.callback.handler.class";

/// Whether `setting` (a key after `listener.name.<listener>.`) is an OAUTHBEARER setting
/// Sluice serves: the callback handler class, or a JWKS key with or without the mechanism
/// prefix. (The JAAS config is a mechanism's JAAS config, served with the others.)
pub fn is_served_listener_setting(setting: &str) -> bool {
    setting == HANDLER_SETTING
        || JWKS_KEYS.contains(&setting.strip_prefix("oauthbearer.").unwrap_or(setting))
}

/// `setting` for `listener`, the most specific form first: (the key as written, its value).
fn get(
    properties: &BTreeMap<String, String>,
    listener: &str,
    setting: &str,
) -> Option<(String, String)> {
    let listener = listener.to_ascii_lowercase();
    [
        format!("listener.name.{listener}.oauthbearer.{setting}"),
        format!("listener.name.{listener}.{setting}"),
        setting.to_owned(),
    ]
    .into_iter()
    .find_map(|key| {
        let value = properties.get(&key)?.trim().to_owned();
        Some((key, value))
    })
}

/// The validator of a listener that enables OAUTHBEARER.
pub fn listener_validator(
    properties: &BTreeMap<String, String>,
    listener: &str,
) -> Result<BearerValidator, ConfigError> {
    let prefix = format!("listener.name.{}.", listener.to_ascii_lowercase());
    let jaas_key = format!("{prefix}{JAAS_SETTING}");
    let jaas = properties.get(&jaas_key).ok_or_else(|| {
        ConfigError::new(
            &jaas_key,
            "",
            format!(
                "listener {listener} enables OAUTHBEARER and has no JAAS config (Kafka's broker \
                 needs one too): set {jaas_key} to \
                 org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;"
            ),
        )
    })?;
    let parsed = sasl::parse_jaas(jaas)
        .map_err(|error| ConfigError::new(&jaas_key, "(hidden)", error.to_string()))?;
    if !parsed.login_module.ends_with("OAuthBearerLoginModule") {
        return Err(ConfigError::new(
            &jaas_key,
            "(hidden)",
            format!(
                "login module {} is not OAUTHBEARER's \
                 (org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule)",
                parsed.login_module
            ),
        ));
    }
    let handler_key = format!("{prefix}{HANDLER_SETTING}");
    let handler = properties
        .get(&handler_key)
        .map_or("", |class| class.trim());
    let settings = match handler {
        "" | UNSECURED_VALIDATOR_CLASS => ValidatorSettings::Unsecured(
            UnsecuredSettings::from_jaas_options(&parsed.options)
                .map_err(|reason| ConfigError::new(&jaas_key, "(hidden)", reason))?,
        ),
        JWKS_VALIDATOR_CLASS | JWKS_VALIDATOR_CLASS_OLD => {
            if let Some(option) = parsed
                .options
                .keys()
                .find(|option| option.starts_with("unsecuredValidator"))
            {
                return Err(ConfigError::new(
                    &jaas_key,
                    "(hidden)",
                    format!(
                        "option {option} configures the unsecured validator, which this listener \
                         does not use ({handler_key} is the JWKS validator): remove it, or use \
                         sasl.oauthbearer.* settings"
                    ),
                ));
            }
            ValidatorSettings::Jwks(jwks_settings(properties, listener)?)
        }
        other => {
            return Err(ConfigError::new(
                &handler_key,
                other,
                format!(
                    "Sluice loads no Java classes: its OAUTHBEARER validators are Kafka's \
                     {JWKS_VALIDATOR_CLASS} (signed JWTs checked against a JWKS file) and, when \
                     the key is unset, {UNSECURED_VALIDATOR_CLASS} (unsecured tokens, for tests)"
                ),
            ));
        }
    };
    Ok(BearerValidator::new(settings))
}

fn jwks_settings(
    properties: &BTreeMap<String, String>,
    listener: &str,
) -> Result<JwksSettings, ConfigError> {
    let url_setting = "sasl.oauthbearer.jwks.endpoint.url";
    let (url_key, url) = get(properties, listener, url_setting)
        .filter(|(_, url)| !url.is_empty())
        .ok_or_else(|| {
            ConfigError::new(
                url_setting,
                "",
                format!(
                    "listener {listener} checks OAUTHBEARER tokens against a JWKS and names none: \
                     set {url_setting}=file:///path/to/jwks.json"
                ),
            )
        })?;
    let path = jwks_path(&url_key, &url)?;
    let text = |setting: &str, default: &str| {
        get(properties, listener, setting)
            .map(|(_, value)| value)
            .filter(|value| !value.is_empty())
            .unwrap_or_else(|| default.to_owned())
    };
    let expected_audience = text("sasl.oauthbearer.expected.audience", "")
        .split(',')
        .map(str::trim)
        .filter(|audience| !audience.is_empty())
        .map(str::to_owned)
        .collect();
    let expected_issuer =
        Some(text("sasl.oauthbearer.expected.issuer", "")).filter(|issuer| !issuer.is_empty());
    let clock_skew_seconds = match get(properties, listener, "sasl.oauthbearer.clock.skew.seconds")
    {
        None => 30,
        Some((key, value)) => value
            .parse::<i32>()
            .ok()
            .and_then(|seconds| u64::try_from(seconds).ok())
            .ok_or_else(|| ConfigError::new(&key, &value, "expected seconds (0 or more)"))?,
    };
    for setting in [
        "sasl.oauthbearer.jwks.endpoint.refresh.ms",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
    ] {
        if let Some((key, value)) = get(properties, listener, setting)
            && value.parse::<i64>().ok().is_none_or(|ms| ms < 0)
        {
            return Err(ConfigError::new(
                &key,
                &value,
                "expected milliseconds (0 or more)",
            ));
        }
    }
    Ok(JwksSettings {
        url,
        path,
        expected_audience,
        expected_issuer,
        sub_claim: text("sasl.oauthbearer.sub.claim.name", "sub"),
        scope_claim: text("sasl.oauthbearer.scope.claim.name", "scope"),
        clock_skew_seconds,
    })
}

/// The file a `file:` URL names (`file:///etc/jwks.json`, `file:/etc/jwks.json`, or with the
/// host `localhost`). Any other scheme is refused: Sluice has no HTTP client.
fn jwks_path(key: &str, url: &str) -> Result<PathBuf, ConfigError> {
    let refused = |reason: String| ConfigError::new(key, url, reason);
    let Some((scheme, rest)) = url.split_once(':') else {
        return Err(refused(
            "not a URL: expected file:///path/to/jwks.json".into(),
        ));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "file" => {}
        "http" | "https" => {
            return Err(refused(
                "Sluice has no HTTP client, so it reads the JWKS from a file: download the \
                 provider's JWKS (curl -o /etc/sluice/jwks.json <url>, from cron or a sidecar) \
                 and set file:///etc/sluice/jwks.json; the broker re-reads the file when it \
                 changes"
                    .into(),
            ));
        }
        other => {
            return Err(refused(format!(
                "scheme {other:?} is not served: a file: URL is (file:///path/to/jwks.json)"
            )));
        }
    }
    let path = match rest.strip_prefix("//") {
        Some(after) => {
            let (host, path) = after.split_at(after.find('/').unwrap_or(after.len()));
            if !host.is_empty() && !host.eq_ignore_ascii_case("localhost") {
                return Err(refused(format!(
                    "a file URL on another host ({host:?}): only local files are read"
                )));
            }
            path
        }
        None => rest,
    };
    if path.is_empty() {
        return Err(refused("the file URL names no file".into()));
    }
    Ok(PathBuf::from(path))
}

/// Refuses an OAUTHBEARER setting that would have no effect: on a listener that does not
/// enable OAUTHBEARER, a JWKS key where the unsecured validator is used (for a global key:
/// where no listener uses the JWKS validator).
pub fn check_keys_apply(
    properties: &BTreeMap<String, String>,
    secured: &BTreeMap<String, ListenerSecurity>,
) -> Result<(), ConfigError> {
    let uses_jwks = |security: &ListenerSecurity| {
        security
            .oauthbearer
            .as_ref()
            .is_some_and(|v| matches!(v.settings(), ValidatorSettings::Jwks(_)))
    };
    let unsecured_reason = |listener: &str| {
        format!(
            "listener {listener} checks OAUTHBEARER tokens with the unsecured validator (Kafka's \
             default, which reads only its JAAS options), so this setting would have no effect: \
             set listener.name.{}.{HANDLER_SETTING}={JWKS_VALIDATOR_CLASS} to check signed \
             tokens, or remove the key",
            listener.to_ascii_lowercase()
        )
    };
    for key in properties.keys() {
        if let Some(rest) = key.strip_prefix("listener.name.") {
            let Some((listener, setting)) = rest.split_once('.') else {
                continue;
            };
            let is_oauthbearer =
                setting.starts_with("oauthbearer.") || setting.starts_with("sasl.oauthbearer.");
            if !is_oauthbearer {
                continue;
            }
            let listener = listener.to_ascii_uppercase();
            let Some(security) = secured.get(&listener) else {
                // Not a listener of this node: security.rs says so.
                continue;
            };
            if !security.protocol.is_sasl() {
                continue;
            }
            if !security.mechanisms.contains(&Mechanism::OAuthBearer) {
                return Err(ConfigError::new(
                    key,
                    "(hidden)",
                    format!(
                        "listener {listener} does not enable OAUTHBEARER, so this setting would \
                         have no effect: add OAUTHBEARER to its sasl.enabled.mechanisms, or \
                         remove the key"
                    ),
                ));
            }
            let jwks_key =
                JWKS_KEYS.contains(&setting.strip_prefix("oauthbearer.").unwrap_or(setting));
            if jwks_key && !uses_jwks(security) {
                return Err(ConfigError::new(
                    key,
                    "(hidden)",
                    unsecured_reason(&listener),
                ));
            }
        } else if JWKS_KEYS.contains(&key.as_str()) && !secured.values().any(uses_jwks) {
            let reason = match secured
                .iter()
                .find(|(_, security)| security.oauthbearer.is_some())
            {
                Some((listener, _)) => unsecured_reason(listener),
                None => "no listener of this node enables OAUTHBEARER with the JWKS validator, so \
                         this setting would have no effect"
                    .to_owned(),
            };
            return Err(ConfigError::new(key, &properties[key], reason));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::registry::check_unserved_keys;
    use crate::config::security::{SecurityConfig, parse};

    const LISTENERS: &str =
        "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093";
    const JAAS_KEY: &str = "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config";
    const HANDLER_KEY: &str =
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class";
    const MODULE: &str = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule \
                          required unsecuredLoginStringClaim_sub=\"admin\";";

    fn config(pairs: &[(&str, &str)]) -> Result<SecurityConfig, ConfigError> {
        let mut properties: BTreeMap<String, String> = [
            ("listeners", LISTENERS),
            (
                "listener.name.sasl_plaintext.sasl.enabled.mechanisms",
                "OAUTHBEARER",
            ),
        ]
        .into_iter()
        .chain(pairs.iter().copied())
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        properties.retain(|_, v| !v.is_empty());
        let listeners = crate::config::parse_listeners("listeners", LISTENERS).expect("listeners");
        // Every key of these tests is one the registry serves.
        check_unserved_keys(&properties)?;
        parse(&properties, &listeners, "CONTROLLER", true)
    }

    fn validator(config: &SecurityConfig) -> ValidatorSettings {
        config
            .listener("SASL_PLAINTEXT")
            .oauthbearer
            .expect("a validator")
            .settings()
            .clone()
    }

    fn refused(pairs: &[(&str, &str)], key: &str, needle: &str) {
        let error = config(pairs).expect_err(needle);
        assert_eq!(error.key, key, "{error}");
        assert!(error.reason.contains(needle), "{needle}: {error}");
    }

    #[test]
    fn the_unsecured_validator_is_kafkas_default_and_reads_its_jaas_options() {
        let module = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule \
                      required unsecuredLoginStringClaim_sub=\"admin\" \
                      unsecuredValidatorRequiredScope=\"kafka\" \
                      unsecuredValidatorAllowableClockSkewMs=\"500\";";
        let settings = validator(&config(&[(JAAS_KEY, module)]).expect("valid"));
        assert_eq!(
            settings,
            ValidatorSettings::Unsecured(UnsecuredSettings {
                required_scope: vec!["kafka".into()],
                clock_skew_ms: 500,
                ..UnsecuredSettings::default()
            })
        );
        // Naming Kafka's default class is the same.
        let config = config(&[(JAAS_KEY, MODULE), (HANDLER_KEY, UNSECURED_VALIDATOR_CLASS)])
            .expect("explicit");
        assert!(matches!(
            validator(&config),
            ValidatorSettings::Unsecured(_)
        ));
        assert_eq!(
            config.listener("SASL_PLAINTEXT").mechanisms,
            [Mechanism::OAuthBearer]
        );
    }

    #[test]
    fn the_jwks_validator_reads_kafkas_keys_most_specific_first() {
        let config = config(&[
            (JAAS_KEY, MODULE),
            (HANDLER_KEY, JWKS_VALIDATOR_CLASS),
            (
                "sasl.oauthbearer.jwks.endpoint.url",
                "file:///etc/global.json",
            ),
            (
                "listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.jwks.endpoint.url",
                "file:///etc/sluice/jwks.json",
            ),
            (
                "listener.name.sasl_plaintext.sasl.oauthbearer.expected.audience",
                "kafka, other",
            ),
            ("sasl.oauthbearer.expected.issuer", "https://idp"),
            ("sasl.oauthbearer.sub.claim.name", "azp"),
            ("sasl.oauthbearer.clock.skew.seconds", "5"),
            ("sasl.oauthbearer.jwks.endpoint.refresh.ms", "60000"),
        ])
        .expect("valid");
        assert_eq!(
            validator(&config),
            ValidatorSettings::Jwks(JwksSettings {
                url: "file:///etc/sluice/jwks.json".into(),
                path: "/etc/sluice/jwks.json".into(),
                expected_audience: vec!["kafka".into(), "other".into()],
                expected_issuer: Some("https://idp".into()),
                sub_claim: "azp".into(),
                scope_claim: "scope".into(),
                clock_skew_seconds: 5,
            })
        );
        for (url, path) in [
            ("file:/etc/a.json", "/etc/a.json"),
            ("FILE://localhost/etc/a.json", "/etc/a.json"),
        ] {
            let config = crate::config::oauthbearer::tests::config(&[
                (JAAS_KEY, MODULE),
                (HANDLER_KEY, JWKS_VALIDATOR_CLASS_OLD),
                ("sasl.oauthbearer.jwks.endpoint.url", url),
            ])
            .expect(url);
            let ValidatorSettings::Jwks(settings) = validator(&config) else {
                panic!("JWKS");
            };
            assert_eq!(settings.path, PathBuf::from(path));
            assert_eq!(settings.clock_skew_seconds, 30, "Kafka's default");
            assert!(settings.expected_audience.is_empty());
        }
    }

    #[test]
    fn what_would_not_be_checked_or_cannot_be_fetched_is_refused() {
        let jwks = [
            (JAAS_KEY, MODULE),
            (HANDLER_KEY, JWKS_VALIDATOR_CLASS),
            (
                "sasl.oauthbearer.jwks.endpoint.url",
                "file:///etc/jwks.json",
            ),
        ];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut all = jwks.to_vec();
            all.extend_from_slice(extra);
            all
        };
        refused(&[], JAAS_KEY, "has no JAAS config");
        refused(
            &[(
                JAAS_KEY,
                "org.apache.kafka.common.security.plain.PlainLoginModule required;",
            )],
            JAAS_KEY,
            "not OAUTHBEARER's",
        );
        refused(
            &[(JAAS_KEY, MODULE), (HANDLER_KEY, "com.example.MyValidator")],
            HANDLER_KEY,
            "loads no Java classes",
        );
        refused(
            &with(&[(
                "sasl.oauthbearer.jwks.endpoint.url",
                "https://idp.example.com/keys",
            )]),
            "sasl.oauthbearer.jwks.endpoint.url",
            "no HTTP client",
        );
        refused(
            &with(&[("sasl.oauthbearer.jwks.endpoint.url", "")]),
            "sasl.oauthbearer.jwks.endpoint.url",
            "names none",
        );
        refused(
            &with(&[("sasl.oauthbearer.jwks.endpoint.url", "file://idp/keys")]),
            "sasl.oauthbearer.jwks.endpoint.url",
            "another host",
        );
        refused(
            &with(&[("sasl.oauthbearer.clock.skew.seconds", "-1")]),
            "sasl.oauthbearer.clock.skew.seconds",
            "0 or more",
        );
        refused(
            &with(&[(
                JAAS_KEY,
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule \
                 required unsecuredValidatorRequiredScope=\"kafka\";",
            )]),
            JAAS_KEY,
            "unsecuredValidatorRequiredScope configures the unsecured validator",
        );
        // JWKS settings the unsecured validator would ignore, as Kafka's does silently.
        refused(
            &[
                (JAAS_KEY, MODULE),
                ("sasl.oauthbearer.expected.audience", "kafka"),
            ],
            "sasl.oauthbearer.expected.audience",
            "unsecured validator",
        );
        refused(
            &[
                (JAAS_KEY, MODULE),
                (
                    "listener.name.sasl_plaintext.sasl.oauthbearer.expected.issuer",
                    "https://idp",
                ),
            ],
            "listener.name.sasl_plaintext.sasl.oauthbearer.expected.issuer",
            "unsecured validator",
        );
        // A client's (the broker's own login) keys.
        let error = config(&with(&[(
            "sasl.oauthbearer.token.endpoint.url",
            "https://idp/token",
        )]))
        .expect_err("a login key");
        assert!(error.reason.contains("a client's"), "{error}");
    }

    #[test]
    fn oauthbearer_settings_of_a_listener_without_it_are_refused() {
        let error = config(&[
            (
                "listener.name.sasl_plaintext.sasl.enabled.mechanisms",
                "PLAIN",
            ),
            (
                "listener.name.sasl_plaintext.plain.sasl.jaas.config",
                "org.apache.kafka.common.security.plain.PlainLoginModule required user_a=\"b\";",
            ),
            (JAAS_KEY, MODULE),
        ])
        .expect_err("OAUTHBEARER is not enabled");
        assert_eq!(error.key, JAAS_KEY);
        assert!(
            error.reason.contains("does not enable OAUTHBEARER"),
            "{error}"
        );
        let error = config(&[
            (
                "listener.name.sasl_plaintext.sasl.enabled.mechanisms",
                "PLAIN",
            ),
            (
                "listener.name.sasl_plaintext.plain.sasl.jaas.config",
                "org.apache.kafka.common.security.plain.PlainLoginModule required user_a=\"b\";",
            ),
            (
                "sasl.oauthbearer.jwks.endpoint.url",
                "file:///etc/jwks.json",
            ),
        ])
        .expect_err("no listener uses it");
        assert!(error.reason.contains("no listener of this node"), "{error}");
        let error = config(&[
            (JAAS_KEY, MODULE),
            (
                "listener.name.plaintext.sasl.oauthbearer.expected.audience",
                "kafka",
            ),
        ])
        .expect_err("a PLAINTEXT listener");
        assert!(error.reason.contains("not a SASL listener"), "{error}");
    }
}
