#!/usr/bin/env python3
"""Validates many rendered payloads in one process.

stdin: one JSON object per line, {"name": ..., "format": ..., "payload": {...}}
with format one of openai-chat, openai-responses, anthropic-messages, gemini.
stdout: one line per invalid payload. Warnings count as errors (--strict):
Engram's payloads must be clean, not merely accepted.
Exit 0 when all are valid, 1 otherwise, 2 when jsonschema is missing.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "third_party", "provider-schemas"))

try:
    import validate  # noqa: E402
except ImportError as e:  # jsonschema missing
    print(f"cannot import the validator ({e}); run `make venv` and use .venv/bin/python", file=sys.stderr)
    sys.exit(2)


def main():
    bad = 0
    total = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        item = json.loads(line)
        total += 1
        errors, warnings = validate.validate(item["format"], item["payload"])
        problems = errors + warnings
        if problems:
            bad += 1
            for path, msg, kind in problems:
                print(f"{item['name']} ({item['format']}): [{kind}] {path}: {msg}")
    print(f"validated {total} payloads, {bad} invalid", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
