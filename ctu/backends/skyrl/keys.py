"""The keys of SkyRL's training config, so `backend.skyrl_overrides` is checked by plain `ctu validate` without
importing SkyRL (its config module takes ~1 s to import here).

`skyrl_config_keys.txt` beside this module lists every dotted field of `skyrl.train.config.SkyRLTrainConfig` of
the SkyRL version in `uv.lock`, one a line; a field holding a free-form mapping (such as
``generator.inference_engine.engine_init_kwargs``) is listed as ``<field>.*`` and accepts any key below it.
`tests/test_skyrl_keys.py` compares the file with SkyRL's installed config, so an upgrade that renames a field
fails there; `python -m ctu.backends.skyrl.keys` rewrites it.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

KEYS_FILE = Path(__file__).with_name("skyrl_config_keys.txt")


@lru_cache(maxsize=1)
def skyrl_config_keys() -> frozenset[str]:
    """The keys listed in `KEYS_FILE`."""
    return frozenset(line for line in KEYS_FILE.read_text(encoding="utf-8").splitlines() if line)


def is_skyrl_config_key(key: str) -> bool:
    """Whether the dotted `key` names a field of SkyRL's config, or lies inside one of its free-form mappings."""
    keys = skyrl_config_keys()
    if key in keys:
        return True
    parts = key.split(".")
    return any(".".join(parts[:end]) + ".*" in keys for end in range(1, len(parts)))


def live_skyrl_config_keys() -> list[str]:
    """Every dotted field of the installed SkyRL's `SkyRLTrainConfig`, sorted (imports SkyRL)."""
    import dataclasses
    import types
    import typing

    from skyrl.train.config import SkyRLTrainConfig

    def walk(cls: type, prefix: str) -> list[str]:
        keys: list[str] = []
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            name = prefix + field.name
            hint = hints.get(field.name)
            kinds = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
            nested = [kind for kind in kinds if isinstance(kind, type) and dataclasses.is_dataclass(kind)]
            mapping = any(typing.get_origin(kind) in (dict, typing.Dict) or kind is dict for kind in kinds)  # noqa: UP006
            keys.append(name)
            if mapping:
                keys.append(name + ".*")
            for kind in nested:
                keys += walk(kind, name + ".")
        return keys

    return sorted(set(walk(SkyRLTrainConfig, "")))


if __name__ == "__main__":
    KEYS_FILE.write_text("".join(key + "\n" for key in live_skyrl_config_keys()), encoding="utf-8")
    print(f"wrote {KEYS_FILE}", file=sys.stderr)
