#!/usr/bin/env bash
# On the H200 machine: sglang.bench_serving against the servers that a draftbench run kept
# (--keep-servers), the extra SSE capture of the EAGLE3 server, then every kept server is stopped and
# compare.py writes the table (docs/real-gpu.md).
#   bench_serving.sh RUN_DIR DATASET_JSONL NUM_PROMPTS OUTPUT_LEN MODEL_DIR
set -uo pipefail
RUN=${1:?run dir} DATASET=${2:?dataset} NUM=${3:?prompts} OUTLEN=${4:?output len} MODEL=${5:?model dir}
OUT=${OUT:-./out}; mkdir -p "$OUT"
DB="env PYTHONPATH=$PWD:/tmp/dbsite:/tmp/site python3"
# bench_serving imports every dataset module; the MMMU one needs HF `datasets`, which this machine lacks and
# the custom dataset never uses: give it an import-only stand-in that fails if it is ever called.
mkdir -p /tmp/stub/datasets
echo 'def load_dataset(*a, **k): raise RuntimeError("datasets is not installed here")' > /tmp/stub/datasets/__init__.py
scrape() { python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())" "$1"; }
pgids() { python3 -c "import json; print(' '.join(str(json.loads(l)['pgid']) for l in open('$RUN/servers.jsonl') if 'argv' in l))"; }
VARIANTS=$(python3 -c "import json; print(' '.join(dict.fromkeys(json.loads(l)['variant'] for l in open('$RUN/servers.jsonl') if '\"port\"' in l and json.loads(l)['variant'] in ('baseline', 'eagle3'))))")
for v in $VARIANTS; do
  PORT=$(python3 -c "import json; print([json.loads(l) for l in open('$RUN/servers.jsonl') if '\"port\"' in l and json.loads(l)['variant']=='$v'][-1]['port'])")
  # the server's own TTFT over bench_serving's requests: /metrics before and after (harness.engines.sglang.prom); no
  # warmup requests, so that the window holds exactly the benchmark's (draftbench's warmup ran earlier).
  # REPEATS=2: a second round, written into the run directory (tag -rep2), for the tool's own spread.
  for tag in "" $([ "${REPEATS:-1}" -ge 2 ] && echo -rep2); do
    DEST=$OUT; [ -n "$tag" ] && DEST=$RUN
    scrape "http://127.0.0.1:$PORT/metrics" > "$RUN/metrics-bench_serving-$v$tag-before.txt"
    env PYTHONPATH=/tmp/site:/tmp/stub timeout 200 python3 -m sglang.bench_serving --backend sglang-oai-chat \
        --host 127.0.0.1 --port "$PORT" --dataset-name custom --dataset-path "$DATASET" --num-prompts "$NUM" \
        --sharegpt-output-len "$OUTLEN" --max-concurrency 8 --model "$MODEL" --tokenizer "$MODEL" \
        --warmup-requests 0 --flush-cache --output-details --output-file "$DEST/bench_serving-$v$tag.jsonl" 2>&1 |
      tail -40 | tee "$DEST/bench_serving-$v$tag.txt"
    scrape "http://127.0.0.1:$PORT/metrics" > "$RUN/metrics-bench_serving-$v$tag-after.txt"
  done
  [ "$v" = eagle3 ] && $DB benchmarks/h200/capture.py "$PORT" "$OUT/sse-extra-$v.txt"
done
# the servers' own logs, bench_serving's requests included (the run directory's copies end with the run)
python3 -c "import json; [print(json.loads(l)['remote_log']) for l in open('$RUN/servers.jsonl') if 'remote_log' in l]" |
  while read -r log; do cp "$log" "$RUN/logs/whole-$(basename "$log")"; done
for pg in $(pgids); do kill -TERM -- -"$pg" 2>/dev/null; done
sleep 8
for pg in $(pgids); do kill -KILL -- -"$pg" 2>/dev/null; done
$DB benchmarks/h200/compare.py "$RUN" "$OUT" | tee "$OUT/compare.md"
