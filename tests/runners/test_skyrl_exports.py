"""Tied word embeddings in SkyRL's exports (`ctu.backends.skyrl.exports`): an export's config is made to say what the
export holds when it holds an output projection of its own (a tied config would make vLLM, Tinker and older
transformers drop it), and is left alone when it holds one matrix, as a run with ctu's tie fix exports it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from ctu.backends.skyrl.exports import EMBEDDING, HEAD, untie_export_config


def export(folder: Path, tensors: dict[str, torch.Tensor], tied: bool = True, shards: int = 1) -> Path:
    """A minimal export: a config and the tensors, in one file or `shards` files with an index."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3", "tie_word_embeddings": tied}))
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"))
        return folder
    names = sorted(tensors)
    weight_map = {}
    for index in range(shards):
        file = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        part = {name: tensors[name] for name in names[index::shards]}
        save_file(part, str(folder / file))
        weight_map.update(dict.fromkeys(part, file))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


def tied(folder: Path) -> bool:
    return json.loads((folder / "config.json").read_text())["tie_word_embeddings"]


@pytest.mark.parametrize("shards", [1, 2])
def test_a_trained_head_apart_from_the_embedding_unties_the_config(tmp_path: Path, shards: int) -> None:
    embedding = torch.randn(16, 4)
    folder = export(tmp_path / "policy", {EMBEDDING: embedding, HEAD: embedding + 0.01, "model.norm.weight": torch.ones(4)},
                    shards=shards)
    assert untie_export_config(folder) is True
    assert tied(folder) is False
    assert json.loads((folder / "config.json").read_text())["model_type"] == "qwen3"  # the rest kept
    assert untie_export_config(folder) is False  # said once


def test_a_tied_export_is_left_as_it_is(tmp_path: Path) -> None:
    embedding = torch.randn(16, 4)
    without_head = export(tmp_path / "saved_tied", {EMBEDDING: embedding})  # what save_pretrained writes for tied
    same_head = export(tmp_path / "equal", {EMBEDDING: embedding, HEAD: embedding.clone()})
    untied = export(tmp_path / "untied", {EMBEDDING: embedding, HEAD: embedding + 1}, tied=False)
    for folder in (without_head, same_head, untied):
        assert untie_export_config(folder) is False
    assert tied(without_head) and tied(same_head) and not tied(untied)


def test_an_export_not_on_this_node_is_left_alone(tmp_path: Path):
    """SkyRL's rank-0 worker writes the export on its own node; the driver checking it elsewhere must not fail
    the run."""
    assert untie_export_config(tmp_path / "global_step_3" / "policy") is False
