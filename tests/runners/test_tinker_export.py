"""A Tinker run's LoRA adapter merged into its base model (`ctu.backends.tinker.export.merge_adapter`), on the
built-in model: the merged model computes what the adapted one does, and an adapter that does not fit is an error.
The archive route itself (SkyRL's Tinker server, its JAX backend's adapter) runs in `test_smoke_run.py`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctu.backends.tinker.export import ExportError, merge_adapter
from ctu.models import builtin

MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def write_adapter(base: str, folder: Path, rename: tuple[str, str] | None = None):
    """A rank-4 LoRA adapter on every linear module with random (non-zero) B, saved as SkyRL's JAX backend saves
    one (PEFT's files, no ``target_modules`` in its config); returns the adapted model (unmerged)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    adapted = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(r=4, lora_alpha=8, target_modules=MODULES))
    for name, parameter in adapted.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(parameter, std=0.05)
    adapted.save_pretrained(folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "target_modules": None}))
    if rename:
        tensors = load_file(folder / "adapter_model.safetensors")
        save_file({key.replace(*rename): value for key, value in tensors.items()}, folder / "adapter_model.safetensors")
    return adapted


def test_the_merged_model_computes_what_the_adapted_one_does(tmp_path: Path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = builtin.resolve("builtin:tiny-qwen3")
    adapted = write_adapter(base, tmp_path / "adapter")
    merge_adapter(base, tmp_path / "adapter", tmp_path / "merged")
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "merged")
    ids = torch.tensor([tokenizer.encode("I want to cancel order #W2378156, please.")])
    with torch.no_grad():
        expected, got = adapted(ids).logits, merged(ids).logits
        untouched = AutoModelForCausalLM.from_pretrained(base)(ids).logits
    assert (expected - untouched).abs().max() > 0.1  # the adapter matters, on attention and MLP alike
    assert torch.allclose(got, expected, atol=1e-4)
    assert type(merged).__name__ == "Qwen3ForCausalLM"  # a plain model: no PEFT wrapper left


def test_an_adapter_that_does_not_fit_the_base_model_is_an_export_error(tmp_path: Path):
    base = builtin.resolve("builtin:tiny-qwen3")
    write_adapter(base, tmp_path / "adapter", rename=(".layers.0.", ".layers.99."))
    with pytest.raises(ExportError, match="does not fit"):
        merge_adapter(base, tmp_path / "adapter", tmp_path / "merged")
    assert not (tmp_path / "merged").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ExportError, match="no PEFT adapter"):
        merge_adapter(base, tmp_path / "empty", tmp_path / "merged")


def test_a_sampler_checkpoints_path_names_its_archive_in_either_servers_form():
    from ctu.backends.tinker.export import archive_ids

    assert archive_ids("tinker://model_8acf/hf_step_000002") == ("model_8acf", "hf_step_000002")  # SkyRL's server
    assert archive_ids("tinker://run-1/sampler_weights/final") == ("run-1", "sampler_weights/final")  # Tinker's
    for bad in ("tinker://run-1/weights/final", "tinker://run-1", "s3://run/x", "tinker://run//x"):
        with pytest.raises(ExportError, match="not a sampler checkpoint's Tinker path"):
            archive_ids(bad)
