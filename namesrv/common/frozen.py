"""A dict nobody can change: what a shared object hands out instead of its own dict."""

from __future__ import annotations

from typing import Any, NoReturn, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class FrozenDict(dict[K, V]):
    """A dict whose every mutator raises TypeError; reads, equality with a plain dict, JSON and
    msgpack encoding, and pickling (Ray) are a dict's, at a dict's speed (no proxy in between).
    What the NameServer's cached routes carry, so no in-process caller can change what the next one
    gets. `copy()` gives a plain dict to change."""

    __slots__ = ()

    def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(f"{type(self).__name__} is read-only: copy it (dict(...)) to change it")

    __setitem__ = _read_only
    __delitem__ = _read_only
    __ior__ = _read_only
    clear = _read_only
    pop = _read_only
    popitem = _read_only
    setdefault = _read_only
    update = _read_only

    def copy(self) -> dict[K, V]:
        return dict(self)

    def __reduce__(self) -> tuple[type[FrozenDict[K, V]], tuple[dict[K, V]]]:
        return type(self), (dict(self),)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict.__repr__(self)})"
