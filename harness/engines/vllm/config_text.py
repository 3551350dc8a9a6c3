"""What a vLLM server says about its speculative config in the text of its VllmConfig (`VllmConfig.__str__`,
config/vllm.py; the same text follows "Initializing a V1 LLM engine (vX) with config:" in its log and is
/server_info's `vllm_config` in dev mode, 0.26.0): `speculative_config=None`, or
`speculative_config=SpeculativeConfig(method='eagle3', model='/path/to/head', num_spec_tokens=3)`
(`SpeculativeConfig.__repr__`, config/speculative.py; model None for ngram and suffix). Read into the
server facts SGLang's /get_server_info gives (server_speculative_*), so that an arm draftbench did not start
is checked against the plan the same way on both engines. vLLM drafts chains: top-k 1, K + 1 tokens a step."""

from __future__ import annotations

import re
from typing import Any

from harness.engines.vllm.launch import METHODS

_SPEC = re.compile(r"speculative_config=(?:None|SpeculativeConfig\(method='(?P<method>[^']*)', "
                   r"model=(?:'(?P<model>[^']*)'|None), num_spec_tokens=(?P<k>\d+|None)\))")
ALGORITHMS = {method: algorithm for algorithm, method in METHODS.items()}


def spec_facts(config_text: object) -> dict[str, Any]:
    """server_speculative_* facts from a VllmConfig text; {} when the text says nothing about it (absent,
    or another format): unknown, which is not the same as a server that does not speculate."""
    if not isinstance(config_text, str):
        return {}
    m = _SPEC.search(config_text)
    if m is None:
        return {}
    if m.group("method") is None:
        return {"server_speculative_algorithm": None}
    method = m.group("method")
    out: dict[str, Any] = {"server_speculative_algorithm": ALGORITHMS.get(method, method.upper()),
                           "server_speculative_draft_model_path": m.group("model")}
    if m.group("k") not in (None, "None"):
        k = int(m.group("k"))
        out.update(server_speculative_num_steps=k, server_speculative_eagle_topk=1,
                   server_speculative_num_draft_tokens=k + 1)
    return out
