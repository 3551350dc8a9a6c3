#!/usr/bin/env bash
# On the H200 machine, from the repository root: real acceptance with a trained EAGLE-3 head
# (docs/real-gpu.md, "Real acceptance"). Stage "prep": train a tiny byte-level target on the Python
# standard library (tiny_target.py), regenerate its answers through real SGLang (`draftbench regen`),
# train an EAGLE-3 head on them (`draftbench train` launching specforge_tiny under torchrun). Stage
# "bench": `draftbench check`, then `draftbench run` (baseline, EAGLE3, the wrong flag) keeping the
# servers, bench_serving on the same servers, and everything brought back under $OUT.
#   bash benchmarks/h200/accept.sh prep|bench|all     (state in $WORK, default /tmp/tiny)
set -uo pipefail
STAGE=${1:?prep|bench|all}
source .devbundle/dev_setup.sh >/dev/null || exit 3
python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/dbsite .whl/*.whl || exit 3
DB="env PYTHONPATH=$PWD:/tmp/dbsite:/tmp/site python3"
W=${WORK:-/tmp/tiny}; OUT=${OUT:-./out}; mkdir -p "$OUT" "$W"
T0=$(date +%s)
stamp() { echo "[accept.sh $STAGE +$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/timeline.txt"; }
if [ "$STAGE" != bench ]; then
  stamp "train the tiny target"
  env PYTHONPATH=/tmp/site python3 benchmarks/h200/tiny_target.py "$W" --tokenizer .devbundle/models/target \
      --steps "${TARGET_STEPS:-1500}" --max-seconds "${TARGET_S:-60}" --regen-rows "${REGEN_ROWS:-1024}" \
      --suite-prompts "${SUITE_PROMPTS:-24}" 2>&1 | tee "$OUT/target.log"
  [ -f "$W/tiny-stdlib/model.safetensors" ] || exit 4
  $DB benchmarks/h200/make_plan.py --tiny "$W" || exit 3
  stamp "regenerate the training data through the target (draftbench regen)"
  $DB -m harness.cli regen "$W/plan.yaml" --input "$W/regen-in.jsonl" --output "$W/regen.jsonl" --temperature 0 \
      --max-tokens "${REGEN_TOKENS:-256}" --concurrency 64 --results-dir "$W/results" 2>&1 | tail -25 | tee "$OUT/regen.log"
  stamp "train the EAGLE-3 head (draftbench train)"
  $DB -m harness.cli train "$W/plan.yaml" --data "$W/regen.jsonl" --output-dir "$W/ckpt" \
      --specforge-dir "$PWD/benchmarks/h200/specforge_tiny" --epochs 1000 --max-steps "${DRAFT_STEPS:-800}" \
      --batch-size 32 --lr 1e-3 --ttt-length "${TTT_LENGTH:-3}" --max-length 1024 --log-interval 100 --env PYTHONPATH=/tmp/site \
      --follow --results-dir "$W/results" 2>&1 | tail -40 | tee "$OUT/train.log"
  CKPT=$(ls -d "$W"/ckpt/epoch_* 2>/dev/null | sort -V | tail -1)
  [ -n "$CKPT" ] || exit 5
  ln -sfn "$CKPT" "$W/draft"
  cp "$W/draft/config.json" "$OUT/draft-config.json"
  stamp "prep done: $CKPT"
fi
if [ "$STAGE" != prep ]; then
  [ -e "$W/draft/model.safetensors" ] || { echo "no trained drafter in $W (run the prep stage first)"; exit 6; }
  stamp "preflight (draftbench check)"
  $DB -m harness.cli check "$W/plan.yaml" > "$OUT/check.txt" 2>&1 &
  CHECK=$!
  stamp "draftbench run"
  $DB -m harness.cli run "$W/plan.yaml" --results-dir "$W/runs" --keep-servers 2>&1 | tee "$OUT/draftbench-run.log"
  wait $CHECK; cat "$OUT/check.txt"
  RUN=$(ls -d "$W"/runs/*/ | tail -1)
  stamp "bench_serving on the same servers"
  bash benchmarks/h200/bench_serving.sh "$RUN" "$W/bench.jsonl" "$(wc -l < "$W/bench.jsonl")" "${MAX_TOKENS:-192}" "$W/tiny-stdlib"
  tar -czf "$OUT/run.tar.gz" -C "$(dirname "$RUN")" "$(basename "$RUN")"
  tar -czf "$OUT/retrain.tar.gz" -C "$W" results regen.jsonl suite.yaml plan.yaml --exclude='*/server-*.log' 2>/dev/null
  stamp "done"
fi
ls -la "$OUT"
