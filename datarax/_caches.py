"""Every cache the library keeps, in one registry: each has a bound, and
`clear_caches` empties them all.

A cache here only saves work that its key fully determines (a batch signature and a
sharding, a dtype and a device, a module's graph): what it returns for a key is what
computing it afresh would give. Marks that hosts must keep in step (which batch
signatures a sharder has checked with the other hosts) are not caches: they live on
the sharder or pipeline that made them, and `clear_caches` leaves them alone.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

Value = TypeVar("Value")
_registry: dict[str, BoundedCache[Any]] = {}


def _nbytes(value: Any) -> int:
    """The bytes of the arrays in `value` (an array, or a tuple or list of them)."""
    parts = value if isinstance(value, (tuple, list)) else (value,)
    return sum(int(getattr(part, "nbytes", 0)) for part in parts)


class BoundedCache(Generic[Value]):
    """A mapping of at most `maxsize` entries that drops its oldest beyond that, and,
    with `maxbytes`, beyond that many bytes of arrays (the newest entry always stays).

    Reads take no lock (a lookup is one dict access, on the hot path of every `shard`);
    writes do. Creating one registers it under `name`, so `clear_caches` reaches it.

    Example:
        >>> cache = BoundedCache("example", maxsize=2)
        >>> cache.put("a", 1); cache.put("b", 2); cache.put("c", 3)
        >>> cache.get("a"), cache.get("c"), len(cache)
        (None, 3, 2)
        >>> sized = BoundedCache("example in bytes", maxsize=10, maxbytes=24)
        >>> sized.put("a", np.zeros(2)); sized.put("b", np.zeros(1)); sized.put("c", np.zeros(1))
        >>> sized.get("a") is None, len(sized)  # 16 + 8 + 8 bytes: the oldest went
        (True, 2)
    """

    def __init__(self, name: str, maxsize: int, maxbytes: int | None = None):
        if name in _registry:
            raise ValueError(f"A cache named {name!r} already exists.")
        self.name, self.maxsize, self.maxbytes = name, maxsize, maxbytes
        self._entries: dict[Hashable, Value] = {}
        self._bytes: dict[Hashable, int] = {}
        self._lock = threading.Lock()
        _registry[name] = self

    def get(self, key: Hashable) -> Value | None:
        """The value stored under `key`, or None. Raises TypeError if `key` is unhashable."""
        return self._entries.get(key)

    def put(self, key: Hashable, value: Value) -> None:
        """Stores `value`, dropping the oldest entries beyond `maxsize`."""
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = value
            if self.maxbytes is not None:
                self._bytes[key] = _nbytes(value)
            while len(self._entries) > self.maxsize or (
                self.maxbytes is not None
                and len(self._entries) > 1
                and sum(self._bytes.values()) > self.maxbytes
            ):
                oldest = next(iter(self._entries))
                del self._entries[oldest]
                self._bytes.pop(oldest, None)

    def pop(self, key: Hashable) -> None:
        """Forgets `key` (nothing happens when it is not stored)."""
        with self._lock:
            self._entries.pop(key, None)
            self._bytes.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes.clear()

    def __len__(self) -> int:
        return len(self._entries)


def cached(name: str, maxsize: int) -> Callable[[Callable[..., Value]], Callable[..., Value]]:
    """A decorator: the function's results by its (hashable) arguments, in a `BoundedCache`."""

    def decorate(function: Callable[..., Value]) -> Callable[..., Value]:
        cache: BoundedCache[tuple[Value]] = BoundedCache(name, maxsize)

        @functools.wraps(function)
        def wrapper(*args: Any) -> Value:
            hit = cache.get(args)
            if hit is None:
                hit = (function(*args),)
                cache.put(args, hit)
            return hit[0]

        return wrapper

    return decorate


def cache_sizes() -> dict[str, tuple[int, int]]:
    """Every registered cache's (entries, bound), by name."""
    return {name: (len(cache), cache.maxsize) for name, cache in sorted(_registry.items())}


def clear_caches() -> None:
    """Empties every cache the library keeps (plans, compiled transforms, dtype checks).

    Nothing changes in what any call returns; the next calls only redo the work the
    caches saved. Safe to call on one host alone: no cache is shared between hosts.

    Example:
        >>> import datarax
        >>> datarax.clear_caches()
        >>> all(entries == 0 for entries, _ in cache_sizes().values())
        True
    """
    for cache in _registry.values():
        cache.clear()
