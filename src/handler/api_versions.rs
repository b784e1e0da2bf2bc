//! ApiVersions: the APIs and versions this broker serves, from the handler registry.

use kafka_protocol::messages::ApiVersionsRequest;
use kafka_protocol::messages::ApiVersionsResponse;
use kafka_protocol::messages::api_versions_response::ApiVersion;

use super::SUPPORTED_APIS;

pub const VERSIONS: (i16, i16) = (0, 4);

pub fn handle(_request: &ApiVersionsRequest, _version: i16) -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(
        SUPPORTED_APIS
            .iter()
            .map(|(key, min, max)| {
                ApiVersion::default()
                    .with_api_key(*key as i16)
                    .with_min_version(*min)
                    .with_max_version(*max)
            })
            .collect(),
    )
}
