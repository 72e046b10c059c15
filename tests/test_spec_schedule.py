"""The schedule: steps per epoch, GRPO and optimizer steps (`ctu explain`), and `ctu validate`'s warnings when
warm-up outlasts the run, drop_last leaves tasks out, a test set repeats training tasks, or no step fits."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from ctu.spec import SpecError, load_spec
from ctu.spec.schedule import schedule

from .conftest import REPO

SPEC = REPO / "specs" / "retail_8b_taxonomy.yaml"


def test_the_8b_scripts_schedule():
    """74 retail tasks at 32 a step (run_retail_8b_grpo_taxonomy.sh): 2 steps an epoch, 10 tasks left out, 100
    epochs; 32/8 = 4 optimizer steps a step, the first 100 of 800 warming up."""
    plan = schedule(load_spec(SPEC).spec)
    assert (plan.train_tasks, plan.steps_per_epoch, plan.dropped_per_epoch, plan.total_steps) == (74, 2, 10, 200)
    assert (plan.optimizer_steps_per_step, plan.optimizer_steps, plan.warmup_steps) == (4, 800, 100)
    capped = schedule(load_spec(SPEC, ["trainer.max_steps=5"]).spec)
    assert capped.total_steps == 5 and capped.optimizer_steps == 20
    tinker = schedule(load_spec(REPO / "specs" / "smoke.yaml").spec)
    assert tinker.optimizer_steps_per_step == 1  # Tinker steps its optimizer once a GRPO step


class NothingRuns:
    """The backend contract's members, none of them run here (what a spec check builds)."""

    from ctu.registry import ComponentParams as Params

    def __init__(self, params):
        self.params = params

    def spec_errors(self, spec):
        return iter(())

    def spec_warnings(self, spec):
        return iter(())

    def deep_check(self, spec, run_dir):
        raise NotImplementedError

    def plan(self, spec, run_dir):
        raise NotImplementedError

    def run(self, spec, run_dir, *, resume, progress, verbose):
        raise NotImplementedError

    def policies(self, run_dir):
        raise NotImplementedError

    def open_policy(self, spec, policy, run_dir, work_dir, *, in_flight=None):
        raise NotImplementedError


@pytest.mark.parametrize("declares", ["nothing", "step_counts", "skyrl_schedule"])
def test_each_backend_counts_its_own_steps(declares):
    """How an epoch is stepped through is the backend's (`step_counts`): a backend of one's own that says nothing
    trains a batch in one optimizer step, one with `step_counts` counts as it says, and one written with the older
    `skyrl_schedule` class attribute still counts SkyRL's way, with a deprecation warning."""
    from ctu.registry import registry
    from ctu.spec.backend_rules import mini_batch_steps

    members: dict[str, object] = {
        "nothing": {}, "skyrl_schedule": {"skyrl_schedule": True},
        "step_counts": {"step_counts": lambda self, tasks, trainer: mini_batch_steps(tasks, trainer)}}[declares]
    name = f"counting_{declares}"
    registry.backends.register(name)(type("CountingBackend", (NothingRuns,), dict(members)))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plan = schedule(load_spec(SPEC, [f"backend={{type: {name}}}", "algorithm.use_kl_loss=false"]).spec)
    finally:
        registry.backends.unregister(name)
    assert plan.train_tasks == 74 and plan.total_steps == 200  # 2 steps an epoch either way (74 at 32)
    assert plan.optimizer_steps_per_step == (1 if declares == "nothing" else 4)
    deprecated = [w for w in caught if issubclass(w.category, DeprecationWarning) and "skyrl_schedule" in str(w.message)]
    assert bool(deprecated) == (declares == "skyrl_schedule")


def test_a_loop_training_a_whole_batch_makes_one_step_of_an_epoch_smaller_than_a_batch():
    from ctu.spec.backend_rules import StepCounts, mini_batch_steps, whole_batch_steps

    trainer = load_spec(SPEC).spec.trainer  # 32 a step, 8 a mini-batch
    assert whole_batch_steps(20, trainer) == StepCounts(1, 0, 1) and whole_batch_steps(70, trainer) == StepCounts(2, 6, 1)
    assert mini_batch_steps(20, trainer) == StepCounts(0, 20, 4) and mini_batch_steps(70, trainer) == StepCounts(2, 6, 4)


def messages(loaded, path: str) -> list[str]:
    return [w.message for w in loaded.warnings if w.path == path]


def test_warm_up_reaching_the_run_is_warned():
    loaded = load_spec(SPEC, ["trainer.epochs=10", "trainer.optimizer.warmup_steps=80"])  # 10 x 2 steps x 4 = 80
    [message] = messages(loaded, "trainer.optimizer.warmup_steps")
    assert "80 optimizer steps of warm-up, and the run has 80" in message and "never reaches" in message
    assert messages(load_spec(SPEC, ["trainer.epochs=10", "trainer.optimizer.warmup_steps=79"]), "trainer.optimizer.warmup_steps") == []


def test_drop_last_is_warned_and_a_dividing_batch_is_not():
    [message] = messages(load_spec(SPEC), "trainer.train_batch_size")
    assert "the last 10 of each epoch" in message
    whole = load_spec(SPEC, ["trainer.train_batch_size=37", "trainer.policy_mini_batch_size=37", "rollout.n_samples_per_prompt=8"])
    assert messages(whole, "trainer.train_batch_size") == []


def test_dynamic_sampling_allowed_more_batches_than_an_epoch_holds_is_warned_on_skyrl():
    """The 8B script's epoch is 2 batches: SkyRL's dynamic sampling cannot gather a step over more (it drops a
    step's partial batch at the epoch's end), whatever max_sample_batches says; Tinker's loop has no such limit."""
    path = "algorithm.dynamic_sampling.max_sample_batches"
    [message] = messages(load_spec(SPEC, ["algorithm.dynamic_sampling={type: filter}"]), path)
    assert message.startswith("an epoch holds 2 batch(es) here") and "not max_sample_batches 30" in message
    assert len(messages(load_spec(SPEC, ["algorithm.dynamic_sampling={type: replace, max_sample_batches: -1}"]), path)) == 1
    assert messages(load_spec(SPEC, ["algorithm.dynamic_sampling={type: filter, max_sample_batches: 2}"]), path) == []
    assert messages(load_spec(SPEC), path) == []
    smoke = REPO / "specs" / "smoke.yaml"
    assert messages(load_spec(smoke, ["algorithm.dynamic_sampling={type: filter, max_sample_batches: 9}"]), path) == []


def test_a_test_set_that_is_a_training_set_is_an_error():
    with pytest.raises(SpecError) as info:
        load_spec(SPEC, ["data.test_sets={retail: {domain: retail, split: train, max_tasks: 5}}"])
    [message] = [i.message for i in info.value.issues if i.path == "data.train.0.split"]
    assert message.startswith("5 held-out task(s) would train: retail/") and "(test set 'retail')" in message
    with pytest.raises(SpecError, match=r"40 held-out task\(s\) would train: retail/5 \(retail's held-out split 'test'\)"):
        load_spec(SPEC, ["data.train.0.split=base", "data.test_sets={}"])  # tau2's test split, though no test set names it
    assert not [m for m in messages(load_spec(SPEC), "data.test_sets.retail") if "also training" in m]  # held out


def test_a_batch_larger_than_the_training_set_is_an_error_on_skyrl():
    with pytest.raises(SpecError) as info:
        load_spec(SPEC, ["data.train=[{domain: retail, split: train, max_tasks: 20}]"])
    assert any(i.path == "trainer.train_batch_size" and "train nothing" in i.message for i in info.value.issues)


def test_explain_prints_the_schedule():
    out = subprocess.run([sys.executable, "-m", "ctu.cli", "explain", str(SPEC)], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1].startswith("# schedule: 74 training tasks at 32 a step: 2 GRPO step(s) per epoch")
    assert "800 optimizer steps, the first 100 warming up the learning rate\n" in out.stdout
    cosine = schedule(load_spec(SPEC, ["trainer.optimizer.scheduler=cosine"]).spec)
    assert cosine.describe().endswith("the first 100 warming up the learning rate, then decaying to 0 (cosine)")


def test_explain_says_how_the_tinker_backend_applies_settings_otherwise():
    """`ctu explain` on a tinker spec: after the schedule, how its loop applies what SkyRL's trainer applies otherwise
    (the KL penalty in the advantages, one optimizer step a step, the clip only with its ppo loss); a skyrl spec has
    no such line."""
    def explained(spec: Path, *overrides: str) -> list[str]:
        out = subprocess.run([sys.executable, "-m", "ctu.cli", "explain", str(spec), *overrides], capture_output=True,
                             text=True, cwd=REPO)
        assert out.returncode == 0, out.stderr
        return [line for line in out.stdout.splitlines() if line.startswith("# tinker backend: ")]

    smoke = REPO / "specs" / "smoke.yaml"
    plain = explained(smoke)
    assert any("trainer.policy_mini_batch_size: one optimizer step a step" in line for line in plain)
    assert any("no clip: Tinker's importance_sampling loss has none" in line for line in plain)
    assert not any("use_kl_loss" in line for line in plain)  # smoke.yaml has no KL penalty
    penalised = explained(smoke, "algorithm.use_kl_loss=true", "algorithm.kl_loss_coef=0.05", "algorithm.kl_estimator=k1",
                          "backend.loss=ppo", "algorithm.eps_clip_high=0.2")
    assert any("put into each sampled token's advantage at 0.05" in line for line in penalised)
    assert any("clips the ratio to [0.9, 1.2]" in line for line in penalised)
    assert explained(SPEC) == []


def test_a_validation_set_on_training_tasks_is_an_error_and_on_a_test_sets_tasks_a_warning():
    with pytest.raises(SpecError, match=r"data.train.0.split: 5 held-out task\(s\) would train"):
        load_spec(SPEC, ["data.validation={domain: retail, split: train, max_tasks: 5}"])
    on_test = load_spec(SPEC, ["data.validation={domain: retail, split: test, max_tasks: 5}"])
    assert [w.message for w in on_test.warnings if w.path == "data.validation" and "test set 'retail'" in w.message]
    held_out = load_spec(SPEC, ["data.validation={domain: airline, split: train, max_tasks: 5}"])
    assert not [w for w in held_out.warnings if w.path == "data.validation"]
    with pytest.raises(SpecError, match="the validation set's name"):
        load_spec(SPEC, ["data.test_sets.validation={domain: airline, split: test}"])
