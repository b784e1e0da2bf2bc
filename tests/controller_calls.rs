//! The controller's requests end to end on one quorum member (in-process, over its gRPC
//! listener): broker registration and unfencing, topic creation, partition addition,
//! AlterPartition with stale and current epochs, deletion, and the Kafka error codes a caller
//! gets back.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sluice::controller::service::{
    ControllerRequest, ControllerResponse, ControllerService, call_at,
};
use sluice::controller::{AlterPartition, Defaults, NewTopic};
use sluice_raft::records::{Endpoint, RegisterBroker, Uuid};
use sluice_raft::{NodeInfo, Quorum, QuorumConfig};

async fn ask(addr: &str, request: ControllerRequest) -> ControllerResponse {
    call_at(addr, &request, Duration::from_secs(10))
        .await
        .expect("controller reachable")
}

fn error_code(response: &ControllerResponse) -> Option<i16> {
    match response {
        ControllerResponse::Error { code, .. } => Some(*code),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_requests_commit_or_answer_kafka_errors() {
    let dir = tempfile::tempdir().unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let voters = BTreeMap::from([(
        1,
        NodeInfo {
            addr: addr.to_string(),
        },
    )]);
    let mut config = QuorumConfig::new(1, dir.path().join("meta"), addr, voters);
    config.election_timeout_min_ms = 200;
    config.election_timeout_max_ms = 400;
    config.heartbeat_interval_ms = 50;
    let quorum = Arc::new(Quorum::start(config).await.unwrap());
    quorum
        .wait_for_leader(Duration::from_secs(10))
        .await
        .expect("single member leads");
    let defaults = Defaults {
        partitions: 2,
        replication_factor: 1,
        unclean_leader_election: false,
    };
    quorum.set_call_handler(ControllerService::new(
        &quorum,
        defaults,
        Duration::from_secs(30),
    ));
    let addr = addr.to_string();

    let registration = RegisterBroker {
        broker_id: 1,
        incarnation_id: Uuid(1),
        broker_epoch: 0,
        endpoints: vec![Endpoint {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 9092,
            security_protocol: "PLAINTEXT".into(),
        }],
        rack: None,
        fenced: true,
    };
    let ControllerResponse::Ok {
        broker_epoch: Some(epoch),
        ..
    } = ask(&addr, ControllerRequest::RegisterBroker(registration)).await
    else {
        panic!("registration refused")
    };
    let stale = ask(
        &addr,
        ControllerRequest::Heartbeat {
            broker_id: 1,
            broker_epoch: epoch - 1,
            caught_up: true,
        },
    )
    .await;
    assert_eq!(error_code(&stale), Some(77), "STALE_BROKER_EPOCH");
    let heartbeat = ask(
        &addr,
        ControllerRequest::Heartbeat {
            broker_id: 1,
            broker_epoch: epoch,
            caught_up: true,
        },
    )
    .await;
    assert_eq!(
        heartbeat,
        ControllerResponse::Ok {
            broker_epoch: None,
            fenced: Some(false)
        }
    );

    let topic = NewTopic {
        name: "orders".into(),
        partitions: -1,
        replication_factor: -1,
        ..NewTopic::default()
    };
    assert!(matches!(
        ask(&addr, ControllerRequest::CreateTopic(topic.clone())).await,
        ControllerResponse::Ok { .. }
    ));
    assert_eq!(
        error_code(&ask(&addr, ControllerRequest::CreateTopic(topic)).await),
        Some(36),
        "TOPIC_ALREADY_EXISTS"
    );
    let too_many = NewTopic {
        name: "x".into(),
        partitions: 1,
        replication_factor: 3,
        ..NewTopic::default()
    };
    assert_eq!(
        error_code(&ask(&addr, ControllerRequest::CreateTopic(too_many)).await),
        Some(38),
        "INVALID_REPLICATION_FACTOR"
    );
    let grow = ControllerRequest::CreatePartitions {
        topic: "orders".into(),
        total: 4,
        assignments: Vec::new(),
    };
    assert!(matches!(
        ask(&addr, grow).await,
        ControllerResponse::Ok { .. }
    ));
    let image = quorum.image();
    let orders = image.topic_by_name("orders").expect("committed");
    assert_eq!(orders.partitions.len(), 4);

    let partition = &orders.partitions[&0];
    let change = AlterPartition {
        broker: 1,
        topic_id: orders.id,
        partition: 0,
        leader_epoch: partition.leader_epoch,
        partition_epoch: partition.partition_epoch + 1,
        new_isr: vec![1],
    };
    let stale = ask(&addr, ControllerRequest::AlterPartition(change.clone())).await;
    assert_eq!(error_code(&stale), Some(95), "INVALID_UPDATE_VERSION");
    let current = AlterPartition {
        partition_epoch: partition.partition_epoch,
        ..change
    };
    assert!(matches!(
        ask(&addr, ControllerRequest::AlterPartition(current)).await,
        ControllerResponse::Ok { .. }
    ));
    assert_eq!(
        quorum
            .image()
            .partition(orders.id, 0)
            .unwrap()
            .partition_epoch,
        partition.partition_epoch + 1
    );

    assert!(matches!(
        ask(&addr, ControllerRequest::DeleteTopic("orders".into())).await,
        ControllerResponse::Ok { .. }
    ));
    assert_eq!(
        error_code(&ask(&addr, ControllerRequest::DeleteTopic("orders".into())).await),
        Some(3),
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    drop(image);
    match Arc::try_unwrap(quorum) {
        Ok(quorum) => quorum.shutdown().await,
        Err(_) => panic!("quorum still shared"),
    }
}
