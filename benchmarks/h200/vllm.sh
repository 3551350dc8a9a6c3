#!/usr/bin/env bash
# Real vLLM on the H200 machine (docs/vllm.md, "Real vLLM on the H200"). That machine has no network and each
# command brings at most 64 MiB of the checkout along, but what a command writes under /tmp stays there for
# the next command while the machine is held (given back 30 s after a command ends, 30 minutes at most).
# So the bundle (vLLM 0.26.0 stripped for sm_90, and the 75 wheels of its launch path that the image lacks,
# benchmarks/h200/vllm/lean_requirements.txt) travels in parts, one device call each, back to back:
#   build      HERE (PyPI reachable): download the lean set (sha256 checked against lean_requirements.txt),
#              strip the vLLM wheel (strip_wheel.py), tar the wheels and split the tar into parts of
#              PART_MIB (48) MiB, each in its own folder .vllmbundle/N (the part and SHA256SUMS): carry one
#              folder per call, with the checkout (about 10 MiB) it stays under 64 MiB
#   carry N    THERE, with `.vllmbundle/N` in the call's carry list: the part joins /tmp/vllm-parts, checked
#   install    THERE: join the parts, check the tar's sha256, pip install --no-index --no-deps into
#              /tmp/vllm-site (the image's python, PYTHONPATH, the image untouched); import_check.py imports
#              the serve path on the GPU and captures `vllm serve`'s parser ($OUT/import.json, parser.json)
#   smoke      THERE: `vllm serve` a tiny random-weight Llama with a random EAGLE-3 head (--load-format dummy),
#              probe.py asks it once ($OUT: server log, /metrics before and after, SSE lines with times)
#   measure    THERE, after `decide.sh prep` (the trained tiny target and head in /tmp/tiny, SGLang in
#              /tmp/site, draftbench's wheels in .whl): draftbench run on decide.yaml's settings (c1 and c8,
#              REPEATS 3, MAX_TOKENS 384), servers kept, then `vllm bench serve` on the two vLLM servers.
#              MEASURE_ARMS=vllm (default): vLLM's baseline and EAGLE-3 (the verdicts); MEASURE_ARMS=all: SGLang's
#              two arms too, on the same target, head and prompts (the cross-engine rows; four server starts:
#              give it fewer repeats or tokens, e.g. REPEATS=1 MAX_TOKENS=192)
#              With a kept prep (.tinystate/, decide.sh prep) one session's calls, back to back, carry lists:
#                carry 1 [.vllmbundle/1]; carry 2 [.vllmbundle/2];
#                carry 3 [.vllmbundle/3, .tinystate/tinystate.part00, .tinystate/tinystate.sha256];
#                install, then smoke [.tinystate/tinystate.part01, .tinystate/tinystate.part02, .whl];
#                decide.sh stash [.devbundle, .whl] (SGLang into /tmp/site, for draftbench and SGLang's arms);
#                MEASURE_ARMS=all REPEATS=1 MAX_TOKENS=192 measure [.whl, .devbundle/dev_setup.sh,
#                .devbundle/models] (tests/fixtures out of the tree for the calls that carry 48 MiB or more)
#   gap        THERE, after `MEASURE_ARMS=vllm REPEATS=1 MAX_TOKENS=192 KEEP_SERVERS=1 measure` on the same warm
#              machine (carry [.whl, .devbundle/dev_setup.sh, .devbundle/models]; ~330 s with the servers kept): where
#              draftbench's tok/s and vllm bench serve's part (0.88x on the H200, docs/vllm.md "Measured"):
#              on the measure run's two vLLM servers (started again from its argv), two rounds of vllm bench
#              serve as it runs by default and with draftbench's per-chunk usage (--extra-body), each followed
#              by draftbench on the same servers as `endpoint:` variants (gap_plan.py); $OUT/gap.tar.gz
#   dry        HERE: measure's plan and commands on the two stand-ins (no GPU, no bundle), and gap's plan and
#              draftbench run on the kept stand-in vLLM servers
#   pack       build's last half alone: the parts from .vllmbundle/wheels
#   join       install's first half alone: the wheels from the parts in /tmp/vllm-parts (tests/test_vllm_bundle.py
#              runs both on small files; VLLM_BUNDLE, VLLM_PARTS, VLLM_WHEELS move the folders)
# Every stage THERE: PYTHONUNBUFFERED=1 bash benchmarks/h200/vllm.sh STAGE 2>&1 | tee $OUT/log
set -uo pipefail
STAGE=${1:?build|carry N|install|smoke|measure|gap|dry}
HERE=$(cd "$(dirname "$0")" && pwd)
B=${VLLM_BUNDLE:-.vllmbundle}
PARTS=${VLLM_PARTS:-/tmp/vllm-parts}
SITE=/tmp/vllm-site
WHEELS=${VLLM_WHEELS:-/tmp/vllm-wheels}
OUT=${OUT:-./out}
VLLM_VERSION=0.26.0
T0=$(date +%s)
say() { echo "[vllm.sh $STAGE +$(( $(date +%s) - T0 ))s] $*"; }
# what every vLLM process there runs with: no network, pytorch sampling (as SGLang's --sampling-backend
# pytorch), no usage report, dev endpoints (/server_info, /reset_prefix_cache: docs/vllm.md)
vllm_env() {
  export PYTHONPATH=$SITE HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 VLLM_NO_USAGE_STATS=1
  export DO_NOT_TRACK=1 VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_SERVER_DEV_MODE=1 PYTHONUNBUFFERED=1
  export VLLM_CACHE_ROOT=/tmp/cache/vllm TRITON_CACHE_DIR=/tmp/cache/triton FLASHINFER_WORKSPACE_BASE=/tmp/cache
}
# the flags every vLLM server of these stages gets (flags the image needs; the rest are the plan's)
VLLM_FLAGS=(--dtype bfloat16 --attention-backend TRITON_ATTN --kernel-config '{"enable_flashinfer_autotune":false}'
            --seed 0)

stage_build() {
  local strip=(--drop 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' 'vllm/_moe_C_stable_libtorch.abi3.so' 'vllm/vllm-rs'
               'vllm/third_party/deep_gemm/*' 'vllm/third_party/fmha_sm100/*' 'vllm/third_party/tml_fa4/*'
               --sm90 'vllm/*.so' 'vllm/vllm_flash_attn/*.so')
  local exclude; exclude=$(git rev-parse --git-path info/exclude)  # a worktree's too
  grep -qxF "/$B/" "$exclude" 2>/dev/null || echo "/$B/" >> "$exclude"
  rm -rf "$B" && mkdir -p "$B/raw" "$B/wheels" || return 3
  local P=(--only-binary=:all: --python-version 3.12 --implementation cp)
  for n in 39 38 37 36 35 34 33 32 31 30 29 28 27 26 25 24 17; do P+=(--platform "manylinux_2_${n}_x86_64"); done
  P+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64)
  grep -v '^#' "$HERE/vllm/lean_requirements.txt" | awk '{print $1}' > "$B/requirements.txt"
  say "pip download: $(wc -l < "$B/requirements.txt") wheels"
  python3 -m pip download -q --no-deps "${P[@]}" -d "$B/raw" -r "$B/requirements.txt" || return 4
  # every wheel is the one the closure resolved (name and sha256)
  grep -v '^#' "$HERE/vllm/lean_requirements.txt" | awk '{print $3 "  " $2}' > "$B/raw/SHA256SUMS"
  (cd "$B/raw" && sha256sum --quiet -c SHA256SUMS) || { say "a downloaded wheel is not the resolved one"; return 5; }
  local f
  for f in "$B"/raw/*.whl; do
    case "$(basename "$f")" in
      "vllm-$VLLM_VERSION-"*) python3 "$HERE/vllm/strip_wheel.py" "$f" "$B/wheels/$(basename "$f")" "${strip[@]}" || return 6 ;;
      *) cp "$f" "$B/wheels/" ;;
    esac
  done
  rm -rf "$B/raw"
  stage_pack
}

stage_pack() {  # $B/wheels -> $B/N/{part-N,SHA256SUMS}: the tar of the wheels in parts of PART_MIB MiB
  local f
  tar -cf "$B/bundle.tar" -C "$B" wheels || return 7
  split -b "${PART_MIB:-48}M" -a 1 --numeric-suffixes=1 "$B/bundle.tar" "$B/part-" || return 7
  (cd "$B" && sha256sum bundle.tar part-* > SHA256SUMS)
  local n=0
  for f in "$B"/part-*; do
    n=$(( n + 1 )); mkdir -p "$B/$n" && mv "$f" "$B/$n/" && cp "$B/SHA256SUMS" "$B/$n/"
  done
  rm -rf "$B/wheels"
  du -sb "$B/bundle.tar" | awk '{printf "bundle.tar: %d bytes (%.1f MiB)\n", $1, $1/1048576}'
  say "$n parts: $(cd "$B" && du -b -- */part-* | awk '{printf "%s %.1f MiB; ", $2, $1/1048576}')"
  say "carry them one per call: $(for i in $(seq 1 $n); do printf '[\"%s/%s\"] ' "$B" "$i"; done)"
  rm -f "$B/bundle.tar"
}

stash_tinystate() {  # carry and install also keep whatever parts of a kept prep (.tinystate/) the call brings:
  # they ride along with the vLLM parts (part 3 is 36 MiB, room for one 15 MiB part); measure restores them
  if [ -d .tinystate ]; then source "$HERE/tinystate.sh" && tinystate_stash; fi
}

stage_carry() {  # N: the part in .vllmbundle/N, carried by this call
  local n=${1:?carry N} d="$B/$1"
  stash_tinystate
  [ -d "$d" ] || { say "no $d: name \"$d\" in this call's carry list"; return 2; }
  mkdir -p "$PARTS" || return 3
  cp "$d"/part-* "$d/SHA256SUMS" "$PARTS/" || return 3
  local part; part=$(basename "$(ls "$d"/part-*)")
  (cd "$PARTS" && grep " $part\$" SHA256SUMS | sha256sum -c) || { rm -f "$PARTS/$part"; return 4; }
  say "$PARTS holds $(cd "$PARTS" && ls part-* | tr '\n' ' ')of $(grep -c ' part-' "$PARTS/SHA256SUMS")"
}

stage_join() {  # the parts in $PARTS, checked, joined and unpacked into $WHEELS/wheels
  [ -f "$PARTS/SHA256SUMS" ] || { say "no parts in $PARTS: run 'carry N' first (machine went cold?)"; return 2; }
  local missing; missing=$(awk '$2 ~ /^part-/ {print $2}' "$PARTS/SHA256SUMS" | while read -r p; do
    [ -f "$PARTS/$p" ] || echo "$p"; done)
  [ -z "$missing" ] || { say "parts missing: $missing"; return 2; }
  (cd "$PARTS" && sha256sum --quiet -c SHA256SUMS --ignore-missing) || { say "a part is not the one built"; return 4; }
  ls "$PARTS"/part-* | sort -V | xargs cat > "$PARTS/bundle.tar"
  (cd "$PARTS" && grep ' bundle.tar$' SHA256SUMS | sha256sum -c) || { say "the joined tar is not the one built"; return 4; }
  rm -rf "$WHEELS" && mkdir -p "$WHEELS" && tar -xf "$PARTS/bundle.tar" -C "$WHEELS" || return 4
  rm -f "$PARTS/bundle.tar"
  say "joined $(ls "$PARTS"/part-* | wc -l) parts: $(ls "$WHEELS/wheels" | wc -l) wheels in $WHEELS/wheels"
}

stage_install() {
  mkdir -p "$OUT"
  stash_tinystate
  if [ ! -f "$SITE/.ok" ]; then
    stage_join || return $?
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
        "$WHEELS"/wheels/*.whl || { say "pip install failed"; return 5; }
    touch "$SITE/.ok"
    say "installed $(ls "$WHEELS/wheels" | wc -l) wheels into $SITE: $(du -sm "$SITE" | cut -f1) MB"
  fi
  vllm_env
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 "$HERE/vllm/import_check.py" --json "$OUT/import.json" --parser "$OUT/parser.json"
}

wait_health() {  # PORT PID DEADLINE_S
  local t=$(( $(date +%s) + $3 ))
  while [ "$(date +%s)" -lt "$t" ]; do
    kill -0 "$2" 2>/dev/null || { say "server exited"; return 1; }
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$1/health', timeout=5)" 2>/dev/null && return 0
    sleep 2
  done
  say "server not healthy within $3 s"; return 1
}

stage_smoke() {
  [ -f "$SITE/.ok" ] || { say "vLLM is not installed in $SITE: run install first"; return 2; }
  mkdir -p "$OUT"; vllm_env
  local M=/tmp/vllm-smoke PORT=8000 MODE=${SMOKE_MODE:-eagle3}
  python3 "$HERE/vllm/smoke_models.py" "$M" || return 3
  local args=("$M/target" --served-model-name tiny --load-format dummy --host 127.0.0.1 --port $PORT
              --max-model-len 2048 --gpu-memory-utilization 0.3 --max-num-seqs 32 "${VLLM_FLAGS[@]}")
  if [ "$MODE" = eagle3 ]; then
    args+=(--speculative-config "{\"method\":\"eagle3\",\"model\":\"$M/draft\",\"num_speculative_tokens\":3}")
  fi
  local log="$OUT/server-$MODE.log"
  say "python3 -m vllm.entrypoints.cli.main serve ${args[*]}" | tee "$log"
  setsid python3 -m vllm.entrypoints.cli.main serve "${args[@]}" >> "$log" 2>&1 &
  local pid=$! rc=1
  if wait_health $PORT $pid "${SMOKE_READY_S:-420}"; then
    say "healthy"
    python3 "$HERE/vllm/probe.py" --port $PORT --model tiny --out "$OUT" && rc=0
    sleep "${SMOKE_LOG_S:-11}"  # one more stats interval (10 s): the SpecDecoding line of the requests
  fi
  kill -TERM -- -$pid 2>/dev/null; sleep 5; kill -KILL -- -$pid 2>/dev/null
  say "smoke rc=$rc"
  gzip -f "$log"
  return $rc
}

plan_and_run() {  # SIMFLAG: write the plans (make_plan.py --decide, then make_vllm_plan.py) and run them
  local sim=$1
  $DB benchmarks/h200/make_plan.py --decide "$W" $sim > "$S/plans.log" || return 3
  $DB "$HERE/vllm/make_vllm_plan.py" "$W" $sim | tee -a "$S/plans.log" || return 3
  say "draftbench check vllm.yaml"
  $DB -m harness.cli check "$W/vllm.yaml" 2>&1 | tee "$S/check.txt"
  say "draftbench run vllm.yaml: sglang and vllm, baseline and EAGLE-3, c1 and c8, servers kept"
  timeout -s TERM -k 30 "${RUN_S:-420}" $DB -m harness.cli run "$W/vllm.yaml" --results-dir "$W/vllm-runs" \
      --keep-servers 2>&1 | grep -v "requests done" | tee "$S/draftbench-run.log"
  RUN_RC=${PIPESTATUS[0]}; say "draftbench run exited $RUN_RC"
  RUN=$(ls -d "$W"/vllm-runs/*/ 2>/dev/null | sort | tail -1)
}

stop_kept() {  # RUN_DIR: every server the run kept, by process group
  local pgs pg
  pgs=$(python3 -c "import json, sys; print(' '.join(str(json.loads(l)['pgid']) for l in open(sys.argv[1] + '/servers.jsonl') if '\"pgid\"' in l))" "$1" 2>/dev/null)
  for pg in $pgs; do kill -TERM -- -"$pg" 2>/dev/null; done
  sleep 5; for pg in $pgs; do kill -KILL -- -"$pg" 2>/dev/null; done
  return 0
}

vllm_port() {  # RUN_DIR VARIANT: the port the run last gave that vLLM arm (servers.jsonl)
  python3 -c "import json, sys; print([json.loads(l) for l in open(sys.argv[1]) if '\"port\"' in l and json.loads(l)['variant'] == sys.argv[2]][-1]['port'])" "$1/servers.jsonl" "$2"
}

STARTED=()  # process groups this script started again (ensure_vllm), stopped by stop_started
ensure_vllm() {  # RUN_DIR VARIANT PORT: that arm serving on its port; a resumed run does not restart an arm it
  # had finished, and stop_kept stops every kept one: start it again with the run's own argv
  python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$3/health', timeout=5)" 2>/dev/null && return 0
  say "$2 is not serving on $3: starting it again with the run's argv"
  setsid python3 -c "import json, os, sys; a = [json.loads(l) for l in open(sys.argv[1]) if '\"argv\"' in l and json.loads(l)['variant'] == sys.argv[2]][-1]['argv']; os.execvp(a[0], a)" \
      "$1/servers.jsonl" "$2" > "$S/bench/$2-server.log" 2>&1 &
  local pid=$!
  STARTED+=("$pid")
  wait_health "$3" "$pid" 300
}

stop_started() {
  local pg
  for pg in "${STARTED[@]}"; do kill -TERM -- -"$pg" 2>/dev/null; done
  sleep 3; for pg in "${STARTED[@]}"; do kill -KILL -- -"$pg" 2>/dev/null; done
  STARTED=()
}

bench_one() {  # VARIANT PORT LABEL [vllm bench serve flags]: one round on the run's prompts, at c8
  local v=$1 port=$2 label=$3; shift 3
  say "vllm bench serve on $v (port $port) $label $*"
  (vllm_env; timeout "${BENCH_S:-120}" python3 -m vllm.entrypoints.cli.main bench serve --backend openai-chat \
      --base-url "http://127.0.0.1:$port" --endpoint /v1/chat/completions --model "$W/tiny-stdlib" \
      --tokenizer "$W/tiny-stdlib" --dataset-name custom --dataset-path "$W/vllm-bench.jsonl" --skip-chat-template \
      --num-prompts "$(wc -l < "$W/vllm-bench.jsonl")" --custom-output-len "${MAX_TOKENS:-384}" --ignore-eos \
      --max-concurrency 8 --temperature 0 --save-result --result-dir "$S/bench" --result-filename "$v$label.json" \
      "$@" > "$S/bench/$v$label.txt" 2>&1)
  say "vllm bench serve $v$label exited $?"; grep -E "^(Output token throughput|Benchmark duration|Median TTFT)" "$S/bench/$v$label.txt"
}

bench_vllm() {  # RUN_DIR: `vllm bench serve` on each vLLM arm of the run (kept, else started again), at c8
  local v port
  for v in vllm-base vllm-eagle3; do
    port=$(vllm_port "$1" "$v") || continue
    ensure_vllm "$1" "$v" "$port" || continue
    bench_one "$v" "$port" ""
    stop_started
  done
}

# vllm bench's own payload (vllm/benchmarks/lib/endpoint_request_func.py, 0.26.0) asks for usage at the end
# only; --extra-body replaces its stream_options with draftbench's (usage on every chunk)
USAGE_BODY='{"stream_options":{"include_usage":true,"continuous_usage_stats":true}}'

stage_gap() {  # after measure, on the same warm machine: draftbench between vllm bench serve's rounds
  [ -f "$SITE/.ok" ] || { say "vLLM is not installed in $SITE: carry the parts and install first"; return 2; }
  W=${WORK:-/tmp/tiny}; S=$W/stage-vllm-gap; mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd); rm -rf "$S"; mkdir -p "$S/bench"
  source .devbundle/dev_setup.sh >/dev/null || return 3
  SITE=/tmp/vllm-site
  python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/dbsite .whl/*.whl || return 3
  DB="env PYTHONPATH=$PWD:/tmp/dbsite:/tmp/site python3"
  local run v round ports="{"
  run=$(ls -d "$W"/vllm-runs/*/ 2>/dev/null | sort | tail -1); run=${run%/}
  [ -f "$run/servers.jsonl" ] || { say "no measure run in $W/vllm-runs: run measure first"; return 6; }
  for v in vllm-base vllm-eagle3; do
    port=$(vllm_port "$run" "$v") || return 6
    ensure_vllm "$run" "$v" "$port" || { stop_started; return 6; }
    ports+="\"$v\": $port, "
  done
  ports="${ports%, }}"
  $DB "$HERE/vllm/gap_plan.py" "$W" "$ports" | tee "$S/plans.log" || { stop_started; return 3; }
  for round in 1 2; do
    for v in vllm-base vllm-eagle3; do
      bench_one "$v" "$(vllm_port "$run" "$v")" "-default-$round"
      bench_one "$v" "$(vllm_port "$run" "$v")" "-usage-$round" --extra-body "$USAGE_BODY"
    done
    say "draftbench run gap.yaml (round $round)"
    timeout -s TERM -k 30 "${GAP_RUN_S:-150}" $DB -m harness.cli run "$W/gap.yaml" --results-dir "$W/gap-runs" 2>&1 \
        | grep -v "requests done" | tee "$S/draftbench-gap-$round.log"
  done
  stop_started
  stop_kept "$run"  # measure's, when it kept them (KEEP_SERVERS=1)
  for d in "$W"/gap-runs/*/; do tar -czf "$S/$(basename "$d").tar.gz" -C "$W/gap-runs" "$(basename "$d")"; done
  tar -czf "$OUT/gap.tar.gz" -C "$W" "$(basename "$S")"; ls -la "$OUT"
}

stage_measure() {
  [ -f "$SITE/.ok" ] || { say "vLLM is not installed in $SITE: carry the parts and install first"; return 2; }
  W=${WORK:-/tmp/tiny}; S=$W/stage-vllm-${MEASURE_ARMS:-vllm}; mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd); rm -rf "$S"; mkdir -p "$S/bench"
  source benchmarks/h200/tinystate.sh && tinystate_stash && tinystate_restore "$W"  # a kept prep, if carried
  [ -e "$W/draft/model.safetensors" ] || { say "no trained head in $W: run decide.sh prep (or carry .tinystate) first"; return 6; }
  [ -f .devbundle/dev_setup.sh ] && [ -d .whl ] || { say ".devbundle and .whl must be on the machine (carried by prep)"; return 6; }
  source .devbundle/dev_setup.sh >/dev/null || return 3
  SITE=/tmp/vllm-site  # dev_setup.sh exports SITE (SGLang's); vllm_env needs vLLM's
  python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/dbsite .whl/*.whl || return 3
  DB="env PYTHONPATH=$PWD:/tmp/dbsite:/tmp/site python3"
  export MEASURE_ARMS=${MEASURE_ARMS:-vllm}
  if [ -n "${RESUME_RUN:-}" ]; then  # an interrupted measure on this machine: finish it (draftbench run --resume)
    RUN=${RESUME_RUN%/}; [ "$RUN" = latest ] && RUN=$(ls -d "$W"/vllm-runs/*/ 2>/dev/null | sort | tail -1) && RUN=${RUN%/}
    [ -f "$RUN/plan.resolved.json" ] || { say "no run in $RUN"; return 6; }
    say "draftbench run --resume $RUN, servers kept"
    timeout -s TERM -k 30 "${RUN_S:-420}" $DB -m harness.cli run --resume "$RUN" --keep-servers 2>&1 \
        | grep -v "requests done" | tee "$S/draftbench-resume.log"
    RUN_RC=${PIPESTATUS[0]}; say "draftbench run --resume exited $RUN_RC"
  else
    plan_and_run ""
  fi
  if [ -n "$RUN" ]; then
    # vllm bench serve (up to 2 x BENCH_S) only on a finished run and while the call has time for it
    if [ "${RUN_RC:-1}" = 0 ] && [ $(( $(date +%s) - T0 )) -lt "${BENCH_BY:-420}" ]; then bench_vllm "$RUN"
    else say "vllm bench serve left for a later call (RESUME_RUN=latest): run rc ${RUN_RC:-?}, +$(( $(date +%s) - T0 ))s"; fi
    if [ "${KEEP_SERVERS:-0}" = 1 ]; then say "servers kept for the next call (gap measures and stops them)"
    else stop_kept "$RUN"; fi
    tar -czf "$S/run.tar.gz" -C "$(dirname "$RUN")" "$(basename "$RUN")"
  fi
  tar -czf "$OUT/measure-$MEASURE_ARMS.tar.gz" -C "$W" "$(basename "$S")"; ls -la "$OUT"
  [ -n "$RUN" ] && [ -f "$RUN/summary.csv" ]
}

stage_dry() {  # measure's plans and draftbench commands on the stand-ins, here
  W=${WORK:-/tmp/vllm-dry}; S=$W/stage-vllm; rm -rf "$W"; mkdir -p "$S/bench"
  DB="env PYTHONPATH=$PWD python3"
  export MAX_TOKENS=24 MIN_STEADY_S=0.3 REPEATS=2 MEASURE_ARMS=all
  plan_and_run --sim
  [ -n "$RUN" ] && [ -f "$RUN/summary.csv" ] || { [ -n "$RUN" ] && stop_kept "$RUN"; return 7; }
  # gap's plan and draftbench run on the kept stand-in vLLM servers (vllm bench serve is not here)
  local ports
  ports=$(python3 -c "import json, sys; p = {json.loads(l)['variant']: json.loads(l)['port'] for l in open(sys.argv[1]) if '\"port\"' in l}; print(json.dumps({k: p[k] for k in ('vllm-base', 'vllm-eagle3')}))" "$RUN/servers.jsonl")
  GAP_REPEATS=2 $DB "$HERE/vllm/gap_plan.py" "$W" "$ports" || { stop_kept "$RUN"; return 7; }
  $DB -m harness.cli run "$W/gap.yaml" --results-dir "$W/gap-runs" 2>&1 | grep -v "requests done" | tail -12
  local gap; gap=$(ls -d "$W"/gap-runs/*/ 2>/dev/null | tail -1)
  stop_kept "$RUN"
  [ -n "$gap" ] && [ -f "$gap/summary.csv" ] || return 8
  python3 - "$RUN" <<'EOF'
import sys, pandas as pd
s = pd.read_csv(sys.argv[1] + "/summary.csv")
print(s[["variant", "engine", "concurrency", "tok_s", "accept_len", "speedup", "verdict", "compared_with"]].to_string())
need = {"baseline", "eagle3", "vllm-base", "vllm-eagle3"}
assert need <= set(s.variant), set(s.variant)
assert (s.verdict == "cross-engine").any(), "no cross-engine row"
EOF
  python3 - "$gap" <<'EOF'
import sys, pandas as pd
s = pd.read_csv(sys.argv[1] + "/summary.csv")
print(s[["variant", "engine", "concurrency", "tok_s", "accept_len", "speedup", "verdict"]].to_string())
assert set(s.variant) == {"vllm-base", "vllm-eagle3"} and set(s.concurrency) == {8}, s.variant
assert (s.repeats == 2).all() and s.accept_len.notna().any()
EOF
}

case "$STAGE" in
  build) stage_build ;;
  pack) stage_pack ;;
  join) stage_join ;;
  carry) stage_carry "${2:-}" ;;
  install) stage_install ;;
  smoke) stage_smoke ;;
  measure) stage_measure ;;
  gap) stage_gap ;;
  dry) stage_dry ;;
  *) echo "unknown stage $STAGE (build|carry N|install|smoke|measure|gap|dry; pack|join: build's and install's halves)"; exit 2 ;;
esac
rc=$?
say "exit $rc"
exit $rc
