"""One GRPO step of the Tinker runner (`TinkerRunner._train_step`) against a recording stand-in for the Tinker
training client, with a generator stand-in whose batch holds infrastructure errors."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest
import tinker

from ctu.backends.tinker.batch import StepPlan
from ctu.backends.tinker.runner import TinkerRunner
from ctu.rollout.records import RolloutBatch, TrajectoryRecord, TurnSample
from ctu.runners.rundir import RunDir
from ctu.runners.task_rows import TaskRow
from ctu.spec import spec_from_dict
from tau_bench_env.outcome import EpisodeResult


class Done:
    def __init__(self, metrics: dict[str, float], loss_fn_outputs: list | None = None) -> None:
        self.metrics = metrics
        self.loss_fn_outputs = loss_fn_outputs or []

    async def result_async(self) -> Done:
        return self


class RecordingTraining:
    """Records what a step sends to Tinker's `forward_backward` and whether it steps the optimizer."""

    def __init__(self, target_logprobs: list[float] | None = None) -> None:
        self.advantages: list[list[float]] = []
        self.inputs: list[list[int]] = []
        self.sampler_logprobs: list[list[float]] = []
        self.optimizer_steps = 0
        self.target_logprobs = target_logprobs
        """What the trainer's forward pass gives each datum's targets (Tinker's ``loss_fn_outputs``), if anything."""

    async def forward_backward_async(self, data, loss, config):
        self.advantages += [list(datum.loss_fn_inputs["advantages"].to_numpy()) for datum in data]
        self.inputs += [datum.model_input.to_ints() for datum in data]
        self.sampler_logprobs += [list(datum.loss_fn_inputs["logprobs"].to_numpy()) for datum in data]
        outputs = [{"logprobs": tinker.types.TensorData(data=self.target_logprobs, dtype="float32", shape=[len(self.target_logprobs)])}
                   for _ in data] if self.target_logprobs is not None else None
        return Done({"loss:sum": 0.5}, outputs)

    async def optim_step_async(self, params):
        self.optimizer_steps += 1
        return Done({})


class FixedGenerator:
    """A rollout of groups of two: each `run_batch` call takes the next rewards and infrastructure errors."""

    def __init__(self, *batches: tuple[list[float], list[str | None]], turns: bool = False, logprobs: bool = True) -> None:
        self.batches = list(batches)
        self.calls: list[list[str]] = []
        self.turns = turns
        """Give each episode two policy turns as samples of their own (step-wise): [1, 2] -> [3], then [1, 2, 3, 9] -> [4]."""
        self.logprobs = logprobs
        """Give the sampled tokens the sampler's log-probabilities (else none, as a sampler that reports none)."""

    async def run_batch(self, requests, phase, step):
        rewards, errors = self.batches.pop(0)
        self.calls.append([request.task.task_id for request in requests])
        turns = [TurnSample([1, 2], [3], [-0.5], [1]), TurnSample([1, 2, 3, 9], [4], [-1.0], [1])] if self.turns else []
        records = [TrajectoryRecord([1, 2], [3, 9, 4], [1, 0, 1], [-0.5, 0.0, -1.0] if self.logprobs else [], reward, "stop",
                                    EpisodeResult("retail", request.task.task_id, reward=reward),
                                    infra_error=error, turn_samples=list(turns)) for reward, error, request in zip(rewards, errors, requests)]
        self.records = records
        return RolloutBatch(records, {})

    async def run_episode(self, request, phase):
        raise AssertionError("the Tinker loop runs batches")


ROWS = [TaskRow("retail", str(i)) for i in range(6)]


class Reference:
    """The LoRA's base model's sampling client: its log-probability of each token after the first, as Tinker's
    `compute_logprobs_async` gives them (None for the first)."""

    def __init__(self, logprobs: dict[int, float], first: bool = True) -> None:
        self.logprobs = logprobs
        self.first = first
        """Give the first token a None, as Tinker's API does (SkyRL's local server gives nothing for it)."""
        self.asked: list[list[int]] = []

    async def compute_logprobs_async(self, prompt):
        tokens = prompt.to_ints()
        self.asked.append(tokens)
        return [None] * self.first + [self.logprobs[token] for token in tokens[1:]]


def step(minimal, tmp_path: Path, rewards, infra_errors, *more, algorithm=None, target_logprobs=None, rollout=None,
         reference=None, logprobs=True, **trainer):
    """One step of two tasks x two samples (each a prompt of 2 tokens, then 2 sampled tokens the sampler gave
    log-probabilities -0.5 and -1.0 around an observation's token); `more` are the batches dynamic sampling draws
    next; `target_logprobs`, the trainer's of the 4 targets; `rollout`, more of the spec's section (step-wise
    trajectories give each sampled token a sample of its own)."""
    minimal["rollout"] = {"n_samples_per_prompt": 2, **(rollout or {})}
    minimal["trainer"] = {"train_batch_size": 2, "policy_mini_batch_size": 2, **trainer}
    minimal["algorithm"] = {"use_kl_loss": False, **(algorithm or {})}
    spec = spec_from_dict(minimal).spec
    runner = TinkerRunner(spec, spec.backend.params, RunDir(tmp_path), progress=False)
    training = RecordingTraining(target_logprobs)
    plan = StepPlan(ROWS, 2, 1, 0, shuffle=False, max_steps=None)
    generator = FixedGenerator((rewards, infra_errors), *more, turns=minimal["rollout"].get("trajectory") == "step_wise",
                               logprobs=logprobs)
    metrics = asyncio.run(runner._train_step(generator, training, plan, 1, reference))
    return training, metrics, generator


def test_an_infrastructure_error_trains_nothing_and_leaves_its_group_without_a_baseline(minimal, tmp_path):
    training, metrics, _ = step(minimal, tmp_path, [1.0, 0.0, 1.0, 0.0], [None, None, None, "user simulator: 503"])
    # group 1 trains both episodes; group 2 has one episode left, so nothing to compare it with
    assert [a[-1] for a in training.advantages] == pytest.approx([0.7071, -0.7071], abs=1e-3)
    assert training.optimizer_steps == 1
    assert metrics["train/trained_trajectories"] == 2.0 and metrics["train/skipped_steps"] == 0.0


def test_step_wise_trajectories_train_each_turn_with_its_episodes_advantage_times_its_weight(minimal, tmp_path):
    whole, metrics, _ = step(minimal, tmp_path, [1.0, 0.0, 1.0, 0.0], [None] * 4)
    assert whole.inputs == [[1, 2, 3, 9]] * 4 and metrics["train/trained_samples"] == 4.0
    training, metrics, _ = step(minimal, tmp_path, [1.0, 0.0, 1.0, 0.0], [None] * 4,
                                rollout={"trajectory": "step_wise", "turn_discount": 0.5})
    assert training.inputs == [[1, 2], [1, 2, 3, 9]] * 4  # each turn's own prompt and sampled token, shifted
    assert [a[-1] for a in training.advantages] == pytest.approx([0.3536, 0.7071, -0.3536, -0.7071] * 2, abs=1e-3)
    assert training.sampler_logprobs[:2] == [pytest.approx([0.0, -0.5]), pytest.approx([0.0, 0.0, 0.0, -1.0])]
    assert metrics["train/trained_trajectories"] == 4.0 and metrics["train/trained_samples"] == 8.0
    assert training.optimizer_steps == 1  # one update over every turn of the step


def test_the_samplers_log_probabilities_are_compared_with_the_trainers_before_the_update(minimal, tmp_path, caplog):
    # the trainer's forward pass on the 4 targets (the prompt's last token, a sampled one, the observation's, the
    # other sampled one): the sampled ones are 0.1 and 0.8 from the sampler's -0.5 and -1.0
    training, metrics, _ = step(minimal, tmp_path, [1.0, 0.0, 1.0, 0.0], [None] * 4, target_logprobs=[-9.0, -0.6, -5.0, -0.2],
                                algorithm={"logprob_gap": {"token_threshold": 0.5, "warn_mean": 0.3}})
    assert training.sampler_logprobs[0] == pytest.approx([0.0, -0.5, 0.0, -1.0])  # what the loss weighs against
    assert metrics["train/logprob_gap_mean"] == pytest.approx(0.45)
    assert metrics["train/logprob_gap_max"] == pytest.approx(0.8)
    assert metrics["train/logprob_gap_frac_over"] == 0.5
    assert metrics["train/logprob_gap_tokens"] == 8.0  # 2 sampled tokens x 4 trained trajectories
    assert "step 1: the sampler's and the trainer's log-probabilities of the sampled tokens differ by 0.450" in caplog.text
    assert caplog.text.count("differ by") == 1  # once for the step
    caplog.clear()
    _, metrics, _ = step(minimal, tmp_path, [1.0, 0.0, 1.0, 0.0], [None] * 4, target_logprobs=[-9.0, -0.6, -5.0, -0.2],
                         algorithm={"logprob_gap": {"warn_mean": None}})
    assert metrics["train/logprob_gap_mean"] == pytest.approx(0.45) and "differ by" not in caplog.text  # measured, no warning
    # a trainer that returns no log-probabilities gives no figure, rather than a made-up one
    _, metrics, _ = step(minimal, tmp_path, [1.0, 0.0, 1.0, 0.0], [None] * 4)
    assert not any(name.startswith("train/logprob_gap") for name in metrics)


def test_a_kl_penalty_moves_each_sampled_tokens_advantage_by_its_distance_from_the_reference(minimal, tmp_path):
    """With the LoRA's base model as reference, every sampled token's advantage moves by coef x (mean diff - diff),
    diff = sampler logprob - reference logprob (here 0.2 and -0.5, mean -0.15); an episode with no advantage of its
    own is fed with the penalty alone; an infrastructure error is not fed at all."""
    reference = Reference({2: -9.0, 3: -0.7, 9: -5.0, 4: -0.5})  # tokens 3 and 4 are the sampled ones
    training, metrics, _ = step(minimal, tmp_path, [1.0, 0.0, 1.0, 0.0], [None, None, None, "user simulator: 503"],
                                algorithm={"use_kl_loss": True, "kl_loss_coef": 0.1, "kl_estimator": "k1",
                                           "negative_advantage_weight": 0.0}, reference=reference)
    assert reference.asked == [[1, 2, 3, 9, 4]] * 3  # each sample fed, its whole sequence
    assert metrics["train/kl_to_reference"] == pytest.approx(-0.15) and metrics["train/kl_penalty_coef"] == 0.1
    success, penalty_alone = (pytest.approx(a, abs=1e-4) for a in ([0.0, 0.7071 - 0.035, 0.0, 0.7071 + 0.035],
                                                                    [0.0, -0.035, 0.0, 0.035]))
    # the failure (advantage 0 at a negative weight of 0), and the success whose group lost its baseline to the
    # infrastructure error (no advantage): the penalty alone
    assert training.advantages == [success, penalty_alone, penalty_alone]
    assert metrics["train/trained_trajectories"] == 3.0
    local, _, _ = step(minimal, tmp_path, [1.0, 0.0, 1.0, 0.0], [None, None, None, "user simulator: 503"],
                       algorithm={"use_kl_loss": True, "kl_loss_coef": 0.1, "kl_estimator": "k1",
                                  "negative_advantage_weight": 0.0}, reference=Reference(reference.logprobs, first=False))
    assert local.advantages == training.advantages  # SkyRL's server's form: no value for the first token
    without, metrics, _ = step(minimal, tmp_path, [1.0, 0.0, 1.0, 0.0], [None, None, None, "user simulator: 503"],
                               algorithm={"negative_advantage_weight": 0.0})
    assert len(without.advantages) == 1 and "train/kl_to_reference" not in metrics  # no reference: the success only


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3", "abs"])
def test_the_kl_penalty_is_the_specs_estimator_of_each_sampled_tokens_distance(minimal, tmp_path, estimator):
    """`algorithm.kl_estimator` is the penalty's per-token estimate (`token_kl`): with log r = 0.2 and -0.5 for the
    two sampled tokens, each one's advantage moves by coef x (mean d - d), d its estimate."""
    from ctu.backends.tinker.kl import token_kl

    log_ratios = [-0.5 - -0.7, -1.0 - -0.5]
    expected = {"k1": log_ratios, "k2": [r * r / 2 for r in log_ratios], "abs": [abs(r) for r in log_ratios],
                "k3": [math.exp(-r) - 1 + r for r in log_ratios]}[estimator]
    assert [token_kl(s, r, estimator) for s, r in ((-0.5, -0.7), (-1.0, -0.5))] == pytest.approx(expected)
    reference = Reference({2: -9.0, 3: -0.7, 9: -5.0, 4: -0.5})
    training, metrics, _ = step(minimal, tmp_path, [1.0, 1.0, 1.0, 1.0], [None] * 4, reference=reference,
                                algorithm={"use_kl_loss": True, "kl_loss_coef": 0.1, "kl_estimator": estimator})
    mean = sum(expected) / 2
    assert metrics["train/kl_to_reference"] == pytest.approx(mean)
    assert training.advantages == [[0.0, pytest.approx(0.1 * (mean - expected[0])), 0.0,
                                    pytest.approx(0.1 * (mean - expected[1]))]] * 4


def test_the_zero_variance_filter_feeds_no_episode_of_a_group_without_a_spread(minimal, tmp_path):
    """Under a KL penalty a zero-advantage episode is fed for its penalty alone; `algorithm.zero_variance_filter`
    leaves out the groups without a reward spread (the first: two successes), as SkyRL's trainer does."""
    reference = Reference({2: -9.0, 3: -0.7, 9: -5.0, 4: -0.5})
    kl = {"use_kl_loss": True, "kl_loss_coef": 0.1, "kl_estimator": "k1"}
    fed, _, _ = step(minimal, tmp_path, [1.0, 1.0, 1.0, 0.0], [None] * 4, reference=reference, algorithm=kl)
    assert len(fed.advantages) == 4
    filtered, metrics, _ = step(minimal, tmp_path, [1.0, 1.0, 1.0, 0.0], [None] * 4, reference=reference,
                                algorithm={**kl, "zero_variance_filter": True})
    assert len(filtered.advantages) == 2 and metrics["train/trained_trajectories"] == 2.0


def test_without_the_samplers_log_probabilities_no_kl_penalty_is_made_up(minimal, tmp_path, caplog):
    """A sampler that reports no log-probabilities leaves nothing to set against the reference's: the step warns,
    asks the reference nothing, and trains as without a penalty (the success only)."""
    reference = Reference({2: -9.0, 3: -0.7, 9: -5.0, 4: -0.5})
    training, metrics, _ = step(minimal, tmp_path, [1.0, 0.0, 1.0, 0.0], [None, None, None, "user simulator: 503"],
                                algorithm={"use_kl_loss": True, "kl_loss_coef": 0.1, "kl_estimator": "k1",
                                           "negative_advantage_weight": 0.0}, reference=reference, logprobs=False)
    assert reference.asked == [] and "train/kl_to_reference" not in metrics
    assert len(training.advantages) == 1 and "step 1: no KL penalty" in caplog.text


def test_the_shuffled_reward_control_trains_each_group_on_its_rewards_dealt_out_anew(minimal, tmp_path):
    """`algorithm.shuffle_rewards`: the step's advantages come from each group's rewards shuffled among its episodes
    (seeded by the experiment's seed and the step), the same magnitudes, and ``train/shuffled_rewards`` says how
    many episodes trained with another's; the episodes keep tau2's reward for every figure."""
    plain, metrics, _ = step(minimal, tmp_path, [1.0, 0.0, 0.0, 1.0], [None] * 4)
    assert [a[-1] for a in plain.advantages] == pytest.approx([0.7071, -0.7071, -0.7071, 0.7071], abs=1e-3)
    assert "train/shuffled_rewards" not in metrics
    deals = set()
    for seed in range(8):
        minimal["experiment"] = {**minimal.get("experiment", {}), "seed": seed}
        training, metrics, generator = step(minimal, tmp_path, [1.0, 0.0, 0.0, 1.0], [None] * 4, algorithm={"shuffle_rewards": True})
        fed = [round(a[-1], 3) for a in training.advantages]
        trained = [record.reward for record in generator.records]
        assert [r.result.reward for r in generator.records] == [1.0, 0.0, 0.0, 1.0]
        assert sorted(trained[:2]) == sorted(trained[2:]) == [0.0, 1.0]  # each group's own rewards
        assert fed == [0.707 if reward else -0.707 for reward in trained]  # the advantages follow the dealt rewards
        assert metrics["train/shuffled_rewards"] == sum(t != r for t, r in zip(trained, [1.0, 0.0, 0.0, 1.0])) / 4
        deals.add(tuple(trained))
        again, _, _ = step(minimal, tmp_path, [1.0, 0.0, 0.0, 1.0], [None] * 4, algorithm={"shuffle_rewards": True})
        assert [round(a[-1], 3) for a in again.advantages] == fed  # seeded: a resumed step deals alike
    assert len(deals) > 1 and (1.0, 0.0, 0.0, 1.0) in deals and any(d[0] == 0.0 for d in deals)


def test_a_step_over_the_infra_error_rate_is_skipped(minimal, tmp_path, caplog):
    errors = ["user simulator: 503", "user simulator: 503", None, "evaluator: KeyError"]
    training, metrics, _ = step(minimal, tmp_path, [1.0, 0.0, 1.0, 0.0], errors, max_infra_error_rate=0.5)
    assert training.advantages == [] and training.optimizer_steps == 0
    assert metrics["train/skipped_steps"] == 1.0 and metrics["train/optimizer_steps"] == 0.0
    assert "step 1 skipped: 3 of 4 episodes ended by an infrastructure error" in caplog.text
    training, metrics, _ = step(minimal, tmp_path, [1.0, 0.0, 1.0, 0.0], errors, max_infra_error_rate=0.75)
    assert training.optimizer_steps == 0 and metrics["train/skipped_steps"] == 0.0  # not skipped; nothing left to compare


def test_zero_variance_groups_are_counted_and_an_infrastructure_error_adds_no_spread(minimal, tmp_path):
    # group 1: 1.0 and 1.0; group 2: 1.0 and an infrastructure error's 0.0: neither has a spread
    training, metrics, _ = step(minimal, tmp_path, [1.0, 1.0, 1.0, 0.0], [None, None, None, "user simulator: 503"],
                                algorithm={"zero_variance_filter": True})
    assert training.advantages == [] and metrics["train/zero_variance_groups"] == 2.0
    assert metrics["train/sampling_rounds"] == 1.0


def test_dynamic_sampling_draws_more_tasks_until_the_batch_has_groups_with_a_spread(minimal, tmp_path):
    no_errors = [None] * 4
    training, metrics, generator = step(
        minimal, tmp_path, [1.0, 1.0, 1.0, 0.0], no_errors,  # group 2 kept
        ([0.0, 0.0, 0.0, 0.0], no_errors),                   # nothing kept
        ([1.0, 0.0, 1.0, 0.0], no_errors),                   # group 1 kept, which fills the batch
        algorithm={"dynamic_sampling": {"type": "filter", "max_sample_batches": 3}})
    assert metrics["train/sampling_rounds"] == 3.0 and metrics["train/zero_variance_groups"] == 3.0
    assert len(training.advantages) == 4 and training.optimizer_steps == 1  # two groups of two, both with a spread
    assert generator.calls[0] == ["0", "0", "1", "1"]  # the step's own tasks first, then seeded draws of all tasks
    assert all(len(set(call)) == 2 for call in generator.calls[1:])
    assert metrics["reward/avg_final_reward"] == pytest.approx(5 / 12)  # over every episode sampled


def test_dynamic_sampling_stops_the_run_after_max_sample_batches(minimal, tmp_path):
    flat = ([0.0] * 4, [None] * 4)
    with pytest.raises(RuntimeError, match=r"2 batches sampled .* gave 0 of 2 groups with a reward spread"):
        step(minimal, tmp_path, *flat, flat, algorithm={"dynamic_sampling": {"max_sample_batches": 2}})


@pytest.mark.parametrize(("interval", "after", "evaluated"), [(0, True, [4]), (0, False, []), (2, False, [2, 4]),
                                                          (3, True, [3, 4])])
def test_the_steps_that_end_with_an_evaluation(minimal, tmp_path, interval, after, evaluated):
    """Every `eval_interval` steps, and the last one unless `eval_after_train` is false (a run evaluated on its own
    afterwards)."""
    minimal["trainer"] = {"eval_interval": interval, "eval_after_train": after}
    spec = spec_from_dict(minimal).spec
    runner = TinkerRunner(spec, spec.backend.params, RunDir(tmp_path), progress=False)
    plan = StepPlan(ROWS, 1, 4, 0, shuffle=False, max_steps=4)
    assert [step for step in range(1, plan.total_steps + 1) if runner._evaluates(step, plan)] == evaluated


def test_a_tinker_state_naming_a_later_step_than_its_checkpoint_resumes_from_the_checkpoints_step(tmp_path):
    """A state of the Tinker loop written before it recorded only checkpointed steps: step 12, checkpoint of step 10.
    Resuming as step 12 would train step 10's weights as step 13, two updates lost."""
    runner = object.__new__(TinkerRunner)
    runner.run_dir, runner.resume = RunDir(tmp_path), True
    runner.run_dir.checkpoints.mkdir()
    for step in (5, 10):
        (runner.run_dir.checkpoints / f"step_{step:06d}.json").write_text(json.dumps({"step": step, "path": f"tinker://m/weights/step_{step:06d}"}))
    runner.run_dir.write_state({"backend": "tinker", "step": 12, "checkpoint": "tinker://m/weights/step_000010"})
    assert runner._resume_point() == ("tinker://m/weights/step_000010", 10)
    runner.run_dir.write_state({"backend": "tinker", "step": 12, "checkpoint": "tinker://elsewhere"})
    assert runner._resume_point() == ("tinker://elsewhere", 12)  # no record: the state's own step
    runner.run_dir.write_state({"backend": "tinker", "step": 0, "checkpoint": None})
    assert runner._resume_point() == (None, 0)  # killed before its first checkpoint: starts over
    runner.resume = False
    assert runner._resume_point() == (None, 0)  # a new run


def test_a_resume_whose_state_names_a_step_but_no_checkpoint_is_refused_and_nothing_changes(minimal, tmp_path):
    """A state saying step 2 is done without the checkpoint to continue from is not a run to start over in place:
    refused, naming what to restore, before anything in the folder is written."""
    from ctu.runners.rundir import RunError

    spec = spec_from_dict(minimal).spec
    run_dir = RunDir(tmp_path)
    run_dir.write_state({"backend": "tinker", "step": 2})
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    before = sorted((path.name, path.read_bytes()) for path in tmp_path.iterdir())
    with pytest.raises(RunError, match="says step 2 is done but names no checkpoint"):
        asyncio.run(TinkerRunner(spec, spec.backend.params, run_dir, resume=True, progress=False)._run("unused"))
    assert sorted((path.name, path.read_bytes()) for path in tmp_path.iterdir()) == before


def test_a_step_where_no_episode_reached_the_policy_stops_the_run_as_nothing_measured(minimal, tmp_path):
    """Every finished episode ended before the policy's first turn (a first prompt the context cannot hold): the
    step has nothing to train on and the run stops, exit 3, saying how they ended; one policy turn anywhere trains."""
    from ctu.errors import NothingMeasuredError
    from ctu.rollout.records import RolloutBatch

    class Overflowing(FixedGenerator):
        async def run_batch(self, requests, phase, step):
            records = [TrajectoryRecord([1, 2], [], [], [], 0.0, "length", EpisodeResult("retail", request.task.task_id,
                                        termination="context_overflow"), infra_error=error)
                       for request, error in zip(requests, [None, None, None, "user simulator: 503"], strict=True)]
            return RolloutBatch(records, {})

    minimal["rollout"] = {"n_samples_per_prompt": 2}
    minimal["trainer"] = {"train_batch_size": 2, "policy_mini_batch_size": 2}
    minimal["algorithm"] = {"use_kl_loss": False}
    spec = spec_from_dict(minimal).spec
    runner = TinkerRunner(spec, spec.backend.params, RunDir(tmp_path), progress=False)
    training = RecordingTraining()
    with pytest.raises(NothingMeasuredError, match=r"training step 1: none of its 3 finished episode\(s\) reached a policy "
                                                   r"turn \(they ended: context_overflow 3\)"):
        asyncio.run(runner._train_step(Overflowing(), training, StepPlan(ROWS, 2, 1, 0, shuffle=False, max_steps=None), 1, None))
    assert training.advantages == [] and training.optimizer_steps == 0
    trained, _, _ = step(minimal, tmp_path, [1.0, 0.0, 1.0, 0.0], [None] * 4)  # records with policy tokens train
    assert trained.optimizer_steps == 1
