"""Fails on a dead relative link in the project's Markdown: a link to a file
that is not there, or to a heading (#anchor) the file does not have.

Anchors are GitHub's: a heading's text lowercased, punctuation but `-` and
`_` dropped, spaces made `-`, and `-1`, `-2`, ... for repeats. Headings in
code blocks do not count. Links with a scheme (https:, mailto:) are not
fetched: only what ships in the checkout is checked.

usage: check_links.py FILE_OR_DIR ...
"""

import os
import re
import sys

LINK = re.compile(r"\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~)")


def markdown_files(paths):
    for path in paths:
        if os.path.isdir(path):
            for base, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d not in ("node_modules", ".git"))
                for name in sorted(files):
                    if name.endswith(".md"):
                        yield os.path.join(base, name)
        else:
            yield path


def outside_code(text):
    """The text's lines outside fenced code blocks, with their numbers."""
    fenced = False
    for number, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def anchors(path, cache={}):
    if path not in cache:
        seen, out = {}, set()
        text = open(path, encoding="utf-8").read()
        for _, line in outside_code(text):
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
        for m in re.finditer(r"<a\s+(?:name|id)=\"([^\"]+)\"", text):
            out.add(m.group(1))
        cache[path] = out
    return cache[path]


def check(path):
    dead = []
    text = open(path, encoding="utf-8").read()
    for number, line in outside_code(text):
        # Inline code is not a link.
        line = re.sub(r"`[^`]*`", "", line)
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue
            file, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if not os.path.exists(resolved):
                dead.append(f"{path}:{number}: {target}: no such file")
                continue
            if anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                dead.append(f"{path}:{number}: {target}: no heading #{anchor} in {resolved}")
    return dead


def main():
    files = list(markdown_files(sys.argv[1:] or ["."]))
    dead = [d for f in files for d in check(f)]
    for d in dead:
        print(d)
    if dead:
        sys.exit(f"check_links: {len(dead)} dead links in {len(files)} files")
    print(f"check_links: every relative link of {len(files)} files resolves")


if __name__ == "__main__":
    main()
