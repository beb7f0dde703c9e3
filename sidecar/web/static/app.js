// The status page: a client of the sidecar's public API, nothing else.
//   GET /assignment (long-poll)  this member's state and generation
//   GET /group                   the whole group, as the coordinator describes it
//   GET /events                  history (JSON) then live (SSE): the timeline
//   GET /webhooks, /webhooks/{id}/deliveries   webhook health
//   POST /enforce-rebalance, /drain            actions (bearer token when configured)
"use strict";

const MAX_EVENTS = 200;
const PALETTE = [
  "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
  "#b07aa1", "#ff9da7", "#9c755f", "#8cd17d", "#86bcb6", "#d4a6c8",
];
const SHORT = {
  "kafka.partitions.assigned": "assigned",
  "kafka.partitions.revoked": "revoked",
  "kafka.partitions.lost": "lost",
  "kafka.rebalance.requested": "rebalance requested",
};
const GATING = new Set(["kafka.partitions.revoked", "kafka.partitions.lost"]);

const state = {
  assignment: null,
  group: null,
  events: [], // CloudEvents, oldest first
  lastSequence: 0,
  colors: new Map(), // member_id -> colour
  nextColor: 0,
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "style") node.style.cssText = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function colorOf(memberId) {
  if (!state.colors.has(memberId)) {
    state.colors.set(memberId, PALETTE[state.nextColor % PALETTE.length]);
    state.nextColor += 1;
  }
  return state.colors.get(memberId);
}

function time(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? "?" : d.toLocaleTimeString([], { hour12: false });
}

function ms(seconds) {
  return seconds < 1 ? `${Math.round(seconds * 1000)} ms` : `${seconds.toFixed(2)} s`;
}

async function getJSON(path, init) {
  const response = await fetch(path, { cache: "no-store", ...init });
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    body = null;
  }
  if (!response.ok) {
    const message = body && body.error ? body.error : `${response.status} ${response.statusText}`;
    const error = new Error(message);
    error.status = response.status;
    throw error;
  }
  return body;
}

// -- this member ------------------------------------------------------------------------------

function renderAssignment(a) {
  state.assignment = a;
  $("group-id").textContent = a.group_id;
  const badge = $("member-state");
  badge.textContent = a.state + (a.connected ? "" : " (Kafka unreachable)");
  badge.className = `badge state-${a.state}`;
  badge.dataset.state = a.state;
  $("member-generation").textContent = a.generation_id;
  $("member-protocol").textContent = a.protocol;
  $("member-id").textContent = a.member_id || "—";
  if (!state.group) renderGrid();
}

async function followAssignment() {
  let after = null;
  for (;;) {
    try {
      const query = after === null ? "" : `?after=${after}&wait=25`;
      const a = await getJSON(`/assignment${query}`);
      const changed = !state.assignment || a.sequence !== state.assignment.sequence
        || a.state !== state.assignment.state || a.generation_id !== state.assignment.generation_id;
      renderAssignment(a);
      if (changed) refreshGroupSoon();
      after = a.sequence;
    } catch (_) {
      await sleep(2000);
    }
  }
}

function sleep(millis) {
  return new Promise((resolve) => setTimeout(resolve, millis));
}

// -- the group --------------------------------------------------------------------------------

let groupTimer = null;

function refreshGroupSoon() {
  clearTimeout(groupTimer);
  groupTimer = setTimeout(refreshGroup, 300);
}

async function refreshGroup() {
  clearTimeout(groupTimer);
  try {
    const group = await getJSON("/group");
    state.group = group;
    $("group-error").hidden = true;
  } catch (error) {
    state.group = null;
    $("group-error").hidden = false;
    $("group-error").textContent =
      `The coordinator's view is unavailable (${error.message}); showing this member's assignment only.`;
  }
  renderGrid();
  groupTimer = setTimeout(refreshGroup, 3000);
}

function renderGrid() {
  const grid = $("grid");
  const body = $("members").querySelector("tbody");
  const group = state.group;
  const me = state.assignment ? state.assignment.member_id : null;
  let partitions;
  let members;
  if (group) {
    partitions = group.partitions;
    members = group.members;
    const count = `${members.length} member${members.length === 1 ? "" : "s"}`;
    $("group-summary").textContent = group.source === "demo"
      ? `${count} · the demo's simulated peers (the mock cluster cannot describe groups)`
      : `${group.state} · ${group.type} · ${group.partition_assignor || "no assignor"} · ${count}`;
    const rebalances = group.rebalances;
    const flapping = $("flapping");
    if (flapping) flapping.remove();
    if (rebalances && rebalances.flapping) {
      $("group-summary").after(el("span", { id: "flapping", class: "flapping",
        title: "more rebalances than SIDECAR_FLAPPING_REBALANCES within SIDECAR_FLAPPING_WINDOW_MS" },
      `flapping: ${rebalances.in_window} rebalances in ${Math.round(rebalances.window_seconds / 60)} min`));
    }
  } else if (state.assignment) {
    partitions = state.assignment.partitions.map((p) => ({ ...p, owner: me }));
    members = me ? [{ member_id: me, client_id: "this sidecar", host: "", group_instance_id: state.assignment.group_instance_id, assignment: state.assignment.partitions, this_member: true }] : [];
    $("group-summary").textContent = "this member only";
  } else {
    return;
  }
  for (const m of members) colorOf(m.member_id);

  const byTopic = new Map();
  for (const p of partitions) {
    if (!byTopic.has(p.topic)) byTopic.set(p.topic, []);
    byTopic.get(p.topic).push(p);
  }
  const rows = [];
  for (const [topic, list] of byTopic) {
    const cells = list.map((p) => {
      const mine = p.owner !== null && p.owner === me;
      const owner = members.find((m) => m.member_id === p.owner);
      const title = p.owner
        ? `${topic}-${p.partition}: ${owner ? owner.client_id : p.owner}${mine ? " (this sidecar)" : ""}`
        : `${topic}-${p.partition}: no owner`;
      return el("div", {
        class: `cell${mine ? " mine" : ""}${p.owner ? "" : " unowned"}`,
        style: p.owner ? `background:${colorOf(p.owner)}` : null,
        title,
        "data-topic": topic,
        "data-partition": p.partition,
        "data-owner": p.owner || "",
        "data-mine": mine ? "true" : "false",
      }, String(p.partition));
    });
    rows.push(el("div", { class: "topic" }, el("div", { class: "topic-name" }, topic),
      el("div", { class: "cells" }, ...cells)));
  }
  if (!rows.length) rows.push(el("p", { class: "muted" }, "No partitions assigned in the group."));
  grid.replaceChildren(...rows);

  body.replaceChildren(...members.map((m) => el("tr", {
    class: m.this_member ? "mine" : null, "data-member": m.member_id,
  },
  el("td", {}, el("span", { class: "swatch", style: `background:${colorOf(m.member_id)}` })),
  el("td", {}, m.client_id, m.this_member ? el("strong", { class: "you" }, " this sidecar") : null),
  el("td", {}, m.host),
  el("td", {}, m.group_instance_id || "—"),
  el("td", {}, String(m.assignment.length)),
  el("td", {}, el("code", {}, m.member_id)))));
  renderLag(group ? partitions : [], members);
}

// The lag of every partition /group read (committed offset, high watermark, lag), with a bar.
function renderLag(partitions, members) {
  const table = $("lag");
  const read = partitions.filter((p) => p.high_watermark !== null && p.high_watermark !== undefined);
  table.hidden = !read.length;
  const most = Math.max(1, ...read.map((p) => p.lag || 0));
  const figure = (value) => (value === null || value === undefined ? "–" : String(value));
  table.querySelector("tbody").replaceChildren(...read.map((p) => {
    const owner = members.find((m) => m.member_id === p.owner);
    const width = p.lag ? Math.max(1, Math.round((160 * p.lag) / most)) : 0;
    return el("tr", { "data-topic": p.topic, "data-partition": p.partition, "data-lag": figure(p.lag) },
      el("td", {}, `${p.topic}-${p.partition}`),
      el("td", {}, owner ? owner.client_id : (p.owner ? p.owner : "no owner")),
      el("td", { class: "num" }, figure(p.committed)),
      el("td", { class: "num" }, figure(p.high_watermark)),
      el("td", { class: "num" }, figure(p.lag)),
      el("td", {}, el("div", { class: "bar-box" }, el("div", { class: "bar", style: `width:${width}px` }))));
  }));
}

// A link to the event's trace when SIDECAR_TRACE_URL_TEMPLATE is set (shown by /group).
function traceLink(event) {
  const template = state.group ? state.group.trace_url_template : null;
  const parts = (event.traceparent || "").split("-");
  if (!template || parts.length < 4) return null;
  return el("a", { class: "trace-link", href: template.split("{trace_id}").join(parts[1]),
    target: "_blank", rel: "noopener" }, "trace");
}

// -- the timeline -----------------------------------------------------------------------------

function addEvent(event) {
  const sequence = Number(event.sequence);
  if (!Number.isFinite(sequence) || sequence <= state.lastSequence) return false;
  state.lastSequence = sequence;
  state.events.push(event);
  if (state.events.length > MAX_EVENTS) state.events.splice(0, state.events.length - MAX_EVENTS);
  return true;
}

function describePartitions(list) {
  if (!list || !list.length) return "no partitions";
  const names = list.map((p) => `${p.topic}-${p.partition}`);
  return names.length > 8 ? `${names.slice(0, 8).join(", ")} … (+${names.length - 8})` : names.join(", ");
}

function renderTimeline() {
  const list = $("timeline");
  const items = [];
  let generation = null;
  const ofGeneration = {};
  for (const event of state.events.slice().reverse()) {
    const data = event.data || {};
    if (generation !== null && data.generation_id !== generation) {
      items.push(el("li", { class: "rebalance", "data-generation": generation },
        `rebalance → generation ${generation}`, traceLink(ofGeneration[generation] || {})));
    }
    generation = data.generation_id;
    ofGeneration[generation] = event; // its oldest event: the assignment, in the rebalance's trace
    const kind = SHORT[event.type] || event.type;
    items.push(el("li", {
      class: `event ${kind.split(" ")[0]}`,
      "data-type": event.type,
      "data-sequence": Number(event.sequence),
      "data-generation": data.generation_id,
    },
    el("time", { datetime: event.time }, time(event.time)),
    el("span", { class: "kind" }, kind),
    el("span", { class: "gen" }, `gen ${data.generation_id}`),
    el("span", { class: "parts" }, describePartitions(data.partitions)),
    data.reason ? el("span", { class: "reason" }, data.reason) : null,
    traceLink(event)));
  }
  if (!items.length) items.push(el("li", { class: "muted" }, "No events yet."));
  list.replaceChildren(...items);
  renderStrip();
}

function renderStrip() {
  const strip = $("timeline-strip");
  const events = state.events.slice(-60);
  strip.replaceChildren();
  strip.append(svg("line", { x1: 10, x2: 990, y1: 40, y2: 40, class: "axis" }));
  if (!events.length) return;
  const start = new Date(events[0].time).getTime();
  const end = Math.max(Date.now(), start + 1000);
  const x = (iso) => 10 + (980 * (new Date(iso).getTime() - start)) / (end - start);
  let generation = null;
  let labelEnd = -Infinity;
  for (const event of events) {
    const data = event.data || {};
    const at = x(event.time);
    if (data.generation_id !== generation) {
      strip.append(svg("line", { x1: at, x2: at, y1: 8, y2: 62, class: "generation" }));
      if (at > labelEnd) { // labels never overlap: a crowded one is left to its line
        strip.append(svg("text", { x: at + 3, y: 16, class: "generation-label" }, `gen ${data.generation_id}`));
        labelEnd = at + 48;
      }
      generation = data.generation_id;
    }
    const kind = (SHORT[event.type] || "other").split(" ")[0];
    const dot = svg("circle", { cx: at, cy: 40, r: 6, class: `dot ${kind}` });
    dot.append(svg("title", {}, `${time(event.time)} ${SHORT[event.type] || event.type} (gen ${data.generation_id})`));
    strip.append(dot);
  }
}

const RELOAD_DELAY = "rebalance-sidecar.reloadDelay"; // ms before the next reload, per tab

async function followEvents() {
  const since = state.assignment ? Math.max(0, state.assignment.sequence - 100) : 0;
  try {
    const history = await getJSON(`/events?after=${since}&limit=${MAX_EVENTS}`, {
      headers: { Accept: "application/json" },
    });
    for (const event of history) addEvent(event);
  } catch (_) {
    // the live stream still fills the timeline
  }
  renderTimeline();
  const live = $("live");
  const source = new EventSource(`/events?after=${state.lastSequence}`);
  source.onopen = () => {
    live.textContent = "live";
    live.className = "live on";
    try {
      sessionStorage.removeItem(RELOAD_DELAY);
    } catch (_) {
      // no sessionStorage: nothing was kept
    }
  };
  source.onerror = () => {
    live.textContent = "reconnecting…";
    live.className = "live off";
    // Closed for good: the sidecar answered the reconnect with an error instead of the
    // stream (409: it came back with another journal, its numbering restarted; 503: as
    // many streams as it serves are open). The browser retries no more; start over from
    // what the sidecar has now, after 2 s, then twice as long each time in a row (up to a
    // minute), so tabs kept open at the stream bound do not reload every 2 s.
    if (source.readyState === EventSource.CLOSED) {
      let delay = 2000;
      try {
        delay = Math.min(60000, 2 * Number(sessionStorage.getItem(RELOAD_DELAY) || 1000));
        sessionStorage.setItem(RELOAD_DELAY, String(delay));
      } catch (_) {
        // no sessionStorage (a sandboxed frame): every 2 s, as before
      }
      setTimeout(() => location.reload(), delay);
    }
  };
  const onEvent = (message) => {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch (_) {
      return;
    }
    if (addEvent(event)) {
      renderTimeline();
      refreshGroupSoon();
      refreshWebhooksSoon();
    }
  };
  for (const type of Object.keys(SHORT)) source.addEventListener(type, onEvent);
  source.onmessage = onEvent;
}

// -- webhooks ---------------------------------------------------------------------------------

let webhookTimer = null;

function refreshWebhooksSoon() {
  clearTimeout(webhookTimer);
  webhookTimer = setTimeout(refreshWebhooks, 500);
}

function health(hook, deliveries) {
  if (hook.disabled) return "disabled";
  const latest = deliveries.find((d) => d.outcome !== "committed" && d.outcome !== "offsets_rejected");
  if (!latest) return "idle";
  if (latest.outcome === "delivered") return "healthy";
  return "failing";
}

function heldTheGroup(hook, deliveries) {
  // A blocking subscriber holds the group from the revoked/lost event until its 2xx.
  if (hook.mode !== "blocking") return null;
  const bySequence = new Map(state.events.map((e) => [Number(e.sequence), e]));
  const held = [];
  for (const d of deliveries) {
    if (d.outcome !== "delivered" && d.outcome !== "barrier_timeout") continue;
    const event = bySequence.get(d.sequence);
    if (!event || !GATING.has(event.type)) continue;
    held.push(Math.max(0, (new Date(d.at) - new Date(event.time)) / 1000));
  }
  return held.length ? { last: held[0], max: Math.max(...held) } : null;
}

async function refreshWebhooks() {
  clearTimeout(webhookTimer);
  try {
    const hooks = await getJSON("/webhooks");
    const rows = await Promise.all(hooks.map(async (hook) => {
      let deliveries = [];
      try {
        deliveries = await getJSON(`/webhooks/${encodeURIComponent(hook.id)}/deliveries?limit=50`);
      } catch (_) {
        deliveries = [];
      }
      return webhookRow(hook, deliveries);
    }));
    $("webhooks-empty").hidden = hooks.length > 0;
    $("webhooks").hidden = hooks.length === 0;
    $("webhooks").querySelector("tbody").replaceChildren(...rows);
  } catch (_) {
    // keep the last rendering; try again shortly
  }
  webhookTimer = setTimeout(refreshWebhooks, 3000);
}

function webhookRow(hook, deliveries) {
  const verdict = health(hook, deliveries);
  const failures = deliveries.filter((d) => d.outcome === "failed" || d.outcome === "gave_up").length;
  const timeouts = deliveries.filter((d) => d.outcome === "barrier_timeout").length;
  const lastError = deliveries.find((d) => d.error);
  const held = heldTheGroup(hook, deliveries);
  const chips = deliveries.slice(0, 12).map((d) => el("span", {
    class: `chip ${d.outcome}`,
    title: `#${d.sequence} ${d.outcome}${d.status_code ? ` (${d.status_code})` : ""} at ${time(d.at)}${d.error ? `: ${d.error}` : ""}`,
  }));
  return el("tr", { "data-webhook-id": hook.id, "data-health": verdict, class: verdict },
    el("td", {}, el("span", { class: `badge health-${verdict}` }, verdict)),
    el("td", {}, el("code", {}, hook.url), hook.disabled_reason ? el("div", { class: "muted" }, hook.disabled_reason) : null),
    el("td", {}, hook.mode),
    el("td", { class: "chips" }, ...chips),
    el("td", { class: "num" }, String(failures)),
    el("td", { class: "num" }, String(timeouts)),
    el("td", { class: "num" }, held ? `last ${ms(held.last)}, max ${ms(held.max)}` : "—"),
    el("td", { class: "error-text" }, lastError ? lastError.error : ""));
}

// -- actions ----------------------------------------------------------------------------------

function authHeaders() {
  const token = $("token").value.trim();
  return token ? { Authorization: `Bearer ${token}` } : {};
}

function say(text, ok) {
  const result = $("action-result");
  result.textContent = text;
  result.className = `result ${ok ? "ok" : "bad"}`;
}

async function act(path, init, describe) {
  try {
    const body = await getJSON(path, {
      method: "POST",
      ...init,
      headers: { ...(init.headers || {}), ...authHeaders() },
    });
    say(describe(body), true);
  } catch (error) {
    if (error.status === 401) {
      say("A token is required: enter SIDECAR_API_TOKEN above.", false);
      $("token").focus();
    } else {
      say(`Refused: ${error.message}`, false);
    }
  }
}

function setUpActions() {
  const remembered = sessionStorage.getItem("sidecar-token");
  if (remembered) $("token").value = remembered;
  $("token").addEventListener("change", () => sessionStorage.setItem("sidecar-token", $("token").value));
  $("enforce").addEventListener("click", () => {
    const reason = $("reason").value.trim() || "enforce-rebalance requested from the status page";
    act("/enforce-rebalance", {
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ reason }),
    }, (body) => `Rebalance requested (from generation ${body.generation_id}${body.coalesced ? ", joined one under way" : ""}).`);
  });
  const drain = $("drain");
  let armed = null;
  drain.addEventListener("click", () => {
    if (!armed) {
      drain.textContent = "Click again to leave the group";
      armed = setTimeout(() => {
        armed = null;
        drain.textContent = "Drain (leave the group)";
      }, 5000);
      return;
    }
    clearTimeout(armed);
    armed = null;
    drain.textContent = "Drain (leave the group)";
    say("Draining…", true);
    act("/drain", {}, () => "Drained: this sidecar left the group.");
  });
}

// -- start ------------------------------------------------------------------------------------

async function main() {
  setUpActions();
  try {
    renderAssignment(await getJSON("/assignment"));
  } catch (_) {
    // followAssignment retries
  }
  followAssignment();
  refreshGroup();
  refreshWebhooks();
  followEvents();
  setInterval(renderStrip, 5000);
}

main();
