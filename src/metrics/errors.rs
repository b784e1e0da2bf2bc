//! The error codes a response carries (Kafka's `AbstractResponse::errorCounts`).
//!
//! Every error code is reported once per place it appears, NONE (0) left out. The places
//! follow Kafka's per-response `errorCounts`: e.g. FindCoordinator counts its per-coordinator
//! codes (v4+) or else the top-level one, OffsetFetch its per-group codes (v8+) or else the
//! top-level one, and CreateTopics leaves out `topic_config_error_code` (the topic was made;
//! only its configs were withheld).

use kafka_protocol::messages::ResponseKind;

use crate::protocol::fetch_encode::FetchAnswer;

/// Calls `each` with every error code in `response` other than NONE (0), once per place it
/// appears (top level, per topic, per partition, per member...), as Kafka's errorCounts.
pub fn response_error_codes(response: &ResponseKind, each: &mut dyn FnMut(i16)) {
    let mut e = |code: i16| {
        if code != 0 {
            each(code);
        }
    };
    match response {
        ResponseKind::Produce(r) => r
            .responses
            .iter()
            .flat_map(|t| &t.partition_responses)
            .for_each(|p| e(p.error_code)),
        ResponseKind::Fetch(r) => {
            e(r.error_code);
            r.responses
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| e(p.error_code));
        }
        ResponseKind::ListOffsets(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| e(p.error_code)),
        ResponseKind::Metadata(r) => {
            // The top-level code is v13+ (Kafka's errorCounts predates it).
            e(r.error_code);
            for t in &r.topics {
                e(t.error_code);
                t.partitions.iter().for_each(|p| e(p.error_code));
            }
        }
        ResponseKind::ApiVersions(r) => e(r.error_code),
        ResponseKind::CreateTopics(r) => r.topics.iter().for_each(|t| e(t.error_code)),
        ResponseKind::DeleteTopics(r) => r.responses.iter().for_each(|t| e(t.error_code)),
        ResponseKind::DeleteRecords(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| e(p.error_code)),
        ResponseKind::InitProducerId(r) => e(r.error_code),
        ResponseKind::OffsetForLeaderEpoch(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| e(p.error_code)),
        ResponseKind::DescribeConfigs(r) => r.results.iter().for_each(|c| e(c.error_code)),
        ResponseKind::CreatePartitions(r) => r.results.iter().for_each(|t| e(t.error_code)),
        ResponseKind::AlterConfigs(r) => r.responses.iter().for_each(|c| e(c.error_code)),
        ResponseKind::IncrementalAlterConfigs(r) => {
            r.responses.iter().for_each(|c| e(c.error_code))
        }
        ResponseKind::DescribeCluster(r) => e(r.error_code),
        ResponseKind::DescribeLogDirs(r) => {
            e(r.error_code);
            r.results.iter().for_each(|d| e(d.error_code));
        }
        ResponseKind::DescribeQuorum(r) => {
            e(r.error_code);
            r.topics
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| e(p.error_code));
        }
        ResponseKind::ElectLeaders(r) => {
            e(r.error_code);
            r.replica_election_results
                .iter()
                .flat_map(|t| &t.partition_result)
                .for_each(|p| e(p.error_code));
        }
        ResponseKind::AlterPartitionReassignments(r) => {
            e(r.error_code);
            r.responses
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| e(p.error_code));
        }
        ResponseKind::ListPartitionReassignments(r) => e(r.error_code),
        ResponseKind::FindCoordinator(r) => {
            // Kafka: the per-key coordinators (v4+) when there are any, else the top level.
            if r.coordinators.is_empty() {
                e(r.error_code);
            } else {
                r.coordinators.iter().for_each(|c| e(c.error_code));
            }
        }
        ResponseKind::JoinGroup(r) => e(r.error_code),
        ResponseKind::SyncGroup(r) => e(r.error_code),
        ResponseKind::Heartbeat(r) => e(r.error_code),
        ResponseKind::LeaveGroup(r) => {
            e(r.error_code);
            r.members.iter().for_each(|m| e(m.error_code));
        }
        ResponseKind::OffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| e(p.error_code)),
        ResponseKind::OffsetFetch(r) => {
            // Kafka: the groups and their partitions (v8+) when there are groups, else the
            // top level and the v0-v7 partitions.
            if r.groups.is_empty() {
                e(r.error_code);
                r.topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .for_each(|p| e(p.error_code));
            } else {
                for g in &r.groups {
                    e(g.error_code);
                    g.topics
                        .iter()
                        .flat_map(|t| &t.partitions)
                        .for_each(|p| e(p.error_code));
                }
            }
        }
        ResponseKind::ListGroups(r) => e(r.error_code),
        ResponseKind::DescribeGroups(r) => r.groups.iter().for_each(|g| e(g.error_code)),
        ResponseKind::DeleteGroups(r) => r.results.iter().for_each(|g| e(g.error_code)),
        ResponseKind::ConsumerGroupHeartbeat(r) => e(r.error_code),
        ResponseKind::ConsumerGroupDescribe(r) => r.groups.iter().for_each(|g| e(g.error_code)),
        ResponseKind::OffsetDelete(r) => {
            e(r.error_code);
            r.topics
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| e(p.error_code));
        }
        ResponseKind::AddPartitionsToTxn(r) => {
            // Kafka: the top level only when the v3-and-below results are not in use (v4+).
            if r.results_by_topic_v3_and_below.is_empty() {
                e(r.error_code);
            }
            r.results_by_topic_v3_and_below
                .iter()
                .chain(
                    r.results_by_transaction
                        .iter()
                        .flat_map(|x| &x.topic_results),
                )
                .flat_map(|t| &t.results_by_partition)
                .for_each(|p| e(p.partition_error_code));
        }
        ResponseKind::AddOffsetsToTxn(r) => e(r.error_code),
        ResponseKind::EndTxn(r) => e(r.error_code),
        ResponseKind::DescribeTransactions(r) => {
            r.transaction_states.iter().for_each(|s| e(s.error_code))
        }
        ResponseKind::ListTransactions(r) => e(r.error_code),
        ResponseKind::DescribeProducers(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| e(p.error_code)),
        ResponseKind::TxnOffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| e(p.error_code)),
        ResponseKind::WriteTxnMarkers(r) => r
            .markers
            .iter()
            .flat_map(|m| &m.topics)
            .flat_map(|t| &t.partitions)
            .for_each(|p| e(p.error_code)),
        ResponseKind::SaslHandshake(r) => e(r.error_code),
        ResponseKind::SaslAuthenticate(r) => e(r.error_code),
        ResponseKind::DescribeUserScramCredentials(r) => {
            // Kafka counts only the results; the top level carries e.g. a refused
            // authorization (with no results), which is counted here too.
            e(r.error_code);
            r.results.iter().for_each(|u| e(u.error_code));
        }
        ResponseKind::AlterUserScramCredentials(r) => {
            r.results.iter().for_each(|u| e(u.error_code))
        }
        ResponseKind::CreateAcls(r) => r.results.iter().for_each(|a| e(a.error_code)),
        ResponseKind::DescribeAcls(r) => e(r.error_code),
        ResponseKind::DeleteAcls(r) => {
            for f in &r.filter_results {
                e(f.error_code);
                f.matching_acls.iter().for_each(|a| e(a.error_code));
            }
        }
        ResponseKind::DescribeClientQuotas(r) => e(r.error_code),
        ResponseKind::AlterClientQuotas(r) => r.entries.iter().for_each(|q| e(q.error_code)),
        // APIs the broker does not serve (e.g. the KRaft controller's): nothing counted.
        _ => {}
    }
}

/// The same for a Fetch answer (the broker's own Fetch response type): the top-level code
/// and each partition's.
pub fn fetch_error_codes(answer: &FetchAnswer, each: &mut dyn FnMut(i16)) {
    std::iter::once(answer.error_code)
        .chain(
            answer
                .topics
                .iter()
                .flat_map(|t| &t.partitions)
                .map(|p| p.data.error_code),
        )
        .filter(|&code| code != 0)
        .for_each(each);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::fetch_encode::{FetchPartitionAnswer, FetchTopicAnswer};
    use kafka_protocol::messages::fetch_response::PartitionData;
    use kafka_protocol::messages::offset_fetch_response::{
        OffsetFetchResponsePartition, OffsetFetchResponseTopic,
    };
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::messages::{
        HeartbeatResponse, MetadataResponse, OffsetFetchResponse, ProduceResponse,
    };

    fn codes(response: &ResponseKind) -> Vec<i16> {
        let mut out = Vec::new();
        response_error_codes(response, &mut |c| out.push(c));
        out
    }

    #[test]
    fn produce_counts_each_failed_partition() {
        let partition = |code| PartitionProduceResponse::default().with_error_code(code);
        let response = ProduceResponse::default().with_responses(vec![
            TopicProduceResponse::default()
                .with_partition_responses(vec![partition(6), partition(0)]),
            TopicProduceResponse::default().with_partition_responses(vec![partition(3)]),
        ]);
        assert_eq!(codes(&ResponseKind::Produce(response)), vec![6, 3]);
    }

    #[test]
    fn offset_fetch_counts_the_top_level_error() {
        let response = OffsetFetchResponse::default()
            .with_error_code(15)
            .with_topics(vec![OffsetFetchResponseTopic::default().with_partitions(
                vec![
                    OffsetFetchResponsePartition::default(),
                    OffsetFetchResponsePartition::default().with_error_code(3),
                ],
            )]);
        assert_eq!(codes(&ResponseKind::OffsetFetch(response)), vec![15, 3]);
    }

    #[test]
    fn fetch_answer_counts_top_level_and_partitions() {
        let partition = |code| FetchPartitionAnswer {
            data: PartitionData::default().with_error_code(code),
            records: None,
        };
        let answer = FetchAnswer {
            error_code: 0,
            topics: vec![FetchTopicAnswer {
                name: "t".into(),
                topic_id: uuid::Uuid::nil(),
                partitions: vec![partition(0), partition(74), partition(1)],
            }],
            ..FetchAnswer::default()
        };
        let mut out = Vec::new();
        fetch_error_codes(&answer, &mut |c| out.push(c));
        assert_eq!(out, vec![74, 1]);

        let failed = FetchAnswer {
            error_code: 70,
            ..FetchAnswer::default()
        };
        out.clear();
        fetch_error_codes(&failed, &mut |c| out.push(c));
        assert_eq!(out, vec![70]);
    }

    #[test]
    fn no_errors_no_calls() {
        assert!(codes(&ResponseKind::Metadata(MetadataResponse::default())).is_empty());
        assert!(codes(&ResponseKind::Heartbeat(HeartbeatResponse::default())).is_empty());
        assert_eq!(
            codes(&ResponseKind::Heartbeat(
                HeartbeatResponse::default().with_error_code(27)
            )),
            vec![27]
        );
    }
}
