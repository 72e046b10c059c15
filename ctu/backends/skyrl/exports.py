"""What ctu checks in SkyRL's Hugging Face exports: that their config describes the weights they hold.

A model with tied word embeddings (``tie_word_embeddings: true``: Qwen2.5 up to 3B, Qwen3 up to 4B, the built-in
tiny Qwen3) stays tied through SkyRL's FSDP2 training since ctu re-ties it in every worker
(`ctu.backends.skyrl.tied_embeddings`), so its exports hold one matrix and say so. Should a run still train an
output projection of its own (a SkyRL version or a model class the fix does not reach, a user's patch), its export
would hold both matrices under a config that says tied, and vLLM, Tinker and older transformers would use the
embedding as the output projection, serving a model other than the one trained (measured here before the fix: a
fine-tuned tiny Qwen3 whose export wrote correct tool calls in transformers 5, which reads both tensors, wrote
garbled tool names through Tinker). `untie_export_config` makes such an export say what it holds.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

HEAD, EMBEDDING = "lm_head.weight", "model.embed_tokens.weight"


def _tensor(folder: Path, name: str) -> torch.Tensor | None:
    """The tensor `name` of the export in `folder` (single or sharded safetensors), or None when it holds none."""
    from safetensors import safe_open

    index = folder / "model.safetensors.index.json"
    if index.exists():
        shard = json.loads(index.read_text())["weight_map"].get(name)
        if shard is None:
            return None
        file = folder / shard
    else:
        file = folder / "model.safetensors"
        if not file.exists():
            return None
    with safe_open(str(file), framework="pt") as weights:
        return weights.get_tensor(name) if name in weights.keys() else None  # noqa: SIM118 (safe_open is no mapping)


def policy_export(export_path: str | Path, step: int) -> Path:
    """The folder of SkyRL's policy export of `step` under `export_path` (SkyRL's layout, both trainers)."""
    return Path(export_path) / f"global_step_{step}" / "policy"


def untie_export_config(folder: str | Path) -> bool:
    """Set ``tie_word_embeddings: false`` in the Hugging Face export in `folder` when its config says tied but it
    holds an output projection (``lm_head.weight``) that differs from its embedding (see the module docstring).

    Args:
        folder: an export folder (``config.json`` and ``model.safetensors`` or a sharded index).

    Returns:
        Whether the config was changed (False: untied already, no output projection saved, the two are equal, or
        the export is not on this node's file system: SkyRL's rank-0 worker wrote it on its own node; logged).

    Raises:
        OSError, json.JSONDecodeError: the folder's config or weights cannot be read or written.
    """
    import torch

    folder = Path(folder)
    config_file = folder / "config.json"
    if not config_file.is_file():
        logger.warning("%s: no export here to check for untied embeddings (written on another node?)", folder)
        return False
    config = json.loads(config_file.read_text())
    if not config.get("tie_word_embeddings", False):
        return False
    head = _tensor(folder, HEAD)
    if head is None:
        return False
    embedding = _tensor(folder, EMBEDDING)
    if embedding is not None and head.shape == embedding.shape and torch.equal(head, embedding):
        return False
    config["tie_word_embeddings"] = False
    config_file.write_text(json.dumps(config, indent=2) + "\n")
    logger.warning("%s: the trained output projection differs from the embedding though the config ties them (a "
                   "run the tie fix did not reach); the export's config now says tie_word_embeddings: false, so that "
                   "it serves the model trained", folder)
    return True
