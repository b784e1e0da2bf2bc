//! The security side of the listeners, as Kafka configures it: each listener's security
//! protocol (`listener.security.protocol.map`), the SASL mechanisms it enables
//! (`sasl.enabled.mechanisms`, or `listener.name.<listener>.sasl.enabled.mechanisms`) and the
//! server side of each mechanism (`listener.name.<listener>.<mechanism>.sasl.jaas.config`: for
//! PLAIN, its `user_<name>="<password>"` entries), and which listener brokers use between
//! themselves (`inter.broker.listener.name`).
//!
//! TLS listeners (SSL, SASL_SSL) take Kafka's `ssl.*` keys, per listener
//! (`listener.name.<listener>.ssl.*`) or for all; `config::tls` holds what they say.
//!
//! OAUTHBEARER listeners take Kafka's validator settings; `config::oauthbearer` reads them.
//!
//! What Sluice does not serve stops the node here, never a listener that says more than it
//! does: JKS/PKCS12 stores, encrypted keys, GSSAPI, settings that would have no effect on the
//! listener they name.
//!
//! Brokers connect to each other's inter-broker listener as its clients: TLS with the
//! listener's stores, SASL with the broker's own login (`InterBrokerLogin`).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Listener;
use super::registry::ConfigError;
use super::tls::{ClientAuth, KeyStore, KeyStorePem, PemSource, TlsSettings, TlsVersion};
use crate::security::acl::AuthorizerConfig;
use crate::security::oauth::BearerValidator;
use crate::security::sasl::{self, Mechanism};

/// Kafka's security protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    pub fn from_name(name: &str) -> Option<SecurityProtocol> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name.trim()))
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

/// What one listener asks of its clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSecurity {
    pub protocol: SecurityProtocol,
    /// The SASL mechanisms enabled (SASL listeners only), in the configured order.
    pub mechanisms: Vec<Mechanism>,
    /// PLAIN's users and passwords, from the listener's PLAIN JAAS config.
    pub plain_users: BTreeMap<String, String>,
    /// SSL and SASL_SSL listeners: the TLS settings.
    pub tls: Option<TlsSettings>,
    /// `connections.max.reauth.ms` (SASL listeners; 0: sessions never expire).
    pub connections_max_reauth_ms: u64,
    /// OAUTHBEARER's validator, when the listener enables it (shared by its connections).
    pub oauthbearer: Option<Arc<BearerValidator>>,
}

impl ListenerSecurity {
    pub fn plaintext() -> ListenerSecurity {
        ListenerSecurity {
            protocol: SecurityProtocol::Plaintext,
            mechanisms: Vec::new(),
            plain_users: BTreeMap::new(),
            tls: None,
            connections_max_reauth_ms: 0,
            oauthbearer: None,
        }
    }
}

/// The listeners' security, by listener name (the controller's excluded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityConfig {
    pub listeners: BTreeMap<String, ListenerSecurity>,
    /// `inter.broker.listener.name`: followers fetch and brokers call each other on it.
    pub inter_broker_listener: String,
    /// How this broker connects to that listener of the others, as their client (brokers).
    pub inter_broker_login: Option<InterBrokerLogin>,
    /// The quorum listener's TLS (`CONTROLLER:SSL`, client certificates required); `None`:
    /// PLAINTEXT.
    pub controller_tls: Option<TlsSettings>,
    /// `sasl.server.max.receive.size`: the largest frame read before a client authenticated.
    pub sasl_server_max_receive_size: usize,
    /// `authorizer.class.name` (Kafka's StandardAuthorizer) with `super.users` and
    /// `allow.everyone.if.no.acl.found`; `None`: no authorizer, everything allowed.
    pub authorizer: Option<AuthorizerConfig>,
}

impl SecurityConfig {
    /// The security of listener `name` (PLAINTEXT when unknown: the controller's).
    pub fn listener(&self, name: &str) -> ListenerSecurity {
        self.listeners
            .get(name)
            .cloned()
            .unwrap_or_else(ListenerSecurity::plaintext)
    }
}

/// Whether `key` is a per-listener key Sluice serves: `listener.name.<l>.sasl.enabled.mechanisms`,
/// `listener.name.<l>.<mechanism>.sasl.jaas.config`, the listener's TLS keys and its
/// OAUTHBEARER validator settings (`config::oauthbearer`).
pub fn is_served_listener_key(key: &str) -> bool {
    let Some(rest) = key.strip_prefix("listener.name.") else {
        return false;
    };
    let Some((_, setting)) = rest.split_once('.') else {
        return false;
    };
    if setting == "sasl.enabled.mechanisms"
        || setting == "connections.max.reauth.ms"
        || setting == "max.connection.creation.rate"
        || TLS_KEYS.contains(&setting)
        || super::oauthbearer::is_served_listener_setting(setting)
    {
        return true;
    }
    setting
        .strip_suffix(".sasl.jaas.config")
        .and_then(|mechanism| Mechanism::from_name(&mechanism.to_ascii_uppercase()))
        .is_some()
}

/// Reads each client listener's security protocol, mechanisms and users, and the inter-broker
/// listener; refuses what Sluice does not serve.
pub fn parse(
    properties: &BTreeMap<String, String>,
    listeners: &[Listener],
    controller_listener_name: &str,
    broker: bool,
) -> Result<SecurityConfig, ConfigError> {
    let protocols = protocol_map(properties, listeners, controller_listener_name)?;
    let controller_tls = match protocols.get(controller_listener_name) {
        None | Some(SecurityProtocol::Plaintext) => None,
        Some(SecurityProtocol::Ssl) => Some(controller_tls(properties, controller_listener_name)?),
        Some(other) => {
            return Err(ConfigError::new(
                "listener.security.protocol.map",
                properties
                    .get("listener.security.protocol.map")
                    .map_or("", String::as_str),
                format!(
                    "the quorum's listener {controller_listener_name} is {}: it serves \
                     PLAINTEXT (a trusted network) or SSL with client certificates (every \
                     member, broker and CLI proves itself with a certificate); SASL is not \
                     served there",
                    other.name()
                ),
            ));
        }
    };
    let mut secured = BTreeMap::new();
    for listener in listeners
        .iter()
        .filter(|l| l.name != controller_listener_name)
    {
        let protocol = protocols[&listener.name];
        let mut security = if protocol.is_sasl() {
            sasl_listener(properties, &listener.name)?
        } else {
            ListenerSecurity::plaintext()
        };
        security.protocol = protocol;
        if protocol.is_tls() {
            security.tls = Some(tls_listener(properties, &listener.name)?);
        }
        secured.insert(listener.name.clone(), security);
    }
    // TLS settings on a node without a TLS listener would have no effect.
    if !secured.values().any(|s| s.protocol.is_tls())
        && controller_tls.is_none()
        && let Some(key) = TLS_KEYS.iter().find(|k| properties.contains_key(**k))
    {
        return Err(ConfigError::new(
            key,
            "(hidden)",
            "no listener of this node is SSL or SASL_SSL, so this setting would have no \
             effect: map a listener to SSL or SASL_SSL in listener.security.protocol.map, or \
             remove the key",
        ));
    }
    super::oauthbearer::check_keys_apply(properties, &secured)?;
    // SASL or TLS settings of a listener that does not use them would have no effect:
    // refused, so that nobody believes such a listener authenticates or encrypts.
    for key in properties.keys().filter(|k| is_served_listener_key(k)) {
        let (listener, setting) = key["listener.name.".len()..]
            .split_once('.')
            .unwrap_or_default();
        let listener = listener.to_ascii_uppercase();
        let protocol = secured
            .get(&listener)
            .map(|s: &ListenerSecurity| s.protocol)
            .or_else(|| {
                (listener == controller_listener_name && controller_tls.is_some())
                    .then_some(SecurityProtocol::Ssl)
            });
        if setting == "max.connection.creation.rate" {
            if protocol.is_none() {
                return Err(ConfigError::new(
                    key,
                    "",
                    format!("{listener} is not a Kafka listener of this node"),
                ));
            }
            continue;
        }
        if setting.starts_with("ssl.") {
            if !protocol.is_some_and(SecurityProtocol::is_tls) {
                return Err(ConfigError::new(
                    key,
                    "(hidden)",
                    format!(
                        "listener {listener} is not a TLS listener of this node, so this setting \
                         would have no effect: map it to SSL or SASL_SSL in \
                         listener.security.protocol.map, or remove the key"
                    ),
                ));
            }
            continue;
        }
        if !protocol.is_some_and(SecurityProtocol::is_sasl) {
            return Err(ConfigError::new(
                key,
                "(hidden)",
                format!(
                    "listener {listener} is not a SASL listener of this node, so this setting \
                     would have no effect: map it to SASL_PLAINTEXT or SASL_SSL in \
                     listener.security.protocol.map, or remove the key"
                ),
            ));
        }
    }
    let inter_broker_listener = inter_broker_listener(
        properties,
        listeners,
        controller_listener_name,
        &secured,
        broker,
    )?;
    let inter_broker_login = match secured.get(&inter_broker_listener) {
        Some(security) if broker => Some(inter_broker_login(
            properties,
            &inter_broker_listener,
            security,
        )?),
        _ => None,
    };
    let size_key = "sasl.server.max.receive.size";
    let sasl_server_max_receive_size = match properties.get(size_key) {
        Some(text) => text
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| ConfigError::new(size_key, text, "expected a positive byte count"))?,
        None => 524_288,
    };
    Ok(SecurityConfig {
        listeners: secured,
        inter_broker_listener,
        inter_broker_login,
        controller_tls,
        sasl_server_max_receive_size,
        authorizer: parse_authorizer(properties)?,
    })
}

/// The quorum listener's TLS (`listener.name.<controller>.ssl.*` over `ssl.*`): the listener
/// must require client certificates, since Raft RPCs, brokers' controller calls and the CLI's
/// voter changes all arrive there; members connect to each other with the same keystore and
/// truststore.
fn controller_tls(
    properties: &BTreeMap<String, String>,
    listener: &str,
) -> Result<TlsSettings, ConfigError> {
    let tls = tls_listener(properties, listener)?;
    if tls.client_auth != ClientAuth::Required {
        let key = format!(
            "listener.name.{}.ssl.client.auth",
            listener.to_ascii_lowercase()
        );
        return Err(ConfigError::new(
            &key,
            "",
            format!(
                "the quorum's listener {listener} is SSL and must require client certificates: \
                 set {key}=required (with ssl.truststore.location, the CA of the nodes' and \
                 admins' certificates)"
            ),
        ));
    }
    Ok(tls)
}

/// The listener brokers talk to each other on: `inter.broker.listener.name`, or the listener
/// named after `security.inter.broker.protocol` (Kafka's older key; a listener with that
/// protocol when none is named after it); unset, the first PLAINTEXT listener (Kafka's default
/// protocol), else the first listener. Both keys set must agree.
fn inter_broker_listener(
    properties: &BTreeMap<String, String>,
    listeners: &[Listener],
    controller_listener_name: &str,
    secured: &BTreeMap<String, ListenerSecurity>,
    broker: bool,
) -> Result<String, ConfigError> {
    let key = "inter.broker.listener.name";
    let protocol_key = "security.inter.broker.protocol";
    let clients = || {
        listeners
            .iter()
            .filter(|l| l.name != controller_listener_name)
    };
    let by_protocol = match properties.get(protocol_key) {
        None => None,
        Some(text) => Some(SecurityProtocol::from_name(text).ok_or_else(|| {
            ConfigError::new(
                protocol_key,
                text,
                format!(
                    "not a security protocol (Kafka's are {})",
                    SecurityProtocol::ALL.map(SecurityProtocol::name).join(", ")
                ),
            )
        })?),
    };
    let name = match properties.get(key) {
        Some(name) => {
            let name = name.trim().to_ascii_uppercase();
            if broker && !secured.contains_key(&name) {
                return Err(ConfigError::new(
                    key,
                    &name,
                    format!(
                        "not a Kafka listener of this broker (they are {})",
                        secured.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            name
        }
        None => match by_protocol {
            Some(protocol) => {
                let named = clients().find(|l| l.name == protocol.name());
                let found = named.or_else(|| {
                    clients().find(|l| secured.get(&l.name).map(|s| s.protocol) == Some(protocol))
                });
                match found {
                    Some(listener) => listener.name.clone(),
                    None if !broker => String::new(),
                    None => {
                        return Err(ConfigError::new(
                            protocol_key,
                            protocol.name(),
                            format!(
                                "no listener of this broker is {}: add one to listeners, or \
                                 name the inter-broker listener in {key}",
                                protocol.name()
                            ),
                        ));
                    }
                }
            }
            None => clients()
                .find(|l| {
                    secured.get(&l.name).map(|s| s.protocol) == Some(SecurityProtocol::Plaintext)
                })
                .or_else(|| clients().next())
                .map_or_else(String::new, |l| l.name.clone()),
        },
    };
    if broker
        && let Some(protocol) = by_protocol
        && let Some(security) = secured.get(&name)
        && security.protocol != protocol
    {
        return Err(ConfigError::new(
            protocol_key,
            protocol.name(),
            format!(
                "the inter-broker listener {name} ({key}) is {}: remove {protocol_key} (Kafka \
                 refuses both keys set)",
                security.protocol.name()
            ),
        ));
    }
    Ok(name)
}

/// How this broker logs in to the other brokers' inter-broker listener, as their client: the
/// listener's name and the Kafka client keys that say how (`security.protocol`, `ssl.*`,
/// `sasl.*`), which the broker's connections are opened with (`crate::inter_broker`).
#[derive(Clone, PartialEq, Eq)]
pub struct InterBrokerLogin {
    pub listener_name: String,
    client_properties: BTreeMap<String, String>,
}

impl InterBrokerLogin {
    /// The client keys (a password among them).
    pub fn client_properties(&self) -> &BTreeMap<String, String> {
        &self.client_properties
    }
}

// The password and keys stay out of logs: only which keys are set is shown.
impl std::fmt::Debug for InterBrokerLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterBrokerLogin")
            .field("listener_name", &self.listener_name)
            .field("keys", &self.client_properties.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The client side of the inter-broker listener, as Kafka's brokers derive it: TLS with the
/// listener's own truststore (to verify the other brokers) and keystore (presented when they
/// ask), `ssl.endpoint.identification.algorithm` (Kafka's default https: the certificate must
/// name the host advertised); SASL with `sasl.mechanism.inter.broker.protocol` (default: the
/// listener's one mechanism, when it enables one; Kafka's GSSAPI otherwise, refused) and the
/// `username` and `password` of the listener's JAAS config for that mechanism.
fn inter_broker_login(
    properties: &BTreeMap<String, String>,
    listener: &str,
    security: &ListenerSecurity,
) -> Result<InterBrokerLogin, ConfigError> {
    let prefix = format!("listener.name.{}.", listener.to_ascii_lowercase());
    let mut client = BTreeMap::new();
    client.insert(
        "security.protocol".to_owned(),
        security.protocol.name().to_owned(),
    );
    if let Some(tls) = &security.tls {
        match &tls.keystore.pem {
            KeyStorePem::File(path) => {
                client.insert(
                    "ssl.keystore.location".to_owned(),
                    path.display().to_string(),
                );
            }
            KeyStorePem::Inline {
                certificate_chain,
                key,
            } => {
                client.insert(
                    "ssl.keystore.certificate.chain".to_owned(),
                    certificate_chain.clone(),
                );
                client.insert("ssl.keystore.key".to_owned(), key.clone());
            }
        }
        if let Some(password) = &tls.keystore.key_password {
            client.insert("ssl.key.password".to_owned(), password.clone());
        }
        match &tls.truststore {
            Some(PemSource::File(path)) => {
                client.insert(
                    "ssl.truststore.location".to_owned(),
                    path.display().to_string(),
                );
            }
            Some(PemSource::Inline(pem)) => {
                client.insert("ssl.truststore.certificates".to_owned(), pem.clone());
            }
            None => {
                return Err(ConfigError::new(
                    "inter.broker.listener.name",
                    listener,
                    format!(
                        "brokers connect to each other on {listener} over TLS and check the \
                         other brokers' certificates against its truststore, which is unset: \
                         set {prefix}ssl.truststore.location (the CA that signed the brokers' \
                         certificates)"
                    ),
                ));
            }
        }
        let algorithm = "ssl.endpoint.identification.algorithm";
        if let Some(value) = properties
            .get(&format!("{prefix}{algorithm}"))
            .or_else(|| properties.get(algorithm))
        {
            client.insert(algorithm.to_owned(), value.trim().to_owned());
        }
    }
    if security.protocol.is_sasl() {
        let key = "sasl.mechanism.inter.broker.protocol";
        let mechanism = match properties.get(key) {
            Some(name) => {
                let name = name.trim();
                Mechanism::from_name(&name.to_ascii_uppercase())
                    .filter(|m| security.mechanisms.contains(m))
                    .ok_or_else(|| {
                        ConfigError::new(
                            key,
                            name,
                            format!(
                                "not a mechanism the inter-broker listener {listener} enables \
                                 ({})",
                                mechanism_names(&security.mechanisms)
                            ),
                        )
                    })?
            }
            None => match security.mechanisms.as_slice() {
                [only] => *only,
                _ => {
                    return Err(ConfigError::new(
                        key,
                        "",
                        format!(
                            "the inter-broker listener {listener} enables {}: name the one \
                             brokers log in to each other with (Kafka's default, GSSAPI, is \
                             not served)",
                            mechanism_names(&security.mechanisms)
                        ),
                    ));
                }
            },
        };
        let jaas_key = format!(
            "{prefix}{}.sasl.jaas.config",
            mechanism.name().to_ascii_lowercase()
        );
        if mechanism == Mechanism::OAuthBearer {
            // The broker's own token is Kafka's unsecured login of the listener's JAAS config
            // (unsecuredLoginStringClaim_sub), which the client side builds and checks.
            let jaas = properties.get(&jaas_key).ok_or_else(|| {
                ConfigError::new(
                    &jaas_key,
                    "",
                    format!(
                        "brokers log in to each other on {listener} with OAUTHBEARER: set the \
                         broker's own unsecured login there \
                         (unsecuredLoginStringClaim_sub=\"admin\")"
                    ),
                )
            })?;
            client.insert("sasl.mechanism".to_owned(), mechanism.name().to_owned());
            client.insert("sasl.jaas.config".to_owned(), jaas.clone());
            return Ok(InterBrokerLogin {
                listener_name: listener.to_owned(),
                client_properties: client,
            });
        }
        let example = match mechanism {
            Mechanism::Plain => "org.apache.kafka.common.security.plain.PlainLoginModule",
            _ => "org.apache.kafka.common.security.scram.ScramLoginModule",
        };
        let missing = || {
            ConfigError::new(
                &jaas_key,
                "(hidden)",
                format!(
                    "brokers log in to each other on {listener} with {mechanism}: set the \
                     broker's own username and password there ({example} required \
                     username=\"admin\" password=\"...\";), or in the JAAS file of \
                     java.security.auth.login.config"
                ),
            )
        };
        let parsed = match properties.get(&jaas_key) {
            Some(jaas) => sasl::parse_jaas(jaas)
                .map_err(|error| ConfigError::new(&jaas_key, "(hidden)", error.to_string()))?,
            None => {
                let module = example.rsplit('.').next().unwrap_or(example);
                jaas_file_entry(properties, listener, module)?
                    .ok_or_else(missing)?
                    .1
            }
        };
        let (Some(username), Some(password)) = (parsed.username(), parsed.password()) else {
            return Err(missing());
        };
        client.insert("sasl.mechanism".to_owned(), mechanism.name().to_owned());
        client.insert("sasl.username".to_owned(), username.to_owned());
        client.insert("sasl.password".to_owned(), password.to_owned());
    }
    Ok(InterBrokerLogin {
        listener_name: listener.to_owned(),
        client_properties: client,
    })
}

fn mechanism_names(mechanisms: &[Mechanism]) -> String {
    mechanisms
        .iter()
        .map(|m| m.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Kafka's KRaft authorizer, whose ACLs live in the metadata quorum.
pub const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";

/// `authorizer.class.name`: empty (Kafka's default, no authorizer) or Kafka's
/// StandardAuthorizer, whose ACLs Sluice keeps in its quorum; any other class is Java code
/// Sluice cannot run, refused. `super.users` and `allow.everyone.if.no.acl.found` only mean
/// something with an authorizer: set without one, they are refused rather than ignored.
fn parse_authorizer(
    properties: &BTreeMap<String, String>,
) -> Result<Option<AuthorizerConfig>, ConfigError> {
    let class = properties
        .get("authorizer.class.name")
        .map_or("", |class| class.trim());
    let super_users = properties.get("super.users");
    let allow_everyone = properties.get("allow.everyone.if.no.acl.found");
    if class.is_empty() {
        for (key, value) in [
            ("super.users", super_users),
            ("allow.everyone.if.no.acl.found", allow_everyone),
        ] {
            if let Some(value) = value {
                return Err(ConfigError::new(
                    key,
                    value,
                    format!(
                        "{key} needs an authorizer: set authorizer.class.name={STANDARD_AUTHORIZER}"
                    ),
                ));
            }
        }
        return Ok(None);
    }
    if class != STANDARD_AUTHORIZER && class != "StandardAuthorizer" {
        return Err(ConfigError::new(
            "authorizer.class.name",
            class,
            format!(
                "only Kafka's KRaft authorizer is served ({STANDARD_AUTHORIZER}): its ACLs are \
                 kept in the metadata quorum"
            ),
        ));
    }
    let super_users = match super_users {
        Some(value) => AuthorizerConfig::parse_super_users(value)
            .map_err(|error| ConfigError::new("super.users", value, error.to_string()))?,
        None => Default::default(),
    };
    let allow_everyone_if_no_acl_found = match allow_everyone.map(|v| v.trim()) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ConfigError::new(
                "allow.everyone.if.no.acl.found",
                other,
                "expected true or false",
            ));
        }
    };
    Ok(Some(AuthorizerConfig {
        super_users,
        allow_everyone_if_no_acl_found,
    }))
}

/// Every listener's protocol, from `listener.security.protocol.map` as Kafka reads it (when the
/// map is not set, the controller listener is PLAINTEXT and a listener named after a protocol
/// uses it).
fn protocol_map(
    properties: &BTreeMap<String, String>,
    listeners: &[Listener],
    controller_listener_name: &str,
) -> Result<BTreeMap<String, SecurityProtocol>, ConfigError> {
    let key = "listener.security.protocol.map";
    let explicit = properties.get(key).map(String::as_str);
    let text =
        explicit.unwrap_or_else(|| super::registry::broker_key(key).map_or("", |k| k.default));
    let mut map = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, protocol) = entry.split_once(':').ok_or_else(|| {
            ConfigError::new(key, text, format!("'{entry}' is not NAME:PROTOCOL"))
        })?;
        let protocol = SecurityProtocol::from_name(protocol).ok_or_else(|| {
            ConfigError::new(
                key,
                text,
                format!(
                    "'{}' is not a security protocol (Kafka's are {})",
                    protocol.trim(),
                    SecurityProtocol::ALL.map(SecurityProtocol::name).join(", ")
                ),
            )
        })?;
        map.insert(name.trim().to_ascii_uppercase(), protocol);
    }
    if explicit.is_none() {
        map.entry(controller_listener_name.to_owned())
            .or_insert(SecurityProtocol::Plaintext);
    }
    let listeners_text = properties.get("listeners").map_or("", String::as_str);
    let mut protocols = BTreeMap::new();
    for listener in listeners {
        let protocol = map.get(&listener.name).ok_or_else(|| {
            ConfigError::new(
                "listeners",
                listeners_text,
                format!(
                    "no security protocol for listener {name}: add {name}:PLAINTEXT (or \
                     SASL_PLAINTEXT) to {key}",
                    name = listener.name
                ),
            )
        })?;
        protocols.insert(listener.name.clone(), *protocol);
    }
    Ok(protocols)
}

/// `connections.max.reauth.ms`, the listener's own (`listener.name.<l>.connections.max.reauth.ms`)
/// over the broker's.
fn reauth_ms(properties: &BTreeMap<String, String>, listener: &str) -> Result<u64, ConfigError> {
    let own = format!(
        "listener.name.{}.connections.max.reauth.ms",
        listener.to_ascii_lowercase()
    );
    let (key, value) = match properties.get(&own) {
        Some(value) => (own.as_str(), value),
        None => match properties.get("connections.max.reauth.ms") {
            Some(value) => ("connections.max.reauth.ms", value),
            None => return Ok(0),
        },
    };
    value
        .trim()
        .parse::<u64>()
        .map_err(|_| ConfigError::new(key, value, "expected milliseconds (0: never)"))
}

/// Kafka's JAAS file (`java.security.auth.login.config`, a JVM property in Kafka, a config
/// key here): the entry of login module `module` (its class name's last part, e.g.
/// `PlainLoginModule`) in the listener's section `<listener>.KafkaServer`, or in
/// `KafkaServer` when the file has no section of the listener's own, as Kafka's
/// `JaasContext` finds it. With the key it names, for errors.
fn jaas_file_entry(
    properties: &BTreeMap<String, String>,
    listener: &str,
    module: &str,
) -> Result<Option<(String, sasl::JaasConfig)>, ConfigError> {
    use std::io::Read;
    const KEY: &str = "java.security.auth.login.config";
    let Some(path) = properties
        .get(KEY)
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
    else {
        return Ok(None);
    };
    let refused = |reason: String| ConfigError::new(KEY, path, reason);
    let file = std::fs::File::open(path).map_err(|error| refused(error.to_string()))?;
    let mut text = String::new();
    file.take(sasl::JAAS_FILE_BYTES_MAX as u64 + 1)
        .read_to_string(&mut text)
        .map_err(|error| refused(error.to_string()))?;
    let mut sections = sasl::parse_jaas_file(&text).map_err(|error| refused(error.to_string()))?;
    let own = format!("{}.KafkaServer", listener.to_ascii_lowercase());
    let (section, entries) = match sections.remove(&own) {
        Some(entries) => (own, entries),
        None => match sections.remove("KafkaServer") {
            Some(entries) => ("KafkaServer".to_owned(), entries),
            None => return Ok(None),
        },
    };
    let mut matching = entries
        .into_iter()
        .filter(|entry| entry.login_module.rsplit('.').next() == Some(module));
    match (matching.next(), matching.next()) {
        (Some(entry), None) => Ok(Some((format!("{KEY} (section {section})"), entry))),
        (None, _) => Ok(None),
        (Some(_), Some(_)) => Err(refused(format!(
            "section {section} holds {module} twice: keep one entry"
        ))),
    }
}

/// The TLS keys a listener serves (each also as `listener.name.<listener>.<key>`).
pub const TLS_KEYS: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.truststore.password",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.protocol",
    "ssl.principal.mapping.rules",
    "ssl.cipher.suites",
    "ssl.endpoint.identification.algorithm",
];

/// A TLS listener's settings: `listener.name.<listener>.ssl.*` over `ssl.*`, as Kafka reads
/// them. What Sluice cannot honour is refused: JKS/PKCS12 stores, named cipher suites, a protocol other than TLSv1.2/TLSv1.3.
fn tls_listener(
    properties: &BTreeMap<String, String>,
    listener: &str,
) -> Result<TlsSettings, ConfigError> {
    let prefix = format!("listener.name.{}.", listener.to_ascii_lowercase());
    // (the key as written, its value) for a setting, the listener's own first.
    let get = |setting: &str| -> Option<(String, String)> {
        let own = format!("{prefix}{setting}");
        properties
            .get(&own)
            .map(|v| (own.clone(), v.trim().to_owned()))
            .or_else(|| {
                properties
                    .get(setting)
                    .map(|v| (setting.to_owned(), v.trim().to_owned()))
            })
            .filter(|(_, v)| !v.is_empty())
    };
    for store in ["ssl.keystore.type", "ssl.truststore.type"] {
        if let Some((key, value)) = get(store) {
            if !value.eq_ignore_ascii_case("PEM") {
                return Err(ConfigError::new(
                    &key,
                    &value,
                    "only PEM stores are served: convert with `openssl pkcs12 -in store.p12 \
                     -nodes` (or keytool -importkeystore to PKCS12 first) and set PEM",
                ));
            }
        }
    }
    for secret in ["ssl.keystore.password", "ssl.truststore.password"] {
        if let Some((key, _)) = get(secret) {
            return Err(ConfigError::new(
                &key,
                "(hidden)",
                "a PEM store has no password (Kafka refuses it too): remove the key",
            ));
        }
    }
    if let Some((key, value)) = get("ssl.cipher.suites") {
        return Err(ConfigError::new(
            &key,
            &value,
            "naming cipher suites is not served: rustls offers only its safe suites; remove the key",
        ));
    }
    let keystore = match (
        get("ssl.keystore.location"),
        get("ssl.keystore.certificate.chain"),
        get("ssl.keystore.key"),
    ) {
        (Some((_, path)), None, None) => KeyStore::file(path),
        (None, Some((_, certificate_chain)), Some((_, key))) => {
            KeyStore::inline(certificate_chain, key)
        }
        (None, None, None) => {
            return Err(ConfigError::new(
                "ssl.keystore.location",
                "",
                format!(
                    "listener {listener} is a TLS listener without a certificate: set \
                     {prefix}ssl.keystore.location (a PEM file with the key and the chain) or \
                     ssl.keystore.certificate.chain and ssl.keystore.key"
                ),
            ));
        }
        _ => {
            return Err(ConfigError::new(
                "ssl.keystore.location",
                "(hidden)",
                format!(
                    "listener {listener}: set either ssl.keystore.location or both \
                     ssl.keystore.certificate.chain and ssl.keystore.key"
                ),
            ));
        }
    }
    .with_key_password(get("ssl.key.password").map(|(_, password)| password));
    let truststore = match (
        get("ssl.truststore.location"),
        get("ssl.truststore.certificates"),
    ) {
        (Some((_, path)), None) => Some(PemSource::File(path.into())),
        (None, Some((_, pem))) => Some(PemSource::Inline(pem)),
        (None, None) => None,
        (Some(_), Some(_)) => {
            return Err(ConfigError::new(
                "ssl.truststore.location",
                "(hidden)",
                "set ssl.truststore.location or ssl.truststore.certificates, not both",
            ));
        }
    };
    let client_auth = match get("ssl.client.auth") {
        None => ClientAuth::None,
        Some((key, value)) => match value.to_ascii_lowercase().as_str() {
            "none" => ClientAuth::None,
            "requested" => ClientAuth::Requested,
            "required" => ClientAuth::Required,
            _ => {
                return Err(ConfigError::new(
                    &key,
                    &value,
                    "expected none, requested or required",
                ));
            }
        },
    };
    if client_auth != ClientAuth::None && truststore.is_none() {
        return Err(ConfigError::new(
            "ssl.client.auth",
            "requested/required",
            format!(
                "listener {listener} asks clients for certificates but has no truststore to \
                 check them: set ssl.truststore.location"
            ),
        ));
    }
    let mut protocols = Vec::new();
    let (protocols_key, protocols_text) = get("ssl.enabled.protocols")
        .unwrap_or_else(|| ("ssl.enabled.protocols".into(), "TLSv1.2,TLSv1.3".into()));
    for name in protocols_text
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        let version = match name {
            "TLSv1.2" => TlsVersion::Tls12,
            "TLSv1.3" => TlsVersion::Tls13,
            _ => {
                return Err(ConfigError::new(
                    &protocols_key,
                    &protocols_text,
                    format!("{name} is not served: TLSv1.2 and TLSv1.3 are"),
                ));
            }
        };
        if !protocols.contains(&version) {
            protocols.push(version);
        }
    }
    if protocols.is_empty() {
        return Err(ConfigError::new(
            &protocols_key,
            &protocols_text,
            "no TLS version enabled",
        ));
    }
    if let Some((key, value)) = get("ssl.protocol") {
        if !matches!(value.as_str(), "TLSv1.2" | "TLSv1.3" | "TLS") {
            return Err(ConfigError::new(
                &key,
                &value,
                "expected TLSv1.2, TLSv1.3 or TLS (ssl.enabled.protocols decides what is served)",
            ));
        }
    }
    let principal_mapping_rules =
        get("ssl.principal.mapping.rules").map_or_else(|| "DEFAULT".to_owned(), |(_, rules)| rules);
    Ok(TlsSettings {
        keystore,
        truststore,
        client_auth,
        protocols,
        principal_mapping_rules,
    })
}

/// A SASL listener's mechanisms and the server side of each.
fn sasl_listener(
    properties: &BTreeMap<String, String>,
    listener: &str,
) -> Result<ListenerSecurity, ConfigError> {
    let prefix = format!("listener.name.{}.", listener.to_ascii_lowercase());
    let mechanisms_key = format!("{prefix}sasl.enabled.mechanisms");
    let (key, text) = match properties.get(&mechanisms_key) {
        Some(text) => (mechanisms_key.as_str(), text.as_str()),
        // Kafka's default is GSSAPI, which Sluice does not serve: refused below.
        None => (
            "sasl.enabled.mechanisms",
            properties
                .get("sasl.enabled.mechanisms")
                .map_or("GSSAPI", String::as_str),
        ),
    };
    let mut mechanisms = Vec::new();
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let mechanism = Mechanism::from_name(&name.to_ascii_uppercase()).ok_or_else(|| {
            ConfigError::new(
                key,
                text,
                format!(
                    "SASL mechanism {name} is not implemented (listener {listener}): Sluice \
                     serves PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER"
                ),
            )
        })?;
        if !mechanisms.contains(&mechanism) {
            mechanisms.push(mechanism);
        }
    }
    if mechanisms.is_empty() {
        return Err(ConfigError::new(
            key,
            text,
            format!("listener {listener} is a SASL listener with no mechanism enabled"),
        ));
    }
    let mut plain_users = BTreeMap::new();
    if mechanisms.contains(&Mechanism::Plain) {
        let setting = format!("{prefix}plain.sasl.jaas.config");
        let (jaas_key, parsed) = match properties.get(&setting) {
            Some(jaas) => (
                setting.clone(),
                sasl::parse_jaas(jaas)
                    .map_err(|error| ConfigError::new(&setting, "(hidden)", error.to_string()))?,
            ),
            None => {
                jaas_file_entry(properties, listener, "PlainLoginModule")?.ok_or_else(|| {
                    ConfigError::new(
                        &setting,
                        "",
                        format!(
                            "listener {listener} enables PLAIN and names no users: set \
                             {setting} to org.apache.kafka.common.security.plain.\
                             PlainLoginModule required user_<name>=\"<password>\"; (or give \
                             them in the JAAS file of java.security.auth.login.config)"
                        ),
                    )
                })?
            }
        };
        if !parsed.login_module.ends_with("PlainLoginModule") {
            return Err(ConfigError::new(
                &jaas_key,
                "(hidden)",
                format!(
                    "login module {} is not PLAIN's (org.apache.kafka.common.security.plain.PlainLoginModule)",
                    parsed.login_module
                ),
            ));
        }
        plain_users = parsed.plain_users();
        if plain_users.is_empty() {
            return Err(ConfigError::new(
                &jaas_key,
                "(hidden)",
                "no user_<name>=\"<password>\" entry: no client could log in",
            ));
        }
    }
    let oauthbearer = if mechanisms.contains(&Mechanism::OAuthBearer) {
        let validator = super::oauthbearer::listener_validator(properties, listener)?;
        Some(Arc::new(validator))
    } else {
        None
    };
    Ok(ListenerSecurity {
        protocol: SecurityProtocol::SaslPlaintext,
        mechanisms,
        plain_users,
        tls: None,
        connections_max_reauth_ms: reauth_ms(properties, listener)?,
        oauthbearer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn properties(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn listeners(text: &str) -> Vec<Listener> {
        super::super::parse_listeners("listeners", text).expect("listeners")
    }

    const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
                        user_alice=\"alice-secret\" user_bob=\"bob-secret\";";

    #[test]
    fn plain_users_and_the_brokers_login_come_from_the_jaas_file_when_no_key_gives_them() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kafka_server_jaas.conf");
        std::fs::write(
            &file,
            r#"KafkaServer {
                 org.apache.kafka.common.security.plain.PlainLoginModule required
                 username="admin" password="admin-secret"
                 user_admin="admin-secret" user_alice="alice-secret";
               };
               sasl_ssl.KafkaServer {
                 org.apache.kafka.common.security.plain.PlainLoginModule required
                 user_carol="carol-secret";
               };"#,
        )
        .unwrap();
        let text = "SASL_PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093";
        let path = file.display().to_string();
        let props = properties(&[
            ("listeners", text),
            ("sasl.enabled.mechanisms", "PLAIN"),
            ("inter.broker.listener.name", "SASL_PLAINTEXT"),
            ("java.security.auth.login.config", &path),
        ]);
        let config = parse(&props, &listeners(text), "CONTROLLER", true).expect("config");
        let sasl = config.listener("SASL_PLAINTEXT");
        assert_eq!(sasl.plain_users["alice"], "alice-secret");
        assert!(
            !sasl.plain_users.contains_key("carol"),
            "another listener's"
        );
        let login = config
            .inter_broker_login
            .as_ref()
            .expect("inter-broker login");
        assert_eq!(login.client_properties["sasl.username"], "admin");
        // The listener's key wins over the file.
        let mut with_key = props.clone();
        with_key.insert(
            "listener.name.sasl_plaintext.plain.sasl.jaas.config".into(),
            JAAS.replace(
                "required",
                "required username=\"bob\" password=\"bob-secret\"",
            ),
        );
        let config = parse(&with_key, &listeners(text), "CONTROLLER", true).expect("config");
        assert!(
            !config
                .listener("SASL_PLAINTEXT")
                .plain_users
                .contains_key("admin")
        );
        // A file that does not parse is refused naming the key.
        std::fs::write(&file, "KafkaServer { broken").unwrap();
        let error = parse(&props, &listeners(text), "CONTROLLER", true)
            .expect_err("broken file")
            .to_string();
        assert!(error.contains("java.security.auth.login.config"), "{error}");
    }

    #[test]
    fn a_sasl_listener_and_a_plain_one_are_served_with_their_users() {
        let text = "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093";
        let props = properties(&[
            ("listeners", text),
            ("sasl.enabled.mechanisms", "PLAIN"),
            ("listener.name.sasl_plaintext.plain.sasl.jaas.config", JAAS),
        ]);
        let config = parse(&props, &listeners(text), "CONTROLLER", true).expect("config");
        let sasl = config.listener("SASL_PLAINTEXT");
        assert_eq!(sasl.protocol, SecurityProtocol::SaslPlaintext);
        assert_eq!(sasl.mechanisms, vec![Mechanism::Plain]);
        assert_eq!(sasl.plain_users["alice"], "alice-secret");
        assert_eq!(config.inter_broker_listener, "PLAINTEXT");
        assert_eq!(
            config.listener("PLAINTEXT").protocol,
            SecurityProtocol::Plaintext
        );
        assert!(is_served_listener_key(
            "listener.name.sasl_plaintext.plain.sasl.jaas.config"
        ));
        // SCRAM's credentials are in the quorum: a SCRAM listener names no users.
        let props = properties(&[
            ("listeners", text),
            (
                "listener.name.sasl_plaintext.sasl.enabled.mechanisms",
                "SCRAM-SHA-512, scram-sha-256",
            ),
        ]);
        let config = parse(&props, &listeners(text), "CONTROLLER", true).expect("SCRAM config");
        let sasl = config.listener("SASL_PLAINTEXT");
        assert_eq!(
            sasl.mechanisms,
            vec![Mechanism::ScramSha512, Mechanism::ScramSha256]
        );
        assert!(sasl.plain_users.is_empty());
        assert!(is_served_listener_key(
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms"
        ));
        assert!(!is_served_listener_key(
            "listener.name.sasl_plaintext.gssapi.sasl.jaas.config"
        ));
        assert!(is_served_listener_key(
            "listener.name.ssl.ssl.keystore.location"
        ));
        assert!(!is_served_listener_key(
            "listener.name.ssl.ssl.engine.factory.class"
        ));
    }

    #[test]
    fn brokers_connect_to_each_other_as_clients_of_the_inter_broker_listener() {
        let text = "SASL_SSL://localhost:9094,CONTROLLER://127.0.0.1:9093";
        let all = listeners(text);
        let broker_jaas = "org.apache.kafka.common.security.plain.PlainLoginModule required \
                           username=\"admin\" password=\"admin-secret\" \
                           user_admin=\"admin-secret\";";
        let scram_jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required \
                          username=\"broker\" password=\"broker-secret\";";
        let base = [
            ("listeners", text),
            ("ssl.keystore.location", "/etc/sluice/broker.pem"),
            ("ssl.truststore.location", "/etc/sluice/ca.pem"),
            (
                "listener.name.sasl_ssl.sasl.enabled.mechanisms",
                "PLAIN,SCRAM-SHA-512",
            ),
            ("listener.name.sasl_ssl.plain.sasl.jaas.config", broker_jaas),
            (
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config",
                scram_jaas,
            ),
        ];
        let parsed = |extra: &[(&str, &str)]| {
            let mut props = properties(&base);
            props.extend(properties(extra));
            parse(&props, &all, "CONTROLLER", true)
        };
        // Two mechanisms: which one brokers use must be said (Kafka's default is GSSAPI).
        let error = parsed(&[]).expect_err("two mechanisms");
        assert!(error.to_string().contains("name the one"), "{error}");
        assert_eq!(error.key, "sasl.mechanism.inter.broker.protocol");
        let error = parsed(&[("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-256")])
            .expect_err("not enabled");
        assert!(
            error.to_string().contains("PLAIN, SCRAM-SHA-512"),
            "{error}"
        );
        let config = parsed(&[("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512")])
            .expect("SCRAM login");
        let login = config.inter_broker_login.expect("a broker has a login");
        assert_eq!(login.listener_name, "SASL_SSL");
        let client = login.client_properties();
        assert_eq!(client["security.protocol"], "SASL_SSL");
        assert_eq!(client["sasl.mechanism"], "SCRAM-SHA-512");
        assert_eq!(client["sasl.username"], "broker");
        assert_eq!(client["sasl.password"], "broker-secret");
        assert_eq!(client["ssl.truststore.location"], "/etc/sluice/ca.pem");
        assert_eq!(client["ssl.keystore.location"], "/etc/sluice/broker.pem");
        assert!(!client.contains_key("ssl.endpoint.identification.algorithm"));
        // The password never reaches a log.
        let shown = format!("{login:?}");
        assert!(!shown.contains("broker-secret"), "{shown}");
        let config = parsed(&[
            ("sasl.mechanism.inter.broker.protocol", "PLAIN"),
            ("ssl.endpoint.identification.algorithm", ""),
            ("security.inter.broker.protocol", "sasl_ssl"),
        ])
        .expect("PLAIN login");
        let login = config.inter_broker_login.expect("login");
        assert_eq!(login.client_properties()["sasl.username"], "admin");
        assert_eq!(
            login.client_properties()["ssl.endpoint.identification.algorithm"],
            ""
        );
        // Without a truststore a broker could not verify the others.
        let mut props = properties(&base);
        props.remove("ssl.truststore.location");
        props.insert(
            "sasl.mechanism.inter.broker.protocol".into(),
            "PLAIN".into(),
        );
        let error = parse(&props, &all, "CONTROLLER", true).expect_err("no truststore");
        assert!(error.to_string().contains("its truststore"), "{error}");
        // security.inter.broker.protocol picks the listener by protocol; it must agree with
        // inter.broker.listener.name.
        let two =
            "PLAINTEXT://127.0.0.1:9092,SASL_SSL://localhost:9094,CONTROLLER://127.0.0.1:9093";
        let mut props = properties(&base);
        props.insert("listeners".into(), two.into());
        props.insert(
            "sasl.mechanism.inter.broker.protocol".into(),
            "PLAIN".into(),
        );
        props.insert("security.inter.broker.protocol".into(), "SASL_SSL".into());
        let config = parse(&props, &listeners(two), "CONTROLLER", true).expect("by protocol");
        assert_eq!(config.inter_broker_listener, "SASL_SSL");
        props.insert("inter.broker.listener.name".into(), "PLAINTEXT".into());
        let error = parse(&props, &listeners(two), "CONTROLLER", true).expect_err("disagree");
        assert!(error.to_string().contains("is PLAINTEXT"), "{error}");
        props.remove("inter.broker.listener.name");
        let config = parse(&props, &listeners(two), "CONTROLLER", true).expect("agree");
        assert_eq!(config.inter_broker_listener, "SASL_SSL");
        // A PLAINTEXT inter-broker listener: plain connections, no credentials.
        props.remove("security.inter.broker.protocol");
        let config = parse(&props, &listeners(two), "CONTROLLER", true).expect("plaintext");
        let login = config.inter_broker_login.expect("login");
        assert_eq!(login.listener_name, "PLAINTEXT");
        assert_eq!(
            login.client_properties().keys().collect::<Vec<_>>(),
            ["security.protocol"]
        );
    }

    #[test]
    fn the_quorum_listener_is_plaintext_or_mutual_tls() {
        let text = "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093";
        let all = listeners(text);
        let parsed = |pairs: &[(&str, &str)]| {
            let mut props = properties(pairs);
            props.insert("listeners".into(), text.into());
            parse(&props, &all, "CONTROLLER", true)
        };
        let tls = [
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
            ),
            ("ssl.keystore.location", "/etc/sluice/node.pem"),
            ("ssl.truststore.location", "/etc/sluice/ca.pem"),
        ];
        let error = parsed(&tls).expect_err("client certificates not required");
        assert!(
            error
                .to_string()
                .contains("must require client certificates")
        );
        assert_eq!(error.key, "listener.name.controller.ssl.client.auth");
        let mut required = tls.to_vec();
        required.push(("listener.name.controller.ssl.client.auth", "required"));
        let config = parsed(&required).expect("mutual TLS");
        let controller = config.controller_tls.clone().expect("controller TLS");
        assert_eq!(controller.client_auth, ClientAuth::Required);
        assert!(config.listener("PLAINTEXT").tls.is_none());
        let error = parsed(&[(
            "listener.security.protocol.map",
            "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL",
        )])
        .expect_err("SASL on the quorum");
        assert!(error.to_string().contains("SASL is not served"), "{error}");
        assert!(parsed(&[]).expect("plaintext").controller_tls.is_none());
    }

    #[test]
    fn what_sluice_does_not_serve_stops_the_node() {
        let text = "SASL_PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093";
        let all = listeners(text);
        let refused = |pairs: &[(&str, &str)], needle: &str| {
            let mut props = properties(pairs);
            props.insert("listeners".into(), text.into());
            let error = parse(&props, &all, "CONTROLLER", true).expect_err(needle);
            assert!(error.to_string().contains(needle), "{error}");
        };
        // Kafka's default mechanism is GSSAPI.
        refused(&[], "GSSAPI is not implemented");
        refused(
            &[("sasl.enabled.mechanisms", "OAUTHBEARER")],
            "has no JAAS config",
        );
        refused(&[("sasl.enabled.mechanisms", "PLAIN")], "names no users");
        // The only listener is SASL: brokers log in to each other, and need their own login.
        refused(
            &[
                ("sasl.enabled.mechanisms", "PLAIN"),
                ("listener.name.sasl_plaintext.plain.sasl.jaas.config", JAAS),
            ],
            "set the broker's own username and password there",
        );
        // SASL settings of a PLAINTEXT listener would do nothing.
        let plain = "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093";
        let props = properties(&[
            ("listeners", plain),
            ("listener.name.plaintext.plain.sasl.jaas.config", JAAS),
        ]);
        let error = parse(&props, &listeners(plain), "CONTROLLER", true).expect_err("plain");
        assert!(error.to_string().contains("not a SASL listener"), "{error}");
        let tls = "SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093";
        let props = properties(&[("listeners", tls)]);
        let error = parse(&props, &listeners(tls), "CONTROLLER", true).expect_err("TLS");
        assert!(
            error
                .to_string()
                .contains("TLS listener without a certificate"),
            "{error}"
        );
        let with_tls = |pairs: &[(&str, &str)]| {
            let mut props = properties(pairs);
            props.insert(
                "listeners".into(),
                format!("PLAINTEXT://127.0.0.1:9092,{tls}"),
            );
            props.insert(
                "ssl.keystore.location".into(),
                "/etc/sluice/server.pem".into(),
            );
            parse(
                &props,
                &listeners(&format!("PLAINTEXT://127.0.0.1:9092,{tls}")),
                "CONTROLLER",
                true,
            )
        };
        let config = with_tls(&[
            ("listener.name.ssl.ssl.client.auth", "required"),
            ("ssl.truststore.location", "/etc/sluice/ca.pem"),
            ("ssl.enabled.protocols", "TLSv1.3"),
            (
                "ssl.principal.mapping.rules",
                "RULE:^CN=(.*?),.*$/$1/L,DEFAULT",
            ),
        ])
        .expect("TLS listener");
        let settings = config.listener("SSL").tls.expect("TLS settings");
        assert_eq!(settings.keystore, KeyStore::file("/etc/sluice/server.pem"));
        assert_eq!(settings.client_auth, ClientAuth::Required);
        assert_eq!(settings.protocols, vec![TlsVersion::Tls13]);
        assert_eq!(config.listener("PLAINTEXT").tls, None);
        for (pairs, needle) in [
            (&[("ssl.keystore.type", "JKS")][..], "only PEM stores"),
            (&[("ssl.keystore.password", "x")][..], "has no password"),
            (
                &[("ssl.cipher.suites", "TLS_AES_128_GCM_SHA256")][..],
                "cipher suites",
            ),
            (&[("ssl.client.auth", "required")][..], "no truststore"),
            (
                &[("ssl.enabled.protocols", "TLSv1.1")][..],
                "TLSv1.1 is not served",
            ),
            (
                &[("listener.name.plaintext.ssl.client.auth", "none")][..],
                "not a TLS listener",
            ),
        ] {
            let error = with_tls(pairs).expect_err(needle).to_string();
            assert!(error.contains(needle), "{needle}: {error}");
        }
        // TLS keys on a node without a TLS listener would do nothing.
        let props = properties(&[
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            ),
            ("ssl.keystore.location", "/etc/sluice/server.pem"),
        ]);
        let error = parse(
            &props,
            &listeners("PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"),
            "CONTROLLER",
            true,
        )
        .expect_err("no TLS listener");
        assert!(
            error
                .to_string()
                .contains("no listener of this node is SSL"),
            "{error}"
        );
    }

    #[test]
    fn the_authorizer_is_kafkas_standard_one_and_its_settings_need_it() {
        let parse_with = |pairs: &[(&str, &str)]| parse_authorizer(&properties(pairs));
        assert_eq!(parse_with(&[]).expect("none"), None);
        let config = parse_with(&[
            ("authorizer.class.name", STANDARD_AUTHORIZER),
            ("super.users", "User:admin; User:ANONYMOUS"),
            ("allow.everyone.if.no.acl.found", "true"),
        ])
        .expect("standard")
        .expect("configured");
        assert!(config.super_users.contains("User:admin"));
        assert!(config.super_users.contains("User:ANONYMOUS"));
        assert!(config.allow_everyone_if_no_acl_found);
        let refused = |pairs: &[(&str, &str)], needle: &str| {
            let error = parse_with(pairs).expect_err(needle).to_string();
            assert!(error.contains(needle), "{error}");
        };
        refused(&[("super.users", "User:admin")], "needs an authorizer");
        refused(
            &[("allow.everyone.if.no.acl.found", "true")],
            "needs an authorizer",
        );
        refused(
            &[(
                "authorizer.class.name",
                "kafka.security.authorizer.AclAuthorizer",
            )],
            "only Kafka's KRaft authorizer",
        );
        refused(
            &[
                ("authorizer.class.name", STANDARD_AUTHORIZER),
                ("super.users", "admin"),
            ],
            "principalType:principalName",
        );
    }
}
