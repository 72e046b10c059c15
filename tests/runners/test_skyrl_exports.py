"""Tied word embeddings on SkyRL (`ctu.backends.skyrl.exports`): an export's config is made to say what the export
holds (SkyRL's FSDP2 training unties them; a tied config would make vLLM, Tinker and older transformers drop the
trained output projection), and `ctu validate` warns of a tied model in a SkyRL GRPO run, read offline."""

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


def test_tied_embeddings_are_read_from_a_folder_or_the_hugging_face_cache_offline(tmp_path: Path, monkeypatch):
    from ctu.backends.skyrl.exports import tied_embeddings

    for name, tie in (("tied", True), ("untied", False)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"tie_word_embeddings": tie}))
        assert tied_embeddings(str(tmp_path / name)) is tie
    snapshot = tmp_path / "hub" / "models--Org--Small-3B" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({"tie_word_embeddings": True}))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert tied_embeddings("Org/Small-3B") is True
    assert tied_embeddings("Org/Not-Cached-8B") is None  # nothing at hand: no network, no guess


def test_validate_warns_of_a_tied_model_in_a_skyrl_grpo_run(tmp_path: Path):
    from ctu.spec import load_spec

    from ..conftest import REPO

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"tie_word_embeddings": True}))
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"extends: {REPO / 'tests' / 'skyrl_cpu' / 'smoke_skyrl.yaml'}\nmodel: {{path: {folder}}}\n")
    assert any(w.path == "model.path" and "vLLM" in w.message for w in load_spec(spec).warnings)
    (folder / "config.json").write_text(json.dumps({"tie_word_embeddings": False}))
    assert not any(w.path == "model.path" for w in load_spec(spec).warnings)


def test_an_export_not_on_this_node_is_left_alone(tmp_path: Path):
    """SkyRL's rank-0 worker writes the export on its own node; the driver checking it elsewhere must not fail
    the run."""
    assert untie_export_config(tmp_path / "global_step_3" / "policy") is False
