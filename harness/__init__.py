"""draftbench: benchmark EAGLE-3 speculative decoding on SGLang (core package)."""

__version__ = "0.1.0"
