// kafkajs (Node's TLS and its own SASL code) over TLS listeners: produces and consumes in a
// consumer group over SSL with a client certificate (mTLS), or over SASL_SSL with
// SCRAM-SHA-512; a wrong SCRAM password is refused with kafkajs's authentication error.
// usage: node kafkajs_secured.js mtls BOOTSTRAP CERTS_DIR TOPIC
//        node kafkajs_secured.js scram BOOTSTRAP CERTS_DIR TOPIC USER PASSWORD
//        node kafkajs_secured.js scram-refused BOOTSTRAP CERTS_DIR USER WRONG_PASSWORD
const fs = require('fs');
const path = require('path');
const { Kafka, logLevel } = require('kafkajs');

const [mode, bootstrap, certs, ...rest] = process.argv.slice(2);
const read = (name) => fs.readFileSync(path.join(certs, name), 'utf-8');

function client(sasl) {
  const ssl = { ca: [read('ca.pem')] };
  if (!sasl) {
    ssl.cert = read('alice.pem');
    ssl.key = read('alice.key');
  }
  return new Kafka({
    clientId: `kafkajs-${mode}`, brokers: [bootstrap], ssl, sasl,
    logLevel: logLevel.NOTHING, retry: { retries: 2 },
  });
}

async function roundtrip(kafka, topic, who) {
  const values = Array.from({ length: 20 }, (_, i) => `${who}-${i}`);
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  await producer.send({ topic, acks: -1, messages: values.map((value) => ({ value })) });
  await producer.disconnect();

  const consumer = kafka.consumer({ groupId: `tls-kafkajs-${who}` });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const got = [];
  const done = new Promise((resolve) => {
    consumer.run({
      eachMessage: async ({ message }) => {
        got.push(message.value.toString());
        if (got.length === values.length) resolve();
      },
    });
  });
  const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error(`${who}: read ${got.length} of ${values.length} in 30 s`)), 30000));
  await Promise.race([done, timeout]);
  await consumer.disconnect();
  if (JSON.stringify(got) !== JSON.stringify(values)) throw new Error(`${who} read ${got}`);
  console.log(`kafkajs ${who}: produced and consumed ${got.length} records on ${topic}`);
}

async function main() {
  if (mode === 'mtls') {
    await roundtrip(client(null), rest[0], 'alice');
  } else if (mode === 'scram') {
    const [topic, username, password] = rest;
    await roundtrip(client({ mechanism: 'scram-sha-512', username, password }), topic, username);
  } else if (mode === 'scram-refused') {
    const [username, password] = rest;
    const admin = client({ mechanism: 'scram-sha-512', username, password }).admin();
    try {
      await admin.connect();
      await admin.listTopics();
    } catch (error) {
      if (error.name !== 'KafkaJSSASLAuthenticationError') throw error;
      console.log(`kafkajs: refused as expected: ${error.message}`);
      return;
    }
    throw new Error('a wrong SCRAM password was accepted');
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
}

main().then(() => process.exit(0), (error) => { console.error(error); process.exit(1); });
