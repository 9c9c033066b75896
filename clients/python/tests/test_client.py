"""EngramClient and the example agent loop against the real engramd."""

import hashlib
import os
import subprocess
import sys

import grpc
import pytest

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
