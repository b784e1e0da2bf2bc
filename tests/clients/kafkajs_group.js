// kafkajs (its own group protocol code) consumes with a group: run(), commits, and the
// committed offsets are what it read.
// usage: node kafkajs_group.js BOOTSTRAP
const { Kafka, logLevel } = require('kafkajs');

const bootstrap = process.argv[2];
const topic = 'kafkajs-group';
const groupId = 'kafkajs-group';
const partitions = 3;
const perPartition = 40;

async function main() {
  const kafka = new Kafka({ clientId: 'sluice-test', brokers: [bootstrap], logLevel: logLevel.WARN });
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: partitions, replicationFactor: 1 }], waitForLeaders: true });
  const producer = kafka.producer();
  await producer.connect();
  const messages = [];
  for (let p = 0; p < partitions; p++) {
    for (let i = 0; i < perPartition; i++) messages.push({ value: `${p}-${i}`, partition: p });
  }
  await producer.send({ topic, acks: -1, messages });
  await producer.disconnect();

  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 500 });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  const seen = new Set();
  const started = Date.now();
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${seen.size} in 60 s`)), 60000);
    consumer.run({
      autoCommit: true,
      eachMessage: async ({ partition, message }) => {
        const key = `${partition}/${message.offset}`;
        if (seen.has(key)) throw new Error(`${key} read twice`);
        seen.add(key);
        if (seen.size === partitions * perPartition) {
          clearTimeout(timer);
          resolve();
        }
      },
    }).catch(reject);
  });
  const elapsed = Date.now() - started;
  await consumer.disconnect(); // commits what was read, then leaves
  const committed = await admin.fetchOffsets({ groupId, topics: [topic] });
  const offsets = committed[0].partitions.map((p) => `${p.partition}:${p.offset}`).sort();
  const expected = [...Array(partitions).keys()].map((p) => `${p}:${perPartition}`);
  if (JSON.stringify(offsets) !== JSON.stringify(expected)) {
    throw new Error(`committed ${offsets}, expected ${expected}`);
  }
  const described = await admin.describeGroups([groupId]);
  if (described.groups[0].state !== 'Empty') throw new Error(`state ${described.groups[0].state}`);
  await admin.disconnect();
  console.log(`kafkajs group: ${seen.size} records in ${elapsed} ms, committed ${offsets}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
