# Sourced by decide.sh and vllm.sh: the trained tiny target and its EAGLE-3 head kept from one session to the
# next, so that a session's device time goes to the stages and not to another `prep` (~450 s of ~1,500).
#   tinystate_pack W DIR    after prep: the target, the head (weights and config, not the optimizer state), the
#                           plan and the suites, as DIR/tinystate.partNN (15 MiB each: a device call brings
#                           back 8 files of at most 16 MiB) and DIR/tinystate.sha256
#   tinystate_stash         copy whatever parts this call carried (.tinystate/, ignored by git) to
#                           /tmp/tinystate, where they wait for the rest: a call carries at most 64 MiB, the
#                           bundle alone 53, so the parts come over consecutive calls on a warm machine
#   tinystate_restore W     once every part the sha256 file lists is there and checks, unpack into W (unless W
#                           already holds a trained head); says what is missing otherwise
# Here, after the prep call: mkdir -p .tinystate && cp FILES_AT/tinystate.* .tinystate/
TINYSTATE_TMP=${TINYSTATE_TMP:-/tmp/tinystate}

tinystate_pack() {  # W DIR
  local w=$1 dir=$2 ck
  ck=$(readlink "$w/draft") || { echo "tinystate: $w/draft is not the link prep makes"; return 1; }
  ck=${ck#"$w"/}
  tar -czf - -C "$w" --exclude=training_state.pt tiny-stdlib "$ck" draft plan.yaml suite.yaml bench.jsonl \
      $(cd "$w" && ls regen-in.jsonl regen.jsonl 2>/dev/null) | split -b 15m -d -a 2 - "$dir/tinystate.part" \
      || return 1
  (cd "$dir" && sha256sum tinystate.part* > tinystate.sha256)
  echo "tinystate: $(ls "$dir"/tinystate.part* | wc -l) parts, $(cat "$dir"/tinystate.part* | wc -c) bytes"
}

tinystate_stash() {
  mkdir -p "$TINYSTATE_TMP"
  [ -d .tinystate ] && cp .tinystate/tinystate.* "$TINYSTATE_TMP/" 2>/dev/null
  echo "tinystate: parts here: $(cd "$TINYSTATE_TMP" && ls tinystate.part* 2>/dev/null | tr '\n' ' ')"
}

tinystate_restore() {  # W
  local w=$1 sums=$TINYSTATE_TMP/tinystate.sha256 missing
  [ -e "$w/draft/model.safetensors" ] && return 0
  [ -f "$sums" ] || { echo "tinystate: no tinystate.sha256 carried"; return 1; }
  missing=$(cd "$TINYSTATE_TMP" && awk '{print $2}' tinystate.sha256 | while read -r p; do
    [ -f "$p" ] || printf '%s ' "$p"; done)
  [ -z "$missing" ] || { echo "tinystate: waiting for $missing"; return 1; }
  (cd "$TINYSTATE_TMP" && sha256sum --quiet -c tinystate.sha256) || { echo "tinystate: a part is damaged"; return 1; }
  mkdir -p "$w" && cat "$TINYSTATE_TMP"/tinystate.part* | tar -xzf - -C "$w" || return 1
  ln -sfn "$w/ckpt/$(basename "$(readlink "$w/draft")")" "$w/draft"  # the link as prep made it, in this W
  echo "tinystate: restored the trained target and head into $w ($(readlink "$w/draft"))"
}
