"""EngramClient and the example agent loop against the real engramd."""

import hashlib
import json
import os
import subprocess
import sys

import grpc
import pytest
from engram.v1 import facts_pb2 as facts
from engram.v1 import memory_pb2 as memory
from engram.v1 import service_pb2 as svc
from engram.v1 import types_pb2 as types

from engram_client import EngramClient, assistant, tool_call, tool_result, user

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import agent_loop  # noqa: E402


def test_example_agent_loop_runs_tools_through_engram(engramd, fake_llm):
    base_url, seen = fake_llm
    with EngramClient(engramd) as engram:
        text = agent_loop.run_agent(engram, "py-example", "What's the weather in Paris?",
                                    llm_url=base_url, model="gpt-4o-mini")
        assert text == "It is 12 C in Paris."
        # Two model calls: the second one carried Engram's transcript with
        # the tool call and its result, in OpenAI's shape.
        assert [path for path, _ in seen] == ["/v1/chat/completions"] * 2
        second = seen[1][1]["messages"]
        assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
        assert second[2]["tool_calls"][0]["function"]["name"] == "get_weather"
        assert seen[1][1]["tools"] == agent_loop.TOOLS
        stats = engram.context_stats("py-example")
        assert stats.turns == 1 and stats.messages == 5
        hits = engram.search_history("py-example", "Paris").matches
        assert any("12 C" in m.trace.content for m in hits)

        # The next question sees the first exchange.
        agent_loop.run_agent(engram, "py-example", "And tomorrow?", llm_url=base_url,
                             model="gpt-4o-mini")
        assert seen[2][1]["messages"][-1] == {"role": "user", "content": "And tomorrow?"}
        assert any(m.get("content") == "It is 12 C in Paris." for m in seen[2][1]["messages"])


def test_wrapper_covers_the_api(engramd):
    with EngramClient(engramd) as engram:
        out = engram.ingest("py-api", [user("I like green tea", event_id="e1"),
                                        tool_call("c1", "lookup", {"q": "tea", "n": 2}),
                                        tool_result("c1", {"found": ["sencha"]}, name="lookup"),
                                        assistant("Sencha is green tea.")],
                            usage={"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55},
                            model="gpt-4o-mini")
        assert [t.seq for t in out.traces] == [0, 1, 2, 3]
        again = engram.ingest("py-api", [user("I like green tea", event_id="e1")])
        assert again.traces[0].id == out.traces[0].id, "event_id makes retries idempotent"
        prompt = engram.prepare_request("py-api", model="claude-sonnet-4", render_format="anthropic")
        assert prompt.payload["model"] == "claude-sonnet-4"
        assert prompt.payload["messages"][0]["role"] == "user"
        assert engram.prepare_request("py-api", render_format=None).payload is None
        with pytest.raises(ValueError):
            engram.prepare_request("py-api", render_format="cohere")
        tail = engram.retrieve("py-api", include_tool_interactions=True)
        assert tail.tool_interactions[0].tool_name == "lookup"
        assert engram.fork_agent("py-api", "py-api-copy") == "py-api-copy"
        assert list(engram.list_agents(page_size=1)) == ["py-api", "py-api-copy"]
        engram.delete_agent("py-api-copy")
        assert list(engram.list_agents()) == ["py-api"]
        report = engram.compact("py-api")
        assert not report.performed and "nothing to compact" in report.error
        with pytest.raises(grpc.RpcError) as err:
            engram.ingest("bad id!", [user("x")])
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_tokens_are_sent_and_checked(start_engramd, tmp_path):
    token = "py-team-token-0123456789"
    tokens = tmp_path / "tokens.toml"
    tokens.write_text('[[tokens]]\nname = "py"\ntoken_sha256 = "%s"\nagents = ["py-*"]\n'
                      % hashlib.sha256(token.encode()).hexdigest())
    addr = start_engramd(ENGRAM__AUTH__TOKENS_FILE=str(tokens))
    with EngramClient(addr, token=token) as engram:
        engram.ingest("py-scoped", [user("hi")])
        with pytest.raises(grpc.RpcError) as err:
            engram.ingest("other-agent", [user("hi")])
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        # The generated stub on the client's channel sends the token too.
        assert list(engram.stub.ListAgents(svc.ListAgentsRequest()).agent_ids) == ["py-scoped"]
    for wrong in (None, "not-the-token-at-all"):
        with EngramClient(addr, token=wrong) as engram:
            with pytest.raises(grpc.RpcError) as err:
                engram.ingest("py-scoped", [user("hi")])
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_tls_and_mtls(start_engramd, tmp_path):
    pki = os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts", "test_pki.sh")
    subprocess.run(["bash", pki, str(tmp_path)], check=True)
    cert = {k: str(tmp_path / f) for k, f in
            [("ca", "ca.pem"), ("cert", "server.pem"), ("key", "server.key"),
             ("client_cert", "client.pem"), ("client_key", "client.key")]}
    addr = start_engramd(ENGRAM__SERVER__TLS_CERT=cert["cert"], ENGRAM__SERVER__TLS_KEY=cert["key"],
                         ENGRAM__SERVER__TLS_CLIENT_CA=cert["ca"])
    target = "localhost:" + addr.rsplit(":", 1)[1]
    with EngramClient(target, tls_ca=cert["ca"], client_cert=cert["client_cert"],
                      client_key=cert["client_key"], timeout=10) as engram:
        engram.ingest("py-tls", [user("over mTLS")])
        assert list(engram.list_agents()) == ["py-tls"]
    with EngramClient(target, tls_ca=cert["ca"], timeout=5) as engram:
        with pytest.raises(grpc.RpcError) as err:
            engram.ingest("py-tls", [user("no client certificate")])
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_event_fields_and_search_options_reach_the_server(engramd):
    with EngramClient(engramd) as engram:
        may = 1683532800.0  # 2023-05-08
        out = engram.ingest("py-fields", [
            user("My dog Biscuit loves the beach.", name="Caroline", event_id="f1", ts=may,
                 tags=["pets"], source_event="cli", correlation_id="corr-1",
                 media={"images": ["https://example.com/biscuit.png"]}),
            assistant("Tell me more about Biscuit!", name="Mel", ts=may + 60),
        ])
        first = out.traces[0]
        assert (first.name, first.ts, list(first.tags), first.source_event, first.correlation_id) == \
            ("Caroline", may, ["pets"], "cli", "corr-1")
        assert list(first.media.images) == ["https://example.com/biscuit.png"]
        engram.ingest("py-fields", [user("Any plans for June?", ts=may + 86400 * 30),
                                    assistant("A trip to Oslo.", ts=may + 86400 * 30 + 5)])
        # The participant's name reaches the prompt (OpenAI chat has a field for it).
        body = engram.prepare_request("py-fields", model="gpt-4o").payload
        assert {"role": "user", "name": "Caroline"}.items() <= body["messages"][0].items()

        def matches(**options):
            return engram.search_history("py-fields", "Biscuit", **options).matches

        def contents(**options):
            return [m.trace.content for m in matches(**options)]

        # Exact: every trace with the word, newest first; the filters narrow it.
        assert contents(mode="match-all-words") == ["Tell me more about Biscuit!",
                                                     "My dog Biscuit loves the beach."]
        assert contents(mode="match-all-words", trace_types=["user"]) == ["My dog Biscuit loves the beach."]
        assert contents(mode="match-all-words", from_ts=may + 30) == ["Tell me more about Biscuit!"]
        assert contents(mode="match-all-words", to_ts=may + 30) == ["My dog Biscuit loves the beach."]
        assert contents(mode="match-all-words", from_turn_id="turn_0002") == []
        # Ranked (words, and meaning when the model is there): the filters hold.
        ranked = matches(trace_types=["assistant"], wait_for_index_ms=10000)
        assert ranked[0].trace.content == "Tell me more about Biscuit!"
        assert {m.trace.trace_type for m in ranked} == {types.TRACE_TYPE_ASSISTANT}
        ranked = matches(from_turn_id="turn_0001", to_turn_id="turn_0001", from_ts=may, to_ts=may + 30)
        assert [m.trace.content for m in ranked] == ["My dog Biscuit loves the beach."]
        hit = engram.search_history("py-fields", "beach", trace_types=["user"], context_messages=1,
                                    limit=1).matches[0]
        assert hit.trace.content == "My dog Biscuit loves the beach."
        assert [t.content for t in hit.context_after] == ["Tell me more about Biscuit!"]
        with pytest.raises(ValueError):
            engram.search_history("py-fields", "x", mode="fuzzy")
        with pytest.raises(ValueError):
            engram.search_history("py-fields", "x", trace_types=["system"])

        recalled = engram.retrieve("py-fields", "Biscuit", max_recalled=1, context_messages=1,
                                   wait_for_index_ms=10000).recalled
        assert len(recalled) == 1
        assert recalled[0].context_before or recalled[0].context_after


def test_recall_can_be_switched_and_bounded_per_request(start_engramd):
    # No raw tail: a compaction archives every finished turn, so recall has
    # something to find.
    addr = start_engramd(ENGRAM__POLICY__RAW_TAIL_TURNS="0")
    with EngramClient(addr) as engram:
        engram.ingest("py-recall", [user("My dog is called Biscuit and he loves the beach.", name="Caroline"),
                                    assistant("Biscuit sounds lovely.")])
        engram.ingest("py-recall", [user("I work as a nurse."), assistant("Noted.")])
        report = engram.compact("py-recall")
        assert report.performed
        [logged] = engram.list_compactions("py-recall")
        assert (logged.outcome, logged.report.trigger) == ("summarized", "manual")
        assert logged.report.episodic_id == report.episodic_id
        assert (logged.report.tokens_before, logged.report.tokens_after) == (report.tokens_before, report.tokens_after)
        assert logged.summarizer and logged.at > 0
        on = engram.prepare_request("py-recall", user_input="What is my dog called, Biscuit?",
                                    model="gpt-4o", recall=True)
        assert on.recalled, "recall=True attaches the relevant memories"
        assert "[MEMORY:RECALLED]" in on.payload["messages"][-1]["content"]
        engram.ingest("py-recall", [assistant("Biscuit.")])
        off = engram.prepare_request("py-recall", user_input="And where does Biscuit like to go?",
                                     model="gpt-4o", recall=False)
        assert off.recalled == [] and "[MEMORY:RECALLED]" not in off.payload["messages"][-1]["content"]
        engram.ingest("py-recall", [assistant("The beach.")])
        tiny = engram.prepare_request("py-recall", user_input="Tell me about Biscuit again.",
                                      model="gpt-4o", recall=True, recall_max_tokens=1)
        assert tiny.recalled == [], "nothing fits in one token"


def test_users_blocks_and_working_memory_reach_the_prompt(engramd):
    with EngramClient(engramd) as engram:
        engram.put_block("rules", "Answer in one sentence.", global_scope=True,
                         description="house rules")
        engram.put_block("human", "Name: Ana. Lives in Lisbon.", user_id="ana",
                         description="what we know of the user")
        wm = engram.edit_block("working_memory", agent_id="py-ana-1",
                               json_merge_patch={"files_reviewed": 3}, expected_version=0,
                               agent_user_id="ana")
        assert wm.version == 1 and wm.format == memory.BLOCK_FORMAT_JSON
        prompt = engram.prepare_request("py-ana-1", user_input="Where do I live?",
                                        system_prompt="You are helpful.", model="gpt-4o")
        system = prompt.payload["messages"][0]["content"]
        assert system.startswith("You are helpful.\n\n[MEMORY:BLOCKS]\n## rules (global): house rules")
        assert system.index("## rules") < system.index("## human (user)") < system.index("## working_memory (agent)")
        assert [(b.scope, b.label, b.version) for b in prompt.response.blocks] == [
            ("global", "rules", 1), ("user", "human", 1), ("agent", "working_memory", 1)]
        assert engram.context_stats("py-ana-1").user_id == "ana"

        # A stale version changes nothing; a replace must match once.
        with pytest.raises(grpc.RpcError) as err:
            engram.edit_block("working_memory", agent_id="py-ana-1",
                              json_merge_patch={"files_reviewed": 9}, expected_version=0)
        assert err.value.code() == grpc.StatusCode.ABORTED
        with pytest.raises(grpc.RpcError) as err:
            engram.edit_block("human", user_id="ana", replace=("Paris", "Porto"))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        engram.edit_block("human", user_id="ana", replace=("Lisbon", "Porto"), expected_version=1)
        history = engram.get_block("human", user_id="ana", include_history=True).history
        assert [h.value for h in history] == ["Name: Ana. Lives in Lisbon.", "Name: Ana. Lives in Porto."]

        # The agent's user is fixed: another user's request is refused.
        with pytest.raises(grpc.RpcError) as err:
            engram.ingest("py-ana-1", [user("hi")], user_id="bo")
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert engram.delete_block("rules", global_scope=True) == 2
        assert engram.list_blocks(global_scope=True) == []

        # A user's conversations, listed and erased whole.
        engram.ingest("py-ana-2", [user("hello again")], user_id="ana")
        engram.ingest("py-bo-1", [user("hi")], user_id="bo")
        assert list(engram.list_agents(user_id="ana")) == ["py-ana-1", "py-ana-2"]
        found = engram.search_history("", "hello again", user_id="ana").matches
        assert found[0].agent_id == "py-ana-2" and found[0].trace.content == "hello again"
        assert engram.delete_user("ana") == 2
        assert list(engram.list_agents(user_id="ana")) == []
        assert engram.list_blocks(user_id="ana") == []
        assert engram.delete_user("ana") == 0
        assert list(engram.list_agents()) == ["py-bo-1"]


def test_facts_are_added_corrected_pinned_and_forgotten(engramd):
    with EngramClient(engramd) as engram:
        added = engram.add_memories(
            ["Lives in Oslo", {"text": "Allergic to peanuts", "pinned": True, "tags": ["health"]},
             {"text": "lives in  OSLO", "metadata": {"source": "form"}}],
            agent_id="py-facts")
        assert [a.outcome for a in added] == [
            facts.ADD_OUTCOME_ADDED, facts.ADD_OUTCOME_ADDED, facts.ADD_OUTCOME_MERGED]
        oslo = added[0].id
        assert added[2].id == oslo and added[2].version == 2
        listed = list(engram.list_memories(agent_id="py-facts"))
        assert [m.fact for m in listed] == ["Allergic to peanuts", "Lives in Oslo"], "pinned first"
        assert listed[0].pinned and listed[1].origin == types.MEMORY_ORIGIN_CLIENT
        assert dict(listed[1].metadata) == {"source": "form"}
        assert [m.fact for m in engram.list_memories(agent_id="py-facts", tags=["health"])] == [
            "Allergic to peanuts"]

        # The prompt shows them at once; a correction replaces the old text.
        engram.update_memory(oslo, agent_id="py-facts", text="Lives in Berlin", expected_version=2)
        with pytest.raises(grpc.RpcError) as err:
            engram.update_memory(oslo, agent_id="py-facts", text="Lives in Rome", expected_version=2)
        assert err.value.code() == grpc.StatusCode.ABORTED
        prompt = json.dumps(engram.prepare_request("py-facts", user_input="Where do I live?",
                                                   model="gpt-4o").payload)
        assert "Lives in Berlin" in prompt and "Allergic to peanuts" in prompt
        assert "Oslo" not in prompt
        history = engram.memory_history(oslo, agent_id="py-facts")
        assert [(h.version, h.fact) for h in history] == [
            (1, "Lives in Oslo"), (2, "Lives in Oslo"), (3, "Lives in Berlin")]

        # A delete leaves the id and the time, no text; search finds nothing.
        assert engram.delete_memory(oslo, agent_id="py-facts") == 4
        with pytest.raises(grpc.RpcError) as err:
            engram.get_memory(oslo, agent_id="py-facts")
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        history = engram.memory_history(oslo, agent_id="py-facts")
        assert all(h.fact == "" for h in history) and history[-1].HasField("deleted_at")
        prompt = json.dumps(engram.prepare_request("py-facts", model="gpt-4o").payload)
        assert "Berlin" not in prompt
        assert "Berlin" not in str(engram.retrieve("py-facts", "Berlin"))
        with pytest.raises(grpc.RpcError) as err:
            engram.add_memories(["   "], agent_id="py-facts")
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT

        # Expired: in no prompt, no Retrieve, no listing (unless asked for).
        engram.add_memories([{"text": "Is in a meeting", "expires_at": 1.0}], agent_id="py-facts")
        assert "meeting" not in str(engram.retrieve("py-facts"))
        assert "meeting" not in str(engram.retrieve("py-facts", "meeting"))
        prompt = json.dumps(engram.prepare_request("py-facts", model="gpt-4o").payload)
        assert "meeting" not in prompt
        assert [m.fact for m in engram.list_memories(agent_id="py-facts")] == ["Allergic to peanuts"]
        expired = engram.list_memories(agent_id="py-facts", include_expired=True)
        assert "Is in a meeting" in [m.fact for m in expired]

        # A user's facts: pinned ones in every conversation of the user.
        pinned = engram.add_memories([{"text": "Speaks Portuguese", "pinned": True}], user_id="py-rui")
        prompt = engram.prepare_request("py-rui-1", user_input=user("hi"), model="gpt-4o", user_id="py-rui")
        system = prompt.payload["messages"][0]["content"]
        assert "## pinned facts (user)" in system and ") Speaks Portuguese" in system
        assert engram.get_memory(pinned[0].id, user_id="py-rui").pinned
        engram.delete_memory(pinned[0].id, user_id="py-rui")
        assert list(engram.list_memories(user_id="py-rui")) == []

        # A turn forgotten: its words are found nowhere, the rest stays.
        engram.ingest("py-forget", [user("My pin is 4417-zz"), assistant("Noted 4417-zz")])
        engram.ingest("py-forget", [user("I like tea"), assistant("Tea it is")])
        forgotten = engram.forget_turn("py-forget", "turn_0001")
        assert forgotten.traces_erased == 2
        assert "4417-zz" not in str(engram.search_history("py-forget", "4417-zz"))
        prompt = json.dumps(engram.prepare_request("py-forget", model="gpt-4o").payload)
        assert "4417-zz" not in prompt and "I like tea" in prompt
        assert engram.forget_events("py-forget", ["nothing"]).traces_erased == 0


def test_a_users_facts_are_consolidated_across_conversations(start_engramd):
    # Facts said in other words merge by meaning: the local model must be there.
    model = os.path.join(os.path.dirname(__file__), "..", "..", "..", "models", "all-MiniLM-L6-v2")
    assert os.path.isfile(os.path.join(model, "model.safetensors")), \
        f"{model} is missing: `make models` installs the local model"
    # A raw tail of one turn: the compaction folds the turn that said it.
    addr = start_engramd(ENGRAM__EMBED__MODEL_DIR=os.path.abspath(model),
                         ENGRAM__POLICY__RAW_TAIL_TURNS="1")
    with EngramClient(addr) as engram:
        # Two conversations of one user, each saying the same in other words.
        for agent, said in (("py-curl-1", "I play curling."),
                            ("py-curl-2", "I enjoy playing curling.")):
            engram.ingest(agent, [user(said), assistant("Noted.")], user_id="py-cu")
            engram.ingest(agent, [user("Thanks, that is all."), assistant("You are welcome.")])
            engram.ingest(agent, [user("Bye."), assistant("You are welcome.")])
            assert engram.compact(agent).performed
        before = list(engram.list_memories(user_id="py-cu", query="curling"))
        assert len(before) == 2, [m.fact for m in before]

        run = engram.consolidate_user("py-cu")
        assert (run.seq, run.trigger) == (1, "request")
        assert run.merged >= 1, run
        # The embedded summarizer (no LLM configured) decides no replacement.
        assert (run.groups_asked, run.replaced, run.summarizer) == (0, 0, ""), run
        assert run.at > 0 and not run.error
        merged = [c for c in run.changes if c.kind == "merged"]
        assert len(merged) == run.merged, run.changes

        # One fact left, every conversation that said it kept.
        [kept] = engram.list_memories(user_id="py-cu", query="curling")
        assert kept.id in {c.by_fact_id for c in merged}
        assert sorted(s.agent_id for s in kept.sources) == ["py-curl-1", "py-curl-2"]
        assert [r.seq for r in engram.list_consolidations("py-cu")] == [1]
        [logged] = engram.list_consolidations("py-cu", page_size=1)
        assert (logged.seq, logged.merged, logged.trigger) == (1, run.merged, "request")

        # A user with no facts: nothing to do, nothing logged.
        assert engram.consolidate_user("py-nobody").seq == 0
        assert engram.list_consolidations("py-nobody") == []
        with pytest.raises(grpc.RpcError) as err:
            engram.consolidate_user("")
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
