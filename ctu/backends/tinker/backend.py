"""The `tinker` backend, as ctu's commands see it (`ctu.runners.backend.Backend`); the work is in `runner`.
Importing this module (as loading a spec naming the backend does) imports neither tinker nor JAX; of `ctu.runners`
only the contract (`ctu.runners.backend`, which declares it: a backend module imports its kind's contract)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from ctu.backends.tinker.params import TinkerParams
from ctu.runners.backend import LaunchPlan
from ctu.spec.backend_rules import StepCounts, whole_batch_steps
from ctu.spec.errors import SpecIssue
from ctu.spec.models import Spec
from ctu.spec.training import Trainer

if TYPE_CHECKING:
    from ctu.runners.backend import PolicyHandle
    from ctu.runners.rundir import RunDir

UNSUPPORTED_SAMPLING = (("repetition_penalty", 1.0), ("frequency_penalty", 0.0), ("presence_penalty", 0.0))
"""Sampling settings Tinker's sampling params lack, with the value that means "off"."""
UNUSED_SETTINGS = (
    ("trainer.max_ckpts_to_keep", "the tinker backend keeps every checkpoint, on its Tinker server: remove it, or "
                                  "use the skyrl backend"),
)
"""Generic settings the tinker backend has no use for, refused away from their defaults, with why."""


def non_default(spec: Spec, path: str) -> bool:
    """Whether the setting at dotted `path` holds a value other than its field's default (False when a section on
    the way is absent)."""
    *sections, name = path.split(".")
    owner: object = spec
    for section in sections:
        owner = getattr(owner, section)
        if owner is None:
            return False
    return bool(getattr(owner, name) != type(owner).model_fields[name].default)  # type: ignore[attr-defined]


class TinkerBackend:
    """Any Tinker API server, or SkyRL's Tinker API server with its JAX backend started locally (the CPU path)."""

    Params = TinkerParams

    def __init__(self, params: TinkerParams) -> None:
        self.params = params

    def step_counts(self, tasks: int, trainer: Trainer) -> StepCounts:
        """ctu's Tinker loop: each step's batch in one optimizer step; an epoch smaller than a batch is one step."""
        return whole_batch_steps(tasks, trainer)

    def spec_errors(self, spec: Spec) -> Iterator[SpecIssue]:
        """What the Tinker path cannot honour: a reference model other than the LoRA's base (`model.path`), sampling
        penalties, no server, rollout worker processes, mini-batches (one optimizer step a step: a
        `policy_mini_batch_size` other than its default or `train_batch_size`), dynamic sampling other than
        `filter`, and `UNUSED_SETTINGS` away from their defaults (SkyRL's own training features are entries of its
        backend section, which this backend's lacks)."""
        for name, off in UNSUPPORTED_SAMPLING:
            if getattr(spec.rollout, name) != off:
                yield SpecIssue(f"rollout.{name}", f"Tinker's sampling params have no {name}: set it to {off}, or "
                                                   "use the skyrl backend")
        if spec.model.reference_path not in (None, spec.model.path):
            yield SpecIssue("model.reference_path", "the tinker backend's KL reference is the base model its LoRA "
                                                    "adapter trains on, model.path: remove reference_path or set it "
                                                    "to ${model.path}")
        if not self.params.local and not self.params.base_url:
            yield SpecIssue("backend.base_url", "set a Tinker server URL, or `local: true` to start one here")
        if not isinstance(processes := getattr(spec.rollout.generator.params, "processes", 1), str) and processes > 1:
            yield SpecIssue("rollout.generator.processes", "Tinker's sampling client lives in the training process "
                                                           "and cannot be sent to rollout worker processes: set 1 or auto")
        if self.params.loss != "ppo":
            for name in ("eps_clip_low", "eps_clip_high"):
                if non_default(spec, f"algorithm.{name}"):
                    yield SpecIssue(f"algorithm.{name}", f"the tinker backend clips the probability ratio only with "
                                                         f"`backend.loss: ppo` (this spec's loss is {self.params.loss}): "
                                                         "set loss: ppo, or remove it")
        trainer = spec.trainer
        if non_default(spec, "trainer.policy_mini_batch_size") and trainer.policy_mini_batch_size != trainer.train_batch_size:
            yield SpecIssue("trainer.policy_mini_batch_size", f"the tinker backend takes one optimizer step a step, on "
                                                              f"the whole batch: set it to train_batch_size "
                                                              f"({trainer.train_batch_size}), or use the skyrl backend, "
                                                              "which splits a step into mini-batches")
        if spec.algorithm.dynamic_sampling is not None and spec.algorithm.dynamic_sampling.type != "filter":
            yield SpecIssue("algorithm.dynamic_sampling.type", "the tinker loop re-samples with `filter` only, or use "
                                                               "the skyrl backend")
        yield from (SpecIssue(path, why) for path, why in UNUSED_SETTINGS if non_default(spec, path))

    def how_applied(self, spec: Spec) -> Iterator[str]:
        """How this backend applies the spec's settings where it differs from SkyRL's trainer (`ctu explain`)."""
        from ctu.backends.tinker.kl import penalty_coef

        if (coef := penalty_coef(spec)) > 0:
            yield (f"algorithm.use_kl_loss: the {spec.algorithm.kl_estimator} estimate of the KL to model.path (the base "
                   f"the LoRA trains on) is put into each sampled token's advantage at {coef:g}, not added to the loss")
        yield ("trainer.policy_mini_batch_size: one optimizer step a step, on the whole batch (Tinker's "
               "forward_backward on every trained episode, then optim_step)")
        if self.params.loss == "ppo":
            yield (f"algorithm.eps_clip_low, eps_clip_high: Tinker's ppo loss clips the ratio to "
                   f"[{1 - spec.algorithm.eps_clip_low:g}, {1 + spec.algorithm.eps_clip_high:g}]")
        else:
            yield f"algorithm.eps_clip_low, eps_clip_high: no clip: Tinker's {self.params.loss} loss has none"
        yield ("algorithm.zero_variance_filter: an episode of zero advantage is fed to the trainer only for its KL "
               "penalty; the filter leaves those of groups without a reward spread out")
        yield "trainer.max_ckpts_to_keep: every checkpoint is kept, on the Tinker server"

    def spec_warnings(self, spec: Spec) -> Iterator[SpecIssue]:
        """None: what this backend does not apply is refused by `spec_errors`."""
        return iter(())

    def deep_check(self, spec: Spec, run_dir: Path) -> tuple[list[str], list[str]]:
        """Nothing more: the Tinker loop is ctu's own, fully checked by `spec_errors`."""
        return [], []

    def plan(self, spec: Spec, run_dir: RunDir) -> LaunchPlan:
        """The resolved spec (ctu's loop has no other config) and the launch steps."""
        from ctu.spec import dump_spec

        params = self.params
        server = ("start SkyRL's Tinker API server (JAX backend) on 127.0.0.1" if params.local
                  else f"use the Tinker server at {params.base_url}")
        steps = f"up to {spec.trainer.max_steps or 'all'}"
        work = (f"model {spec.model.path}, LoRA rank {params.lora_rank}, loss cross_entropy on the assistant's tokens",
                f"{steps} SFT step(s) of {spec.trainer.train_batch_size} conversations from {spec.data.sft}")
        if spec.data.sft is None:
            work = (f"model {spec.model.path}, LoRA rank {params.lora_rank}, loss {params.loss}",
                    f"{steps} step(s) of {spec.trainer.train_batch_size} tasks x {spec.rollout.n_samples_per_prompt} samples")
        return LaunchPlan("resolved spec", dump_spec(spec), [
            server,
            *work,
            f"evaluate {', '.join(spec.data.test_sets) or 'no test sets'} every {spec.trainer.eval_interval} step(s)",
            f"write results under {run_dir.path}",
        ])

    def run(self, spec: Spec, run_dir: RunDir, *, resume: bool, progress: bool, verbose: bool) -> int:
        """`ctu.backends.tinker.runner.TinkerRunner`'s GRPO loop; the libraries' standard-library logs (the Tinker
        SDK's "Creating checkpoint archive" at the export, transformers') go to ``logs/tinker-<time>.log`` in the run
        directory (`ctu.runners.console.route_driver_logs`), ctu's own lines to the console."""
        from datetime import datetime

        from ctu.backends.tinker.runner import TinkerRunner
        from ctu.runners.console import route_driver_logs

        route_driver_logs(run_dir.path / "logs" / f"tinker-{datetime.now():%y%m%d_%H%M%S}.log", verbose)
        return TinkerRunner(spec, self.params, run_dir, resume=resume, progress=progress).run().get("step", 0)

    def policies(self, run_dir: RunDir) -> dict[int, str]:
        """The run's Tinker checkpoints (``tinker://...``, from ``checkpoints/step_NNNNNN.json``), and where a step
        has one, its Hugging Face export instead (every `hf_save_interval` steps and after the last step)."""
        found = {int(record["step"]): str(record["path"])
                 for record in (json.loads(path.read_text()) for path in sorted(run_dir.checkpoints.glob("step_*.json")))}
        return {**found, **run_dir.hf_exports()}

    def open_policy(self, spec: Spec, policy: str | None, run_dir: RunDir | None,
                    work_dir: Path, *, in_flight: int | None = None) -> AbstractAsyncContextManager[PolicyHandle]:
        """The policy sampled through the spec's Tinker server (a remote one when the spec names it), else a local
        one (`ctu.backends.tinker.policy.serve_policy`) sampling as the spec's `sample_batch_size` says, whatever
        `in_flight`."""
        from ctu.backends.tinker.policy import serve_policy

        return serve_policy(spec, self.params, policy, run_dir, work_dir)
