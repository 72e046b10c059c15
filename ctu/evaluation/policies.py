"""The policy `ctu eval` evaluates, and the sampler and tokenizer that put it in the agent loop.

Three kinds, chosen by `PolicyChoice`:

- an OpenAI-compatible endpoint (``--endpoint URL --model NAME``): a vLLM server of a base model or checkpoint,
  or an API model. Chat completions with the spec's tools (native tool calling) or with the tools in the system
  prompt and the answer read by the spec's parser (text mode). Tokens are counted with the spec's tokenizer.
- a run directory's policy (``--run-dir RUN``, its newest unless ``--step N``), listed and opened by the backend
  that wrote the run (`ctu.runners.backend.Backend.policies` and `open_policy`). On the built-in backends: its
  Hugging Face export where the step has one (both export after the last step), served as the base model of a
  local Tinker server; else its Tinker checkpoint, sampled through the spec's Tinker server or a local one started
  over the run's own server folder (where its checkpoints live).
- a checkpoint (``--checkpoint tinker://...``), or otherwise the spec's own `model.path` (``builtin:tiny-qwen3`` is
  built if needed), opened by the spec's backend: on the built-in ones, served by a local Tinker server (SkyRL's,
  JAX backend: what runs on a CPU), or the spec's remote Tinker server.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from ctu.errors import CtuError
from ctu.runners.backend import PolicyHandle
from ctu.runners.rundir import RunDir
from ctu.spec.models import Spec

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


    def identity(self) -> dict[str, object]:
        """What makes this policy this one, recorded in an evaluation folder and checked before it is reused
        (`ctu.evaluation.runner`): the endpoint's URL and model; the Tinker checkpoint; a run's folder, step and the
        policy it names, with each weight file's size and modification time (a run trained again exports new
        weights under the same path); for the base model, nothing (the spec's hash names it).

        Raises:
            EvalError: `run_dir` holds no policy of `step`."""
        if self.endpoint is not None:
            return {"endpoint": self.endpoint.rstrip("/"), "model": self.model}
        if self.checkpoint is not None:
            return {"checkpoint": self.checkpoint}
        if self.run_dir is not None:
            step, policy = latest_checkpoint(self.run_dir, self.step)
            folder = Path(policy)
            weights = sorted((file.name, file.stat().st_size, file.stat().st_mtime_ns) for file in folder.iterdir()
                             if file.suffix in (".safetensors", ".bin")) if folder.is_dir() else None
            return {"run_dir": str(Path(self.run_dir).resolve()), "step": step, "policy": policy, "weights": weights}
        return {"base": True}


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text).strip("-") or "policy"


def latest_checkpoint(run_dir: Path, step: int | None = None) -> tuple[int, str]:
    """``(step, policy)`` of a run directory's policy of `step` (default: the newest), as the backend that wrote the
    run lists them (`Backend.policies`): a Hugging Face export (``exports/global_step_N/policy``; both built-in
    backends write one after the last step) where the step has one, else, on Tinker, its checkpoint
    (``tinker://...``).

    Raises:
        EvalError: the folder has no such policy (or is no run directory).
        SpecError: the run's spec no longer loads here (e.g. its backend is not registered).
    """
    from ctu.runners.backend import run_backend

    run = RunDir(Path(run_dir))
    if not run.spec_file.exists():
        raise EvalError(f"{run_dir} holds no {run.spec_file.name}; is it a run directory?")
    by_step = run_backend(run).policies(run)
    if not by_step:
        raise EvalError(f"{run_dir} holds no Hugging Face export (exports/global_step_N/policy, written every "
                        "trainer.hf_save_interval steps and after the last step) nor Tinker checkpoint "
                        "(checkpoints/step_*.json); is it a run directory?")
    chosen = max(by_step) if step is None else step
    if chosen not in by_step:
        raise EvalError(f"{run_dir} has no checkpoint of step {step}; it has steps {', '.join(map(str, sorted(by_step)))}")
    return chosen, by_step[chosen]


@contextlib.asynccontextmanager
async def open_policy(spec: Spec, choice: PolicyChoice, work_dir: Path, *, in_flight: int | None = None) -> AsyncIterator[PolicyHandle]:
    """The chosen policy as ``(sampler, tokenizer)`` for `ctu.rollout.build.build_generator`: an endpoint here, any
    other policy opened by a backend (`Backend.open_policy`): a run directory's by the backend that wrote the run,
    a checkpoint or the base model by the spec's backend.
    What serves it runs until the context exits.

    Args:
        spec: the spec being evaluated (its model, backend and sampling settings).
        choice: the policy.
        work_dir: the evaluation's folder, where a server a backend starts writes (unless it must serve from the
            run's own folder).
        in_flight: the episodes the evaluation runs at once, for the backend (`Backend.open_policy`).

    Raises:
        EvalError: no checkpoint where one was named. TinkerServerError: a local server did not start.
    """
    choice.check()
    if choice.endpoint is not None:
        async with _endpoint_policy(spec, str(choice.endpoint), str(choice.model), choice.api_key_env) as handle:
            yield handle
        return
    from ctu.runners.backend import backend_of, run_backend

    if choice.run_dir is not None:
        run = RunDir(Path(choice.run_dir))
        _, policy = latest_checkpoint(run.path, choice.step)
        opened = run_backend(run).open_policy(spec, policy, run, Path(work_dir), in_flight=in_flight)
    else:
        opened = backend_of(spec).open_policy(spec, choice.checkpoint, None, Path(work_dir), in_flight=in_flight)
    async with opened as handle:
        yield handle


@contextlib.asynccontextmanager
async def _endpoint_policy(spec: Spec, base_url: str, model: str, api_key_env: str | None) -> AsyncIterator[PolicyHandle]:
    """An OpenAI-compatible endpoint's chat sampler, its tokens counted with the spec's tokenizer."""
    import asyncio

    from transformers import AutoTokenizer

    from ctu.components.endpoint import ChatEndpoint, OpenAIEndpointParams
    from ctu.models.builtin import resolve
    from ctu.rollout.sampling import OpenAIChatSampler

    model_path = await asyncio.to_thread(resolve, spec.model.path)
    tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, model_path)
    endpoint = ChatEndpoint(OpenAIEndpointParams(model=model, base_url=base_url, api_key_env=api_key_env))
    try:
        yield OpenAIChatSampler(endpoint), tokenizer
    finally:
        await endpoint.aclose()
