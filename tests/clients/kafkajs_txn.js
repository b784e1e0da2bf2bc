// kafkajs transactions (its own transaction manager): a committed transaction with consumed
// offsets sent to it, an aborted one (its records written first, and other offsets sent), a
// second committed one; then a kafkajs consumer (read_committed, kafkajs' default) reads only
// the committed records. txn_suite.py check-other then checks the topic with librdkafka.
// Values: commit-kafkajs-<transaction>-<i>, abort-kafkajs-<transaction>-<i>, 10 per
// transaction over 2 partitions; the committed transaction sends offset 7 of partition 0 for
// GROUP, the aborted one 99.
// usage: node kafkajs_txn.js BOOTSTRAP TOPIC GROUP
const { Kafka, logLevel } = require('kafkajs');

const [bootstrap, topic, groupId] = process.argv.slice(2);
const partitions = 2;
const perTransaction = 10;

const values = (kind, transaction) =>
  [...Array(perTransaction).keys()].map((i) => `${kind}-kafkajs-${transaction}-${i}`);
const messages = (vs) => vs.map((value, i) => ({ value, partition: i % partitions }));
const offsets = (offset) => ({
  consumerGroupId: groupId,
  topics: [{ topic, partitions: [{ partition: 0, offset: String(offset) }] }],
});

async function main() {
  const kafka = new Kafka({ clientId: 'sluice-txn-test', brokers: [bootstrap], logLevel: logLevel.WARN });
  const producer = kafka.producer({ transactionalId: 'kafkajs-txn', idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();

  let txn = await producer.transaction();
  await txn.send({ topic, acks: -1, messages: messages(values('commit', 1)) });
  await txn.sendOffsets(offsets(7));
  await txn.commit();

  txn = await producer.transaction();
  await txn.send({ topic, acks: -1, messages: messages(values('abort', 2)) });
  await txn.sendOffsets(offsets(99));
  await txn.abort();

  txn = await producer.transaction();
  await txn.send({ topic, acks: -1, messages: messages(values('commit', 3)) });
  await txn.commit();
  await producer.disconnect();
  console.log('kafkajs: committed, aborted, committed');

  const expected = [...values('commit', 1), ...values('commit', 3)];
  const consumer = kafka.consumer({ groupId: `${groupId}-reader`, sessionTimeout: 10000, heartbeatInterval: 500 });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  const got = [];
  await consumer.run({ eachMessage: async ({ message }) => { got.push(message.value.toString()); } });
  const deadline = Date.now() + 30000;
  while (got.length < expected.length && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
  }
  await new Promise((r) => setTimeout(r, 1500));
  await consumer.disconnect();
  const seen = new Set(got);
  if (seen.size !== got.length) throw new Error(`read_committed read duplicates: ${got}`);
  const wrong = got.filter((v) => !expected.includes(v));
  const missing = expected.filter((v) => !seen.has(v));
  if (wrong.length || missing.length) {
    throw new Error(`kafkajs read_committed: unexpected ${wrong}, missing ${missing}`);
  }
  console.log(`kafkajs: read_committed read the ${got.length} committed records`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
