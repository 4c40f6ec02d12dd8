#!/usr/bin/env bash
# gen_config_docs.sh — rewrite the key table in docs/config.md from `carousel train --help-keys`
# (tests/run/test_config.cpp fails when a key is missing from the doc).
set -euo pipefail
cd "$(dirname "$0")/.."
table=$(build/bin/carousel train --help-keys)
python3 - "$table" <<'PY'
import re, sys
path = "docs/config.md"
doc = open(path).read()
doc = re.sub(r"```\n.*?```", lambda m: "```\n" + sys.argv[1] + "\n```", doc, count=1, flags=re.S)
open(path, "w").write(doc)
PY
echo "docs/config.md updated"
