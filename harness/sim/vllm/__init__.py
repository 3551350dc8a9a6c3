"""Stand-in for a vLLM 0.33.0 OpenAI server (``python -m harness.sim.vllm serve MODEL <flags>``): vLLM's
endpoints (/health, /v1/models, /version, /metrics, /v1/chat/completions, /v1/completions; /server_info and
/reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1), its SSE framing, its Prometheus counters and its
log lines. Step times and acceptance come from the SGLang stand-in's pure model (harness.sim.sglang.model).

Modules: ``args`` (the flags draftbench passes, argparse errors for others), ``server`` (HTTP + generation),
``logs`` (vLLM's log line formats).
"""
