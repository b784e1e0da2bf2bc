//! IncrementalAlterConfigs for topics and brokers (dynamic broker configs, per broker or
//! cluster-wide with an empty name): SET, DELETE, APPEND and SUBTRACT (list values), decided
//! and committed by the active controller. The answer waits until this node applied them.

use std::time::Duration;

use kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use sluice_raft::image::MetadataImage;
use sluice_raft::records::{ConfigMap, ConfigResource};

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_TOPIC, authorize_configs};
use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::controller::service::ControllerRequest;
use crate::protocol::errors::{ApiError, KafkaError};
use crate::security::acl::Operation;

pub const VERSIONS: (i16, i16) = (0, 1);

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;
const ALTER_WAIT: Duration = Duration::from_secs(30);

/// Keys with the value to set, or `None` to return them to their defaults.
pub(super) type Changes = Vec<(String, Option<String>)>;

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    if request.resources.is_empty() {
        context.access.open_to_all();
    }
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in request.resources {
        let outcome = alter_resource(
            broker,
            context,
            resource.resource_type,
            resource.resource_name.as_str(),
            request.validate_only,
            |current| incremental_changes(current, &resource.configs),
        )
        .await;
        let response = AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name);
        responses.push(match outcome {
            Ok(()) => response,
            Err(error) => response
                .with_error_code(error.error.code())
                .with_error_message(Some(str_bytes(error.message))),
        });
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

/// The changes SET, DELETE, APPEND and SUBTRACT make to `current`: a value to set, or `None`
/// to return a key to its default. INVALID_CONFIG for a missing value or unknown operation.
fn incremental_changes(
    current: &ConfigMap,
    configs: &[AlterableConfig],
) -> Result<Changes, ApiError> {
    let invalid = |message: String| ApiError::new(KafkaError::InvalidConfig, message);
    let mut changes = Vec::with_capacity(configs.len());
    for config in configs {
        let key = config.name.to_string();
        let value = config.value.as_ref().map(|v| v.to_string());
        let change = match (config.config_operation, value) {
            (SET, Some(value)) => Some(value),
            (DELETE, _) => None,
            (APPEND | SUBTRACT, Some(value)) => {
                let mut items: Vec<String> = current
                    .get(&key)
                    .map(|v| {
                        v.split(',')
                            .map(|s| s.trim().to_owned())
                            .filter(|s| !s.is_empty())
                            .collect()
                    })
                    .unwrap_or_default();
                for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    if config.config_operation == APPEND {
                        if !items.iter().any(|i| i == item) {
                            items.push(item.to_owned());
                        }
                    } else {
                        items.retain(|i| i != item);
                    }
                }
                (!items.is_empty()).then(|| items.join(","))
            }
            (SET | APPEND | SUBTRACT, None) => {
                return Err(invalid(format!("{key}: a value is required")));
            }
            (other, _) => return Err(invalid(format!("{key}: unknown operation {other}"))),
        };
        changes.push((key, change));
    }
    Ok(changes)
}

/// One resource of an AlterConfigs or IncrementalAlterConfigs request: the resource parsed
/// (INVALID_REQUEST when it cannot be), `changes` computed from its current configs, then
/// validated and (unless `validate_only`) committed. The error and its message otherwise.
pub(super) async fn alter_resource(
    broker: &Broker,
    context: &RequestContext,
    resource_type: i8,
    name: &str,
    validate_only: bool,
    changes: impl FnOnce(&ConfigMap) -> Result<Changes, ApiError>,
) -> Result<(), ApiError> {
    authorize_configs(context, resource_type, name, Operation::AlterConfigs)?;
    let target = config_resource(resource_type, name)
        .map_err(|message| ApiError::new(KafkaError::InvalidRequest, message))?;
    let image = broker.image();
    let empty = ConfigMap::new();
    let changes = changes(image.configs.get(&target).unwrap_or(&empty))?;
    apply(broker, &image, target, changes, validate_only).await
}

/// The config resource a request names: a topic, a broker by id, or (empty name) every
/// broker's cluster-wide default.
fn config_resource(resource_type: i8, name: &str) -> Result<ConfigResource, String> {
    match resource_type {
        RESOURCE_TOPIC => Ok(ConfigResource::Topic(name.to_owned())),
        RESOURCE_BROKER if name.is_empty() => Ok(ConfigResource::Broker(None)),
        RESOURCE_BROKER => name
            .parse()
            .map(|id| ConfigResource::Broker(Some(id)))
            .map_err(|_| format!("'{name}' is not a broker id")),
        other => Err(format!("resource type {other} is not supported")),
    }
}

/// Validates `changes` (a value to set, or `None` to return a key to its default) and, unless
/// `validate_only`, has the controller commit them and waits until this node applied them.
async fn apply(
    broker: &Broker,
    image: &MetadataImage,
    target: ConfigResource,
    changes: Changes,
    validate_only: bool,
) -> Result<(), ApiError> {
    if validate_only {
        return crate::controller::alter_configs(image, &target, &changes)
            .map(|_| ())
            .map_err(ApiError::from);
    }
    let wanted = changes.clone();
    let resource = target.clone();
    broker
        .call_controller(
            ControllerRequest::AlterConfigs {
                resource: target,
                changes,
            },
            ALTER_WAIT,
        )
        .await?;
    broker
        .wait_for_image(ALTER_WAIT, |image| {
            let now = image.configs.get(&resource);
            wanted
                .iter()
                .all(|(k, v)| now.and_then(|c| c.get(k)) == v.as_ref())
        })
        .await;
    Ok(())
}
