// The console's insights page: what the tenant's agents achieved over days of its time zone
// (`GET …/insights`), the headline figures with their change against the period before, two
// charts drawn here as SVG (conversations and their outcomes per day; first-response times per
// day), the hand-offs to people by cause, and a table by agent, version, variant, trigger or
// channel. Every figure links to the sessions behind it (the session monitor, filtered). Same
// conventions as console.js: plain DOM, no build step, no library.

let h; // { el, api, say, t, main }

export function install(helpers) {
  h = helpers;
}

const SVG = "http://www.w3.org/2000/svg";
const GROUPINGS = [
  ["agent,version", "agent and version"],
  ["agent", "agent"],
  ["variant", "traffic-split variant"],
  ["trigger", "trigger"],
  ["channel", "channel"],
];
const CAUSES = {
  agent: "the agent asked",
  failure: "a failed turn",
  max_turns: "turn limit",
  session_budget: "token budget",
  limit: "a tenant limit",
  api: "a person, over the API",
};

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) node.setAttribute(k, v);
  for (const c of children.flat()) if (c !== undefined && c !== null) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

const pct = (r) => (r == null ? "—" : `${(r * 100).toFixed(1)} %`);
/** A duration in ms, as people read it: `850 ms`, `4.2 s`, `35 s`, `12 min`. */
function duration(ms) {
  if (ms < 1000) return `${ms} ms`;
  if (ms < 10000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 120000) return `${Math.round(ms / 1000)} s`;
  return `${Math.round(ms / 60000)} min`;
}
const secs = (p, k = "p50") => (p && p[k] != null ? duration(p[k]) : "—");
/** What the priced calls cost; `—` when every call was of a model without a price. */
const dollars = (f) => (f.costUsd === 0 && f.unpricedCalls > 0 ? "— (no price)" : `$${Number(f.costUsd).toFixed(4)}`);

/** The change of a figure against the period before, and whether it is good news. */
function change(now, before, higherIsBetter) {
  if (now == null || before == null) return { text: "no figure before", tone: "" };
  if (before === 0) return now === 0 ? { text: "unchanged", tone: "" } : { text: "new this period", tone: "" };
  const d = (now - before) / before;
  if (Math.abs(d) < 0.0005) return { text: "unchanged", tone: "" };
  const good = higherIsBetter === null ? "" : (d > 0) === higherIsBetter ? "good" : "bad";
  return { text: `${d > 0 ? "▲" : "▼"} ${Math.abs(d * 100).toFixed(0)} %`, tone: good };
}

/** `#/sessions` narrowed to what a figure counts. */
function sessionsLink(filters = {}) {
  const q = new URLSearchParams(Object.entries(filters).filter(([, v]) => v)).toString();
  return `#/sessions${q ? `?${q}` : ""}`;
}

function card(id, label, value, delta, href) {
  return h.el("a", { class: "card insight", id, href, "aria-label": `${label}: ${value}, ${delta.text} against the period before; show the sessions` },
    h.el("span", { class: "n" }, value),
    h.el("span", { class: "label" }, label),
    h.el("span", { class: `delta ${delta.tone}` }, delta.text));
}

/** Grouped bars per day: conversations opened, resolved by an agent, handed to a person. */
function outcomesChart(days) {
  const series = [["conversations", "opened", "s-open"], ["resolved", "resolved by an agent", "s-resolved"], ["handedToHuman", "handed to a person", "s-human"]];
  const W = 640, H = 200, left = 36, bottom = 28, top = 10;
  const most = Math.max(1, ...days.flatMap((d) => series.map(([k]) => d[k])));
  const slot = (W - left) / Math.max(1, days.length);
  const bar = Math.max(2, (slot - 8) / series.length);
  const y = (v) => top + (H - top - bottom) * (1 - v / most);
  const summary = days.map((d) => `${d.by.day}: ${d.conversations} opened, ${d.resolved} resolved, ${d.handedToHuman} to a person`).join("; ");
  return svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", id: "outcomes-chart", role: "img", "aria-label": `Conversations per day. ${summary || "None."}` },
    svg("line", { x1: left, x2: W, y1: y(0), y2: y(0), class: "axis" }),
    svg("text", { x: left - 6, y: y(most) + 4, class: "tick", "text-anchor": "end" }, most),
    svg("text", { x: left - 6, y: y(0) + 4, class: "tick", "text-anchor": "end" }, 0),
    days.map((d, i) => svg("g", { class: "day" },
      series.map(([k, name, cls], j) => svg("rect", { x: left + i * slot + 4 + j * bar, y: y(d[k]), width: bar - 1, height: Math.max(0, y(0) - y(d[k])), class: cls },
        svg("title", {}, `${d.by.day}: ${d[k]} ${name}`))),
      svg("text", { x: left + i * slot + slot / 2, y: H - 8, class: "tick", "text-anchor": "middle" }, d.by.day.slice(5)))));
}

/** p50 and p90 of the first response per day, as two lines. */
function responseChart(days) {
  const W = 640, H = 180, left = 44, bottom = 28, top = 10;
  const values = days.flatMap((d) => [d.firstResponseMs && d.firstResponseMs.p90].filter((v) => v != null));
  const most = Math.max(1, ...values);
  const slot = (W - left) / Math.max(1, days.length);
  const x = (i) => left + i * slot + slot / 2;
  const y = (v) => top + (H - top - bottom) * (1 - v / most);
  const line = (k, cls) => {
    const points = days.map((d, i) => (d.firstResponseMs ? [x(i), y(d.firstResponseMs[k]), d] : null)).filter(Boolean);
    return svg("g", { class: cls },
      svg("polyline", { points: points.map(([px, py]) => `${px},${py}`).join(" "), fill: "none" }),
      points.map(([px, py, d]) => svg("circle", { cx: px, cy: py, r: 3.5 }, svg("title", {}, `${d.by.day}: ${k} ${secs(d.firstResponseMs, k)}`))));
  };
  const summary = days.filter((d) => d.firstResponseMs).map((d) => `${d.by.day}: p50 ${secs(d.firstResponseMs)}, p90 ${secs(d.firstResponseMs, "p90")}`).join("; ");
  return svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", id: "response-chart", role: "img", "aria-label": `First-response time per day. ${summary || "None measured."}` },
    svg("line", { x1: left, x2: W, y1: y(0), y2: y(0), class: "axis" }),
    svg("text", { x: left - 6, y: y(most) + 4, class: "tick", "text-anchor": "end" }, duration(most)),
    svg("text", { x: left - 6, y: y(0) + 4, class: "tick", "text-anchor": "end" }, duration(0)),
    line("p90", "s-p90"), line("p50", "s-p50"),
    days.map((d, i) => svg("text", { x: x(i), y: H - 8, class: "tick", "text-anchor": "middle" }, d.by.day.slice(5))));
}

function legend(items) {
  return h.el("ul", { class: "legend" }, items.map(([cls, name]) => h.el("li", {}, h.el("span", { class: `swatch ${cls}` }), name)));
}

/** The group's name: its agent's name (or id), version, trigger, variant, channel. */
function groupName(by, names) {
  const parts = [];
  if (by.agentId) parts.push(names.get(by.agentId) || by.agentId);
  if (by.agentVersion !== undefined) parts.push(by.agentVersion ? `v${by.agentVersion}` : "v?");
  if (by.triggerId !== undefined) parts.push(by.triggerId ? `trigger ${by.triggerId.slice(-6)}` : "no trigger");
  if (by.variant !== undefined) parts.push(by.variant ? `variant ${by.variant}` : "no split");
  if (by.channel !== undefined) parts.push(by.channel || "no channel");
  return parts.join(" · ");
}

/** Every day of `from..=to` (YYYY-MM-DD), each with its group's figures or none counted. */
function everyDay(from, to, groups) {
  const byDay = new Map(groups.map((g) => [g.by.day, g]));
  const out = [];
  for (let d = new Date(`${from}T00:00:00Z`); d <= new Date(`${to}T00:00:00Z`) && out.length < 100; d.setUTCDate(d.getUTCDate() + 1)) {
    const day = d.toISOString().slice(0, 10);
    out.push(byDay.get(day) || { by: { day }, conversations: 0, resolved: 0, handedToHuman: 0, firstResponseMs: null });
  }
  return out;
}

export async function page(params) {
  const groupBy = params.get("groupBy") || "agent,version";
  const query = new URLSearchParams();
  for (const k of ["from", "to", "timeZone"]) if (params.get(k)) query.set(k, params.get(k));
  const base = `/tenants/${h.t()}/insights?${query}`;
  const [report, days, agents] = await Promise.all([
    h.api("GET", `${base}&groupBy=${encodeURIComponent(groupBy)}`),
    h.api("GET", `${base}&groupBy=day`),
    h.api("GET", `/tenants/${h.t()}/agents?limit=100`),
  ]);
  const names = new Map((agents.items || []).map((a) => [a.agentId, a.name]));
  const now = report.total, before = report.previous.total;
  const field = (id, label, control) => h.el("div", { class: "field" }, h.el("label", { for: id }, label), control);
  const from = h.el("input", { id: "insights-from", name: "from", type: "date", value: report.from });
  const to = h.el("input", { id: "insights-to", name: "to", type: "date", value: report.to });
  const grouping = h.el("select", { id: "insights-group", name: "groupBy" },
    GROUPINGS.map(([v, label]) => h.el("option", { value: v, selected: v === groupBy }, label)));
  const form = h.el("form", { class: "inline filters", id: "insights-form", onsubmit: (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams({ from: from.value, to: to.value, groupBy: grouping.value });
    if (params.get("timeZone")) q.set("timeZone", params.get("timeZone"));
    location.hash = `#/insights?${q}`;
  } }, field("insights-from", "From", from), field("insights-to", "To", to), field("insights-group", "Table by", grouping),
  h.el("button", { type: "submit" }, "Show"));
  const reasons = Object.entries(now.handoffReasons).filter(([, n]) => n > 0);
  const most = Math.max(1, ...reasons.map(([, n]) => n));
  const series = everyDay(report.from, report.to, days.groups);
  h.main.replaceChildren(
    h.el("h1", {}, "Insights"),
    form,
    h.el("p", { class: "muted", id: "insights-span" },
      `${report.from} to ${report.to} (${report.timeZone}), against ${report.previous.from} to ${report.previous.to}.`),
    h.el("div", { class: "stats", id: "insights-cards" },
      card("insight-conversations", "conversations", now.conversations, change(now.conversations, before.conversations, null), sessionsLink()),
      card("insight-resolution", "resolved without a person", pct(now.resolutionRate), change(now.resolutionRate, before.resolutionRate, true), sessionsLink({ status: "completed" })),
      card("insight-human", "handed to a person", now.handedToHuman, change(now.handedToHuman, before.handedToHuman, false), sessionsLink({ status: "handed_off" })),
      card("insight-abandoned", "abandoned (customer went quiet)", now.abandoned, change(now.abandoned, before.abandoned, false), sessionsLink({ status: "abandoned" })),
      card("insight-first-response", "first response, median", secs(now.firstResponseMs), change(now.firstResponseMs && now.firstResponseMs.p50, before.firstResponseMs && before.firstResponseMs.p50, false), sessionsLink()),
      card("insight-resolution-time", "time to resolution, median", secs(now.resolutionMs), change(now.resolutionMs && now.resolutionMs.p50, before.resolutionMs && before.resolutionMs.p50, false), sessionsLink({ status: "completed" })),
      card("insight-failures", "executions failed", pct(now.failureRate), change(now.failureRate, before.failureRate, false), sessionsLink({ status: "failed" })),
      card("insight-cost", "cost", dollars(now), change(now.costUsd, before.costUsd, null), sessionsLink())),
    h.el("h2", {}, "Conversations per day"),
    legend([["s-open", "opened"], ["s-resolved", "resolved by an agent"], ["s-human", "handed to a person"]]),
    outcomesChart(series),
    h.el("h2", {}, "First-response time per day"),
    legend([["s-p50", "median (p50)"], ["s-p90", "p90"]]),
    responseChart(series),
    h.el("h2", {}, "Hand-offs to a person, by cause"),
    reasons.length === 0 ? h.el("p", { class: "muted" }, "No conversation went to a person.") :
      h.el("ul", { class: "reasons", id: "handoff-reasons" }, reasons.map(([cause, n]) => {
        const meter = h.el("span", { class: "meter" });
        meter.style.width = `${Math.max(2, Math.round((n / most) * 100))}%`; // CSSOM: allowed by the CSP
        return h.el("li", {}, h.el("a", { href: sessionsLink({ status: "handed_off" }) }, CAUSES[cause] || cause), " ", h.el("strong", {}, n), meter);
      })),
    h.el("h2", {}, `By ${GROUPINGS.find(([v]) => v === groupBy)?.[1] || groupBy}`),
    report.groups.length === 0 ? h.el("p", { class: "muted" }, "Nothing was counted in these days.") :
      h.el("table", { id: "insights-table" },
        h.el("thead", {}, h.el("tr", {}, ["Group", "Conversations", "Resolved", "Resolution rate", "To a person", "Abandoned", "First response p50", "p90",
          "Resolution p50", "Executions", "Failed", "Tool failures", "Cost"].map((c) => h.el("th", { scope: "col" }, c)))),
        h.el("tbody", {}, report.groups.map((g) => h.el("tr", {},
          h.el("th", { scope: "row" }, h.el("a", { href: sessionsLink({ agentId: g.by.agentId, channel: g.by.channel, variant: g.by.variant }) }, groupName(g.by, names))),
          h.el("td", {}, g.conversations), h.el("td", {}, g.resolved), h.el("td", {}, pct(g.resolutionRate)),
          h.el("td", {}, h.el("a", { href: sessionsLink({ status: "handed_off", agentId: g.by.agentId, channel: g.by.channel, variant: g.by.variant }) }, g.handedToHuman)),
          h.el("td", {}, h.el("a", { href: sessionsLink({ status: "abandoned", agentId: g.by.agentId, channel: g.by.channel, variant: g.by.variant }) }, g.abandoned)),
          h.el("td", {}, secs(g.firstResponseMs)), h.el("td", {}, secs(g.firstResponseMs, "p90")), h.el("td", {}, secs(g.resolutionMs)),
          h.el("td", {}, g.executions), h.el("td", { class: g.failedExecutions ? "error" : "" }, g.failedExecutions),
          h.el("td", {}, g.toolFailures), h.el("td", {}, dollars(g)))))),
  );
}
