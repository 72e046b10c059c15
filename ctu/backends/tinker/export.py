"""A Tinker run's policy as a Hugging Face model: its LoRA adapter downloaded through the Tinker API and merged
into the base model, so `transformers.AutoModelForCausalLM.from_pretrained` (and vLLM, and `ctu eval --run-dir`)
load it like any checkpoint.

The adapter is a sampler checkpoint (``save_weights_for_sampler``), fetched as the archive the Tinker API serves
(``get_checkpoint_archive_url``; the same route as ``tinker checkpoint download``): a PEFT adapter
(``adapter_config.json``, ``adapter_model.safetensors``). PEFT merges it (``merge_and_unload``: each adapted weight
becomes ``W + alpha / r * B @ A``).
"""

from __future__ import annotations

import asyncio
import shutil
import tarfile
import tempfile
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctu.errors import CtuError

if TYPE_CHECKING:
    import tinker


class ExportError(CtuError):
    """A policy could not be exported: the archive was not served or holds no PEFT adapter."""


async def export_policy(service: tinker.ServiceClient, training: tinker.TrainingClient, base_model: str, step: int, folder: Path) -> Path:
    """Write the training client's current policy to `folder` as a merged Hugging Face model (weights, config,
    tokenizer); returns `folder`.

    Args:
        service: the run's ``tinker.ServiceClient`` (its REST client serves the archive).
        training: the run's ``tinker.TrainingClient``.
        base_model: local path of the base model the LoRA adapter was trained on.
        step: the GRPO step the policy is of (names the sampler checkpoint ``hf_step_NNNNNN``).
        folder: where the model goes (replaced if it exists).

    Raises:
        ExportError: the archive holds no PEFT adapter.
    """
    saved = await (await training.save_weights_for_sampler_async(name=f"hf_step_{step:06d}")).result_async()
    archive = await service.create_rest_client().get_checkpoint_archive_url_async(*archive_ids(saved.path))
    with tempfile.TemporaryDirectory(prefix="ctu-export-") as temp:
        adapter = Path(temp) / "adapter"
        await asyncio.to_thread(_download_adapter, archive.url, adapter)
        await asyncio.to_thread(merge_adapter, base_model, adapter, folder)
    return folder


def archive_ids(path: str) -> tuple[str, str]:
    """``(training run id, checkpoint id)`` of a sampler checkpoint's Tinker path, for the archive endpoint:
    ``tinker://RUN/sampler_weights/NAME`` (Tinker's form; the id keeps its kind) or ``tinker://RUN/NAME`` (SkyRL's
    Tinker server names a checkpoint saved under a name so).

    Raises:
        ExportError: not a Tinker path of either form.
    """
    parts = path.removeprefix("tinker://").split("/")
    if not path.startswith("tinker://") or len(parts) not in (2, 3) or not all(parts) or (len(parts) == 3 and parts[1] != "sampler_weights"):
        raise ExportError(f"not a sampler checkpoint's Tinker path: {path}")
    return parts[0], "/".join(parts[1:])


def _download_adapter(url: str, folder: Path) -> None:
    """Fetch the checkpoint archive at `url` and extract it into `folder` (tar's "data" filter: no paths outside)."""
    folder.mkdir(parents=True)
    with urllib.request.urlopen(url, timeout=600) as response, tempfile.TemporaryFile() as file:
        shutil.copyfileobj(response, file)
        file.seek(0)
        with tarfile.open(fileobj=file) as tar:
            tar.extractall(folder, filter="data")


def merge_adapter(base_model: str, adapter: Path, folder: Path) -> None:
    """Merge the PEFT LoRA adapter in `adapter` into `base_model` and save the result, with the base model's
    tokenizer, to `folder` (replaced if it exists). The weights keep the base model's dtype.

    The adapted modules are read from the adapter's own weights: an adapter whose config names no
    ``target_modules`` (SkyRL's JAX backend writes none) would otherwise get PEFT's defaults for the architecture,
    and PEFT would leave the other modules' LoRA weights unloaded with a warning only. The load is strict.

    Raises:
        ExportError: `adapter` holds no PEFT adapter, or one whose weights do not match the base model's modules.
    """
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    weights = adapter / "adapter_model.safetensors"
    if not (adapter / "adapter_config.json").exists() or not weights.exists():
        raise ExportError(f"the checkpoint archive holds no PEFT adapter (adapter_config.json, "
                          f"adapter_model.safetensors): {sorted(p.name for p in adapter.iterdir())}")
    tensors = load_file(str(weights))
    config = LoraConfig.from_pretrained(str(adapter))
    config.target_modules = {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in tensors if ".lora_" in name}
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_model, dtype="auto"), config)
    # torch's load result (PEFT annotates None); a shape that does not fit raises
    loaded: Any = set_peft_model_state_dict(model, tensors)  # type: ignore[func-returns-value]
    missing = [key for key in loaded.missing_keys if ".lora_" in key]
    if loaded.unexpected_keys or missing:
        raise ExportError(f"the LoRA adapter does not fit {base_model}: {len(loaded.unexpected_keys)} of its weights "
                          f"name no module ({loaded.unexpected_keys[:3]}), {len(missing)} adapted weights are not "
                          f"in it ({missing[:3]})")
    merged = model.merge_and_unload()
    if folder.exists():
        shutil.rmtree(folder)
    merged.save_pretrained(folder)
    AutoTokenizer.from_pretrained(base_model).save_pretrained(folder)
