#!/usr/bin/env bash
# Reruns the examples of docs/workloads.md's "Where acceptance holds" on the SGLang stand-in, in DIR (default: a
# new temporary directory), and prints each command with what it printed. Needs draftbench installed with the
# [synthetic] extra (the tokenizers package) and, for acceptance_by_context.png, matplotlib ([plots]), with
# that environment's python3 first on PATH (the stand-in and the drafter written below run on it).
# The stand-in draws its accepted drafts at random and runs on this machine's clock: numbers move a little
# from one run to the next, the dependencies on context and sampler do not.
#
#   docs/workloads/examples.sh [DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$(mktemp -d)}
mkdir -p "$dir"
cd "$dir"
cp "$here/context.yaml" "$here/raw.yaml" "$here/tune.yaml" .
echo "# in $dir" >&2

show() {  # the command as typed, then its stdout and stderr (less the run's progress counter)
  echo "\$ $*"
  "$@" 2>&1 | grep -v "requests done" || true
  echo
}

# the raw-text plan first: its check writes the demo's checkpoints (with the stand-in's tokenizer.json)
show draftbench check raw.yaml --results-dir results
show draftbench run raw.yaml --results-dir results
target=results/.demo-target/demo-models/target

# long prompts of exactly N tokens by the stand-in target's own tokenizer
show draftbench import-suite --synthetic --tokens 4096,16384 --tokenizer "$target" --count 3 --out long.yaml
show draftbench check context.yaml --results-dir results
show draftbench run context.yaml --results-dir results

# the model's own sampler, suggested as an arm
echo '{"do_sample": true, "temperature": 0.6, "top_p": 0.95}' > "$target/generation_config.json"
show draftbench check raw.yaml --results-dir results
rm "$target/generation_config.json"

# tune by context bucket: a drafter with a 7-position profile, trained (the stand-in says) to 64k
python3 - <<'EOF'
from pathlib import Path

from harness.cli.demo import TARGET_HIDDEN, VOCAB, _copy_rope
from harness.sim.sglang.fixtures import write_eagle3_drafter

root = Path("results/.demo-target/demo-models")
write_eagle3_drafter(root / "deep-eagle3", target_hidden_size=TARGET_HIDDEN, hidden_size=TARGET_HIDDEN,
                     vocab_size=VOCAB, draft_vocab_size=256, num_attention_heads=4, num_key_value_heads=2,
                     max_position_embeddings=65536, per_position=[0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6])
_copy_rope(root / "target" / "config.json", root / "deep-eagle3" / "config.json")
EOF
show draftbench tune tune.yaml --steps 1,2,3,4,5,6,7 --results-dir results

# SPEED-Bench rows as its configs hold them (one still a placeholder, one two-turn)
cat > qualitative.jsonl <<'EOF'
{"question_id": "qual-coding-0001", "category": "coding", "sub_category": "python", "turns": ["Write a function that merges two sorted lists."], "source": "speed-bench", "src_id": "c1", "difficulty": "easy", "multiturn": false}
{"question_id": "qual-writing-0007", "category": "writing", "sub_category": "story", "turns": ["Write the opening of a mystery story.", "Now continue it from the detective's view."], "source": "speed-bench", "src_id": "w7", "difficulty": "medium", "multiturn": true}
{"question_id": "qual-summarization-0003", "category": "summarization", "sub_category": "news", "turns": ["FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"], "source": "abisee/cnn_dailymail", "src_id": "a3f", "difficulty": "medium", "multiturn": false}
{"question_id": "tp1k-low-0001", "category": "low_entropy", "sub_category": "textsort", "turns": ["Sort these book sections into order: ..."], "source": "AdaLEval/textsort", "src_id": "ts_1", "difficulty": "hard", "multiturn": false}
EOF
show draftbench import-suite qualitative.jsonl --out speed-bench.yaml
