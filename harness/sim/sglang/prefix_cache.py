"""The stand-in's radix cache: which prompt prefixes a request finds cached (flushed by /flush_cache)."""

from __future__ import annotations


class PrefixCache:
    """Radix-cache stand-in: rolling hashes of every prompt prefix seen since the last flush."""

    def __init__(self, limit: int = 400_000):
        self.seen: set[int] = set()
        self.limit = limit

    @staticmethod
    def _rolling(ids: list[int]) -> list[int]:
        h, out = 1469598103934665603, []
        for t in ids:
            h = ((h ^ t) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
            out.append(h)
        return out

    def match_and_insert(self, ids: list[int]) -> int:
        hashes = self._rolling(ids)
        cached = 0
        for i, h in enumerate(hashes[:-1]):  # the last prompt token is always recomputed
            if h not in self.seen:
                break
            cached = i + 1
        if len(self.seen) + len(hashes) > self.limit:
            self.seen.clear()
        self.seen.update(hashes)
        return cached

    def reset(self) -> None:
        self.seen.clear()
