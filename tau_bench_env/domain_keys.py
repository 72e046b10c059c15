"""How rows and setups name a domain: its name and its params (`DomainKey`), so that a task row finds the domain
built with the same params, and one of tau2's domains without params finds tau2's own."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import BaseModel

if TYPE_CHECKING:
    from tau_bench_env.domains import Domain


DomainKey = tuple[str, str]
"""A domain as rows name it: ``(name, its params as sorted JSON)``."""


def domain_key(name: str, params: object = None) -> DomainKey:
    """The key of domain `name` with `params` (a mapping, or its JSON as parquet rows carry it; anything else, such
    as None: no params)."""
    mapping = json.loads(params) if isinstance(params, str) else dict(params) if isinstance(params, Mapping) else {}
    return name, json.dumps(mapping, sort_keys=True)


def params_key(name: str, params: BaseModel) -> DomainKey:
    """The key of domain `name` built with the params model `params`: the name and the params that differ from
    their defaults (what its task rows carry as ``domain_params``, so a row of tau2's retail without params finds
    it)."""
    return domain_key(name, params.model_dump(mode="json", exclude_defaults=True))


def key_of(domain: Domain) -> DomainKey:
    """`domain`'s key (`params_key` of its name and params)."""
    return params_key(domain.name, domain.params)
