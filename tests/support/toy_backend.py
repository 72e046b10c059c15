"""A toy training backend: the one file docs/extending.md's "Add a backend" shows, registered by a spec's `imports:`.

Its policy is a script (`tests.support.scripted_sampler.ScriptedSampler` over the built-in tokenizer) that always
gives the same reply, so nothing is learnt; what it does exercise is everything a backend owes ctu's commands:
its own spec rule (`spec_errors`), a dry run (`plan`), a run with ctu's composition root, generator, rewards, GRPO
advantages and trackers, a resume from its `state.json`, and policies `ctu eval --run-dir` opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from pydantic import Field

from ctu.composition import build_components
from ctu.registry import ComponentParams, registry
from ctu.rollout.requests import requests_for
from ctu.runners.backend import LaunchPlan, PolicyHandle
from ctu.runners.grpo import group_advantages
from ctu.runners.rundir import RunDir, RunError
from ctu.runners.task_rows import train_rows
from ctu.spec import Spec, SpecIssue, spec_to_dict
from tests.support.scripted_sampler import ScriptedSampler

TOY = "toy://"


class ToyParams(ComponentParams):
    reply: str = Field("Thank you for contacting us. Goodbye!", min_length=1)
    """What the scripted policy answers every turn."""


@registry.backends.register("toy")
class ToyBackend:
    """A scripted policy that learns nothing: for the interface's own tests."""

    Params = ToyParams

    def __init__(self, params: ToyParams) -> None:
        self.params = params

    def spec_errors(self, spec: Spec) -> Iterator[SpecIssue]:
        if spec.algorithm.use_kl_loss:
            yield SpecIssue("algorithm.use_kl_loss", "the toy backend has no reference model: set it false")

    def spec_warnings(self, spec: Spec) -> Iterator[SpecIssue]:
        return iter(())

    def deep_check(self, spec: Spec, run_dir: Path) -> tuple[list[str], list[str]]:
        return [], []

    def plan(self, spec: Spec, run_dir: RunDir) -> LaunchPlan:
        return LaunchPlan("toy config", f"reply: {self.params.reply}\n",
                          [f"{spec.trainer.max_steps} step(s) of {spec.trainer.train_batch_size} tasks x "
                           f"{spec.rollout.n_samples_per_prompt} samples", f"write results under {run_dir.path}"])

    def run(self, spec: Spec, run_dir: RunDir, *, resume: bool, progress: bool, verbose: bool) -> int:
        start = int(run_dir.read_state().get("step", 0)) if resume else 0
        if resume and not start:
            raise RunError(f"{run_dir.path} has no step to resume from")
        return asyncio.run(self._train(spec, run_dir, start, resume))

    async def _train(self, spec: Spec, run_dir: RunDir, start: int, resume: bool) -> int:
        """ctu's rollout contract in a training loop: each step a batch of tasks through `Rollout.run_batch`, the
        GRPO advantages of their rewards, the batch's metrics to the trackers, the step's policy and state saved."""
        from ctu.rollout.build import build_generator

        components = build_components(spec)
        rows, samples, size = train_rows(components), spec.rollout.n_samples_per_prompt, spec.trainer.train_batch_size
        run_dir.write_spec(spec)
        run_dir.checkpoints.mkdir(parents=True, exist_ok=True)
        components.trackers.start(run_dir.path, spec.experiment.name, components.project, spec_to_dict(spec),
                                  resume_step=start if resume else None)
        step = start
        async with self.open_policy(spec, None, None, run_dir.path) as (sampler, tokenizer):
            rollout = build_generator(components, tokenizer, sampler)
            for step in range(start + 1, (spec.trainer.max_steps or 1) + 1):
                chosen = [rows[(step * size + i) % len(rows)] for i in range(size)]
                batch = await rollout.run_batch(requests_for(chosen, samples), "train", step)
                rewards = [record.reward for record in batch.records]
                excluded = [record.infra_error is not None for record in batch.records]  # never against the policy
                advantages = group_advantages(rewards, samples, excluded=excluded)  # a real backend trains on these
                components.trackers.log({**batch.metrics, "train/reward_mean": sum(rewards) / len(rewards),
                                         "train/advantage_abs_max": max(map(abs, advantages))}, step)
                (run_dir.checkpoints / f"step_{step:06d}.json").write_text(json.dumps({"step": step, "path": f"{TOY}{step}"}))
                run_dir.write_state({"backend": spec.backend.type, "step": step})
        components.trackers.finish()
        return step

    def policies(self, run_dir: RunDir) -> dict[int, str]:
        return {int(record["step"]): record["path"]
                for record in (json.loads(path.read_text()) for path in run_dir.checkpoints.glob("step_*.json"))}

    @contextlib.asynccontextmanager
    async def open_policy(self, spec: Spec, policy: str | None, run_dir: RunDir | None,
                          work_dir: Path, *, in_flight: int | None = None) -> AsyncIterator[PolicyHandle]:
        from transformers import AutoTokenizer

        from ctu.models.tiny_qwen3 import tokenizer_path

        if policy is not None and not policy.startswith(TOY):
            raise RunError(f"not a toy policy: {policy}")
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path()))
        reply = self.params.reply
        yield ScriptedSampler(lambda prompt, call: reply, lambda text: tokenizer.encode(text), tokenizer.eos_token_id), tokenizer
