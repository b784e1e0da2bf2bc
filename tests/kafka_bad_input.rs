//! Bad input on raw sockets: negative and oversized frame lengths, a truncated header, an
//! unknown API key, unsupported versions, an array count of INT32_MAX, and record batches with
//! a wrong CRC or a lying length. Each gets Kafka's error or a closed connection; the broker
//! keeps serving other clients, its memory does not jump, and nothing reaches the log.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use sluice::log::batch::BatchBuilder;
use support::SingleNode;

const REQUEST_BYTES_MAX: usize = 1 << 20;

fn connect(node: &SingleNode) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", node.kafka_port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream
}

/// A request frame with a v1 header (key, version, correlation id, client id).
fn frame(api_key: i16, version: i16, correlation_id: i32, body: &[u8]) -> Vec<u8> {
    let mut request = Vec::new();
    request.extend_from_slice(&api_key.to_be_bytes());
    request.extend_from_slice(&version.to_be_bytes());
    request.extend_from_slice(&correlation_id.to_be_bytes());
    request.extend_from_slice(&4i16.to_be_bytes());
    request.extend_from_slice(b"test");
    request.extend_from_slice(body);
    let mut out = (request.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&request);
    out
}

/// The next response body (after the size), or `None` when the broker closed the connection.
fn response(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).ok()?;
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut body).ok()?;
    Some(body)
}

fn assert_closed(stream: &mut TcpStream, what: &str) {
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("{what}: the connection was not closed ({other:?})"),
    }
}

/// ApiVersions v0 on a new connection answers with no error: the broker still serves.
fn assert_serving(node: &SingleNode) {
    let mut stream = connect(node);
    stream.write_all(&frame(18, 0, 7, &[])).expect("write");
    let body = response(&mut stream).expect("ApiVersions answer");
    assert_eq!(&body[..4], &7i32.to_be_bytes());
    assert_eq!(&body[4..6], &0i16.to_be_bytes(), "ApiVersions error code");
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as i16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A Produce v3 body for one partition of `topic`.
fn produce_body(topic: &str, records: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&(-1i16).to_be_bytes()); // transactional_id: null
    body.extend_from_slice(&1i16.to_be_bytes()); // acks
    body.extend_from_slice(&10_000i32.to_be_bytes()); // timeout_ms
    body.extend_from_slice(&1i32.to_be_bytes()); // one topic
    string(&mut body, topic);
    body.extend_from_slice(&1i32.to_be_bytes()); // one partition
    body.extend_from_slice(&0i32.to_be_bytes()); // partition 0
    body.extend_from_slice(&(records.len() as i32).to_be_bytes());
    body.extend_from_slice(records);
    body
}

/// (error code, base offset) from a Produce v3 response for one partition.
fn produce_result(body: &[u8]) -> (i16, i64) {
    let mut at = 4; // correlation id
    at += 4; // topics count
    let name_len = i16::from_be_bytes([body[at], body[at + 1]]) as usize;
    at += 2 + name_len + 4 + 4; // name, partitions count, partition index
    let code = i16::from_be_bytes([body[at], body[at + 1]]);
    let base = i64::from_be_bytes(body[at + 2..at + 10].try_into().expect("8 bytes"));
    (code, base)
}

fn batch(values: &[&str]) -> Vec<u8> {
    let mut builder = BatchBuilder::new(0, 1_700_000_000_000);
    for v in values {
        builder.push(1_700_000_000_000, Some(b"k"), Some(v.as_bytes()), &[]);
    }
    builder.build()
}

fn produce(node: &SingleNode, records: &[u8]) -> (i16, i64) {
    let mut stream = connect(node);
    stream
        .write_all(&frame(0, 3, 11, &produce_body("bad", records)))
        .expect("write");
    produce_result(&response(&mut stream).expect("Produce answer"))
}

#[test]
fn bad_frames_close_only_their_connection_and_bad_batches_never_reach_the_log() {
    let node = SingleNode::start(&[
        &format!("socket.request.max.bytes={REQUEST_BYTES_MAX}"),
        "num.partitions=1",
    ]);
    // Create the topic with a Metadata v4 request that allows auto-creation.
    let mut metadata = Vec::new();
    metadata.extend_from_slice(&1i32.to_be_bytes());
    string(&mut metadata, "bad");
    metadata.push(1);
    let mut stream = connect(&node);
    stream.write_all(&frame(3, 4, 1, &metadata)).expect("write");
    response(&mut stream).expect("Metadata answer");
    let rss_before = node.rss_kib();

    // A negative frame length.
    let mut stream = connect(&node);
    stream.write_all(&(-5i32).to_be_bytes()).expect("write");
    assert_closed(&mut stream, "negative length");
    // A length over socket.request.max.bytes: refused before any body is read.
    let mut stream = connect(&node);
    stream
        .write_all(&((REQUEST_BYTES_MAX + 1) as i32).to_be_bytes())
        .expect("write");
    assert_closed(&mut stream, "oversized length");
    // A length that lies (claims 512 MiB, sends little): refused, nothing allocated for it.
    let mut stream = connect(&node);
    stream.write_all(&(i32::MAX).to_be_bytes()).expect("write");
    assert_closed(&mut stream, "INT32_MAX length");
    // A frame shorter than a header.
    let mut stream = connect(&node);
    stream.write_all(&[0, 0, 0, 3, 0, 18, 0]).expect("write");
    assert_closed(&mut stream, "truncated header");
    // An unknown API key.
    let mut stream = connect(&node);
    stream.write_all(&frame(999, 0, 1, &[])).expect("write");
    assert_closed(&mut stream, "unknown API key");
    // ApiVersions at an unsupported version: a v0 answer with UNSUPPORTED_VERSION (35) and
    // the versions we serve, so the client can retry.
    let mut stream = connect(&node);
    stream.write_all(&frame(18, 99, 5, &[])).expect("write");
    let body = response(&mut stream).expect("ApiVersions fallback");
    assert_eq!(&body[..4], &5i32.to_be_bytes());
    assert_eq!(i16::from_be_bytes([body[4], body[5]]), 35);
    let count = i32::from_be_bytes(body[6..10].try_into().expect("4 bytes"));
    assert!(count >= 10, "{count} APIs listed");
    // Another API at an unsupported version: closed, as the Java broker does.
    let mut stream = connect(&node);
    stream.write_all(&frame(3, 99, 1, &[])).expect("write");
    assert_closed(&mut stream, "Metadata v99");
    // An array count of INT32_MAX with no elements behind it.
    let mut stream = connect(&node);
    stream
        .write_all(&frame(3, 1, 1, &i32::MAX.to_be_bytes()))
        .expect("write");
    assert_closed(&mut stream, "INT32_MAX topics");
    let mut huge_produce = Vec::new();
    huge_produce.extend_from_slice(&(-1i16).to_be_bytes());
    huge_produce.extend_from_slice(&1i16.to_be_bytes());
    huge_produce.extend_from_slice(&1000i32.to_be_bytes());
    huge_produce.extend_from_slice(&i32::MAX.to_be_bytes());
    let mut stream = connect(&node);
    stream
        .write_all(&frame(0, 3, 1, &huge_produce))
        .expect("write");
    assert_closed(&mut stream, "INT32_MAX produce topics");
    assert_serving(&node);

    // A batch with a wrong CRC.
    let mut corrupt = batch(&["a", "b"]);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0x55;
    assert_eq!(produce(&node, &corrupt).0, 2, "wrong CRC: CORRUPT_MESSAGE");
    // A batch whose length field claims more bytes than follow.
    let mut lying = batch(&["c"]);
    let claimed = i32::from_be_bytes(lying[8..12].try_into().expect("4 bytes")) + 100;
    lying[8..12].copy_from_slice(&claimed.to_be_bytes());
    assert_eq!(produce(&node, &lying).0, 2, "lying length: CORRUPT_MESSAGE");
    // ... and one claiming fewer bytes (the rest is a truncated second batch).
    let mut short = batch(&["d", "e"]);
    let claimed = i32::from_be_bytes(short[8..12].try_into().expect("4 bytes")) - 10;
    short[8..12].copy_from_slice(&claimed.to_be_bytes());
    assert_eq!(produce(&node, &short).0, 2, "short length: CORRUPT_MESSAGE");
    // Garbage that is not a batch at all.
    assert_eq!(produce(&node, &[7u8; 100]).0, 2, "garbage: CORRUPT_MESSAGE");

    // acks=0 gets no answer; a failed one closes the connection, as Kafka does, so the
    // producer notices (here: a partition that does not exist).
    let mut body = produce_body("bad", &batch(&["lost"]));
    body[2..4].copy_from_slice(&0i16.to_be_bytes());
    let index_at = body.len() - 4 - batch(&["lost"]).len() - 4;
    body[index_at..index_at + 4].copy_from_slice(&7i32.to_be_bytes());
    let mut stream = connect(&node);
    stream.write_all(&frame(0, 3, 12, &body)).expect("write");
    assert_closed(&mut stream, "failed acks=0 produce");

    // Nothing reached the log: the first good batch gets offset 0.
    assert_eq!(produce(&node, &batch(&["good"])), (0, 0));
    assert_serving(&node);
    let rss_after = node.rss_kib();
    assert!(
        rss_after < rss_before + 64 * 1024,
        "resident memory jumped from {rss_before} KiB to {rss_after} KiB"
    );
    println!("RSS {rss_before} KiB before bad input, {rss_after} KiB after");
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let node = SingleNode::start(&[]);
    let mut stream = connect(&node);
    let mut all = Vec::new();
    for correlation_id in 0..50 {
        // Alternate ApiVersions and Metadata (all topics).
        if correlation_id % 2 == 0 {
            all.extend_from_slice(&frame(18, 0, correlation_id, &[]));
        } else {
            all.extend_from_slice(&frame(3, 1, correlation_id, &(-1i32).to_be_bytes()));
        }
    }
    stream.write_all(&all).expect("write");
    for correlation_id in 0..50i32 {
        let body = response(&mut stream).expect("answer");
        assert_eq!(&body[..4], &correlation_id.to_be_bytes());
    }
}

#[test]
fn max_connections_and_idle_connections_are_closed() {
    let node = SingleNode::start(&["max.connections=3", "connections.max.idle.ms=1500"]);
    // Connections are served up to max.connections; the next is closed at once. The node's
    // controller holds one of them (its liveness watch on the broker's listener, counted as
    // Kafka counts its inter-broker connections on a single listener) except for the moment
    // after the idle timeout closes it: the test gets two or three.
    let mut open: Vec<TcpStream> = Vec::new();
    let mut refused = loop {
        let mut stream = connect(&node);
        let served =
            stream.write_all(&frame(18, 0, 1, &[])).is_ok() && response(&mut stream).is_some();
        if !served {
            break stream;
        }
        open.push(stream);
        assert!(open.len() <= 3, "more than max.connections=3 served");
    };
    assert!(open.len() >= 2, "refused with {} open", open.len());
    assert_closed(&mut refused, "connection over max.connections");
    assert!(node.gauge("sluice_connections_refused_total") >= Some(1));
    assert!(node.gauge("sluice_connections") <= Some(3));
    // Idle past connections.max.idle.ms: closed by the broker, and the slots free up.
    std::thread::sleep(Duration::from_millis(2500));
    for stream in &mut open {
        assert_closed(stream, "idle connection");
    }
    assert_serving(&node);
}

/// A connection from `source` (a loopback address of its own, so that the node's own
/// connections to 127.0.0.1 do not count against the per-address limit).
fn connect_from(node: &SingleNode, source: [u8; 4]) -> TcpStream {
    use std::os::fd::FromRawFd;
    let address = |ip: [u8; 4], port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(ip),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a socket this function owns, and addresses that live for the calls.
    let stream = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "socket");
        let local = address(source, 0);
        assert_eq!(
            libc::bind(fd, (&local as *const libc::sockaddr_in).cast(), len),
            0,
            "bind {source:?}"
        );
        let remote = address([127, 0, 0, 1], node.kafka_port);
        assert_eq!(
            libc::connect(fd, (&remote as *const libc::sockaddr_in).cast(), len),
            0,
            "connect"
        );
        TcpStream::from_raw_fd(fd)
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream
}

#[test]
fn connection_quotas_close_a_crowded_address_and_pace_new_connections() {
    let node = SingleNode::start(&[
        "max.connections.per.ip=2",
        "max.connections.per.ip.overrides=127.0.0.1:1000",
        "listener.name.plaintext.max.connection.creation.rate=5",
    ]);
    // Two connections from 127.0.0.2 are served; a third is closed at once, and served again
    // once one of the two has gone (127.0.0.1, the node's own address, has an override).
    let source = [127, 0, 0, 2];
    let mut open: Vec<TcpStream> = (0..2).map(|_| connect_from(&node, source)).collect();
    for stream in &mut open {
        stream.write_all(&frame(18, 0, 1, &[])).expect("write");
        response(stream).expect("served");
    }
    let mut third = connect_from(&node, source);
    assert_closed(&mut third, "connection over max.connections.per.ip");
    assert_eq!(
        node.gauge("sluice_connections_refused_per_ip_total"),
        Some(1)
    );
    // The slot frees once the broker has seen the connection end: try until it has.
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    let again = loop {
        let mut again = connect_from(&node, source);
        if again.write_all(&frame(18, 0, 1, &[])).is_ok() && response(&mut again).is_some() {
            break again;
        }
        assert!(
            Instant::now() < deadline,
            "not served 10 s after a slot freed"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    drop((open, again));
    std::thread::sleep(Duration::from_millis(200));

    // Past the creation rate (5 a second, bursts of 5), new connections wait their turn: each
    // is served, and the waits add up in /metrics.
    // (Each pair from an address of its own: the per-address limit is not what this checks.)
    for i in 0..6 {
        let source = [127, 0, 0, 3 + i];
        let mut pair: Vec<TcpStream> = (0..2).map(|_| connect_from(&node, source)).collect();
        for stream in &mut pair {
            stream.write_all(&frame(18, 0, 1, &[])).expect("write");
            response(stream).expect("served after waiting");
        }
    }
    let throttled = node
        .gauge("sluice_connection_creation_throttle_ms_total")
        .unwrap_or(0);
    assert!(throttled > 500, "accepts waited {throttled} ms in all");
}

/// A JoinGroup v1 body: one "range" protocol whose metadata is `metadata` (the client's
/// bytes, not necessarily a consumer subscription).
fn join_group_body(group: &str, metadata: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    string(&mut body, group);
    body.extend_from_slice(&10_000i32.to_be_bytes()); // session_timeout_ms
    body.extend_from_slice(&10_000i32.to_be_bytes()); // rebalance_timeout_ms
    string(&mut body, ""); // member_id
    string(&mut body, "consumer"); // protocol_type
    body.extend_from_slice(&1i32.to_be_bytes());
    string(&mut body, "range");
    body.extend_from_slice(&(metadata.len() as i32).to_be_bytes());
    body.extend_from_slice(metadata);
    body
}

#[test]
fn a_member_whose_subscription_bytes_lie_does_not_take_the_broker_down() {
    let node = SingleNode::start(&[]);
    let mut stream = connect(&node);
    // "metadata" read as a subscription claims 1.9 billion topics. The coordinator once
    // reserved room for them when asked which topics the group subscribes to (OffsetDelete):
    // the broker's lazy allocator absorbed it, the system allocator of the unit tests aborted.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    // FindCoordinator creates __consumer_offsets.
    let mut key = Vec::new();
    string(&mut key, "liar");
    stream.write_all(&frame(10, 0, 1, &key)).expect("write");
    response(&mut stream).expect("FindCoordinator answer");
    let mut correlation_id = 1;
    loop {
        correlation_id += 1;
        stream
            .write_all(&frame(
                11,
                1,
                correlation_id,
                &join_group_body("liar", b"metadata"),
            ))
            .expect("write");
        let body = response(&mut stream).expect("JoinGroup answer");
        let code = i16::from_be_bytes([body[4], body[5]]);
        if code == 0 {
            break;
        }
        // The coordinator is created and loaded on first use.
        assert!(
            [14, 15, 16].contains(&code) && std::time::Instant::now() < deadline,
            "JoinGroup error {code}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut body = Vec::new();
    string(&mut body, "liar");
    body.extend_from_slice(&1i32.to_be_bytes());
    string(&mut body, "t");
    body.extend_from_slice(&1i32.to_be_bytes());
    body.extend_from_slice(&0i32.to_be_bytes());
    stream
        .write_all(&frame(47, 0, 99, &body))
        .expect("write OffsetDelete");
    let answer = response(&mut stream).expect("OffsetDelete answer");
    assert_eq!(&answer[..4], &99i32.to_be_bytes());
    assert_eq!(
        i16::from_be_bytes([answer[4], answer[5]]),
        0,
        "no group-level error: the member subscribes to no topic it can name"
    );
    assert_serving(&node);
}
