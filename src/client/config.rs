//! Client configuration with Kafka's client config names (`bootstrap.servers`, `acks`,
//! `linger.ms`, ...): a map of strings, as in every Kafka client, read into typed settings when
//! a producer, consumer or admin client is built. Invalid values are refused naming the key;
//! keys the client does not know are logged once and otherwise ignored, as Java does.
//!
//! Security uses Kafka's keys too: `security.protocol` (PLAINTEXT, SASL_PLAINTEXT, SSL or
//! SASL_SSL); for SASL `sasl.mechanism` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER) and
//! the credentials in `sasl.jaas.config` as Java's clients take them, or in
//! `sasl.username`/`sasl.password` as librdkafka's do, and OAUTHBEARER's token sources
//! ([`SaslSettings`], [`BearerSource`]); for TLS the PEM
//! stores and `ssl.endpoint.identification.algorithm` ([`TlsSettings`]). Every TLS setting is
//! read, and its files loaded, when the client is built, so a wrong path or a store Sluice
//! cannot read is said then, naming its key, never at the first connection.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use super::error::{Error, Result, io_reason};
use crate::security::sasl::{
    Mechanism, OAUTHBEARER_TOKEN_BYTES_MAX, SaslClient, SaslError, UnsecuredLogin, parse_jaas,
};
use crate::security::tls::settings::{KeyStore, PemSource};
use crate::security::tls::{PEM_BYTES_MAX, TlsError, client_config};

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

/// Whether `key` holds a secret: a password, a JAAS value (which carries one), or a private
/// key given as PEM text.
fn is_secret(key: &str) -> bool {
    key.ends_with("password")
        || key.ends_with("sasl.jaas.config")
        || key == "ssl.keystore.key"
        || key == "ssl.key.pem"
}

impl ClientConfig {
    /// How to reach a quorum (CONTROLLER) listener with these settings, as
    /// `kafka-metadata-quorum --command-config` does: `Some` TLS client config (the
    /// truststore's CAs, the keystore's certificate) when `security.protocol` is SSL, `None`
    /// for PLAINTEXT. The quorum listener serves no SASL: SASL protocols are refused.
    pub fn quorum_tls(&self) -> Result<Option<Arc<rustls::ClientConfig>>> {
        let protocol = SecurityProtocol::from_config(self)?;
        if protocol.is_sasl() {
            return Err(config_error(
                "security.protocol",
                format!(
                    "{} is not served by a quorum (CONTROLLER) listener: it is PLAINTEXT or \
                     SSL with client certificates (set ssl.keystore.location too)",
                    protocol.name()
                ),
            ));
        }
        Ok(TlsSettings::from_config(self, protocol)?.map(|tls| tls.config))
    }

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

    /// Reads `key=value` lines (a Java properties file's simple form; `#` and `!` comments).
    /// A line ending in a backslash goes on on the next one, whose leading blanks are
    /// dropped, as Java reads it: how Kafka's docs write PEM in a config file
    /// (`ssl.truststore.certificates=-----BEGIN CERTIFICATE----- \`, one line of base64 per
    /// line). No other escape is read.
    pub fn from_properties(text: &str) -> Result<Self> {
        let mut config = ClientConfig::default();
        let mut logical = String::new();
        for raw in text.lines() {
            let line = if logical.is_empty() {
                raw.trim()
            } else {
                raw.trim_start()
            };
            let line = line.trim_end();
            if logical.is_empty()
                && (line.is_empty() || line.starts_with('#') || line.starts_with('!'))
            {
                continue;
            }
            let backslashes = line.len() - line.trim_end_matches('\\').len();
            if backslashes % 2 == 1 {
                logical.push_str(&line[..line.len() - 1]);
                continue;
            }
            logical.push_str(line);
            let (key, value) = parse_pair(logical.trim())?;
            config.insert(key, value);
            logical.clear();
        }
        if !logical.trim().is_empty() {
            let (key, value) = parse_pair(logical.trim())?;
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
            if !known.contains(&key) && !COMMON_KEYS.contains(&key) && !TLS_KEYS.contains(&key) {
                tracing::warn!(client, key, "configuration key is not known and is ignored");
            }
        }
    }
}

/// Keys every client reads (the connection and metadata settings; the TLS ones are
/// [`TLS_KEYS`]).
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
    "sasl.oauthbearer.config",
    "enable.sasl.oauthbearer.unsecure.jwt",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.login.callback.handler.class",
    "sasl.oauthbearer.method",
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
    /// How every connection authenticates; `None` unless `security.protocol` is
    /// SASL_PLAINTEXT or SASL_SSL.
    pub sasl: Option<SaslSettings>,
    /// How every connection is encrypted; `None` unless `security.protocol` is SSL or
    /// SASL_SSL (then SASL, if any, runs inside TLS).
    pub tls: Option<TlsSettings>,
}

impl CommonConfig {
    pub fn from_config(config: &ClientConfig) -> Result<Self> {
        let mut common = CommonConfig::without_servers(config)?;
        common.bootstrap_servers = config.bootstrap_servers()?;
        Ok(common)
    }

    /// Everything but `bootstrap.servers`, for a connection to an address given apart.
    pub fn without_servers(config: &ClientConfig) -> Result<Self> {
        let protocol = SecurityProtocol::from_config(config)?;
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
            sasl: SaslSettings::from_config(config, protocol)?,
            tls: TlsSettings::from_config(config, protocol)?,
        })
    }
}

/// `security.protocol`: how a client's connections are made. PLAINTEXT by default, as in
/// Kafka's clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SecurityProtocol {
    Plaintext,
    SaslPlaintext,
    Ssl,
    SaslSsl,
}

impl SecurityProtocol {
    /// Reads `security.protocol` (any case).
    pub fn from_config(config: &ClientConfig) -> Result<SecurityProtocol> {
        let Some(value) = config.get("security.protocol") else {
            return Ok(SecurityProtocol::Plaintext);
        };
        let protocol = value.trim().to_ascii_uppercase();
        match protocol.as_str() {
            "PLAINTEXT" => Ok(SecurityProtocol::Plaintext),
            "SASL_PLAINTEXT" => Ok(SecurityProtocol::SaslPlaintext),
            "SSL" => Ok(SecurityProtocol::Ssl),
            "SASL_SSL" => Ok(SecurityProtocol::SaslSsl),
            _ => Err(config_error(
                "security.protocol",
                format!(
                    "{protocol:?} is not a security protocol: PLAINTEXT, SASL_PLAINTEXT, SSL or SASL_SSL"
                ),
            )),
        }
    }

    /// Kafka's name.
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    pub fn is_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    pub fn is_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }
}

/// The `sasl.*` keys, which only SASL_PLAINTEXT and SASL_SSL read.
const SASL_KEYS: &[&str] = &[
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.jaas.config",
    "sasl.username",
    "sasl.password",
    "sasl.oauthbearer.config",
    "enable.sasl.oauthbearer.unsecure.jwt",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.login.callback.handler.class",
    "sasl.oauthbearer.method",
];

/// How a client authenticates each connection it opens (`security.protocol` SASL_PLAINTEXT
/// or SASL_SSL): the mechanism and one user's credentials, checked when the client is built so
/// that a mistake is said then, naming its key, rather than at the first connection.
#[derive(Clone)]
pub(crate) struct SaslSettings {
    pub mechanism: Mechanism,
    /// Who the client logs in as, for messages: the user, or what the token names.
    pub username: String,
    secret: Secret,
}

/// What proves the client's identity.
#[derive(Clone)]
enum Secret {
    Password(String),
    Bearer(BearerSource),
}

/// Where an OAUTHBEARER client's token comes from, read for each connection so a long-lived
/// client never sends a token that has expired since it started.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum BearerSource {
    /// An unsecured token made for each connection (Kafka's `unsecuredLogin*` JAAS options,
    /// or librdkafka's `sasl.oauthbearer.config` with `enable.sasl.oauthbearer.unsecure.jwt`):
    /// for brokers that accept unsecured tokens, i.e. tests.
    Unsecured(UnsecuredLogin),
    /// A token read from a file (Kafka's `sasl.oauthbearer.token.endpoint.url=file:///...`,
    /// its `FileTokenRetriever`): something else (a sidecar, a cron job) fetches tokens from
    /// the identity provider and writes them there; the SDK has no HTTP client. librdkafka
    /// has no such key.
    File(PathBuf),
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
    /// For SASL_PLAINTEXT and SASL_SSL, the mechanism and credentials; `None` (the `sasl.*`
    /// keys set said to be ignored) for the other protocols.
    pub fn from_config(
        config: &ClientConfig,
        protocol: SecurityProtocol,
    ) -> Result<Option<SaslSettings>> {
        if !protocol.is_sasl() {
            for key in SASL_KEYS.iter().filter(|key| config.get(key).is_some()) {
                tracing::warn!(
                    key,
                    protocol = protocol.name(),
                    "security.protocol does not authenticate: the SASL setting is ignored (set security.protocol=SASL_PLAINTEXT or SASL_SSL to authenticate)"
                );
            }
            return Ok(None);
        }
        let mechanism = mechanism(config)?;
        if mechanism == Mechanism::OAuthBearer {
            return bearer_settings(config).map(Some);
        }
        refuse_oauthbearer_keys(config, mechanism)?;
        let (key, username, password) = credentials(config, protocol)?;
        // The client checks what it can now (empty or oversized values, a NUL in PLAIN's):
        // the exchange itself is built afresh per connection.
        SaslClient::new(mechanism, &username, &password)
            .map_err(|error| config_error(key, sasl_reason(&error)))?;
        Ok(Some(SaslSettings {
            mechanism,
            username,
            secret: Secret::Password(password),
        }))
    }

    /// The password (PLAIN and SCRAM).
    #[cfg(test)]
    fn password(&self) -> Option<&str> {
        match &self.secret {
            Secret::Password(password) => Some(password),
            Secret::Bearer(_) => None,
        }
    }

    /// The token source (OAUTHBEARER).
    #[cfg(test)]
    fn bearer(&self) -> Option<&BearerSource> {
        match &self.secret {
            Secret::Password(_) => None,
            Secret::Bearer(source) => Some(source),
        }
    }

    /// A new client side of one exchange, for one connection (OAUTHBEARER: with a token made
    /// or read now).
    pub fn client(&self) -> std::result::Result<SaslClient, SaslError> {
        match &self.secret {
            Secret::Password(password) => SaslClient::new(self.mechanism, &self.username, password),
            Secret::Bearer(BearerSource::Unsecured(login)) => {
                SaslClient::oauthbearer(&login.token(unix_ms()), login.extensions())
            }
            Secret::Bearer(BearerSource::File(path)) => {
                SaslClient::oauthbearer(&read_token(path)?, &[])
            }
        }
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// A token file's content, trimmed, bounded before it is read whole.
fn read_token(path: &std::path::Path) -> std::result::Result<String, SaslError> {
    let bad = |what: String| SaslError::BadConfig {
        what: format!("OAUTHBEARER token file {}: {what}", path.display()),
    };
    let file = std::fs::File::open(path).map_err(|error| bad(error.to_string()))?;
    let mut text = String::new();
    file.take(OAUTHBEARER_TOKEN_BYTES_MAX as u64 + 1)
        .read_to_string(&mut text)
        .map_err(|error| bad(error.to_string()))?;
    if text.len() > OAUTHBEARER_TOKEN_BYTES_MAX {
        return Err(bad(format!(
            "more than {OAUTHBEARER_TOKEN_BYTES_MAX} bytes"
        )));
    }
    let token = text.trim();
    if token.is_empty() {
        return Err(bad("empty".into()));
    }
    Ok(token.to_owned())
}

/// Kafka's login callback handler that reads `sasl.oauthbearer.token.endpoint.url` (3.4+),
/// and its 3.1-3.3 name.
const LOGIN_CALLBACK_HANDLERS: [&str; 2] = [
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
];

/// OAUTHBEARER's token source: exactly one of Kafka's token file
/// (`sasl.oauthbearer.token.endpoint.url=file:...`), Kafka's unsecured login (`sasl.jaas.config`
/// with `unsecuredLogin*` options) or librdkafka's (`sasl.oauthbearer.config`). What would
/// fetch a token over HTTP (an `https://` endpoint, librdkafka's `sasl.oauthbearer.method=oidc`,
/// the client credentials) is refused: the SDK has no HTTP client.
fn bearer_settings(config: &ClientConfig) -> Result<SaslSettings> {
    for key in config.keys() {
        let served = [
            "sasl.oauthbearer.config",
            "sasl.oauthbearer.token.endpoint.url",
            "sasl.oauthbearer.method",
            "sasl.login.callback.handler.class",
        ];
        if key.starts_with("sasl.oauthbearer.") && !served.contains(&key) {
            return Err(config_error(
                key,
                "is not served by the Sluice SDK, which has no HTTP client to fetch tokens with: \
                 give the token in a file (sasl.oauthbearer.token.endpoint.url=file:///path), or \
                 an unsecured one for tests"
                    .into(),
            ));
        }
    }
    if let Some(method) = config.get("sasl.oauthbearer.method")
        && !method.trim().eq_ignore_ascii_case("default")
    {
        return Err(config_error(
            "sasl.oauthbearer.method",
            format!(
                "{method:?} is not served: the SDK has no HTTP client for OIDC; write the token \
                 to a file and set sasl.oauthbearer.token.endpoint.url=file:///path"
            ),
        ));
    }
    let mut sources = Vec::new();
    if let Some(url) = config.get("sasl.oauthbearer.token.endpoint.url") {
        const KEY: &str = "sasl.oauthbearer.token.endpoint.url";
        if let Some(handler) = config.get("sasl.login.callback.handler.class")
            && !LOGIN_CALLBACK_HANDLERS.contains(&handler.trim())
        {
            return Err(config_error(
                "sasl.login.callback.handler.class",
                format!(
                    "{handler:?}: the SDK loads no Java classes; its token file is read as \
                     Kafka's {} reads it",
                    LOGIN_CALLBACK_HANDLERS[0]
                ),
            ));
        }
        let path = token_file_path(url.trim()).map_err(|reason| config_error(KEY, reason))?;
        read_token(&path).map_err(|error| config_error(KEY, sasl_reason(&error)))?;
        let username = format!("the token in {}", path.display());
        sources.push((KEY, username, BearerSource::File(path)));
    } else if let Some(handler) = config.get("sasl.login.callback.handler.class") {
        return Err(config_error(
            "sasl.login.callback.handler.class",
            format!(
                "{handler:?} without sasl.oauthbearer.token.endpoint.url: the SDK reads a token \
                 from the file that key names"
            ),
        ));
    }
    if let Some(value) = config.get("sasl.jaas.config") {
        const KEY: &str = "sasl.jaas.config";
        let jaas = parse_jaas(value).map_err(|error| config_error(KEY, sasl_reason(&error)))?;
        if !jaas.login_module.ends_with("OAuthBearerLoginModule") {
            return Err(config_error(
                KEY,
                format!(
                    "login module {} is not OAUTHBEARER's \
                     (org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule)",
                    jaas.login_module
                ),
            ));
        }
        // With a token file the JAAS config only names the login module (its other options
        // are the identity provider's, for an HTTP login the SDK does not make).
        let unsecured = jaas.options.keys().any(|k| k.starts_with("unsecuredLogin"));
        if unsecured || sources.is_empty() {
            let login = UnsecuredLogin::from_jaas_options(&jaas.options)
                .map_err(|error| config_error(KEY, sasl_reason(&error)))?;
            let username = login.principal().to_owned();
            sources.push((KEY, username, BearerSource::Unsecured(login)));
        }
    }
    if let Some(text) = config.get("sasl.oauthbearer.config") {
        const KEY: &str = "sasl.oauthbearer.config";
        let enabled = config
            .get("enable.sasl.oauthbearer.unsecure.jwt")
            .map(str::trim);
        if !enabled.is_some_and(|e| e.eq_ignore_ascii_case("true")) {
            return Err(config_error(
                KEY,
                "makes an unsecured token only with enable.sasl.oauthbearer.unsecure.jwt=true, \
                 as in librdkafka (unsecured tokens are for tests)"
                    .into(),
            ));
        }
        let login = UnsecuredLogin::from_librdkafka_config(text)
            .map_err(|error| config_error(KEY, sasl_reason(&error)))?;
        let username = login.principal().to_owned();
        sources.push((KEY, username, BearerSource::Unsecured(login)));
    }
    match sources.len() {
        0 => Err(config_error(
            "sasl.mechanism",
            "OAUTHBEARER needs a token: sasl.oauthbearer.token.endpoint.url=file:///path (a \
             token the identity provider issued), or for tests an unsecured one \
             (sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule \
             required unsecuredLoginStringClaim_sub=\"alice\"; or sasl.oauthbearer.config=principal=alice \
             with enable.sasl.oauthbearer.unsecure.jwt=true)"
                .into(),
        )),
        1 => {
            let (key, username, source) = sources.remove(0);
            let settings = SaslSettings {
                mechanism: Mechanism::OAuthBearer,
                username,
                secret: Secret::Bearer(source),
            };
            // The first token made now, so a token or extension that could not be sent is
            // said when the client is built.
            settings
                .client()
                .map_err(|error| config_error(key, sasl_reason(&error)))?;
            Ok(settings)
        }
        _ => Err(config_error(
            sources[1].0,
            format!(
                "{} gives the OAUTHBEARER token already: set one token source",
                sources[0].0
            ),
        )),
    }
}

/// The file of a `file:` URL (`file:///path`, `file:/path`, host `localhost`).
fn token_file_path(url: &str) -> std::result::Result<PathBuf, String> {
    let Some((scheme, rest)) = url.split_once(':') else {
        return Err(format!(
            "{url:?} is not a URL: expected file:///path/to/token"
        ));
    };
    if !scheme.eq_ignore_ascii_case("file") {
        return Err(format!(
            "{url:?}: the SDK has no HTTP client to fetch tokens with; have something else \
             fetch them into a file and set file:///path/to/token"
        ));
    }
    let path = match rest.strip_prefix("//") {
        Some(after) => {
            let (host, path) = after.split_at(after.find('/').unwrap_or(after.len()));
            if !host.is_empty() && !host.eq_ignore_ascii_case("localhost") {
                return Err(format!("{url:?} names a file on another host"));
            }
            path
        }
        None => rest,
    };
    if path.is_empty() {
        return Err(format!("{url:?} names no file"));
    }
    Ok(PathBuf::from(path))
}

/// OAUTHBEARER's keys with another mechanism would do nothing: refused.
fn refuse_oauthbearer_keys(config: &ClientConfig, mechanism: Mechanism) -> Result<()> {
    let stray = config.keys().find(|key| {
        key.starts_with("sasl.oauthbearer.")
            || *key == "enable.sasl.oauthbearer.unsecure.jwt"
            || *key == "sasl.login.callback.handler.class"
    });
    match stray {
        Some(key) => Err(config_error(
            key,
            format!("is an OAUTHBEARER setting and sasl.mechanism is {mechanism}"),
        )),
        None => Ok(()),
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
                "is unset, and Kafka's default GSSAPI (Kerberos) is not supported by the Sluice SDK; set it to PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER".into(),
            ));
        }
    };
    Mechanism::from_name(&name.to_ascii_uppercase()).ok_or_else(|| {
        config_error(
            key,
            format!(
                "{name:?} is not supported by the Sluice SDK: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"
            ),
        )
    })
}

/// The user name and password, and the key they came from: `sasl.jaas.config` when set (as
/// Java's clients read it: `username` and `password` options of its one login module),
/// otherwise `sasl.username` and `sasl.password` (librdkafka's keys).
fn credentials(
    config: &ClientConfig,
    protocol: SecurityProtocol,
) -> Result<(&'static str, String, String)> {
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
            format!(
                "security.protocol {} needs credentials: sasl.jaas.config (e.g. \
                 org.apache.kafka.common.security.plain.PlainLoginModule required \
                 username=\"alice\" password=\"...\";) or sasl.username and sasl.password",
                protocol.name()
            ),
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

/// The `ssl.*` keys a client reads (Java's, and librdkafka's for the stores), which only SSL
/// and SASL_SSL read.
const TLS_KEYS: &[&str] = &[
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.truststore.password",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "ssl.enabled.protocols",
    "ssl.protocol",
    "ssl.cipher.suites",
    "ssl.ca.location",
    "ssl.ca.pem",
    "ssl.certificate.location",
    "ssl.certificate.pem",
    "ssl.key.location",
    "ssl.key.pem",
];

/// How a client encrypts each connection it opens (`security.protocol` SSL or SASL_SSL):
/// the rustls config, built once from the stores when the client is built, and the keys the
/// stores came from, which a refused handshake names so the user knows what to change.
#[derive(Clone)]
pub(crate) struct TlsSettings {
    /// Trusts the truststore's CAs only; presents the client certificate when one is set.
    pub config: Arc<rustls::ClientConfig>,
    /// Whether the broker's certificate must name the host connected to
    /// (`ssl.endpoint.identification.algorithm=https`, the default).
    pub verify_hostname: bool,
    /// The key the CA certificates came from (`ssl.truststore.location`, ...).
    pub truststore_key: &'static str,
    /// The key the client certificate came from, when one is presented.
    pub keystore_key: Option<&'static str>,
}

// The rustls config holds the private key: only where it came from is shown.
impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("verify_hostname", &self.verify_hostname)
            .field("truststore_key", &self.truststore_key)
            .field("keystore_key", &self.keystore_key)
            .finish_non_exhaustive()
    }
}

/// A store and the key (or keys) it was configured with. `renames` map the names the TLS
/// module gives PEM-in-config values (Java's `ssl.keystore.key`, ...) to the keys the user
/// wrote, so its errors name what the user set.
struct ConfiguredStore<T> {
    key: &'static str,
    store: T,
    renames: &'static [(&'static str, &'static str)],
    /// Whether a Java store file's type key was left unset (Java's default is JKS): a file
    /// that is not PEM is then explained.
    type_unset: bool,
}

impl TlsSettings {
    /// For SSL and SASL_SSL, the stores loaded into a rustls config; `None` (the `ssl.*` keys
    /// set said to be ignored) for the other protocols. Refuses, naming the key, what Sluice
    /// cannot honour (JKS/PKCS12 stores, store passwords, cipher suites, a protocol
    /// list without TLSv1.2 and TLSv1.3) and a TLS client without a truststore.
    pub fn from_config(
        config: &ClientConfig,
        protocol: SecurityProtocol,
    ) -> Result<Option<TlsSettings>> {
        if !protocol.is_tls() {
            for key in TLS_KEYS
                .iter()
                .filter(|key| tls_value(config, key).is_some())
            {
                tracing::warn!(
                    key,
                    protocol = protocol.name(),
                    "security.protocol does not encrypt: the TLS setting is ignored (set security.protocol=SSL or SASL_SSL to use TLS)"
                );
            }
            return Ok(None);
        }
        refuse_unserved(config)?;
        let verify_hostname = endpoint_identification(config)?;
        let truststore = truststore(config, protocol)?;
        let keystore = keystore(config)?;
        // The truststore alone first, so that each error names the key it comes from.
        let checked = client_config(Some(&truststore.store), None, verify_hostname)
            .map_err(|error| store_error(&truststore, &error))?;
        let tls_config = match &keystore {
            None => checked,
            Some(keystore) => client_config(
                Some(&truststore.store),
                Some(&keystore.store),
                verify_hostname,
            )
            .map_err(|error| store_error(keystore, &error))?,
        };
        Ok(Some(TlsSettings {
            config: tls_config,
            verify_hostname,
            truststore_key: truststore.key,
            keystore_key: keystore.map(|keystore| keystore.key),
        }))
    }
}

/// A TLS key's value, trimmed; `None` when unset or empty (as the broker reads its own
/// `ssl.*` keys). `ssl.endpoint.identification.algorithm`, where empty means something, is
/// read apart.
fn tls_value<'a>(config: &'a ClientConfig, key: &str) -> Option<&'a str> {
    config
        .get(key)
        .map(str::trim)
        .filter(|value| !value.is_empty())
}

/// Refuses the TLS settings Sluice does not honour, rather than connect otherwise than asked.
fn refuse_unserved(config: &ClientConfig) -> Result<()> {
    for (key, store) in [
        ("ssl.truststore.type", "truststore"),
        ("ssl.keystore.type", "keystore"),
    ] {
        if let Some(value) = tls_value(config, key) {
            if !value.eq_ignore_ascii_case("PEM") {
                return Err(config_error(
                    key,
                    format!(
                        "{value} {store}s are not read by the Sluice SDK, only PEM: convert it \
                         (`openssl pkcs12 -in store.p12 -nodes -out store.pem`; a JKS store \
                         first with `keytool -importkeystore -deststoretype PKCS12`) and set \
                         {key}=PEM"
                    ),
                ));
            }
        }
    }
    for key in ["ssl.truststore.password", "ssl.keystore.password"] {
        if tls_value(config, key).is_some() {
            return Err(config_error(
                key,
                "a PEM store has no password (Kafka refuses it too): remove the key".into(),
            ));
        }
    }
    if let Some(suites) = tls_value(config, "ssl.cipher.suites") {
        return Err(config_error(
            "ssl.cipher.suites",
            format!(
                "{suites:?}: naming cipher suites is not supported: the SDK offers rustls's \
                 safe suites only; remove the key"
            ),
        ));
    }
    if let Some(list) = tls_value(config, "ssl.enabled.protocols") {
        let names: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect();
        if let Some(unknown) = names
            .iter()
            .find(|n| !matches!(**n, "TLSv1" | "TLSv1.1" | "TLSv1.2" | "TLSv1.3"))
        {
            return Err(config_error(
                "ssl.enabled.protocols",
                format!("{unknown:?} is not a TLS protocol: TLSv1.2, TLSv1.3"),
            ));
        }
        // TLSv1 and TLSv1.1 are never offered (stricter than asked); leaving out TLSv1.2 or
        // TLSv1.3 cannot be honoured, since the SDK offers both.
        if !(names.contains(&"TLSv1.2") && names.contains(&"TLSv1.3")) {
            return Err(config_error(
                "ssl.enabled.protocols",
                format!(
                    "{list:?}: the SDK offers TLSv1.2 and TLSv1.3 and cannot leave either out; \
                     remove the key (or list both)"
                ),
            ));
        }
    }
    if let Some(protocol) = tls_value(config, "ssl.protocol") {
        if !matches!(protocol, "TLSv1.2" | "TLSv1.3" | "TLS") {
            return Err(config_error(
                "ssl.protocol",
                format!(
                    "{protocol:?}: expected TLSv1.2, TLSv1.3 or TLS (the SDK offers TLSv1.2 and \
                     TLSv1.3)"
                ),
            ));
        }
    }
    Ok(())
}

/// `ssl.endpoint.identification.algorithm`: `https` (the default) checks the broker's host
/// name against its certificate; empty (Java) or `none` (librdkafka) checks the chain only.
fn endpoint_identification(config: &ClientConfig) -> Result<bool> {
    const KEY: &str = "ssl.endpoint.identification.algorithm";
    let Some(value) = config.get(KEY).map(str::trim) else {
        return Ok(true);
    };
    if value.is_empty() || value.eq_ignore_ascii_case("none") {
        Ok(false)
    } else if value.eq_ignore_ascii_case("https") {
        Ok(true)
    } else {
        Err(config_error(
            KEY,
            format!(
                "{value:?} is not served: https checks the broker's host name against its \
                 certificate (the default), empty checks only that a trusted CA signed it"
            ),
        ))
    }
}

/// The CA certificates that vouch for the brokers: exactly one of `ssl.truststore.location`,
/// `ssl.truststore.certificates`, or librdkafka's `ssl.ca.location` and `ssl.ca.pem`.
/// Required: Sluice bundles no public CA certificates.
fn truststore(
    config: &ClientConfig,
    protocol: SecurityProtocol,
) -> Result<ConfiguredStore<PemSource>> {
    let type_unset = tls_value(config, "ssl.truststore.type").is_none();
    let sources = [
        ("ssl.truststore.location", false),
        ("ssl.truststore.certificates", true),
        ("ssl.ca.location", false),
        ("ssl.ca.pem", true),
    ];
    let set: Vec<(&'static str, bool, &str)> = sources
        .iter()
        .filter_map(|&(key, inline)| tls_value(config, key).map(|value| (key, inline, value)))
        .collect();
    let (key, inline, value) = match set.as_slice() {
        [] => {
            return Err(config_error(
                "ssl.truststore.location",
                format!(
                    "security.protocol {} needs the CA certificates that signed the brokers' \
                     certificates: set ssl.truststore.location (a PEM file, \
                     ssl.truststore.type=PEM) or ssl.truststore.certificates (PEM text), or \
                     librdkafka's ssl.ca.location; Sluice bundles no public CA certificates",
                    protocol.name()
                ),
            ));
        }
        [one] => *one,
        several => {
            let keys: Vec<&str> = several.iter().map(|(key, _, _)| *key).collect();
            return Err(config_error(
                keys[0],
                format!("set one truststore, not {}", keys.join(" and ")),
            ));
        }
    };
    if key == "ssl.ca.location" && value == "probe" {
        return Err(config_error(
            key,
            "\"probe\" (the system's CA paths) is not served: Sluice bundles and probes no \
             public CA certificates; name the PEM file of the brokers' CA"
                .into(),
        ));
    }
    let store = if inline {
        PemSource::Inline(pem_lines(value))
    } else {
        PemSource::File(PathBuf::from(value))
    };
    let renames: &'static [(&'static str, &'static str)] = match key {
        "ssl.ca.pem" => &[("ssl.truststore.certificates", "ssl.ca.pem")],
        _ => &[],
    };
    Ok(ConfiguredStore {
        key,
        store,
        renames,
        type_unset: type_unset && key == "ssl.truststore.location",
    })
}

/// The client certificate and its key, for a listener that asks for one (mutual TLS): at
/// most one of `ssl.keystore.location` (key and chain in one PEM file),
/// `ssl.keystore.certificate.chain` with `ssl.keystore.key` (PEM text), librdkafka's
/// `ssl.certificate.location` with `ssl.key.location` (two PEM files, read here) or
/// `ssl.certificate.pem` with `ssl.key.pem`; `ssl.key.password` decrypts an encrypted PKCS#8
/// key (Java's and librdkafka's key both).
fn keystore(config: &ClientConfig) -> Result<Option<ConfiguredStore<KeyStore>>> {
    let password = tls_value(config, "ssl.key.password").map(str::to_owned);
    match (keystore_pem(config)?, password) {
        (None, Some(_)) => Err(config_error(
            "ssl.key.password",
            "is set but no client certificate is: set ssl.keystore.location (or \
             ssl.certificate.location and ssl.key.location) with the encrypted key, or remove \
             ssl.key.password"
                .into(),
        )),
        (store, password) => Ok(store.map(|configured| ConfiguredStore {
            store: configured.store.with_key_password(password),
            ..configured
        })),
    }
}

/// The client certificate's store as configured, before `ssl.key.password` is applied.
fn keystore_pem(config: &ClientConfig) -> Result<Option<ConfiguredStore<KeyStore>>> {
    let type_unset = tls_value(config, "ssl.keystore.type").is_none();
    let pair = |certificate: &'static str, key: &'static str| -> Result<Option<(&str, &str)>> {
        match (tls_value(config, certificate), tls_value(config, key)) {
            (Some(c), Some(k)) => Ok(Some((c, k))),
            (None, None) => Ok(None),
            (Some(_), None) => Err(config_error(
                key,
                format!("is required with {certificate} (the certificate's private key)"),
            )),
            (None, Some(_)) => Err(config_error(
                certificate,
                format!("is required with {key} (the certificate chain of the key)"),
            )),
        }
    };
    let file = tls_value(config, "ssl.keystore.location");
    let java_inline = pair("ssl.keystore.certificate.chain", "ssl.keystore.key")?;
    let librdkafka_files = pair("ssl.certificate.location", "ssl.key.location")?;
    let librdkafka_inline = pair("ssl.certificate.pem", "ssl.key.pem")?;
    let set: Vec<&str> = [
        file.map(|_| "ssl.keystore.location"),
        java_inline.map(|_| "ssl.keystore.certificate.chain and ssl.keystore.key"),
        librdkafka_files.map(|_| "ssl.certificate.location and ssl.key.location"),
        librdkafka_inline.map(|_| "ssl.certificate.pem and ssl.key.pem"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if set.len() > 1 {
        return Err(config_error(
            set[0],
            format!("set one client certificate, not {}", set.join(", ")),
        ));
    }
    let configured = |key, store, renames| ConfiguredStore {
        key,
        store,
        renames,
        type_unset: false,
    };
    if let Some(path) = file {
        return Ok(Some(ConfiguredStore {
            type_unset,
            ..configured("ssl.keystore.location", KeyStore::file(path), &[])
        }));
    }
    if let Some((certificate_chain, key)) = java_inline {
        return Ok(Some(configured(
            "ssl.keystore.certificate.chain and ssl.keystore.key",
            KeyStore::inline(pem_lines(certificate_chain), pem_lines(key)),
            &[],
        )));
    }
    if let Some((certificate, key)) = librdkafka_files {
        return Ok(Some(configured(
            "ssl.certificate.location and ssl.key.location",
            KeyStore::inline(
                read_pem_file("ssl.certificate.location", certificate)?,
                read_pem_file("ssl.key.location", key)?,
            ),
            &[
                ("ssl.keystore.certificate.chain", "ssl.certificate.location"),
                ("ssl.keystore.key", "ssl.key.location"),
            ],
        )));
    }
    if let Some((certificate, key)) = librdkafka_inline {
        return Ok(Some(configured(
            "ssl.certificate.pem and ssl.key.pem",
            KeyStore::inline(pem_lines(certificate), pem_lines(key)),
            &[
                ("ssl.keystore.certificate.chain", "ssl.certificate.pem"),
                ("ssl.keystore.key", "ssl.key.pem"),
            ],
        )));
    }
    Ok(None)
}

/// Reads one of librdkafka's PEM files (`ssl.certificate.location`, `ssl.key.location`),
/// bounded by [`PEM_BYTES_MAX`] before and while reading (the file may grow in between).
fn read_pem_file(key: &'static str, path: &str) -> Result<String> {
    let refused = |reason: String| config_error(key, reason);
    let unreadable =
        |error: std::io::Error| refused(format!("cannot read {path}: {}", io_reason(&error)));
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let too_large = |bytes: u64| {
        refused(format!(
            "{path} is {bytes} bytes, more than the {PEM_BYTES_MAX} a PEM file may have"
        ))
    };
    let bytes = file.metadata().map_err(unreadable)?.len();
    if bytes > PEM_BYTES_MAX {
        return Err(too_large(bytes));
    }
    let mut contents = Vec::with_capacity(bytes as usize);
    file.take(PEM_BYTES_MAX + 1)
        .read_to_end(&mut contents)
        .map_err(unreadable)?;
    if contents.len() as u64 > PEM_BYTES_MAX {
        return Err(too_large(contents.len() as u64));
    }
    String::from_utf8(contents).map_err(|_| refused(format!("{path} is not PEM text")))
}

/// PEM text given on one line (a properties file's value, or lines joined by `\`
/// continuations) put back on lines, as Kafka's PEM reader accepts it: each
/// `-----BEGIN X-----` ... `-----END X-----` block with its base64 re-wrapped, the blanks
/// within dropped. Text with line breaks, text with PEM headers (an encrypted key's
/// `Proc-Type`, which the TLS module refuses by name) and oversized text are left as they
/// are.
fn pem_lines(text: &str) -> String {
    const BEGIN: &str = "-----BEGIN ";
    const DASHES: &str = "-----";
    if text.contains('\n') || text.contains("Proc-Type:") || text.len() as u64 > PEM_BYTES_MAX {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + text.len() / 32 + 64);
    let mut rest = text;
    while let Some(begin) = rest.find(BEGIN) {
        let after = &rest[begin + BEGIN.len()..];
        let Some(label_end) = after.find(DASHES) else {
            break;
        };
        let label = &after[..label_end];
        let end_marker = format!("-----END {label}-----");
        let body_and_rest = &after[label_end + DASHES.len()..];
        let Some(body_end) = body_and_rest.find(&end_marker) else {
            break;
        };
        out.push_str(BEGIN);
        out.push_str(label);
        out.push_str(DASHES);
        out.push('\n');
        let body = body_and_rest[..body_end]
            .chars()
            .filter(|c| !c.is_whitespace());
        for (i, c) in body.enumerate() {
            if i > 0 && i % 64 == 0 {
                out.push('\n');
            }
            out.push(c);
        }
        out.push('\n');
        out.push_str(&end_marker);
        out.push('\n');
        rest = &body_and_rest[body_end + end_marker.len()..];
    }
    if out.is_empty() { text.to_owned() } else { out }
}

/// A store the TLS module could not load, as a configuration error naming the key the user
/// set, with how to convert a store that is not PEM when its type was left to Java's default.
fn store_error<T>(store: &ConfiguredStore<T>, error: &TlsError) -> Error {
    let mut reason = error.to_string();
    for (module_name, user_key) in store.renames {
        reason = reason.replace(module_name, user_key);
    }
    let not_pem = matches!(
        error,
        TlsError::Pem { .. } | TlsError::NoCertificate { .. } | TlsError::NoPrivateKey { .. }
    );
    if not_pem && store.type_unset {
        reason.push_str(
            "; the SDK reads PEM stores only (Java's clients default to JKS): convert a JKS or \
             PKCS12 store to PEM and set its type to PEM",
        );
    }
    config_error(store.key, reason)
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

    fn with(pairs: &[(&str, &str)]) -> ClientConfig {
        let mut config = ClientConfig::new("a:1");
        for (key, value) in pairs {
            config.insert(key, *value);
        }
        config
    }

    fn sasl(pairs: &[(&str, &str)]) -> Result<Option<SaslSettings>> {
        let config = with(pairs);
        SaslSettings::from_config(&config, SecurityProtocol::from_config(&config)?)
    }

    fn config_reason<T: fmt::Debug>(result: Result<T>) -> (String, String) {
        match result {
            Err(Error::Config { key, reason }) => (key, reason),
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn plaintext_is_the_default_and_every_protocol_is_read_in_any_case() {
        let protocol =
            |value: &str| SecurityProtocol::from_config(&with(&[("security.protocol", value)]));
        assert_eq!(
            SecurityProtocol::from_config(&with(&[])).expect("default"),
            SecurityProtocol::Plaintext
        );
        for (value, expected) in [
            ("plaintext", SecurityProtocol::Plaintext),
            ("SASL_PLAINTEXT", SecurityProtocol::SaslPlaintext),
            (" ssl ", SecurityProtocol::Ssl),
            ("Sasl_Ssl", SecurityProtocol::SaslSsl),
        ] {
            assert_eq!(protocol(value).expect(value), expected);
        }
        assert!(sasl(&[]).expect("plaintext").is_none());
        let (key, reason) = config_reason(protocol("KERBEROS"));
        assert_eq!(key, "security.protocol");
        assert!(reason.contains("not a security protocol"), "{reason}");
        // SASL_SSL reads the SASL keys as SASL_PLAINTEXT does; SSL ignores them.
        let jaas = [
            ("sasl.mechanism", "PLAIN"),
            ("sasl.jaas.config", PLAIN_JAAS),
        ];
        let mut pairs = vec![("security.protocol", "SASL_SSL")];
        pairs.extend_from_slice(&jaas);
        assert_eq!(
            sasl(&pairs).expect("valid").expect("sasl").username,
            "alice"
        );
        pairs[0].1 = "SSL";
        assert!(sasl(&pairs).expect("valid").is_none());
        // A TLS protocol is never downgraded: without a truststore the builders refuse it.
        let config = ClientConfig::new("a:1").set("security.protocol", "SSL");
        let (key, _) = config_reason(CommonConfig::from_config(&config));
        assert_eq!(key, "ssl.truststore.location");
    }

    /// The fixtures of `security::tls` (see its testdata README): `ca.pem` signs
    /// `client.pem` (alice's key then her certificate).
    fn fixture(name: &str) -> String {
        format!(
            "{}/src/security/tls/testdata/{name}",
            env!("CARGO_MANIFEST_DIR")
        )
    }

    fn read(name: &str) -> String {
        std::fs::read_to_string(fixture(name)).expect("fixture")
    }

    /// alice's key and her certificate, apart.
    fn client_key_and_certificate() -> (String, String) {
        let keystore = read("client.pem");
        let at = keystore
            .find("-----BEGIN CERTIFICATE-----")
            .expect("a certificate");
        (keystore[..at].to_owned(), keystore[at..].to_owned())
    }

    fn tls(pairs: &[(&str, &str)]) -> Result<Option<TlsSettings>> {
        let mut all = vec![("security.protocol", "SSL")];
        all.extend_from_slice(pairs);
        let config = with(&all);
        TlsSettings::from_config(&config, SecurityProtocol::from_config(&config)?)
    }

    fn tls_settings(pairs: &[(&str, &str)]) -> TlsSettings {
        tls(pairs)
            .unwrap_or_else(|error| panic!("{pairs:?}: {error}"))
            .expect("TLS settings for SSL")
    }

    #[test]
    fn a_tls_client_needs_a_truststore_and_is_told_which_keys_give_one() {
        for protocol in ["SSL", "SASL_SSL"] {
            let config = with(&[
                ("security.protocol", protocol),
                ("sasl.mechanism", "PLAIN"),
                ("sasl.jaas.config", PLAIN_JAAS),
            ]);
            let (key, reason) = config_reason(CommonConfig::from_config(&config));
            assert_eq!(key, "ssl.truststore.location");
            for words in [
                protocol,
                "ssl.truststore.certificates",
                "ssl.ca.location",
                "bundles no public CA",
            ] {
                assert!(reason.contains(words), "{words}: {reason}");
            }
        }
        // Neither PLAINTEXT nor SASL_PLAINTEXT reads (or loads) the TLS keys.
        for protocol in ["PLAINTEXT", "SASL_PLAINTEXT"] {
            let config = with(&[
                ("security.protocol", protocol),
                ("sasl.mechanism", "PLAIN"),
                ("sasl.jaas.config", PLAIN_JAAS),
                ("ssl.truststore.location", "/nonexistent/ca.pem"),
            ]);
            let common = CommonConfig::from_config(&config).expect(protocol);
            assert!(common.tls.is_none());
        }
    }

    #[test]
    fn every_truststore_spelling_is_read() {
        let ca = fixture("ca.pem");
        let ca_text = read("ca.pem");
        // Kafka's PEM in a config value on one line, blanks where the line breaks were.
        let ca_one_line = ca_text.split_whitespace().collect::<Vec<_>>().join(" ");
        let ca_one_line = ca_one_line.replace("----- ", "-----");
        for (pairs, key) in [
            (
                vec![("ssl.truststore.location", ca.as_str())],
                "ssl.truststore.location",
            ),
            (
                vec![
                    ("ssl.truststore.location", ca.as_str()),
                    ("ssl.truststore.type", "pem"),
                ],
                "ssl.truststore.location",
            ),
            (
                vec![("ssl.truststore.certificates", ca_text.as_str())],
                "ssl.truststore.certificates",
            ),
            (
                vec![("ssl.truststore.certificates", ca_one_line.as_str())],
                "ssl.truststore.certificates",
            ),
            (vec![("ssl.ca.location", ca.as_str())], "ssl.ca.location"),
            (vec![("ssl.ca.pem", ca_text.as_str())], "ssl.ca.pem"),
        ] {
            let settings = tls_settings(&pairs);
            assert_eq!(settings.truststore_key, key);
            assert_eq!(settings.keystore_key, None);
            assert!(settings.verify_hostname);
            assert!(!settings.config.client_auth_cert_resolver.has_certs());
        }
    }

    #[test]
    fn every_client_certificate_spelling_is_read() {
        let ca = fixture("ca.pem");
        let (key, certificate) = client_key_and_certificate();
        let dir = tempfile::tempdir().expect("tempdir");
        let key_path = dir.path().join("alice.key");
        let certificate_path = dir.path().join("alice.crt");
        std::fs::write(&key_path, &key).expect("key");
        std::fs::write(&certificate_path, &certificate).expect("certificate");
        let (key_path, certificate_path) = (
            key_path.to_string_lossy().into_owned(),
            certificate_path.to_string_lossy().into_owned(),
        );
        let keystore = fixture("client.pem");
        for (pairs, expected) in [
            (
                vec![
                    ("ssl.keystore.location", keystore.as_str()),
                    ("ssl.keystore.type", "PEM"),
                ],
                "ssl.keystore.location",
            ),
            (
                vec![
                    ("ssl.keystore.certificate.chain", certificate.as_str()),
                    ("ssl.keystore.key", key.as_str()),
                ],
                "ssl.keystore.certificate.chain and ssl.keystore.key",
            ),
            (
                vec![
                    ("ssl.certificate.location", certificate_path.as_str()),
                    ("ssl.key.location", key_path.as_str()),
                ],
                "ssl.certificate.location and ssl.key.location",
            ),
            (
                vec![
                    ("ssl.certificate.pem", certificate.as_str()),
                    ("ssl.key.pem", key.as_str()),
                ],
                "ssl.certificate.pem and ssl.key.pem",
            ),
        ] {
            let mut pairs = pairs;
            pairs.push(("ssl.truststore.location", ca.as_str()));
            let settings = tls_settings(&pairs);
            assert_eq!(settings.keystore_key, Some(expected));
            assert!(settings.config.client_auth_cert_resolver.has_certs());
        }
    }

    #[test]
    fn endpoint_identification_is_https_by_default_and_off_when_empty() {
        let ca = fixture("ca.pem");
        let verify = |value: Option<&str>| {
            let mut pairs = vec![("ssl.truststore.location", ca.as_str())];
            if let Some(value) = value {
                pairs.push(("ssl.endpoint.identification.algorithm", value));
            }
            tls(&pairs).map(|settings| settings.expect("tls").verify_hostname)
        };
        assert!(verify(None).expect("default"));
        assert!(verify(Some("https")).expect("https"));
        assert!(verify(Some("HTTPS")).expect("any case"));
        assert!(!verify(Some("")).expect("Java's empty"));
        assert!(!verify(Some("none")).expect("librdkafka's none"));
        let (key, reason) = config_reason(verify(Some("ldaps")));
        assert_eq!(key, "ssl.endpoint.identification.algorithm");
        assert!(reason.contains("\"ldaps\" is not served"), "{reason}");
    }

    #[test]
    fn what_the_sdk_cannot_honour_is_refused_naming_the_key() {
        let ca = fixture("ca.pem");
        let keystore = fixture("client.pem");
        let (key_pem, certificate_pem) = client_key_and_certificate();
        // (the settings besides a truststore, the key refused, words of the reason)
        type Case<'a> = (Vec<(&'a str, &'a str)>, &'a str, &'a str);
        let cases: Vec<Case> = vec![
            (
                vec![("ssl.truststore.type", "JKS")],
                "ssl.truststore.type",
                "JKS truststores are not read",
            ),
            (
                vec![("ssl.keystore.type", "PKCS12")],
                "ssl.keystore.type",
                "PKCS12 keystores are not read",
            ),
            (
                vec![("ssl.truststore.password", "changeit")],
                "ssl.truststore.password",
                "a PEM store has no password",
            ),
            (
                vec![("ssl.keystore.password", "changeit")],
                "ssl.keystore.password",
                "a PEM store has no password",
            ),
            (
                vec![("ssl.key.password", "secret")],
                "ssl.key.password",
                "is set but no client certificate is",
            ),
            (
                vec![("ssl.cipher.suites", "TLS_AES_128_GCM_SHA256")],
                "ssl.cipher.suites",
                "naming cipher suites is not supported",
            ),
            (
                vec![("ssl.enabled.protocols", "TLSv1.3")],
                "ssl.enabled.protocols",
                "cannot leave either out",
            ),
            (
                vec![("ssl.enabled.protocols", "TLSv1.2,SSLv3")],
                "ssl.enabled.protocols",
                "\"SSLv3\" is not a TLS protocol",
            ),
            (
                vec![("ssl.protocol", "SSLv3")],
                "ssl.protocol",
                "expected TLSv1.2, TLSv1.3 or TLS",
            ),
            (
                vec![("ssl.truststore.certificates", "x")],
                "ssl.truststore.location",
                "set one truststore, not ssl.truststore.location and ssl.truststore.certificates",
            ),
            (
                vec![
                    ("ssl.keystore.location", keystore.as_str()),
                    ("ssl.certificate.pem", certificate_pem.as_str()),
                    ("ssl.key.pem", key_pem.as_str()),
                ],
                "ssl.keystore.location",
                "set one client certificate",
            ),
            (
                vec![("ssl.keystore.certificate.chain", certificate_pem.as_str())],
                "ssl.keystore.key",
                "is required with ssl.keystore.certificate.chain",
            ),
            (
                vec![("ssl.key.location", keystore.as_str())],
                "ssl.certificate.location",
                "is required with ssl.key.location",
            ),
            (
                vec![
                    ("ssl.certificate.location", "/nonexistent/alice.crt"),
                    ("ssl.key.location", keystore.as_str()),
                ],
                "ssl.certificate.location",
                "cannot read /nonexistent/alice.crt",
            ),
        ];
        for (extra, key, words) in cases {
            let mut pairs = vec![("ssl.truststore.location", ca.as_str())];
            pairs.extend_from_slice(&extra);
            let (refused_key, reason) = config_reason(tls(&pairs));
            assert_eq!(refused_key, key, "{extra:?}: {reason}");
            assert!(reason.contains(words), "{extra:?}: {reason}");
        }
        // librdkafka's "probe" of the system's CAs: Sluice bundles none.
        let (key, reason) = config_reason(tls(&[("ssl.ca.location", "probe")]));
        assert_eq!(key, "ssl.ca.location");
        assert!(reason.contains("bundles and probes no"), "{reason}");
        // Java's default store type is JKS: a file that is not PEM says how to convert it.
        let dir = tempfile::tempdir().expect("tempdir");
        let jks = dir.path().join("truststore.jks");
        std::fs::write(&jks, [0xfe, 0xed, 0xfe, 0xed, 0, 0, 0, 2]).expect("write");
        let (key, reason) = config_reason(tls(&[(
            "ssl.truststore.location",
            jks.to_str().expect("path"),
        )]));
        assert_eq!(key, "ssl.truststore.location");
        assert!(
            reason.contains("holds no certificate")
                && reason.contains("Java's clients default to JKS"),
            "{reason}"
        );
    }

    #[test]
    fn a_store_that_cannot_be_loaded_is_refused_naming_the_key_the_user_set() {
        let ca = fixture("ca.pem");
        let (key_pem, certificate_pem) = client_key_and_certificate();
        // A keystore without a key (the CA's certificate alone): its key, not the truststore.
        let (key, reason) = config_reason(tls(&[
            ("ssl.truststore.location", ca.as_str()),
            ("ssl.keystore.location", ca.as_str()),
        ]));
        assert_eq!(key, "ssl.keystore.location");
        assert!(reason.contains("holds no private key"), "{reason}");
        // librdkafka's two files, the key file holding only a certificate: said by its key.
        let dir = tempfile::tempdir().expect("tempdir");
        let certificate = dir.path().join("alice.crt");
        std::fs::write(&certificate, &certificate_pem).expect("write");
        let certificate = certificate.to_string_lossy().into_owned();
        let (key, reason) = config_reason(tls(&[
            ("ssl.ca.location", ca.as_str()),
            ("ssl.certificate.location", certificate.as_str()),
            ("ssl.key.location", certificate.as_str()),
        ]));
        assert_eq!(key, "ssl.certificate.location and ssl.key.location");
        assert!(
            reason.contains("the ssl.key.location holds no private key")
                && !reason.contains("ssl.keystore"),
            "{reason}"
        );
        // A truststore without a certificate (a key alone).
        let (key, reason) = config_reason(tls(&[("ssl.ca.pem", key_pem.as_str())]));
        assert_eq!(key, "ssl.ca.pem");
        assert!(
            reason.contains("the ssl.ca.pem holds no certificate"),
            "{reason}"
        );
        let (key, reason) =
            config_reason(tls(&[("ssl.truststore.location", "/nonexistent/ca.pem")]));
        assert_eq!(key, "ssl.truststore.location");
        assert!(reason.contains("/nonexistent/ca.pem"), "{reason}");
    }

    #[test]
    fn pem_on_one_line_is_put_back_on_lines() {
        let ca = read("ca.pem");
        let joined = ca.split_whitespace().collect::<Vec<_>>().join(" ");
        let lines = pem_lines(&joined);
        use rustls::pki_types::pem::PemObject;
        let certificates = |text: &str| {
            rustls::pki_types::CertificateDer::pem_slice_iter(text.as_bytes())
                .collect::<std::result::Result<Vec<_>, _>>()
                .expect("PEM")
        };
        assert_eq!(certificates(&lines), certificates(&ca));
        assert!(lines.lines().all(|line| line.len() <= 64), "{lines}");
        // Text with line breaks, or no PEM block, is left as it is.
        assert_eq!(pem_lines(&ca), ca);
        assert_eq!(pem_lines("not pem"), "not pem");
    }

    #[test]
    fn properties_lines_ending_in_a_backslash_go_on_as_in_java() {
        let ca = read("ca.pem");
        // Kafka's docs' layout: the PEM value over several lines, each but the last ending
        // in a backslash, the next indented.
        let continued = ca.trim_end().lines().collect::<Vec<_>>().join(" \\\n    ");
        let text = format!(
            "security.protocol=SSL\nssl.truststore.certificates={continued}\n# done \\\nclient.id=c\\\\\n"
        );
        let config = ClientConfig::from_properties(&text).expect("properties");
        assert_eq!(config.get("client.id"), Some("c\\\\"));
        assert!(
            config.get("ssl.truststore.certificates").is_some_and(
                |pem| !pem.contains('\n') && pem.ends_with("-----END CERTIFICATE-----")
            )
        );
        let common =
            CommonConfig::from_config(&config.set("bootstrap.servers", "a:1")).expect("config");
        assert_eq!(
            common.tls.expect("tls").truststore_key,
            "ssl.truststore.certificates"
        );
    }

    #[test]
    fn oauthbearer_takes_one_token_source_of_kafka_or_librdkafka() {
        let bearer = |pairs: &[(&str, &str)]| {
            let mut all = vec![
                ("security.protocol", "SASL_PLAINTEXT"),
                ("sasl.mechanism", "OAUTHBEARER"),
            ];
            all.extend_from_slice(pairs);
            sasl(&all)
        };
        // Kafka's unsecured login.
        let settings = bearer(&[(
            "sasl.jaas.config",
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \
             unsecuredLoginStringClaim_sub=\"alice\";",
        )])
        .expect("valid")
        .expect("sasl");
        assert_eq!(settings.mechanism, Mechanism::OAuthBearer);
        assert_eq!(settings.username, "alice");
        assert!(matches!(
            settings.bearer(),
            Some(BearerSource::Unsecured(_))
        ));
        let mut client = settings.client().expect("a client");
        let first = String::from_utf8(client.first_message()).unwrap();
        assert!(
            first.starts_with("n,,\x01auth=Bearer eyJhbGciOiJub25lIn0."),
            "{first:?}"
        );
        // librdkafka's, which needs its switch.
        let settings = bearer(&[
            ("sasl.oauthbearer.config", "principal=bob"),
            ("enable.sasl.oauthbearer.unsecure.jwt", "true"),
        ])
        .expect("valid")
        .expect("sasl");
        assert_eq!(settings.username, "bob");
        let (key, reason) = config_reason(bearer(&[("sasl.oauthbearer.config", "principal=bob")]));
        assert_eq!(key, "sasl.oauthbearer.config");
        assert!(
            reason.contains("enable.sasl.oauthbearer.unsecure.jwt=true"),
            "{reason}"
        );
        // Kafka's token file, read per connection.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJjIn0.c2ln\n").unwrap();
        let url = format!("file://{}", path.display());
        let settings = bearer(&[
            ("sasl.oauthbearer.token.endpoint.url", &url),
            (
                "sasl.login.callback.handler.class",
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
            ),
            (
                "sasl.jaas.config",
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \
                 clientId=\"ignored\";",
            ),
        ])
        .expect("valid")
        .expect("sasl");
        assert_eq!(settings.bearer(), Some(&BearerSource::File(path.clone())));
        std::fs::write(&path, "rotated.token.sig").unwrap();
        let first = settings.client().expect("client").first_message();
        assert_eq!(first, b"n,,\x01auth=Bearer rotated.token.sig\x01\x01");

        for (pairs, needle_key, needle) in [
            (vec![], "sasl.mechanism", "OAUTHBEARER needs a token"),
            (
                vec![("sasl.oauthbearer.token.endpoint.url", "https://idp/token")],
                "sasl.oauthbearer.token.endpoint.url",
                "no HTTP client",
            ),
            (
                vec![(
                    "sasl.oauthbearer.token.endpoint.url",
                    "file:///no/such/token",
                )],
                "sasl.oauthbearer.token.endpoint.url",
                "No such file",
            ),
            (
                vec![("sasl.oauthbearer.client.id", "svc")],
                "sasl.oauthbearer.client.id",
                "not served",
            ),
            (
                vec![("sasl.oauthbearer.method", "oidc")],
                "sasl.oauthbearer.method",
                "no HTTP client",
            ),
            (
                vec![
                    ("sasl.oauthbearer.token.endpoint.url", url.as_str()),
                    ("sasl.oauthbearer.config", "principal=bob"),
                    ("enable.sasl.oauthbearer.unsecure.jwt", "true"),
                ],
                "sasl.oauthbearer.config",
                "set one token source",
            ),
            (
                vec![(
                    "sasl.jaas.config",
                    "org.apache.kafka.common.security.plain.PlainLoginModule required \
                     username=\"a\" password=\"b\";",
                )],
                "sasl.jaas.config",
                "not OAUTHBEARER's",
            ),
            (
                vec![("sasl.login.callback.handler.class", "com.example.Handler")],
                "sasl.login.callback.handler.class",
                "without sasl.oauthbearer.token.endpoint.url",
            ),
        ] {
            let (key, reason) = config_reason(bearer(&pairs));
            assert_eq!(key, needle_key, "{reason}");
            assert!(reason.contains(needle), "{needle}: {reason}");
        }
        // OAUTHBEARER's keys with another mechanism would do nothing.
        let (key, reason) = config_reason(sasl(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "a"),
            ("sasl.password", "b"),
            ("sasl.oauthbearer.config", "principal=a"),
        ]));
        assert_eq!(key, "sasl.oauthbearer.config");
        assert!(reason.contains("sasl.mechanism is PLAIN"), "{reason}");
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
        assert_eq!(settings.password(), Some("alice-secret"));

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
            (settings.username.as_str(), settings.password()),
            ("bob", Some("bob-secret"))
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
        assert_eq!(settings.password(), Some("c='3"));
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
        // Private keys given as PEM text, Java's and librdkafka's.
        let (key, certificate) = client_key_and_certificate();
        let ca = read("ca.pem");
        let config = ClientConfig::new("a:1")
            .set("security.protocol", "SSL")
            .set("ssl.truststore.certificates", ca.as_str())
            .set("ssl.keystore.certificate.chain", certificate.as_str())
            .set("ssl.keystore.key", key.as_str())
            .set("ssl.key.pem", key.as_str());
        let shown = format!("{config:?}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
        assert!(shown.contains("BEGIN CERTIFICATE"), "{shown}");
        let config = config.set("ssl.key.pem", "");
        let common = CommonConfig::from_config(&config).expect("config");
        let shown = format!("{common:?}");
        assert!(
            !shown.contains("PRIVATE") && shown.contains("ssl.keystore.certificate.chain"),
            "{shown}"
        );
    }
}
