"""The console (/console/) in a real headless browser: Debian's Chromium
driven by Playwright for Python (pinned to the release built for the same
Chromium major; no browser download), against a real engramd with data
made here. Any console error, uncaught exception or failed request fails
the test. Screenshots of each page go to target/console/ (or
ENGRAM_CONSOLE_SHOTS); docs/guide/console.md shows a copy from docs/console/."""

import datetime
import json
import os
import re
import shutil
import urllib.parse
import urllib.request

import pytest
from conftest import json_server
from playwright.sync_api import expect, sync_playwright

TOKEN = "console-secret-token"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SHOTS = os.environ.get("ENGRAM_CONSOLE_SHOTS", os.path.join(ROOT, "target", "console"))
CHROMIUM = os.environ.get("ENGRAM_CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")


def post(base, method, body, token=TOKEN):
    request = urllib.request.Request(
        f"{base}/v1/{method}", data=json.dumps(body).encode(), method="POST",
        headers={"content-type": "application/json", "authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def tokens_file(tmp_path):
    path = tmp_path / "tokens.toml"
    path.write_text(f'[[tokens]]\nname = "ops"\ntoken = "{TOKEN}"\nadmin = true\n')
    return str(path)


def conversation(base, agent, user, turns):
    """`turns` exchanges about distinct things, bound to `user`."""
    for t in range(1, turns + 1):
        post(base, "Ingest", {"agentId": agent, "userId": user, "events": [
            {"traceType": "TRACE_TYPE_USER", "content": f"Day {t}: we talked about the okapi number {t} at length."},
            {"traceType": "TRACE_TYPE_ASSISTANT", "content": f"Noted the okapi number {t}; anything else?"},
        ]})


class Watched:
    """A page whose console errors, uncaught exceptions, failed requests
    and HTTP errors are collected (the ones a test expects are removed)."""

    def __init__(self, page):
        self.page, self.problems = page, []
        page.on("console", lambda m: m.type == "error" and self.problems.append(("console", m.text)))
        page.on("pageerror", lambda e: self.problems.append(("exception", str(e))))
        page.on("requestfailed", lambda r: self.problems.append(("failed", r.url, r.failure)))
        page.on("response", lambda r: r.status >= 400 and self.problems.append(("status", r.url, r.status)))

    def clean(self, expected=()):
        left = [p for p in self.problems if not any(e in str(p) for e in expected)]
        assert left == [], left
        self.problems.clear()


@pytest.fixture
def browser():
    assert os.path.exists(CHROMIUM), f"no Chromium at {CHROMIUM}: make test installs Debian's"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield browser
        browser.close()


def shot(page, name, whole=True, of=None):
    """A picture of the page (whole, or the viewport), or of element `of`."""
    os.makedirs(SHOTS, exist_ok=True)
    path = os.path.join(SHOTS, f"{name}.png")
    if of is not None:
        page.locator(of).screenshot(path=path)
    else:
        page.screenshot(path=path, full_page=whole)


def test_the_console_in_a_browser(start_engramd_http, tmp_path, browser):
    _, base = start_engramd_http(ENGRAM__AUTH__TOKENS_FILE=tokens_file(tmp_path))
    # A turn whose fact the compaction below draws (the extractive
    # summarizer keeps "I live …" sayings), then eight more.
    post(base, "Ingest", {"agentId": "ana-desk", "userId": "ana", "events": [
        {"traceType": "TRACE_TYPE_USER", "content": "I live in Lisbon, next to the zoo."},
        {"traceType": "TRACE_TYPE_ASSISTANT", "content": "Lisbon it is."}]})
    conversation(base, "ana-desk", "ana", 8)
    conversation(base, "bo-desk", "bo", 2)
    post(base, "AddMemories", {"scope": {"agentId": "ana-desk"},
                               "memories": [{"text": "Ana keeps an okapi called Oslo"}]})

    page = browser.new_page(viewport={"width": 1280, "height": 800})
    watched = Watched(page)

    # Nothing is shown without the token; a wrong one is refused.
    page.goto(f"{base}/console/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.locator("#agents")).to_have_count(0)
    page.get_by_label("Token").fill("wrong")
    page.get_by_role("button", name="Use token").click()
    expect(page.locator("#sign-in-error")).not_to_be_empty()
    watched.clean(expected=["401", "Unauthorized"])
    page.get_by_label("Token").fill(TOKEN)
    page.get_by_role("button", name="Use token").click()

    # Agents: both, with their users.
    table = page.locator("#agents")
    expect(table.get_by_role("link", name="ana-desk")).to_be_visible()
    expect(table.get_by_role("link", name="bo-desk")).to_be_visible()
    expect(table.get_by_role("link", name="ana", exact=True)).to_be_visible()
    expect(page.locator("#users").get_by_role("link", name="bo")).to_be_visible()
    expect(table.locator("tr", has_text="ana-desk").locator("td.last")).to_have_text(re.compile(r"^20\d\d-\d\d-\d\d \d\d:\d\d:\d\dZ$"))
    shot(page, "agents")
    # By a part of the id.
    page.get_by_label("Find").fill("a-de")
    page.get_by_role("button", name="Find").click()
    expect(page.get_by_role("heading", name="Agents whose id contains")).to_be_visible()
    expect(table.get_by_role("link", name="ana-desk")).to_be_visible()
    expect(table.get_by_role("link", name="bo-desk")).to_have_count(0)
    # By user: only that user's.
    page.get_by_label("Find").fill("bo")
    page.get_by_label("by").select_option("user")
    page.get_by_role("button", name="Find").click()
    expect(table.get_by_role("link", name="bo-desk")).to_be_visible()
    expect(table.get_by_role("link", name="ana-desk")).to_have_count(0)

    # An agent: the gauge, no compaction yet, its fact.
    page.goto(f"{base}/console/#/agent/ana-desk")
    expect(page.get_by_role("heading", name="Agent ana-desk")).to_be_visible()
    expect(page.get_by_role("meter")).to_be_visible()
    expect(page.locator("#gauge-compactions")).to_have_text("0 compactions")
    before = int(page.get_by_role("meter").get_attribute("aria-valuenow"))
    assert before > 0
    expect(page.locator("#timeline")).to_contain_text("No compaction yet")
    # The prompt as it stands, shown without storing anything.
    stored = post(base, "GetContextStats", {"agentId": "ana-desk"})["messages"]
    page.get_by_text("Show the messages").click()
    expect(page.locator("#prompt .message")).to_have_count(stored)
    expect(page.locator("#prompt .message").last).to_contain_text("Noted the okapi number 8")
    assert post(base, "GetContextStats", {"agentId": "ana-desk"})["messages"] == stored

    # A block: added, then edited against its version.
    page.get_by_label("Label").fill("persona")
    page.get_by_label("Value").fill("A patient zoo keeper.")
    page.get_by_role("button", name="Add block").click()
    persona = page.locator('.block[data-label="persona"]')
    expect(persona.locator("pre")).to_have_text("A patient zoo keeper.")
    persona.get_by_role("button", name="Edit").click()
    persona.get_by_label("New value of persona").fill("A patient okapi keeper.")
    persona.get_by_role("button", name="Save").click()
    persona = page.locator('.block[data-label="persona"]')
    expect(persona.locator("pre")).to_have_text("A patient okapi keeper.")
    expect(persona).to_contain_text("version 2")
    got = post(base, "GetMemoryBlock", {"scope": {"agentId": "ana-desk"}, "label": "persona"})
    assert got["block"]["value"] == "A patient okapi keeper."

    # A fact: pinned, its history shown, then deleted.
    oslo = page.locator(".fact", has_text="Oslo")
    oslo.get_by_role("button", name="Pin").click()
    oslo = page.locator(".fact", has_text="Oslo")
    expect(oslo.get_by_role("button", name="Unpin")).to_be_visible()
    oslo.get_by_role("button", name="History").click()
    expect(oslo.locator(".history li")).to_have_count(2)
    shot(page, "agent")
    oslo.get_by_role("button", name="Delete").click()
    expect(page.locator(".fact", has_text="Oslo")).to_have_count(0)
    listed = post(base, "ListMemories", {"scope": {"agentId": "ana-desk"}})
    assert not any("Oslo" in m["fact"] for m in listed.get("memories", []))

    # A compaction moves the gauge and shows in the timeline.
    post(base, "Compact", {"agentId": "ana-desk"})
    page.reload()
    expect(page.locator("#gauge-compactions")).to_have_text("1 compaction")
    after = int(page.get_by_role("meter").get_attribute("aria-valuenow"))
    assert after < before, (before, after)
    summary = page.locator("ol.timeline li").first
    expect(summary).to_contain_text("turn_0001")
    # A compaction's fact links to the turns it came from (it once showed
    # the links' addresses as text).
    drawn = page.locator(".fact", has_text="Lisbon")
    expect(drawn.locator(".provenance a").first).to_have_attribute("href", re.compile(r"#/agent/ana-desk\?turn=turn_\d+$"))
    expect(drawn.locator(".muted").first).not_to_contain_text("http")
    expect(page.locator("#facts")).not_to_contain_text("http")
    # From the compaction log: what asked for it and what it saved.
    logged = post(base, "ListCompactions", {"agentId": "ana-desk"})["compactions"][0]["report"]
    expect(summary.locator(".how")).to_contain_text(
        f"a Compact call · {logged['tokensBefore']:,} → {logged['tokensAfter']:,} tokens (−")
    expect(summary.locator(".how")).to_contain_text(re.compile(r" ms · summarize · extractive"))
    shot(page, "timeline", of="#timeline")

    # Search: an archived turn, followed into its summary in the timeline.
    page.goto(f"{base}/console/#/search")
    page.get_by_label("id").fill("ana-desk")
    page.get_by_label("Query").fill("okapi number 1")
    page.get_by_role("button", name="Search").click()
    results = page.locator("#results li")
    expect(results.first).to_be_visible()
    expect(results.first).to_contain_text("matched by")
    shot(page, "search", whole=False)
    hit = page.locator("#results li", has_text="archived").first
    hit.get_by_role("link").first.click()
    target = page.locator("ol.timeline li.target")
    expect(target).to_have_count(1)
    turn = page.url.split("turn=")[1]
    expect(target).to_contain_text("turn_")
    assert turn.startswith("turn_")

    # A user's own page: the conversations, the user's blocks and facts.
    post(base, "PutMemoryBlock", {"scope": {"userId": "ana"}, "label": "profile",
                                  "value": "Ana, okapi keeper."})
    page.goto(f"{base}/console/#/agent/ana-desk")
    page.locator("#facts-title").locator("..").get_by_role("link", name="ana", exact=True).click()
    expect(page.get_by_role("heading", name="User ana", exact=True)).to_be_visible()
    expect(page.locator("#user-agents").get_by_role("link", name="ana-desk")).to_be_visible()
    expect(page.locator('.block[data-label="profile"] pre')).to_have_text("Ana, okapi keeper.")
    expect(page.locator("#facts")).to_contain_text("Lisbon")
    # Its one fact on the time line too, current (the pictures of a user's
    # page are taken below, of a user whose facts changed).
    drawn = page.locator("#fact-timeline li", has_text="Lisbon")
    expect(drawn.locator(".chip.current")).to_have_text("current")
    expect(drawn.get_by_role("link", name="ana-desk")).to_have_attribute("href", "#/agent/ana-desk")

    # A narrow screen: every page, nothing cut off sideways.
    page.set_viewport_size({"width": 390, "height": 800})
    for name, path, ready in [
        ("agents-narrow", "#/", "#agents"),
        ("agent-narrow", "#/agent/ana-desk", "[role=meter]"),
        # (user-narrow.png: the user whose facts changed, below)
        ("user", "#/user/ana", "#fact-timeline li"),
        ("search-narrow", "#/search?" + urllib.parse.urlencode({"scope": "agent", "id": "ana-desk", "q": "okapi number 1"}), "#results"),
    ]:
        page.goto(f"{base}/console/{path}")
        expect(page.locator(ready)).to_be_visible()
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, (name, width)
        # Search's long list: the screen a reader sees first.
        if name.endswith("-narrow"):
            shot(page, name, whole=not name.startswith("search"))

    # Keyboard: the skip link is the first stop and leads to the content;
    # the sections are links in the tab order.
    page.goto(f"{base}/console/#/agent/ana-desk")
    expect(page.get_by_role("meter")).to_be_visible()
    page.reload()
    expect(page.get_by_role("meter")).to_be_visible()
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()
    assert page.url.endswith("#/agent/ana-desk"), page.url
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Search memories")).to_be_visible()

    watched.clean()


def at(day, minute=0):
    """Epoch seconds of `day` ("2026-08-01") at 09:00 UTC plus `minute`."""
    start = datetime.datetime.fromisoformat(day + "T09:00:00+00:00")
    return (start + datetime.timedelta(minutes=minute)).timestamp()


def dated_conversation(base, agent, user, day, first):
    """A conversation on `day` that says `first`, then four turns about
    other things, compacted (the raw tail is one turn)."""
    events = [{"traceType": "TRACE_TYPE_USER", "content": first, "ts": at(day)},
              {"traceType": "TRACE_TYPE_ASSISTANT", "content": "Noted.", "ts": at(day, 1)}]
    for t in range(1, 5):
        events += [
            {"traceType": "TRACE_TYPE_USER", "content": f"Question {t}: what is {t} squared?", "ts": at(day, 2 * t)},
            {"traceType": "TRACE_TYPE_ASSISTANT", "content": f"{t * t}.", "ts": at(day, 2 * t + 1)},
        ]
    for event in events:
        post(base, "Ingest", {"agentId": agent, "userId": user, "events": [event]})
    assert post(base, "Compact", {"agentId": agent})["report"]["performed"]


# What a conversation of the consolidation test says, and the facts the
# scripted model draws from it: no update of a known fact (each
# conversation's summarizer misses what the others said; consolidation
# finds it).
SAID = {
    "I live in Lisbon and play curling.": ["Lives in Lisbon", "Plays curling"],
    "I enjoy playing curling.": ["Enjoys playing curling"],
    "I live in Berlin now.": ["Lives in Berlin"],
}


def reconciled(said):
    """The model's answer to a consolidation request (its message starts
    with "Group 1:"; each group's facts oldest first, each with a handle):
    where the user lives, the latest saying of a group replaces the earlier
    ones; nothing else changed, nothing ended."""
    updates = []
    for group in re.split(r"^Group \d+:\n", said, flags=re.M)[1:]:
        homes = re.findall(r"^- \[(f\d+)\] (?:\(since [^)]*\) )?((?:Lives in|Moved to) .*)$", group, re.M)
        if len(homes) > 1:
            latest, fact = homes[-1]
            updates += [{"replaces": h, "by": latest, "fact": fact} for h, _ in homes[:-1]]
    return {"updates": updates, "invalidates": []}


def summarizer(path, body):
    """The model's answer to a compaction, by the handles of the known facts
    it is shown (DESIGN §15): the first conversation says where the user
    lives and an allergy; the second replaces the first fact (the move)
    and ends the second (the allergy is gone). The conversations of SAID
    give their facts and change none. A consolidation request is answered
    by `reconciled`."""
    said = body["messages"][1]["content"]
    if said.startswith("Group 1:"):
        return completion(body, json.dumps(reconciled(said)))
    turns = said.split("Turns to summarize:\n")[-1]
    told = [facts for text, facts in SAID.items() if text in turns]
    handle = lambda text: re.search(r"^- \[(f\d+)\] .*" + re.escape(text) + "$", said, re.M)
    lisbon, peanuts = handle("Lives in Lisbon"), handle("Allergic to peanuts")
    if told:
        facts = {"semantic_facts": told[0], "updates": [], "invalidates": []}
    elif lisbon and peanuts:
        facts = {"semantic_facts": [],
                 "updates": [{"replaces": lisbon.group(1), "fact": "Moved to Berlin"}],
                 "invalidates": [peanuts.group(1)]}
    elif "Berlin" in said:
        facts = {"semantic_facts": []}
    else:
        facts = {"semantic_facts": ["Lives in Lisbon", "Allergic to peanuts"], "updates": []}
    return completion(body, json.dumps({"episodic_summary": "Talked about home.", **facts}))


def completion(body, content):
    """An OpenAI-compatible chat completion answering request `body` with
    `content`."""
    return {"id": "x", "object": "chat.completion", "model": body.get("model", ""),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}


@pytest.fixture
def model():
    """The scripted summarizer's base URL, up until engramd has stopped
    (requested before it)."""
    with json_server(summarizer) as base:
        yield f"{base}/v1"


def test_the_user_page_shows_how_the_facts_changed(model, start_engramd_http, tmp_path, browser):
    """Two conversations of one user, two months apart, compacted by a model
    that replaces one fact and ends another: the user's page shows each
    fact's span, what replaced it, and the conversation it came from."""
    _, base = start_engramd_http(ENGRAM__AUTH__TOKENS_FILE=tokens_file(tmp_path),
                                 ENGRAM__LLM__BASE_URL=model, ENGRAM__LLM__MODEL="summarizer",
                                 ENGRAM__POLICY__RAW_TAIL_TURNS="1")
    dated_conversation(base, "ana-home", "ana", "2026-08-01",
                       "I live in Lisbon. I am allergic to peanuts.")
    dated_conversation(base, "ana-moving", "ana", "2026-10-03",
                       "I moved to Berlin; the allergy is gone.")
    post(base, "AddMemories", {"scope": {"userId": "ana"}, "memories": [
        {"text": "Prefers answers in Portuguese", "pinned": True, "validFrom": at("2026-07-15")}]})
    post(base, "PutMemoryBlock", {"scope": {"userId": "ana"}, "label": "profile",
                                  "value": "Ana, okapi keeper."})
    # The API says which conversation each of the user's facts came from.
    listed = post(base, "ListMemories", {"scope": {"userId": "ana"}, "includeSuperseded": True})
    by_text = {m["fact"]: m for m in listed["memories"]}
    lisbon, berlin = by_text["Lives in Lisbon"], by_text["Moved to Berlin"]
    assert lisbon["supersededBy"] == berlin["id"]
    assert [s["agentId"] for s in lisbon["sources"]] == ["ana-home"]
    assert lisbon["sources"][0]["turnIds"] and lisbon["sources"][0]["factId"]
    assert [s["agentId"] for s in berlin["sources"]] == ["ana-moving"]
    assert "sources" not in by_text["Prefers answers in Portuguese"]
    got = post(base, "GetMemory", {"scope": {"userId": "ana"}, "id": lisbon["id"]})["memory"]
    assert got["sources"] == lisbon["sources"]

    page = browser.new_page(viewport={"width": 1280, "height": 800})
    watched = Watched(page)
    page.goto(f"{base}/console/")
    page.get_by_label("Token").fill(TOKEN)
    page.get_by_role("button", name="Use token").click()
    expect(page.locator("#agents").get_by_role("link", name="ana-home")).to_be_visible()
    watched.clean(expected=["401", "Unauthorized"])  # before the token
    page.goto(f"{base}/console/#/user/ana")
    timeline = page.locator("#fact-timeline")
    expect(timeline.get_by_role("heading", name="How the facts changed")).to_be_visible()
    entries = timeline.locator("ol > li")
    expect(entries).to_have_count(4)
    # Newest first by when each became true.
    expect(entries.first).to_contain_text("Moved to Berlin")
    expect(entries.last).to_contain_text("Prefers answers in Portuguese")

    # An entry by its fact (another's may name it: what replaced it).
    entry = lambda fact: entries.filter(has=page.locator("p.text", has_text=re.compile(f"^{re.escape(fact)}$")))
    old = entry("Lives in Lisbon")
    expect(old.locator("h3")).to_have_text("2026-08-01 to 2026-10-03")
    expect(old.locator(".chip.replaced")).to_have_text("replaced")
    expect(old.get_by_role("link", name="Moved to Berlin")).to_have_attribute(
        "href", f"#/user/ana?fact={berlin['id']}")
    expect(old.get_by_role("link", name="ana-home")).to_have_attribute("href", "#/agent/ana-home")
    expect(old.locator(".from a[href*='?turn=turn_']").first).to_be_visible()

    new = entry("Moved to Berlin")
    expect(new.locator("h3")).to_have_text("since 2026-10-03")
    expect(new.locator(".chip.current")).to_have_text("current")
    expect(new.get_by_role("link", name="ana-moving")).to_have_attribute("href", "#/agent/ana-moving")

    ended = entry("Allergic to peanuts")
    expect(ended.locator("h3")).to_have_text("2026-08-01 to 2026-10-03")
    expect(ended.locator(".chip.ended")).to_have_text("ended")
    expect(ended).to_contain_text("No longer true, with nothing in its place.")

    client = entry("Prefers answers in Portuguese")
    expect(client.locator("h3")).to_have_text("since 2026-07-15")
    expect(client.locator(".chip")).to_have_text(["current", "pinned", "client-written"])
    expect(client).to_contain_text("Written by a client.")

    # No consolidation has run for this user yet.
    runs = page.locator("#consolidations")
    expect(runs.get_by_role("heading", name="Consolidation")).to_be_visible()
    expect(runs).to_contain_text("No consolidation yet.")
    expect(runs.get_by_role("button", name="Consolidate now")).to_be_visible()

    # The time line is read-only; the current facts stay editable above it.
    expect(timeline.get_by_role("button")).to_have_count(0)
    current = page.locator("#facts .fact")
    expect(current).to_have_count(2)
    expect(page.locator("#facts")).not_to_contain_text("Lisbon")
    expect(page.locator(".fact", has_text="Moved to Berlin").get_by_role("button", name="Edit")).to_be_visible()
    shot(page, "user")

    # What replaced a fact: its link marks it on the time line.
    old.get_by_role("link", name="Moved to Berlin").click()
    marked = page.locator("#fact-timeline li.target")
    expect(marked).to_have_count(1)
    expect(marked).to_contain_text("Moved to Berlin")
    expect(marked).to_have_attribute("aria-current", "true")
    # Its conversation's page.
    entry("Lives in Lisbon").get_by_role("link", name="ana-home").click()
    expect(page.get_by_role("heading", name="Agent ana-home")).to_be_visible()

    page.set_viewport_size({"width": 390, "height": 800})
    page.goto(f"{base}/console/#/user/ana")
    expect(page.locator("#fact-timeline li").first).to_be_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, width
    shot(page, "user-narrow")
    watched.clean()


def test_the_user_page_consolidates_the_facts(model, start_engramd_http, tmp_path, browser):
    """Three conversations of one user: two say one fact in other words,
    the third says the user moved without its summarizer seeing the old
    home. "Consolidate now" merges the repeat (by meaning: the local
    model) and asks the scripted model about the facts on one subject,
    which replaces the old home; the run shows on the user's page, each
    change a link into the time line, and the time line with it."""
    local = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
    assert os.path.isfile(os.path.join(local, "model.safetensors")), \
        f"{local} is missing: `make models` installs the local model"
    _, base = start_engramd_http(ENGRAM__AUTH__TOKENS_FILE=tokens_file(tmp_path),
                                 ENGRAM__LLM__BASE_URL=model, ENGRAM__LLM__MODEL="summarizer",
                                 ENGRAM__POLICY__RAW_TAIL_TURNS="1", ENGRAM__EMBED__MODEL_DIR=local)
    dated_conversation(base, "cy-home", "cy", "2026-08-01", "I live in Lisbon and play curling.")
    dated_conversation(base, "cy-club", "cy", "2026-09-01", "I enjoy playing curling.")
    dated_conversation(base, "cy-moving", "cy", "2026-10-03", "I live in Berlin now.")
    listed = post(base, "ListMemories", {"scope": {"userId": "cy"}})["memories"]
    fact = {m["fact"]: m["id"] for m in listed}
    assert sorted(fact) == ["Enjoys playing curling", "Lives in Berlin", "Lives in Lisbon", "Plays curling"]
    assert post(base, "ListConsolidations", {"userId": "cy"}).get("consolidations", []) == []

    page = browser.new_page(viewport={"width": 1280, "height": 800})
    watched = Watched(page)
    page.goto(f"{base}/console/")
    page.get_by_label("Token").fill(TOKEN)
    page.get_by_role("button", name="Use token").click()
    expect(page.locator("#agents").get_by_role("link", name="cy-home")).to_be_visible()
    watched.clean(expected=["401", "Unauthorized"])  # before the token
    page.goto(f"{base}/console/#/user/cy")
    section = page.locator("#consolidations")
    expect(section.get_by_role("heading", name="Consolidation")).to_be_visible()
    expect(section.locator("#no-consolidation")).to_have_text("No consolidation yet.")
    expect(page.locator("#facts .fact")).to_have_count(4)

    section.get_by_role("button", name="Consolidate now").click()
    # The run embeds the facts with the local model (seconds in a debug
    # build, on a busy machine) and asks the scripted one.
    runs = section.get_by_role("list", name="Consolidation").locator("> li")
    expect(runs).to_have_count(1, timeout=120_000)
    expect(section.locator("#no-consolidation")).to_have_count(0)
    [logged] = post(base, "ListConsolidations", {"userId": "cy"})["consolidations"]
    assert (logged["seq"], logged["trigger"]) == ("1", "request"), logged
    assert (logged.get("merged"), logged.get("replaced"), logged.get("invalidated", 0)) == (1, 1, 0), logged
    assert logged["groupsAsked"] >= 1 and logged["summarizer"] and not logged.get("error"), logged
    run = runs.first
    expect(run.locator("h3")).to_have_text(re.compile(r"^Run 1 · 20\d\d-\d\d-\d\d \d\d:\d\d:\d\dZ$"))
    expect(run.locator(".how")).to_have_text(re.compile(r"^on request · [\d.]+ m?s$"))
    expect(run.locator(".counts")).to_have_text(
        f"1 merged · 1 replaced · 0 ended · {logged['unchanged']} unchanged")
    groups = logged["groupsAsked"]
    expect(run.locator(".asked")).to_have_text(
        f"{groups} group{'' if groups == 1 else 's'} of facts on one subject asked of {logged['summarizer']}")
    # Each change names its facts, links into the time line.
    changes = run.get_by_role("list", name="What run 1 changed").locator("> li")
    expect(changes).to_have_count(2)
    here = lambda text: f"#/user/cy?fact={fact[text]}"
    merged = changes.filter(has=page.locator(".chip.merged"))
    expect(merged).to_have_text("merged Enjoys playing curling went into Plays curling")
    expect(merged.get_by_role("link", name="Enjoys playing curling")).to_have_attribute("href", here("Enjoys playing curling"))
    expect(merged.get_by_role("link", name="Plays curling")).to_have_attribute("href", here("Plays curling"))
    replaced = changes.filter(has=page.locator(".chip.replaced"))
    expect(replaced).to_have_text("replaced Lives in Lisbon replaced by Lives in Berlin")
    expect(replaced.get_by_role("link", name="Lives in Lisbon")).to_have_attribute("href", here("Lives in Lisbon"))
    expect(replaced.get_by_role("link", name="Lives in Berlin")).to_have_attribute("href", here("Lives in Berlin"))
    # The page was drawn anew: what the run did, by the button (focused).
    expect(section.get_by_role("status")).to_have_text(
        f"Run 1 done: 1 merged · 1 replaced · 0 ended · {logged['unchanged']} unchanged.")
    expect(section.get_by_role("button", name="Consolidate now")).to_be_focused()

    # The facts and their time line with it.
    expect(page.locator("#facts .fact")).to_have_count(2)
    entries = page.locator("#fact-timeline ol > li")
    expect(entries).to_have_count(4)
    entry = lambda text: entries.filter(has=page.locator("p.text", has_text=re.compile(f"^{re.escape(text)}$")))
    old = entry("Lives in Lisbon")
    expect(old.locator(".chip.replaced")).to_have_text("replaced")
    expect(old.locator("h3")).to_have_text("2026-08-01 to 2026-10-03")
    expect(old.get_by_role("link", name="Lives in Berlin")).to_have_attribute("href", here("Lives in Berlin"))
    again = entry("Enjoys playing curling")
    expect(again.locator(".chip.merged")).to_have_text("merged")
    expect(again.locator("h3")).to_have_text("since 2026-09-01")
    expect(again.locator(".replaced-by")).to_have_text("Said again in other words: merged into Plays curling")
    kept = entry("Plays curling")
    expect(kept.locator(".chip.current")).to_have_text("current")
    expect(kept.locator("h3")).to_have_text("since 2026-08-01")
    expect(kept.locator(".from > a")).to_have_text(["cy-home", "cy-club"])

    # A change's link marks its fact on the time line.
    replaced.get_by_role("link", name="Lives in Lisbon").click()
    marked = page.locator("#fact-timeline li.target")
    expect(marked).to_have_count(1)
    expect(marked.locator("p.text")).to_have_text("Lives in Lisbon")
    expect(marked).to_have_attribute("aria-current", "true")
    assert page.url.endswith(here("Lives in Lisbon")), page.url

    # Again: nothing left to do; the newest run first.
    section.get_by_role("button", name="Consolidate now").click()
    expect(runs).to_have_count(2, timeout=120_000)
    expect(runs.first.locator("h3")).to_contain_text("Run 2 · ")
    expect(runs.first.locator(".counts")).to_have_text("0 merged · 0 replaced · 0 ended · 2 unchanged")
    expect(runs.first).to_contain_text("Nothing changed.")
    expect(runs.last.locator("h3")).to_contain_text("Run 1 · ")

    page.set_viewport_size({"width": 390, "height": 800})
    page.goto(f"{base}/console/#/user/cy")
    expect(runs).to_have_count(2)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, width
    watched.clean()


def test_the_console_without_auth_needs_no_token(start_engramd_http, browser):
    """`make run` has no tokens: the page shows the data at once."""
    _, base = start_engramd_http()
    request = urllib.request.Request(
        f"{base}/v1/Ingest", method="POST", headers={"content-type": "application/json"},
        data=json.dumps({"agentId": "open-1", "events": [
            {"traceType": "TRACE_TYPE_USER", "content": "hello"}]}).encode())
    urllib.request.urlopen(request, timeout=30).close()
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    watched = Watched(page)
    page.goto(f"{base}/console/")
    expect(page.locator("#agents").get_by_role("link", name="open-1")).to_be_visible()
    expect(page.get_by_role("heading", name="Sign in")).to_be_hidden()
    expect(page.get_by_role("button", name="Forget token")).to_be_hidden()
    watched.clean()
