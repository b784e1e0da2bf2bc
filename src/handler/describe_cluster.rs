//! DescribeCluster: the cluster id, the active controller and the brokers, from the image.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::{RequestContext, listener_endpoint, str_bytes};
use crate::broker::Broker;
use crate::protocol::errors::KafkaError;
use crate::security::acl::{CLUSTER_NAME, Operation, ResourceType};

pub const VERSIONS: (i16, i16) = (0, 2);

/// `endpoint_type` 1: brokers (the only kind this listener describes).
const ENDPOINT_TYPE_BROKERS: i8 = 1;

pub fn handle(
    broker: &Broker,
    context: &RequestContext,
    request: DescribeClusterRequest,
) -> DescribeClusterResponse {
    // Kafka serves DescribeCluster to every client; only the operations need DESCRIBE.
    context.access.open_to_all();
    let mut response = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(broker.config.cluster_id.clone()))
        .with_controller_id(BrokerId(broker.controller_id()))
        .with_endpoint_type(ENDPOINT_TYPE_BROKERS);
    if context.api_version >= 1 && request.endpoint_type != ENDPOINT_TYPE_BROKERS {
        return response
            .with_error_code(KafkaError::UnsupportedEndpointType.code())
            .with_error_message(Some(str_bytes(
                "this listener describes brokers only (endpoint_type 1)",
            )));
    }
    if request.include_cluster_authorized_operations {
        response.cluster_authorized_operations =
            if context.access.allows_cluster(Operation::Describe) {
                context
                    .access
                    .authorized_operations(ResourceType::Cluster, CLUSTER_NAME)
            } else {
                0
            };
    }
    let image = broker.image();
    response.brokers = image
        .brokers
        .values()
        .filter(|b| !b.fenced || request.include_fenced_brokers)
        .filter_map(|b| {
            let endpoint = listener_endpoint(b, &context.listener_name)?;
            Some(
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(b.registration.broker_id))
                    .with_host(str_bytes(endpoint.host.clone()))
                    .with_port(i32::from(endpoint.port))
                    .with_rack(b.registration.rack.clone().map(str_bytes))
                    .with_is_fenced(b.fenced),
            )
        })
        .collect();
    response
}
