"""The `tinker` backend: a client-side GRPO loop over the Tinker API.

Each step samples groups of rollouts with ctu's generator through a Tinker sampling client, scores them with
the spec's reward chain, computes group-normalised advantages (infrastructure errors left out of their groups
and the loss; a step with more of them than `trainer.max_infra_error_rate` is skipped), runs
`forward_backward` with the spec's loss (`importance_sampling` or `ppo`) one trajectory at a time, or with
``rollout.trajectory: step_wise`` one policy turn at a time, each with its episode's advantage times its turn's
weight (`TrajectoryRecord.training_samples`) (gradients accumulate until `optim_step`), with a KL penalty to the
LoRA's base model in the advantages when `algorithm.use_kl_loss` (`ctu.backends.tinker.kl`), steps the optimizer, and
samples the next step from the new weights. Test sets
are evaluated before training (if asked), every `eval_interval` steps and after the last step. Checkpoints are
saved through the API every `ckpt_interval` steps, at each epoch's end and after the last step; the policy is
exported as a merged Hugging Face model (`exports/global_step_N/policy`) every `hf_save_interval` steps and after
the last step.
`backend.local` starts SkyRL's Tinker API server with its JAX backend on this machine for the run.

With `data.sft`, each step is supervised fine-tuning instead: `train_batch_size` of the SFT conversations
(`ctu.sft.tokens`, tokenised as the generator tokenises episodes), `forward_backward` with Tinker's
`cross_entropy` loss weighted by the loss mask (the assistant's tokens), then `optim_step`; evaluations,
checkpoints and exports as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import random
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ctu.backends.tinker.batch import SampledBatch, StepPlan
from ctu.backends.tinker.export import export_policy
from ctu.backends.tinker.kl import penalise, penalty_coef
from ctu.backends.tinker.outputs import FedBatch, loss_sum, samples_of
from ctu.backends.tinker.params import TinkerParams
from ctu.composition import build_components
from ctu.metrics import EVAL, TIMING, TRAIN, VALIDATION, evaluation_metrics, metric
from ctu.models.builtin import resolve
from ctu.rollout.requests import requests_for
from ctu.runners.console import step_bars
from ctu.runners.grpo import (
    group_advantages,
    learning_rate,
    skip_step,
    skipped_step_message,
    step_logprob_gap,
    unplayed_step,
    weigh_negative,
)
from ctu.runners.rundir import RunDir, RunError, RunState
from ctu.runners.task_rows import TaskRow, evaluation_rows, train_rows
from ctu.spec import Spec, spec_to_dict

if TYPE_CHECKING:
    import tinker

    from ctu.components.chat_templates.base import Tokenizer
    from ctu.composition import Components
    from ctu.rollout.records import Rollout, TrajectoryRecord
    from ctu.rollout.tokens import TokenAccount

logger = logging.getLogger(__name__)


class TinkerRunner:
    """Runs one spec on the Tinker backend (see the module docstring).

    Args:
        spec: a valid spec whose backend is `tinker`.
        backend: the params the `tinker` backend was built with (the spec's `backend` section).
        run_dir: the run directory.
        resume: continue from the run directory's last checkpoint.
        progress: show rich progress bars.
    """

    def __init__(self, spec: Spec, backend: TinkerParams, run_dir: RunDir, resume: bool = False, progress: bool = True) -> None:
        self.spec = spec
        self.backend = backend
        self.run_dir = run_dir
        self.resume = resume
        self.progress = progress

    def run(self) -> RunState:
        """Train; returns the final state (`RunState`: the last step and its checkpoint). A built-in model is built
        first if it is not cached, before the training loop starts."""
        return asyncio.run(self._run(resolve(self.spec.model.path)))

    @contextlib.contextmanager
    def _server(self, model_path: str) -> Iterator[Callable[[], str]]:
        """Yields a function returning the Tinker server's base URL; a local server is started on entry and
        that function waits for it to be healthy, so the run's other preparations overlap its boot."""
        if not self.backend.local:
            yield lambda: str(self.backend.base_url)
            return
        from ctu.backends.tinker.server import LocalTinkerServer

        with LocalTinkerServer(model_path, self.run_dir.path / "tinker", lora_rank=self.backend.lora_rank,
                               sample_max_num_sequences=self.backend.sample_batch_size) as server:
            yield server.wait_healthy

    async def _run(self, model_path: str) -> RunState:
        spec = self.spec
        resume_from, start_step = self._resume_point()
        self.run_dir.write_spec(spec)  # with the state, the run directory holds a run from now on
        self.run_dir.write_state(state := RunState(backend=spec.backend.type, step=start_step, checkpoint=resume_from))
        with self._server(model_path) as server_url:  # a local server boots while the rest is prepared
            from transformers import AutoTokenizer

            from ctu.backends.tinker.sampler import TinkerSampler
            from ctu.backends.tinker.service import tinker_service
            from ctu.rollout.build import build_generator
            from ctu.rollout.trajectories import TrajectoryLogger

            tokenizer = AutoTokenizer.from_pretrained(model_path)
            components = build_components(spec)
            plan, account = self._plan(components, tokenizer)
            tests = evaluation_rows(components)
            trackers = components.trackers
            # a resumed run sets aside the lines logged after its checkpoint's step (all of them, starting over)
            trackers.start(self.run_dir.path, spec.experiment.name, components.project, spec_to_dict(spec),
                           resume_step=(start_step if resume_from else -1) if self.resume else None, tags=spec.experiment.tags)
            trajectory_log = TrajectoryLogger(self.run_dir.path, spec.tracking.trajectories.every_n_steps,
                                      spec.tracking.trajectories.train_samples, spec.experiment.seed)
            session = contextlib.ExitStack()  # the SDK client's session, ended with the run (`tinker_service`)
            try:
                base_url = await asyncio.to_thread(server_url)
                service = session.enter_context(tinker_service(base_url, os.environ.get(self.backend.api_key_env) or "tml-local"))
                training = await (service.create_training_client_from_state_with_optimizer_async(resume_from) if resume_from
                                  else service.create_lora_training_client_async(base_model=model_path, rank=self.backend.lora_rank))
                sampler = TinkerSampler(await training.save_weights_and_get_sampling_client_async(), process_bound=True)
                reference = await self._reference(service, model_path)
                with step_bars(self.progress, "SFT steps" if spec.data.sft else "GRPO steps", plan.total_steps,
                               start_step) as (advance, on_episode):
                    generator = build_generator(components, tokenizer, sampler, on_records=trajectory_log, on_episode=on_episode)
                    if start_step == 0 and spec.trainer.eval_before_train and tests:
                        trackers.log(await self._evaluate(generator, tests, 0), 0)
                    for step in range(start_step + 1, plan.total_steps + 1):
                        started = time.perf_counter()
                        if spec.data.sft is not None:
                            assert account is not None  # an SFT run's plan comes with its token account
                            metrics = await self._sft_step(account, training, plan, step)
                        else:
                            metrics = await self._train_step(generator, training, plan, step, reference)
                        sampler.client = await training.save_weights_and_get_sampling_client_async()
                        if tests and self._evaluates(step, plan):
                            metrics.update(await self._evaluate(generator, tests, step))
                        metrics[metric(TIMING, "step")] = time.perf_counter() - started
                        checkpoint = await self._save(service, training, model_path, plan, step)
                        trackers.log(metrics, step)
                        if checkpoint is not None:  # the state names the step a resume continues from: a checkpoint's
                            state = {"backend": spec.backend.type, "step": step, "checkpoint": checkpoint,
                                     "total_steps": plan.total_steps}
                            self.run_dir.write_state(state)
                        advance()
            finally:
                session.close()
                trackers.finish()
                self.run_dir.plot_rewards()
        return state

    async def _reference(self, service: tinker.ServiceClient, model_path: str) -> tinker.SamplingClient | None:
        """A sampling client of the base model the LoRA adapter trains on, the KL penalty's reference
        (`ctu.backends.tinker.kl`), when the spec asks for one (a GRPO run with `algorithm.use_kl_loss`), else None."""
        return await service.create_sampling_client_async(base_model=model_path) if penalty_coef(self.spec) > 0 else None

    def _evaluates(self, step: int, plan: StepPlan) -> bool:
        """Whether step `step` ends with an evaluation: the last step (unless `eval_after_train` is false), and every
        `eval_interval` steps."""
        interval = self.spec.trainer.eval_interval
        return (step == plan.total_steps and self.spec.trainer.eval_after_train) or bool(interval and step % interval == 0)

    def _plan(self, components: Components, tokenizer: Tokenizer) -> tuple[StepPlan, TokenAccount | None]:
        """The run's steps over its rows (the SFT data's conversations, else the training tasks) and, for SFT, the
        token account its conversations are tokenised with."""
        spec = self.spec
        account = None
        if spec.data.sft is not None:
            from ctu.rollout.tokens import TokenAccount
            from ctu.sft.tokens import read_sft_rows

            rows: list[Any] = read_sft_rows(spec.data.sft)
            account = TokenAccount(components.chat_template, tokenizer)
        else:
            rows = train_rows(components)
        return StepPlan(rows, spec.trainer.train_batch_size, spec.trainer.epochs, spec.experiment.seed, spec.data.shuffle,
                        spec.trainer.max_steps), account

    async def _save(self, service: tinker.ServiceClient, training: tinker.TrainingClient, model_path: str, plan: StepPlan, step: int) -> str | None:
        """Save what step `step` saves: a checkpoint at the last step, each epoch's end and every `ckpt_interval`
        steps (returns its path; None when none), and a Hugging Face export at the last step and every
        `hf_save_interval` steps."""
        trainer = self.spec.trainer
        last = step == plan.total_steps
        checkpoint = None
        if last or step % plan.steps_per_epoch == 0 or (trainer.ckpt_interval and step % trainer.ckpt_interval == 0):
            checkpoint = await self._checkpoint(training, step)
        if last or (trainer.hf_save_interval and step % trainer.hf_save_interval == 0):
            await export_policy(service, training, model_path, step, self.run_dir.hf_export(step))
        return checkpoint

    async def _evaluate(self, generator: Rollout, tests: dict[str, list[TaskRow]], step: int) -> dict[str, float]:
        """Every test set, in `eval_batch_size` chunks, in the eval phase."""
        samples = self.spec.rollout.eval_n_samples_per_prompt
        metrics: dict[str, float] = {}
        all_records: list[TrajectoryRecord] = []
        evaluated = 0
        for name, rows in tests.items():
            records: list[TrajectoryRecord] = []
            for start in range(0, len(rows), self.spec.trainer.eval_batch_size):
                chunk = rows[start : start + self.spec.trainer.eval_batch_size]
                records += (await generator.run_batch(requests_for(chunk, samples), "eval", step)).records
            metrics.update(evaluation_metrics(name, records, samples))
            evaluated += len(records)
            if name != VALIDATION:  # `test-all` pools the test sets only
                all_records += records
        metrics.update(evaluation_metrics("all", all_records, samples) if len(set(tests) - {VALIDATION}) > 1 else {})
        metrics[metric(EVAL, "num_episodes")] = float(evaluated)
        return metrics

    async def _train_step(self, generator: Rollout, training: tinker.TrainingClient, plan: StepPlan, step: int,
                          reference: tinker.SamplingClient | None = None) -> dict[str, float]:
        """One GRPO step: sample, weigh advantages, feed `forward_backward` and step the optimizer; with `reference`
        (the LoRA's base model, when the spec asks for a KL penalty) every sample that is not an infrastructure
        error is fed with the penalty in its advantages (`ctu.backends.tinker.kl`). Returns the step's metrics."""
        import tinker

        spec = self.spec
        samples = spec.rollout.n_samples_per_prompt
        batch = await self._sample(generator, plan, step)
        records = batch.records
        excluded = [record.infra_error is not None for record in records]
        advantages = weigh_negative(group_advantages(batch.rewards, samples, spec.algorithm.norm_adv_by_std, excluded),
                                    spec.algorithm.negative_advantage_weight)
        skipped = skip_step(excluded, spec.trainer.max_infra_error_rate)
        if skipped:
            logger.warning(skipped_step_message(step, [r.infra_error for r in records], spec.trainer.max_infra_error_rate))
        started = time.perf_counter()
        fed = FedBatch()
        config = ({"clip_low_threshold": 1.0 - spec.algorithm.eps_clip_low, "clip_high_threshold": 1.0 + spec.algorithm.eps_clip_high}
                  if self.backend.loss == "ppo" else None)
        penalising = reference if batch.sampler_logprobs else None  # the penalty needs the sampler's logprobs
        if reference is not None and penalising is None:
            logger.warning("step %d: no KL penalty: the sampler gave no log-probabilities to set against the reference's", step)
        # with the penalty, a zero-advantage episode carries its term (unless its group is filtered); else nothing to train on
        filtered = batch.unspread(samples) if spec.algorithm.zero_variance_filter else set()
        episodes = [samples_of(record, whole_logprobs, advantage, spec.rollout.turn_discount)
                    for i, (record, whole_logprobs, advantage, out) in enumerate(zip(records, batch.logprobs, advantages, excluded, strict=True))
                    if not skipped and not out and i not in filtered and (advantage != 0.0 or penalising is not None)]
        penalty: dict[str, float] = {}
        if penalising is not None:
            penalty = await penalise(penalising, [data for episode in episodes for data in episode], penalty_coef(spec),
                                     spec.algorithm.kl_estimator)
        for episode in episodes:
            await fed.feed_data(training, episode, batch.sampler_logprobs, self.backend.loss, config)
        trained = fed.trajectories
        optimizer = spec.trainer.optimizer
        rate = learning_rate(step, optimizer.lr, optimizer.warmup_steps, plan.total_steps, optimizer.scheduler)
        if trained:
            params = tinker.types.AdamParams(learning_rate=rate, weight_decay=optimizer.weight_decay, grad_clip_norm=optimizer.max_grad_norm)
            await (await training.optim_step_async(params)).result_async()
        groups = [advantages[i : i + samples] for i in range(0, len(advantages), samples)]
        metrics = batch.metrics
        metrics.update({
            metric(TRAIN, "learning_rate"): rate,
            metric(TRAIN, "trained_trajectories"): float(trained),
            metric(TRAIN, "trained_samples"): float(fed.samples),
            metric(TIMING, "train"): time.perf_counter() - started,
            metric(TRAIN, "groups"): float(len(groups)),
            metric(TRAIN, "groups_with_nonzero_advantage"): float(sum(any(a != 0.0 for a in g) for g in groups)),
            metric(TRAIN, "advantage_abs_mean"): sum(abs(a) for a in advantages) / len(advantages) if advantages else 0.0,
            metric(TRAIN, "optimizer_steps"): float(bool(trained)),
            metric(TRAIN, "skipped_steps"): float(skipped),
        })
        metrics.update(penalty)
        if fed.losses:
            metrics[metric(TRAIN, "loss_sum")] = sum(fed.losses)
        gap = spec.algorithm.logprob_gap
        metrics.update(step_logprob_gap(step, fed.sampled_logprobs, fed.trainer_logprobs, gap.token_threshold, gap.warn_mean))
        return metrics

    async def _sft_step(self, account: TokenAccount, training: tinker.TrainingClient, plan: StepPlan, step: int) -> dict[str, float]:
        """One SFT step: the step's conversations (cut at `model.max_model_len`), Tinker's `cross_entropy` on the
        assistant's tokens, one conversation a `forward_backward` (gradients accumulate), then `optim_step`."""
        import numpy as np
        import tinker

        from ctu.sft.tokens import conversation_tokens

        losses: list[float] = []
        trained_tokens = seen_tokens = 0
        rows: list[dict[str, Any]] = plan.batch(step)
        for row in rows:
            prompt, response, mask = conversation_tokens(account, row["messages"], row["tools"])
            tokens = (prompt + response)[: self.spec.model.max_model_len]
            weights = ([0.0] * len(prompt) + [float(m) for m in mask])[: len(tokens)]
            datum = tinker.types.Datum(
                model_input=tinker.types.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={
                    "target_tokens": tinker.types.TensorData.from_numpy(np.array(tokens[1:], dtype=np.int64)),
                    "weights": tinker.types.TensorData.from_numpy(np.array(weights[1:], dtype=np.float32)),
                },
            )
            result = await (await training.forward_backward_async([datum], "cross_entropy")).result_async()
            loss = loss_sum(result)
            if loss is not None and math.isfinite(loss):
                losses.append(loss)
            trained_tokens += int(sum(weights[1:]))
            seen_tokens += len(tokens)
        optimizer = self.spec.trainer.optimizer
        rate = learning_rate(step, optimizer.lr, optimizer.warmup_steps, plan.total_steps, optimizer.scheduler)
        params = tinker.types.AdamParams(learning_rate=rate, weight_decay=optimizer.weight_decay, grad_clip_norm=optimizer.max_grad_norm)
        await (await training.optim_step_async(params)).result_async()
        metrics = {metric(TRAIN, "learning_rate"): rate, metric(TRAIN, "optimizer_steps"): 1.0,
                   metric(TRAIN, "sft_conversations"): float(len(rows)),
                   metric(TRAIN, "sft_tokens"): float(trained_tokens), metric(TRAIN, "sft_tokens_seen"): float(seen_tokens)}
        if losses:
            metrics[metric(TRAIN, "loss_sum")] = sum(losses)
            metrics[metric(TRAIN, "sft_loss_per_token")] = sum(losses) / max(trained_tokens, 1)
        return metrics

    async def _sample(self, generator: Rollout, plan: StepPlan, step: int) -> SampledBatch:
        """The step's groups: its tasks (`plan.batch(step)`), each sampled `n_samples_per_prompt` times; with
        `algorithm.dynamic_sampling` (`filter`, DAPO's), groups without a reward spread (`grpo.groups_without_spread`;
        infrastructure errors add none) are dropped and more tasks sampled until `train_batch_size` groups with one
        are collected.

        Round r > 1 of step s samples `train_batch_size` tasks drawn from every training task with a seed of
        (experiment seed, s, r), so a resumed step draws the same ones; SkyRL instead takes the epoch's next
        batches. Rollout metrics are over every episode sampled for the step.

        Raises:
            RuntimeError: `max_sample_batches` rounds did not collect enough groups with a spread.
            NothingMeasuredError: no finished episode of a round reached a policy turn (`grpo.unplayed_step`).
        """
        spec = self.spec
        rows = plan.batch(step)
        samples, sampling, target = spec.rollout.n_samples_per_prompt, spec.algorithm.dynamic_sampling, len(rows)
        kept: list[int] = []
        batch = SampledBatch()
        while True:
            batch.rounds += 1
            first = len(batch.records)
            shuffled = f"{spec.experiment.seed}/{step}/{batch.rounds}" if spec.algorithm.shuffle_rewards else None
            batch.add(await generator.run_batch(requests_for(rows, samples), "train", step), shuffled)
            if unplayed := unplayed_step(step, batch.records[first:]):
                raise unplayed
            for group in range(first, len(batch.records), samples):
                spread = not batch.zero_variance(group, samples)
                batch.dropped += not spread
                if sampling is None or spread:
                    kept.append(group)
            if sampling is None or len(kept) >= target:
                break
            if 0 < sampling.max_sample_batches <= batch.rounds:
                raise RuntimeError(f"step {step}: {batch.rounds} batches sampled (algorithm.dynamic_sampling."
                                   f"max_sample_batches) gave {len(kept)} of {target} groups with a reward spread: "
                                   "the tasks are too easy or too hard for the policy")
            rows = random.Random(f"{spec.experiment.seed}/{step}/{batch.rounds}").sample(plan.rows, min(target, len(plan.rows)))
        return batch.keep([i for group in kept[:target] for i in range(group, group + samples)])

    def _resume_point(self) -> tuple[str | None, int]:
        """The checkpoint a resume continues from and its step as its record in ``checkpoints/`` names it (else the
        state's: an older state could name a later step; the record's never skips an update); ``(None, 0)``: a new run,
        or one killed before its first checkpoint, which starts over. Raises `RunError` for a state naming a step done
        but no checkpoint (not a run to start over in place)."""
        state: RunState = self.run_dir.read_state() if self.resume else {}
        path, stated = state.get("checkpoint"), state.get("step", 0)
        if not path and stated > 0:
            raise RunError(f"{self.run_dir.state_file} says step {stated} is done but names no checkpoint: restore its "
                           f"`checkpoint` (in {self.run_dir.checkpoints}), or start a new run elsewhere; nothing was changed")
        for record in self.run_dir.checkpoints.glob("step_*.json") if path else ():
            saved = json.loads(record.read_text(encoding="utf-8"))
            if saved.get("path") == path:
                return path, int(saved["step"])
        return path, stated if path else 0

    async def _checkpoint(self, training: tinker.TrainingClient, step: int) -> str:
        """Save weights and optimizer through the API; record the path in `checkpoints/step_NNNNNN.json`."""
        result = await (await training.save_state_async(name=f"step_{step:06d}", overwrite=True)).result_async()
        self.run_dir.checkpoints.mkdir(parents=True, exist_ok=True)
        (self.run_dir.checkpoints / f"step_{step:06d}.json").write_text(json.dumps({"step": step, "path": result.path}) + "\n")
        return str(result.path)
