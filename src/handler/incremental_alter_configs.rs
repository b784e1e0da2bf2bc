//! IncrementalAlterConfigs for topics and brokers (dynamic broker configs, per broker or
//! cluster-wide with an empty name): SET, DELETE, APPEND and SUBTRACT (list values), decided
//! and committed by the active controller. The answer waits until this node applied them.

use std::time::Duration;

use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use sluice_raft::image::MetadataImage;
use sluice_raft::records::ConfigResource;

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_TOPIC};
use super::{RequestContext, str_bytes};
use crate::broker::Broker;
use crate::controller::service::ControllerRequest;
use crate::protocol::errors;

pub const VERSIONS: (i16, i16) = (0, 1);

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;
const ALTER_WAIT: Duration = Duration::from_secs(30);

pub async fn handle(
    broker: &Broker,
    _context: &RequestContext,
    request: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in request.resources {
        let name = resource.resource_name.to_string();
        let response = AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        let target = match config_resource(resource.resource_type, &name) {
            Ok(target) => target,
            Err(message) => {
                responses.push(
                    response
                        .with_error_code(errors::INVALID_REQUEST)
                        .with_error_message(Some(str_bytes(message))),
                );
                continue;
            }
        };
        let image = broker.image();
        let current = image.configs.get(&target).cloned().unwrap_or_default();
        let mut changes: Vec<(String, Option<String>)> = Vec::new();
        let mut invalid = None;
        for config in &resource.configs {
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
                    if items.is_empty() {
                        None
                    } else {
                        Some(items.join(","))
                    }
                }
                (SET | APPEND | SUBTRACT, None) => {
                    invalid = Some(format!("{key}: a value is required"));
                    break;
                }
                (other, _) => {
                    invalid = Some(format!("{key}: unknown operation {other}"));
                    break;
                }
            };
            changes.push((key, change));
        }
        if let Some(message) = invalid {
            responses.push(
                response
                    .with_error_code(errors::INVALID_CONFIG)
                    .with_error_message(Some(str_bytes(message))),
            );
            continue;
        }
        let outcome = apply(broker, &image, target, changes, request.validate_only).await;
        responses.push(match outcome {
            Ok(()) => response,
            Err((code, message)) => response
                .with_error_code(code)
                .with_error_message(Some(str_bytes(message))),
        });
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

/// The config resource a request names: a topic, a broker by id, or (empty name) every
/// broker's cluster-wide default.
pub(super) fn config_resource(resource_type: i8, name: &str) -> Result<ConfigResource, String> {
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
pub(super) async fn apply(
    broker: &Broker,
    image: &MetadataImage,
    target: ConfigResource,
    changes: Vec<(String, Option<String>)>,
    validate_only: bool,
) -> Result<(), (i16, String)> {
    if validate_only {
        return crate::controller::alter_configs(image, &target, &changes)
            .map(|_| ())
            .map_err(|e| (e.kafka_error_code(), e.to_string()));
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
