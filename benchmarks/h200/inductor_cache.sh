# Sourced by the H200 scripts after .devbundle/dev_setup.sh. SGLang 0.5.15's EAGLE path runs @torch.compile'd
# helpers (speculative/spec_utils.py, triton_ops/cache_locs.py) at its first decode, outside the CUDA graphs:
# most likely the 100-120 s "first decode" of a fresh machine (not confirmed there yet). Inductor's own cache
# (default /tmp/torchinductor_$USER) goes under /tmp/cache with the JIT caches, which the warm stages bring
# back as jit-cache.tar.gz for .devbundle/cache/ (dev_setup.sh restores it)
export TORCHINDUCTOR_CACHE_DIR=/tmp/cache/inductor
