//! Metadata records: the entries of the metadata log. Every topic, partition, leader, ISR and
//! broker registration in a cluster is the result of replaying these, in log order.
//!
//! Records are versioned: each is stored as `RecordEnvelope { version, record }` encoded with
//! bincode. A node refuses (fatally) a record whose version it does not know, rather than
//! misread it; new variants are only ever added at the end of the enum.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub type BrokerId = i32;
/// Kafka's "no leader" (-1).
pub const NO_LEADER: BrokerId = -1;

/// A topic id: Kafka's 128-bit UUID.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
pub struct Uuid(pub u128);

impl std::fmt::Display for Uuid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// One listener a broker serves clients on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
    pub security_protocol: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterBroker {
    pub broker_id: BrokerId,
    /// Random per process start: tells a restarted broker from a duplicate.
    pub incarnation_id: Uuid,
    /// Assigned by the controller: the Raft index of this registration.
    pub broker_epoch: i64,
    pub endpoints: Vec<Endpoint>,
    pub rack: Option<String>,
    /// A broker registers fenced and is unfenced once it has caught up with the metadata log.
    pub fenced: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRecord {
    pub topic_id: Uuid,
    pub partition: i32,
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
    pub leader: BrokerId,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
}

/// A change of one partition. Fields left `None` are unchanged. Applying it bumps the
/// partition epoch; a new leader (or a change of replicas) also bumps the leader epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct PartitionChange {
    pub topic_id: Uuid,
    pub partition: i32,
    pub leader: Option<BrokerId>,
    pub isr: Option<Vec<BrokerId>>,
    pub replicas: Option<Vec<BrokerId>>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ConfigResource {
    /// Broker-level dynamic config; `None` is the cluster-wide default.
    Broker(Option<BrokerId>),
    Topic(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataRecord {
    RegisterBroker(RegisterBroker),
    FenceBroker {
        broker_id: BrokerId,
        broker_epoch: i64,
    },
    UnfenceBroker {
        broker_id: BrokerId,
        broker_epoch: i64,
    },
    UnregisterBroker {
        broker_id: BrokerId,
        broker_epoch: i64,
    },
    Topic {
        topic_id: Uuid,
        name: String,
    },
    Partition(PartitionRecord),
    PartitionChange(PartitionChange),
    RemoveTopic {
        topic_id: Uuid,
    },
    /// Sets (`Some`) or deletes (`None`) one config key.
    Config {
        resource: ConfigResource,
        name: String,
        value: Option<String>,
    },
    /// The next block of producer ids handed to a broker starts here.
    ProducerIds {
        broker_id: BrokerId,
        broker_epoch: i64,
        next_producer_id: i64,
    },
    /// A partition reassignment starts (`Some`: move to `target`, from `original`) or ends
    /// (`None`: completed or cancelled).
    Reassignment {
        topic_id: Uuid,
        partition: i32,
        target: Option<Reassignment>,
    },
    /// The most partition replicas a broker says it can host (`max.broker.partitions`),
    /// reported with each registration. The controller places no new replica beyond it.
    BrokerCapacity {
        broker_id: BrokerId,
        broker_epoch: i64,
        partitions_max: u32,
    },
    /// A user's SCRAM credential for one mechanism is set (`Some`: Kafka's
    /// UserScramCredentialRecord) or removed (`None`: RemoveUserScramCredentialRecord).
    UserScramCredential {
        user: String,
        mechanism: ScramMechanism,
        credential: Option<ScramCredentialRecord>,
    },
    /// An ACL is created (`Some`: Kafka's AccessControlEntryRecord) or removed (`None`:
    /// RemoveAccessControlEntryRecord), by the id the controller gave it.
    Acl {
        id: Uuid,
        acl: Option<AclRecord>,
    },
    /// One quota of a client quota entity is set (`Some`) or removed (`None`): Kafka's
    /// ClientQuotaRecord (`remove` is the `None`).
    ClientQuota {
        entity: ClientQuotaEntity,
        key: String,
        value: Option<QuotaValue>,
    },
}

/// One part of a client quota entity: a name, or the default (Kafka's null entity name),
/// which applies to every user (or client id) without a quota of its own.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum QuotaEntityName {
    Default,
    Named(String),
}

impl QuotaEntityName {
    /// Kafka's wire form: the name, or null for the default.
    pub fn as_option(&self) -> Option<&str> {
        match self {
            QuotaEntityName::Default => None,
            QuotaEntityName::Named(name) => Some(name),
        }
    }

    pub fn from_option(name: Option<&str>) -> QuotaEntityName {
        match name {
            None => QuotaEntityName::Default,
            Some(name) => QuotaEntityName::Named(name.to_owned()),
        }
    }
}

/// Whom a client quota applies to (Kafka's ClientQuotaEntity, KIP-257): a user, a client id,
/// a user's client id, or an IP address (connection creation rate), each part named or the
/// default. The broker validates the combination before it is proposed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
pub struct ClientQuotaEntity {
    pub user: Option<QuotaEntityName>,
    pub client_id: Option<QuotaEntityName>,
    pub ip: Option<QuotaEntityName>,
}

impl ClientQuotaEntity {
    /// Its parts as Kafka's (entity type, entity name) pairs, in Kafka's type names.
    pub fn parts(&self) -> impl Iterator<Item = (&'static str, &QuotaEntityName)> {
        [
            ("user", self.user.as_ref()),
            ("client-id", self.client_id.as_ref()),
            ("ip", self.ip.as_ref()),
        ]
        .into_iter()
        .filter_map(|(entity_type, name)| name.map(|name| (entity_type, name)))
    }
}

impl std::fmt::Display for ClientQuotaEntity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for (entity_type, name) in self.parts() {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            match name {
                QuotaEntityName::Default => write!(f, "default {entity_type}")?,
                QuotaEntityName::Named(name) => write!(f, "{entity_type} '{name}'")?,
            }
        }
        if first {
            f.write_str("no entity")?;
        }
        Ok(())
    }
}

/// A quota's value (Kafka stores every quota as a double). Compared by its bits, so a record
/// or an image holding one is `Eq`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct QuotaValue(pub f64);

impl PartialEq for QuotaValue {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for QuotaValue {}

/// The SCRAM mechanisms a credential is stored for (Kafka's `ScramMechanism`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ScramMechanism {
    ScramSha256,
    ScramSha512,
}

impl ScramMechanism {
    /// Kafka's code on the wire (DescribeUserScramCredentials, AlterUserScramCredentials).
    pub fn code(self) -> i8 {
        match self {
            ScramMechanism::ScramSha256 => 1,
            ScramMechanism::ScramSha512 => 2,
        }
    }

    pub fn from_code(code: i8) -> Option<ScramMechanism> {
        match code {
            1 => Some(ScramMechanism::ScramSha256),
            2 => Some(ScramMechanism::ScramSha512),
            _ => None,
        }
    }

    /// The SASL mechanism's name.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::ScramSha256 => "SCRAM-SHA-256",
            ScramMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// A stored SCRAM credential: what verifies a client and proves the server knows it, never
/// the password (RFC 5802's StoredKey and ServerKey).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredentialRecord {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

// The keys stay out of logs: the server key lets its holder pose as the server.
impl std::fmt::Debug for ScramCredentialRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredentialRecord")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// One ACL as the quorum stores it, in Kafka's wire codes (the broker's `security::acl`
/// gives them meaning and validates them before they are proposed).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AclRecord {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission_type: i8,
}

/// An ongoing partition reassignment: the replicas wanted, and those it started from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reassignment {
    pub target: Vec<BrokerId>,
    pub original: Vec<BrokerId>,
}

pub const RECORD_VERSION: u16 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordEnvelope {
    pub version: u16,
    pub record: MetadataRecord,
}

/// What the controller proposes to the quorum: records applied together or not at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct MetadataRequest {
    pub records: Vec<RecordEnvelope>,
}

impl MetadataRequest {
    pub fn new(records: impl IntoIterator<Item = MetadataRecord>) -> Self {
        MetadataRequest {
            records: records
                .into_iter()
                .map(|record| RecordEnvelope {
                    version: RECORD_VERSION,
                    record,
                })
                .collect(),
        }
    }
}

/// The result of applying a request: the Raft index it got, or why replay refused it (the
/// same on every node, as replay is deterministic).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct MetadataResponse {
    pub index: u64,
    pub rejected: Option<String>,
}

/// Configs of one resource, by key.
pub type ConfigMap = BTreeMap<String, String>;
