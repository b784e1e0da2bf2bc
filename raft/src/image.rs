//! `MetadataImage`: the cluster's metadata at one log index, immutable once built.
//! `MetadataDelta` replays records onto an image and `apply()` yields the next one, so readers
//! holding an `Arc<MetadataImage>` never see half an update (Kafka's KRaft model).
//!
//! Topics are held as `Arc<TopicImage>`: a delta clones only the topics it changes.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::records::{
    AclRecord, BrokerId, ClientQuotaEntity, ConfigMap, ConfigResource, MetadataRecord, NO_LEADER,
    PartitionChange, PartitionRecord, QuotaEntityName, QuotaValue, RECORD_VERSION, Reassignment,
    RecordEnvelope, RegisterBroker, ScramCredentialRecord, ScramMechanism, Uuid,
};

/// SCRAM credentials by user, then mechanism.
pub type ScramCredentials = BTreeMap<String, BTreeMap<ScramMechanism, ScramCredentialRecord>>;

/// Client quotas by entity, then quota key (`producer_byte_rate`, ...). An entity without
/// quotas is not kept.
pub type ClientQuotas = BTreeMap<ClientQuotaEntity, BTreeMap<String, QuotaValue>>;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub registration: RegisterBroker,
    pub fenced: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRegistration {
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
    pub leader: BrokerId,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicImage {
    pub id: Uuid,
    pub name: String,
    pub partitions: BTreeMap<i32, PartitionRegistration>,
}

/// The broker config that caps the partition replicas a broker hosts (KIP-578's name).
pub const PARTITIONS_MAX_KEY: &str = "max.broker.partitions";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct MetadataImage {
    /// The Raft log index of the last record applied.
    pub index: u64,
    pub brokers: BTreeMap<BrokerId, BrokerRegistration>,
    pub topics: BTreeMap<Uuid, Arc<TopicImage>>,
    pub topic_ids_by_name: BTreeMap<String, Uuid>,
    pub configs: BTreeMap<ConfigResource, ConfigMap>,
    /// The first producer id not yet handed out.
    pub next_producer_id: i64,
    /// Ongoing partition reassignments.
    pub reassignments: BTreeMap<(Uuid, i32), Reassignment>,
    /// The most partition replicas each broker can host, as its registration reported.
    pub broker_partitions_max: BTreeMap<BrokerId, u32>,
    /// SCRAM credentials (shared between images until one changes them).
    pub scram_credentials: Arc<ScramCredentials>,
    /// ACLs by the id of the record that created them (shared between images until one
    /// changes them: a reader may rebuild its index only when the `Arc` is another).
    pub acls: Arc<BTreeMap<Uuid, AclRecord>>,
    /// Client quotas (shared between images until one changes them: a broker's quota
    /// lookups are skipped while it holds none).
    pub client_quotas: Arc<ClientQuotas>,
    /// Partition replicas per broker: derived from `topics`, kept up to date by replay so
    /// placement never counts every partition.
    #[serde(skip)]
    replica_counts: BTreeMap<BrokerId, u32>,
}

/// The image as snapshot format 4 held it (before client quotas): format 3's fields, then the
/// SCRAM credentials and the ACLs.
#[derive(Deserialize)]
struct MetadataImageV4(
    MetadataImageV3,
    Arc<ScramCredentials>,
    Arc<BTreeMap<Uuid, AclRecord>>,
);

/// The image as snapshot format 3 held it (before SCRAM credentials and ACLs): format 2's
/// fields, then the broker capacities.
#[derive(Deserialize)]
struct MetadataImageV3(MetadataImageV2, BTreeMap<BrokerId, u32>);

/// The image as snapshot format 2 held it (before broker capacities): format 1's fields, then
/// the reassignments.
#[derive(Deserialize)]
struct MetadataImageV2(MetadataImageV1, BTreeMap<(Uuid, i32), Reassignment>);

/// The image as snapshot format 1 held it (before reassignments).
#[derive(Deserialize)]
struct MetadataImageV1 {
    index: u64,
    brokers: BTreeMap<BrokerId, BrokerRegistration>,
    topics: BTreeMap<Uuid, Arc<TopicImage>>,
    topic_ids_by_name: BTreeMap<String, Uuid>,
    configs: BTreeMap<ConfigResource, ConfigMap>,
    next_producer_id: i64,
}

impl MetadataImageV1 {
    /// The current image from an older snapshot's fields.
    fn upgrade(self, reassignments: BTreeMap<(Uuid, i32), Reassignment>) -> MetadataImage {
        MetadataImage {
            index: self.index,
            brokers: self.brokers,
            topics: self.topics,
            topic_ids_by_name: self.topic_ids_by_name,
            configs: self.configs,
            next_producer_id: self.next_producer_id,
            reassignments,
            ..MetadataImage::default()
        }
        .recount()
    }
}

impl MetadataImage {
    pub fn topic_by_name(&self, name: &str) -> Option<&Arc<TopicImage>> {
        self.topic_ids_by_name
            .get(name)
            .and_then(|id| self.topics.get(id))
    }

    pub fn partition(&self, topic_id: Uuid, partition: i32) -> Option<&PartitionRegistration> {
        self.topics.get(&topic_id)?.partitions.get(&partition)
    }

    /// The most partition replicas `broker` hosts: `max.broker.partitions` set dynamically for
    /// it, else set dynamically as the cluster-wide default, else what its registration
    /// reported (its `server.properties` or memory). A dynamic -1 defers to the next of these.
    /// `None`: no limit known.
    pub fn partitions_max(&self, broker: BrokerId) -> Option<u32> {
        let dynamic = |resource: ConfigResource| {
            self.configs
                .get(&resource)
                .and_then(|configs| configs.get(PARTITIONS_MAX_KEY))
                .and_then(|value| value.parse::<u32>().ok())
        };
        dynamic(ConfigResource::Broker(Some(broker)))
            .or_else(|| dynamic(ConfigResource::Broker(None)))
            .or_else(|| self.broker_partitions_max.get(&broker).copied())
    }

    /// How many partition replicas `broker` hosts.
    pub fn replica_count(&self, broker: BrokerId) -> u32 {
        self.replica_counts.get(&broker).copied().unwrap_or(0)
    }

    fn count_replicas(&mut self, replicas: &[BrokerId], added: bool) {
        for broker in replicas {
            if added {
                *self.replica_counts.entry(*broker).or_default() += 1;
            } else if let Some(count) = self.replica_counts.get_mut(broker) {
                *count -= 1;
                if *count == 0 {
                    self.replica_counts.remove(broker);
                }
            }
        }
    }

    /// Rebuilds the derived replica counts (after decoding a snapshot).
    fn recount(mut self) -> Self {
        let mut counts: BTreeMap<BrokerId, u32> = BTreeMap::new();
        for topic in self.topics.values() {
            for partition in topic.partitions.values() {
                for broker in &partition.replicas {
                    *counts.entry(*broker).or_default() += 1;
                }
            }
        }
        self.replica_counts = counts;
        self
    }

    pub fn unfenced_brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values().filter(|b| !b.fenced)
    }

    /// The encoded image: what a snapshot holds.
    pub fn encode(&self) -> Vec<u8> {
        bincode::serialize(&(SNAPSHOT_FORMAT_VERSION, self)).expect("an image always encodes")
    }

    pub fn decode(bytes: &[u8]) -> Result<MetadataImage, ReplayError> {
        let corrupt = |e: bincode::Error| ReplayError::Corrupt(e.to_string());
        let version: u16 = bincode::deserialize(bytes).map_err(corrupt)?;
        match version {
            SNAPSHOT_FORMAT_VERSION => {
                let (_, image): (u16, MetadataImage) =
                    bincode::deserialize(bytes).map_err(corrupt)?;
                Ok(image.recount())
            }
            4 => {
                let (_, MetadataImageV4(v3, scram_credentials, acls)): (u16, MetadataImageV4) =
                    bincode::deserialize(bytes).map_err(corrupt)?;
                let MetadataImageV3(MetadataImageV2(old, reassignments), capacities) = v3;
                let mut image = old.upgrade(reassignments);
                image.broker_partitions_max = capacities;
                image.scram_credentials = scram_credentials;
                image.acls = acls;
                Ok(image)
            }
            3 => {
                let (_, MetadataImageV3(MetadataImageV2(old, reassignments), capacities)): (
                    u16,
                    MetadataImageV3,
                ) = bincode::deserialize(bytes).map_err(corrupt)?;
                let mut image = old.upgrade(reassignments);
                image.broker_partitions_max = capacities;
                Ok(image)
            }
            2 => {
                let (_, MetadataImageV2(old, reassignments)): (u16, MetadataImageV2) =
                    bincode::deserialize(bytes).map_err(corrupt)?;
                Ok(old.upgrade(reassignments))
            }
            1 => {
                let (_, old): (u16, MetadataImageV1) =
                    bincode::deserialize(bytes).map_err(corrupt)?;
                Ok(old.upgrade(BTreeMap::new()))
            }
            other => Err(ReplayError::UnknownVersion(other)),
        }
    }
}

/// 2: the image holds reassignments; 3: broker capacities; 4: SCRAM credentials and ACLs;
/// 5: client quotas (formats 1 to 4 are still read).
const SNAPSHOT_FORMAT_VERSION: u16 = 5;

/// Why a record could not be replayed. Replay is deterministic, so every node refuses the
/// same records; the controller validates before proposing, so this signals a bug or a
/// proposal raced by another.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    #[error("record version {0} is newer than this node understands")]
    UnknownVersion(u16),
    #[error("unknown broker {0}")]
    UnknownBroker(BrokerId),
    #[error("stale broker epoch {got} for broker {broker_id} (current {current})")]
    StaleBrokerEpoch {
        broker_id: BrokerId,
        got: i64,
        current: i64,
    },
    #[error("unknown topic {0}")]
    UnknownTopic(Uuid),
    #[error("topic name {0} already exists")]
    DuplicateTopic(String),
    #[error("unknown partition {1} of topic {0}")]
    UnknownPartition(Uuid, i32),
    #[error("invalid record: {0}")]
    Invalid(String),
    #[error("corrupt image: {0}")]
    Corrupt(String),
}

/// Records replayed onto a base image, not yet visible to anyone.
#[derive(Debug, Clone)]
pub struct MetadataDelta {
    next: MetadataImage,
}

impl MetadataDelta {
    pub fn new(base: &MetadataImage) -> Self {
        MetadataDelta { next: base.clone() }
    }

    /// Replays every record of a request, all or nothing.
    pub fn replay_all(&mut self, records: &[RecordEnvelope]) -> Result<(), ReplayError> {
        let mut trial = self.clone();
        for envelope in records {
            if envelope.version > RECORD_VERSION {
                return Err(ReplayError::UnknownVersion(envelope.version));
            }
            trial.replay(&envelope.record)?;
        }
        *self = trial;
        Ok(())
    }

    pub fn replay(&mut self, record: &MetadataRecord) -> Result<(), ReplayError> {
        let image = &mut self.next;
        match record {
            MetadataRecord::RegisterBroker(registration) => {
                image.brokers.insert(
                    registration.broker_id,
                    BrokerRegistration {
                        registration: registration.clone(),
                        fenced: registration.fenced,
                    },
                );
            }
            MetadataRecord::FenceBroker {
                broker_id,
                broker_epoch,
            } => {
                broker_mut(image, *broker_id, *broker_epoch)?.fenced = true;
            }
            MetadataRecord::UnfenceBroker {
                broker_id,
                broker_epoch,
            } => {
                broker_mut(image, *broker_id, *broker_epoch)?.fenced = false;
            }
            MetadataRecord::UnregisterBroker {
                broker_id,
                broker_epoch,
            } => {
                broker_mut(image, *broker_id, *broker_epoch)?;
                image.brokers.remove(broker_id);
                image.broker_partitions_max.remove(broker_id);
            }
            MetadataRecord::BrokerCapacity {
                broker_id,
                broker_epoch,
                partitions_max,
            } => {
                broker_mut(image, *broker_id, *broker_epoch)?;
                image
                    .broker_partitions_max
                    .insert(*broker_id, *partitions_max);
            }
            MetadataRecord::Topic { topic_id, name } => {
                if image.topic_ids_by_name.contains_key(name) || image.topics.contains_key(topic_id)
                {
                    return Err(ReplayError::DuplicateTopic(name.clone()));
                }
                image.topic_ids_by_name.insert(name.clone(), *topic_id);
                image.topics.insert(
                    *topic_id,
                    Arc::new(TopicImage {
                        id: *topic_id,
                        name: name.clone(),
                        partitions: BTreeMap::new(),
                    }),
                );
            }
            MetadataRecord::Partition(record) => replay_partition(image, record)?,
            MetadataRecord::PartitionChange(change) => replay_partition_change(image, change)?,
            MetadataRecord::RemoveTopic { topic_id } => {
                let topic = image
                    .topics
                    .remove(topic_id)
                    .ok_or(ReplayError::UnknownTopic(*topic_id))?;
                image.topic_ids_by_name.remove(&topic.name);
                for partition in topic.partitions.values() {
                    image.count_replicas(&partition.replicas, false);
                }
                image.reassignments.retain(|(id, _), _| id != topic_id);
                image
                    .configs
                    .remove(&ConfigResource::Topic(topic.name.clone()));
            }
            MetadataRecord::Config {
                resource,
                name,
                value,
            } => {
                let configs = image.configs.entry(resource.clone()).or_default();
                match value {
                    Some(value) => {
                        configs.insert(name.clone(), value.clone());
                    }
                    None => {
                        configs.remove(name);
                    }
                }
                if configs.is_empty() {
                    image.configs.remove(resource);
                }
            }
            MetadataRecord::ProducerIds {
                broker_id,
                broker_epoch,
                next_producer_id,
            } => {
                broker_mut(image, *broker_id, *broker_epoch)?;
                if *next_producer_id <= image.next_producer_id {
                    return Err(ReplayError::Invalid(format!(
                        "producer id block must move forward: {next_producer_id} <= {}",
                        image.next_producer_id
                    )));
                }
                image.next_producer_id = *next_producer_id;
            }
            MetadataRecord::Reassignment {
                topic_id,
                partition,
                target,
            } => {
                if image.partition(*topic_id, *partition).is_none() {
                    return Err(ReplayError::UnknownPartition(*topic_id, *partition));
                }
                match target {
                    Some(reassignment) => {
                        let mut distinct = reassignment.target.clone();
                        distinct.sort_unstable();
                        distinct.dedup();
                        if reassignment.target.is_empty()
                            || distinct.len() != reassignment.target.len()
                        {
                            return Err(ReplayError::Invalid(format!(
                                "reassignment target {:?}",
                                reassignment.target
                            )));
                        }
                        image
                            .reassignments
                            .insert((*topic_id, *partition), reassignment.clone());
                    }
                    None => {
                        image.reassignments.remove(&(*topic_id, *partition));
                    }
                }
            }
            MetadataRecord::UserScramCredential {
                user,
                mechanism,
                credential,
            } => replay_scram_credential(image, user, *mechanism, credential.as_ref())?,
            MetadataRecord::Acl { id, acl } => {
                let acls = Arc::make_mut(&mut image.acls);
                match acl {
                    Some(acl) => {
                        if acls.contains_key(id) {
                            return Err(ReplayError::Invalid(format!("ACL id {id} is taken")));
                        }
                        acls.insert(*id, acl.clone());
                    }
                    None => {
                        if acls.remove(id).is_none() {
                            return Err(ReplayError::Invalid(format!("no ACL has id {id}")));
                        }
                    }
                }
            }
            MetadataRecord::ClientQuota { entity, key, value } => {
                replay_client_quota(image, entity, key, *value)?
            }
        }
        Ok(())
    }

    /// The next image, at log `index`.
    pub fn apply(mut self, index: u64) -> MetadataImage {
        self.next.index = index;
        self.next
    }
}

fn broker_mut(
    image: &mut MetadataImage,
    broker_id: BrokerId,
    broker_epoch: i64,
) -> Result<&mut BrokerRegistration, ReplayError> {
    let broker = image
        .brokers
        .get_mut(&broker_id)
        .ok_or(ReplayError::UnknownBroker(broker_id))?;
    let current = broker.registration.broker_epoch;
    if broker_epoch != current {
        return Err(ReplayError::StaleBrokerEpoch {
            broker_id,
            got: broker_epoch,
            current,
        });
    }
    Ok(broker)
}

fn replay_scram_credential(
    image: &mut MetadataImage,
    user: &str,
    mechanism: ScramMechanism,
    credential: Option<&ScramCredentialRecord>,
) -> Result<(), ReplayError> {
    if user.is_empty() {
        return Err(ReplayError::Invalid(
            "a SCRAM credential without a user".into(),
        ));
    }
    let users = Arc::make_mut(&mut image.scram_credentials);
    match credential {
        Some(credential) => {
            users
                .entry(user.to_owned())
                .or_default()
                .insert(mechanism, credential.clone());
        }
        None => {
            let removed = users
                .get_mut(user)
                .and_then(|mechanisms| mechanisms.remove(&mechanism));
            if removed.is_none() {
                return Err(ReplayError::Invalid(format!(
                    "user {user} has no {} credential",
                    mechanism.name()
                )));
            }
            if users.get(user).is_some_and(BTreeMap::is_empty) {
                users.remove(user);
            }
        }
    }
    Ok(())
}

/// A client quota set or removed. The controller proposes only what Kafka's
/// `ClientQuotaControlManager` accepts; replay checks what would make the image unusable.
fn replay_client_quota(
    image: &mut MetadataImage,
    entity: &ClientQuotaEntity,
    key: &str,
    value: Option<QuotaValue>,
) -> Result<(), ReplayError> {
    let named_empty = entity
        .parts()
        .any(|(_, name)| matches!(name, QuotaEntityName::Named(n) if n.is_empty()));
    let ip_mixed = entity.ip.is_some() && (entity.user.is_some() || entity.client_id.is_some());
    if entity.parts().next().is_none() || named_empty || ip_mixed || key.is_empty() {
        return Err(ReplayError::Invalid(format!(
            "client quota {key:?} of {entity}"
        )));
    }
    let quotas = Arc::make_mut(&mut image.client_quotas);
    match value {
        Some(value) => {
            if !(value.0.is_finite() && value.0 > 0.0) {
                return Err(ReplayError::Invalid(format!(
                    "client quota {key}={} of {entity}",
                    value.0
                )));
            }
            quotas
                .entry(entity.clone())
                .or_default()
                .insert(key.to_owned(), value);
        }
        None => {
            let removed = quotas.get_mut(entity).and_then(|keys| keys.remove(key));
            if removed.is_none() {
                return Err(ReplayError::Invalid(format!(
                    "{entity} has no client quota {key}"
                )));
            }
            if quotas.get(entity).is_some_and(BTreeMap::is_empty) {
                quotas.remove(entity);
            }
        }
    }
    Ok(())
}

fn check_replica_set(
    replicas: &[BrokerId],
    isr: &[BrokerId],
    leader: BrokerId,
) -> Result<(), ReplayError> {
    let mut sorted = replicas.to_vec();
    sorted.sort_unstable();
    if replicas.is_empty() || sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err(ReplayError::Invalid(format!(
            "replicas {replicas:?} must be distinct and non-empty"
        )));
    }
    let mut distinct_isr = isr.to_vec();
    distinct_isr.sort_unstable();
    distinct_isr.dedup();
    if distinct_isr.len() != isr.len() {
        return Err(ReplayError::Invalid(format!("ISR {isr:?} has duplicates")));
    }
    if let Some(outsider) = isr.iter().find(|b| !replicas.contains(b)) {
        return Err(ReplayError::Invalid(format!(
            "ISR member {outsider} is not a replica"
        )));
    }
    if leader != NO_LEADER && !isr.contains(&leader) {
        return Err(ReplayError::Invalid(format!(
            "leader {leader} is not in the ISR {isr:?}"
        )));
    }
    Ok(())
}

fn replay_partition(
    image: &mut MetadataImage,
    record: &PartitionRecord,
) -> Result<(), ReplayError> {
    check_replica_set(&record.replicas, &record.isr, record.leader)?;
    let topic = image
        .topics
        .get_mut(&record.topic_id)
        .ok_or(ReplayError::UnknownTopic(record.topic_id))?;
    let replaced = Arc::make_mut(topic).partitions.insert(
        record.partition,
        PartitionRegistration {
            replicas: record.replicas.clone(),
            isr: record.isr.clone(),
            leader: record.leader,
            leader_epoch: record.leader_epoch,
            partition_epoch: record.partition_epoch,
        },
    );
    if let Some(replaced) = replaced {
        image.count_replicas(&replaced.replicas, false);
    }
    image.count_replicas(&record.replicas, true);
    Ok(())
}

fn replay_partition_change(
    image: &mut MetadataImage,
    change: &PartitionChange,
) -> Result<(), ReplayError> {
    let topic = image
        .topics
        .get_mut(&change.topic_id)
        .ok_or(ReplayError::UnknownTopic(change.topic_id))?;
    let topic = Arc::make_mut(topic);
    let partition =
        topic
            .partitions
            .get_mut(&change.partition)
            .ok_or(ReplayError::UnknownPartition(
                change.topic_id,
                change.partition,
            ))?;
    let mut next = partition.clone();
    if let Some(replicas) = &change.replicas {
        next.replicas = replicas.clone();
    }
    if let Some(isr) = &change.isr {
        next.isr = isr.clone();
    }
    if let Some(leader) = change.leader {
        next.leader = leader;
    }
    check_replica_set(&next.replicas, &next.isr, next.leader)?;
    if next.leader != partition.leader || change.replicas.is_some() {
        next.leader_epoch += 1;
    }
    next.partition_epoch += 1;
    let previous = std::mem::replace(partition, next);
    if let Some(replicas) = &change.replicas {
        image.count_replicas(&previous.replicas, false);
        image.count_replicas(replicas, true);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{Endpoint, MetadataRequest};

    fn broker(id: BrokerId, epoch: i64) -> MetadataRecord {
        MetadataRecord::RegisterBroker(RegisterBroker {
            broker_id: id,
            incarnation_id: Uuid(id as u128),
            broker_epoch: epoch,
            endpoints: vec![Endpoint {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9092,
                security_protocol: "PLAINTEXT".into(),
            }],
            rack: None,
            fenced: true,
        })
    }

    fn topic_with_partition() -> Vec<MetadataRecord> {
        vec![
            MetadataRecord::Topic {
                topic_id: Uuid(7),
                name: "orders".into(),
            },
            MetadataRecord::Partition(PartitionRecord {
                topic_id: Uuid(7),
                partition: 0,
                replicas: vec![1, 2, 3],
                isr: vec![1, 2, 3],
                leader: 1,
                leader_epoch: 0,
                partition_epoch: 0,
            }),
        ]
    }

    #[test]
    fn deltas_build_images_and_leave_the_base_untouched() {
        let base = MetadataImage::default();
        let mut delta = MetadataDelta::new(&base);
        let mut records = vec![broker(1, 10), broker(2, 11), broker(3, 12)];
        records.extend(topic_with_partition());
        delta
            .replay_all(&MetadataRequest::new(records).records)
            .unwrap();
        let image = delta.apply(5);
        assert_eq!(base, MetadataImage::default());
        assert_eq!(image.index, 5);
        assert_eq!(
            image.topic_by_name("orders").unwrap().partitions[&0].leader,
            1
        );

        // A leader change bumps both epochs; an ISR change only the partition epoch.
        let mut delta = MetadataDelta::new(&image);
        delta
            .replay(&MetadataRecord::PartitionChange(PartitionChange {
                topic_id: Uuid(7),
                partition: 0,
                leader: Some(2),
                ..Default::default()
            }))
            .unwrap();
        delta
            .replay(&MetadataRecord::PartitionChange(PartitionChange {
                topic_id: Uuid(7),
                partition: 0,
                isr: Some(vec![2, 3]),
                ..Default::default()
            }))
            .unwrap();
        let next = delta.apply(6);
        let partition = next.partition(Uuid(7), 0).unwrap();
        assert_eq!(
            (
                partition.leader,
                partition.leader_epoch,
                partition.partition_epoch
            ),
            (2, 1, 2)
        );
        assert_eq!(
            image.partition(Uuid(7), 0).unwrap().leader,
            1,
            "old image unchanged"
        );
    }

    #[test]
    fn invalid_records_are_refused_all_or_nothing() {
        let mut delta = MetadataDelta::new(&MetadataImage::default());
        delta
            .replay_all(&MetadataRequest::new(topic_with_partition()).records)
            .unwrap();
        let before = delta.clone().apply(1);
        // Second record fails: the first (a new topic) must not stay applied.
        let bad = MetadataRequest::new([
            MetadataRecord::Topic {
                topic_id: Uuid(8),
                name: "payments".into(),
            },
            MetadataRecord::PartitionChange(PartitionChange {
                topic_id: Uuid(7),
                partition: 0,
                leader: Some(9),
                ..Default::default()
            }),
        ]);
        assert!(matches!(
            delta.replay_all(&bad.records),
            Err(ReplayError::Invalid(_))
        ));
        assert_eq!(delta.clone().apply(1), before);
        assert!(matches!(
            delta.replay(&MetadataRecord::Topic {
                topic_id: Uuid(9),
                name: "orders".into()
            }),
            Err(ReplayError::DuplicateTopic(_))
        ));
        assert!(matches!(
            delta.replay(&MetadataRecord::FenceBroker {
                broker_id: 4,
                broker_epoch: 1
            }),
            Err(ReplayError::UnknownBroker(4))
        ));
        let future = RecordEnvelope {
            version: RECORD_VERSION + 1,
            record: MetadataRecord::RemoveTopic { topic_id: Uuid(7) },
        };
        assert_eq!(
            delta.replay_all(&[future]),
            Err(ReplayError::UnknownVersion(RECORD_VERSION + 1))
        );
    }

    #[test]
    fn stale_broker_epochs_are_refused_and_images_round_trip() {
        let mut delta = MetadataDelta::new(&MetadataImage::default());
        delta.replay(&broker(1, 10)).unwrap();
        delta.replay(&broker(1, 20)).unwrap(); // re-registration after restart
        assert!(matches!(
            delta.replay(&MetadataRecord::UnfenceBroker {
                broker_id: 1,
                broker_epoch: 10
            }),
            Err(ReplayError::StaleBrokerEpoch { .. })
        ));
        delta
            .replay(&MetadataRecord::UnfenceBroker {
                broker_id: 1,
                broker_epoch: 20,
            })
            .unwrap();
        delta
            .replay(&MetadataRecord::Config {
                resource: ConfigResource::Topic("t".into()),
                name: "retention.ms".into(),
                value: Some("5".into()),
            })
            .unwrap();
        let image = delta.apply(3);
        assert_eq!(image.unfenced_brokers().count(), 1);
        assert_eq!(MetadataImage::decode(&image.encode()).unwrap(), image);
    }

    #[test]
    fn snapshots_of_formats_1_to_3_still_decode_with_their_replica_counts() {
        #[derive(Serialize)]
        struct Old<'a> {
            index: u64,
            brokers: &'a BTreeMap<BrokerId, BrokerRegistration>,
            topics: &'a BTreeMap<Uuid, Arc<TopicImage>>,
            topic_ids_by_name: &'a BTreeMap<String, Uuid>,
            configs: &'a BTreeMap<ConfigResource, ConfigMap>,
            next_producer_id: i64,
        }
        let mut delta = MetadataDelta::new(&MetadataImage::default());
        for id in [1, 2, 3] {
            delta.replay(&broker(id, id as i64)).expect("broker");
        }
        for record in topic_with_partition() {
            delta.replay(&record).expect("topic");
        }
        let image = delta.apply(9);
        let old = Old {
            index: image.index,
            brokers: &image.brokers,
            topics: &image.topics,
            topic_ids_by_name: &image.topic_ids_by_name,
            configs: &image.configs,
            next_producer_id: image.next_producer_id,
        };
        // Format 1 is format 2 without the reassignments at its end.
        let v1 = bincode::serialize(&(1u16, &old)).expect("encode v1");
        let v2 = bincode::serialize(&(2u16, &old, &image.reassignments)).expect("encode v2");
        // Format 3 is format 2 then the broker capacities.
        let v3 = bincode::serialize(&(
            3u16,
            &old,
            &image.reassignments,
            &image.broker_partitions_max,
        ))
        .expect("encode v3");
        for (format, bytes) in [(1, v1), (2, v2), (3, v3)] {
            let decoded = MetadataImage::decode(&bytes).expect("decode");
            assert_eq!(decoded, image, "format {format}");
            assert_eq!(decoded.replica_count(2), 1, "format {format}");
        }
        assert_eq!(
            MetadataImage::decode(&image.encode()).expect("decode"),
            image
        );
    }

    #[test]
    fn dynamic_max_broker_partitions_overrides_the_registered_one() {
        let mut delta = MetadataDelta::new(&MetadataImage::default());
        for id in [1, 2] {
            delta.replay(&broker(id, id as i64)).expect("broker");
            delta
                .replay(&MetadataRecord::BrokerCapacity {
                    broker_id: id,
                    broker_epoch: id as i64,
                    partitions_max: 70,
                })
                .expect("capacity");
        }
        let set = |delta: &mut MetadataDelta, broker: Option<BrokerId>, value: &str| {
            delta
                .replay(&MetadataRecord::Config {
                    resource: ConfigResource::Broker(broker),
                    name: PARTITIONS_MAX_KEY.into(),
                    value: Some(value.into()),
                })
                .expect("config");
        };
        let image = delta.apply(1);
        assert_eq!(
            [1, 2, 3].map(|b| image.partitions_max(b)),
            [Some(70), Some(70), None]
        );
        // Cluster-wide, then for broker 2 alone (which wins); -1 defers to the next.
        let mut delta = MetadataDelta::new(&image);
        set(&mut delta, None, "50");
        set(&mut delta, Some(2), "20");
        let image = delta.apply(2);
        assert_eq!(
            [1, 2, 3].map(|b| image.partitions_max(b)),
            [Some(50), Some(20), Some(50)]
        );
        let mut delta = MetadataDelta::new(&image);
        set(&mut delta, None, "-1");
        let image = delta.apply(3);
        assert_eq!(
            [1, 2, 3].map(|b| image.partitions_max(b)),
            [Some(70), Some(20), None]
        );
    }

    #[test]
    fn replica_counts_follow_partitions_moves_and_deletes() {
        let mut delta = MetadataDelta::new(&MetadataImage::default());
        for id in [1, 2, 3, 4] {
            delta.replay(&broker(id, id as i64)).expect("broker");
        }
        for record in topic_with_partition() {
            delta.replay(&record).expect("topic");
        }
        delta
            .replay(&MetadataRecord::BrokerCapacity {
                broker_id: 4,
                broker_epoch: 4,
                partitions_max: 70,
            })
            .expect("capacity");
        let image = delta.apply(1);
        assert_eq!([1, 2, 3, 4].map(|b| image.replica_count(b)), [1, 1, 1, 0]);
        assert_eq!(image.broker_partitions_max.get(&4), Some(&70));

        let mut delta = MetadataDelta::new(&image);
        delta
            .replay(&MetadataRecord::PartitionChange(PartitionChange {
                topic_id: Uuid(7),
                partition: 0,
                replicas: Some(vec![2, 3, 4]),
                isr: Some(vec![2, 3]),
                leader: Some(2),
            }))
            .expect("move");
        let moved = delta.apply(2);
        assert_eq!([1, 2, 3, 4].map(|b| moved.replica_count(b)), [0, 1, 1, 1]);
        assert_eq!(
            MetadataImage::decode(&moved.encode()).expect("decode"),
            moved
        );

        let mut delta = MetadataDelta::new(&moved);
        delta
            .replay(&MetadataRecord::RemoveTopic { topic_id: Uuid(7) })
            .expect("delete");
        delta
            .replay(&MetadataRecord::UnregisterBroker {
                broker_id: 4,
                broker_epoch: 4,
            })
            .expect("unregister");
        let empty = delta.apply(3);
        assert_eq!([2, 3, 4].map(|b| empty.replica_count(b)), [0, 0, 0]);
        assert!(empty.broker_partitions_max.is_empty());
    }

    #[test]
    fn scram_credentials_and_acls_replay_share_and_round_trip() {
        let credential = |iterations| ScramCredentialRecord {
            salt: vec![1; 16],
            stored_key: vec![2; 32],
            server_key: vec![3; 32],
            iterations,
        };
        let set = |user: &str, mechanism, iterations| MetadataRecord::UserScramCredential {
            user: user.into(),
            mechanism,
            credential: Some(credential(iterations)),
        };
        let remove = |user: &str, mechanism| MetadataRecord::UserScramCredential {
            user: user.into(),
            mechanism,
            credential: None,
        };
        let acl = AclRecord {
            resource_type: 2,
            resource_name: "orders".into(),
            pattern_type: 3,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: 3,
            permission_type: 3,
        };
        let base = MetadataImage::default();
        let mut delta = MetadataDelta::new(&base);
        delta
            .replay(&set("alice", ScramMechanism::ScramSha256, 4096))
            .expect("set");
        delta
            .replay(&set("alice", ScramMechanism::ScramSha512, 8192))
            .expect("second mechanism");
        delta
            .replay(&set("alice", ScramMechanism::ScramSha512, 5000))
            .expect("replaced");
        delta
            .replay(&MetadataRecord::Acl {
                id: Uuid(7),
                acl: Some(acl.clone()),
            })
            .expect("acl");
        assert!(matches!(
            delta.replay(&MetadataRecord::Acl {
                id: Uuid(7),
                acl: Some(acl.clone()),
            }),
            Err(ReplayError::Invalid(_))
        ));
        let image = delta.apply(3);
        let alice = &image.scram_credentials["alice"];
        assert_eq!(alice[&ScramMechanism::ScramSha512].iterations, 5000);
        assert_eq!(alice.len(), 2);
        assert_eq!(image.acls[&Uuid(7)], acl);
        assert!(base.scram_credentials.is_empty() && base.acls.is_empty());
        assert_eq!(
            MetadataImage::decode(&image.encode()).expect("decode"),
            image
        );

        // A change elsewhere shares the credentials and ACLs; a change to them does not.
        let mut delta = MetadataDelta::new(&image);
        delta.replay(&broker(1, 1)).expect("broker");
        let next = delta.apply(4);
        assert!(Arc::ptr_eq(&next.acls, &image.acls));
        assert!(Arc::ptr_eq(
            &next.scram_credentials,
            &image.scram_credentials
        ));

        let mut delta = MetadataDelta::new(&next);
        delta
            .replay(&remove("alice", ScramMechanism::ScramSha256))
            .expect("remove");
        delta
            .replay(&remove("alice", ScramMechanism::ScramSha512))
            .expect("remove the last");
        assert!(matches!(
            delta.replay(&remove("alice", ScramMechanism::ScramSha512)),
            Err(ReplayError::Invalid(_))
        ));
        delta
            .replay(&MetadataRecord::Acl {
                id: Uuid(7),
                acl: None,
            })
            .expect("acl removed");
        assert!(matches!(
            delta.replay(&MetadataRecord::Acl {
                id: Uuid(7),
                acl: None,
            }),
            Err(ReplayError::Invalid(_))
        ));
        let last = delta.apply(5);
        assert!(
            last.scram_credentials.is_empty(),
            "a user without credentials is gone"
        );
        assert!(last.acls.is_empty());
        assert_eq!(next.acls.len(), 1, "the earlier image is untouched");
    }

    fn quota(entity: &ClientQuotaEntity, key: &str, value: Option<f64>) -> MetadataRecord {
        MetadataRecord::ClientQuota {
            entity: entity.clone(),
            key: key.into(),
            value: value.map(QuotaValue),
        }
    }

    #[test]
    fn client_quotas_replay_share_and_round_trip() {
        let alice = ClientQuotaEntity {
            user: Some(QuotaEntityName::Named("alice".into())),
            ..Default::default()
        };
        let default_client = ClientQuotaEntity {
            client_id: Some(QuotaEntityName::Default),
            ..Default::default()
        };
        let base = MetadataImage::default();
        let mut delta = MetadataDelta::new(&base);
        delta
            .replay(&quota(&alice, "producer_byte_rate", Some(1024.0)))
            .expect("set");
        delta
            .replay(&quota(&alice, "consumer_byte_rate", Some(2048.0)))
            .expect("second key");
        delta
            .replay(&quota(&alice, "producer_byte_rate", Some(4096.0)))
            .expect("replaced");
        delta
            .replay(&quota(&default_client, "request_percentage", Some(50.0)))
            .expect("default client id");
        let image = delta.apply(1);
        assert_eq!(
            image.client_quotas[&alice]["producer_byte_rate"],
            QuotaValue(4096.0)
        );
        assert_eq!(image.client_quotas.len(), 2);
        assert!(base.client_quotas.is_empty());
        assert_eq!(
            MetadataImage::decode(&image.encode()).expect("decode"),
            image
        );

        // Shared until changed.
        let mut delta = MetadataDelta::new(&image);
        delta.replay(&broker(1, 1)).expect("broker");
        let next = delta.apply(2);
        assert!(Arc::ptr_eq(&next.client_quotas, &image.client_quotas));

        // Refused: no entity, an empty name, ip with a user, a value that is not a rate, the
        // removal of nothing.
        let mut delta = MetadataDelta::new(&next);
        let empty_name = ClientQuotaEntity {
            user: Some(QuotaEntityName::Named(String::new())),
            ..Default::default()
        };
        let ip_and_user = ClientQuotaEntity {
            ip: Some(QuotaEntityName::Default),
            ..alice.clone()
        };
        for bad in [
            quota(
                &ClientQuotaEntity::default(),
                "producer_byte_rate",
                Some(1.0),
            ),
            quota(&empty_name, "producer_byte_rate", Some(1.0)),
            quota(&ip_and_user, "connection_creation_rate", Some(1.0)),
            quota(&alice, "producer_byte_rate", Some(-1.0)),
            quota(&alice, "producer_byte_rate", Some(f64::NAN)),
            quota(&default_client, "producer_byte_rate", None),
        ] {
            assert!(
                matches!(delta.replay(&bad), Err(ReplayError::Invalid(_))),
                "{bad:?}"
            );
        }
        delta
            .replay(&quota(&alice, "producer_byte_rate", None))
            .expect("remove");
        delta
            .replay(&quota(&alice, "consumer_byte_rate", None))
            .expect("remove the last");
        let last = delta.apply(3);
        assert_eq!(
            last.client_quotas.keys().collect::<Vec<_>>(),
            [&default_client],
            "an entity without quotas is gone"
        );
        assert_eq!(
            next.client_quotas.len(),
            2,
            "the earlier image is untouched"
        );
    }

    #[test]
    fn snapshots_of_format_4_decode_without_client_quotas() {
        let mut delta = MetadataDelta::new(&MetadataImage::default());
        delta.replay(&broker(1, 1)).expect("broker");
        delta
            .replay(&MetadataRecord::Acl {
                id: Uuid(3),
                acl: Some(AclRecord {
                    resource_type: 2,
                    resource_name: "orders".into(),
                    pattern_type: 3,
                    principal: "User:alice".into(),
                    host: "*".into(),
                    operation: 3,
                    permission_type: 3,
                }),
            })
            .expect("acl");
        delta
            .replay(&MetadataRecord::UserScramCredential {
                user: "alice".into(),
                mechanism: ScramMechanism::ScramSha256,
                credential: Some(ScramCredentialRecord {
                    salt: vec![1],
                    stored_key: vec![2],
                    server_key: vec![3],
                    iterations: 4096,
                }),
            })
            .expect("credential");
        let image = delta.apply(7);
        // Format 4: format 5 without the client quotas at its end.
        let v4 = bincode::serialize(&(
            4u16,
            image.index,
            &image.brokers,
            &image.topics,
            &image.topic_ids_by_name,
            &image.configs,
            image.next_producer_id,
            &image.reassignments,
            &image.broker_partitions_max,
            &image.scram_credentials,
            &image.acls,
        ))
        .expect("encode v4");
        let decoded = MetadataImage::decode(&v4).expect("decode v4");
        assert_eq!(decoded, image);
        assert!(decoded.client_quotas.is_empty());
        assert_eq!(decoded.acls.len(), 1);
    }
}
