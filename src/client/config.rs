//! Client configuration with Kafka's client config names (`bootstrap.servers`, `acks`,
//! `linger.ms`, ...): a map of strings, as in every Kafka client, read into typed settings when
//! a producer, consumer or admin client is built. Invalid values are refused naming the key;
//! keys the client does not know are logged once and otherwise ignored, as Java does.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use super::error::{Error, Result};

/// Kafka client settings by name.
///
/// ```
/// use sluice::client::ClientConfig;
/// let config = ClientConfig::new("127.0.0.1:9092")
///     .set("acks", "all")
///     .set("linger.ms", "5");
/// assert_eq!(config.get("linger.ms"), Some("5"));
/// ```
#[derive(Debug, Clone, Default)]
pub struct ClientConfig {
    values: BTreeMap<String, String>,
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
}

impl CommonConfig {
    pub fn from_config(config: &ClientConfig) -> Result<Self> {
        Ok(CommonConfig {
            bootstrap_servers: config.bootstrap_servers()?,
            client_id: config.get("client.id").unwrap_or("sluice").to_owned(),
            request_timeout: config.millis("request.timeout.ms", 30_000, 1, 3_600_000)?,
            connect_timeout: config.millis(
                "socket.connection.setup.timeout.ms",
                10_000,
                1,
                3_600_000,
            )?,
        })
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
}
