#!/usr/bin/env python3
"""Runs the README's grpcurl walkthrough against the real engramd.

The commands between `<!-- walkthrough:start -->` and `<!-- walkthrough:end -->`
are run in order, verbatim except that the documented address 127.0.0.1:50051
becomes the port-0 address of a fresh server on a temp data dir. A comment line
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


def steps(readme):
    """[(command, [(kind, text), ...]), ...] from the walkthrough's sh blocks."""
    text = open(readme, encoding="utf-8").read()
    m = re.search(r"<!-- walkthrough:start -->(.*?)<!-- walkthrough:end -->", text, re.S)
    if not m:
        sys.exit("README has no walkthrough block")
    out = []
    for block in re.findall(r"```sh\n(.*?)```", m.group(1), re.S):
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
    cmds = steps(readme)
    if not cmds:
        sys.exit("walkthrough has no commands")
    with tempfile.TemporaryDirectory() as data:
        env = dict(os.environ,
                   ENGRAM__SERVER__LISTEN="127.0.0.1:0",
                   ENGRAM__STORE__DATA_DIR=data,
                   ENGRAM__LOG__LEVEL="warn")
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
    print(f"walkthrough: {len(cmds)} commands ok")


if __name__ == "__main__":
    main()
