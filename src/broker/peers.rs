//! Connections from this broker to the other brokers' Kafka listener, for the few requests a
//! broker sends another (KIP-890's AddPartitionsToTxn `verify_only` to a transaction
//! coordinator). One connection per broker, shared (requests are pipelined on it), opened on
//! first use and again after it closes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_raft::image::MetadataImage;

use crate::client::Connection;
use crate::inter_broker::InterBrokerClient;
use crate::protocol::errors::KafkaError;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Peers {
    /// How brokers reach each other (the inter-broker listener, as its clients).
    inter_broker: InterBrokerClient,
    connections: Mutex<HashMap<i32, Arc<Connection>>>,
}

impl Peers {
    pub fn new(inter_broker: InterBrokerClient) -> Peers {
        Peers {
            inter_broker,
            connections: Mutex::new(HashMap::new()),
        }
    }

    /// An open connection to `broker` (BROKER_NOT_AVAILABLE when the image has no endpoint
    /// for it, NETWORK_EXCEPTION when it cannot be reached).
    pub async fn connection(
        &self,
        image: &MetadataImage,
        broker: i32,
    ) -> Result<Arc<Connection>, KafkaError> {
        let existing = self
            .connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&broker)
            .filter(|c| !c.is_closed())
            .cloned();
        if let Some(connection) = existing {
            return Ok(connection);
        }
        let endpoint = image
            .brokers
            .get(&broker)
            .filter(|b| !b.fenced)
            .and_then(|b| {
                b.registration
                    .endpoints
                    .iter()
                    .find(|e| e.name == self.inter_broker.listener_name())
            })
            .ok_or(KafkaError::BrokerNotAvailable)?;
        let addr = format!("{}:{}", endpoint.host, endpoint.port);
        let connection = self
            .inter_broker
            .connect(&addr, CONNECT_TIMEOUT)
            .await
            .map(Arc::new)
            .map_err(|error| {
                tracing::debug!(broker, %addr, %error, "cannot reach a broker");
                KafkaError::NetworkException
            })?;
        self.connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(broker, Arc::clone(&connection));
        Ok(connection)
    }

    /// Forgets the connection to `broker` (it failed).
    pub fn forget(&self, broker: i32) {
        self.connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&broker);
    }
}
