#!/usr/bin/env bash
# Regeneration through the real sglang-router in front of two SGLang servers on the one H200
# (docs/scale-out.md). The router's wheel (30.7 MB) and the SGLang bundle (~57 MiB) do not fit in one
# device call together (64 MiB), so two calls back to back while the machine stays warm:
#   install  (carry .routerwhl)          the router wheel into /tmp/router-site
#   run      (carry .devbundle and .whl)  two 8B-shaped random-weight servers sharing GPU 0
#            (server.mem_fraction_static 0.26 each), the router, `draftbench regen --workers 2`
#   dry      here: the same regen command on the stand-in with the router from this machine's venv
# set -o pipefail; PYTHONUNBUFFERED=1 bash benchmarks/h200/router.sh STAGE 2>&1 | tee $OUT/log
set -uo pipefail
STAGE=${1:?install|run|dry}
OUT=${OUT:-./out}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
W=${WORK:-/tmp/rt}; rm -rf "$W"; mkdir -p "$W"
ROWS=${ROWS:-96}
if [ "$STAGE" = install ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/router-site .routerwhl/*.whl || exit 3
  ls /tmp/router-site; exit 0
fi
python3 - "$W/in.jsonl" "$ROWS" <<'EOF'   # prompts: the demo's conversations, numbered to ROWS rows
import json, sys
src = [json.loads(x) for x in open("plans/demo-conversations.jsonl")]
with open(sys.argv[1], "w") as fh:
    for i in range(int(sys.argv[2])):
        row = dict(src[i % len(src)], id=f"row-{i}")
        row["conversations"] = [dict(m, content=f"{m['content']} (variant {i})") for m in row["conversations"]]
        fh.write(json.dumps(row) + "\n")
EOF
if [ "$STAGE" = dry ]; then
  DB="python3"
  python3 - "$W" <<'EOF'
import sys, yaml
from pathlib import Path
w = Path(sys.argv[1])
plan = yaml.safe_load(Path("plans/demo.yaml").read_text())
plan["target"]["env"] = {"CUDA_VISIBLE_DEVICES": "0", "DRAFTBENCH_SIM_STARTUP_S": "0.2"}
plan["server"]["mem_fraction_static"] = 0.26
plan["variants"] = plan["variants"][:1]
plan["suites"] = ["smoke"]
(w / "plan.yaml").write_text(yaml.safe_dump(plan))
EOF
else
  source .devbundle/dev_setup.sh >/dev/null || exit 3
  python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/dbsite .whl/*.whl || exit 3
  [ -d /tmp/router-site/sglang_router ] || { echo "no /tmp/router-site: the install stage did not run on this machine"; exit 6; }
  export PYTHONPATH="$PWD:/tmp/dbsite:/tmp/site:/tmp/router-site"
  DB="python3"
  python3 benchmarks/h200/make_plan.py "$W" >/dev/null || exit 3   # Llama-8B shape, random weights
  python3 - "$W/plan.yaml" <<'EOF'
import sys, yaml
p = yaml.safe_load(open(sys.argv[1]))
p["target"]["env"] = {**p["target"]["env"], "CUDA_VISIBLE_DEVICES": "0"}   # both workers on the one GPU
p["variants"] = p["variants"][:1]
yaml.safe_dump(p, open(sys.argv[1], "w"), sort_keys=False)
EOF
  nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader
fi
T0=$(date +%s)
timeout -s TERM -k 30 "${REGEN_TIMEOUT:-470}" $DB -m harness.cli regen "$W/plan.yaml" --input "$W/in.jsonl" \
    --output "$W/regen.jsonl" --workers 2 --concurrency 32 --max-tokens "${MAX_TOKENS:-64}" --temperature 0 \
    --results-dir "$W/results" 2>&1 | tee "$OUT/regen.log" | tail -40
rc=${PIPESTATUS[0]}
echo "regen exit $rc after $(( $(date +%s) - T0 )) s; rows written: $(wc -l < "$W/regen.jsonl" 2>/dev/null || echo 0)"
[ "$STAGE" = dry ] || nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader   # nothing left
RUN=$(ls -d "$W"/results/regen/*/ 2>/dev/null | tail -1)
[ -n "$RUN" ] && tar -czf "$OUT/router-run.tar.gz" -C "$W" results regen.jsonl --exclude='*.pgid' 2>/dev/null
[ -n "$RUN" ] && cat "$RUN/servers.jsonl"
exit "$rc"
