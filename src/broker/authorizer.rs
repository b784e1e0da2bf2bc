//! The one place a request's permissions are decided: Kafka's `StandardAuthorizer` over the
//! ACLs of the metadata quorum (`security::acl` holds the decision; this module feeds it the
//! image's ACLs, the listener's principal and the client's address).
//!
//! Every request gets an [`Access`] in its context before its handler runs: a snapshot of the
//! ACL index and the principal, so the decisions of one request are consistent and batched
//! (Kafka's `authorize(actions)`), however ACLs change meanwhile. Handlers ask it per
//! (operation, resource) exactly where Kafka's `KafkaApis` asks, and answer Kafka's
//! *_AUTHORIZATION_FAILED codes. An [`Access`] records that it was asked; the dispatch checks
//! every API but the handshake's did ask (`Access::was_consulted`).
//!
//! Without an authorizer (`authorizer.class.name` empty, Kafka's default) every principal may
//! do everything, and the ACL APIs answer SECURITY_DISABLED, as Kafka's do.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use sluice_raft::records::{AclRecord, Uuid};

use crate::controller::acl_binding;
use crate::controller::client::ImageWatch;
use crate::metrics::Metrics;
use crate::security::acl::{
    self, Acls, Action, AuthorizerConfig, CLUSTER_NAME, Operation, ResourceType,
    supported_operations,
};

/// The broker's authorizer: its settings and the ACL index of the latest image.
pub struct Authorizer {
    /// `None`: no authorizer configured; everything is allowed.
    config: Option<Arc<AuthorizerConfig>>,
    images: ImageWatch,
    metrics: Arc<Metrics>,
    /// The index of the image's ACLs, and the map it was built from (rebuilt when an image
    /// holds another).
    index: Mutex<(AclMap, Arc<Acls>)>,
}

/// The image's ACLs by record id.
type AclMap = Arc<BTreeMap<Uuid, AclRecord>>;

impl Authorizer {
    pub fn new(
        config: Option<AuthorizerConfig>,
        images: ImageWatch,
        metrics: Arc<Metrics>,
    ) -> Authorizer {
        Authorizer {
            config: config.map(Arc::new),
            images,
            metrics,
            index: Mutex::new((Arc::default(), Arc::new(Acls::new()))),
        }
    }

    /// Whether an authorizer is configured (the ACL APIs are served).
    pub fn is_enabled(&self) -> bool {
        self.config.is_some()
    }

    /// The ACL index of the current image: rebuilt only when the image's ACLs changed (images
    /// share the map until a record changes it).
    fn acls(&self) -> Arc<Acls> {
        let image = self.images.image();
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        if !Arc::ptr_eq(&index.0, &image.acls) {
            let mut acls = Acls::new();
            for (id, record) in image.acls.iter() {
                acls.insert(id.0, acl_binding(record));
            }
            self.metrics
                .acls
                .store(acls.len() as i64, Ordering::Relaxed);
            *index = (Arc::clone(&image.acls), Arc::new(acls));
        }
        Arc::clone(&index.1)
    }

    /// The permissions of one request from `principal` at `host`.
    pub fn access(&self, principal: Arc<str>, host: IpAddr) -> Access {
        let decider = self.config.as_ref().map(|config| {
            Arc::new(Decider {
                acls: self.acls(),
                config: Arc::clone(config),
                metrics: Arc::clone(&self.metrics),
            })
        });
        Access {
            decider,
            principal,
            host,
            consulted: Arc::new(AtomicBool::new(false)),
        }
    }
}

struct Decider {
    acls: Arc<Acls>,
    config: Arc<AuthorizerConfig>,
    metrics: Arc<Metrics>,
}

/// What one request may do: asked per (operation, resource) by its handler.
#[derive(Clone)]
pub struct Access {
    /// `None`: no authorizer; everything is allowed.
    decider: Option<Arc<Decider>>,
    principal: Arc<str>,
    host: IpAddr,
    consulted: Arc<AtomicBool>,
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Access")
            .field("principal", &self.principal)
            .field("host", &self.host)
            .field("authorizer", &self.decider.is_some())
            .finish()
    }
}

impl Access {
    /// Everything allowed (no authorizer): for requests a node makes of itself and tests.
    pub fn unrestricted(principal: Arc<str>, host: IpAddr) -> Access {
        Access {
            decider: None,
            principal,
            host,
            consulted: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether an authorizer decides (the ACL APIs are served).
    pub fn is_enforced(&self) -> bool {
        self.decider.is_some()
    }

    /// Whether the handler asked anything (the dispatch checks it did).
    pub fn was_consulted(&self) -> bool {
        self.consulted.load(Ordering::Relaxed)
    }

    /// Marks the request as checked without a question: an API Kafka lets every
    /// authenticated client call (ApiVersions, DescribeCluster).
    pub fn open_to_all(&self) {
        self.consulted.store(true, Ordering::Relaxed);
    }

    /// Whether the principal may do `operation` on the resource `name` of `resource_type`.
    pub fn allows(&self, operation: Operation, resource_type: ResourceType, name: &str) -> bool {
        self.consulted.store(true, Ordering::Relaxed);
        let Some(decider) = &self.decider else {
            return true;
        };
        let action = Action::new(operation, resource_type, name);
        let allowed = acl::authorize(
            &decider.acls,
            &decider.config,
            &self.principal,
            self.host,
            &action,
        );
        self.count(decider, allowed, operation, resource_type, name);
        allowed
    }

    /// Whether the principal may do `operation` on the cluster.
    pub fn allows_cluster(&self, operation: Operation) -> bool {
        self.allows(operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    pub fn allows_topic(&self, operation: Operation, topic: &str) -> bool {
        self.allows(operation, ResourceType::Topic, topic)
    }

    pub fn allows_group(&self, operation: Operation, group: &str) -> bool {
        self.allows(operation, ResourceType::Group, group)
    }

    pub fn allows_transactional_id(&self, operation: Operation, id: &str) -> bool {
        self.allows(operation, ResourceType::TransactionalId, id)
    }

    /// Whether the principal may do `operation` on at least one resource of `resource_type`
    /// (Kafka's `authorizeByResourceType`: an idempotent producer with WRITE on any topic).
    pub fn allows_any(&self, operation: Operation, resource_type: ResourceType) -> bool {
        self.consulted.store(true, Ordering::Relaxed);
        let Some(decider) = &self.decider else {
            return true;
        };
        let allowed = acl::authorize_by_resource_type(
            &decider.acls,
            &decider.config,
            &self.principal,
            self.host,
            operation,
            resource_type,
        );
        self.count(decider, allowed, operation, resource_type, "*");
        allowed
    }

    /// Kafka's `authorized_operations` bit field for a resource: the operations the principal
    /// may do of those the type supports (all of them without an authorizer).
    pub fn authorized_operations(&self, resource_type: ResourceType, name: &str) -> i32 {
        self.consulted.store(true, Ordering::Relaxed);
        match &self.decider {
            None => supported_operations(resource_type)
                .iter()
                .fold(0, |bits, operation| bits | (1 << operation.code())),
            Some(decider) => acl::authorized_operations(
                &decider.acls,
                &decider.config,
                &self.principal,
                self.host,
                resource_type,
                name,
            ),
        }
    }

    fn count(
        &self,
        decider: &Decider,
        allowed: bool,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) {
        if allowed {
            decider
                .metrics
                .authorizations_allowed
                .fetch_add(1, Ordering::Relaxed);
        } else {
            decider
                .metrics
                .authorizations_denied
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                principal = %self.principal,
                host = %self.host,
                %operation,
                %resource_type,
                resource = name,
                "authorization denied"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_authorizer_everything_is_allowed_with_kafkas_bit_fields() {
        let access = Access::unrestricted(Arc::from("User:ANONYMOUS"), [127, 0, 0, 1].into());
        assert!(!access.was_consulted());
        assert!(access.allows_topic(Operation::Write, "orders"));
        assert!(access.was_consulted());
        assert_eq!(
            access.authorized_operations(ResourceType::Topic, "orders"),
            0b1101_1111_1000
        );
        assert_eq!(
            access.authorized_operations(ResourceType::Cluster, CLUSTER_NAME),
            0b1_1111_1010_0000
        );
    }
}
