#!/usr/bin/env bash
# The suite on the lowest versions pyproject.toml allows for the runtime dependencies (and the
# cli/memory extras): a fresh venv, those versions pinned, the package, then the tests on
# fakeredis and a real Redis (the backends the bounds are about). Usage:
#   bash tools/lowest_deps.sh [pytest args...]     # default: -m "fake or redis" -q -x
# Needs the package index (PyPI); takes a few minutes. Exit status: pytest's.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${LOWEST_VENV:-/tmp/redis-session-lowest}"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
# The lower bounds of [project] dependencies and the cli/memory extras, as pins.
python3 - > "$venv/lowest.txt" <<'PY'
import re, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
for spec in project["dependencies"] + extras["cli"] + extras["memory"]:
    name, low = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?>=([^,;\s]+)", spec).groups()
    print(f"{name}=={low}")
PY
cat "$venv/lowest.txt"
"$venv/bin/python" -m pip install -q -c "$venv/lowest.txt" -e '.[cli,memory]' \
  pytest pytest-asyncio pytest-timeout pytest-xdist hypothesis pyyaml build hatchling opentelemetry-sdk
if [ "$#" -eq 0 ]; then set -- -m "fake or redis" -q -x; fi
PIP_CONSTRAINT="$venv/lowest.txt" "$venv/bin/python" -m pytest -p no:cacheprovider \
  --ignore=tests/integrations --ignore=tests/packaging "$@"
