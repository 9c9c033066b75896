// Engram console: plain JavaScript over the JSON API (POST /v1/<Method>).
// Every text from the server goes into the page as text (textContent),
// never as markup: transcripts and facts are anyone's words.
"use strict";

const TOKEN_KEY = "engram.token";

/// A refusal of the API, with its HTTP status.
class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/// Calls `method` with `body`; the answer's JSON, or an ApiError.
async function api(method, body) {
  const headers = { "content-type": "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.authorization = "Bearer " + token;
  const response = await fetch("/v1/" + method, {
    method: "POST",
    headers,
    body: JSON.stringify(body || {}),
  });
  const text = await response.text();
  let json = {};
  try {
    json = text ? JSON.parse(text) : {};
  } catch (_) {
    json = { error: { message: text } };
  }
  if (!response.ok) {
    const message = (json.error && json.error.message) || response.statusText;
    if (response.status === 401) showSignIn(message);
    throw new ApiError(response.status, message);
  }
  return json;
}

/// An element: `h("td", {class: "num"}, "12")`. Strings become text nodes.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  // Nested lists too (a part of a line may be a list of links), each child
  // a node: a list given as one child would otherwise read as its links'
  // hrefs joined by commas.
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const num = (v) => Number(v || 0);
const fmt = (v) => num(v).toLocaleString("en");
const when = (ts) => (ts ? new Date(num(ts) * 1000).toISOString().replace("T", " ").slice(0, 19) + "Z" : "—");
const bytes = (n) => {
  n = num(n);
  if (n < 1024) return n + " B";
  if (n < 1024 * 1024) return (n / 1024).toFixed(1) + " KiB";
  return (n / 1024 / 1024).toFixed(1) + " MiB";
};
const MATCHED = {
  MATCHED_BY_ALL_WORDS: "all words",
  MATCHED_BY_LEXICAL: "words",
  MATCHED_BY_CONTEXT: "context",
  MATCHED_BY_SEMANTIC: "meaning",
  MATCHED_BY_BOTH: "words and meaning",
};
const KIND = {
  MEMORY_KIND_TRACE: "message",
  MEMORY_KIND_EPISODIC: "summary",
  MEMORY_KIND_SEMANTIC: "fact",
};

/// The error of a failed action, shown where it happened.
function failure(e) {
  return h("p", { class: "error", role: "alert" }, e instanceof ApiError ? `${e.status}: ${e.message}` : String(e));
}

/// Runs the action `f`; its failure goes into `status`.
async function attempt(status, f) {
  try {
    await f();
  } catch (e) {
    status.replaceChildren(failure(e));
  }
}

/// A link to user `u`'s page (its own memory and its conversations).
function userLink(u) {
  return h("a", { href: "#/user/" + encodeURIComponent(u) }, u);
}

/// An "Edit" button that shows `field` (filled with `value()`) and a
/// "Save" button calling `save(text)`: [edit, field, save].
function inlineEditor(field, value, save) {
  field.hidden = true;
  const saveButton = h("button", { type: "button", hidden: true }, "Save");
  const edit = h("button", { type: "button", class: "plain" }, "Edit");
  edit.addEventListener("click", () => {
    field.value = value();
    field.hidden = saveButton.hidden = false;
    field.focus();
  });
  saveButton.addEventListener("click", () => save(field.value));
  return [edit, field, saveButton];
}

function showSignIn(message) {
  document.getElementById("sign-in").hidden = false;
  document.getElementById("sign-in-error").textContent = message || "";
  document.getElementById("view").replaceChildren();
  document.getElementById("token").focus();
}

// ---------------------------------------------------------------- routing

/// `#/agent/a-1?turn=turn_0003` → ["agent", "a-1"], {turn: "turn_0003"}.
function route() {
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const parts = (path || "/").split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, params: new URLSearchParams(query || "") };
}

async function render() {
  const { parts, params } = route();
  const view = document.getElementById("view");
  document.getElementById("sign-in").hidden = true;
  for (const a of document.querySelectorAll("[data-nav]")) {
    const current =
      (parts[0] || "agents") === a.dataset.nav || (["agent", "user"].includes(parts[0]) && a.dataset.nav === "agents");
    if (current) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.getElementById("sign-out").hidden = !sessionStorage.getItem(TOKEN_KEY);
  view.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  try {
    let page;
    if (parts[0] === "agent" && parts[1]) page = await agentPage(parts[1], params);
    else if (parts[0] === "user" && parts[1]) page = await userPage(parts[1], params);
    else if (parts[0] === "search") page = await searchPage(params);
    else page = await agentsPage(params);
    view.replaceChildren(page);
    document.title = (view.querySelector("h1")?.textContent || "Engram") + " · Engram console";
    const target = view.querySelector(".target");
    if (target) target.scrollIntoView({ block: "center" });
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return; // the sign-in form shows
    view.replaceChildren(h("h1", {}, "Something went wrong"), failure(e));
  }
}

// ---------------------------------------------------------------- agents

/// Runs `f` on each item, a few at a time.
async function each(items, f, width = 6) {
  const out = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await f(items[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, worker));
  return out;
}

async function agentsPage(params) {
  const find = params.get("find") || "";
  const by = params.get("by") || "agent";
  const page = params.get("page") || "";
  const form = h(
    "form",
    { class: "inline", role: "search", id: "find-form" },
    h("label", { for: "find" }, "Find"),
    h("input", { id: "find", name: "find", value: find, placeholder: "part of an agent id, or a user id" }),
    h("label", { for: "by" }, "by"),
    h(
      "select",
      { id: "by", name: "by" },
      h("option", { value: "agent", selected: by === "agent" }, "agent id (part)"),
      h("option", { value: "user", selected: by === "user" }, "user id"),
    ),
    h("button", { type: "submit" }, "Find"),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams({ find: form.find.value.trim(), by: form.by.value });
    location.hash = "#/?" + q;
  });
  const listed = await api("ListAgents", {
    pageSize: 50,
    pageToken: page,
    userId: by === "user" ? find : "",
    idContains: by === "agent" ? find : "",
  });
  const ids = listed.agentIds || [];
  const nextPage = listed.nextPageToken || "";
  const [stats, users] = await Promise.all([
    each(ids, (id) => api("GetContextStats", { agentId: id }).catch((e) => ({ failed: e }))),
    find ? Promise.resolve(null) : api("ListUsers", { pageSize: 100 }),
  ]);
  const rows = ids.map((id, i) => {
    const s = stats[i];
    if (s.failed) {
      return h("tr", {}, h("td", {}, id), h("td", { colspan: 7 }, failure(s.failed)));
    }
    const size = (s.files || []).reduce((n, f) => n + num(f.bytes), 0);
    return h(
      "tr",
      {},
      h("td", {}, h("a", { href: "#/agent/" + encodeURIComponent(id) }, id)),
      h("td", {}, s.userId ? userLink(s.userId) : "—"),
      h("td", { class: "last" }, when(s.lastEventAt)),
      h("td", { class: "num optional" }, fmt(s.messages)),
      h("td", { class: "num optional" }, fmt(s.turns)),
      h("td", { class: "num" }, fmt(s.compactions)),
      h("td", { class: "num" }, `${fmt(s.estimatedTokens)} (${Math.round(num(s.percentUsed))}%)`),
      h("td", { class: "num optional" }, bytes(size)),
    );
  });
  const title = find ? (by === "user" ? `Agents of user ${find}` : `Agents whose id contains “${find}”`) : "Agents";
  return h(
    "div",
    {},
    h("h1", {}, title),
    form,
    ids.length === 0
      ? h("p", { class: "muted" }, find ? "No agent found." : "No agents yet.")
      : h(
          "div",
          { class: "scroll" },
          h(
            "table",
            { id: "agents" },
            h("caption", { class: "muted" }, `${ids.length} agent${ids.length === 1 ? "" : "s"} on this page`),
            h(
              "thead",
              {},
              h(
                "tr",
                {},
                h("th", { scope: "col" }, "Agent"),
                h("th", { scope: "col" }, "User"),
                h("th", { scope: "col" }, "Last activity"),
                h("th", { scope: "col", class: "num optional" }, "Messages"),
                h("th", { scope: "col", class: "num optional" }, "Turns"),
                h("th", { scope: "col", class: "num" }, "Compactions"),
                h("th", { scope: "col", class: "num" }, "Tokens (of budget)"),
                h("th", { scope: "col", class: "num optional" }, "Size"),
              ),
            ),
            h("tbody", {}, rows),
          ),
        ),
    nextPage
      ? h("p", {}, h("a", { href: "#/?" + new URLSearchParams({ find, by, page: nextPage }) }, "Next page"))
      : null,
    users ? usersList(users) : null,
  );
}

/// The users (the first hundred), each a link to its agents.
function usersList(answer) {
  const users = answer.userIds || [];
  return h(
    "section",
    { "aria-labelledby": "users-title" },
    h("h2", { id: "users-title" }, "Users"),
    users.length === 0
      ? h("p", { class: "muted" }, "No users yet.")
      : h(
          "ul",
          { class: "chips", id: "users" },
          users.map((u) => h("li", { class: "chip" }, userLink(u))),
        ),
    answer.nextPageToken ? h("p", { class: "muted" }, "More users: find one by its id above.") : null,
  );
}

// ---------------------------------------------------------------- one agent

async function agentPage(id, params) {
  const [stats, retrieved, prompt, log] = await Promise.all([
    api("GetContextStats", { agentId: id }),
    api("Retrieve", { agentId: id, maxEpisodic: 1000, maxSemantic: 0, rawTailTurns: 0 }),
    api("PrepareRequest", { agentId: id, preview: true }),
    api("ListCompactions", { agentId: id, pageSize: 500 }),
  ]);
  const turn = params.get("turn") || "";
  const page = h(
    "div",
    {},
    h("h1", {}, "Agent ", id),
    h(
      "p",
      { class: "muted" },
      stats.userId ? ["User ", userLink(stats.userId), " · "] : null,
      `epoch ${num(stats.epoch)} · ${fmt(stats.turns)} turns · ${fmt(stats.messages)} messages · last activity ${when(stats.lastEventAt)}`,
      " · ",
      h("a", { href: "#/search?" + new URLSearchParams({ scope: "agent", id }) }, "Search this agent"),
    ),
    gauge(stats),
    timeline((retrieved.bundle && retrieved.bundle.episodic) || [], log.compactions || [], turn),
    transcript(prompt),
  );
  const blocks = h("section", { "aria-labelledby": "blocks-title" }, h("h2", { id: "blocks-title" }, "Memory blocks"));
  const facts = h(
    "section",
    { "aria-labelledby": "facts-title" },
    h("h2", { id: "facts-title" }, "Facts"),
    stats.userId
      ? h("p", { class: "muted" }, "This conversation's own facts. Its user's, from all of their conversations, are on ", userLink(stats.userId), "'s page.")
      : null,
  );
  page.append(blocks, facts);
  await Promise.all([fillBlocks(blocks, id, stats.userId), fillFacts(facts, { agentId: id })]);
  return page;
}

// ---------------------------------------------------------------- one user

/// A user's own memory: the blocks every conversation of theirs shows,
/// the facts all of them gave (and clients wrote), the consolidation runs
/// that reconciled them, those facts over time (`?fact=<id>` marks one on
/// the time line), and the conversations.
async function userPage(id, params) {
  const [listed, all, runs] = await Promise.all([
    api("ListAgents", { userId: id, pageSize: 50 }),
    allUserFacts(id),
    api("ListConsolidations", { userId: id, pageSize: 20 }).catch((e) => {
      if (e instanceof ApiError && e.status === 401) throw e;
      return { failed: e };
    }),
  ]);
  const agents = listed.agentIds || [];
  const page = h(
    "div",
    {},
    h("h1", {}, "User ", id),
    h(
      "p",
      { class: "muted" },
      "What every conversation of this user shares: the user's memory blocks (in each of their prompts) and the user's facts (from all of their conversations' compactions, and from clients). Each conversation's own memory is on its agent's page. · ",
      h("a", { href: "#/search?" + new URLSearchParams({ scope: "user", id }) }, "Search this user"),
    ),
  );
  const conversations = h(
    "section",
    { "aria-labelledby": "conversations-title" },
    h("h2", { id: "conversations-title" }, "Conversations"),
    agents.length === 0
      ? h("p", { class: "muted" }, "No conversation of this user.")
      : h("ul", { class: "chips", id: "user-agents" }, agents.map((a) => h("li", { class: "chip" }, h("a", { href: "#/agent/" + encodeURIComponent(a) }, a)))),
    listed.nextPageToken
      ? h("p", {}, h("a", { href: "#/?" + new URLSearchParams({ find: id, by: "user" }) }, "All of them, with their figures"))
      : null,
  );
  const blocks = h("section", { "aria-labelledby": "blocks-title" }, h("h2", { id: "blocks-title" }, "Memory blocks"));
  const facts = h("section", { "aria-labelledby": "facts-title" }, h("h2", { id: "facts-title" }, "Facts"));
  const consolidations = h(
    "section",
    { "aria-labelledby": "consolidations-title", id: "consolidations" },
    h("h2", { id: "consolidations-title" }, "Consolidation"),
  );
  const history = h(
    "section",
    { "aria-labelledby": "fact-timeline-title", id: "fact-timeline" },
    h("h2", { id: "fact-timeline-title" }, "How the facts changed"),
  );
  page.append(conversations, blocks, facts, consolidations, history);
  fillConsolidations(consolidations, id, runs, new Map(all.facts.map((f) => [f.id, f])));
  fillFactTimeline(history, id, (params && params.get("fact")) || "", all, mergedFacts(runs));
  await Promise.all([fillBlocks(blocks, null, id), fillFacts(facts, { userId: id })]);
  return page;
}

/// Tokens in the transcript against the input budget, with the trigger
/// (and the mark past which a summary is written ahead).
function gauge(s) {
  const budget = num(s.budget && s.budget.inputBudget) || 1;
  const tokens = num(s.estimatedTokens);
  const trigger = num(s.triggerTokens);
  const ahead = num(s.precompactTokens);
  const pct = (v) => Math.min(100, (v / budget) * 100).toFixed(2) + "%";
  const bar = h(
    "div",
    {
      class: "gauge",
      role: "meter",
      "aria-label": "Tokens in the transcript",
      "aria-valuemin": 0,
      "aria-valuemax": budget,
      "aria-valuenow": tokens,
      "aria-valuetext": `${fmt(tokens)} of ${fmt(budget)} tokens; compaction at ${fmt(trigger)}`,
    },
    h("div", { class: "fill" + (tokens >= trigger && trigger > 0 ? " over" : "") }),
    trigger ? h("div", { class: "mark trigger", title: "compaction trigger" }) : null,
    ahead ? h("div", { class: "mark ahead", title: "summary written ahead from here" }) : null,
  );
  // Through the CSSOM: the page's policy allows no style attributes.
  bar.querySelector(".fill").style.width = pct(tokens);
  if (trigger) bar.querySelector(".mark.trigger").style.left = pct(trigger);
  if (ahead) bar.querySelector(".mark.ahead").style.left = pct(ahead);
  return h(
    "section",
    { class: "panel", "aria-labelledby": "gauge-title", id: "gauge" },
    h("h2", { id: "gauge-title" }, "Context"),
    bar,
    h(
      "div",
      { class: "legend" },
      h("span", { id: "gauge-tokens" }, `${fmt(tokens)} tokens (${Math.round(num(s.percentUsed))}% of the ${fmt(budget)}-token input budget)`),
      h("span", {}, `compaction at ${fmt(trigger)}`),
      ahead ? h("span", { class: "warn" }, `summary written ahead from ${fmt(ahead)}${s.summaryAhead ? ` (${s.summaryAhead})` : ""}`) : null,
      h("span", { id: "gauge-compactions" }, `${fmt(s.compactions)} compaction${num(s.compactions) === 1 ? "" : "s"}`),
      s.compactionRequired ? h("span", { class: "warn" }, "compaction required") : null,
    ),
  );
}

/// What asked for a compaction, in words.
const TRIGGER = {
  estimate: "prompt size (our count)",
  token_pressure: "prompt size (the provider's report)",
  reactive: "the provider refused the prompt",
  turn_count: "too many turns",
  manual: "a Compact call",
  idle: "the conversation went quiet",
};

/// The compactions, newest first: each entry of the agent's compaction log
/// (its trigger, tokens before and after, how long it took) with the
/// summary it wrote, and the summaries the log does not hold (it keeps the
/// last 500), each with its turns and time span.
function timeline(episodic, log, turn) {
  const summaries = new Map(episodic.map((e) => [e.id, e]));
  const entries = log.map((r) => ({ at: num(r.at), record: r, summary: summaries.get((r.report || {}).episodicId) }));
  const logged = new Set(entries.filter((e) => e.summary).map((e) => e.summary.id));
  for (const e of episodic) if (!logged.has(e.id)) entries.push({ at: num(e.ts), summary: e });
  entries.sort((a, b) => b.at - a.at);
  const covered = !turn || episodic.some((e) => (e.turnIds || []).includes(turn));
  return h(
    "section",
    { "aria-labelledby": "timeline-title", id: "timeline" },
    h("h2", { id: "timeline-title" }, "Compaction timeline"),
    covered ? null : h("p", { class: "panel target", id: "active-turn" }, `${turn} is not compacted: it is in the active transcript.`),
    entries.length === 0
      ? h("p", { class: "muted" }, "No compaction yet: the whole conversation is in the prompt.")
      : h("ol", { class: "timeline" }, entries.map((e) => timelineEntry(e, turn))),
  );
}

function timelineEntry({ record, summary }, turn) {
  const r = (record && record.report) || {};
  const turns = summary ? summary.turnIds || [] : [];
  const target = turn && turns.includes(turn);
  const failed = record && record.outcome === "failed";
  const title = summary
    ? turns.length ? `${turns[0]} … ${turns[turns.length - 1]} (${turns.length} turns)` : "no turns"
    : failed ? "Compaction failed" : "Old tool results hidden";
  return h(
    "li",
    {
      class: [target ? "target" : "", failed ? "failed" : ""].join(" ").trim() || null,
      id: summary ? "summary-" + summary.id : "compaction-" + record.seq,
      "aria-current": target ? "true" : null,
    },
    h("h3", {}, title),
    record ? h("p", { class: "how" }, howItRan(record)) : h("p", { class: "how muted" }, "trigger and tokens not recorded"),
    summary ? h("p", { class: "muted" }, `${when(summary.fromTs)} – ${when(summary.toTs)} · written ${when(summary.ts)}`) : h("p", { class: "muted" }, when(record.at)),
    r.error ? h("p", { class: failed ? "warn" : "muted" }, r.error) : null,
    summary ? h("p", { class: "summary-text" }, summary.summary || "") : null,
  );
}

const took = (secs) => (secs < 1 ? `${Math.max(1, Math.round(secs * 1000))} ms` : `${secs.toFixed(1)} s`);

/// "a Compact call · 1,234 → 456 tokens (−63%) · 1.2 s · summarize · extractive"
function howItRan(record) {
  const r = record.report || {};
  const [before, after] = [num(r.tokensBefore), num(r.tokensAfter)];
  const change = before ? Math.round(((after - before) / before) * 100) : 0;
  const parts = [
    TRIGGER[r.trigger] || r.trigger || "unknown trigger",
    `${fmt(before)} → ${fmt(after)} tokens${change ? ` (${change > 0 ? "+" : "−"}${Math.abs(change)}%)` : ""}`,
    took(num(record.durationSecs)),
  ];
  if ((r.steps || []).length) parts.push(r.steps.join(" + "));
  if (record.summarizer) parts.push(record.summarizer);
  if (r.preparedInBackground) parts.push("written ahead");
  if (num(r.semanticAdded) || num(r.semanticUpdated)) parts.push(`facts +${fmt(r.semanticAdded)} ~${fmt(r.semanticUpdated)}`);
  return parts.join(" · ");
}

const ROLE = { ROLE_SYSTEM: "system", ROLE_USER: "user", ROLE_ASSISTANT: "assistant", ROLE_TOOL: "tool" };

/// The prompt as the model would get it now (a preview: nothing stored,
/// nothing compacted), as a chat.
function transcript(p) {
  const messages = p.messages || [];
  return h(
    "section",
    { "aria-labelledby": "prompt-title", id: "prompt" },
    h("h2", { id: "prompt-title" }, "The prompt now"),
    h("p", { class: "muted" }, `${messages.length} messages, about ${fmt(p.estimatedPromptTokens)} tokens`),
    (p.warnings || []).map((w) => h("p", { class: "warn", role: "note" }, w)),
    h(
      "details",
      {},
      h("summary", {}, "Show the messages"),
      h(
        "ol",
        { class: "chat" },
        messages.map((m) =>
          h(
            "li",
            { class: "message " + (ROLE[m.role] || "other") },
            h("p", { class: "role" }, ROLE[m.role] || "message", m.name ? ` (${m.name})` : "", m.toolName ? ` · ${m.toolName}` : ""),
            m.content ? h("p", { class: "content" }, m.content) : null,
            (m.toolCalls || []).map((c) => h("p", { class: "content muted" }, `calls ${c.name}(${JSON.stringify(c.arguments || {})})`)),
          ),
        ),
      ),
    ),
  );
}

// ---------------------------------------------------------------- search

async function searchPage(params) {
  const scope = params.get("scope") === "user" ? "user" : "agent";
  const id = params.get("id") || "";
  const q = params.get("q") || "";
  const form = h(
    "form",
    { class: "inline", role: "search", id: "search-form" },
    h("label", { for: "search-scope" }, "In"),
    h(
      "select",
      { id: "search-scope", name: "scope" },
      h("option", { value: "agent", selected: scope === "agent" }, "agent"),
      h("option", { value: "user", selected: scope === "user" }, "user"),
    ),
    h("label", { for: "search-id" }, "id"),
    h("input", { id: "search-id", name: "id", value: id, required: true }),
    h("label", { for: "search-q" }, "Query"),
    h("input", { id: "search-q", name: "q", value: q, required: true, size: 40 }),
    h("button", { type: "submit" }, "Search"),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    location.hash = "#/search?" + new URLSearchParams({ scope: form.scope.value, id: form.id.value.trim(), q: form.q.value.trim() });
  });
  const page = h("div", {}, h("h1", {}, "Search memories"), form);
  if (!id || !q) return page;
  const ask = { query: q, maxRecalled: 20, maxEpisodic: 0, maxSemantic: 0, rawTailTurns: 0 };
  if (scope === "user") ask.userId = id;
  else ask.agentId = id;
  const answer = await api("Retrieve", ask);
  const results = answer.recalled || [];
  page.append(
    h("p", { class: "muted", role: "status" }, `${results.length} result${results.length === 1 ? "" : "s"}`),
    h(
      "ol",
      { id: "results" },
      results.map((r) => {
        const agent = r.agentId || (scope === "agent" ? id : "");
        const text = r.trace ? r.trace.content : r.episodic ? r.episodic.summary : r.semantic ? r.semantic.fact : "";
        return h(
          "li",
          { class: "result" },
          h(
            "p",
            { class: "chips" },
            h("span", { class: "chip" }, KIND[r.kind] || "memory"),
            h("span", { class: "chip" }, "score " + num(r.score).toFixed(3)),
            h("span", { class: "chip" }, "matched by " + (MATCHED[r.matchedBy] || "—")),
            r.archived ? h("span", { class: "chip" }, "archived") : null,
            agent && scope === "user" ? h("span", { class: "chip" }, "agent " + agent) : null,
          ),
          h("p", { class: "text" }, text),
          h("p", { class: "muted" }, `${when(r.fromTs)} – ${when(r.toTs)} · `, (r.turnIds || []).length ? provenance(agent, r.turnIds) : "no turn"),
        );
      }),
    ),
  );
  return page;
}

// ---------------------------------------------------------------- start

document.getElementById("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, document.getElementById("token").value.trim());
  document.getElementById("token").value = "";
  render();
});
document.getElementById("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  render();
});
// The skip link moves the focus; as a plain link it would change the
// route (the hash).
document.querySelector(".skip").addEventListener("click", (ev) => {
  ev.preventDefault();
  document.getElementById("main").focus();
});
window.addEventListener("hashchange", render);
render();
