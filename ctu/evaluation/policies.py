"""The policy `ctu eval` evaluates, and the sampler and tokenizer that put it in the agent loop.

Three kinds, chosen by `PolicyChoice`:

- an OpenAI-compatible endpoint (``--endpoint URL --model NAME``): a vLLM server of a base model or checkpoint,
  or an API model. Chat completions with the spec's tools (native tool calling) or with the tools in the system
  prompt and the answer read by the spec's parser (text mode). Tokens are counted with the spec's tokenizer.
- a Tinker checkpoint (``--checkpoint tinker://...``), or a run directory's policy (``--run-dir RUN``, its newest
  unless ``--step N``): its Hugging Face export where the step has one (both backends export after the last step),
  served as the base model of a local Tinker server; else its Tinker checkpoint, sampled through the spec's Tinker
  server or a local one started over the run's own server folder (where its checkpoints live).
- otherwise the spec's own `model.path` (``builtin:tiny-qwen3`` is built if needed), served by a local Tinker
  server (SkyRL's, JAX backend: what runs on a CPU).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctu.errors import CtuError
from ctu.runners.rundir import RunDir
from ctu.spec.models import Spec, TinkerBackend

__all__ = ["EvalError", "PolicyChoice", "latest_checkpoint", "open_policy"]


class EvalError(CtuError):
    """`ctu eval` cannot start: no such test set, checkpoint or run directory, conflicting policy options, or an
    output folder holding another evaluation."""


@dataclass(frozen=True)
class PolicyChoice:
    """Which policy to evaluate (at most one of `endpoint`, `checkpoint`, `run_dir`; none: the spec's model).

    Attributes:
        endpoint: base URL of an OpenAI-compatible server, e.g. ``http://127.0.0.1:8000/v1``.
        model: the model name sent to `endpoint`.
        api_key_env: environment variable holding the endpoint's API key (None: no key).
        checkpoint: a Tinker checkpoint path (``tinker://...``) of the spec's base model.
        run_dir: a ctu run directory: on the Tinker backend its checkpoint of `step`, on the skyrl backend its
            Hugging Face export of `step` (default: the newest).
        step: with `run_dir`, the step whose checkpoint or export to evaluate.
    """

    endpoint: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    checkpoint: str | None = None
    run_dir: Path | None = None
    step: int | None = None

    def check(self) -> None:
        """Raises `EvalError` for a contradictory choice."""
        chosen = [name for name in ("endpoint", "checkpoint", "run_dir") if getattr(self, name) is not None]
        if len(chosen) > 1:
            raise EvalError(f"name one policy: --{chosen[0].replace('_', '-')} or --{chosen[1].replace('_', '-')}")
        if (self.endpoint is None) != (self.model is None):
            raise EvalError("--endpoint and --model go together: the server's URL and the model name it serves")
        if self.step is not None and self.run_dir is None:
            raise EvalError("--step needs --run-dir")

    def label(self) -> str:
        """A short name for reports and the default output folder: ``endpoint-<model>``, ``<run>-step<N>``,
        ``checkpoint-<name>`` or ``base``."""
        if self.endpoint is not None:
            return "endpoint-" + _slug(str(self.model))
        if self.run_dir is not None:
            step, _ = latest_checkpoint(self.run_dir, self.step)
            return f"{_slug(Path(self.run_dir).name)}-step{step}"
        if self.checkpoint is not None:
            return "checkpoint-" + _slug(self.checkpoint.rstrip("/").rsplit("/", 1)[-1])
        return "base"


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text).strip("-") or "policy"


def is_skyrl_run(run_dir: Path) -> bool:
    """Whether `run_dir` is a run of the skyrl backend (its ``state.json`` says so)."""
    state = Path(run_dir) / "state.json"
    return state.exists() and json.loads(state.read_text()).get("backend") == "skyrl"


def latest_checkpoint(run_dir: Path, step: int | None = None) -> tuple[int, str]:
    """``(step, path)`` of a run directory's policy of `step` (default: the newest): its Hugging Face export
    (``exports/global_step_N/policy``, a local folder; both backends write one after the last step) where the step
    has one, else a Tinker run's checkpoint (``tinker://...``, from its ``checkpoints/step_NNNNNN.json`` records).

    Raises:
        EvalError: the folder has no such export or checkpoint (or is no run directory).
    """
    run = RunDir(Path(run_dir))
    by_step: dict[int, str] = {}
    if not is_skyrl_run(run_dir):
        by_step = {int(record["step"]): record["path"]
                   for record in (json.loads(p.read_text()) for p in sorted(run.checkpoints.glob("step_*.json")))}
    by_step.update({int(folder.parent.name.removeprefix("global_step_")): str(folder.absolute())
                    for folder in run.exports.glob("global_step_*/policy") if (folder / "config.json").exists()})
    if not by_step:
        raise EvalError(f"{run_dir} holds no Hugging Face export (exports/global_step_N/policy, written every "
                        "trainer.hf_save_interval steps and after the last step) nor Tinker checkpoint "
                        "(checkpoints/step_*.json); is it a run directory?")
    chosen = max(by_step) if step is None else step
    if chosen not in by_step:
        raise EvalError(f"{run_dir} has no checkpoint of step {step}; it has steps {', '.join(map(str, sorted(by_step)))}")
    return chosen, by_step[chosen]


@contextlib.asynccontextmanager
async def open_policy(spec: Spec, choice: PolicyChoice, work_dir: Path) -> AsyncIterator[tuple[Any, Any]]:
    """The chosen policy as ``(sampler, tokenizer)`` for `ctu.rollout.build.build_generator`; a local Tinker server
    it needs runs until the context exits.

    Args:
        spec: the spec being evaluated (its model, backend and sampling settings).
        choice: the policy.
        work_dir: where a local Tinker server keeps its database and log when it does not serve a run directory.

    Raises:
        EvalError: no checkpoint where one was named. TinkerServerError: a local server did not start.
    """
    import asyncio

    from transformers import AutoTokenizer

    from ctu.models.tiny_qwen3 import resolve

    choice.check()
    model_path = await asyncio.to_thread(resolve, spec.model.path)
    checkpoint = choice.checkpoint
    server_folder = Path(work_dir) / "tinker"
    if choice.run_dir is not None:
        _, found = latest_checkpoint(choice.run_dir, choice.step)
        if found.startswith("tinker://"):
            checkpoint, server_folder = found, Path(choice.run_dir) / "tinker"
        else:  # an HF export: served as the base model of a local Tinker server
            model_path = found
    tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, model_path)
    if choice.endpoint is not None:
        from ctu.components.endpoint import ChatEndpoint, OpenAIEndpointParams
        from ctu.rollout.sampling import OpenAIChatSampler

        params = OpenAIEndpointParams(model=str(choice.model), base_url=choice.endpoint, api_key_env=choice.api_key_env)
        endpoint = ChatEndpoint(params)
        try:
            yield OpenAIChatSampler(endpoint), tokenizer
        finally:
            await endpoint.aclose()
        return
    import tinker

    from ctu.runners.tinker.sampler import TinkerSampler

    backend = spec.backend if isinstance(spec.backend, TinkerBackend) else None
    async with _tinker_url(backend, model_path, server_folder) as base_url:
        api_key = os.environ.get(backend.api_key_env, "") if backend is not None and backend.api_key_env else ""
        service = tinker.ServiceClient(base_url=base_url, api_key=api_key or "tml-local")
        if checkpoint is None:
            client = await service.create_sampling_client_async(base_model=model_path)
        else:
            training = await service.create_training_client_from_state_async(checkpoint)
            client = await training.save_weights_and_get_sampling_client_async()
        yield TinkerSampler(client, tokenizer.decode), tokenizer


@contextlib.asynccontextmanager
async def _tinker_url(backend: TinkerBackend | None, model_path: str, folder: Path) -> AsyncIterator[str]:
    """The spec's remote Tinker server, else a local one over `folder`, started here and stopped on exit."""
    import asyncio

    if backend is not None and not backend.local:
        yield str(backend.base_url)
        return
    from ctu.runners.tinker.server import LocalTinkerServer

    lora_rank = backend.lora_rank if backend is not None else 8
    with LocalTinkerServer(model_path, folder, lora_rank=lora_rank) as server:
        await asyncio.to_thread(server.wait_healthy)
        yield server.base_url
