// The Sluice console: a page per hash route, drawn from /api/v1/. No framework, no network
// access beyond this broker. Every text from the cluster goes through esc().
"use strict";

const page = document.getElementById("page");
const statusLine = document.getElementById("status");
let refreshTimer = null;
let generation = 0;

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
  })[c]);
}

function num(value) {
  return value === null || value === undefined ? "–" : Number(value).toLocaleString("en-US");
}

function rate(value) {
  if (value === null || value === undefined) return "–";
  return value >= 100 ? Math.round(value).toLocaleString("en-US") : value.toFixed(1);
}

function bytes(value) {
  if (value === null || value === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = value, i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v : v.toFixed(1)) + " " + units[i];
}

function path(...parts) {
  return parts.map((p) => encodeURIComponent(p)).join("/");
}

async function api(url) {
  const response = await fetch("/api/v1/" + url, { cache: "no-store" });
  let body;
  try {
    body = await response.json();
  } catch (e) {
    throw new Error(`${response.status} ${response.statusText}`);
  }
  if (!response.ok) throw new Error(body.error || `${response.status} ${response.statusText}`);
  return body;
}

// What this console may do (GET /api/v1/console), asked once.
let consoleInfo = null;
async function info() {
  if (!consoleInfo) consoleInfo = await api("console");
  return consoleInfo;
}

// An action: a POST with the console's header (other sites cannot send it), its answer said
// in the page's action line.
let lastAction = { className: "muted", text: "" };
async function act(url, body, after) {
  const say = (className, text) => {
    lastAction = { className, text };
    const line = document.getElementById("action-result");
    if (line) {
      line.className = className;
      line.textContent = text;
    }
  };
  say("muted", "working…");
  try {
    const response = await fetch("/api/v1/" + url, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Sluice-Console": "1" },
      body: JSON.stringify(body),
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.statusText);
    say("done", answer.done);
    if (after) after();
  } catch (error) {
    say("error", error.message);
  }
}

// An actions card (only where actions are enabled): `forms` is HTML of <form data-action=...>.
function actionsCard(forms) {
  return `<h2>Actions</h2><div class="card actions">${forms}<p id="action-result" data-test="action-result" class="${esc(lastAction.className)}">${esc(lastAction.text)}</p></div>`;
}

function onAction(name, handler) {
  const form = document.querySelector(`form[data-action="${name}"]`);
  if (!form) return;
  // A form a person has started to fill is not redrawn under them by the page's refresh.
  form.addEventListener("input", () => { form.dataset.dirty = "1"; });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    handler(Object.fromEntries(new FormData(form).entries()));
  });
}

function parsePairs(text) {
  const out = {};
  for (const pair of (text || "").split(",").map((p) => p.trim()).filter((p) => p)) {
    const at = pair.indexOf("=");
    if (at > 0) out[pair.slice(0, at).trim()] = pair.slice(at + 1).trim();
  }
  return out;
}

function showError(error) {
  page.innerHTML = `<div class="error" data-test="error">${esc(error.message || error)}</div>`;
}

function setStatus(text) {
  statusLine.textContent = text;
}

// ---- charts: SVG polylines, scaled to their own maximum ----

const COLORS = ["#1f6feb", "#cf222e", "#1a7f37", "#9a6700"];

function chart(title, times, series, unit) {
  const width = 600, height = 140, pad = 4;
  const all = series.flatMap((s) => s.values.filter((v) => v !== null && v !== undefined));
  const max = Math.max(1e-9, ...all);
  const t0 = times.length ? times[0] : 0;
  const t1 = times.length > 1 ? times[times.length - 1] : t0 + 1;
  const x = (t) => pad + ((t - t0) / Math.max(1, t1 - t0)) * (width - 2 * pad);
  const y = (v) => height - pad - (v / max) * (height - 2 * pad);
  const lines = series.map((s, i) => {
    const points = [];
    s.values.forEach((v, j) => {
      if (v !== null && v !== undefined) points.push(`${x(times[j]).toFixed(1)},${y(v).toFixed(1)}`);
    });
    return `<polyline fill="none" stroke="${COLORS[i % COLORS.length]}" stroke-width="1.5" points="${points.join(" ")}"/>`;
  }).join("");
  const legend = series.map((s, i) => {
    const last = s.values.length ? s.values[s.values.length - 1] : null;
    return `<span style="color:${COLORS[i % COLORS.length]}">${esc(s.name)}: ${esc(unit(last))}</span>`;
  }).join("");
  const span = times.length > 1 ? Math.round((t1 - t0) / 60000) : 0;
  return `<div class="card chart"><div class="title">${esc(title)} · max ${esc(unit(all.length ? max : null))} · last ${span} min</div>
    <svg viewBox="0 0 ${width} ${height}" preserveAspectRatio="none" role="img" aria-label="${esc(title)}">
      <line x1="0" y1="${height - pad}" x2="${width}" y2="${height - pad}" stroke="#d9dee6"/>${lines}</svg>
    <div class="legend">${legend}</div></div>`;
}

// ---- pages ----

async function overview(gen) {
  const [{ cluster, served_by }, series] = await Promise.all([api("cluster"), api("broker/series")]);
  if (gen !== generation) return;
  const brokers = cluster.brokers.map((b) => `<tr data-broker="${b.id}">
      <td class="num">${b.id}</td><td>${esc(b.host)}:${b.port}</td><td>${esc(b.rack ?? "–")}</td>
      <td data-field="broker-state">${b.fenced ? '<span class="pill down">down (fenced)</span>' : '<span class="pill up">up</span>'}</td>
      <td class="num" data-field="leaders">${b.leaders}</td>
      <td class="num" data-field="disk">${bytes(b.disk_bytes)}</td></tr>`).join("");
  const q = cluster.quorum;
  const members = q.members.map((m) => `<tr data-quorum-member="${m.node_id}">
      <td class="num">${m.node_id}</td><td>${esc(m.role)}${m.node_id === q.leader_id ? " (leader)" : ""}</td>
      <td class="num">${num(m.log_end_offset >= 0 ? m.log_end_offset : null)}</td>
      <td class="num" data-field="quorum-lag">${num(m.lag)}</td>
      <td class="num hide-narrow">${m.last_fetch_ms_ago >= 0 ? num(m.last_fetch_ms_ago) + " ms" : "–"}</td></tr>`).join("");
  const problems = cluster.problems.map((p) => `<li>${esc(p)}</li>`).join("");
  const points = series.points;
  const times = points.map((p) => p.time_ms);
  const pick = (key) => points.map((p) => p[key]);
  page.innerHTML = `
    <h1>Cluster <span class="muted" data-field="cluster-id">${esc(cluster.cluster_id)}</span></h1>
    <div class="headline ${esc(cluster.status)}" data-field="health">${cluster.status === "healthy" ? "Healthy" : "Degraded"}</div>
    ${problems ? `<ul data-field="problems">${problems}</ul>` : ""}
    <div class="grid" style="margin-top:12px">
      <div class="stat"><div class="value" data-field="brokers-up">${cluster.brokers.filter((b) => !b.fenced).length} / ${cluster.brokers.length}</div><div class="label">brokers up</div></div>
      <div class="stat"><div class="value" data-field="topics">${num(cluster.topics)}</div><div class="label">topics</div></div>
      <div class="stat"><div class="value" data-field="partitions">${num(cluster.partitions)}</div><div class="label">partitions</div></div>
      <div class="stat"><div class="value" data-field="under-replicated">${num(cluster.under_replicated_partitions)}</div><div class="label">under-replicated</div></div>
      <div class="stat"><div class="value" data-field="offline">${num(cluster.offline_partitions)}</div><div class="label">offline</div></div>
      <div class="stat"><div class="value" data-field="controller">${cluster.controller_id}</div><div class="label">active controller</div></div>
    </div>
    <h2>Brokers</h2>
    <div class="card"><table><thead><tr><th class="num">id</th><th>address</th><th>rack</th><th>state</th><th class="num">leaders</th><th class="num">disk used</th></tr></thead>
      <tbody>${brokers}</tbody></table></div>
    <h2>Metadata quorum</h2>
    <div class="card"><p>leader <b data-field="quorum-leader">${q.leader_id}</b> · term <b data-field="quorum-term">${q.term}</b> · commit index <b data-field="quorum-commit">${num(q.commit_index)}</b></p>
      <table><thead><tr><th class="num">node</th><th>role</th><th class="num">log end</th><th class="num">lag</th><th class="num hide-narrow">last fetch</th></tr></thead>
      <tbody>${members}</tbody></table></div>
    <h2>Broker ${served_by} traffic</h2>
    <div class="charts">
      ${chart("Bytes per second", times, [{ name: "produce", values: pick("produce_bytes_per_second") }, { name: "fetch", values: pick("fetch_bytes_per_second") }], bytesRate)}
      ${chart("Requests per second", times, [{ name: "produce", values: pick("produce_requests_per_second") }, { name: "fetch", values: pick("fetch_requests_per_second") }], (v) => rate(v) + "/s")}
      ${chart("Request latency p99", times, [{ name: "produce", values: pick("produce_p99_ms") }, { name: "fetch", values: pick("fetch_p99_ms") }], (v) => v === null || v === undefined ? "–" : v.toFixed(1) + " ms")}
    </div>`;
}

function bytesRate(v) {
  return v === null || v === undefined ? "–" : bytes(v) + "/s";
}

async function topics(gen, params) {
  const { topics, total, rates_sampled, rates_partial } = await api("topics");
  if (gen !== generation) return;
  const search = params.get("q") || "";
  const internal = params.get("internal") === "1";
  const shown = topics.filter((t) => (internal || !t.internal) && t.name.includes(search));
  const rows = shown.map((t) => `<tr data-topic="${esc(t.name)}">
      <td><a href="#/topics/${path(t.name)}">${esc(t.name)}</a></td>
      <td class="num" data-field="partitions">${t.partitions}</td>
      <td class="num" data-field="replication-factor">${t.replication_factor}</td>
      <td class="num hide-narrow" data-field="size">${bytes(t.size_bytes)}</td>
      <td class="num" data-field="under-replicated">${t.under_replicated}</td>
      <td class="num hide-narrow">${t.offline}</td>
      <td class="num" data-field="records-in">${rate(t.records_in_per_second)}</td>
      <td class="num hide-narrow" data-field="records-consumed">${rate(t.records_consumed_per_second)}</td></tr>`).join("");
  page.innerHTML = `<h1>Topics</h1>
    <div class="controls">
      <label>search<input id="search" value="${esc(search)}" placeholder="name contains"></label>
      <label><span><input type="checkbox" id="internal" ${internal ? "checked" : ""}> internal topics</span></label>
    </div>
    <div class="card"><table><thead><tr><th>topic</th><th class="num">partitions</th><th class="num">RF</th><th class="num hide-narrow">size</th>
      <th class="num">under-replicated</th><th class="num hide-narrow">offline</th><th class="num">records in/s</th><th class="num hide-narrow">consumed/s</th></tr></thead>
      <tbody>${rows || '<tr><td colspan="8" class="muted">no topics</td></tr>'}</tbody></table>
      <p class="muted">${shown.length} shown of ${total}. ${rates_sampled ? "Rates over the last 10 s" + (rates_partial ? " (consumed: the first 200 groups only)" : "") + "." : "Rates appear after 10 s on this page."}</p></div>`;
  if ((await info()).actions_enabled) {
    page.insertAdjacentHTML("beforeend", actionsCard(`
      <form class="controls" data-action="create-topic">
        <label>name<input name="name" required></label>
        <label>partitions<input name="partitions" value="1" size="4"></label>
        <label>replication factor<input name="replication_factor" value="-1" size="4"></label>
        <label>configs (k=v, …)<input name="configs" size="30"></label>
        <button type="submit">Create topic</button>
      </form>`));
    onAction("create-topic", (f) => act("topics", {
      name: f.name, partitions: Number(f.partitions), replication_factor: Number(f.replication_factor), configs: parsePairs(f.configs),
    }, () => setTimeout(() => draw(false), 500)));
  }
  const search_box = document.getElementById("search");
  search_box.addEventListener("change", () => go("topics", { q: search_box.value, internal: internal ? "1" : "" }));
  document.getElementById("internal").addEventListener("change", (e) => go("topics", { q: search, internal: e.target.checked ? "1" : "" }));
}

async function topic(gen, name) {
  const { topic, offsets, configs, configs_error, sizes } = await api("topics/" + path(name));
  if (gen !== generation) return;
  const at = (p) => offsets.find((o) => o.partition === p) || {};
  const rows = topic.partitions.map((p) => `<tr data-partition="${p.partition}">
      <td class="num">${p.partition}</td><td class="num" data-field="leader">${p.leader}</td>
      <td data-field="replicas">${p.replicas.join(", ")}</td><td data-field="isr">${p.isr.join(", ")}</td>
      <td class="num" data-field="log-start">${num(at(p.partition).log_start_offset)}</td>
      <td class="num" data-field="log-end">${num(at(p.partition).log_end_offset)}</td>
      <td class="num hide-narrow" data-field="size">${bytes((sizes || {})[p.partition])}</td>
      <td><a href="#/topics/${path(name)}/browse?partition=${p.partition}">browse</a></td></tr>`).join("");
  const configRows = configs.map((c) => `<tr><td>${esc(c.name)}</td><td data-config="${esc(c.name)}">${c.sensitive ? "(hidden)" : esc(c.value ?? "")}</td><td class="muted">${esc(c.source)}</td></tr>`).join("");
  page.innerHTML = `<h1>Topic ${esc(topic.name)}</h1>
    <p class="muted">id ${esc(topic.topic_id)}${topic.internal ? " · internal" : ""}</p>
    <div class="card"><table><thead><tr><th class="num">partition</th><th class="num">leader</th><th>replicas</th><th>ISR</th>
      <th class="num">log start</th><th class="num">log end</th><th class="num hide-narrow">size</th><th></th></tr></thead><tbody>${rows}</tbody></table></div>
    <h2>Configs</h2>
    <div class="card">${configs_error ? `<p class="error">${esc(configs_error)}</p>` : ""}<table><thead><tr><th>name</th><th>value</th><th>source</th></tr></thead><tbody>${configRows}</tbody></table></div>`;
  if ((await info()).actions_enabled) {
    page.insertAdjacentHTML("beforeend", actionsCard(`
      <form class="controls" data-action="alter-config">
        <label>config<input name="key" required></label>
        <label>value<input name="value"></label>
        <label>change<select name="op"><option>set</option><option>delete</option></select></label>
        <button type="submit">Change config</button>
      </form>
      <form class="controls" data-action="delete-records">
        <label>partition<input name="partition" value="0" size="4"></label>
        <label>delete records before offset (-1: all)<input name="before_offset" required size="10"></label>
        <button type="submit">Delete records</button>
      </form>`));
    onAction("alter-config", (f) => act(`topics/${path(name)}/configs`,
      f.op === "delete" ? { delete: [f.key] } : { set: { [f.key]: f.value } }, () => draw(false)));
    onAction("delete-records", (f) => act(`topics/${path(name)}/partitions/${path(f.partition)}/delete-records`,
      { before_offset: Number(f.before_offset) }, () => draw(false)));
  }
}

function decode(field) {
  if (!field) return null;
  const binary = atob(field.base64);
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}

function render(field, format) {
  if (!field) return '<span class="muted">null</span>';
  const data = decode(field);
  const cut = field.truncated ? ` <span class="pill warn">first ${num(data.length)} of ${num(field.size)} bytes</span>` : "";
  let text;
  if (format === "hex") {
    text = Array.from(data, (b) => b.toString(16).padStart(2, "0")).join(" ");
  } else {
    text = new TextDecoder("utf-8", { fatal: false }).decode(data);
    if (format === "json" && !field.truncated) {
      try { text = JSON.stringify(JSON.parse(text), null, 2); } catch (e) { /* not JSON: shown as text */ }
    }
  }
  return `<pre class="value" data-format="${esc(format)}">${esc(text)}</pre>${cut}`;
}

async function browse(gen, name, params) {
  const partition = params.get("partition") || "0";
  const from = params.get("from") || "newest";
  const offset = params.get("offset") || "";
  const timestamp = params.get("timestamp") || "";
  const limit = params.get("limit") || "50";
  const format = params.get("format") || "text";
  const fieldBytes = params.get("field_bytes") || "4096";
  const query = new URLSearchParams({ from, limit, field_bytes: fieldBytes });
  if (from === "offset") query.set("offset", offset || "0");
  if (from === "timestamp") query.set("timestamp", String(Date.parse(timestamp) || Number(timestamp) || 0));
  const data = await api(`topics/${path(name)}/partitions/${path(partition)}/records?${query}`);
  if (gen !== generation) return;
  const rows = data.records.map((r) => `<tr data-offset="${r.offset}">
      <td class="num">${r.offset}</td>
      <td class="hide-narrow">${esc(new Date(r.timestamp).toISOString())}</td>
      <td data-field="key">${render(r.key, format)}</td>
      <td data-field="value">${render(r.value, format)}</td>
      <td data-field="headers">${r.headers.map((h) => `<div><b>${esc(h.key)}</b>: ${render(h.value, format)}</div>`).join("")}</td></tr>`).join("");
  const option = (value, current) => `<option ${value === current ? "selected" : ""}>${value}</option>`;
  page.innerHTML = `<h1>Messages of <a href="#/topics/${path(name)}">${esc(name)}</a>, partition ${esc(partition)}</h1>
    <form class="controls" id="browse">
      <label>partition<input name="partition" value="${esc(partition)}" size="4"></label>
      <label>from<select name="from">${["newest", "oldest", "offset", "timestamp"].map((v) => option(v, from)).join("")}</select></label>
      <label>offset<input name="offset" value="${esc(offset)}" size="10"></label>
      <label>timestamp (ISO or ms)<input name="timestamp" value="${esc(timestamp)}" size="22"></label>
      <label>records<input name="limit" value="${esc(limit)}" size="4"></label>
      <label>bytes per value<input name="field_bytes" value="${esc(fieldBytes)}" size="6"></label>
      <label>show as<select name="format">${["text", "json", "hex"].map((v) => option(v, format)).join("")}</select></label>
      <button type="submit">Read</button>
    </form>
    <p class="muted" data-field="range">log start ${num(data.log_start_offset)} · log end ${num(data.log_end_offset)} · ${data.records.length} records from offset ${num(data.start_offset)}, ${esc(data.order)}</p>
    ${data.incomplete ? `<p class="error">${esc(data.incomplete)}</p>` : ""}
    <div class="card"><table><thead><tr><th class="num">offset</th><th class="hide-narrow">timestamp</th><th>key</th><th>value</th><th>headers</th></tr></thead>
      <tbody>${rows || '<tr><td colspan="5" class="muted">no records</td></tr>'}</tbody></table></div>`;
  document.getElementById("browse").addEventListener("submit", (event) => {
    event.preventDefault();
    const form = new FormData(event.target);
    go(`topics/${path(name)}/browse`, Object.fromEntries(form.entries()));
  });
}

async function groups(gen) {
  const { groups, total } = await api("groups");
  if (gen !== generation) return;
  const rows = groups.map((g) => `<tr data-group="${esc(g.group)}">
      <td><a href="#/groups/${path(g.group)}">${esc(g.group)}</a></td>
      <td data-field="state">${esc(g.state)}</td><td>${esc(g.protocol_type)}</td></tr>`).join("");
  page.innerHTML = `<h1>Consumer groups</h1>
    <div class="card"><table><thead><tr><th>group</th><th>state</th><th>protocol type</th></tr></thead>
      <tbody>${rows || '<tr><td colspan="3" class="muted">no groups</td></tr>'}</tbody></table>
      <p class="muted">${groups.length} shown of ${total}.</p></div>`;
}

async function group(gen, id) {
  const { group, lag_history } = await api("groups/" + path(id));
  if (gen !== generation) return;
  const members = group.members.map((m) => `<tr data-member="${esc(m.member_id)}">
      <td>${esc(m.member_id)}</td><td>${esc(m.client_id)}</td><td class="hide-narrow">${esc(m.host)}</td>
      <td data-field="assignment">${m.assignment.map(([t, p]) => esc(`${t}-${p}`)).join(", ")}</td></tr>`).join("");
  const partitions = group.partitions.map((p) => `<tr data-partition="${esc(p.topic)}-${p.partition}">
      <td>${esc(p.topic)}</td><td class="num">${p.partition}</td>
      <td class="num" data-field="committed">${num(p.committed_offset)}</td>
      <td class="num" data-field="log-end">${num(p.log_end_offset)}</td>
      <td class="num" data-field="lag">${num(p.lag)}</td>
      <td class="hide-narrow">${esc(p.member_id ?? "–")}</td></tr>`).join("");
  const protocol = group.protocol.includes("KIP-848") ? "consumer (KIP-848)" : (group.protocol_type ? "classic" : "–");
  page.innerHTML = `<h1>Group ${esc(group.group)}</h1>
    <div class="grid">
      <div class="stat"><div class="value" data-field="state">${esc(group.state)}</div><div class="label">state</div></div>
      <div class="stat"><div class="value" data-field="protocol">${esc(protocol)}</div><div class="label">protocol (${esc(group.protocol || "none")})</div></div>
      <div class="stat"><div class="value" data-field="members">${group.members.length}</div><div class="label">members</div></div>
      <div class="stat"><div class="value" data-field="total-lag">${num(group.total_lag)}</div><div class="label">total lag</div></div>
    </div>
    <p class="muted">coordinator ${esc(group.coordinator)}</p>
    ${lag_history.length ? chart("Total lag", lag_history.map((p) => p.time_ms), [{ name: "lag", values: lag_history.map((p) => p.total_lag) }], num)
      : '<p class="muted">The lag chart fills in while this page is open (a point every 10 s, 15 minutes kept).</p>'}
    <h2>Members</h2>
    <div class="card"><table><thead><tr><th>member</th><th>client</th><th class="hide-narrow">host</th><th>assignment</th></tr></thead>
      <tbody>${members || '<tr><td colspan="4" class="muted">no members</td></tr>'}</tbody></table></div>
    <h2>Partitions</h2>
    <div class="card"><table><thead><tr><th>topic</th><th class="num">partition</th><th class="num">committed</th><th class="num">log end</th><th class="num">lag</th><th class="hide-narrow">member</th></tr></thead>
      <tbody>${partitions || '<tr><td colspan="6" class="muted">no partitions</td></tr>'}</tbody></table></div>`;
  if ((await info()).actions_enabled) {
    const topicNames = [...new Set(group.partitions.map((p) => p.topic))];
    page.insertAdjacentHTML("beforeend", actionsCard(`
      <form class="controls" data-action="reset-offsets">
        <label>topic<input name="topic" value="${esc(topicNames[0] || "")}" required></label>
        <label>to<select name="to"><option>earliest</option><option>latest</option><option>offset</option><option>timestamp</option></select></label>
        <label>offset or timestamp (ISO or ms)<input name="value"></label>
        <button type="submit">Reset offsets</button>
      </form>
      <p class="muted">Offsets are reset only while the group has no members.</p>`));
    onAction("reset-offsets", (f) => act(`groups/${path(id)}/offsets`, {
      topic: f.topic, to: f.to,
      ...(f.to === "offset" ? { offset: Number(f.value) } : {}),
      ...(f.to === "timestamp" ? { timestamp: Date.parse(f.value) || Number(f.value) } : {}),
    }, () => draw(false)));
  }
}

// ---- routing ----

function go(route, params) {
  const query = new URLSearchParams(Object.entries(params || {}).filter(([, v]) => v !== "" && v !== undefined));
  const text = query.toString();
  location.hash = "#/" + route + (text ? "?" + text : "");
}

function route() {
  const hash = location.hash.replace(/^#\/?/, "");
  const [pathPart, queryPart] = hash.split("?");
  const parts = pathPart.split("/").filter((p) => p !== "").map(decodeURIComponent);
  const params = new URLSearchParams(queryPart || "");
  if (parts.length === 0) return { nav: "overview", refresh: 2000, draw: (gen) => overview(gen) };
  if (parts[0] === "topics" && parts.length === 1) return { nav: "topics", refresh: 10000, draw: (gen) => topics(gen, params) };
  if (parts[0] === "topics" && parts.length === 2) return { nav: "topics", refresh: 5000, draw: (gen) => topic(gen, parts[1]) };
  if (parts[0] === "topics" && parts[2] === "browse") return { nav: "topics", refresh: 0, draw: (gen) => browse(gen, parts[1], params) };
  if (parts[0] === "groups" && parts.length === 1) return { nav: "groups", refresh: 5000, draw: (gen) => groups(gen) };
  if (parts[0] === "groups" && parts.length === 2) return { nav: "groups", refresh: 5000, draw: (gen) => group(gen, parts[1]) };
  return { nav: "", refresh: 0, draw: async () => { page.innerHTML = '<p class="error">No such page.</p>'; } };
}

async function draw(fresh) {
  const current = route();
  const gen = ++generation;
  document.querySelectorAll("[data-nav]").forEach((a) => a.classList.toggle("active", a.dataset.nav === current.nav));
  if (fresh) page.innerHTML = '<p class="muted">Loading…</p>';
  try {
    await current.draw(gen);
    if (gen === generation) {
      setStatus("updated " + new Date().toLocaleTimeString());
      document.body.dataset.loaded = String(gen);
    }
  } catch (error) {
    if (gen === generation) {
      showError(error);
      setStatus("");
      document.body.dataset.loaded = String(gen);
    }
  }
  clearTimeout(refreshTimer);
  if (current.refresh > 0 && gen === generation) schedule(current.refresh);
}

function schedule(after) {
  refreshTimer = setTimeout(() => {
    // Not under a person typing in a form: look again later.
    const typing = (document.activeElement && ["INPUT", "SELECT"].includes(document.activeElement.tagName))
      || document.querySelector("form[data-dirty]");
    if (typing) schedule(after);
    else draw(false);
  }, after);
}

window.addEventListener("hashchange", () => {
  lastAction = { className: "muted", text: "" };
  draw(true);
});
draw(true);
