"""ctu's SkyRL trainers (`ctu.backends.skyrl.trainer`) on SkyRL's own code paths, with batches made here: dynamic
sampling, zero-variance filtering, the async trainer's group check and the advantages each keep infrastructure
errors out, the flag travelling with each trajectory. No Ray and no model: the trainer methods under test are
SkyRL's, reached through ctu's overrides."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch  # noqa: E402
from skyrl.train.config import SkyRLTrainConfig  # noqa: E402
from skyrl.train.fully_async_trainer import GeneratedOutputGroup  # noqa: E402
from skyrl.train.trainer import RayPPOTrainer  # noqa: E402

from ctu.backends.skyrl.trainer import EXCLUDED_KEY, CtuFullyAsyncTrainer, CtuPPOTrainer  # noqa: E402
from ctu.runners.grpo import group_advantages  # noqa: E402

INFRA = "user simulator: 503"


def trainer(kind=CtuPPOTrainer, **overrides):
    """A trainer object with SkyRL's config and nothing started (groups of two, two tasks a step)."""
    made = object.__new__(kind)
    made.cfg = SkyRLTrainConfig.from_cli_overrides({"generator.n_samples_per_prompt": 2, "trainer.train_batch_size": 2,
                                                    "trainer.policy_mini_batch_size": 2, **overrides})
    made.all_metrics = {}
    made.dynamic_sampling_state = None
    made._current_epoch = made.global_step = 0
    return made


def output(rewards, errors):
    """A generator output as ctu's generator gives it: an ``env_metrics`` row per trajectory."""
    n = len(rewards)
    return {"prompt_token_ids": [[1, 2]] * n, "response_ids": [[3, 4]] * n, "rewards": list(rewards),
            "loss_masks": [[1, 1]] * n, "stop_reasons": ["stop"] * n, "rollout_metrics": {}, "rollout_logprobs": None,
            "env_metrics": [{"infra_error": error} for error in errors]}


def test_dynamic_sampling_drops_a_group_whose_spread_only_an_infrastructure_error_made():
    ppo = trainer(**{"trainer.algorithm.dynamic_sampling.type": "filter"})
    # task a: 1.0 and an infrastructure error's 0.0 (no spread to learn from); task b: 1.0 and 0.0
    _, _, more = ppo.handle_dynamic_sampling(output([1.0, 0.0, 1.0, 0.0], [None, INFRA, None, None]), ["a", "a", "b", "b"])
    assert more  # one of two groups kept: sample again
    final, uids, more = ppo.handle_dynamic_sampling(output([1.0, 1.0, 0.0, 1.0], [None] * 4), ["c", "c", "d", "d"])
    assert not more and uids == ["b", "b", "d", "d"]
    final, uids = ppo.postprocess_generator_output(final, uids)
    assert ppo.all_metrics["train/sampling_rounds"] == 2.0 and ppo.all_metrics["train/zero_variance_groups"] == 2.0


def test_the_zero_variance_filter_masks_a_group_whose_spread_only_an_infrastructure_error_made():
    ppo = trainer(**{"trainer.algorithm.zero_variance_filter": True})
    final, _ = ppo.postprocess_generator_output(output([1.0, 0.0, 1.0, 0.0], [None, INFRA, None, None]), ["a", "a", "b", "b"])
    # SkyRL's own filter keeps a group of one live trajectory; it has no spread to learn from, so ctu masks it
    assert final["loss_masks"] == [[0, 0], [0, 0], [1, 1], [1, 1]]
    assert ppo.all_metrics["train/zero_variance_groups"] == 1.0
    assert ppo.all_metrics["train/sampling_rounds"] == 1.0


def test_the_async_trainer_drops_a_group_whose_spread_only_an_infrastructure_error_made():
    fully_async = trainer(CtuFullyAsyncTrainer, **{"trainer.algorithm.zero_variance_filter": True})
    group = GeneratedOutputGroup(generator_output=output([1.0, 0.0], [None, INFRA]), uid="a", global_step_when_scheduled=1)
    assert not fully_async._should_keep_group(group)
    group = GeneratedOutputGroup(generator_output=output([1.0, 0.0], [None, None]), uid="b", global_step_when_scheduled=1)
    assert fully_async._should_keep_group(group)
    assert fully_async._dropped_groups == 1


def batch(rewards, uids, excluded, pad=0):
    """A training batch as SkyRL's `convert_to_training_input` leaves it (`pad` padding rows after the rest)."""
    token_rewards = torch.zeros(len(rewards), 2)
    token_rewards[:, -1] = torch.tensor(rewards)
    data = TrainingInputBatch({"rewards": token_rewards, "response_mask": torch.ones(len(rewards), 2),
                               "loss_mask": torch.ones(len(rewards), 2), "values": None})
    data.metadata = {"uids": uids + [f"pad{i}" for i in range(pad)], "avg_response_length": 2.0, "pad_size": pad,
                     EXCLUDED_KEY: excluded}
    return data


def test_advantages_leave_an_infrastructure_error_out_of_its_group_as_the_tinker_loop_does():
    ppo = trainer()
    rewards, excluded = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0], [False, False, False, False, True, False]
    data = ppo.compute_advantages_and_returns(batch(rewards, ["a", "a", "b", "b", "c", "c"], excluded))
    assert data["advantages"][:, -1].tolist() == pytest.approx(group_advantages(rewards, 2, True, excluded), abs=1e-4)
    assert data["loss_mask"][:, -1].tolist() == [1, 1, 1, 1, 0, 1]
    assert data.metadata["uids"] == ["a", "a", "b", "b", "c", "c"]  # SkyRL cuts mini-batches by them
    assert EXCLUDED_KEY not in data.metadata and not ppo._skip_step


def test_padding_rows_are_never_excluded_and_a_step_over_the_rate_is_skipped():
    ppo = trainer()
    ppo.max_infra_error_rate = 0.5
    data = ppo.compute_advantages_and_returns(batch([1.0, 0.0, 1.0, 0.0, 1.0], list("aabb"), [True, True, True, False], pad=1))
    assert ppo._skip_step  # 3 of the 4 episodes; the padding row is not one
    assert data["loss_mask"][:, -1].tolist() == [0, 0, 0, 1, 1]


def test_skyrls_reward_figures_of_a_step_leave_infrastructure_errors_out_as_ctus_own_do():
    ppo = trainer()
    # the excluded trajectory's reward (a judge's bonus an episode of no turns once got) counts in no figure
    ppo.postprocess_generator_output(output([1.0, 0.0, 0.0, 0.2], [None, None, None, INFRA]), ["a", "a", "b", "b"])
    assert ppo.all_metrics["reward/avg_raw_reward"] == pytest.approx(1 / 3)
    assert ppo.all_metrics["reward/avg_pass_at_2"] == pytest.approx(0.5)
    ppo.compute_advantages_and_returns(batch([1.0, 0.0, 0.0, 0.2], ["a", "a", "b", "b"], [False, False, False, True]))
    assert ppo.all_metrics["loss/avg_final_rewards"] == pytest.approx(1 / 3)
    every = trainer()  # a step all of whose episodes were infrastructure errors has no reward figure at all
    every.postprocess_generator_output(output([0.2, 0.2], [INFRA, INFRA]), ["a", "a"])
    every.compute_advantages_and_returns(batch([0.2, 0.2], ["a", "a"], [True, True]))
    assert not [name for name in every.all_metrics if "reward" in name], every.all_metrics


def test_a_filter_batch_without_any_spread_is_sampled_again_until_the_limit():
    ppo = trainer(**{"trainer.algorithm.dynamic_sampling.type": "filter", "trainer.algorithm.dynamic_sampling.max_sample_batches": 3})
    flat = output([0.0, 0.0, 1.0, 1.0], [None] * 4)
    assert ppo.handle_dynamic_sampling(flat, ["a", "a", "b", "b"])[2]  # SkyRL 0.4.0 alone fails on an empty slice
    _, uids, more = ppo.handle_dynamic_sampling(output([1.0, 0.0, 1.0, 0.0], [None] * 4), ["c", "c", "d", "d"])
    assert not more and uids == ["c", "c", "d", "d"]
    ppo.postprocess_generator_output(output([1.0, 0.0, 1.0, 0.0], [None] * 4), uids)
    assert ppo.all_metrics["train/sampling_rounds"] == 2.0 and ppo.all_metrics["train/zero_variance_groups"] == 2.0
    for _ in range(2):
        ppo.handle_dynamic_sampling(flat, ["e", "e", "f", "f"])
    with pytest.raises(RuntimeError, match="3 batches sampled"):
        ppo.handle_dynamic_sampling(flat, ["g", "g", "h", "h"])


class Dispatch:
    """What SkyRL's loop asks of its workers outside a step's training phases: nothing to do."""

    async def save_weights_for_sampler(self):
        pass

    def get_lcm_dp_size(self):
        return 1

    def finalize_pending_saves(self, model):
        pass

    def get_timing_metrics(self):
        return {}


class Tracker:
    def log(self, data, step, commit=False):
        pass

    def finish(self):
        pass


class Batch(dict):
    """A step's training input as far as SkyRL's loop reads it outside the phases stubbed here."""

    def __init__(self, data, metadata):
        super().__init__(data)
        self.metadata = metadata


def loop(monkeypatch, batches, epochs, rewards):
    """`CtuPPOTrainer` ready to run SkyRL's own `train()` over `batches` batches of two tasks an epoch for
    `epochs` epochs, the n-th batch sampled getting the rewards `rewards[n]` (filter dynamic sampling). No model:
    a step's training phases pass the batch through, and its update returns no metrics."""
    import skyrl.train.trainer

    monkeypatch.setattr(skyrl.train.trainer, "configure_ray_worker_logging", lambda: None)  # it reroutes all logging
    cfg = SkyRLTrainConfig.from_cli_overrides({
        "generator.n_samples_per_prompt": 2, "trainer.train_batch_size": 2, "trainer.policy_mini_batch_size": 2,
        "trainer.algorithm.dynamic_sampling.type": "filter", "trainer.epochs": epochs, "trainer.placement.colocate_all": False,
        "trainer.ckpt_interval": 0, "trainer.hf_save_interval": 0, "trainer.eval_interval": 0, "trainer.resume_mode": "none",
        "trainer.print_example_interval": 0,
        "generator.inference_engine.enable_ray_prometheus_stats": False, "trainer.enable_ray_gpu_monitor": False})
    ppo = CtuPPOTrainer(cfg, Tracker(), None, None, None, None)
    ppo.train_dataloader = [[{"prompt": [], "env_class": "ctu_tau", "env_extras": {}, "uid": f"{n}{task}"} for task in "ab"]
                            for n in range(batches)]
    ppo.total_training_steps = batches * epochs
    ppo.dispatch = Dispatch()
    ppo.init_weight_sync_state = lambda: None
    ppo.convert_to_training_input = lambda generator_output, uids: Batch(generator_output, metadata={"uids": uids})
    ppo.fwd_logprobs_values_reward = ppo.compute_advantages_and_returns = lambda batch: batch
    ppo.train_critic_and_policy = lambda batch: {}
    rounds = []

    async def generate(generator_input):
        rounds.append(ppo.global_step)
        sampled = rewards[len(rounds) - 1]
        return output(sampled, [None] * len(sampled))

    ppo.generate = generate
    return ppo, rounds


def test_a_run_whose_dynamic_sampling_never_fills_a_step_fails_where_skyrl_would_exit_0(monkeypatch, caplog):
    """SkyRL 0.4.0's own loop: 2 epochs of 2 batches, every group without a reward spread. SkyRL samples each
    epoch's batches for step 1, drops them at the epoch's end, and ends the run having trained nothing."""
    import asyncio

    ppo, rounds = loop(monkeypatch, batches=2, epochs=2, rewards=[[1.0, 1.0, 0.0, 0.0]] * 4)
    with pytest.raises(RuntimeError, match=r"sampled 4 batch\(es\) for training and trained no step"):
        asyncio.run(ppo.train())
    assert rounds == [1, 1, 1, 1]
    dropped = [r.getMessage() for r in caplog.records if "dynamic sampling" in r.getMessage()]
    assert [m.split(" ended")[0] for m in dropped] == ["epoch 0", "epoch 1"]
    assert all("filling step 1's batch" in m and "dropped its 2 sampled batch(es)" in m for m in dropped)


def test_a_run_whose_epochs_run_out_before_its_steps_says_so_at_its_end(monkeypatch, caplog):
    """SkyRL 0.4.0's own loop, 2 epochs of 2 batches: the first batch fills step 1, the three after it have no
    reward spread. Step 2 is cut off at both epochs' ends, and the run ends at step 1 of the 4 it was given."""
    import asyncio

    spread, flat = [1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]
    ppo, rounds = loop(monkeypatch, batches=2, epochs=2, rewards=[spread, flat, flat, flat])
    asyncio.run(ppo.train())
    assert rounds == [1, 2, 2, 2] and ppo.global_step == 1
    messages = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert [m.split(" ended")[0] for m in messages] == ["epoch 0", "epoch 1", "the run"]
    assert "filling step 2's batch" in messages[0] and "dropped its 1 sampled batch(es)" in messages[0]
    assert messages[2].startswith("the run ended at step 1 of 4: its 2 epoch(s) of training data")


def test_a_run_that_trains_every_step_ends_without_a_warning(monkeypatch, caplog):
    """The same loop with a reward spread in every batch: one step per batch, all 4 trained, nothing to report."""
    import asyncio

    ppo, rounds = loop(monkeypatch, batches=2, epochs=2, rewards=[[1.0, 0.0, 1.0, 0.0]] * 4)
    asyncio.run(ppo.train())
    assert rounds == [1, 2, 3, 4] and ppo.global_step == 4
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_uncommitted_metrics_join_the_committed_line_of_their_step():
    """SkyRL's async loop logs a step's metrics uncommitted, then its timings committed: one line a step."""
    from ctu.backends.skyrl.experiment import CtuTracking

    lines: list[tuple[int, dict]] = []

    class Recorder:
        def log(self, data, step):
            lines.append((step, dict(data)))

        def finish(self):
            lines.append((-1, {}))

    tracking = CtuTracking(Recorder())
    tracking.log({"train/a": 1.0, "note": "text"}, step=1, commit=False)
    tracking.log({"timing/step": 2.0}, step=1, commit=True)
    tracking.log({"train/a": 3.0}, step=2)
    tracking.log({"eval/b": 4.0}, step=3, commit=False)  # another step: the pending one is logged first
    tracking.finish()
    assert lines == [(1, {"train/a": 1.0, "timing/step": 2.0}), (2, {"train/a": 3.0}), (3, {"eval/b": 4.0}), (-1, {})]


def test_the_async_loops_last_save_is_of_the_last_trained_step(tmp_path, monkeypatch):
    """SkyRL 0.4.0's async loop saves again after its step counter moved past the last step it trained."""
    saved: list[int] = []

    def save(self):
        saved.append(self.global_step)
        (tmp_path / "latest_ckpt_global_step.txt").write_text(str(self.global_step))
        return str(tmp_path / f"global_step_{self.global_step}")

    monkeypatch.setattr("skyrl.train.fully_async_trainer.FullyAsyncRayPPOTrainer.save_checkpoints", save)
    fully_async = trainer(CtuFullyAsyncTrainer, **{"trainer.ckpt_path": str(tmp_path)})
    fully_async.global_step, fully_async._trained_step = 1, 1
    fully_async.save_checkpoints()  # at the step (an interval's or an epoch end's save)
    fully_async.global_step = 2  # the loop moved on, then stopped: its final save
    assert fully_async.save_checkpoints() == str(tmp_path / "global_step_1") and saved == [1]
    fully_async.global_step, fully_async._trained_step = 4, 3  # not saved at step 3 yet
    fully_async.save_checkpoints()
    assert saved == [1, 3] and fully_async.global_step == 4


def test_a_loss_reading_the_samplers_logprobs_refuses_a_batch_without_them():
    corrected = trainer(**{"trainer.algorithm.off_policy_correction.tis_ratio_type": "token"})
    with pytest.raises(RuntimeError, match="the generator returned none"):
        corrected.postprocess_generator_output(output([1.0, 0.0], [None, None]), ["a", "a"])
    given = output([1.0, 0.0], [None, None]) | {"rollout_logprobs": [[-0.1, -0.2]] * 2}
    assert corrected.postprocess_generator_output(given, ["a", "a"])[1] == ["a", "a"]


def test_the_run_state_names_each_checkpoint_once_skyrl_has_completed_it(tmp_path):
    """SkyRL's own `save_checkpoints` (its workers' part stubbed): ``state.json`` names the step as soon as SkyRL
    marked the checkpoint complete, not only when the launch ends, so a kill at any moment after leaves it true."""
    import json

    from ctu.runners.rundir import RunDir

    class Saving(Dispatch):
        def save_checkpoint(self, model, folder, tokenizer):
            assert not (tmp_path / "state.json").exists()  # nothing names a checkpoint being written

    ppo = trainer(**{"trainer.ckpt_path": str(tmp_path / "checkpoints")})
    ppo.run_dir, ppo.dispatch, ppo.tokenizer, ppo.all_timings = RunDir(tmp_path), Saving(), None, {}
    ppo.train_dataloader = type("Loader", (), {"state_dict": lambda self: {"_num_yielded": 1}})()
    ppo._cleanup_old_checkpoints = lambda: None  # a Ray task on each node
    ppo.global_step = 3
    ppo.save_checkpoints()
    assert json.loads((tmp_path / "state.json").read_text()) == {"backend": "skyrl", "step": 3}
    assert (tmp_path / "checkpoints" / "latest_ckpt_global_step.txt").read_text() == "3"


def test_old_checkpoints_are_removed_in_the_drivers_process_when_every_worker_is_on_its_node(tmp_path, monkeypatch):
    """One node: SkyRL's cleanup runs here, without its Ray task (a new worker process a save); several nodes:
    SkyRL's own, which runs it on each."""
    import ray

    ppo = trainer(**{"trainer.ckpt_path": str(tmp_path), "trainer.max_ckpts_to_keep": 1})
    for step in (1, 2, 3):
        (tmp_path / f"global_step_{step}").mkdir()
    on_each_node = []
    monkeypatch.setattr(RayPPOTrainer, "_cleanup_old_checkpoints", lambda self: on_each_node.append(self._node_ids))
    monkeypatch.setattr(ray, "get_runtime_context", lambda: type("Context", (), {"get_node_id": lambda self: "node-a"})())
    ppo._node_ids, ppo.dispatch = None, type("Dispatch", (), {"get_node_ids": lambda self: ["node-a", "node-a"]})()
    ppo._cleanup_old_checkpoints()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global_step_3"] and on_each_node == []
    ppo._node_ids = ["node-a", "node-b"]
    ppo._cleanup_old_checkpoints()
    assert on_each_node == [["node-a", "node-b"]]


def test_step_wise_advantages_count_each_episode_once_and_reach_every_one_of_its_turns():
    ppo = trainer(**{"generator.step_wise_trajectories": True})
    # group a: a0 of two turns (1.0), a1 of one (0.0); group c: c0 of two turns (1.0), c1 an infrastructure error:
    # c0 is alone in its group, so nothing to compare it with (its two rows are one episode, not two)
    data = batch([1.0, 1.0, 0.0, 1.0, 1.0, 0.0], list("aaaccc"), [False, False, False, False, False, True])
    data.metadata["is_last_step"] = [False, True, True, False, True, True]
    data = ppo.compute_advantages_and_returns(data)
    assert data["advantages"][:, -1].tolist() == pytest.approx([0.7071, 0.7071, -0.7071, 0.0, 0.0, 0.0], abs=1e-3)
    assert data["loss_mask"][:, -1].tolist() == [1, 1, 1, 1, 1, 0]
    assert ppo.all_metrics["loss/avg_final_rewards"] == pytest.approx(2 / 3)  # a0, a1, c0: each episode once


def test_step_wise_rows_of_one_episode_count_once_towards_the_infra_error_rate():
    ppo = trainer(**{"generator.step_wise_trajectories": True})
    ppo.max_infra_error_rate = 0.5
    # two episodes of two turns (one an infrastructure error) and two of one: 1 in 4 episodes, though 2 rows in 6
    data = batch([1.0, 1.0, 0.0, 0.0, 1.0, 0.0], list("aaaccc"), [True, True, False, False, False, False])
    data.metadata["is_last_step"] = [False, True, False, True, True, True]
    ppo.compute_advantages_and_returns(data)
    assert not ppo._skip_step
    data = batch([1.0, 1.0, 0.0, 0.0, 1.0, 0.0], list("aaaccc"), [True, True, True, True, False, False])
    data.metadata["is_last_step"] = [False, True, False, True, True, True]
    ppo.compute_advantages_and_returns(data)
    assert not ppo._skip_step  # 2 of 4 episodes (4 of 6 rows): at the rate, not over it
    data = batch([1.0, 1.0, 0.0, 0.0, 1.0, 0.0], list("aaaccc"), [True, True, True, False, False, False])
    data.metadata["is_last_step"] = [True, True, True, False, True, True]
    ppo.compute_advantages_and_returns(data)
    assert ppo._skip_step  # 3 of 5 episodes
