"""Stand-in for an SGLang 0.5.15.post1 server (``python -m harness.sim <launch_server flags>``).

Modules: ``args`` (the real flag set and ServerArgs resolution; data in ``flags_table``), ``model`` (pure
timing/acceptance/text simulation), ``engine`` (continuous-batching scheduler and log windows), ``logs``
(log line formats), ``metrics`` (Prometheus text), ``app``/``openai_api``/``responses``/``state`` (HTTP),
``startup`` + ``run`` (boot sequence, crashes, serving), ``fixtures`` (fake target and draft directories).
"""
