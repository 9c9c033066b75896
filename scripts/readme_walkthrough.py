#!/usr/bin/env python3
"""Runs the README's grpcurl walkthrough against the real engramd.

The commands between `<!-- walkthrough:start -->` and `<!-- walkthrough:end -->`
are run in order, verbatim except that the documented address 127.0.0.1:50051
becomes the port-0 address of a fresh server on a temp data dir. Each block
gets its own server; `<!-- walkthrough:start KEY=VALUE ... -->` adds server
environment (relative paths are taken from the repository root). A comment line
`# expect: TEXT` after a command asserts its output contains TEXT;
`# expect-error: TEXT` asserts the command fails and says TEXT.

usage: readme_walkthrough.py README.md path/to/engramd
"""

import os
import re
import subprocess
import sys
import tempfile

DOC_ADDR = "127.0.0.1:50051"


def walkthroughs(readme):
    """[(server env, steps), ...], one per walkthrough block."""
    text = open(readme, encoding="utf-8").read()
    found = re.findall(r"<!-- walkthrough:start ?(.*?) ?-->(.*?)<!-- walkthrough:end -->", text, re.S)
    if not found:
        sys.exit("README has no walkthrough block")
    root = os.path.dirname(os.path.abspath(readme))
    out = []
    for settings, body in found:
        env = {}
        for pair in settings.split():
            key, value = pair.split("=", 1)
            env[key] = os.path.join(root, value) if os.path.exists(os.path.join(root, value)) else value
        out.append((env, steps(body)))
    return out


def steps(section):
    """[(command, [(kind, text), ...]), ...] from a walkthrough's sh blocks."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.strip()
            for kind, marker in (("ok", "# expect:"), ("err", "# expect-error:")):
                if line.startswith(marker):
                    out[-1][1].append((kind, line[len(marker):].strip()))
            if line and not line.startswith("#"):
                out.append((line, []))
    return out


def main():
    readme, engramd = sys.argv[1], sys.argv[2]
    total = 0
    for server_env, cmds in walkthroughs(readme):
        if not cmds:
            sys.exit("a walkthrough block has no commands")
        run_block(engramd, server_env, cmds)
        total += len(cmds)
    print(f"walkthrough: {total} commands ok")


def run_block(engramd, server_env, cmds):
    with tempfile.TemporaryDirectory() as data:
        env = dict(os.environ,
                   ENGRAM__SERVER__LISTEN="127.0.0.1:0",
                   ENGRAM__STORE__DATA_DIR=data,
                   ENGRAM__LOG__LEVEL="warn",
                   **server_env)
        server = subprocess.Popen([engramd], env=env, stdout=subprocess.PIPE, text=True)
        try:
            first = server.stdout.readline().strip()
            prefix = "engramd listening on "
            if not first.startswith(prefix):
                sys.exit(f"engramd did not start: {first!r}")
            addr = first[len(prefix):]
            for i, (cmd, expects) in enumerate(cmds, 1):
                run = cmd.replace(DOC_ADDR, addr)
                p = subprocess.run(["bash", "-c", run], capture_output=True, text=True, timeout=60)
                output = p.stdout + p.stderr
                wants_error = any(kind == "err" for kind, _ in expects)
                if (p.returncode != 0) != wants_error:
                    sys.exit(f"step {i} exit {p.returncode}: {cmd}\n{output}")
                for _, text in expects:
                    if text not in output:
                        sys.exit(f"step {i} output lacks {text!r}: {cmd}\n{output}")
                print(f"ok {i}: {cmd[:90]}")
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
