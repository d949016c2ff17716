"""Tables of named entries (algorithms, models, datasets): the one registry type ampfl's built-ins and a
user's own entries share.

An entry is an object, or a ``"package.module:attribute"`` reference imported the first time the entry is
used. References keep a registry free of imports: the module that declares the table imports none of its
entries, so an entry's module may import the table's package without forming an import cycle, and reading
one entry never imports the others.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def resolve_reference(reference: str, *, parameter: str) -> Any:
    """Import ``"package.module:attribute"`` (dots after the colon walk attributes).

    Raises:
        ValueError: naming ``parameter`` for a malformed reference, a missing module or a missing attribute.
    """
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"{parameter} must be 'package.module:attribute'. Found {reference!r}.")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"{parameter}: cannot import module {module_name!r} ({err}).") from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ValueError(f"{parameter}: module {module_name!r} has no attribute {attribute!r}.") from None
    return target


class Registry(Mapping[str, T], Generic[T]):
    """Named entries of one kind, resolved lazily.

    ``registry[name]`` imports a reference once and keeps the object; ``name in registry`` and iteration read
    the names only. :meth:`lookup` is ``[]`` with the one-line error a user sees for an unknown name.
    """

    def __init__(self, kind: str, entries: Mapping[str, T | str] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, T | str] = {}
        for name, entry in (entries or {}).items():
            self.register(name, entry)

    def register(self, name: str, entry: T | str, *, replace: bool = False) -> None:
        """Add ``entry`` under ``name`` (a reference string or the object itself).

        Raises:
            ValueError: for an empty name, or a name already taken unless ``replace``.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} name must be a non-empty string. Found {name!r}.")
        if name in self._entries and not replace:
            raise ValueError(f"{self.kind} {name!r} is already registered (pass replace=True to replace it).")
        self._entries[name] = entry

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a user's entry, e.g. after a test)."""
        self._entries.pop(name, None)

    def lookup(self, name: str) -> T:
        """The entry for ``name``.

        Raises:
            ValueError: ``"<kind> must be one of [...]. Found 'name'."`` for an unknown name.
        """
        if name not in self._entries:
            raise ValueError(f"{self.kind} must be one of {sorted(self._entries)}. Found {name!r}.")
        return self[name]

    def __getitem__(self, name: str) -> T:
        entry = self._entries[name]
        if isinstance(entry, str):
            resolved: T = resolve_reference(entry, parameter=f"{self.kind} {name!r}")
            self._entries[name] = resolved
            return resolved
        return entry

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self._entries)})"
