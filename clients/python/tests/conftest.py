"""A real engramd per test (ENGRAMD names the binary; default
target/debug/engramd of this checkout) and a scripted OpenAI-compatible
endpoint standing in for the model."""

import contextlib
import json
import os
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


class _Servers:
    """Real engramd processes on 127.0.0.1:0, each on a fresh data dir,
    stopped with SIGTERM at the end (and each must drain and exit 0)."""

    def __init__(self):
        self.procs, self.dirs = [], []

    def start(self, http, env):
        """(gRPC address, HTTP base URL or None)."""
        binary = os.environ.get("ENGRAMD", os.path.join(ROOT, "target", "debug", "engramd"))
        data = tempfile.TemporaryDirectory()
        self.dirs.append(data)
        # Tests share the machine with other processes, which idle priority
        # would let starve the indexer.
        full = dict(os.environ, ENGRAM__SERVER__LISTEN="127.0.0.1:0",
                    ENGRAM__STORE__DATA_DIR=data.name, ENGRAM__LOG__LEVEL="warn",
                    ENGRAM__EMBED__BACKGROUND_PRIORITY="normal")
        full.update(env)
        if http:
            full["ENGRAM__HTTP__LISTEN"] = "127.0.0.1:0"
        proc = subprocess.Popen([binary], env=full, stdout=subprocess.PIPE, text=True)
        self.procs.append(proc)
        # The first line names the gRPC listener; the HTTP one's follows.
        line = proc.stdout.readline().strip()
        prefix = "engramd listening on "
        assert line.startswith(prefix), f"engramd did not start: {line!r}"
        grpc, base = line[len(prefix):], None
        while http and base is None:
            line = proc.stdout.readline().strip()
            assert line, "engramd stopped before saying where its HTTP listener is"
            if line.startswith("engramd http on "):
                base = "http://" + line[len("engramd http on "):]
        return grpc, base

    def stop(self):
        for proc in self.procs:
            proc.terminate()
            assert proc.wait(timeout=30) == 0, "engramd drains and exits 0 on SIGTERM"
        for d in self.dirs:
            d.cleanup()


@pytest.fixture
def start_engramd():
    """Starts engramd with extra ENGRAM__ env; returns its gRPC address."""
    servers = _Servers()
    yield lambda **env: servers.start(False, env)[0]
    servers.stop()


@pytest.fixture
def start_engramd_http():
    """Starts engramd with its HTTP listener too, with extra ENGRAM__ env;
    returns (gRPC address, HTTP base URL)."""
    servers = _Servers()
    yield lambda **env: servers.start(True, env)
    servers.stop()


@pytest.fixture
def engramd(start_engramd):
    return start_engramd()


@contextlib.contextmanager
def json_server(answer):
    """A local HTTP server that answers each POSTed JSON body with
    `answer(path, body)` as JSON: the stand-in for a provider's API.
    Yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            raw = json.dumps(answer(self.path, body)).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.fixture
def fake_llm():
    """An OpenAI-compatible /v1/chat/completions: asks for get_weather on a
    fresh user question, answers from the tool result once it has one.
    Yields (base_url, requests seen)."""
    seen = []

    def answer(path, body):
        seen.append((path, body))
        last = body["messages"][-1]
        if last["role"] == "tool":
            weather = json.loads(last["content"])
            message = {"role": "assistant",
                       "content": f"It is {weather['temp_c']} C in {weather['city']}."}
        else:
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{len(seen)}", "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]}
        return {"id": "x", "object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100 + len(seen), "completion_tokens": 10,
                          "total_tokens": 110 + len(seen)}}

    with json_server(answer) as base:
        yield f"{base}/v1", seen
