// The console's builder pages: agents and triggers written as forms, tools and skills as JSON
// (tools also imported from an MCP server, with their schemas, and refreshed from it),
// each refusal of the server shown next to the field its pointer names; the kept versions of a
// record with a diff and a rollback; the trigger tester beside the trigger form; and a monitor
// of every session of the tenant, kept live. Same conventions as console.js: plain DOM, no
// build step, native labelled controls only. `install` hands this module console.js's helpers.

let h; // { el, api, say, sayAcross, t, pretty, auth, main }

export function install(helpers) {
  h = helpers;
}

const SERVER_SET = ["tenantId", "agentId", "triggerId", "toolId", "skillId", "createdAt", "updatedAt", "version"];
const OPERATORS = ["eq", "neq", "in", "not_in", "contains", "not_contains", "starts_with", "ends_with", "matches",
  "gt", "gte", "lt", "lte", "exists", "not_exists"];
const LIST_OPERATORS = ["in", "not_in"];
const NUMBER_OPERATORS = ["gt", "gte", "lt", "lte"];
const FIELDS = ["message.text", "channel.platform", "conversation.status", "conversation.tags", "conversation.priority",
  "customer.id", "metadata"];
const KINDS = {
  agents: { one: "agent", id: "agentId", title: "Agents" },
  triggers: { one: "trigger", id: "triggerId", title: "Triggers" },
  tools: { one: "tool", id: "toolId", title: "Tools" },
  skills: { one: "skill", id: "skillId", title: "Skills" },
};

const configures = () => (h.auth().groups || []).includes("configure");
const base = (kind) => `/tenants/${h.t()}/${kind}`;

/** Everything of `record` but what the server sets. */
function editable(record) {
  const out = { ...record };
  for (const k of SERVER_SET) delete out[k];
  return out;
}

/** Reads every page of a list (at most 10 of 100). */
async function all(kind, query = "") {
  const items = [];
  let cursor = null;
  for (let page = 0; page < 10; page++) {
    const data = await h.api("GET", `${base(kind)}?limit=100${query}${cursor ? `&cursor=${cursor}` : ""}`);
    items.push(...data.items);
    if (!data.nextCursor) break;
    cursor = data.nextCursor;
  }
  return items;
}

// ---------- fields and their errors ----------

/** One labelled control in a `div.field` that the errors at `pointer` (or under it) land in. */
function field(id, label, control, pointer, hint) {
  control.id = id;
  const hintNode = hint ? h.el("p", { class: "hint", id: `${id}-hint` }, hint) : null;
  if (hint) control.setAttribute("aria-describedby", `${id}-hint`);
  return h.el("div", { class: "field", "data-pointer": pointer }, h.el("label", { for: id }, label), control, hintNode);
}

/** Shows `errors` (problem+json `errors`) next to the field whose pointer is the longest
 *  prefix of each one's, the rest at the form's top; the first field at fault takes focus. */
function showErrors(form, errors) {
  form.querySelectorAll(".field-error").forEach((e) => e.remove());
  form.querySelectorAll("[aria-invalid]").forEach((e) => e.removeAttribute("aria-invalid"));
  const fields = [...form.querySelectorAll(".field[data-pointer]")];
  const top = form.querySelector(".form-errors");
  top.replaceChildren();
  let first = null;
  for (const e of errors) {
    const owner = fields
      .filter((f) => e.pointer === f.dataset.pointer || e.pointer.startsWith(`${f.dataset.pointer}/`))
      .sort((a, b) => b.dataset.pointer.length - a.dataset.pointer.length)[0];
    const text = `${e.pointer || "the record"}: ${e.detail}`;
    if (!owner) {
      top.append(h.el("li", {}, text));
      continue;
    }
    const control = owner.querySelector("input, select, textarea, fieldset");
    const note = h.el("p", { class: "field-error", id: `${control.id}-error-${owner.querySelectorAll(".field-error").length}` }, text);
    owner.append(note);
    control.setAttribute("aria-invalid", "true");
    control.setAttribute("aria-describedby", [control.getAttribute("aria-describedby"), note.id].filter(Boolean).join(" "));
    first = first || control;
  }
  top.hidden = top.children.length === 0;
  (first || top).focus();
}

/** Saves `body` (create, or replace at `version` with If-Match) and shows what was refused. */
async function save(form, kind, id, version, body, done) {
  const button = form.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    const saved = id
      ? await h.api("PUT", `${base(kind)}/${id}`, body, { "If-Match": `"${version}"` })
      : await h.api("POST", base(kind), body);
    (id ? h.say : h.sayAcross)(`Saved ${KINDS[kind].one} ${saved.name} (version ${saved.version}).`);
    done(saved);
  } catch (e) {
    h.say(e.status === 412 ? "Someone changed it since you opened it: reload to see their version." : e.message, true);
    showErrors(form, e.errors && e.errors.length ? e.errors : [{ pointer: "", detail: e.message }]);
  } finally {
    button.disabled = false;
  }
}

function formShell(id, onsubmit, ...children) {
  const readOnly = !configures();
  // novalidate: the server checks every field and names it; the browser's own bubbles would stop
  // a refusal from being shown where the server's are
  return h.el("form", { class: "stack builder", id, novalidate: true, onsubmit: (ev) => { ev.preventDefault(); if (!readOnly) onsubmit(ev.target); } },
    h.el("ul", { class: "form-errors", tabindex: "-1", hidden: true, "aria-label": "What the server refused" }),
    ...children,
    readOnly ? h.el("p", { class: "muted" }, `Your role (${h.auth().role}) reads configuration; writing it needs a builder's or an owner's key.`)
      : h.el("div", {}, h.el("button", { type: "submit" }, "Save")));
}

const text = (value = "", attrs = {}) => { const i = h.el("input", { autocomplete: "off", spellcheck: "false", ...attrs }); i.value = value ?? ""; return i; };
const number = (value, attrs = {}) => text(value === undefined || value === null ? "" : String(value), { type: "number", ...attrs });
const area = (value = "", rows = 6, attrs = {}) => { const a = h.el("textarea", { rows: String(rows), spellcheck: "false", ...attrs }); a.value = value; return a; };
function select(options, selected) {
  return h.el("select", {}, options.map(([value, label]) => h.el("option", { value, selected: value === selected }, label)));
}
const optional = (input) => (input.value.trim() === "" ? undefined : Number(input.value));

/** A JSON textarea's value, or the refusal of its syntax at its own pointer. */
function parsed(areaNode, pointer) {
  const raw = areaNode.value.trim();
  if (!raw) return {};
  try {
    return JSON.parse(raw);
  } catch (e) {
    const err = new Error(`not JSON: ${e.message}`);
    err.errors = [{ pointer, detail: `is not JSON: ${e.message}` }];
    throw err;
  }
}

/** Checkboxes in a fieldset, one per `[value, label]`, those in `chosen` checked. */
function checks(id, legend, options, chosen) {
  const set = new Set(chosen || []);
  return h.el("fieldset", { id, class: "checks" }, h.el("legend", {}, legend),
    options.length ? options.map(([value, label], i) => h.el("label", { class: "check" },
      h.el("input", { type: "checkbox", id: `${id}-${i}`, value, checked: set.has(value) }), " ", label))
      : h.el("p", { class: "muted" }, "None yet."));
}
const checked = (fieldset) => [...fieldset.querySelectorAll("input:checked")].map((i) => i.value);

// ---------- lists ----------

export async function list(kind) {
  const k = KINDS[kind];
  const items = await all(kind);
  const describe = {
    agents: (a) => [a.type || "standard", a.model],
    triggers: (tr) => [tr.eventType, `priority ${tr.priority}${tr.split ? ` · split ${tr.split.map((v) => `${v.name} ${v.weight}`).join(" / ")}` : ""}`],
    tools: (tool) => [toolKind(tool), tool.description],
    skills: (s) => [s.description || "", (s.tools || []).join(", ")],
  }[kind];
  const rows = items.filter((r) => r[k.id]).map((r) => h.el("tr", { "data-id": r[k.id] },
    h.el("td", {}, h.el("a", { href: `#/${k.one}/${r[k.id]}` }, r.name)),
    describe(r).map((c) => h.el("td", {}, c)),
    h.el("td", {}, h.el("span", { class: `pill ${r.status}` }, r.status)),
    h.el("td", {}, r.version)));
  h.main.replaceChildren(
    h.el("h1", {}, k.title),
    configures() ? h.el("p", {}, h.el("a", { href: `#/${k.one}/new`, id: `new-${k.one}`, class: "button" }, `New ${k.one}`)) : null,
    h.el("table", { id: `${kind}-list` },
      h.el("thead", {}, h.el("tr", {}, ["Name", "Kind", "About", "Status", "Version"].map((c) => h.el("th", { scope: "col" }, c)))),
      h.el("tbody", {}, rows.length ? rows : h.el("tr", {}, h.el("td", { colspan: "5", class: "muted" }, `No ${kind} yet.`)))),
    kind === "tools" && configures() ? mcpImport() : null);
}

/** What a tool is: built in, a webhook, or a tool of an MCP server (by its name there). */
function toolKind(tool) {
  if (!tool.handler) return tool.type;
  if (tool.handler.type !== "mcp") return tool.handler.type;
  let host = tool.handler.url;
  try { host = new URL(tool.handler.url).host; } catch { /* shown as written */ }
  return `MCP: ${tool.handler.tool} on ${host}`;
}

// ---------- tools of an MCP server ----------

/** A form that lists an MCP server's tools (the server calls it), each with its schema and an
 *  "Add" that creates it as the server describes it, or what would be refused of it. */
function mcpImport() {
  const url = text("", { type: "url", placeholder: "https://tools.example.com/mcp" });
  const secret = text("");
  const timeout = number(10000, { min: "1", max: "30000" });
  const found = h.el("div", { id: "mcp-found", "aria-live": "polite" });
  const submit = async (form) => {
    const server = { url: url.value.trim(), timeoutMs: optional(timeout) };
    if (secret.value.trim()) server.secretRef = secret.value.trim();
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const listed = await h.api("POST", `${base("tools")}/discover`, server);
      showErrors(form, []);
      found.replaceChildren(discovered(listed.tools));
      h.say(`The server lists ${listed.tools.length} tool${listed.tools.length === 1 ? "" : "s"}.`);
    } catch (e) {
      found.replaceChildren();
      h.say(e.message, true);
      showErrors(form, e.errors && e.errors.length ? e.errors : [{ pointer: "", detail: e.message }]);
    } finally {
      button.disabled = false;
    }
  };
  const form = h.el("form", { class: "stack builder", id: "mcp-form", novalidate: true, onsubmit: (ev) => { ev.preventDefault(); submit(ev.target); } },
    h.el("ul", { class: "form-errors", tabindex: "-1", hidden: true, "aria-label": "What the server refused" }),
    field("mcp-url", "The server's MCP endpoint", url, "/url", "Streamable HTTP; its address must be public unless the server allows private ones."),
    field("mcp-secret", "Secret holding its credential (optional)", secret, "/secretRef", "Sent as the Authorization header."),
    field("mcp-timeout", "Timeout (ms)", timeout, "/timeoutMs"),
    h.el("div", {}, h.el("button", { type: "submit" }, "List its tools")));
  return h.el("section", { class: "card", "aria-labelledby": "mcp-h" }, h.el("h2", { id: "mcp-h" }, "Tools from an MCP server"), form, found);
}

/** The tools a server listed: name, description, schema, and "Add" or why it cannot be. */
function discovered(tools) {
  const rows = tools.map((t, i) => {
    const schema = h.el("details", {}, h.el("summary", {}, "Schema"), h.el("pre", { class: "json" }, JSON.stringify(t.inputSchema, null, 2)));
    const problems = (t.problems || []).map((p) => `${p.pointer}: ${p.detail}`);
    const add = h.el("button", { type: "button", id: `mcp-add-${i}`, onclick: async (ev) => {
      ev.target.disabled = true;
      try {
        const saved = await h.api("POST", base("tools"), t.tool);
        h.sayAcross(`Added tool ${saved.name} (${t.name} on the server).`);
        location.hash = `#/tool/${saved.toolId}`;
      } catch (e) {
        ev.target.disabled = false;
        h.say(e.message, true);
      }
    } }, `Add as ${t.tool.name}`);
    return h.el("tr", { "data-mcp-tool": t.name },
      h.el("td", {}, h.el("code", {}, t.name)), h.el("td", {}, t.description || "—"), h.el("td", {}, schema),
      h.el("td", {}, problems.length ? h.el("ul", { class: "field-error" }, problems.map((p) => h.el("li", {}, p))) : add));
  });
  return h.el("table", { id: "mcp-tools" },
    h.el("thead", {}, h.el("tr", {}, ["On the server", "About", "Arguments", ""].map((c) => h.el("th", { scope: "col" }, c)))),
    h.el("tbody", {}, rows.length ? rows : h.el("tr", {}, h.el("td", { colspan: "4", class: "muted" }, "The server lists no tools."))));
}

/** For a tool of an MCP server: copy the server's description and schema of it, if changed. */
function mcpRefresh(record) {
  const result = h.el("p", { id: "mcp-refreshed", class: "muted", "aria-live": "polite" });
  const button = h.el("button", { type: "button", id: "mcp-refresh", onclick: async () => {
    button.disabled = true;
    try {
      const r = await h.api("POST", `${base("tools")}/${record.toolId}/refresh`, {});
      if (r.changed) {
        h.sayAcross(`Updated ${record.name} from its server: now version ${r.tool.version}.`);
        json("tools", record.toolId);
      } else {
        result.textContent = `Unchanged: the server describes ${record.handler.tool} as this version does.`;
      }
    } catch (e) {
      h.say(e.message, true);
    } finally {
      button.disabled = false;
    }
  } }, "Refresh from its server");
  return h.el("section", { class: "card", "aria-labelledby": "mcp-refresh-h" }, h.el("h2", { id: "mcp-refresh-h" }, "Its MCP server"),
    h.el("p", {}, `${record.handler.tool} on `, h.el("code", {}, record.handler.url)), button, result);
}

// ---------- versions ----------

/** The record's kept versions, newest first: each with who wrote it, a diff against the one on
 *  screen, and (but for the current one) a rollback to it. */
async function versions(kind, id, current, reload) {
  const path = `${base(kind)}/${id}`;
  const kept = await h.api("GET", `${path}/versions?limit=20`).catch(() => ({ items: [] }));
  const diff = h.el("div", { id: "version-diff", "aria-live": "polite" });
  const show = async (n) => {
    const d = await h.api("GET", `${path}/versions/${n}/diff?to=${current}`);
    diff.replaceChildren(h.el("h3", {}, `Version ${n} → ${current}`), d.changes.length === 0 ? h.el("p", { class: "muted" }, "No differences.") :
      h.el("table", { class: "diff" }, h.el("thead", {}, h.el("tr", {}, ["Field", `Version ${n}`, `Version ${current}`].map((c) => h.el("th", { scope: "col" }, c)))),
        h.el("tbody", {}, d.changes.map((c) => h.el("tr", {}, h.el("td", {}, h.el("code", {}, c.pointer)),
          h.el("td", {}, h.pretty(c.before ?? null)), h.el("td", {}, h.pretty(c.after ?? null)))))));
  };
  const rollback = async (n) => {
    try {
      const r = await h.api("POST", `${path}/rollback`, { version: n }, { "If-Match": `"${current}"` });
      h.say(`Rolled back to version ${n}: now version ${r.version}.`);
      reload();
    } catch (e) {
      h.say(e.message, true);
    }
  };
  return h.el("section", { class: "card", "aria-labelledby": "versions-h" }, h.el("h2", { id: "versions-h" }, "Versions"),
    h.el("table", { id: "versions" },
      h.el("thead", {}, h.el("tr", {}, ["Version", "Written", "By", ""].map((c) => h.el("th", { scope: "col" }, c)))),
      h.el("tbody", {}, kept.items.map((v) => h.el("tr", { "data-version": v.version },
        h.el("td", {}, v.version, v.deleted ? " (deleted)" : ""),
        h.el("td", {}, new Date(v.writtenAt).toLocaleString()),
        h.el("td", {}, v.writtenBy),
        h.el("td", {}, v.version === current ? h.el("span", { class: "muted" }, "current") : [
          h.el("button", { type: "button", class: "secondary diff-button", id: `diff-${v.version}`, onclick: () => show(v.version).catch((e) => h.say(e.message, true)) }, `Compare with ${current}`), " ",
          configures() && !v.deleted ? h.el("button", { type: "button", class: "secondary rollback-button", id: `rollback-${v.version}`, onclick: () => rollback(v.version) }, `Roll back to ${v.version}`) : null]))))),
    diff);
}

// ---------- agents ----------

export async function agent(id) {
  const [record, tools, skills, agents] = await Promise.all([
    id === "new" ? null : h.api("GET", `${base("agents")}/${id}`),
    all("tools"), all("skills"), all("agents"),
  ]);
  const a = record || { name: "", systemPrompt: "", model: "", tools: ["send_message"], status: "active" };
  const mc = a.modelConfig || {};
  const budget = a.tokenBudget || {};
  const f = {
    name: text(a.name, { required: true, maxlength: "128" }),
    description: text(a.description),
    type: select([["standard", "standard"], ["supervisor", "supervisor (calls sub-agents)"], ["router", "router (picks an agent)"]], a.type || "standard"),
    systemPrompt: area(a.systemPrompt, 8),
    model: text(a.model),
    fallbacks: text((mc.fallbackModels || []).join(", ")),
    temperature: number(mc.temperature, { step: "0.05", min: "0", max: "1" }),
    maxTokens: number(mc.maxTokens, { min: "1" }),
    tools: checks("agent-tools", "Tools", tools.map((tool) => [tool.toolId || tool.name, tool.toolId ? `${tool.name} (custom)` : tool.name]), a.tools),
    skills: checks("agent-skills", "Skills", skills.map((s) => [s.skillId, s.name]), a.skills),
    subAgents: checks("agent-sub-agents", "Sub-agents (for a supervisor)", agents.filter((o) => o.agentId !== a.agentId).map((o) => [o.agentId, o.name]), a.subAgents),
    maxIterations: number(a.maxIterations, { min: "1", max: "50" }),
    maxTurns: number(a.maxTurns, { min: "1" }),
    handoff: select([["escalate", "hand to a person"], ["end", "end the conversation"]], a.handoffBehavior || "escalate"),
    maxInput: number(budget.maxInputTokens, { min: "1" }),
    maxOutput: number(budget.maxOutputTokens, { min: "1" }),
    maxSession: number(budget.maxSessionTokens, { min: "1" }),
    status: select([["active", "active"], ["inactive", "inactive"]], a.status || "active"),
    bursts: select([["enqueue", "each its own turn"], ["coalesce", "answered together in one turn"], ["interrupt", "a newer one interrupts the turn before it replies"]], (a.bursts || {}).mode || "enqueue"),
    burstWindow: number((a.bursts || {}).windowSeconds, { min: "1", max: "30" }),
  };
  const known = ["name", "description", "type", "systemPrompt", "model", "tools", "skills", "subAgents", "maxIterations", "maxTurns", "handoffBehavior", "tokenBudget", "status", "bursts"];
  const rest = editable(a);
  for (const k of known) delete rest[k];
  const restConfig = { ...mc };
  for (const k of ["temperature", "maxTokens", "fallbackModels"]) delete restConfig[k];
  if (Object.keys(restConfig).length) rest.modelConfig = restConfig;
  else delete rest.modelConfig;
  f.extra = area(Object.keys(rest).length ? JSON.stringify(rest, null, 2) : "", 6, { class: "json" });

  const submit = (form) => {
    let extra;
    try {
      extra = parsed(f.extra, "/more");
    } catch (e) {
      showErrors(form, e.errors);
      return;
    }
    const fallbackModels = f.fallbacks.value.split(",").map((s) => s.trim()).filter(Boolean);
    const modelConfig = { ...(extra.modelConfig || {}), fallbackModels };
    if (optional(f.temperature) !== undefined) modelConfig.temperature = optional(f.temperature);
    if (optional(f.maxTokens) !== undefined) modelConfig.maxTokens = optional(f.maxTokens);
    const tokenBudget = { maxInputTokens: optional(f.maxInput), maxOutputTokens: optional(f.maxOutput), maxSessionTokens: optional(f.maxSession) };
    const bursts = f.bursts.value === "enqueue"
      ? undefined
      : { mode: f.bursts.value, windowSeconds: optional(f.burstWindow), maxMessages: (a.bursts || {}).maxMessages };
    const body = {
      ...extra, name: f.name.value, description: f.description.value, type: f.type.value, systemPrompt: f.systemPrompt.value,
      model: f.model.value, modelConfig, tools: checked(f.tools), skills: checked(f.skills), subAgents: checked(f.subAgents),
      maxIterations: optional(f.maxIterations), maxTurns: optional(f.maxTurns), handoffBehavior: f.handoff.value,
      tokenBudget: Object.values(tokenBudget).some((v) => v !== undefined) ? tokenBudget : undefined, status: f.status.value,
      bursts,
    };
    save(form, "agents", record && record.agentId, record && record.version, body, (saved) => {
      if (record) agent(saved.agentId);
      else location.hash = `#/agent/${saved.agentId}`;
    });
  };
  const form = formShell("agent-form", submit,
    field("agent-name", "Name", f.name, "/name"),
    field("agent-description", "Description", f.description, "/description"),
    field("agent-type", "Type", f.type, "/type"),
    field("agent-prompt", "System prompt", f.systemPrompt, "/systemPrompt"),
    h.el("div", { class: "row" },
      field("agent-model", "Model", f.model, "/model", "A model reference such as openai:gpt-4o-mini; empty: the server's default."),
      field("agent-fallbacks", "Fallback models", f.fallbacks, "/modelConfig/fallbackModels", "Tried in order when the model fails; comma-separated, at most 3.")),
    h.el("div", { class: "row" },
      field("agent-temperature", "Temperature", f.temperature, "/modelConfig/temperature"),
      field("agent-max-tokens", "Max tokens per answer", f.maxTokens, "/modelConfig/maxTokens"),
      field("agent-max-iterations", "Max model calls per turn", f.maxIterations, "/maxIterations"),
      field("agent-max-turns", "Max turns per session", f.maxTurns, "/maxTurns")),
    h.el("div", { class: "field", "data-pointer": "/tools" }, f.tools),
    h.el("div", { class: "field", "data-pointer": "/skills" }, f.skills),
    h.el("div", { class: "field", "data-pointer": "/subAgents" }, f.subAgents),
    h.el("div", { class: "row" },
      field("agent-handoff", "At max turns", f.handoff, "/handoffBehavior"),
      field("agent-max-input", "Input tokens per execution", f.maxInput, "/tokenBudget/maxInputTokens", "Empty: no limit."),
      field("agent-max-output", "Output tokens per execution", f.maxOutput, "/tokenBudget/maxOutputTokens"),
      field("agent-max-session", "Tokens per session", f.maxSession, "/tokenBudget/maxSessionTokens")),
    h.el("div", { class: "row" },
      field("agent-bursts", "Messages that come close together", f.bursts, "/bursts/mode", "Answered together: one turn answers a burst once the customer pauses. Interrupted: a turn that has not replied stops when the next message comes, and that message's turn answers both."),
      field("agent-burst-window", "Burst window (seconds)", f.burstWindow, "/bursts/windowSeconds", "How long a burst stays open after its newest message (answered together only); empty: 2.")),
    field("agent-status", "Status", f.status, "/status"),
    field("agent-more", "More settings (JSON: steps, history, onFailure, hooks, approvals, other model settings)", f.extra, "/more"));
  // a refusal of a field the form does not show lands by the JSON box
  form.querySelector("#agent-more").parentElement.dataset.pointer = "";
  h.main.replaceChildren(
    h.el("h1", {}, record ? `Agent ${record.name}` : "New agent"),
    h.el("p", {}, h.el("a", { href: "#/agents" }, "All agents"), record ? [" · ", h.el("code", { class: "muted" }, record.agentId), ` · version ${record.version}`] : null),
    h.el("div", { class: "grid" }, h.el("section", { class: "card", "aria-label": "Agent settings" }, form),
      record ? await versions("agents", record.agentId, record.version, () => agent(record.agentId)) : h.el("div")));
}

// ---------- triggers ----------

let seq = 0; // ids of the controls the builders add, unique on the page

/** One condition node as controls: a group (all / any of its members), a leaf (field,
 *  operator, value, any case), or a node the builder does not draw (a time condition) as JSON.
 *  `read(pointer)` gives the node as JSON and points each field at where it now is, so that the
 *  server's refusal of `/conditions/all/1/value` lands on that control after members moved. */
function conditionNode(node, onRemove) {
  const id = `cond-${++seq}`;
  const remove = onRemove ? h.el("button", { type: "button", class: "secondary remove", id: `${id}-remove`, onclick: onRemove }, "Remove") : null;
  if (node.all || node.any) {
    const members = h.el("ol", { class: "members" });
    const mode = select([["all", "all of"], ["any", "any of"]], node.all ? "all" : "any");
    const modeField = field(`${id}-mode`, "Match", mode, "");
    const group = h.el("li", { class: "group", "data-kind": "group" });
    const add = (child) => {
      const li = conditionNode(child, () => li.remove());
      members.append(li);
      return li;
    };
    for (const child of node.all || node.any) add(child);
    group.append(modeField, members,
      h.el("button", { type: "button", class: "secondary", id: `${id}-add`, onclick: () => add({ field: "message.text", operator: "contains", value: "" }).querySelector("input").focus() }, "Add condition"), " ",
      h.el("button", { type: "button", class: "secondary", id: `${id}-add-group`, onclick: () => add({ any: [{ field: "message.text", operator: "contains", value: "" }] }).querySelector("select").focus() }, "Add group"), " ",
      remove);
    group.read = (pointer) => {
      modeField.dataset.pointer = pointer;
      return { [mode.value]: [...members.children].map((li, i) => li.read(`${pointer}/${mode.value}/${i}`)) };
    };
    return group;
  }
  if (!node.field) {
    const raw = area(JSON.stringify(node, null, 2), 4, { class: "json" });
    const rawField = field(`${id}-json`, "Condition (JSON, such as a time condition)", raw, "");
    const li = h.el("li", { class: "leaf raw" }, rawField, remove);
    li.read = (pointer) => {
      rawField.dataset.pointer = pointer;
      try {
        return JSON.parse(raw.value);
      } catch (e) {
        const err = new Error(e.message);
        err.errors = [{ pointer, detail: `is not JSON: ${e.message}` }];
        throw err;
      }
    };
    return li;
  }
  const fieldInput = text(node.field, { list: "condition-fields" });
  const op = select(OPERATORS.map((o) => [o, o.replace("_", " ")]), node.operator);
  const shownValue = Array.isArray(node.value) ? node.value.join(", ") : node.value ?? "";
  const value = text(String(shownValue));
  const anyCase = h.el("input", { type: "checkbox", checked: node.caseInsensitive === true });
  const parts = [
    ["field", field(`${id}-field`, "Field", fieldInput, "")],
    ["operator", field(`${id}-operator`, "Operator", op, "")],
    ["value", field(`${id}-value`, "Value", value, "", "For in / not in: comma-separated. For gt, gte, lt, lte: a number.")],
    ["caseInsensitive", field(`${id}-case`, "Any case", anyCase, "")],
  ];
  const li = h.el("li", { class: "leaf", "data-kind": "leaf" }, parts.map(([, f]) => f), remove);
  li.read = (pointer) => {
    for (const [name, f] of parts) f.dataset.pointer = `${pointer}/${name}`;
    const leaf = { field: fieldInput.value.trim(), operator: op.value };
    if (op.value === "exists" || op.value === "not_exists") return leaf;
    if (LIST_OPERATORS.includes(op.value)) leaf.value = value.value.split(",").map((s) => s.trim()).filter(Boolean);
    else if (NUMBER_OPERATORS.includes(op.value) && value.value.trim() !== "" && !Number.isNaN(Number(value.value))) leaf.value = Number(value.value);
    else leaf.value = value.value;
    if (anyCase.checked) leaf.caseInsensitive = true;
    return leaf;
  };
  return li;
}

/** The split's variants: a row each (name, agent, weight), added and removed. */
function splitEditor(variants, agents) {
  const rows = h.el("ol", { class: "members", id: "split-variants" });
  const add = (v) => {
    const id = `split-${++seq}`;
    const name = text(v.name, { maxlength: "32" });
    const agentSel = select(agents.map((a) => [a.agentId, a.name]), v.agentId);
    const weight = number(v.weight, { min: "0", max: "10000" });
    const parts = [
      ["name", field(`${id}-name`, "Variant", name, "")],
      ["agentId", field(`${id}-agent`, "Agent", agentSel, "")],
      ["weight", field(`${id}-weight`, "Weight", weight, "")],
    ];
    const li = h.el("li", { class: "leaf variant" }, parts.map(([, f]) => f),
      h.el("button", { type: "button", class: "secondary remove", id: `${id}-remove`, onclick: () => li.remove() }, "Remove"));
    li.read = (i) => {
      for (const [key, f] of parts) f.dataset.pointer = `/split/${i}/${key}`;
      return { name: name.value.trim(), agentId: agentSel.value, weight: optional(weight) ?? 0 };
    };
    rows.append(li);
    return li;
  };
  for (const v of variants || []) add(v);
  const box = h.el("fieldset", { id: "split", class: "split" }, h.el("legend", {}, "Traffic split (optional: each conversation keeps the variant its hash falls in)"), rows,
    h.el("button", { type: "button", class: "secondary", id: "split-add", onclick: () => add({ name: `v${rows.children.length + 1}`, agentId: agents[0] && agents[0].agentId, weight: 1 }).querySelector("input").focus() }, "Add variant"));
  box.read = () => [...rows.children].map((li, i) => li.read(i));
  return box;
}

/** A manual trigger's run, beside its form: the input (and a conversation to run it on), and
 *  what came of it. Needs a role that may start agents (`invoke`). */
function runner(trigger) {
  const input = area("", 3);
  const conversation = text("");
  const out = h.el("div", { id: "run-result", "aria-live": "polite" });
  const run = async (ev) => {
    ev.preventDefault();
    const body = { input: input.value };
    if (conversation.value.trim()) body.conversationId = conversation.value.trim();
    const button = ev.target.querySelector("button");
    button.disabled = true;
    try {
      const x = await h.api("POST", `${base("triggers")}/${trigger.triggerId}/run`, body);
      const replies = (x.actions || []).filter((a) => a.type === "reply").map((a) => a.text);
      out.replaceChildren(
        h.el("p", { id: "run-status" }, x.executionId
          ? ["Ran: ", h.el("span", { class: `pill ${x.status}` }, x.status), " · ", h.el("a", { href: `#/execution/${x.executionId}` }, "the execution")]
          : `Queued: ${x.sourceId || "it runs shortly"}.`),
        replies.length ? h.el("ul", { class: "messages", id: "run-replies" }, replies.map((r) => h.el("li", { class: "agent" }, r))) : null);
      h.say("The trigger ran.");
    } catch (e) {
      h.say(e.message, true);
    } finally {
      button.disabled = false;
    }
  };
  return h.el("section", { class: "card", "aria-labelledby": "run-h" }, h.el("h2", { id: "run-h" }, "Run it"),
    h.el("p", { class: "muted" }, "Starts the trigger's agent with this input, as POST …/run does: limits and conditions apply."),
    h.el("form", { class: "stack", id: "run-form", onsubmit: run },
      field("run-input", "Input", input, "/input"),
      field("run-conversation", "Conversation id (empty: a new one)", conversation, "/conversationId"),
      h.el("div", {}, h.el("button", { type: "submit" }, "Run"))),
    out);
}

/** The tester beside the form: which saved trigger answers a message, and why each did not. */
function tester() {
  const message = text("Where is my order?");
  const channel = text("webchat");
  const conversation = text("test-conversation");
  const out = h.el("div", { id: "tester-result", "aria-live": "polite" });
  const mark = (held) => (held === true ? "✓" : "✗");
  const explain = (n, depth) => {
    if (n.field) return [h.el("li", { class: n.held ? "held" : "failed" }, `${mark(n.held)} ${n.field} ${n.operator}${n.value !== undefined ? ` ${JSON.stringify(n.value)}` : ""}: ${n.missing ? "missing" : `is ${JSON.stringify(n.actual)}`}`)];
    const members = n.all || n.any;
    if (!members) return [h.el("li", { class: n.held ? "held" : "failed" }, `${mark(n.held)} ${JSON.stringify(Object.fromEntries(Object.entries(n).filter(([k]) => k !== "held")))}`)];
    return [h.el("li", {}, `${mark(n.held)} ${n.all ? "all of" : "any of"}`, h.el("ul", {}, members.flatMap((m) => explain(m, depth + 1))))];
  };
  const run = async (ev) => {
    ev.preventDefault();
    const detail = { tenantId: h.auth().tenant, conversationId: conversation.value.trim() || "test-conversation", messageId: "console-test",
      channel: { platform: channel.value.trim() || "webchat" }, conversation: { status: "open" },
      message: { direction: "inbound", text: message.value } };
    try {
      const r = await h.api("POST", `/tenants/${h.t()}/triggers/test`, { detail });
      out.replaceChildren(
        h.el("p", { id: "tester-verdict" }, r.matched ? `Trigger ${r.matched} would answer, with agent ${r.agentId}${r.variant ? ` (variant ${r.variant})` : ""}.` : "No trigger would answer."),
        h.el("ol", { id: "tester-triggers" }, r.triggers.map((tr) => h.el("li", { "data-outcome": tr.outcome },
          h.el("strong", {}, tr.name), ` · priority ${tr.priority} · ${tr.outcome.replace(/_/g, " ")}`,
          h.el("ul", { class: "explained" }, explain(tr.conditions, 0))))));
    } catch (e) {
      h.say(e.message, true);
    }
  };
  return h.el("section", { class: "card", "aria-labelledby": "tester-h" }, h.el("h2", { id: "tester-h" }, "Trigger tester"),
    h.el("p", { class: "muted" }, "Tests the saved triggers (save first); queues nothing."),
    h.el("form", { class: "stack", id: "tester", onsubmit: run },
      field("tester-message", "Message", message, "/message"),
      field("tester-channel", "Channel", channel, "/channel"),
      field("tester-conversation", "Conversation id", conversation, "/conversationId"),
      h.el("div", {}, h.el("button", { type: "submit" }, "Test"))),
    out);
}

export async function trigger(id) {
  const [record, agents] = await Promise.all([id === "new" ? null : h.api("GET", `${base("triggers")}/${id}`), all("agents")]);
  const tr = record || { name: "", agentId: agents[0] && agents[0].agentId, eventType: "message.new", priority: 100, status: "active",
    conditions: { all: [{ field: "message.text", operator: "contains", value: "", caseInsensitive: true }] } };
  const f = {
    name: text(tr.name, { required: true, maxlength: "128" }),
    agent: select(agents.map((a) => [a.agentId, `${a.name}${a.status === "active" ? "" : " (inactive)"}`]), tr.agentId),
    eventType: select([["message.new", "a message (message.new)"], ["message.updated", "an edited message (message.updated)"], ["schedule", "a schedule"], ["webhook", "a signed webhook"], ["manual", "by hand (manual)"]], tr.eventType),
    priority: number(tr.priority, { step: "1" }),
    status: select([["active", "active"], ["inactive", "inactive"]], tr.status || "active"),
    schedule: area(tr.schedule ? JSON.stringify(tr.schedule, null, 2) : "", 4, { class: "json" }),
    secretRef: text(tr.webhook && tr.webhook.secretRef),
    pointer: text(tr.webhook && tr.webhook.conversationPointer),
  };
  const root = tr.conditions && (tr.conditions.all || tr.conditions.any) ? tr.conditions : { all: tr.conditions && Object.keys(tr.conditions).length ? [tr.conditions] : [] };
  const conditions = conditionNode(root, null);
  const split = splitEditor(tr.split, agents);
  const scheduleField = field("trigger-schedule", "Schedule (JSON: expression, timeZone, input, conversationId, missed)", f.schedule, "/schedule");
  const webhookFields = h.el("div", { class: "row" },
    field("trigger-secret", "Webhook secret name", f.secretRef, "/webhook/secretRef"),
    field("trigger-pointer", "Conversation pointer", f.pointer, "/webhook/conversationPointer", "A JSON pointer into the body, such as /ticket/id."));
  const kinds = () => {
    scheduleField.hidden = f.eventType.value !== "schedule";
    webhookFields.hidden = f.eventType.value !== "webhook";
  };
  f.eventType.addEventListener("change", kinds);
  kinds();
  const submit = (form) => {
    let schedule;
    try {
      schedule = f.eventType.value === "schedule" ? parsed(f.schedule, "/schedule") : undefined;
      const body = {
        name: f.name.value, agentId: f.agent.value, eventType: f.eventType.value, priority: optional(f.priority), status: f.status.value,
        conditions: conditions.read("/conditions"), schedule,
        webhook: f.eventType.value === "webhook" ? { secretRef: f.secretRef.value.trim(), conversationPointer: f.pointer.value.trim() || undefined } : undefined,
      };
      const variants = split.read();
      if (variants.length) body.split = variants;
      save(form, "triggers", record && record.triggerId, record && record.version, body, (saved) => {
        if (record) trigger(saved.triggerId);
        else location.hash = `#/trigger/${saved.triggerId}`;
      });
    } catch (e) {
      showErrors(form, e.errors || [{ pointer: "/conditions", detail: e.message }]);
    }
  };
  const form = formShell("trigger-form", submit,
    field("trigger-name", "Name", f.name, "/name"),
    h.el("div", { class: "row" },
      field("trigger-agent", "Agent", f.agent, "/agentId", "With a split: the variant that answers when a variant's agent cannot."),
      field("trigger-event", "Starts on", f.eventType, "/eventType"),
      field("trigger-priority", "Priority (lower first)", f.priority, "/priority"),
      field("trigger-status", "Status", f.status, "/status")),
    h.el("fieldset", { class: "conditions" }, h.el("legend", {}, "Conditions"), h.el("ol", { class: "members root" }, conditions)),
    h.el("div", { class: "field", "data-pointer": "/split" }, split),
    scheduleField, webhookFields,
    h.el("datalist", { id: "condition-fields" }, FIELDS.map((v) => h.el("option", { value: v }))));
  h.main.replaceChildren(
    h.el("h1", {}, record ? `Trigger ${record.name}` : "New trigger"),
    h.el("p", {}, h.el("a", { href: "#/triggers" }, "All triggers"), record ? [" · ", h.el("code", { class: "muted" }, record.triggerId), ` · version ${record.version}`] : null),
    h.el("div", { class: "grid" },
      h.el("section", { class: "card", "aria-label": "Trigger settings" }, form),
      h.el("div", {},
        record && record.eventType === "manual" && (h.auth().groups || []).includes("invoke") ? runner(record) : null,
        tester(),
        record ? await versions("triggers", record.triggerId, record.version, () => trigger(record.triggerId)) : null)));
}

// ---------- tools and skills: JSON, checked by the server ----------

export async function json(kind, id) {
  const k = KINDS[kind];
  const record = id === "new" ? null : await h.api("GET", `${base(kind)}/${id}`);
  const blank = kind === "tools"
    ? { name: "lookup_order", description: "Finds an order by its number", parameters: { type: "object", properties: { orderId: { type: "string" } }, required: ["orderId"] },
      handler: { type: "webhook", url: "https://example.com/hooks/order", secretRef: "orders" } }
    : { name: "returns", description: "How to take a return", instructions: "Ask for the order number first.", tools: [] };
  const body = area(JSON.stringify(record ? editable(record) : blank, null, 2), 18, { class: "json" });
  const submit = (form) => {
    let value;
    try {
      value = parsed(body, "");
    } catch (e) {
      showErrors(form, e.errors);
      return;
    }
    save(form, kind, record && record[k.id], record && record.version, value, (saved) => {
      if (record) json(kind, saved[k.id]);
      else location.hash = `#/${k.one}/${saved[k.id]}`;
    });
  };
  const form = formShell(`${k.one}-form`, submit,
    field(`${k.one}-json`, kind === "tools" ? "The tool (JSON; its parameters are a JSON Schema the server checks)" : "The skill (JSON)", body, ""));
  h.main.replaceChildren(
    h.el("h1", {}, record ? `${k.one === "tool" ? "Tool" : "Skill"} ${record.name}` : `New ${k.one}`),
    h.el("p", {}, h.el("a", { href: `#/${kind}` }, `All ${kind}`)),
    h.el("div", { class: "grid" }, h.el("section", { class: "card", "aria-label": `${k.one} settings` }, form),
      record ? await versions(kind, record[k.id], record.version, () => json(kind, record[k.id])) : h.el("div")),
    record && record.handler && record.handler.type === "mcp" && configures() ? mcpRefresh(record) : null);
}

// ---------- session monitor ----------

/** The session monitor: every session of the tenant, newest first, narrowed by status, agent,
 * channel and split variant, its filters first set from `params` (what a figure of the insights
 * page links to); the caller refreshes it when a session event arrives. Returns the refresh. */
export async function sessions(params = new URLSearchParams()) {
  const agents = await all("agents");
  const names = new Map(agents.map((a) => [a.agentId, a.name]));
  const status = select([["", "any"], ["active", "active"], ["handed_off", "handed off"], ["completed", "completed"], ["failed", "failed"], ["abandoned", "abandoned"]], params.get("status") || "");
  const agentSel = select([["", "any"], ...agents.map((a) => [a.agentId, a.name])], params.get("agentId") || "");
  const channel = text(params.get("channel") || "");
  const variant = text(params.get("variant") || "");
  const table = h.el("tbody", {});
  const count = h.el("p", { class: "muted", id: "sessions-count", "aria-live": "polite" });
  const load = async () => {
    const q = new URLSearchParams({ limit: "100" });
    for (const [name, value] of [["status", status.value], ["agentId", agentSel.value], ["channel", channel.value.trim()], ["variant", variant.value.trim()]]) {
      if (value) q.set(name, value);
    }
    const data = await h.api("GET", `/tenants/${h.t()}/sessions?${q}`);
    const items = data.items;
    table.replaceChildren(...(items.length ? items.map((s) => h.el("tr", { "data-session": s.sessionId },
      h.el("td", {}, h.el("a", { href: `#/session/${s.sessionId}` }, s.conversationId)),
      h.el("td", {}, h.el("span", { class: `pill ${s.status}` }, s.status.replace("_", " "))),
      h.el("td", {}, names.get(s.agentId) || h.el("code", {}, s.agentId)),
      h.el("td", {}, s.channel || "—"),
      h.el("td", {}, s.split ? s.split.variant : "—"),
      h.el("td", {}, s.turnCount),
      h.el("td", {}, s.tokensUsed || 0),
      h.el("td", {}, new Date(s.updatedAt).toLocaleString()))) : [h.el("tr", {}, h.el("td", { colspan: "8", class: "muted" }, "No sessions."))]));
    count.textContent = `${items.length} session${items.length === 1 ? "" : "s"}${data.nextCursor ? " (the newest 100)" : ""}; updates live.`;
  };
  const form = h.el("form", { class: "inline filters", id: "session-filters", onsubmit: (ev) => { ev.preventDefault(); load().catch((e) => h.say(e.message, true)); } },
    field("filter-status", "Status", status, "/query/status"),
    field("filter-agent", "Agent", agentSel, "/query/agentId"),
    field("filter-channel", "Channel", channel, "/query/channel"),
    field("filter-variant", "Variant", variant, "/query/variant"),
    h.el("button", { type: "submit" }, "Show"));
  for (const control of [status, agentSel]) control.addEventListener("change", () => load().catch((e) => h.say(e.message, true)));
  h.main.replaceChildren(h.el("h1", {}, "Sessions"), form, count,
    h.el("table", { id: "sessions" },
      h.el("thead", {}, h.el("tr", {}, ["Conversation", "Status", "Agent", "Channel", "Variant", "Turns", "Tokens", "Updated"].map((c) => h.el("th", { scope: "col" }, c)))),
      table));
  await load();
  return load;
}
