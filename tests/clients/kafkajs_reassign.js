// kafkajs asks for partition moves (AlterPartitionReassignments) in one request and prints,
// per partition, "TOPIC-PARTITION ok" or "TOPIC-PARTITION ERROR_TYPE".
// usage: node kafkajs_reassign.js BOOTSTRAP TOPIC PARTITION=REPLICA,REPLICA ...
const { Kafka, logLevel } = require('kafkajs');

async function main() {
  const [bootstrap, topic, ...moves] = process.argv.slice(2);
  const partitionAssignment = moves.map((move) => {
    const [partition, replicas] = move.split('=');
    return { partition: Number(partition), replicas: replicas.split(',').map(Number) };
  });
  const kafka = new Kafka({ clientId: 'sluice-test', brokers: bootstrap.split(','), logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const failed = new Map();
  try {
    await admin.alterPartitionReassignments({ topics: [{ topic, partitionAssignment }], timeout: 30000 });
  } catch (e) {
    if (!e.errors) throw e;
    for (const error of e.errors) failed.set(error.partition, error.type);
  }
  await admin.disconnect();
  for (const { partition } of partitionAssignment) {
    console.log(`${topic}-${partition} ${failed.get(partition) || 'ok'}`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
