#!/usr/bin/env bash
# Measures the rows of docs/results.md's "On a GPU" on this machine, each with the project's own command.
#   scripts/bench_gpu.sh [api] [index] [train]     (default: all three, in that order)
# api:   `qa-system bench api` at CLIENTS clients with PROCESSES server processes, for each of MODEL_SERVER ["1 0"]:
#        their models in one model server (1, the default) or each process's own (0); where the processes do not all
#        become ready, the same with one process, so that a run still measures something. Beside each report: the GPU
#        and the busiest processes every 15 s (monitor.log), and where py-spy is installed, 20 s of its stacks of the
#        model server and of one server process under the last client count's load (py-spy-*.txt).
# index: `qa-system bench ingest` of REVIEWS generated reviews, embedded on the device.
# train: `qa-system train-reader`'s general stage on TRAIN_FILES, 2 epochs, batch 128.
# Environment (defaults in brackets): DEVICE [cuda], OUT, where reports and a log go [reports/gpu], PROCESSES [12],
# QA_API_WORKERS, each process's worker threads [6: 72 in all, so that 64 clients settle one per thread],
# CLIENTS ["1 8 64"], LOAD_SECONDS, each client count's load [60], API_LIMIT and FALLBACK_LIMIT, the seconds that
# the api row's first run and its one-process run may take [300, 240], REVIEWS [100000], TRAIN_FILES [the 8 QA
# files of SHARED_DATA, ../shared/data], PYTHON [python3], and QA_* settings (QA_DATA_DIR: where SubjQA is).
# An offline machine: wheels that scripts/offline_wheels.sh put in WHEELS [.whl] are installed first (into /tmp/site), and
# where the all-MiniLM-L6-v2 weights are missing, a stand-in of its architecture is put in a hub cache of the run's own
# (build_stand_in; STAND_IN_CACHE [/tmp/qa-stand-in-hub]): it runs as fast as the real one, but its embeddings mean
# nothing, so it serves timings alone.
set -uo pipefail
cd "$(dirname "$0")/.."
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(api index train)
for row in "${rows[@]}"; do
  case "$row" in
    api | index | train) ;;
    *) echo "error: unknown row '$row'. Fix: name api, index or train (or none for all three)." >&2; exit 2 ;;
  esac
done
device=${DEVICE:-cuda}
out=$(mkdir -p "${OUT:-reports/gpu}" && cd "${OUT:-reports/gpu}" && pwd)
python=${PYTHON:-python3}
log="$out/run.log"
exec > >(tee -a "$log") 2>&1
export PYTHONUNBUFFERED=1 HAYSTACK_TELEMETRY_ENABLED=False TOKENIZERS_PARALLELISM=true

wheels=${WHEELS:-.whl}
if ls "$wheels"/*.whl >/dev/null 2>&1; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl || exit 1
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # qa_system from this checkout
qa=("$python" -c 'import sys; from qa_system.cli import main; sys.exit(main())')

# all-MiniLM-L6-v2's architecture (BERT, 6 layers of 384, mean pooling) from the shipped reader's encoder, under the
# hub id that the dense retriever and the answer selector's phrase encoder load, where neither the model's package nor
# a cached copy has it: in a hub cache of the run's own (STAND_IN_CACHE), never the user's, whose later runs would read
# the stand-in as the real model. Prints that cache's path when there is one.
build_stand_in() {
  STAND_IN_CACHE=${STAND_IN_CACHE:-/tmp/qa-stand-in-hub} "$python" - <<'EOF'
import os
import sys
from pathlib import Path
from huggingface_hub import try_to_load_from_cache
from qa_system.config import HUB_EMBEDDING_MODEL, default_embedding_model
if default_embedding_model() == HUB_EMBEDDING_MODEL and not isinstance(try_to_load_from_cache(HUB_EMBEDDING_MODEL, "modules.json"), str):
    from sentence_transformers import SentenceTransformer, models
    cache = Path(os.environ["STAND_IN_CACHE"])
    repo = cache / ("models--" + HUB_EMBEDDING_MODEL.replace("/", "--"))
    revision = "0" * 40
    if not (repo / "snapshots" / revision / "modules.json").exists():
        import torch

        word = models.Transformer("models/reader-minilm-subjqa", max_seq_length=256)
        word.auto_model.config.dtype = torch.float32  # as all-MiniLM-L6-v2 ships (the reader's file is 16-bit)
        pooling = models.Pooling(word.auto_model.config.hidden_size, "mean")
        SentenceTransformer(modules=[word, pooling, models.Normalize()]).float().save(str(repo / "snapshots" / revision))
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(revision)
    print(f"all-MiniLM-L6-v2 is not installed: a stand-in of its architecture (timings only) in {repo}", file=sys.stderr)
    print(cache)
EOF
}

echo "== $(date -u +%FT%TZ) device $device, rows ${rows[*]}"
nvidia-smi --query-gpu=name,compute_mode,memory.used,memory.total --format=csv 2>/dev/null || echo "no nvidia-smi"
"$python" -c 'import torch, transformers, os; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__, "cpus", os.cpu_count())'
stand_in=$(build_stand_in) || exit 1
[ -z "$stand_in" ] || export HF_HUB_CACHE="$stand_in"
export HF_HUB_OFFLINE=1

# Once the last client count's load has run for 15 s (the log from line $2 on says when it starts), 20 s of py-spy on
# the model server (its busy threads, and apart the thread that holds the GIL) and on one server process, as raw stacks
# in $1/py-spy-*.txt: which functions hold their time. Where py-spy is missing or may not attach, a line in its .log.
profile_load() {
  local dir=$1 from=$2 spy last supervisor server model_server
  spy=$(command -v py-spy || echo /tmp/site/bin/py-spy)
  [ -x "$spy" ] || { echo "no py-spy: no profiles" >"$dir/py-spy.log"; return 0; }
  last=${CLIENTS:-1 8 64}
  last=${last##* }
  until tail -n +"$from" "$log" | grep -q "^$last clients for"; do sleep 2; done
  sleep 15
  supervisor=$(pgrep -f -- "api --host 127.0.0.1 --port" | head -n 1)
  [ -n "$supervisor" ] || return 0
  model_server=$(pgrep -P "$supervisor" -f "qa_system.serving.model_server" | head -n 1)
  server=$(pgrep -P "$supervisor" -f spawn_main | head -n 1)
  record() {  # name pid [py-spy options]
    "$spy" record --pid "$2" --duration 20 --rate 100 --nonblocking --threads --format raw --output "$dir/py-spy-$1.txt" "${@:3}" \
      >"$dir/py-spy-$1.log" 2>&1 &
  }
  record api "${server:-$supervisor}"
  [ -z "$model_server" ] || { record model-server "$model_server"; record model-server-gil "$model_server" --gil; }
  wait
}

api_row() {
  local processes=$1 limit=$2 model_server=$3 name="api-$1"
  [ "$model_server" = 1 ] || name="$name-own-models"
  echo "== api: ${CLIENTS:-1 8 64} clients, $processes process(es) of ${QA_API_WORKERS:-6} workers, model server $model_server, ${LOAD_SECONDS:-60} s each (at most $limit s)"
  # What the GPU and the cores do meanwhile, every 15 s: whether the GPU, the server processes or the clients set the pace.
  mkdir -p "$out/$name"
  (while sleep 15; do
    date -u +%T
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null
    top -b -n 1 -w 160 | sed -n '1,5p;7,24p'
  done >"$out/$name/monitor.log" 2>&1) &
  local monitor=$!
  profile_load "$out/$name" "$(($(wc -l <"$log") + 1))" &
  local profiler=$!
  QA_API_MODEL_SERVER=$model_server QA_API_WORKERS=${QA_API_WORKERS:-6} timeout "$limit" "${qa[@]}" bench api --device "$device" --domain electronics --clients ${CLIENTS:-1 8 64} --seconds "${LOAD_SECONDS:-60}" \
    --processes "$processes" --out "$out/$name"
  local status=$?
  kill "$monitor" "$profiler" 2>/dev/null
  # The server's log can be long: its start and its end say how it loaded and how it ended, the model server's lines
  # how busy each of its lanes was.
  for server_log in "$out/$name"/server-*.log; do
    [ -f "$server_log" ] || continue
    { head -n 60 "$server_log"; echo "[...]"; grep -a "^model server: " "$server_log" | tail -n 40; echo "[...]"; tail -n 40 "$server_log"; } \
      >"$server_log.part" && mv "$server_log.part" "$server_log"
  done
  rm -f "$out/$name"/report.csv "$out/$name"/report.md "$out/$name"/over_time.png  # report.json holds it all
  return $status
}

for row in "${rows[@]}"; do
  case "$row" in
    api)
      processes=${PROCESSES:-12}
      for model_server in ${MODEL_SERVER:-1 0}; do
        api_row "$processes" "${API_LIMIT:-300}" "$model_server" || { [ "$processes" -gt 1 ] && api_row 1 "${FALLBACK_LIMIT:-240}" "$model_server"; }
      done
      ;;
    index)
      echo "== index: ${REVIEWS:-100000} reviews with embeddings"
      timeout 600 "${qa[@]}" bench ingest --device "$device" --embedding-backend torch --rows "${REVIEWS:-100000}" \
        --embed-rows "${REVIEWS:-100000}" --out "$out/index"
      rm -f "$out/index"/report.csv "$out/index"/reviews-*  # the generated reviews
      ;;
    train)
      data=${SHARED_DATA:-../shared/data}
      read -r -a files <<<"${TRAIN_FILES:-$(ls "$data"/squad/*.json "$data"/squadshifts/*.json "$data"/mrqa/*.jsonl | tr '\n' ' ')}"
      echo "== train: general stage on ${#files[@]} files"
      "${qa[@]}" export-squad --domain electronics --split dev --out /tmp/subjqa-squad >/dev/null || exit 1
      time timeout 600 "${qa[@]}" train-reader --no-subjqa --train-file "${files[@]}" --dev-file /tmp/subjqa-squad/electronics-dev.json \
        --base-model models/reader-minilm-subjqa --epochs 2 --batch-size 128 --max-seq-length 384 --doc-stride 128 \
        --device "$device" --checkpoint-steps 100000 --output /tmp/general-reader
      ;;
  esac
done
echo "== $(date -u +%FT%TZ) done"
