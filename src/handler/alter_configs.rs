//! AlterConfigs, the legacy API Kafka still serves (confluent-kafka's `alter_configs`): the
//! configs given become the resource's whole set; keys set before and not given return to
//! their defaults. Validated and committed as IncrementalAlterConfigs does.

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse};

use super::incremental_alter_configs::{Changes, alter_resource};
use super::{RequestContext, str_bytes};
use crate::broker::Broker;

pub const VERSIONS: (i16, i16) = (0, 2);

pub async fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: AlterConfigsRequest,
) -> AlterConfigsResponse {
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
            |current| {
                let mut changes: Changes = resource
                    .configs
                    .iter()
                    .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                    .collect();
                // The request is the whole set: what was set and is not named goes back to
                // its default.
                for key in current.keys() {
                    if !changes.iter().any(|(k, _)| k == key) {
                        changes.push((key.clone(), None));
                    }
                }
                Ok(changes)
            },
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
    AlterConfigsResponse::default().with_responses(responses)
}
