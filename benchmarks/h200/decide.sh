#!/usr/bin/env bash
# On the H200 machine, from the repository root: is the trained head's speedup real, and which draft
# length pays (docs/real-gpu.md, "Verdicts and tune on the H200"). One device call per stage, chained
# while the machine stays warm (state in $WORK, default /tmp/tiny, lives only as long as the machine):
#   prep     accept.sh's prep: the tiny target, its answers regenerated through real SGLang, an EAGLE-3
#            head trained on them (TTT over TTT_LENGTH=5 draft steps, as many as the widest tune config drafts)
#            and both packed for later sessions as $OUT/tinystate.partNN (benchmarks/h200/tinystate.sh)
#   stash    nothing but the kept prep's parts this call carries (.tinystate/): a later session restores the
#            target and head from them instead of running prep again (every stage restores once all are there)
#   warm     one short draftbench run through both servers: on a fresh machine the first EAGLE-3 server
#            spends ~2 minutes compiling in its first decode (seen on 2026-12-01: nothing logged from
#            16:43:36 to 16:45:35, then 'gen throughput 0.27'; the second start on that machine had none);
#            paid here, it stays out of the verdict stage's 10 minutes. Brings back /tmp/cache (where
#            dev_setup.sh points the JIT caches) as $OUT/jit-cache.tar.gz, for .devbundle/cache/ (dev_setup.sh
#            restores jit-*.tar.gz there); whether that cache is the one that holds this compile is not known
#   serve    warm's run with --keep-servers, then on those two servers (as `endpoint:` variants: servers
#            draftbench did not start) the c8 verdict (ENDPOINT_REPEATS=5 repeats), sglang.bench_serving two
#            rounds per server (verdict_vs_bench.py: is the verdict consistent with its spread?), and a
#            request-rate run (RATES=4,16 per second, goodput under an SLO); then both servers are stopped
#   verdict  draftbench run: baseline vs EAGLE3 at concurrency 1 and 8, run.repeats 3 (the speedup's
#            interval and verdict), then sglang.bench_serving, two rounds, on the same kept servers
#   tune     draftbench tune: the EAGLE3 variant's draft length at concurrency 1 and 8 within TUNE_BUDGET (8m);
#            its wide and verify runs stop when decided (looks after 2, 4, 6 repeats); the first EAGLE-3
#            decode's one-off compile lands in a warmup (detected, charged once, kept out of every phase)
#   aa       no training: the random-weight 8B shape against a copy of itself and with CUDA graphs off,
#            run.stop decided at c8, the arms side by side (one call; decides equivalent/undecided vs slower)
#   resume   draftbench tune --resume: RESUME_BUDGET (5m) more on what the tune left (configs predicted only);
#            RESUME_OF=crossover resumes the crossover stage's tune instead
#   crossover draftbench tune --concurrency auto (docs/tune.md, "The crossover"): step costs of CROSS_STEPS (3,5)
#            at batches 1, 2, 4, ... CROSS_MAX_BATCH (64; the servers' cap is raised to it), bisection of where
#            the best config stops paying, a paired run on each side (up to 3 per side), the mixed load CROSS_MIX
#            (1:4,32:1) and goodput against request rate; CROSS_BUDGET (9m); the tune directory, crossover.csv,
#            schedule.json and crossover.png come back. On a fresh machine the first EAGLE-3 decode's compile
#            (121 s on 2026-12-03; none since the warmup's first request is greedy, 2026-12-04: 291 s for the
#            wide run) and the wide run take ~370 s of the 9m: the baseline's and the longest
#            chain's step costs on the wide run's servers fit, the bisection and the paired sides may not;
#            then `RESUME_OF=crossover RESUME_BUDGET=8m decide.sh resume` on the same warm machine buys them
#   decided  draftbench run --until-decided: baseline against the tune's pick at c8 (looks after 2, 4, 8; ~330 s
#            when it runs to the 8th repeat: give the call 400 s, or it ends before packing its records)
#   lossless the trained head's 81-86 % greedy match classified: baseline and EAGLE3 once at c1 and c8
#            (MAX_TOKENS, the verdict's length), then draftbench's lossless audit on the baseline's server (a
#            control at c2, logprobs along every baseline answer); lossless_report.py prints each divergence's
#            margin (docs/real-gpu.md takes the figures; lossless-report.json is the fixture to keep)
#   dry      here, without a GPU: the verdict and tune commands on draftbench's SGLang stand-in
# Each stage packs what it made into $OUT/<stage>.tar.gz. Call it as
#   set -o pipefail; PYTHONUNBUFFERED=1 bash benchmarks/h200/decide.sh STAGE 2>&1 | tee $OUT/log
#   bash benchmarks/h200/decide.sh snapshot   (here) freezes the code the stages run, as it is here now
# Other people's edits in progress travel with the working tree; with .devbundle/snapshot.tar.gz (harness/
# and benchmarks/ as they were when the snapshot stage ran, then tried by the dry stage) every stage runs
# that code instead, from /tmp/dbsnap, with .devbundle and .whl linked in.
set -uo pipefail
STAGE=${1:?prep|stash|warm|serve|verdict|tune|resume|crossover|decided|aa|lossless|dry|snapshot}
if [ "$STAGE" = snapshot ]; then  # the code as it is here now (commit + whatever is edited on top of it)
  tar -czf .devbundle/snapshot.tar.gz --exclude=__pycache__ harness benchmarks pyproject.toml || exit 3
  echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- harness benchmarks pyproject.toml || echo '+edits') $(date -u +%FT%TZ)" > .devbundle/snapshot.commit
  echo "snapshot of $(cat .devbundle/snapshot.commit): $(wc -c < .devbundle/snapshot.tar.gz) bytes"; exit 0
fi
if [ -f .devbundle/snapshot.tar.gz ] && [ -z "${DECIDE_IN_SNAPSHOT:-}" ]; then
  R=$PWD; rm -rf /tmp/dbsnap; mkdir -p /tmp/dbsnap && tar -xzf .devbundle/snapshot.tar.gz -C /tmp/dbsnap || exit 3
  ln -s "$R/.devbundle" /tmp/dbsnap/.devbundle; ln -s "$R/.whl" /tmp/dbsnap/.whl
  echo "decide.sh: running the snapshot $(cat .devbundle/snapshot.commit 2>/dev/null) (.devbundle/snapshot.tar.gz)"
  cd /tmp/dbsnap && DECIDE_IN_SNAPSHOT=1 exec bash benchmarks/h200/decide.sh "$@"
fi
W=${WORK:-/tmp/tiny}; OUT=${OUT:-./out}; mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
T0=$(date +%s)
stamp() { echo "[decide.sh $STAGE +$(( $(date +%s) - T0 ))s] $*" | tee -a "$S/timeline.txt"; }
export MAX_TOKENS=${MAX_TOKENS:-384} MIN_STEADY_S=${MIN_STEADY_S:-3} REPEATS=${REPEATS:-3}
TUNE_BUDGET=${TUNE_BUDGET:-8m} TUNE_CONC=${TUNE_CONC:-1,8} TUNE_STEPS=${TUNE_STEPS:-1,2,3,4,5}
# 64 prompts: the 2026-12-01 tune's 16 left both verifications too short to decide (16 requests at c8,
# fewer than 4 x 8; a 2.6 s steady state at c1); its wide run's phases are seconds, so 64 costs ~40 s
export TUNE_PROMPTS=${TUNE_PROMPTS:-64} TUNE_TOKENS=${TUNE_TOKENS:-192}
# serve: every piece gets at most what is left of SERVE_S (the device call's 600 s, less packing)
DEADLINE=$(( $(date +%s) + ${SERVE_S:-540} ))
left() { local l=$(( DEADLINE - $(date +%s) - ${1:-0} )); [ "$l" -gt 0 ] && echo "$l" || echo 1; }

verdict_run() {  # PLAN RESULTS_DIR TIMEOUT_S: draftbench run, servers kept for bench_serving
  timeout -s TERM -k 30 "$3" $DB -m harness.cli run "$1" --results-dir "$2" --keep-servers
}
tune_run() {  # PLAN RESULTS_DIR TIMEOUT_S
  timeout -s TERM -k 30 "$3" $DB -m harness.cli tune "$1" --variant eagle3 --concurrency "$TUNE_CONC" \
      --steps "$TUNE_STEPS" --graphs on --budget "$TUNE_BUDGET" --cost-tokens "$TUNE_TOKENS" --results-dir "$2"
}
serve_runs() {  # the endpoints verdict, then the request rates: on servers draftbench did not start
  timeout -s TERM -k 30 "${EP_S:-200}" $DB -m harness.cli run "$W/endpoints.yaml" --results-dir "$W/endpoints" || return 1
  timeout -s TERM -k 30 "${RATES_S:-120}" $DB -m harness.cli run "$W/rates.yaml" --results-dir "$W/rates" || return 2
}
serve_run() {  # NAME RESERVE_S WHAT [FLAGS]: draftbench run $W/NAME.yaml into $W/NAME, leaving RESERVE_S of SERVE_S
  local name=$1 reserve=$2 what=$3; shift 3
  stamp "draftbench run $name.yaml${*:+ $*}: $what"
  timeout -s TERM -k 20 "$(left "$reserve")" $DB -m harness.cli run "$W/$name.yaml" --results-dir "$W/$name" "$@" 2>&1 |
    grep -v "requests done" | tee "$S/$name-run.log"
  stamp "$name run exited ${PIPESTATUS[0]}"
}
latest() { ls -d "$1"/*/ 2>/dev/null | sort | tail -1; }
stop_kept() {  # RUN_DIR: every server a run kept (its servers.jsonl), by process group, TERM then KILL
  local pg pgs
  pgs=$(python3 -c "import json, sys; print(' '.join(str(json.loads(l)['pgid']) for l in open(sys.argv[1] + '/servers.jsonl') if '\"pgid\"' in l))" "$1" 2>/dev/null)
  for pg in $pgs; do kill -TERM -- -"$pg" 2>/dev/null; done
  for pg in $pgs; do for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 -- -"$pg" 2>/dev/null || break; sleep 1; done
    kill -KILL -- -"$pg" 2>/dev/null; done
  return 0
}

if [ "$STAGE" = dry ]; then  # the stand-in: short phases, a small floor, so that every code path runs
  S=${WORK:-/tmp/decide-dry}; rm -rf "$S"; mkdir -p "$S"; W=$S
  DB="env PYTHONPATH=$PWD python3"
  export MAX_TOKENS=24 TUNE_TOKENS=32 MIN_STEADY_S=0.3
  $DB benchmarks/h200/make_plan.py --decide "$W" --sim || exit 3
  stamp "draftbench run warm.yaml (stand-in)"
  $DB -m harness.cli run "$W/warm.yaml" --results-dir "$W/warm" > "$W/warm.log" 2>&1 || { tail "$W/warm.log"; exit 7; }
  stamp "draftbench run decide.yaml (stand-in)"
  verdict_run "$W/decide.yaml" "$W/runs" 300; rc=$?
  RUN=$(latest "$W/runs"); [ -n "$RUN" ] && stop_kept "$RUN"
  [ "$rc" = 0 ] || exit 7
  python3 - "$RUN" <<'EOF' || exit 8
import sys, pandas as pd
s = pd.read_csv(sys.argv[1] + "/summary.csv")
need = ["speedup", "speedup_ci_low", "speedup_ci_high", "verdict"]
missing = [c for c in need if c not in s]
assert not missing, f"summary.csv lacks {missing}"
print(s[["variant", "concurrency", "repeats", *need, "verdict_reason"]].to_string())
EOF
  stamp "serve (stand-in): warm kept, endpoints verdict, rates"
  $DB -m harness.cli run "$W/warm.yaml" --results-dir "$W/serve-warm" --keep-servers > "$W/serve-warm.log" 2>&1 ||
    { tail "$W/serve-warm.log"; exit 7; }
  WARM=$(latest "$W/serve-warm")
  ENDPOINT_REPEATS=3 $DB benchmarks/h200/make_plan.py --endpoints "$W" "$WARM" --sim || { stop_kept "$WARM"; exit 7; }
  serve_runs; rc=$?
  stop_kept "$WARM"
  [ "$rc" = 0 ] || exit 7
  EP=$(latest "$W/endpoints"); RT=$(latest "$W/rates")
  python3 - "$EP" "$RT" <<'EOF' || exit 8
import json, sys, pandas as pd
pd.set_option("display.width", 200)
ep, rt = sys.argv[1:3]
prov = json.load(open(ep + "/provenance.json"))
assert prov["servers_not_started"] == ["baseline", "eagle3"], prov
s = pd.read_csv(ep + "/summary.csv")
print(s[["variant", "concurrency", "repeats", "tok_s", "speedup", "speedup_ci_low", "speedup_ci_high", "verdict"]])
r = pd.read_csv(rt + "/summary_by_rate.csv")
assert sorted(set(r.request_rate)) == [4.0, 16.0], r
print(r[["variant", "request_rate", "tok_s", "tpot_mean_ms", "slo_met", "goodput_req_s", "speedup"]])
EOF
  stamp "draftbench tune (stand-in)"
  TUNE_BUDGET=${DRY_TUNE_BUDGET:-150s} tune_run "$W/tune.yaml" "$W/tune" 400  # 1: stopped by its budget
  T=$(latest "$W/tune"); ls "$T"
  [ -f "$T/tune.csv" ] && [ -f "$T/speculation_profile.json" ] || exit 9
  stamp "draftbench tune --resume (stand-in): ${DRY_RESUME_BUDGET:-60s} more"
  timeout -s TERM -k 30 300 $DB -m harness.cli tune --resume "$T" --budget "${DRY_RESUME_BUDGET:-60s}" > "$W/resume.log" 2>&1
  rc=$?; grep -E "resumed|^c[0-9]+:" "$W/resume.log"; [ "$rc" = 0 ] || { tail -20 "$W/resume.log"; exit 7; }
  stamp "draftbench run --until-decided (stand-in)"
  $DB benchmarks/h200/make_plan.py --decided "$W" "$T" || exit 3
  timeout -s TERM -k 30 300 $DB -m harness.cli run "$W/decided.yaml" --results-dir "$W/decided" --until-decided \
      > "$W/decided.log" 2>&1 || { tail -20 "$W/decided.log"; exit 7; }
  grep -E "^look |verdict" "$W/decided.log"
  stamp "dry run passed"
  exit 0
fi

S=$W/stage-$STAGE; mkdir -p "$W"; rm -rf "$S"; mkdir -p "$S"
SIMFLAG=""  # DECIDE_SIM=1: a GPU stage's own commands on the stand-in here (no bundle, no GPU), as a dry run
if [ -n "${DECIDE_SIM:-}" ]; then SIMFLAG=--sim; fi
source benchmarks/h200/tinystate.sh
if [ "$STAGE" = stash ]; then  # a call that only brings parts of a kept prep (.tinystate/, see tinystate.sh)
  if [ -d .devbundle/wheels ]; then source .devbundle/dev_setup.sh | tail -3 || exit 3; fi  # the install, once
  tinystate_stash; tinystate_restore "$W"; exit 0
fi
if [ "$STAGE" != prep ] && [ "$STAGE" != aa ] && [ -z "$SIMFLAG" ]; then tinystate_stash; tinystate_restore "$W"; fi
if [ "$STAGE" != prep ] && [ "$STAGE" != aa ] && [ -z "$SIMFLAG" ] && [ ! -e "$W/draft/model.safetensors" ]; then
  echo "decide.sh $STAGE: no trained drafter in $W: the machine went cold since the prep stage (its state is"
  echo "gone); run 'decide.sh prep' again first"
  exit 6
fi
if [ -n "$SIMFLAG" ]; then
  DB="env PYTHONPATH=$PWD python3"
else
  source .devbundle/dev_setup.sh >/dev/null || exit 3
  source benchmarks/h200/inductor_cache.sh  # Inductor's cache kept with the JIT caches
  python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/dbsite .whl/*.whl || exit 3
  DB="env PYTHONPATH=$PWD:/tmp/dbsite:/tmp/site python3"
fi
pack() { cp "$S/timeline.txt" "$OUT/" 2>/dev/null; tar -czf "$OUT/$STAGE.tar.gz" -C "$W" "$(basename "$S")" "$@"; ls -la "$OUT"; }

case "$STAGE" in
warm)
  $DB benchmarks/h200/make_plan.py --decide "$W" $SIMFLAG || exit 3
  stamp "draftbench run warm.yaml: both servers once, 8 prompts, 32 tokens"
  timeout -s TERM -k 30 "${WARM_S:-420}" $DB -m harness.cli run "$W/warm.yaml" --results-dir "$W/warm" 2>&1 |
    grep -v "requests done" | tee "$S/warm-run.log"
  stamp "warm run exited ${PIPESTATUS[0]}"
  tar -czf "$OUT/jit-cache.tar.gz" -C /tmp/cache --exclude=./.restored . && ls -la "$OUT/jit-cache.tar.gz"
  pack ;;
prep)
  stamp "accept.sh prep: target, regen, head (${DRAFT_STEPS:-800} steps, TTT ${TTT_LENGTH:-5}), ${SUITE_PROMPTS:-64} suite prompts"
  OUT=$S SUITE_PROMPTS=${SUITE_PROMPTS:-64} DRAFT_STEPS=${DRAFT_STEPS:-800} TTT_LENGTH=${TTT_LENGTH:-5} \
      bash benchmarks/h200/accept.sh prep
  rc=$?
  stamp "prep exited $rc"
  pack
  # the trained target and head, for later sessions (KEEP_STATE=0: not); timeline.txt is in prep.tar.gz and
  # leaves its place among the 8 files a call brings back to the parts
  if [ "$rc" = 0 ] && [ "${KEEP_STATE:-1}" != 0 ]; then tinystate_pack "$W" "$OUT" && rm -f "$OUT/timeline.txt"; fi
  exit $rc ;;
serve)  # rates.yaml replays tune-suite.yaml: RATE_PROMPTS (16) per rate, so both rates fit what SERVE_S leaves
  TUNE_PROMPTS=${RATE_PROMPTS:-16} $DB benchmarks/h200/make_plan.py --decide "$W" $SIMFLAG || exit 3
  serve_run warm 200 "both servers once, 8 prompts, 32 tokens, both kept" --keep-servers
  WARM=$(latest "$W/warm")
  [ -n "$WARM" ] || { pack; exit 7; }
  cp "$WARM/servers.jsonl" "$S/warm-servers.jsonl"
  $DB benchmarks/h200/make_plan.py --endpoints "$W" "$WARM" $SIMFLAG || { stop_kept "$WARM"; pack; exit 7; }
  cp "$W/endpoints.yaml" "$W/rates.yaml" "$S/"
  serve_run endpoints 120 "c8, ${ENDPOINT_REPEATS:-5} repeats, on the kept servers"
  EP=$(latest "$W/endpoints")
  stamp "bench_serving, two rounds per server, c8, on the same servers"
  mkdir -p /tmp/stub/datasets "$S/bench"
  echo 'def load_dataset(*a, **k): raise RuntimeError("datasets is not installed here")' > /tmp/stub/datasets/__init__.py
  for v in baseline eagle3; do
    PORT=$(python3 -c "import json, sys; print([json.loads(l) for l in open(sys.argv[1]) if '\"port\"' in l and json.loads(l)['variant'] == sys.argv[2]][-1]['port'])" "$WARM/servers.jsonl" "$v")
    for r in 1 2; do
      [ "$(left 75)" -gt 25 ] || { stamp "bench_serving $v round $r: no time left"; continue; }
      env PYTHONPATH=/tmp/site:/tmp/stub timeout "$(left 75)" python3 -m sglang.bench_serving --backend sglang-oai-chat \
          --host 127.0.0.1 --port "$PORT" --dataset-name custom --dataset-path "$W/bench.jsonl" \
          --num-prompts "$(wc -l < "$W/bench.jsonl")" --sharegpt-output-len "$MAX_TOKENS" --max-concurrency 8 \
          --model "$W/tiny-stdlib" --tokenizer "$W/tiny-stdlib" --warmup-requests 1 --flush-cache \
          --output-file "$S/bench/bench_serving-$v-r$r.jsonl" 2>&1 | tail -30 > "$S/bench/bench_serving-$v-r$r.txt"
      stamp "bench_serving $v round $r exited ${PIPESTATUS[0]}"
    done
  done
  [ -n "$EP" ] && $DB benchmarks/h200/verdict_vs_bench.py "$EP" "$S/bench" | tee "$S/verdict-vs-bench.md"
  serve_run rates 25 "request rates ${RATES:-4,16} on the same servers"
  RT=$(latest "$W/rates")
  stop_kept "$WARM"
  stamp "kept servers stopped"
  for d in "$EP" "$RT"; do [ -n "$d" ] && tar -czf "$S/$(basename "$(dirname "$d")")-run.tar.gz" -C "$(dirname "$d")" "$(basename "$d")"; done
  tar -czf "$S/warm-run.tar.gz" -C "$(dirname "$WARM")" "$(basename "$WARM")"
  pack ;;
verdict)
  $DB benchmarks/h200/make_plan.py --decide "$W" $SIMFLAG || exit 3
  cp "$W/decide.yaml" "$S/"
  stamp "draftbench run: baseline vs eagle3, c1 and c8, $REPEATS repeats, $MAX_TOKENS tokens, min_steady_s $MIN_STEADY_S"
  verdict_run "$W/decide.yaml" "$W/runs" "${RUN_S:-450}" 2>&1 | tee "$S/draftbench-run.log"
  stamp "draftbench run exited ${PIPESTATUS[0]}"
  RUN=$(latest "$W/runs")
  [ -n "$RUN" ] || { pack; exit 7; }
  [ -f "$RUN/summary.csv" ] && $DB -m harness.cli summary "$RUN" > "$S/summary-table.txt" 2>&1
  stamp "bench_serving, two rounds per server, on the kept servers"
  OUT=$S REPEATS=2 timeout -s TERM -k 10 "${BENCH_S:-110}" bash benchmarks/h200/bench_serving.sh \
      "$RUN" "$W/bench.jsonl" "$(wc -l < "$W/bench.jsonl")" "$MAX_TOKENS" "$W/tiny-stdlib"
  stamp "bench_serving exited $?"
  stop_kept "$RUN"  # bench_serving.sh stops them too, unless its time ran out: never leave them to tune
  [ -f "$RUN/requests.csv" ] && gzip -kf "$RUN/requests.csv"
  for f in summary.csv phases.csv requests.csv.gz; do [ -f "$RUN/$f" ] && cp "$RUN/$f" "$S/"; done
  tar -czf "$S/run.tar.gz" -C "$(dirname "$RUN")" --exclude=requests.csv "$(basename "$RUN")"
  pack ;;
decided)  # draftbench run --until-decided: baseline against the tune stage's pick at c8, on decide.yaml's suite
  $DB benchmarks/h200/make_plan.py --decide "$W" $SIMFLAG || exit 3
  T=$(latest "$W/tune"); [ -n "$T" ] || { echo "decide.sh decided: no tune directory in $W/tune: run the tune stage first"; exit 6; }
  $DB benchmarks/h200/make_plan.py --decided "$W" "$T" || exit 3
  cp "$W/decided.yaml" "$S/"
  stamp "draftbench run decided.yaml --until-decided"
  timeout -s TERM -k 30 "${DECIDED_S:-540}" $DB -m harness.cli run "$W/decided.yaml" --results-dir "$W/decided" \
      --until-decided 2>&1 | grep -v "requests done" | tee "$S/decided-run.log"
  stamp "draftbench run --until-decided exited ${PIPESTATUS[0]}"
  RUN=$(latest "$W/decided")
  [ -n "$RUN" ] || { pack; exit 7; }
  $DB -m harness.cli summary "$RUN" > "$S/summary-table.txt" 2>&1
  [ -f "$RUN/requests.csv" ] && gzip -kf "$RUN/requests.csv"
  tar -czf "$S/decided-run.tar.gz" -C "$(dirname "$RUN")" --exclude=requests.csv "$(basename "$RUN")"
  pack ;;
tune)
  $DB benchmarks/h200/make_plan.py --decide "$W" $SIMFLAG || exit 3
  cp "$W/tune.yaml" "$S/"
  stamp "draftbench tune eagle3 --concurrency $TUNE_CONC --steps $TUNE_STEPS --budget $TUNE_BUDGET"
  tune_run "$W/tune.yaml" "$W/tune" "${TUNE_S:-570}" 2>&1 | grep -v " requests$" | tee "$S/tune.log"
  stamp "draftbench tune exited ${PIPESTATUS[0]}"
  T=$(latest "$W/tune")
  [ -n "$T" ] && (cd "$T" && find . -name requests.csv -exec gzip -kf {} \;)
  [ -n "$T" ] && tar -czf "$S/tune-dir.tar.gz" -C "$(dirname "$T")" --exclude=requests.csv "$(basename "$T")"
  [ -n "$T" ] && for f in tune.csv speculation_profile.json; do find "$T" -name "$f" -exec cp {} "$S/" \; ; done
  pack ;;
aa)  # no training needed: the 8B-shaped random-weight target against a copy of itself and against itself with
  # CUDA graphs off, run --until-decided at c8, all servers up side by side (make_plan.py --aa); one call
  $DB benchmarks/h200/make_plan.py --aa "$W" || exit 3
  cp "$W/aa.yaml" "$S/"
  stamp "draftbench run aa.yaml --until-decided"
  timeout -s TERM -k 20 "${AA_S:-500}" $DB -m harness.cli run "$W/aa.yaml" --results-dir "$W/aa" 2>&1 |
    grep -v "requests done" | tee "$S/aa-run.log"
  stamp "draftbench run exited ${PIPESTATUS[0]}"
  RUN=$(latest "$W/aa")
  [ -n "$RUN" ] || { pack; exit 7; }
  $DB -m harness.cli summary "$RUN" > "$S/summary-table.txt" 2>&1
  [ -f "$RUN/requests.csv" ] && gzip -kf "$RUN/requests.csv"
  tar -czf "$S/aa-run.tar.gz" -C "$(dirname "$RUN")" --exclude=requests.csv --exclude='server-*.log' "$(basename "$RUN")"
  pack ;;
resume)  # draftbench tune --resume: RESUME_BUDGET (5m) more on what the tune stage left (predicted configs,
  # undecided rows), on the same machine (the first EAGLE-3 decode's compile is paid by then)
  OF=${RESUME_OF:-tune}  # RESUME_OF=crossover: the crossover stage's tune (its step costs, bisection, sides)
  T=$(latest "$W/$OF"); [ -n "$T" ] || { echo "decide.sh resume: no tune directory in $W/$OF: run the $OF stage first"; exit 6; }
  stamp "draftbench tune --resume $(basename "$T") --budget ${RESUME_BUDGET:-5m}"
  timeout -s TERM -k 30 "${RESUME_S:-540}" $DB -m harness.cli tune --resume "$T" --budget "${RESUME_BUDGET:-5m}" 2>&1 |
    grep -v " requests$" | tee "$S/resume.log"
  stamp "draftbench tune --resume exited ${PIPESTATUS[0]}"
  (cd "$T" && find . -name requests.csv -exec gzip -kf {} \;)
  tar -czf "$S/tune-dir.tar.gz" -C "$(dirname "$T")" --exclude=requests.csv "$(basename "$T")"
  for f in tune.csv speculation_profile.json tune_report.txt crossover.csv schedule.json crossover.png; do
    find "$T" -maxdepth 1 -name "$f" -exec cp {} "$S/" \; ; done
  pack ;;
crossover)  # where the trained head stops paying, verified on both sides; the schedule per batch band
  $DB benchmarks/h200/make_plan.py --decide "$W" $SIMFLAG || exit 3
  cp "$W/tune.yaml" "$S/"
  stamp "draftbench tune eagle3 --concurrency auto --max-batch ${CROSS_MAX_BATCH:-64} --steps ${CROSS_STEPS:-3,5}"
  timeout -s TERM -k 30 "${CROSS_S:-570}" $DB -m harness.cli tune "$W/tune.yaml" --variant eagle3 --concurrency auto \
      --max-batch "${CROSS_MAX_BATCH:-64}" --steps "${CROSS_STEPS:-3,5}" --graphs on --budget "${CROSS_BUDGET:-9m}" \
      --mix "${CROSS_MIX:-1:4,32:1}" --cost-tokens "$TUNE_TOKENS" --results-dir "$W/crossover" 2>&1 |
    grep -v " requests$" | tee "$S/crossover.log"
  stamp "draftbench tune --concurrency auto exited ${PIPESTATUS[0]}"
  T=$(latest "$W/crossover")
  [ -n "$T" ] && (cd "$T" && find . -name requests.csv -exec gzip -kf {} \;)
  [ -n "$T" ] && tar -czf "$S/crossover-dir.tar.gz" -C "$(dirname "$T")" --exclude=requests.csv "$(basename "$T")"
  [ -n "$T" ] && for f in tune.csv crossover.csv schedule.json speculation_profile.json tune_report.txt crossover.png \
      tune_mix.csv tune_load.csv; do find "$T" -maxdepth 1 -name "$f" -exec cp {} "$S/" \; ; done
  pack ;;
lossless)  # draftbench's lossless audit of the trained head (docs/metrics.md, lossless audit)
  $DB benchmarks/h200/make_plan.py --decide "$W" $SIMFLAG || exit 3
  cp "$W/lossless.yaml" "$S/"
  stamp "draftbench run lossless.yaml: c1 and c8 once, $MAX_TOKENS tokens, then the audit on the baseline's server"
  timeout -s TERM -k 30 "${LOSSLESS_S:-480}" $DB -m harness.cli run "$W/lossless.yaml" --results-dir "$W/lossless" 2>&1 |
    grep -v "requests done" | tee "$S/lossless-run.log"
  stamp "draftbench run exited ${PIPESTATUS[0]}"
  RUN=$(latest "$W/lossless")
  [ -n "$RUN" ] || { pack; exit 7; }
  $DB -m harness.cli summary "$RUN" --wide > "$S/summary-table.txt" 2>&1
  $DB benchmarks/h200/lossless_report.py "$RUN" --json "$S/lossless-report.json" | tee "$S/lossless-report.txt"
  [ -f "$RUN/requests.csv" ] && gzip -kf "$RUN/requests.csv"
  tar -czf "$S/lossless-run.tar.gz" -C "$(dirname "$RUN")" --exclude=requests.csv --exclude='server-*.log' "$(basename "$RUN")"
  pack ;;
*) echo "unknown stage $STAGE"; exit 2 ;;
esac
