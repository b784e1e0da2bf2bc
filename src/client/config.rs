//! Client configuration with Kafka's client config names (`bootstrap.servers`, `acks`,
//! `linger.ms`, ...): a map of strings, as in every Kafka client, read into typed settings when
//! a producer, consumer or admin client is built. Invalid values are refused naming the key;
//! keys the client does not know are logged once and otherwise ignored, as Java does.
//!
//! Security uses Kafka's keys too: `security.protocol` (PLAINTEXT or SASL_PLAINTEXT; TLS is
//! refused, never replaced by plaintext), `sasl.mechanism` (PLAIN, SCRAM-SHA-256,
//! SCRAM-SHA-512) and the credentials in `sasl.jaas.config` as Java's clients take them, or
//! in `sasl.username`/`sasl.password` as librdkafka's do ([`SaslSettings`]).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::error::{Error, Result};
use crate::security::sasl::{Mechanism, SaslClient, SaslError, parse_jaas};

/// Kafka client settings by name.
///
/// ```
/// use sluice::client::ClientConfig;
/// let config = ClientConfig::new("127.0.0.1:9092")
///     .set("acks", "all")
///     .set("linger.ms", "5");
/// assert_eq!(config.get("linger.ms"), Some("5"));
/// ```
#[derive(Clone, Default)]
pub struct ClientConfig {
    values: BTreeMap<String, String>,
}

// Secrets stay out of logs, as Java's clients print them `[hidden]`.
impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for (key, value) in &self.values {
            if is_secret(key) {
                map.entry(key, &"[hidden]");
            } else {
                map.entry(key, value);
            }
        }
        map.finish()
    }
}

/// Whether `key` holds a secret: a password, or a JAAS value (which carries one).
fn is_secret(key: &str) -> bool {
    key.ends_with("password") || key.ends_with("sasl.jaas.config")
}

impl ClientConfig {
    /// A configuration with `bootstrap.servers` set: one or more `host:port`, comma-separated.
    pub fn new(bootstrap_servers: &str) -> Self {
        ClientConfig::default().set("bootstrap.servers", bootstrap_servers)
    }

    /// Sets `key` to `value` (Kafka's names and value syntax).
    pub fn set(mut self, key: &str, value: impl Into<String>) -> Self {
        self.values.insert(key.trim().to_owned(), value.into());
        self
    }

    /// Sets `key` to `value` in place.
    pub fn insert(&mut self, key: &str, value: impl Into<String>) {
        self.values.insert(key.trim().to_owned(), value.into());
    }

    /// Reads `key=value` lines (a Java properties file's simple form; `#` comments).
    pub fn from_properties(text: &str) -> Result<Self> {
        let mut config = ClientConfig::default();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            let (key, value) = parse_pair(line)?;
            config.insert(key, value);
        }
        Ok(config)
    }

    /// The value of `key`, as set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// Every key set.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(String::as_str)
    }

    /// `key` parsed as `T`, or `default` when unset.
    pub fn parse<T: FromStr>(&self, key: &str, default: T) -> Result<T>
    where
        T::Err: std::fmt::Display,
    {
        match self.get(key) {
            None => Ok(default),
            Some(value) => value.trim().parse().map_err(|e: T::Err| Error::Config {
                key: key.to_owned(),
                reason: format!("{value:?} is not valid: {e}"),
            }),
        }
    }

    /// A number of milliseconds between `min` and `max`, or `default` when unset.
    pub fn millis(&self, key: &str, default: u64, min: u64, max: u64) -> Result<Duration> {
        let ms: u64 = self.parse(key, default)?;
        check_range(key, ms, min, max)?;
        Ok(Duration::from_millis(ms))
    }

    /// A count or size between `min` and `max`, or `default` when unset.
    pub fn number(&self, key: &str, default: u64, min: u64, max: u64) -> Result<u64> {
        let value: u64 = self.parse(key, default)?;
        check_range(key, value, min, max)?;
        Ok(value)
    }

    /// `bootstrap.servers`, split: at least one `host:port`.
    pub fn bootstrap_servers(&self) -> Result<Vec<String>> {
        let servers = parse_servers(self.get("bootstrap.servers").unwrap_or(""));
        if servers.is_empty() {
            return Err(Error::Config {
                key: "bootstrap.servers".into(),
                reason: "is required: one or more host:port, comma-separated".into(),
            });
        }
        for server in &servers {
            let port = server.rsplit_once(':').map(|(_, port)| port.parse::<u16>());
            if !matches!(port, Some(Ok(_))) {
                return Err(Error::Config {
                    key: "bootstrap.servers".into(),
                    reason: format!("{server:?} is not host:port"),
                });
            }
        }
        Ok(servers)
    }

    /// Logs (once, at WARN) the keys set that none of `known` names, as Java's clients do.
    pub(crate) fn warn_unknown(&self, client: &str, known: &[&str]) {
        for key in self.keys() {
            if !known.contains(&key) && !COMMON_KEYS.contains(&key) {
                tracing::warn!(client, key, "configuration key is not known and is ignored");
            }
        }
    }
}

/// Keys every client reads (the connection and metadata settings).
pub(crate) const COMMON_KEYS: &[&str] = &[
    "bootstrap.servers",
    "client.id",
    "request.timeout.ms",
    "socket.connection.setup.timeout.ms",
    "metadata.max.age.ms",
    "retry.backoff.ms",
    "reconnect.backoff.ms",
    "security.protocol",
    "sasl.mechanism",
    // librdkafka's name for sasl.mechanism (one mechanism, despite the plural).
    "sasl.mechanisms",
    "sasl.jaas.config",
    "sasl.username",
    "sasl.password",
];

/// `a:1, b:2,,c:3` -> `["a:1", "b:2", "c:3"]`.
pub fn parse_servers(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn parse_pair(line: &str) -> Result<(&str, &str)> {
    let split = line.find(['=', ':']).ok_or_else(|| Error::Config {
        key: line.to_owned(),
        reason: "expected key=value".into(),
    })?;
    Ok((line[..split].trim(), line[split + 1..].trim()))
}

/// Parses `key=value` pairs given on a command line (`--producer-props acks=all linger.ms=5`).
pub fn parse_pairs<'a>(pairs: impl IntoIterator<Item = &'a str>) -> Result<ClientConfig> {
    let mut config = ClientConfig::default();
    for pair in pairs {
        let (key, value) = pair.split_once('=').ok_or_else(|| Error::Config {
            key: pair.to_owned(),
            reason: "expected key=value".into(),
        })?;
        config.insert(key, value.trim());
    }
    Ok(config)
}

fn check_range(key: &str, value: u64, min: u64, max: u64) -> Result<()> {
    if value < min || value > max {
        return Err(Error::Config {
            key: key.to_owned(),
            reason: format!("{value} is outside {min}..={max}"),
        });
    }
    Ok(())
}

/// The settings every client shares.
#[derive(Debug, Clone)]
pub(crate) struct CommonConfig {
    pub bootstrap_servers: Vec<String>,
    pub client_id: String,
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    /// How every connection authenticates; `None` for `security.protocol=PLAINTEXT`.
    pub sasl: Option<SaslSettings>,
}

impl CommonConfig {
    pub fn from_config(config: &ClientConfig) -> Result<Self> {
        let mut common = CommonConfig::without_servers(config)?;
        common.bootstrap_servers = config.bootstrap_servers()?;
        Ok(common)
    }

    /// Everything but `bootstrap.servers`, for a connection to an address given apart.
    pub fn without_servers(config: &ClientConfig) -> Result<Self> {
        Ok(CommonConfig {
            bootstrap_servers: Vec::new(),
            client_id: config.get("client.id").unwrap_or("sluice").to_owned(),
            request_timeout: config.millis("request.timeout.ms", 30_000, 1, 3_600_000)?,
            connect_timeout: config.millis(
                "socket.connection.setup.timeout.ms",
                10_000,
                1,
                3_600_000,
            )?,
            sasl: SaslSettings::from_config(config)?,
        })
    }
}

/// The `sasl.*` keys, which only `security.protocol=SASL_PLAINTEXT` reads.
const SASL_KEYS: &[&str] = &[
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.jaas.config",
    "sasl.username",
    "sasl.password",
];

/// How a client authenticates each connection it opens (`security.protocol=SASL_PLAINTEXT`):
/// the mechanism and one user's credentials, checked when the client is built so that a
/// mistake is said then, naming its key, rather than at the first connection.
#[derive(Clone)]
pub(crate) struct SaslSettings {
    pub mechanism: Mechanism,
    pub username: String,
    password: String,
}

// The password stays out of logs.
impl fmt::Debug for SaslSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslSettings")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl SaslSettings {
    /// Reads `security.protocol` and, for SASL_PLAINTEXT, the mechanism and credentials.
    /// `None` for PLAINTEXT (the default). SSL and SASL_SSL are refused: the SDK has no TLS,
    /// and a client asked for it must not talk in the clear instead.
    pub fn from_config(config: &ClientConfig) -> Result<Option<SaslSettings>> {
        let protocol = config
            .get("security.protocol")
            .map_or_else(|| "PLAINTEXT".to_owned(), |p| p.trim().to_ascii_uppercase());
        match protocol.as_str() {
            "PLAINTEXT" => {
                for key in SASL_KEYS.iter().filter(|key| config.get(key).is_some()) {
                    tracing::warn!(
                        key,
                        "security.protocol is PLAINTEXT: the SASL setting is ignored (set security.protocol=SASL_PLAINTEXT to authenticate)"
                    );
                }
                Ok(None)
            }
            "SASL_PLAINTEXT" => {
                let mechanism = mechanism(config)?;
                let (key, username, password) = credentials(config)?;
                // The client checks what it can now (empty or oversized values, a NUL in
                // PLAIN's): the exchange itself is built afresh per connection.
                SaslClient::new(mechanism, &username, &password)
                    .map_err(|error| config_error(key, sasl_reason(&error)))?;
                Ok(Some(SaslSettings {
                    mechanism,
                    username,
                    password,
                }))
            }
            "SSL" | "SASL_SSL" => Err(config_error(
                "security.protocol",
                format!(
                    "{protocol}: TLS is not implemented in the Sluice SDK yet; use PLAINTEXT or SASL_PLAINTEXT (over a network you trust)"
                ),
            )),
            _ => Err(config_error(
                "security.protocol",
                format!(
                    "{protocol:?} is not a security protocol: PLAINTEXT, SASL_PLAINTEXT, SSL or SASL_SSL"
                ),
            )),
        }
    }

    /// A new client side of one exchange, for one connection.
    pub fn client(&self) -> std::result::Result<SaslClient, SaslError> {
        SaslClient::new(self.mechanism, &self.username, &self.password)
    }
}

/// `sasl.mechanism` (or librdkafka's `sasl.mechanisms`). Unset, Kafka's clients use GSSAPI
/// (Kerberos), which the SDK does not speak: refused, naming what it does speak.
fn mechanism(config: &ClientConfig) -> Result<Mechanism> {
    let java = config.get("sasl.mechanism").map(str::trim);
    let librdkafka = config.get("sasl.mechanisms").map(str::trim);
    let (key, name) = match (java, librdkafka) {
        (Some(a), Some(b)) if a != b => {
            return Err(config_error(
                "sasl.mechanism",
                format!("{a:?} differs from sasl.mechanisms {b:?}; set one of them"),
            ));
        }
        (Some(name), _) => ("sasl.mechanism", name),
        (None, Some(name)) => ("sasl.mechanisms", name),
        (None, None) => {
            return Err(config_error(
                "sasl.mechanism",
                "is unset, and Kafka's default GSSAPI (Kerberos) is not supported by the Sluice SDK; set it to PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512".into(),
            ));
        }
    };
    Mechanism::from_name(&name.to_ascii_uppercase()).ok_or_else(|| {
        config_error(
            key,
            format!(
                "{name:?} is not supported by the Sluice SDK: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
            ),
        )
    })
}

/// The user name and password, and the key they came from: `sasl.jaas.config` when set (as
/// Java's clients read it: `username` and `password` options of its one login module),
/// otherwise `sasl.username` and `sasl.password` (librdkafka's keys).
fn credentials(config: &ClientConfig) -> Result<(&'static str, String, String)> {
    const KEY: &str = "sasl.jaas.config";
    if let Some(value) = config.get(KEY) {
        let jaas = parse_jaas(value).map_err(|error| config_error(KEY, sasl_reason(&error)))?;
        let option = |name: &str, value: Option<&str>| {
            value.map(str::to_owned).ok_or_else(|| {
                config_error(KEY, format!("{} has no {name} option", jaas.login_module))
            })
        };
        let username = option("username", jaas.username())?;
        let password = option("password", jaas.password())?;
        return Ok((KEY, username, password));
    }
    match (config.get("sasl.username"), config.get("sasl.password")) {
        (Some(username), Some(password)) => {
            let key = "sasl.username and sasl.password";
            Ok((key, username.to_owned(), password.to_owned()))
        }
        (Some(_), None) => Err(config_error(
            "sasl.password",
            "is required with sasl.username".into(),
        )),
        _ => Err(config_error(
            KEY,
            "security.protocol SASL_PLAINTEXT needs credentials: sasl.jaas.config (e.g. \
             org.apache.kafka.common.security.plain.PlainLoginModule required \
             username=\"alice\" password=\"...\";) or sasl.username and sasl.password"
                .into(),
        )),
    }
}

/// A SASL error as a configuration reason, without its own "bad SASL configuration" preamble
/// (the key named before it says as much).
fn sasl_reason(error: &SaslError) -> String {
    match error {
        SaslError::BadConfig { what } => what.clone(),
        other => other.to_string(),
    }
}

fn config_error(key: &str, reason: String) -> Error {
    Error::Config {
        key: key.to_owned(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked_naming_the_key() {
        let config = ClientConfig::new(" a:1 ,b:2,, ")
            .set("linger.ms", "soon")
            .set("batch.size", "0");
        assert_eq!(config.bootstrap_servers().expect("servers"), ["a:1", "b:2"]);
        let error = config.millis("linger.ms", 5, 0, 1000).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("configuration linger.ms: \"soon\"")
        );
        let error = config.number("batch.size", 16384, 1, 1 << 30).unwrap_err();
        assert_eq!(
            error.to_string(),
            "configuration batch.size: 0 is outside 1..=1073741824"
        );
        assert!(ClientConfig::new("nohost").bootstrap_servers().is_err());
        assert!(ClientConfig::default().bootstrap_servers().is_err());
    }

    #[test]
    fn properties_and_pairs_parse() {
        let config = ClientConfig::from_properties("# c\nacks = all\nlinger.ms:5\n").expect("ok");
        assert_eq!(config.get("acks"), Some("all"));
        assert_eq!(config.get("linger.ms"), Some("5"));
        let config = parse_pairs(["acks=1", "compression.type=lz4"]).expect("ok");
        assert_eq!(config.get("compression.type"), Some("lz4"));
        assert!(parse_pairs(["acks"]).is_err());
    }

    const PLAIN_JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
                              username=\"alice\" password=\"alice-secret\";";

    fn sasl(pairs: &[(&str, &str)]) -> Result<Option<SaslSettings>> {
        let mut config = ClientConfig::new("a:1");
        for (key, value) in pairs {
            config.insert(key, *value);
        }
        SaslSettings::from_config(&config)
    }

    fn config_reason(result: Result<Option<SaslSettings>>) -> (String, String) {
        match result {
            Err(Error::Config { key, reason }) => (key, reason),
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn plaintext_is_the_default_and_tls_is_refused_never_downgraded() {
        assert!(sasl(&[]).expect("plaintext").is_none());
        assert!(
            sasl(&[("security.protocol", "plaintext")])
                .expect("any case")
                .is_none()
        );
        for protocol in ["SSL", "SASL_SSL", "sasl_ssl"] {
            let (key, reason) = config_reason(sasl(&[
                ("security.protocol", protocol),
                ("sasl.mechanism", "PLAIN"),
                ("sasl.jaas.config", PLAIN_JAAS),
            ]));
            assert_eq!(key, "security.protocol");
            assert!(
                reason.contains("TLS is not implemented in the Sluice SDK yet"),
                "{reason}"
            );
        }
        let (key, reason) = config_reason(sasl(&[("security.protocol", "KERBEROS")]));
        assert_eq!(key, "security.protocol");
        assert!(reason.contains("not a security protocol"), "{reason}");
        // The builders refuse it too.
        let config = ClientConfig::new("a:1").set("security.protocol", "SSL");
        assert!(matches!(
            CommonConfig::from_config(&config),
            Err(Error::Config { .. })
        ));
    }

    #[test]
    fn sasl_reads_java_jaas_or_librdkafka_credentials_and_jaas_wins() {
        let settings = sasl(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.jaas.config", PLAIN_JAAS),
            ("sasl.username", "bob"),
            ("sasl.password", "bob-secret"),
        ])
        .expect("valid")
        .expect("sasl");
        assert_eq!(settings.mechanism, Mechanism::Plain);
        assert_eq!(settings.username, "alice");
        assert_eq!(settings.password, "alice-secret");

        let settings = sasl(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanisms", "SCRAM-SHA-512"),
            ("sasl.username", "bob"),
            ("sasl.password", "bob-secret"),
        ])
        .expect("valid")
        .expect("sasl");
        assert_eq!(settings.mechanism, Mechanism::ScramSha512);
        assert_eq!(
            (settings.username.as_str(), settings.password.as_str()),
            ("bob", "bob-secret")
        );

        let scram = "org.apache.kafka.common.security.scram.ScramLoginModule required \
                     username='carol' password='c=\\'3';";
        let settings = sasl(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "scram-sha-256"),
            ("sasl.jaas.config", scram),
        ])
        .expect("valid")
        .expect("sasl");
        assert_eq!(settings.mechanism, Mechanism::ScramSha256);
        assert_eq!(settings.password, "c='3");
        let client = settings.client().expect("a client");
        assert_eq!(client.mechanism(), Mechanism::ScramSha256);
    }

    #[test]
    fn sasl_mistakes_are_refused_naming_the_key() {
        let base = [("security.protocol", "SASL_PLAINTEXT")];
        let with = |more: &[(&'static str, &'static str)]| {
            let mut pairs = base.to_vec();
            pairs.extend_from_slice(more);
            config_reason(sasl(&pairs))
        };
        // Kafka's default mechanism, GSSAPI, is not spoken: said, not attempted.
        let (key, reason) = with(&[("sasl.jaas.config", PLAIN_JAAS)]);
        assert_eq!(key, "sasl.mechanism");
        assert!(reason.contains("GSSAPI"), "{reason}");
        let (key, reason) = with(&[
            ("sasl.mechanism", "GSSAPI"),
            ("sasl.jaas.config", PLAIN_JAAS),
        ]);
        assert_eq!(key, "sasl.mechanism");
        assert!(reason.contains("\"GSSAPI\" is not supported"), "{reason}");
        let (key, _) = with(&[
            ("sasl.mechanism", "PLAIN"),
            ("sasl.mechanisms", "SCRAM-SHA-256"),
            ("sasl.jaas.config", PLAIN_JAAS),
        ]);
        assert_eq!(key, "sasl.mechanism");
        // No credentials, half of them, a JAAS value without a password or unreadable.
        let (key, reason) = with(&[("sasl.mechanism", "PLAIN")]);
        assert_eq!(key, "sasl.jaas.config");
        assert!(reason.contains("needs credentials"), "{reason}");
        let (key, _) = with(&[("sasl.mechanism", "PLAIN"), ("sasl.username", "bob")]);
        assert_eq!(key, "sasl.password");
        let (key, reason) = with(&[
            ("sasl.mechanism", "PLAIN"),
            (
                "sasl.jaas.config",
                "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"a\";",
            ),
        ]);
        assert_eq!(key, "sasl.jaas.config");
        assert!(reason.contains("no password option"), "{reason}");
        let (key, reason) = with(&[
            ("sasl.mechanism", "PLAIN"),
            ("sasl.jaas.config", "PlainLoginModule username=\"a\";"),
        ]);
        assert_eq!(key, "sasl.jaas.config");
        assert!(reason.contains("control flag"), "{reason}");
        // What the mechanism refuses (an empty password) is said at build time.
        let (key, _) = with(&[
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "bob"),
            ("sasl.password", ""),
        ]);
        assert_eq!(key, "sasl.username and sasl.password");
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let config = ClientConfig::new("a:1")
            .set("sasl.jaas.config", PLAIN_JAAS)
            .set("sasl.password", "bob-secret")
            .set("sasl.username", "bob");
        let shown = format!("{config:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(
            shown.contains("bob") && shown.contains("[hidden]"),
            "{shown}"
        );
        let settings = sasl(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.jaas.config", PLAIN_JAAS),
        ])
        .expect("valid")
        .expect("sasl");
        let shown = format!("{settings:?}");
        assert!(
            shown.contains("alice") && !shown.contains("secret"),
            "{shown}"
        );
    }
}
