"""Copy-on-access databases: one shared, read-only base per domain and a small overlay per episode.

tau2 gives every environment its own database loaded from JSON (retail: 57-68 ms and ~11 MB each, airline
~24 MB), although an episode touches a handful of records. Here a domain loads its database once
(`BaseDatabase`, shared by every episode of the process and never written) and each episode gets an
`OverlayDatabase` whose tables (`OverlayTable`) hold only the records the episode has looked up by key:

- ``table[key]`` (and ``get``) copies the base record into the overlay on first access, so tau2's tools may
  mutate what they fetch in place (`order.status = ...`, `flight.dates[d].available_seats[c] -= n`);
- ``table[key] = record`` adds to the overlay, ``del table[key]``/``pop`` hide a base record;
- iteration (``values()``, ``items()``, ``for key in table``) yields the overlay's record where there is one
  and the shared base record otherwise, without copying: tau2's retail and airline tools iterate tables only
  to search them (`find_user_id_by_email`, `_search_direct_flight`, `list_all_product_types`). A tool that
  mutated a record reached by iteration would change the shared base; the parity suite checks the base's
  hash is unchanged after every case (tests/env/test_gold_replay.py).

A reset is then O(1) and an episode's memory O(records touched). Two final states compare by their touched
records (`DatabaseState`): tau2 compares databases by the SHA-256 of ``json.dumps(db.model_dump(),
sort_keys=True, default=str)`` (`tau2.utils.get_dict_hash`), which is equal exactly when every record's own
canonical JSON is equal, and records neither state touched are the base's in both. `OverlayDatabase.model_dump`
still materialises the whole database, so tau2's `get_db_hash` on an overlay environment is tau2's hash.
"""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

_MISSING = None
"""The canonical value of a record a state does not have (deleted, or never existed)."""


def canonical_json(record: object) -> str:
    """A record's JSON as tau2 hashes it: ``json.dumps(model_dump(), sort_keys=True, default=str)``."""
    data = record.model_dump() if hasattr(record, "model_dump") else record
    return json.dumps(data, sort_keys=True, default=str)


class BaseDatabase:
    """A domain's database, loaded once and shared read-only by every episode of the process.

    Args:
        db: the tau2 database (a `tau2.environment.db.DB`); its dict-valued fields are its tables. Nothing may
            write to it afterwards.

    Copies and canonical JSON of base records are made on first need and cached (pickled bytes: unpickling
    a retail order takes ~15 us against ~30 us for `deepcopy`, and reproduces the record exactly).
    """

    def __init__(self, db: BaseModel) -> None:
        self.db = db
        self.db_type = type(db)
        self.tables: dict[str, dict[str, object]] = {}
        self.scalars: dict[str, object] = {}
        for name in type(db).model_fields:
            value = getattr(db, name)
            if isinstance(value, dict):
                self.tables[name] = value
            else:
                self.scalars[name] = value
        self._pickled: dict[tuple[str, str], bytes] = {}
        self._canonical: dict[tuple[str, str], str | None] = {}

    def copy(self, table: str, key: str) -> object:
        """A private deep copy of base record `key` of `table`.

        Raises:
            KeyError: the base has no such record.
        """
        data = self._pickled.get((table, key))
        if data is None:
            data = pickle.dumps(self.tables[table][key], protocol=pickle.HIGHEST_PROTOCOL)
            self._pickled[(table, key)] = data
        return pickle.loads(data)

    def canonical(self, table: str, key: str) -> str | None:
        """The canonical JSON of base record `key` of `table` (None when the base has no such record)."""
        marker = (table, key)
        if marker not in self._canonical:
            record = self.tables[table].get(key)
            self._canonical[marker] = None if record is None else canonical_json(record)
        return self._canonical[marker]

    def hash(self) -> str:
        """tau2's hash of the base database (`get_dict_hash(db.model_dump())`): to check nothing wrote to it."""
        from tau2.utils import get_dict_hash

        return get_dict_hash(self.db.model_dump())

    def overlay(self) -> OverlayDatabase:
        """A fresh episode database over this base (nothing copied yet)."""
        return OverlayDatabase(self)


class OverlayTable(MutableMapping[str, object]):
    """One table of an episode's database: the records it touched over the shared base table.

    Shapes: keys are record ids (str), values tau2 pydantic records. Iteration order is tau2's (base keys,
    then keys added by the episode in insertion order).
    """

    __slots__ = ("_base", "_name", "_table", "deleted", "own")

    def __init__(self, base: BaseDatabase, name: str) -> None:
        self._base = base
        self._name = name
        self._table = base.tables[name]
        self.own: dict[str, object] = {}
        """Records copied on access or added by the episode."""
        self.deleted: set[str] = set()
        """Base keys the episode removed."""

    def __getitem__(self, key: str) -> object:
        record = self.own.get(key)
        if record is not None or key in self.own:
            return record
        if key in self.deleted or key not in self._table:
            raise KeyError(key)
        record = self._base.copy(self._name, key)
        self.own[key] = record
        return record

    def __setitem__(self, key: str, value: object) -> None:
        self.own[key] = value
        self.deleted.discard(key)

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self.own.pop(key, None)
        if key in self._table:
            self.deleted.add(key)

    def __contains__(self, key: object) -> bool:
        return key in self.own or (key in self._table and key not in self.deleted)

    def __iter__(self) -> Iterator[str]:
        if not self.own and not self.deleted:  # untouched: the base table's own iterator
            return iter(self._table)
        return self._merged_keys()

    def _merged_keys(self) -> Iterator[str]:
        deleted = self.deleted
        for key in self._table:
            if key not in deleted:
                yield key
        for key in self.own:
            if key not in self._table:
                yield key

    def __len__(self) -> int:
        added = sum(1 for key in self.own if key not in self._table)
        return len(self._table) - len(self.deleted) + added

    def values(self) -> Iterator[object]:  # type: ignore[override]
        """Current records, without copying untouched ones (read them, do not mutate them)."""
        if not self.own and not self.deleted:
            return iter(self._table.values())
        return (record for _, record in self._merged_items())

    def items(self) -> Iterator[tuple[str, object]]:  # type: ignore[override]
        """``(key, record)`` pairs, without copying untouched records (read them, do not mutate them)."""
        if not self.own and not self.deleted:
            return iter(self._table.items())
        return self._merged_items()

    def _merged_items(self) -> Iterator[tuple[str, object]]:
        """Base records not deleted, each replaced by the episode's copy where it has one, then added records.

        `own` and `deleted` never share a key (`__setitem__` and `__delitem__` keep them apart)."""
        own, deleted, table = self.own, self.deleted, self._table
        for key, record in table.items():
            if key in own:
                yield key, own[key]
            elif key not in deleted:
                yield key, record
        for key, record in own.items():
            if key not in table:
                yield key, record

    def touched(self) -> set[str]:
        """Keys whose record may differ from the base: copied, added or deleted."""
        return set(self.own) | self.deleted

    def canonical(self, key: str) -> str | None:
        """The canonical JSON of the current record for `key` (None if the table has none)."""
        if key in self.own:
            return canonical_json(self.own[key])
        if key in self.deleted:
            return _MISSING
        return self._base.canonical(self._name, key)

    def materialize(self) -> dict[str, object]:
        """The whole table as a plain dict (base records shared, not copied), in tau2's key order."""
        return dict(self.items())


@dataclass(frozen=True)
class DatabaseState:
    """A final database state, as the records that differ from the base may: ``{(table, key): canonical
    JSON or None}`` plus the canonical JSON of the non-table fields. Cheap to keep per task (gold states)."""

    records: dict[tuple[str, str], str | None]
    scalars: str

    def matches(self, database: OverlayDatabase) -> bool:
        """Whether `database` is in this state, i.e. tau2's hashes of the two would be equal."""
        if canonical_json(database.scalar_values()) != self.scalars:
            return False
        keys = set(self.records)
        for name, table in database.tables.items():
            keys.update((name, key) for key in table.touched())
        base = database.base
        for name, key in keys:
            mine = database.tables[name].canonical(key)
            theirs = self.records[(name, key)] if (name, key) in self.records else base.canonical(name, key)
            if mine != theirs:
                return False
        return True


class OverlayDatabase:
    """An episode's database: tau2's tools see a `tau2.environment.db.DB` with the same table attributes.

    Attributes:
        base: the shared `BaseDatabase`.
        tables: ``{name: OverlayTable}``, also reachable as attributes (``db.orders``).
    """

    def __init__(self, base: BaseDatabase) -> None:
        self.base = base
        self.tables: dict[str, OverlayTable] = {name: OverlayTable(base, name) for name in base.tables}
        for name, table in self.tables.items():
            object.__setattr__(self, name, table)
        for name, value in base.scalars.items():
            object.__setattr__(self, name, copy.deepcopy(value))

    def scalar_values(self) -> dict[str, object]:
        """The non-table fields, as their current values."""
        return {name: getattr(self, name) for name in self.base.scalars}

    def model_dump(self, **kwargs: Any) -> dict[str, object]:
        """The whole database as tau2's `DB.model_dump` gives it (materialised; slow, off the hot path)."""
        db = self.base.db_type.model_construct(  # fields set: None, all of them
            None, **{name: table.materialize() for name, table in self.tables.items()}, **self.scalar_values()
        )
        return db.model_dump(**kwargs)

    def get_hash(self) -> str:
        """tau2's hash of this database (`DB.get_hash`)."""
        from tau2.utils import get_dict_hash

        return get_dict_hash(self.model_dump())

    def state(self) -> DatabaseState:
        """This database's current state, by its touched records."""
        records = {(name, key): table.canonical(key) for name, table in self.tables.items() for key in table.touched()}
        return DatabaseState(records, canonical_json(self.scalar_values()))
