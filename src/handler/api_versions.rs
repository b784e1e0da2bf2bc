//! ApiVersions: the APIs and versions this broker serves, from the handler registry.

use kafka_protocol::messages::ApiVersionsRequest;
use kafka_protocol::messages::ApiVersionsResponse;
use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};

use super::SUPPORTED_APIS;

pub const VERSIONS: (i16, i16) = (0, 4);

/// KIP-584 features (ApiVersions v3+): `transaction.version` 2, so clients that know it use
/// transaction version 2 (KIP-890 part 2: an epoch bump per transaction, partitions and
/// offsets added by the brokers).
const TRANSACTION_VERSION: i16 = crate::txn::state::TRANSACTION_VERSION_2;

pub fn handle(_request: &ApiVersionsRequest, _version: i16) -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_supported_features(vec![
            SupportedFeatureKey::default()
                .with_name(super::str_bytes("transaction.version"))
                .with_min_version(0)
                .with_max_version(TRANSACTION_VERSION),
        ])
        .with_finalized_features_epoch(1)
        .with_finalized_features(vec![
            FinalizedFeatureKey::default()
                .with_name(super::str_bytes("transaction.version"))
                .with_min_version_level(TRANSACTION_VERSION)
                .with_max_version_level(TRANSACTION_VERSION),
        ])
        .with_api_keys(
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
