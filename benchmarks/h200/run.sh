#!/usr/bin/env bash
# On the H200 machine, from the repository root (docs/real-gpu.md). Stage "a": draftbench runs the
# baseline, EAGLE3 and the wrong-flag EAGLE variant on real SGLang and keeps their servers; stage "b":
# bench_serving on the same servers, the extra captures, then every kept server is stopped.
set -uo pipefail
STAGE=${1:?a|b|ab}
source .devbundle/dev_setup.sh >/dev/null || exit 3
python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/dbsite .whl/*.whl || exit 3
DB="env PYTHONPATH=$PWD:/tmp/dbsite:/tmp/site python3"
W=${WORK:-/tmp/dbwork}
OUT=${OUT:-./out}; mkdir -p "$OUT"
if [ "$STAGE" != b ]; then
  $DB benchmarks/h200/make_plan.py "$W" || exit 3
  $DB -m harness.cli run "$W/plan.yaml" --results-dir "$W/results" --keep-servers 2>&1 | tee "$OUT/draftbench-run.log"
  [ "$STAGE" = a ] && exit 0
fi
# bench_serving imports every dataset module; the MMMU one needs HF `datasets`, which this machine lacks and
# the custom dataset never uses: give it an import-only stand-in that fails if it is ever called.
mkdir -p /tmp/stub/datasets
echo 'def load_dataset(*a, **k): raise RuntimeError("datasets is not installed here")' > /tmp/stub/datasets/__init__.py
RUN=$(ls -d "$W"/results/*/ | tail -1)
MODEL=$PWD/.devbundle/models/target
for v in baseline eagle3; do
  PORT=$(python3 -c "import json,sys; print([json.loads(l) for l in open('$RUN/servers.jsonl') if '\"port\"' in l and json.loads(l)['variant']=='$v'][-1]['port'])")
  env PYTHONPATH=/tmp/site:/tmp/stub timeout 200 python3 -m sglang.bench_serving --backend sglang-oai-chat --host 127.0.0.1 \
      --port "$PORT" --dataset-name custom --dataset-path "$W/h200.jsonl" --num-prompts 38 --sharegpt-output-len 128 \
      --max-concurrency 8 --model "$MODEL" --tokenizer "$MODEL" --warmup-requests 2 --flush-cache \
      --output-file "$OUT/bench_serving-$v.jsonl" 2>&1 | tail -40 | tee "$OUT/bench_serving-$v.txt"
  [ "$v" = eagle3 ] && $DB benchmarks/h200/capture.py "$PORT" "$OUT/sse-extra-$v.txt"
done
for pg in $(python3 -c "import json; print(' '.join(str(json.loads(l)['pgid']) for l in open('$RUN/servers.jsonl') if 'argv' in l))"); do
  kill -TERM -- -"$pg" 2>/dev/null
done
sleep 8
for pg in $(python3 -c "import json; print(' '.join(str(json.loads(l)['pgid']) for l in open('$RUN/servers.jsonl') if 'argv' in l))"); do
  kill -KILL -- -"$pg" 2>/dev/null
done
$DB benchmarks/h200/compare.py "$RUN" "$OUT" | tee "$OUT/compare.md"
tar -czf "$OUT/run.tar.gz" -C "$(dirname "$RUN")" "$(basename "$RUN")"
ls -la "$OUT"
