// Engram console: memory blocks and facts, on an agent's page and a user's.
// Loaded before console.js, whose helpers (h, api, attempt, when, failure,
// inlineEditor, render, ApiError) these call once the page runs.
"use strict";

/// The blocks of `agentId` (none: a user's page) and of `userId`, and a
/// form that adds one to the first of them.
async function fillBlocks(section, agentId, userId) {
  const scopes = agentId ? [{ agentId }] : [];
  if (userId) scopes.push({ userId });
  for (const scope of scopes) {
    let answer;
    try {
      answer = await api("ListMemoryBlocks", { scope });
    } catch (e) {
      section.append(failure(e));
      continue;
    }
    const blocks = (answer.blocks || []).filter((b) => !b.deleted);
    section.append(h("h3", {}, scope.agentId ? "This agent's blocks" : `User ${scope.userId}'s blocks`));
    if (blocks.length === 0) section.append(h("p", { class: "muted" }, "None."));
    for (const b of blocks) section.append(block(scope, b));
  }
  section.append(newBlockForm(scopes[0]));
}

/// A block, with an editor that saves against the version shown.
function block(scope, b) {
  const shown = h("pre", { class: "value" }, b.value || "");
  const status = h("p", { role: "status" });
  const el = h(
    "div",
    { class: "panel block", "data-label": b.label },
    h("h3", {}, b.label, b.readOnly ? " (read-only)" : ""),
    h("p", { class: "muted" }, `version ${b.version || 0} · ${b.format === "BLOCK_FORMAT_JSON" ? "JSON" : "text"} · updated ${when(b.updatedAt)}`),
    b.description ? h("p", {}, b.description) : null,
    shown,
    status,
  );
  if (!b.readOnly) {
    const [edit, editor, save] = inlineEditor(
      h("textarea", { "aria-label": `New value of ${b.label}` }),
      () => b.value || "",
      async (value) => {
        try {
          const answer = await api("PutMemoryBlock", {
            scope,
            label: b.label,
            value,
            format: b.format || "BLOCK_FORMAT_TEXT",
            limitChars: b.limitChars || 0,
            expectedVersion: String(b.version || 0),
          });
          el.replaceWith(block(scope, answer.block));
        } catch (e) {
          status.replaceChildren(
            e instanceof ApiError && e.status === 409 ? h("span", { class: "error" }, "Changed meanwhile: reload to see the new version.") : failure(e),
          );
        }
      },
    );
    el.append(h("div", { class: "actions" }, edit), editor, h("div", { class: "actions" }, save));
  }
  return el;
}

function newBlockForm(scope) {
  const status = h("p", { role: "status" });
  const form = h(
    "form",
    { class: "panel", id: "new-block" },
    h("h3", {}, scope.agentId ? "Add a block to this agent" : "Add a block to this user"),
    h("p", {}, h("label", { for: "new-block-label" }, "Label"), h("input", { id: "new-block-label", name: "label", required: true })),
    h("p", {}, h("label", { for: "new-block-value" }, "Value"), h("textarea", { id: "new-block-value", name: "value", required: true })),
    h("button", { type: "submit" }, "Add block"),
    status,
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    attempt(status, async () => {
      await api("PutMemoryBlock", {
        scope,
        label: form.label.value.trim(),
        value: form.value.value,
        format: "BLOCK_FORMAT_TEXT",
        expectedVersion: "0",
      });
      await render();
    });
  });
  return form;
}

async function fillFacts(section, scope) {
  const answer = await api("ListMemories", { scope, pageSize: 100 });
  const facts = answer.memories || [];
  if (facts.length === 0) section.append(h("p", { class: "muted" }, "No facts."));
  const list = h("div", { id: "facts" });
  for (const f of facts) list.append(fact(scope, f));
  section.append(list);
}

/// A fact: pin, edit, delete (each against the version shown), history.
function fact(scope, f) {
  const status = h("p", { role: "status" });
  const el = h(
    "div",
    { class: "fact", "data-id": f.id },
    h("p", { class: "text" }, f.pinned ? [h("span", { class: "chip" }, "pinned"), " "] : null, f.fact),
    h(
      "p",
      { class: "muted" },
      `version ${f.version || 0} · ${when(f.ts)}`,
      (f.turnIds || []).length ? [" · from ", provenance(scope.agentId, f.turnIds)] : null,
    ),
    status,
  );
  const update = (change) =>
    attempt(status, async () => {
      const answer = await api("UpdateMemory", { scope, id: f.id, expectedVersion: String(f.version || 0), ...change });
      el.replaceWith(fact(scope, answer.memory));
    });
  const pin = h("button", { type: "button", class: "plain" }, f.pinned ? "Unpin" : "Pin");
  pin.addEventListener("click", () => update({ pinned: !f.pinned }));
  const [edit, editor, save] = inlineEditor(
    h("input", { "aria-label": "New text of the fact", size: 60 }),
    () => f.fact,
    (text) => update({ text }),
  );
  const del = h("button", { type: "button", class: "danger" }, "Delete");
  del.addEventListener("click", () =>
    attempt(status, async () => {
      await api("DeleteMemory", { scope, id: f.id, expectedVersion: String(f.version || 0) });
      el.remove();
    }),
  );
  const historyBox = h("ol", { class: "history", hidden: true });
  const history = h("button", { type: "button", class: "plain", "aria-expanded": "false" }, "History");
  history.addEventListener("click", async () => {
    if (!historyBox.hidden) {
      historyBox.hidden = true;
      history.setAttribute("aria-expanded", "false");
      return;
    }
    await attempt(status, async () => {
      const answer = await api("GetMemoryHistory", { scope, id: f.id });
      historyBox.replaceChildren(
        ...(answer.versions || []).map((v) =>
          h("li", {}, `v${v.version || 0} ${when(v.ts)}: `, v.deletedAt ? h("em", {}, "deleted") : v.fact, v.pinned ? " (pinned)" : ""),
        ),
      );
      historyBox.hidden = false;
      history.setAttribute("aria-expanded", "true");
    });
  });
  el.append(h("div", { class: "actions" }, pin, edit, del, history), h("div", { class: "actions" }, editor, save), historyBox);
  return el;
}

/// Links from turn ids into the agent's timeline: the first few, then how
/// many more (all of them in the tooltip). Without an agent (a user's
/// fact: its turns are of several conversations) the ids, as text.
function provenance(agentId, turnIds) {
  const FEW = 3;
  const ids = turnIds || [];
  const link = (t) =>
    agentId ? h("a", { href: `#/agent/${encodeURIComponent(agentId)}?turn=${encodeURIComponent(t)}` }, t) : t;
  const shown = ids.slice(0, FEW).flatMap((t, i) => (i ? [", ", link(t)] : [link(t)]));
  const rest = ids.length - FEW;
  return h(
    "span",
    { class: "provenance", title: rest > 0 ? ids.join(", ") : null },
    shown,
    rest > 0 ? ` and ${rest} more` : null,
  );
}

// ---------------------------------------------------------------- a user's facts over time

/// How many facts the time line reads at most: pages of TIMELINE_PAGE.
const TIMELINE_PAGES = 10;
const TIMELINE_PAGE = 200;

/// A day, from epoch seconds: "2026-10-03" (UTC).
const day = (ts) => new Date(num(ts) * 1000).toISOString().slice(0, 10);

/// Every fact of user `userId`, current and past (replaced, merged,
/// ended, expired), as ListMemories pages them: at most TIMELINE_PAGES
/// pages; `more` when some were left.
async function allUserFacts(userId) {
  const facts = [];
  let pageToken = "";
  let pages = 0;
  do {
    const answer = await api("ListMemories", {
      scope: { userId },
      includeSuperseded: true,
      includeExpired: true,
      pageSize: TIMELINE_PAGE,
      pageToken,
    });
    facts.push(...(answer.memories || []));
    pageToken = answer.nextPageToken || "";
    pages++;
  } while (pageToken && pages < TIMELINE_PAGES);
  return { facts, more: !!pageToken };
}

/// A link to fact `id` of user `userId` on the time line (it marks it).
const factHref = (userId, id) => `#/user/${encodeURIComponent(userId)}?fact=${encodeURIComponent(id)}`;

/// The facts of `all` (allUserFacts) on the time line, newest first by
/// when each became true: its span, whether it still holds (or what
/// replaced it, or what it was merged into: `merged`, fact id → the one
/// it went into, from the consolidation runs), and the conversations
/// that said it. Read-only: the current facts are changed in the Facts
/// section.
function fillFactTimeline(section, userId, focus, all, merged) {
  const facts = [...all.facts];
  const started = (f) => num(f.validFrom || f.ts);
  facts.sort((a, b) => started(b) - started(a) || num(b.ts) - num(a.ts) || (a.id < b.id ? 1 : -1));
  const byId = new Map(facts.map((f) => [f.id, f]));
  const now = Date.now() / 1000;
  section.append(
    h(
      "p",
      { class: "muted" },
      "Every fact of this user, current and past, newest first by when it became true: what replaced what, when, and from which conversation. Read-only: change the current ones under Facts.",
    ),
  );
  if (facts.length === 0) {
    section.append(h("p", { class: "muted" }, "No facts yet."));
    return;
  }
  section.append(
    h(
      "ol",
      { class: "timeline fact-timeline", "aria-labelledby": "fact-timeline-title" },
      facts.map((f) => factEntry(userId, f, byId, now, focus, merged || new Map())),
    ),
  );
  if (all.more) {
    section.append(h("p", { class: "muted" }, `The first ${fmt(facts.length)} facts (pinned ones, then the newest written); older ones are not shown.`));
  }
}

/// What became of fact `f`: "current", "merged" (said again: it went
/// into another, `merged` says), "replaced", "ended" or "expired".
function factState(f, now, merged) {
  if (f.supersededBy && merged.get(f.id) === f.supersededBy && !f.invalidAt) return "merged";
  if (f.supersededBy) return "replaced";
  if (f.invalidAt) return "ended";
  if (f.expiresAt && num(f.expiresAt) <= now) return "expired";
  return "current";
}

function factEntry(userId, f, byId, now, focus, merged) {
  const state = factState(f, now, merged);
  const start = num(f.validFrom || f.ts);
  const end = f.invalidAt ? num(f.invalidAt) : state === "expired" ? num(f.expiresAt) : 0;
  const date = (ts) => h("time", { datetime: day(ts) }, day(ts));
  const span = end ? [date(start), " to ", date(end)] : ["since ", date(start)];
  const next = f.supersededBy ? byId.get(f.supersededBy) : null;
  const here = (id) => factHref(userId, id);
  const target = focus === f.id;
  const sources = f.sources || [];
  return h(
    "li",
    {
      class: ["fact-entry", state, target ? "target" : ""].join(" ").trim(),
      id: "fact-" + f.id,
      "data-id": f.id,
      "aria-current": target ? "true" : null,
    },
    h("h3", { class: "span" }, span),
    h("p", { class: "text" }, f.fact),
    h(
      "p",
      { class: "chips state" },
      h("span", { class: "chip " + state }, state),
      f.pinned ? h("span", { class: "chip" }, "pinned") : null,
      f.origin === "MEMORY_ORIGIN_CLIENT" ? h("span", { class: "chip" }, "client-written") : null,
    ),
    state === "merged"
      ? h(
          "p",
          { class: "replaced-by" },
          "Said again in other words: merged into ",
          next ? h("a", { href: here(next.id) }, next.fact) : `fact ${f.supersededBy} (not listed here).`,
        )
      : f.supersededBy
        ? h(
            "p",
            { class: "replaced-by" },
            "Replaced by ",
            next
              ? [h("a", { href: here(next.id) }, next.fact), " (since ", date(next.validFrom || next.ts), ")"]
              : `fact ${f.supersededBy} (not listed here: deleted, or past the facts shown).`,
          )
        : state === "ended"
          ? h("p", { class: "replaced-by" }, "No longer true, with nothing in its place.")
          : null,
    sources.length
      ? h(
          "p",
          { class: "muted from" },
          "From ",
          sources.flatMap((s, i) => [
            i ? "; " : null,
            h("a", { href: "#/agent/" + encodeURIComponent(s.agentId) }, s.agentId),
            (s.turnIds || []).length ? [" (", provenance(s.agentId, s.turnIds), ")"] : null,
          ]),
        )
      : h(
          "p",
          { class: "muted from" },
          f.origin === "MEMORY_ORIGIN_CLIENT"
            ? "Written by a client."
            : state === "merged"
              ? "Its conversations are listed with the fact it was merged into."
              : "No conversation recorded.",
        ),
  );
}

// ---------------------------------------------------------------- a user's consolidation runs

/// What started a consolidation run, in words.
const CONSOLIDATION_TRIGGER = { request: "on request", idle: "after a conversation went quiet" };

/// `n` and `word`, plural when `n` is not 1: "2 groups".
const counted = (n, word) => `${fmt(n)} ${word}${num(n) === 1 ? "" : "s"}`;

/// A run's four counts: "1 merged · 1 replaced · 0 ended · 2 unchanged".
const runCounts = (r) =>
  `${fmt(r.merged)} merged · ${fmt(r.replaced)} replaced · ${fmt(r.invalidated)} ended · ${fmt(r.unchanged)} unchanged`;

/// Fact id → the fact it was merged into, by the consolidation runs
/// `runs` (ListConsolidations' answer): what the time line calls merged.
function mergedFacts(runs) {
  const merged = new Map();
  for (const r of (runs && runs.consolidations) || []) {
    for (const c of r.changes || []) if (c.kind === "merged" && c.byFactId) merged.set(c.factId, c.byFactId);
  }
  return merged;
}

/// User `userId`'s consolidation runs (`runs`: ListConsolidations'
/// answer, or {failed}), newest first, each with what it did fact by fact
/// (`byId`: the user's facts by id, for their words), and a button that
/// runs one now and redraws the page.
function fillConsolidations(section, userId, runs, byId) {
  const status = h("p", { role: "status", id: "consolidate-status" });
  const button = h(
    "button",
    { type: "button", id: "consolidate-now", "aria-describedby": "consolidations-about" },
    "Consolidate now",
  );
  button.addEventListener("click", () =>
    attempt(status, async () => {
      button.disabled = true;
      status.textContent = "Consolidating…";
      let answer;
      try {
        answer = await api("ConsolidateUser", { userId });
      } finally {
        button.disabled = false;
      }
      const run = answer.consolidation || {};
      await render();
      // The page is drawn anew: what the run did, next to the button.
      const said = document.getElementById("consolidate-status");
      if (said) said.textContent = num(run.seq) ? `Run ${run.seq} done: ${runCounts(run)}.` : "Nothing to consolidate: this user has no facts.";
      const again = document.getElementById("consolidate-now");
      if (again) again.focus();
    }),
  );
  section.append(
    h(
      "p",
      { class: "muted", id: "consolidations-about" },
      "Reconciles this user's facts across their conversations: a fact said again in other words merges into its first saying, and the summarizer is asked which facts on one subject replaced or ended others. Pinned and client-written facts never change. It runs when a conversation of the user goes quiet, or now.",
    ),
    h("div", { class: "actions" }, button),
    status,
  );
  if (runs.failed) {
    section.append(failure(runs.failed));
    return;
  }
  const list = runs.consolidations || [];
  section.append(
    list.length === 0
      ? h("p", { class: "muted", id: "no-consolidation" }, "No consolidation yet.")
      : h(
          "ol",
          { class: "timeline consolidations", "aria-labelledby": "consolidations-title" },
          list.map((r) => consolidationEntry(userId, r, byId)),
        ),
  );
}

function consolidationEntry(userId, r, byId) {
  const changes = r.changes || [];
  const asked = num(r.groupsAsked);
  const at = num(r.at);
  return h(
    "li",
    { class: "consolidation" + (r.error ? " errored" : ""), id: "consolidation-" + r.seq, "data-seq": r.seq },
    h("h3", {}, `Run ${r.seq} · `, h("time", { datetime: at ? new Date(at * 1000).toISOString() : null }, when(at))),
    h("p", { class: "how" }, [CONSOLIDATION_TRIGGER[r.trigger] || r.trigger || "unknown trigger", took(num(r.durationSecs))].join(" · ")),
    h("p", { class: "counts" }, runCounts(r)),
    h(
      "p",
      { class: "asked muted" },
      asked
        ? `${counted(asked, "group")} of facts on one subject asked of ${r.summarizer || "the summarizer"}`
        : "No group asked of a summarizer (only repeats merge with the embedded one)",
      num(r.unknownHandles) ? ` · ${counted(r.unknownHandles, "handle")} in its answer named no fact shown (ignored)` : null,
    ),
    r.error ? h("p", { class: "warn" }, `The summarizer could not decide: ${r.error} (repeats were merged anyway).`) : null,
    changes.length
      ? h("ul", { class: "changes", "aria-label": `What run ${r.seq} changed` }, changes.map((c) => changeItem(userId, c, byId)))
      : h("p", { class: "muted" }, "Nothing changed."),
  );
}

/// The fact's kind of change, in the time line's words.
const CHANGE = { merged: "merged", replaced: "replaced", invalidated: "ended" };

/// One fact a run changed, a link to it on the time line (and, merged or
/// replaced, to the fact it went into or that replaced it).
function changeItem(userId, c, byId) {
  const link = (id) => {
    const f = byId.get(id);
    return h("a", { href: factHref(userId, id) }, f && f.fact ? f.fact : `fact ${id}`);
  };
  const kind = CHANGE[c.kind] || c.kind || "changed";
  return h(
    "li",
    { class: "change " + kind, "data-fact": c.factId },
    h("span", { class: "chip " + kind }, kind),
    " ",
    link(c.factId),
    c.kind === "merged"
      ? [" went into ", link(c.byFactId)]
      : c.kind === "replaced"
        ? [" replaced by ", link(c.byFactId)]
        : c.kind === "invalidated"
          ? [" no longer true", c.invalidAt ? [" from ", h("time", { datetime: day(c.invalidAt) }, day(c.invalidAt))] : null]
          : null,
  );
}
