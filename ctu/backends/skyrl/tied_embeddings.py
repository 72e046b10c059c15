"""Tied word embeddings stay tied in SkyRL 0.4.0's FSDP2 workers, GRPO and SFT alike: ctu carries the fix at its
edge until SkyRL does.

A model with ``tie_word_embeddings: true`` (Qwen2.5 up to 3B, Qwen3 up to 4B, Llama-3.2 1B/3B, the built-in tiny
Qwen3) uses one matrix as its embedding and its output projection. SkyRL's `FSDPStrategy._fsdp_init_model`
(``skyrl/backends/skyrl_train/distributed/fsdp_strategy.py``) moves the model to the meta device, wraps it with
`fully_shard` and loads the full state dict back; ``Module.to("meta")`` gives every parameter a new `Parameter` per
module, so ``lm_head.weight`` stops being ``model.embed_tokens.weight``. The trainer then updates two matrices,
while vLLM, which serves a tied model with the embedding as its head and skips the ``lm_head.weight`` a weight
sync sends (vLLM 0.30's `AutoWeightsLoader(skip_prefixes=["lm_head."])`), samples from another policy than the one
trained: GRPO runs off-policy by more every step. accelerate's `fsdp2_prepare_model` calls ``model.tie_weights()``
right after the same move, as does AReaL's `fsdp2_load_full_state_dict`; verl issue #7834 / PR #7835 is the same
bug in verl.

`install` (run in every Ray worker by `ctu.backends.skyrl.worker_setup`) wraps that module's `apply_fsdp2`, called
right after the move to the meta device, so that the model is tied again before FSDP wraps it (FSDP2 then manages
the shared parameter once, on both modules), and its `fsdp2_load_full_state_dict`, whose
``load_state_dict(assign=True)`` gives each module a new parameter again, so that the head is the embedding's
parameter before SkyRL builds the optimizer: the optimizer updates one matrix, the weight sync sends it once (SkyRL
iterates `named_parameters()`, which names a shared parameter once) and a Hugging Face export saves it as tied.
`check_tied` runs on every rank after the wrapping and after every optimizer step, and stops the run if the two
ever part.
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import TYPE_CHECKING, cast

from ctu.backends.skyrl.import_hooks import after_import

if TYPE_CHECKING:
    from transformers import PreTrainedModel

logger = logging.getLogger(__name__)

FSDP_STRATEGY = "skyrl.backends.skyrl_train.distributed.fsdp_strategy"
"""SkyRL's FSDP strategy module, whose `apply_fsdp2`, `fsdp2_load_full_state_dict` and `FSDPStrategy.optimizer_step`
are wrapped (the names it imported)."""
UPSTREAM = "verl #7834 / PR #7835; accelerate's fsdp2_prepare_model re-ties after the same move"
"""Where the bug and its fix are described upstream."""


def ties_embeddings(model: object) -> bool:
    """Whether `model` (a Hugging Face model, or a PEFT model around one) declares tied word embeddings."""
    config = getattr(model, "config", None)
    if config is None:
        return False
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return bool(getattr(text, "tie_word_embeddings", False))


def _head_and_embedding(model: PreTrainedModel) -> tuple[object, object]:
    """The output projection's and the input embedding's weight parameters of `model`."""
    return model.get_output_embeddings().weight, model.get_input_embeddings().weight


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def check_tied(model: PreTrainedModel, when: str) -> None:
    """Check that a model declaring tied word embeddings holds one parameter for both (the same object, hence the
    same storage); a model without them is not checked.

    Raises:
        RuntimeError: the output projection is a parameter of its own.
    """
    if not ties_embeddings(model):
        return
    head, embedding = _head_and_embedding(model)
    if head is not embedding:
        raise RuntimeError(f"rank {_rank()}: {when}, the model's output projection is no longer its embedding though its "
                           "config ties them: the trainer would update a head vLLM never serves (off-policy). "
                           f"ctu's fix of SkyRL's FSDP2 init did not hold ({UPSTREAM})")


def tie_again(model: PreTrainedModel) -> bool:
    """Tie `model`'s output projection to its embedding again when its config ties them and they parted (Hugging
    Face's `tie_weights`); returns whether it had to.

    Raises:
        RuntimeError: they are still apart afterwards.
    """
    if not ties_embeddings(model):
        return False
    head, embedding = _head_and_embedding(model)
    if head is embedding:
        return False
    model.tie_weights()
    check_tied(model, "after tie_weights()")
    return True


def _unwrapped(model: object) -> PreTrainedModel:
    """The Hugging Face model inside SkyRL's `HFModelWrapper` (its ``model``, as `optimizer_step` unwraps it), else
    `model` (a Hugging Face model has embeddings of its own)."""
    inner = model if hasattr(model, "get_input_embeddings") else getattr(model, "model", model)
    return cast("PreTrainedModel", inner)


def patch(module: ModuleType) -> None:
    """Wrap `module`'s (SkyRL's FSDP strategy module's) `apply_fsdp2`, `fsdp2_load_full_state_dict` and
    `FSDPStrategy.optimizer_step` (see the module docstring); idempotent."""
    if getattr(module, "_ctu_ties_embeddings", False):
        return
    module._ctu_ties_embeddings = True  # type: ignore[attr-defined]
    apply_fsdp2, load_full_state_dict = module.apply_fsdp2, module.fsdp2_load_full_state_dict
    untied: set[int] = set()

    def apply_fsdp2_tied(model: PreTrainedModel, *args: object, **kwargs: object) -> object:
        if tie_again(model):
            untied.add(id(model))
        return apply_fsdp2(model, *args, **kwargs)

    def load_full_state_dict_tied(model: PreTrainedModel, *args: object, **kwargs: object) -> object:
        result = load_full_state_dict(model, *args, **kwargs)
        if tie_again(model):
            untied.add(id(model))
        check_tied(model, "after the full state dict was loaded")
        if ties_embeddings(model):
            logger.info("rank %d: tied embeddings kept tied (lm_head.weight is the embedding%s)", _rank(),
                        "; SkyRL's FSDP2 init had untied them" if id(model) in untied else "")
        return result

    module.apply_fsdp2 = apply_fsdp2_tied  # type: ignore[attr-defined]
    module.fsdp2_load_full_state_dict = load_full_state_dict_tied  # type: ignore[attr-defined]
    strategy = module.FSDPStrategy
    optimizer_step = strategy.optimizer_step
    reported = False

    def optimizer_step_checked(self: object, optimizer: object, model: object, *args: object, **kwargs: object) -> object:
        nonlocal reported
        result = optimizer_step(self, optimizer, model, *args, **kwargs)
        inner = _unwrapped(model)
        check_tied(inner, "after an optimizer step")
        if ties_embeddings(inner) and not reported:
            reported = True
            logger.info("rank %d: tied embeddings still tied after an optimizer step", _rank())
        return result

    strategy.optimizer_step = optimizer_step_checked


def install() -> None:
    """Apply `patch` to SkyRL's FSDP strategy module once this process imports it (at once if it has)."""
    after_import(FSDP_STRATEGY, patch)
