// The Switchboard operator console: a handoff inbox kept live from the tenant's event stream,
// a conversation view with the operator's actions, an execution viewer, an overview, insights
// (insights.js), and the
// builder's pages (builder.js: agents, triggers, tools, skills, the session monitor). Plain
// modules, no build step; the API key stays in this tab's sessionStorage and travels only in the
// Authorization header (the event stream is read with fetch, not EventSource, for that reason).

import * as builder from "./builder.js";
import * as insights from "./insights.js";

const SESSION_KEY = "switchboard.console";
const PRIORITY = { urgent: 0, high: 1, normal: 2, low: 3 };

let auth = JSON.parse(sessionStorage.getItem(SESSION_KEY) || "null");
// a tab signed in before principals (no name from the server) signs in again
if (auth && !auth.principal) auth = null;
// How calls reach the API: `none` (the page sends the key) or `aws-sigv4` (the local
// `switchboard console` signs every call; no key is asked for).
let config = { signing: "none" };
let polling = null; // the inbox's timer when the deployment pushes no events
let stream = null; // the AbortController of the live event stream
let lastEventId = null;
let refreshLive = null; // set while a live page (the inbox, the session monitor) is on screen
let pageTimer = null; // the session monitor's timer
const main = document.getElementById("main");

// ---------- small helpers ----------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function say(text, error = false) {
  const s = document.getElementById("status");
  s.textContent = text;
  s.classList.toggle("error", error);
}

function ago(iso) {
  if (!iso) return "";
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d`;
}

function pretty(v) {
  return el("pre", {}, typeof v === "string" ? v : JSON.stringify(v, null, 2));
}

const t = () => encodeURIComponent(auth.tenant);

/** One API call; a problem+json answer becomes an Error whose message names the fields at fault. */
async function api(method, path, body, headers = {}) {
  const init = { method, headers: { "X-Switchboard-Console": "1", ...headers } };
  if (auth.key) init.headers.Authorization = `Bearer ${auth.key}`;
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  if (!res.ok) {
    // one field at fault is in the detail already; several are listed after it
    const errors = data && data.errors ? data.errors : [];
    const fields = errors.length > 1 ? errors.map((e) => `${e.pointer}: ${e.detail}`) : [];
    const err = new Error([data && (data.detail || data.title), ...fields].filter(Boolean).join("; ") || res.statusText);
    err.status = res.status;
    err.errors = errors;
    throw err;
  }
  return data;
}

// ---------- sign-in ----------

function signInForm() {
  const signed = config.signing === "aws-sigv4";
  document.getElementById("nav").hidden = true;
  document.getElementById("sign-out").hidden = true;
  document.getElementById("who").textContent = "";
  main.replaceChildren(
    el("h1", {}, "Sign in"),
    el("form", { class: "stack signin", id: "sign-in", onsubmit: signIn },
      el("label", { for: "tenant" }, "Tenant id"),
      el("input", { id: "tenant", name: "tenant", required: true, autocomplete: "organization", spellcheck: "false" }),
      signed ? el("p", { class: "muted", id: "signed" }, `Calls to ${config.upstream} are signed by switchboard console with your AWS credentials; no key is needed here.`) : [
        el("label", { for: "key" }, "API key (a tenant key, or the admin key)"),
        el("input", { id: "key", name: "key", type: "password", required: true, autocomplete: "current-password" })],
      el("button", { type: "submit" }, "Sign in"),
      el("p", { class: "muted" }, "The key is kept in this tab only and forgotten when the tab closes.")));
  document.getElementById("tenant").focus();
}

async function signIn(ev) {
  ev.preventDefault();
  const f = new FormData(ev.target);
  auth = { tenant: f.get("tenant").trim(), key: f.get("key") || null };
  try {
    // who the key (or the AWS identity) is: the name on claims and replies, and what it may do
    const me = await api("GET", `/tenants/${t()}/me`);
    Object.assign(auth, { principal: me.principal, role: me.role, groups: me.groups });
  } catch (e) {
    auth = null;
    const denied = config.signing === "aws-sigv4" ? "Your AWS identity may not call this tenant's API." : "That key is not valid.";
    say(e.status === 401 || e.status === 403 ? `${denied} ${e.message}` : e.status === 404 ? "No such tenant for that key." : e.message, true);
    return;
  }
  sessionStorage.setItem(SESSION_KEY, JSON.stringify(auth));
  say(`Signed in to ${auth.tenant}.`);
  start();
  // (a change of the hash renders the page by itself)
  if (location.hash === "#/inbox") render();
  else location.hash = "#/inbox";
}

function signOut() {
  sessionStorage.removeItem(SESSION_KEY);
  auth = null;
  clearInterval(polling);
  if (stream) stream.abort();
  stream = null;
  say("Signed out.");
  location.hash = "";
  signInForm();
}

function start() {
  document.getElementById("nav").hidden = false;
  document.getElementById("sign-out").hidden = false;
  document.getElementById("who").textContent = `${auth.principal} (${auth.role}) · ${auth.tenant}`;
  listen();
}

// ---------- live events ----------

/** Reads the tenant's event stream with fetch (so the key stays in a header) and reconnects. */
async function listen() {
  if (stream) stream.abort();
  const controller = new AbortController();
  stream = controller;
  let delay = 1000;
  while (!controller.signal.aborted) {
    try {
      const headers = { "X-Switchboard-Console": "1", Accept: "text/event-stream" };
      if (auth.key) headers.Authorization = `Bearer ${auth.key}`;
      if (lastEventId) headers["Last-Event-ID"] = lastEventId;
      const res = await fetch(`/tenants/${t()}/events/stream`, { headers, signal: controller.signal });
      if (res.status === 404) {
        // This deployment keeps no event stream: look every 5 s instead.
        document.body.dataset.live = "polling";
        polling = setInterval(() => refreshLive && refreshLive(), 5000);
        return;
      }
      if (!res.ok) throw new Error(`event stream: HTTP ${res.status}`);
      delay = 1000;
      document.body.dataset.live = "on";
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          onEvent(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      }
    } catch (e) {
      if (controller.signal.aborted) return;
    }
    document.body.dataset.live = "off";
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 30000);
  }
}

function onEvent(block) {
  let name = "message";
  for (const line of block.split("\n")) {
    if (line.startsWith("id:")) lastEventId = line.slice(3).trim();
    else if (line.startsWith("event:")) name = line.slice(6).trim();
  }
  const live = ["session.", "approval.", "execution."].some((p) => name.startsWith(p));
  if (live && refreshLive) refreshLive();
}

// ---------- inbox ----------

/** One tool call waiting for approval: what the model asked for, and (for a role that operates)
 *  the arguments to run it with, editable, and a reason to deny it or to cancel the whole turn
 *  (a person takes the conversation). */
function approvalItem(a, agents) {
  const id = a.approvalId;
  const operates = (auth.groups || []).includes("operate");
  const head = el("p", {},
    el("strong", {}, a.tool), " in ", el("a", { href: `#/session/${a.sessionId}` }, a.conversationId),
    " · ", agents.get(a.agentId) || el("code", {}, a.agentId),
    " · asked ", ago(a.requestedAt), " ago · expires ", new Date(a.expiresAt).toLocaleString());
  if (a.status !== "pending") {
    return el("li", { class: "card", "data-approval": id, "data-status": a.status }, head,
      el("p", { class: "muted" }, `${a.status} by ${a.decidedBy}; the turn resumes`));
  }
  if (!operates) return el("li", { class: "card", "data-approval": id, "data-status": a.status }, head, pretty(a.arguments));
  // an edit clears the complaint about the previous try
  const args = el("textarea", { id: `approve-args-${id}`, rows: "5", spellcheck: "false", class: "args", oninput: () => say("") });
  args.value = JSON.stringify(a.arguments, null, 2);
  const reason = el("input", { id: `deny-reason-${id}`, size: "40", autocomplete: "off" });
  const approve = async (ev) => {
    ev.preventDefault();
    let edited;
    try {
      edited = JSON.parse(args.value);
    } catch (e) {
      say(`The arguments are not JSON: ${e.message}`, true);
      args.focus();
      return;
    }
    const body = JSON.stringify(edited) === JSON.stringify(a.arguments) ? {} : { arguments: edited };
    await decide(() => api("POST", `/tenants/${t()}/approvals/${id}/approve`, body), `Approved ${a.tool}; the turn resumes.`);
  };
  const deny = async (ev) => {
    ev.preventDefault();
    await decide(() => api("POST", `/tenants/${t()}/approvals/${id}/deny`, { reason: reason.value }), `Denied ${a.tool}; the model is told why.`);
  };
  const cancel = async () => {
    await decide(() => api("POST", `/tenants/${t()}/sessions/${a.sessionId}/cancel`, { reason: reason.value }),
      `Cancelled the turn: ${a.tool} does not run, and the conversation comes to the inbox.`);
  };
  return el("li", { class: "card", "data-approval": id, "data-status": a.status }, head,
    el("form", { class: "stack approve", onsubmit: approve },
      el("label", { for: args.id }, "Arguments to run it with (edit to change them)"), args,
      el("div", {}, el("button", { type: "submit" }, "Approve"))),
    el("form", { class: "inline deny", onsubmit: deny },
      el("label", { for: reason.id }, "Reason"), reason,
      el("button", { type: "submit", class: "secondary" }, "Deny"),
      el("button", { type: "button", class: "secondary cancel", onclick: cancel }, "Cancel turn, take over")));
}

async function decide(call, done) {
  try {
    await call();
    say(done);
  } catch (e) {
    say(e.message, true);
  }
  if (refreshLive) refreshLive();
}

async function inbox() {
  main.replaceChildren(el("h1", {}, "Handoff inbox"), el("p", { class: "muted" }, "Loading…"));
  let timer = null;
  let seen = null;
  let shownAs = null; // what the inbox on screen shows, to leave it alone when nothing changed
  // Agents by id, for their names (read once per visit of the inbox).
  const agents = await api("GET", `/tenants/${t()}/agents?limit=100`).then((a) => new Map(a.items.map((x) => [x.agentId, x.name]))).catch(() => new Map());
  const load = async () => {
    const approvals = await api("GET", `/tenants/${t()}/approvals`).then((a) => a.approvals).catch((e) => {
      say(e.message, true);
      return [];
    });
    const waiting = [];
    let cursor = null;
    for (let page = 0; page < 10; page++) {
      const q = `status=handed_off&limit=100${cursor ? `&cursor=${cursor}` : ""}`;
      const data = await api("GET", `/tenants/${t()}/sessions?${q}`);
      waiting.push(...data.items.filter((s) => s.handedOffTo && s.handedOffTo.type === "human"));
      if (!data.nextCursor) break;
      cursor = data.nextCursor;
    }
    waiting.sort((a, b) =>
      (PRIORITY[a.handoffPriority || "normal"] - PRIORITY[b.handoffPriority || "normal"]) ||
      (Date.parse(a.endedAt || a.updatedAt) - Date.parse(b.endedAt || b.updatedAt)));
    // Nothing changed since the last render: the page stays as it is (an operator may be typing).
    const signature = JSON.stringify([approvals.map((a) => [a.approvalId, a.status]),
      waiting.map((s) => [s.sessionId, s.updatedAt, s.claim && s.claim.operator])]);
    // The operator moved to another page meanwhile: a late answer must not replace it.
    if (refreshLive !== refresh) return;
    if (signature === shownAs && main.querySelector("#inbox")) return;
    shownAs = signature;
    const rows = waiting.map((s) => {
      const fresh = seen && !seen.has(s.sessionId);
      const summary = (s.handoffContext && s.handoffContext.summary) || (s.summary && s.summary.text) || "";
      return el("tr", { class: fresh ? "new" : null, "data-session": s.sessionId },
        el("td", {}, el("span", { class: `pill ${s.handoffPriority || "normal"}` }, s.handoffPriority || "normal")),
        el("td", {}, ago(s.endedAt || s.updatedAt)),
        el("td", {}, el("a", { href: `#/session/${s.sessionId}` }, s.conversationId)),
        el("td", {}, s.channel || "—"),
        el("td", {}, s.handoffReason || ""),
        el("td", {}, summary),
        el("td", {}, agents.get(s.agentId) || el("code", {}, s.agentId)),
        el("td", {}, s.claim ? s.claim.operator : el("span", { class: "muted" }, "unclaimed")));
    });
    seen = new Set(waiting.map((s) => s.sessionId));
    // An approval already on screen, unchanged, stays as it is (what the operator typed into it
    // included) when the inbox refreshes.
    const onScreen = new Map([...main.querySelectorAll("#approvals > li")].map((li) => [`${li.dataset.approval}/${li.dataset.status}`, li]));
    const items = approvals.map((a) => onScreen.get(`${a.approvalId}/${a.status}`) || approvalItem(a, agents));
    const pending = approvals.length ? [
      el("h2", { id: "approvals-heading" }, `Tool calls waiting for approval (${approvals.length})`),
      el("ul", { id: "approvals", class: "approvals", "aria-labelledby": "approvals-heading" }, ...items),
    ] : [];
    const focused = document.activeElement && document.activeElement.id;
    main.replaceChildren(
      el("h1", {}, "Handoff inbox"),
      ...pending,
      el("p", { class: "muted" }, `${waiting.length} conversation${waiting.length === 1 ? "" : "s"} waiting for a human; most urgent, then longest waiting, first. ${document.body.dataset.live === "polling" ? "Refreshed every 5 s (this deployment pushes no events)." : "Updates live."}`),
      el("table", { id: "inbox" },
        el("caption", { class: "muted" }, "Conversations handed to humans"),
        el("thead", {}, el("tr", {}, ["Priority", "Waiting", "Conversation", "Channel", "Reason", "Summary", "Handed off by", "Claimed by"].map((h) => el("th", { scope: "col" }, h)))),
        el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: "8", class: "muted" }, "Nobody is waiting.")))));
    if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
  };
  const refresh = () => {
    clearTimeout(timer);
    timer = setTimeout(() => load().catch((e) => say(e.message, true)), 150);
  };
  refreshLive = refresh;
  await load();
}

// ---------- conversation ----------

/** An agent's name with its id beside it, or the id alone for an agent that is gone. */
function agentName(agents, agentId) {
  const agent = agents.items.find((a) => a.agentId === agentId);
  return agent ? [agent.name, " ", el("code", { class: "muted" }, agentId)] : el("code", {}, agentId);
}

async function conversation(sessionId) {
  const session = await api("GET", `/tenants/${t()}/sessions/${sessionId}`);
  const [log, executions, agents] = await Promise.all([
    api("GET", `/tenants/${t()}/conversations/${encodeURIComponent(session.conversationId)}/messages?limit=100`).catch(() => null),
    api("GET", `/tenants/${t()}/sessions/${sessionId}/executions?limit=50`),
    api("GET", `/tenants/${t()}/agents?limit=100`),
  ]);
  const human = session.status === "handed_off" && session.handedOffTo && session.handedOffTo.type === "human";
  const mine = session.claim && session.claim.operator === auth.principal;
  const claimedByOther = session.claim && !mine;

  const messages = log ? log.messages.map((m) =>
    el("li", { class: m.sender }, el("span", { class: "who" }, `${m.sender === "human" ? "human operator" : m.sender} · ${new Date(m.createdAt).toLocaleTimeString()}`), m.text))
    : session.transcript.map((m) => el("li", { class: m.role === "user" ? "customer" : "agent" },
      el("span", { class: "who" }, m.role === "user" ? "customer" : "agent"),
      m.content.filter((b) => b.type === "text").map((b) => b.text).join("\n")));

  const actions = [];
  const operates = (auth.groups || []).includes("operate");
  if (human && !operates) {
    actions.push(el("h2", {}, "Actions"), el("p", { class: "muted", id: "no-actions" },
      `Your role (${auth.role}) reads conversations; claiming, replying and ending need an operator's or an owner's key.`));
  }
  if (human && operates) {
    actions.push(el("h2", {}, "Actions"));
    if (!session.claim) {
      actions.push(el("button", { id: "claim", type: "button", onclick: () => act(() => api("POST", `/tenants/${t()}/sessions/${sessionId}/claim`, {}), "Claimed.") }, "Claim (assign to me)"));
    } else {
      actions.push(el("p", {}, `Claimed by ${session.claim.operator} ${ago(session.claim.at)} ago.`));
    }
    if (!claimedByOther) {
      let key = null; // one key per message: a double click or a retry sends it once
      const reply = el("form", { class: "stack", id: "reply", onsubmit: async (ev) => {
        ev.preventDefault();
        const text = ev.target.elements.text.value;
        key = key || `console-${crypto.randomUUID()}`;
        const button = ev.target.querySelector("button");
        button.disabled = true;
        try {
          await api("POST", `/tenants/${t()}/sessions/${sessionId}/messages`, { text }, { "Idempotency-Key": key });
          key = null;
          say("Sent.");
          render();
        } catch (e) {
          say(e.message, true);
        } finally {
          button.disabled = false;
        }
      } },
        el("label", { for: "reply-text" }, "Reply as a human"),
        el("textarea", { id: "reply-text", name: "text", rows: "3", required: true, oninput: () => { key = null; } }),
        el("button", { type: "submit" }, "Send"));
      const back = el("form", { class: "stack", id: "hand-back", onsubmit: (ev) => {
        ev.preventDefault();
        const f = new FormData(ev.target);
        act(() => api("POST", `/tenants/${t()}/sessions/${sessionId}/handoff`, { targetType: "agent", targetAgentId: f.get("agent"), reason: f.get("note") }), "Handed back to the agent.");
      } },
        el("label", { for: "hand-back-agent" }, "Hand back to agent"),
        el("select", { id: "hand-back-agent", name: "agent" }, agents.items.filter((a) => a.status === "active").map((a) =>
          el("option", { value: a.agentId, selected: a.agentId === session.agentId }, `${a.name} (${a.agentId})`))),
        el("label", { for: "hand-back-note" }, "Note for the agent"),
        el("input", { id: "hand-back-note", name: "note", required: true, maxlength: "1000" }),
        el("button", { type: "submit", class: "secondary" }, "Hand back"));
      const end = el("form", { class: "inline", id: "end", onsubmit: (ev) => {
        ev.preventDefault();
        const note = new FormData(ev.target).get("note");
        act(() => api("POST", `/tenants/${t()}/sessions/${sessionId}/end`, { note: note || null }), "Conversation ended.");
      } },
        el("label", { for: "end-note" }, "Closing note"),
        el("input", { id: "end-note", name: "note", maxlength: "1000" }),
        el("button", { type: "submit", class: "secondary" }, "End conversation"));
      actions.push(reply, back, end);
    }
  }

  const ctx = session.handoffContext;
  main.replaceChildren(
    el("h1", {}, `Conversation ${session.conversationId}`),
    el("div", { class: "grid" },
      el("section", { "aria-labelledby": "transcript-h" },
        el("div", { class: "card" }, el("h2", { id: "transcript-h" }, "Transcript"), el("ul", { class: "messages", id: "messages" }, messages)),
        el("div", { class: "card" }, actions.length ? actions : el("p", { class: "muted" }, "No human owns this conversation: nothing to do here."))),
      el("aside", { "aria-label": "Session" },
        el("div", { class: "card" },
          el("h2", {}, "Session"),
          el("dl", { class: "kv" },
            el("dt", {}, "Status"), el("dd", {}, session.status + (human ? " (to a human)" : "")),
            el("dt", {}, "Agent"), el("dd", { id: "session-agent" }, agentName(agents, session.agentId)),
            el("dt", {}, "Channel"), el("dd", {}, session.channel || "—"),
            el("dt", {}, "Priority"), el("dd", {}, session.handoffPriority || "—"),
            el("dt", {}, "Reason"), el("dd", {}, session.handoffReason || "—"),
            el("dt", {}, "Step"), el("dd", {}, session.currentStep || "—"),
            el("dt", {}, "Skills"), el("dd", {}, (session.loadedSkills || []).join(", ") || "—"),
            el("dt", {}, "Tokens"), el("dd", {}, session.tokensUsed || 0),
            el("dt", {}, "Started"), el("dd", {}, new Date(session.startedAt).toLocaleString()))),
        ctx ? el("div", { class: "card" }, el("h2", {}, "Handoff context"), el("dl", { class: "kv" },
          el("dt", {}, "From agent"), el("dd", {}, el("code", {}, ctx.fromAgentId)),
          el("dt", {}, "Reason"), el("dd", {}, ctx.reason),
          ctx.summary ? [el("dt", {}, "Summary"), el("dd", {}, ctx.summary)] : null), pretty(ctx.relevantInfo)) : null,
        el("div", { class: "card" }, el("h2", {}, "Session memory"), Object.keys(session.memory || {}).length ? pretty(session.memory) : el("p", { class: "muted" }, "Empty.")),
        el("div", { class: "card" }, el("h2", {}, "Executions"),
          el("ul", { id: "executions" }, executions.items.map((x) =>
            el("li", {}, el("a", { href: `#/execution/${x.executionId}` }, new Date(x.createdAt).toLocaleTimeString()), " ",
              el("span", { class: `pill ${x.status}` }, x.status))))))));
}

async function act(call, done) {
  try {
    await call();
    say(done);
    render();
  } catch (e) {
    say(e.message, true);
  }
}

// ---------- execution viewer ----------

/** A recorded text that redaction replaced: its length and hash, never the words. */
function shown(text) {
  if (text && typeof text === "object" && text.redacted) {
    return el("span", { class: "redacted" }, `[redacted: ${text.redacted.bytes} bytes, sha256 ${text.redacted.sha256.slice(0, 12)}…]`);
  }
  return typeof text === "string" ? text : JSON.stringify(text, null, 2);
}

/** One message as the model saw it: each block, text as text, tool calls and results as JSON. */
function blocks(message) {
  return (message.content || []).map((b) => {
    if (b.type === "text") return el("p", { class: "block" }, shown(b.text));
    if (b.type === "toolUse") return el("div", { class: "block" }, "Tool call ", el("code", {}, b.name), " ", el("code", { class: "muted" }, b.toolUseId), pretty(b.input && b.input.redacted ? shown(b.input) : b.input));
    if (b.type === "toolResult") return el("div", { class: "block" }, `Tool result${b.isError ? " (error)" : ""} `, el("code", { class: "muted" }, b.toolUseId), pretty(b.content && b.content.redacted ? shown(b.content) : b.content));
    return pretty(b);
  });
}

const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

const gone = () => el("p", { class: "muted" }, "No longer kept (its retention ended).");

/** What one call was sent and answered, from `…/model-calls`; collapsible, with tokens per part. */
function callContent(content, n) {
  if (!content || !content.request) {
    return el("p", { class: "muted" }, "The request and answer were not recorded (the tenant's recording is off).");
  }
  const r = content.request;
  const part = (p, render) => (p.content === null || p.content === undefined ? gone() : render(p.content));
  const tokens = r.system.tokens + r.tools.tokens + r.messages.reduce((a, m) => a + m.tokens, 0);
  const asJson = () => JSON.stringify({
    model: r.model, system: r.system.content, messages: r.messages.map((m) => m.content), tools: r.tools.content, config: r.config,
  }, null, 2);
  const copyArea = el("textarea", { class: "copy", id: `request-json-${n}`, readonly: true, rows: "8", hidden: true, "aria-label": "The request as JSON" });
  const copy = el("button", { type: "button", class: "secondary", id: `copy-request-${n}`, onclick: async () => {
    copyArea.value = asJson();
    copyArea.hidden = false;
    copyArea.select();
    try {
      await navigator.clipboard.writeText(copyArea.value);
      say("The request is on the clipboard as JSON.");
    } catch {
      say("Select and copy the request below (the clipboard is not available here).");
    }
  } }, "Copy request as JSON");
  const toolNames = (tools) => el("ul", {}, tools.map((tool) => el("li", {}, el("details", {}, el("summary", {}, el("code", {}, tool.name), ` ${tool.description}`), pretty(tool.inputSchema)))));
  const answer = content.response && content.response.message;
  return el("div", { class: "call-content" },
    el("details", { class: "prompt", id: `prompt-${n}` },
      el("summary", {}, `Prompt · about ${tokens} tokens (system ${r.system.tokens} · ${plural(r.messages.length, "message")} · tools ${r.tools.tokens})`),
      el("h4", {}, `System prompt · ${r.system.tokens} tokens`), part(r.system, (v) => el("pre", { class: "system" }, shown(v))),
      el("h4", {}, `Messages · ${r.messages.length}`),
      el("ol", { class: "prompt-messages" }, r.messages.map((m) => el("li", {},
        m.content ? el("details", {}, el("summary", {}, `${m.content.role} · ${m.tokens} tokens`), blocks(m.content)) : gone()))),
      el("h4", {}, `Tools · ${r.tools.tokens} tokens`), part(r.tools, toolNames),
      el("h4", {}, "Configuration"), pretty({ model: r.model, ...r.config }),
      copy, copyArea),
    el("details", { class: "answer", id: `answer-${n}`, open: true },
      el("summary", {}, `Answer · ${answer ? answer.tokens : 0} tokens`),
      answer ? part(answer, (v) => blocks(v)) : gone()));
}

function modelCall(c, content, n) {
  return el("li", { class: "model-call" },
    el("strong", {}, "Model call "), el("code", {}, c.model), " ", el("span", { class: "pill" }, c.stopReason),
    c.purpose ? ` (${c.purpose})` : "",
    el("dl", { class: "kv" },
      el("dt", {}, "Tokens"), el("dd", {}, `${c.usage.inputTokens} in · ${c.usage.outputTokens} out${c.usage.cacheReadTokens ? ` · ${c.usage.cacheReadTokens} cache read` : ""}`),
      el("dt", {}, "Cost"), el("dd", {}, c.costUsd == null ? "unpriced" : `$${c.costUsd}`),
      el("dt", {}, "Latency"), el("dd", {}, `${c.latencyMs} ms`),
      (c.fallbackFrom || []).length ? [el("dt", {}, "Fallbacks"), el("dd", {}, c.fallbackFrom.map((f) => `${f.model}: ${f.kind}`).join("; "))] : null),
    callContent(content, n));
}

function toolCall(c) {
  const w = c.webhook;
  return el("li", { class: "tool-call" },
    el("strong", {}, "Tool call "), el("code", {}, c.name), c.isError ? [" ", el("span", { class: "pill failed" }, "error")] : "", ` · ${c.latencyMs} ms`,
    w ? el("p", {}, `Webhook ${w.host}: ${w.outcome}${w.status ? `, HTTP ${w.status}` : ""}, ${w.attempts} attempt${w.attempts === 1 ? "" : "s"}`) : null,
    el("details", {}, el("summary", {}, "Arguments and result"), pretty(c.input), pretty(c.output)));
}

/** Each model call followed by the tool calls it asked for, in the order they ran; `contents`
 * is what `…/model-calls` answered, `sub` the sub-agent call whose run this is. */
function timeline(x, contents, sub = null) {
  const items = [];
  const tools = x.toolCalls || [];
  const askedBy = (n) => tools.filter((c) => (c.afterModelCall || 0) === n);
  const contentOf = (i) => contents.find((c) => c.index === i && (c.subAgentCall || null) === sub);
  (x.modelCalls || []).forEach((c, i) => {
    items.push(modelCall(c, contentOf(i), `${sub || "own"}-${i}`));
    askedBy(i + 1).forEach((t) => items.push(toolCall(t)));
  });
  // Asked for by no model call of this record (or recorded before calls were numbered).
  askedBy(0).forEach((t) => items.push(toolCall(t)));
  (x.children || []).forEach((child) => items.push(el("li", { class: "child" }, el("strong", {}, "Sub-agent "), el("code", {}, child.agentId), el("ol", { class: "timeline" }, timeline(child, contents, child.toolUseId)))));
  return items;
}

async function execution(id) {
  const [x, agents, recorded] = await Promise.all([
    api("GET", `/tenants/${t()}/executions/${id}`),
    api("GET", `/tenants/${t()}/agents?limit=100`).catch(() => ({ items: [] })),
    api("GET", `/tenants/${t()}/executions/${id}/model-calls`).catch(() => ({ calls: [] })),
  ]);
  const u = x.tokenUsage || {};
  main.replaceChildren(
    el("h1", {}, `Execution ${x.executionId}`),
    el("div", { class: "card" }, el("dl", { class: "kv" },
      el("dt", {}, "Status"), el("dd", {}, el("span", { class: `pill ${x.status}` }, x.status)),
      el("dt", {}, "Agent"), el("dd", { id: "execution-agent" }, agentName(agents, x.agentId)),
      el("dt", {}, "Session"), el("dd", {}, el("a", { href: `#/session/${x.sessionId}` }, x.sessionId)),
      el("dt", {}, "Source"), el("dd", {}, x.sourceId),
      el("dt", {}, "Tokens"), el("dd", {}, `${u.inputTokens || 0} in · ${u.outputTokens || 0} out`),
      el("dt", {}, "Cost"), el("dd", {}, x.costUsd == null ? "unpriced" : `$${x.costUsd}`),
      el("dt", {}, "Latency"), el("dd", {}, `${x.latencyMs} ms`),
      x.error ? [el("dt", {}, "Error"), el("dd", { class: "error" }, `${x.error.kind}${x.error.reason ? ` (${x.error.reason})` : ""}: ${x.error.message}`)] : null,
      x.coalescedInto ? [el("dt", {}, "Answered in"), el("dd", { id: "coalesced-into" }, el("a", { href: `#/execution/${x.coalescedInto}` }, x.coalescedInto))] : null,
      (x.coalesced || []).length ? [el("dt", {}, "Also answers"), el("dd", { id: "coalesced" }, x.coalesced.map((c) => c.messageId).join(", "))] : null,
      x.interruptedBy ? [el("dt", {}, "Interrupted by"), el("dd", { id: "interrupted-by" }, `message ${x.interruptedBy.messageId}, whose turn answers both`)] : null)),
    el("h2", {}, "Timeline"),
    el("ol", { class: "timeline", id: "timeline" }, timeline(x, recorded.calls)),
    el("h2", {}, "Actions"), pretty(x.actions),
    el("h2", {}, "Input"), pretty(x.input));
}

// ---------- overview ----------

const STATUSES = ["success", "handed_off", "ended", "max_iterations", "budget_exceeded", "rate_limited", "timeout", "failed", "skipped", "operator", "coalesced", "interrupted", "abandoned"];

async function overview() {
  const today = new Date().toISOString().slice(0, 10);
  const from = new Date(Date.now() - 6 * 86400000).toISOString().slice(0, 10);
  const [usage, waiting, activity] = await Promise.all([
    api("GET", `/tenants/${t()}/usage?from=${from}&to=${today}`),
    api("GET", `/tenants/${t()}/sessions?status=handed_off&limit=100`),
    api("GET", `/tenants/${t()}/activity?hours=24`),
  ]);
  const humans = waiting.items.filter((s) => s.handedOffTo && s.handedOffTo.type === "human").length;
  const days = usage.byDay || [];
  const byStatus = activity.executions || {};
  const failing = (byStatus.failed || 0) + (byStatus.timeout || 0);
  // every customer message handled leaves a record; an operator's actions leave records too
  const messages = activity.total - (byStatus.operator || 0);
  const dead = activity.deadLetters;
  // the statuses seen in the span, in the API's order
  const statuses = STATUSES.filter((s) => byStatus[s]);
  const busiest = Math.max(1, ...activity.byHour.map((h) => h.total));
  const hourLabel = (iso) => new Date(iso).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  const active = activity.byHour.filter((h) => h.total > 0).reverse();
  main.replaceChildren(
    el("h1", {}, "Overview"),
    el("div", { class: "stats" },
      el("div", { class: "card" }, el("div", { class: "n", id: "waiting-count" }, humans), "waiting for a human"),
      el("div", { class: "card" }, el("div", { class: "n", id: "executions-24h" }, activity.total), "executions, 24 hours"),
      el("div", { class: "card" }, el("div", { class: "n", id: "messages-24h" }, messages), "customer messages handled, 24 hours"),
      el("div", { class: "card" + (failing ? " alarm" : "") }, el("div", { class: "n", id: "failing-24h" }, failing), "failed or timed out, 24 hours"),
      el("div", { class: "card" + (dead ? " alarm" : ""), title: dead == null ? "Counted for all tenants by the stack's WorkDeadLetterAlarm" : "" },
        el("div", { class: "n", id: "dead-letters" }, dead == null ? "—" : dead), "dead letters"),
      el("div", { class: "card" }, el("div", { class: "n" }, usage.total ? usage.total.calls : 0), "model calls, 7 days"),
      el("div", { class: "card" }, el("div", { class: "n" }, usage.total ? usage.total.inputTokens + usage.total.outputTokens : 0), "tokens, 7 days"),
      el("div", { class: "card" }, el("div", { class: "n" }, usage.total && usage.total.costUsd != null ? `$${usage.total.costUsd}` : "—"), "cost, 7 days")),
    el("h2", {}, "Executions, last 24 hours"),
    el("div", { class: "bars", role: "img", "aria-label": `Executions per hour over the last 24 hours, ${activity.total} in all` },
      activity.byHour.map((h) => {
        const bar = el("div", { class: "bar" + (h.total ? "" : " empty"), title: `${hourLabel(h.hour)}: ${h.total}` });
        bar.style.height = `${Math.max(2, Math.round((h.total / busiest) * 100))}%`; // CSSOM: allowed by the CSP
        return bar;
      })),
    active.length === 0 ? el("p", { class: "muted" }, "Nothing ran in the last 24 hours.") :
      el("table", { id: "activity" },
        el("thead", {}, el("tr", {}, ["Hour", "Executions", ...statuses].map((h) => el("th", { scope: "col" }, h.replace("_", " "))))),
        el("tbody", {}, active.map((h) => el("tr", {},
          el("td", {}, hourLabel(h.hour)), el("td", {}, h.total),
          statuses.map((s) => el("td", { class: s === "failed" || s === "timeout" ? "error" : "" }, h.executions[s] || 0)))))),
    el("h2", {}, "By day"),
    el("table", {}, el("thead", {}, el("tr", {}, ["Day", "Calls", "Input tokens", "Output tokens", "Cost"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, days.map((d) => el("tr", {}, el("td", {}, d.day), el("td", {}, d.calls), el("td", {}, d.inputTokens), el("td", {}, d.outputTokens), el("td", {}, d.costUsd == null ? "—" : `$${d.costUsd}`))))));
}

// ---------- routing ----------

async function render() {
  if (!auth) return signInForm();
  refreshLive = null;
  clearInterval(pageTimer);
  const [path, query] = location.hash.split("?");
  const [, page, id] = path.split("/");
  const params = new URLSearchParams(query || "");
  try {
    if (page === "session" && id) await conversation(id);
    else if (page === "execution" && id) await execution(id);
    else if (page === "overview") await overview();
    else if (page === "insights") await insights.page(params);
    else if (["agents", "triggers", "tools", "skills"].includes(page)) await builder.list(page);
    else if (page === "agent" && id) await builder.agent(id);
    else if (page === "trigger" && id) await builder.trigger(id);
    else if ((page === "tool" || page === "skill") && id) await builder.json(`${page}s`, id);
    else if (page === "sessions") {
      const load = await builder.sessions(params);
      let timer = null;
      refreshLive = () => {
        clearTimeout(timer);
        timer = setTimeout(() => load().catch((e) => say(e.message, true)), 150);
      };
      // no event announces a new session or a turn: look again every 10 s as well
      pageTimer = setInterval(refreshLive, 10000);
    }
    else await inbox();
    document.body.dataset.view = page || "inbox";
  } catch (e) {
    say(e.message, true);
    if (e.status === 401) signOut();
  }
}

builder.install({ el, api, say, sayAcross: (text) => sayAcross(text), t, pretty, main, auth: () => auth });
insights.install({ el, api, say, t, main });
document.getElementById("sign-out").addEventListener("click", signOut);
document.getElementById("find-execution").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const id = new FormData(ev.target).get("id").trim();
  if (id) location.hash = `#/execution/${id}`;
});
// A status said just before a move to another page (a record saved for the first time) stays.
let kept = null;
const sayAcross = (text) => { kept = text; say(text); };
window.addEventListener("hashchange", () => { say(kept || ""); kept = null; render(); });
fetch("/console/config.json").then((r) => r.json()).then((c) => { config = c; }).catch(() => {}).finally(() => {
  if (auth) start();
  render();
});
