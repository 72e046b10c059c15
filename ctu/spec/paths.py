"""A run's spec with the local files it names made absolute, so that the run reads the same files wherever its
spec is read again: in a Ray worker (which runs in a copy of the working directory without its git-ignored folders,
such as ``runs/``), or by ``ctu eval --run-dir`` and ``ctu run --resume`` started from another folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ctu.spec.models import Spec

FILE_KEYS = frozenset({"tasks_file", "split_file"})
"""Keys of component params (at any depth, e.g. a domain's) whose value is a local file."""
MODEL_KEYS = ("path", "reference_path")
"""`model` entries that name a local folder when one exists at that path (else a Hub id or ``builtin:``, kept)."""


def absolute_paths(spec: Spec, base: Path | None = None) -> Spec:
    """`spec` with its relative local paths made absolute against `base` (default: the current folder): every
    `FILE_KEYS` value, `data.sft`, and `model.path`/`model.reference_path` when such a folder exists under `base`.
    Returns `spec` itself when nothing changes.

    Raises:
        SpecError: the rewritten spec no longer validates (it cannot, unless `base` differs from the folder the
            spec was checked in).
    """
    from ctu.spec import spec_from_dict, spec_to_dict

    root = (base or Path.cwd()).absolute()
    data = spec_to_dict(spec)
    changed = False
    for mapping, key in _file_entries(data):
        value = mapping[key]
        if isinstance(value, str) and not Path(value).is_absolute():
            mapping[key], changed = str(root / value), True
    model, data_section = data["model"], data["data"]
    assert isinstance(model, dict) and isinstance(data_section, dict)
    for key in MODEL_KEYS:
        value = model.get(key)
        if isinstance(value, str) and not Path(value).is_absolute() and (root / value).is_dir():
            model[key], changed = str(root / value), True
    sft = data_section.get("sft")
    if isinstance(sft, str) and not Path(sft).is_absolute():
        data_section["sft"], changed = str(root / sft), True
    return spec_from_dict(data, source="spec with absolute paths").spec if changed else spec


def _file_entries(node: object) -> Iterator[tuple[dict[str, object], str]]:
    """``(mapping, key)`` of every `FILE_KEYS` entry in the nested mappings and lists of `node`."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in FILE_KEYS:
                yield node, key
            else:
                yield from _file_entries(value)
    elif isinstance(node, list):
        for item in node:
            yield from _file_entries(item)
