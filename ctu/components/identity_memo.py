"""`IdentityMemo`: a value computed once per object, for objects that are handed over again and again (a domain
gives every episode the same list of tool schemas)."""

from __future__ import annotations

from collections.abc import Callable


class IdentityMemo[K, V]:
    """Values computed once per object for the last `size` objects, keyed by the object's identity: no hashing or
    comparing of what may be a long list, so an equal but new object gets its value computed anew. Each object is
    held while its value is kept, so its id cannot pass to another object meanwhile. Do not change an object once
    its value is kept."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._held: dict[int, tuple[K, V]] = {}

    def get(self, key: K, compute: Callable[[K], V]) -> V:
        """`compute(key)`, or what it gave for this very object before; past `size` objects, the oldest is
        forgotten."""
        held = self._held.get(id(key))
        if held is None or held[0] is not key:
            if held is None and len(self._held) >= self.size:
                del self._held[next(iter(self._held))]
            held = self._held[id(key)] = (key, compute(key))
        return held[1]

    def __len__(self) -> int:
        return len(self._held)
