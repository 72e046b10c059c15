"""What ctu checks in SkyRL's Hugging Face exports: that their config describes the weights they hold.

A model with tied word embeddings (``tie_word_embeddings: true``: Qwen2.5 up to 3B, Qwen3 up to 4B, the built-in
tiny Qwen3) comes out of SkyRL 0.4.0's FSDP2 training untied: SkyRL's `_fsdp_init_model` moves the model to the
meta device and loads the full state dict back with `set_model_state_dict`, which gives the output projection
storage of its own (the class of bug of verl #7834 / PR #7835, "to_empty() gives every parameter fresh storage, so a
tied lm_head stops aliasing the embedding"). The trainer then updates ``lm_head.weight`` and
``model.embed_tokens.weight`` apart, and the export holds both, while its ``config.json`` still says tied: vLLM,
Tinker and older transformers read such a config and use the embedding as the output projection, so they serve a
model other than the one trained (measured here: a fine-tuned tiny Qwen3 whose export writes correct tool calls in
transformers 5, which reads both tensors, writes garbled tool names through Tinker).

`untie_export_config` makes the export say what it holds, so every consumer serves the trained model. During a
GRPO run the same untying leaves vLLM behind: vLLM serves the model tied and skips the ``lm_head.weight`` each
weight sync sends (vLLM 0.30's `AutoWeightsLoader` drops a tied alias), so it samples with the embedding as its
output projection while the trainer scores with its own head; `tied_embeddings` lets `ctu validate` warn of it.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

HEAD, EMBEDDING = "lm_head.weight", "model.embed_tokens.weight"


def _tensor(folder: Path, name: str) -> Any:
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
    logger.warning("%s: the trained output projection differs from the embedding (SkyRL's FSDP2 training unties "
                   "them); the export's config now says tie_word_embeddings: false, so that it serves the model "
                   "trained", folder)
    return True


def _hub_config(model: str) -> Path | None:
    """The cached ``config.json`` of hub model `model` (``org/name``) in the Hugging Face cache's documented layout
    (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``; ``models--org--name/snapshots/*``),
    or None when it is not cached. Reads no network and imports nothing."""
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(os.environ.get("HF_HOME") or "~/.cache/huggingface", "hub")
    snapshots = Path(hub).expanduser() / f"models--{model.replace('/', '--')}" / "snapshots"
    found = sorted(snapshots.glob("*/config.json"), key=lambda path: path.stat().st_mtime) if snapshots.is_dir() else []
    return found[-1] if found else None


def tied_embeddings(model: str) -> bool | None:
    """Whether the model `model` (a spec's `model.path`) ties its word embeddings, as far as this machine can tell
    without the network or building anything: from a local folder's ``config.json``, the built-in model's cached
    one, or a hub model's in the Hugging Face cache; None when no config is at hand."""
    from ctu.models.tiny_qwen3 import is_builtin, local_path

    try:
        folder = local_path(model)
    except ValueError:
        return None
    config = Path(folder) / "config.json" if (is_builtin(model) or Path(folder).is_dir()) else _hub_config(model)
    if config is None or not config.is_file():
        return None
    try:
        return bool(json.loads(config.read_text()).get("tie_word_embeddings", False))
    except (OSError, ValueError):
        return None
