#!/usr/bin/env bash
# Prints the path of a Chromium for the console's browser test, installing
# Debian's `chromium` package first when there is none (as scripts/pg.sh
# does for PostgreSQL). Playwright drives it with `executable_path`: no
# browser is ever downloaded from elsewhere. ENGRAM_CHROMIUM names another.
set -euo pipefail

if [[ -n "${ENGRAM_CHROMIUM:-}" ]]; then
    echo "$ENGRAM_CHROMIUM"
    exit 0
fi
found=$(command -v chromium || true)
if [[ -z "$found" ]]; then
    echo "Chromium not found: installing Debian's chromium package" >&2
    sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends chromium >&2 ||
        { $sudo apt-get update -q >&2 &&
            DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends chromium >&2; }
    found=$(command -v chromium)
fi
echo "$found"
