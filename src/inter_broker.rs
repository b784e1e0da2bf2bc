//! How this broker connects to the other brokers: replica fetchers, the transaction marker
//! sender and KIP-890's verification calls all open their connections here, to the
//! inter-broker listener (`inter.broker.listener.name`), as a client of that listener's
//! security: TLS verified against the listener's truststore (presenting the listener's own
//! certificate, for listeners that ask for one) and SASL with the broker's own login
//! (`sasl.mechanism.inter.broker.protocol`, the username and password of that mechanism's
//! JAAS config), as Kafka's brokers do.

use std::time::Duration;

use crate::client::{ClientConfig, CommonConfig, Connection};
use crate::config::security::InterBrokerLogin;

/// What a connection to another broker is opened with. Cheap to clone.
#[derive(Debug, Clone)]
pub struct InterBrokerClient {
    listener_name: String,
    config: ClientConfig,
}

impl InterBrokerClient {
    /// The client side of `login` (the node's inter-broker listener). Checks the settings now,
    /// loading the TLS stores, so that a bad file stops the node at start rather than every
    /// fetch later.
    pub fn new(login: &InterBrokerLogin, client_id: &str) -> Result<InterBrokerClient, String> {
        let mut config = ClientConfig::new("");
        for (key, value) in login.client_properties() {
            config.insert(key, value.clone());
        }
        config.insert("client.id", client_id);
        CommonConfig::without_servers(&config).map_err(|error| {
            format!(
                "brokers connect to each other on listener {} and this broker could not as its \
                 client: {error}",
                login.listener_name
            )
        })?;
        Ok(InterBrokerClient {
            listener_name: login.listener_name.clone(),
            config,
        })
    }

    /// Client settings for a client of this broker's own kind (the console's admin calls):
    /// the inter-broker login, starting from `bootstrap`.
    pub fn client_config(&self, bootstrap: &str, client_id: &str) -> ClientConfig {
        let mut config = self.config.clone();
        config.insert("bootstrap.servers", bootstrap);
        config.insert("client.id", client_id);
        config
    }

    /// The listener whose endpoints the other brokers are reached on.
    pub fn listener_name(&self) -> &str {
        &self.listener_name
    }

    /// Connects to `addr` (another broker's inter-broker endpoint), encrypting and logging in
    /// as the listener asks. `timeout` bounds the connect (TLS handshake and SASL included)
    /// and each request. The TLS stores are read afresh, so a rotated certificate is used from
    /// the next connection on.
    pub async fn connect(
        &self,
        addr: &str,
        timeout: Duration,
    ) -> Result<Connection, crate::client::Error> {
        let mut common = CommonConfig::without_servers(&self.config)?;
        common.connect_timeout = timeout;
        Connection::open(addr, &common, timeout).await
    }
}
