// The console in a real browser: Debian's Chromium, headless, driven by puppeteer-core.
//
// usage: node console_browser.js pages URL EXPECTED.json SCREENSHOT_DIR
//        node console_browser.js degraded URL BROKER_ID   (prints the seconds until the
//        overview shows BROKER_ID down and the cluster degraded)
//
// `pages`: every page loads without a console error, a page error or a failed request; the
// numbers on the pages equal the CLI's `--output json` in EXPECTED.json; the message browser
// shows confluent-kafka's records byte for byte (hex view); a screenshot of each page at
// 1280x800 and at phone width (390x844) is written to SCREENSHOT_DIR.
"use strict";

const fs = require("fs");
const path = require("path");
const puppeteer = require("puppeteer-core");

const CHROMIUM = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => fs.existsSync(p));
if (!CHROMIUM) {
  console.error("no Chromium at /usr/bin/chromium (scripts/test installs Debian's chromium)");
  process.exit(2);
}

function fail(message) {
  console.error("FAIL: " + message);
  process.exit(1);
}

function check(condition, message) {
  if (!condition) fail(message);
}

async function launch() {
  return puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
  });
}

// A page that records what went wrong in it.
async function watchedPage(browser, problems) {
  // Each page in its own context: a browser keeps Basic credentials per origin.
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  page.on("console", (message) => {
    if (message.type() === "error") problems.push(`console error: ${message.text()}`);
  });
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  page.on("requestfailed", (request) => {
    problems.push(`request failed: ${request.url()} ${request.failure()?.errorText}`);
  });
  page.on("response", (response) => {
    if (response.status() >= 400) problems.push(`HTTP ${response.status()} for ${response.url()}`);
  });
  return page;
}

// Opens `route` and waits for the page to draw (body[data-loaded] changes).
async function open(page, base, route) {
  const before = await page.evaluate(() => document.body?.dataset.loaded ?? "").catch(() => "");
  const url = base + "/#/" + route;
  if (page.url().startsWith(base + "/")) {
    await page.evaluate((hash) => { location.hash = hash; }, "#/" + route);
  } else {
    await page.goto(url, { waitUntil: "load" });
  }
  await page.waitForFunction((b) => document.body.dataset.loaded && document.body.dataset.loaded !== b,
    { timeout: 20000 }, before);
  const error = await page.$eval("[data-test=error]", (e) => e.textContent).catch(() => null);
  check(error === null, `${route}: the page shows an error: ${error}`);
}

async function text(page, selector) {
  return page.$eval(selector, (e) => e.textContent.trim()).catch(() => null);
}

async function number(page, selector) {
  const value = await text(page, selector);
  check(value !== null, `nothing at ${selector}`);
  return value === "–" ? null : Number(value.replace(/,/g, ""));
}

async function screenshots(page, dir, name) {
  // Each mode may be the first to run (the Rust tests take turns in any order).
  fs.mkdirSync(dir, { recursive: true });
  for (const [label, viewport] of [["1280x800", { width: 1280, height: 800 }], ["phone-390x844", { width: 390, height: 844, isMobile: true }]]) {
    await page.setViewport(viewport);
    await new Promise((r) => setTimeout(r, 150));
    await page.screenshot({ path: path.join(dir, `${name}-${label}.png`), fullPage: true });
  }
  await page.setViewport({ width: 1280, height: 800 });
}

async function pages(base, expectedPath, dir) {
  const expected = JSON.parse(fs.readFileSync(expectedPath, "utf8"));
  const browser = await launch();
  const problems = [];
  const page = await watchedPage(browser, problems);
  await page.setViewport({ width: 1280, height: 800 });
  const checked = [];

  // Overview = `sluice cluster status --output json`.
  await open(page, base, "");
  const cluster = expected.cluster;
  check(await text(page, "[data-field=health]") === "Healthy", "the overview does not say Healthy");
  check(await text(page, "[data-field=cluster-id]") === cluster.cluster_id, "cluster id differs");
  check(await number(page, "[data-field=partitions]") === cluster.partitions, "partition count differs");
  check(await number(page, "[data-field=under-replicated]") === cluster.under_replicated_partitions, "under-replicated differs");
  check(await number(page, "[data-field=quorum-leader]") === cluster.quorum.leader_id, "quorum leader differs");
  for (const broker of cluster.brokers) {
    const leaders = await number(page, `[data-broker="${broker.id}"] [data-field=leaders]`);
    check(leaders === broker.leaders, `broker ${broker.id} leads ${leaders} on the page, ${broker.leaders} in the CLI`);
    check((await text(page, `[data-broker="${broker.id}"] [data-field=broker-state]`)) === "up", `broker ${broker.id} not up`);
  }
  checked.push("overview");
  await screenshots(page, dir, "overview");

  // Topics list and topic page = `sluice topics describe --output json`.
  await open(page, base, "topics");
  for (const topic of expected.topics) {
    const row = `[data-topic="${topic.name}"]`;
    check(await number(page, `${row} [data-field=partitions]`) === topic.partitions.length, `${topic.name}: partitions differ`);
    check(await number(page, `${row} [data-field=replication-factor]`) === topic.partitions[0].replicas.length, `${topic.name}: RF differs`);
  }
  checked.push("topics");
  await screenshots(page, dir, "topics");

  const topic = expected.topics.find((t) => t.name === expected.setup.topic);
  await open(page, base, "topics/" + encodeURIComponent(topic.name));
  for (const p of topic.partitions) {
    const row = `[data-partition="${p.partition}"]`;
    check(await number(page, `${row} [data-field=leader]`) === p.leader, `partition ${p.partition}: leader differs`);
    check(await text(page, `${row} [data-field=replicas]`) === p.replicas.join(", "), `partition ${p.partition}: replicas differ`);
    check(await text(page, `${row} [data-field=isr]`) === p.isr.join(", "), `partition ${p.partition}: ISR differs`);
  }
  const group = expected.group;
  for (const p of group.partitions.filter((p) => p.topic === topic.name)) {
    const end = await number(page, `[data-partition="${p.partition}"] [data-field=log-end]`);
    check(end === p.log_end_offset, `partition ${p.partition}: log end ${end} on the page, ${p.log_end_offset} in the CLI`);
  }
  checked.push("topic");
  await screenshots(page, dir, "topic");

  // The message browser, hex view: the records confluent-kafka produced, byte for byte.
  await open(page, base, `topics/${encodeURIComponent(topic.name)}/browse?partition=0&from=oldest&limit=5&format=hex&field_bytes=65536`);
  const hex = (cell) => (cell === null ? null : cell.replace(/\s+/g, ""));
  for (const record of expected.setup.records) {
    const row = `[data-offset="${record.offset}"]`;
    const key = await page.$eval(`${row} [data-field=key] pre`, (e) => e.textContent).catch(() => null);
    const value = await page.$eval(`${row} [data-field=value] pre`, (e) => e.textContent).catch(() => null);
    check(hex(key) === record.key, `offset ${record.offset}: key ${hex(key)} on the page, ${record.key} produced`);
    check(hex(value) === record.value, `offset ${record.offset}: value differs (${(hex(value) || "null").slice(0, 40)}… vs ${(record.value || "null").slice(0, 40)}…)`);
    const headers = await page.$$eval(`${row} [data-field=headers] > div`, (divs) => divs.map((d) => [d.querySelector("b").textContent, d.querySelector("pre")?.textContent ?? null]));
    check(JSON.stringify(headers.map(([k, v]) => [k, hex(v)])) === JSON.stringify(record.headers),
      `offset ${record.offset}: headers ${JSON.stringify(headers)} vs ${JSON.stringify(record.headers)}`);
  }
  checked.push("browser (hex)");
  await screenshots(page, dir, "messages-hex");
  // The same page as text and pretty JSON; and a bounded value says it was cut.
  await open(page, base, `topics/${encodeURIComponent(topic.name)}/browse?partition=0&from=oldest&limit=5&format=json&field_bytes=1024`);
  const pretty = await page.$eval(`[data-offset="1"] [data-field=value] pre`, (e) => e.textContent);
  check(pretty.includes('\n  "items": ['), `JSON not pretty-printed: ${pretty}`);
  const cut = await text(page, `[data-offset="4"] [data-field=value] .pill`);
  check(cut === "first 1,024 of 10,240 bytes", `the cut value says ${cut}`);
  await open(page, base, `topics/${encodeURIComponent(topic.name)}/browse?partition=0&from=newest&limit=3&format=text`);
  const offsets = await page.$$eval("[data-offset]", (rows) => rows.map((r) => Number(r.dataset.offset)));
  check(JSON.stringify(offsets) === JSON.stringify([34, 33, 32]), `newest first: ${offsets}`);
  checked.push("browser (json, text, newest first)");
  await screenshots(page, dir, "messages-text");

  // Groups = `sluice groups list/describe --output json`.
  await open(page, base, "groups");
  check(await text(page, `[data-group="${group.group}"] [data-field=state]`) === group.state, "group state differs on the list");
  checked.push("groups");
  await screenshots(page, dir, "groups");
  await open(page, base, "groups/" + encodeURIComponent(group.group));
  check(await number(page, "[data-field=total-lag]") === group.total_lag, `total lag ${await text(page, "[data-field=total-lag]")} vs ${group.total_lag}`);
  check(await number(page, "[data-field=members]") === group.members.length, "member count differs");
  check(await text(page, "[data-field=state]") === group.state, "state differs");
  for (const p of group.partitions) {
    const row = `[data-partition="${p.topic}-${p.partition}"]`;
    check(await number(page, `${row} [data-field=committed]`) === p.committed_offset, `${p.topic}-${p.partition}: committed differs`);
    check(await number(page, `${row} [data-field=log-end]`) === p.log_end_offset, `${p.topic}-${p.partition}: log end differs`);
    check(await number(page, `${row} [data-field=lag]`) === p.lag, `${p.topic}-${p.partition}: lag differs`);
  }
  for (const member of group.members) {
    const assignment = await text(page, `[data-member="${member.member_id}"] [data-field=assignment]`);
    const wanted = member.assignment.map(([t, p]) => `${t}-${p}`).join(", ");
    check(assignment === wanted, `assignment ${assignment} vs ${wanted}`);
  }
  checked.push("group");
  await screenshots(page, dir, "group");

  await browser.close();
  check(problems.length === 0, "problems in the pages:\n" + problems.join("\n"));
  console.log(`pages ok: ${checked.join(", ")}; screenshots in ${dir}`);
}

// Opens the overview, waits for it to say Healthy, prints "watching", then waits for a line
// "killed <epoch ms>" on stdin (the test kills BROKER_ID with -9 and says when) and prints how
// long after the kill the page showed the broker down and the cluster degraded.
async function degraded(base, brokerId) {
  const browser = await launch();
  const problems = [];
  const page = await watchedPage(browser, problems);
  await page.goto(base + "/#/", { waitUntil: "load" });
  await page.waitForFunction(() => document.querySelector("[data-field=health]")?.textContent === "Healthy",
    { timeout: 30000, polling: 200 });
  console.log("watching");
  const killedAt = await new Promise((resolve) => {
    let input = "";
    process.stdin.on("data", (chunk) => {
      input += chunk;
      const match = input.match(/killed (\d+)/);
      if (match) resolve(Number(match[1]));
    });
  });
  await page.waitForFunction((id) => {
    const state = document.querySelector(`[data-broker="${id}"] [data-field=broker-state]`);
    const health = document.querySelector("[data-field=health]");
    return state && state.textContent.includes("down") && health && health.textContent === "Degraded";
  }, { timeout: 30000, polling: 100 }, String(brokerId));
  const seconds = (Date.now() - killedAt) / 1000;
  const problemsText = await text(page, "[data-field=problems]");
  await browser.close();
  // Requests to the killed broker may fail while the page polls; the page must not break.
  check(problems.filter((p) => !p.startsWith("HTTP 5")).length === 0, "problems in the page:\n" + problems.join("\n"));
  console.log(`degraded ${seconds.toFixed(1)} s after the kill: ${problemsText}`);
  process.exit(0);
}

// Fills and submits the form `name` on the current page, and waits for the action's answer.
async function submit(page, name, fields) {
  // Filled and submitted in one task of the page, as a person's submit is: the page's
  // refresh cannot redraw the form between two fields.
  await page.$eval(`form[data-action="${name}"]`, (form, fields) => {
    for (const [field, value] of Object.entries(fields)) {
      const input = form.querySelector(`[name="${field}"]`);
      if (!input) throw new Error(`no field ${field}`);
      input.value = value;
      input.dispatchEvent(new Event("input", { bubbles: true }));
    }
    form.requestSubmit();
  }, fields);
  await page.waitForFunction(() => {
    const line = document.getElementById("action-result");
    return line && (line.className === "done" || line.className === "error");
  }, { timeout: 30000 });
  const [className, message] = await page.$eval("#action-result", (e) => [e.className, e.textContent]);
  check(className === "done", `${name}: ${message}`);
  return message;
}

// `actions-create`: a topic made through the topics page's form, and a config changed on its page.
// `actions-modify`: records deleted and a group's offsets reset through the forms.
async function actions(step, base, dir) {
  const browser = await launch();
  const problems = [];
  const page = await watchedPage(browser, problems);
  await page.setViewport({ width: 1280, height: 800 });
  const said = [];
  if (step === "create") {
    await open(page, base, "topics");
    said.push(await submit(page, "create-topic", { name: "console-made", partitions: "3", replication_factor: "1", configs: "retention.ms=3600000" }));
    await open(page, base, "topics/console-made");
    said.push(await submit(page, "alter-config", { key: "retention.bytes", value: "1048576", op: "set" }));
    await screenshots(page, dir, "actions-topic");
  } else {
    await open(page, base, "topics/console-made");
    said.push(await submit(page, "delete-records", { partition: "0", before_offset: "4" }));
    await open(page, base, "groups/console-reset-group");
    said.push(await submit(page, "reset-offsets", { topic: "console-made", to: "earliest" }));
    await screenshots(page, dir, "actions-group");
  }
  await browser.close();
  check(problems.length === 0, "problems in the pages:\n" + problems.join("\n"));
  console.log("actions ok: " + said.join(" | "));
}

// `login`: alice logs in (HTTP Basic, as a browser's login prompt sends it) and the topics
// page lists her topic and not the one her ACLs hide.
async function login(base, dir) {
  const browser = await launch();
  const problems = [];
  const page = await watchedPage(browser, problems);
  await page.setViewport({ width: 1280, height: 800 });
  await page.authenticate({ username: "alice", password: "alice-secret" });
  await open(page, base, "topics");
  const names = await page.$$eval("[data-topic]", (rows) => rows.map((r) => r.dataset.topic));
  check(JSON.stringify(names) === JSON.stringify(["alice-orders"]), `alice sees ${names}`);
  // The overview needs DESCRIBE on the cluster (DescribeCluster, DescribeQuorum), which the
  // admin user has and alice not.
  const adminPage = await watchedPage(browser, problems);
  await adminPage.setViewport({ width: 1280, height: 800 });
  await adminPage.authenticate({ username: "admin", password: "admin-secret" });
  await open(adminPage, base, "");
  check(await text(adminPage, "[data-field=health]") === "Healthy", "the admin's overview is not Healthy");
  await screenshots(adminPage, dir, "login-overview");
  await browser.close();
  check(problems.length === 0, "problems in the pages:\n" + problems.join("\n"));
  console.log("login ok: alice sees " + names.join(", ") + "; the admin sees the overview");
}

const [mode, ...args] = process.argv.slice(2);
(mode === "pages" ? pages(...args)
  : mode === "degraded" ? degraded(...args)
  : mode === "actions-create" ? actions("create", ...args)
  : mode === "actions-modify" ? actions("modify", ...args)
  : mode === "login" ? login(...args)
  : Promise.reject(new Error("mode?")))
  .catch((error) => fail(error.stack || String(error)));
