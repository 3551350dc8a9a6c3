#!/usr/bin/env bash
# On the H200 machine, from the repository root (docs/real-gpu.md). Stage "a": draftbench runs the
# baseline, EAGLE3 and the wrong-flag EAGLE variant on real SGLang (random weights) and keeps their
# servers; stage "b": bench_serving on the same servers, the extra captures, then every kept server is
# stopped. ORDER=shuffled replays each phase in bench_serving's kind of mixed order.
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
RUN=$(ls -d "$W"/results/*/ | tail -1)
bash benchmarks/h200/bench_serving.sh "$RUN" "$W/h200.jsonl" 38 128 "$PWD/.devbundle/models/target"
tar -czf "$OUT/run.tar.gz" -C "$(dirname "$RUN")" "$(basename "$RUN")"
ls -la "$OUT"
