// kafkajs (its own protocol code) produces and consumes a few thousand records.
// usage: node kafkajs_roundtrip.js BOOTSTRAP
const { Kafka, logLevel, CompressionTypes } = require('kafkajs');

const bootstrap = process.argv[2];
const topic = 'kafkajs';
const count = 3000;
const partitions = 3;

async function main() {
  const kafka = new Kafka({ clientId: 'sluice-test', brokers: [bootstrap], logLevel: logLevel.WARN });
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: partitions, replicationFactor: 1 }], waitForLeaders: true });
  await admin.disconnect();

  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  for (let start = 0; start < count; start += 500) {
    const messages = [];
    for (let i = start; i < start + 500; i++) {
      messages.push({ key: `k${i}`, value: `value-${i}`, partition: i % partitions, headers: { n: `${i}` } });
    }
    await producer.send({ topic, acks: -1, compression: CompressionTypes.GZIP, messages });
  }
  await producer.disconnect();

  // Consume with kafkajs's own Fetch code, by partition (its consumer needs a group
  // coordinator; this reads like an assigned consumer does).
  const createCluster = Object.getOwnPropertySymbols(kafka).find((s) => s.toString().includes('createCluster'));
  const cluster = kafka[createCluster]({ isolationLevel: 1 });
  await cluster.connect();
  await cluster.addTargetTopic(topic);
  await cluster.refreshMetadata();
  const seen = new Map();
  for (const meta of cluster.findTopicPartitionMetadata(topic)) {
    const broker = await cluster.findBroker({ nodeId: meta.leader });
    let offset = 0n;
    for (let round = 0; round < 1000; round++) {
      const response = await broker.fetch({
        replicaId: -1, isolationLevel: 1, maxWaitTime: 200, minBytes: 1, maxBytes: 1048576,
        topics: [{ topic, partitions: [{ partition: meta.partitionId, fetchOffset: offset.toString(), maxBytes: 65536 }] }],
      });
      const partition = response.responses[0].partitions[0];
      if (partition.errorCode !== 0) throw new Error(`fetch error ${partition.errorCode}`);
      const messages = partition.messages.filter((m) => BigInt(m.offset) >= offset);
      for (const m of messages) {
        const i = Number(m.value.toString().split('-')[1]);
        if (seen.has(i)) throw new Error(`record ${i} twice`);
        if (m.key.toString() !== `k${i}`) throw new Error(`key of ${i}`);
        if (i % partitions !== meta.partitionId) throw new Error(`partition of ${i}`);
        if (m.headers.n.toString() !== `${i}`) throw new Error(`headers of ${i}`);
        seen.set(i, m);
        offset = BigInt(m.offset) + 1n;
      }
      if (offset >= BigInt(partition.highWatermark)) break;
    }
  }
  await cluster.disconnect();
  if (seen.size !== count) throw new Error(`consumed ${seen.size} of ${count}`);
  console.log(`kafkajs: ${count} records round-tripped`);
}

main().then(() => { console.log('kafkajs: ok'); process.exit(0); })
  .catch((e) => { console.error(e); process.exit(1); });
