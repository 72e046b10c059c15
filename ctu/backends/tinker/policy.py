"""A policy served for sampling through Tinker: the spec's base model, a Hugging Face folder (an export of either
backend) or a Tinker checkpoint, sampled through a Tinker server (the spec's remote one, or SkyRL's Tinker API
server with its JAX backend started here: what runs on a CPU). Both built-in backends evaluate their policies so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from ctu.backends.tinker.params import TinkerParams
from ctu.runners.backend import PolicyHandle
from ctu.runners.rundir import RunDir
from ctu.spec.models import Spec

TINKER_PREFIX = "tinker://"
SAMPLE_BATCH_IN_FLIGHT = 16
"""The local server's sample batch for a spec without Tinker settings (a SkyRL run's export) when at least this many
episodes run at once: the chain check's 64 short episodes sampled in 3.0 s at 16, against 17.5 s at 1, 3.4 s at 32
(`TinkerParams.sample_batch_size`); its evaluations of SkyRL's exports took 3.2-3.6 min at 1, those of the tinker
backend's runs at 16 1.6-1.8 min (seed 3, 2026-11-30). Fewer episodes at once: that many, so the batch pads to
none that is not sampled."""


@contextlib.asynccontextmanager
async def serve_policy(spec: Spec, params: TinkerParams | None, policy: str | None, run_dir: RunDir | None,
                       work_dir: Path, *, in_flight: int | None = None) -> AsyncIterator[PolicyHandle]:
    """`policy` as ``(sampler, tokenizer)``; a local Tinker server it needs runs until the context exits.

    Args:
        spec: the spec (its `model.path` is the base model; ``builtin:tiny-qwen3`` is built if needed).
        params: the spec's Tinker backend section, whose server samples (`local: false`); None (or `local: true`): a
            local server, with LoRA rank 8 when None.
        policy: None (the base model), a Hugging Face folder (served as the local server's base model), or a
            ``tinker://`` checkpoint of the base model.
        run_dir: the run `policy` is of, if any: a local server for one of its Tinker checkpoints keeps its database
            in the run's ``tinker/`` folder, where the checkpoint lives.
        work_dir: for anything else, the folder whose ``tinker/`` a local server keeps its database in.
        in_flight: with `params` None, the episodes sampled at once: the local server samples up to
            `SAMPLE_BATCH_IN_FLIGHT` of them in one batch (`TinkerParams.sample_batch_size`), else one at a time.

    Raises:
        TinkerServerError: a local server did not start.
    """
    from transformers import AutoTokenizer

    from ctu.backends.tinker.sampler import TinkerSampler
    from ctu.backends.tinker.service import tinker_service
    from ctu.models.builtin import resolve

    checkpoint = policy if policy is not None and policy.startswith(TINKER_PREFIX) else None
    model_path = policy if policy is not None and checkpoint is None else await asyncio.to_thread(resolve, spec.model.path)
    tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, model_path)
    folder = (run_dir.path if run_dir is not None and checkpoint is not None else Path(work_dir)) / "tinker"
    params = serving_params(params, in_flight)
    async with _tinker_url(params, model_path, folder) as base_url:
        api_key = os.environ.get(params.api_key_env, "") if params is not None and params.api_key_env else ""
        with tinker_service(base_url, api_key or "tml-local") as service:
            if checkpoint is None:
                client = await service.create_sampling_client_async(base_model=model_path)
            else:
                training = await service.create_training_client_from_state_async(checkpoint)
                client = await training.save_weights_and_get_sampling_client_async()
            yield TinkerSampler(client), tokenizer


def serving_params(params: TinkerParams | None, in_flight: int | None) -> TinkerParams | None:
    """The Tinker settings a policy is served with: the spec's `params` where it has them, else (a spec of another
    backend) a local server sampling ``min(SAMPLE_BATCH_IN_FLIGHT, in_flight)`` sequences a batch, else None (a
    local server's defaults)."""
    if params is not None or in_flight is None:
        return params
    return TinkerParams(sample_batch_size=max(1, min(SAMPLE_BATCH_IN_FLIGHT, in_flight)))


@contextlib.asynccontextmanager
async def _tinker_url(params: TinkerParams | None, model_path: str, folder: Path) -> AsyncIterator[str]:
    """The spec's remote Tinker server, else a local one over `folder`, started here and stopped on exit."""
    if params is not None and not params.local:
        yield str(params.base_url)
        return
    from ctu.backends.tinker.server import LocalTinkerServer

    params = params if params is not None else TinkerParams()
    with LocalTinkerServer(model_path, folder, lora_rank=params.lora_rank,
                           sample_max_num_sequences=params.sample_batch_size) as server:
        await asyncio.to_thread(server.wait_healthy)
        yield server.base_url
