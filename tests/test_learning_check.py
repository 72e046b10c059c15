"""The learning check's arithmetic (benchmarks/learning_check.py) on trajectory logs written here: the run itself
takes ~25 min and is a benchmark, not a test."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from .conftest import REPO


def benchmark(name: str):
    """The benchmark script `benchmarks/<name>.py` as a module (its siblings, `machine` and the rest, on the path
    while it loads)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


@pytest.fixture(scope="module")
def check():
    return benchmark("learning_check")


@pytest.fixture(scope="module")
def chain():
    return benchmark("chain_report")


def write_steps(run_dir: Path, rewards_per_step: list[list[float]]) -> None:
    folder = run_dir / "trajectories"
    folder.mkdir(parents=True)
    for step, rewards in enumerate(rewards_per_step, start=1):
        lines = [{"step": step, "reward": r, "infra_error": None} for r in rewards]
        lines.append({"step": step, "reward": 0.0, "infra_error": "user simulator down"})  # never counted
        (folder / f"train_step{step:06d}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_a_reward_that_rises_gives_an_interval_above_zero(check, tmp_path: Path):
    write_steps(tmp_path, [[0.0, 0.0, 0.5, 0.0]] * 5 + [[0.5, 1.0, 0.5, 0.5]] * 5)
    steps = check.step_rewards(tmp_path)
    assert list(steps) == list(range(1, 11)) and steps[1] == [0.0, 0.0, 0.5, 0.0]  # the infra error left out
    low, high = check.bootstrap_difference(list(steps.values())[:5], list(steps.values())[5:], 2000)
    assert 0 < low < 0.5 < high <= 1.0  # the true difference, 0.625 - 0.125, inside


def test_a_flat_noisy_reward_gives_an_interval_around_zero(check, tmp_path: Path):
    write_steps(tmp_path, [[0.0, 1.0, 0.0, 1.0, 0.5, 0.0]] * 10)
    rewards = list(check.step_rewards(tmp_path).values())
    low, high = check.bootstrap_difference(rewards[:5], rewards[5:], 2000)
    assert low < 0 < high


def test_test_rewards_are_the_first_and_last_evaluations(check, tmp_path: Path):
    lines = [{"step": 0, "test-retail/average_reward": 0.1}, {"step": 1, "generation/avg_reward": 0.3},
             {"step": 2, "test-retail/average_reward": 0.25, "test-airline/average_reward": 0.75}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert check.test_rewards(tmp_path) == (0.1, 0.5)


def test_the_chains_verdict_and_table_come_from_paired_differences_over_held_out_tasks(chain):
    """benchmarks/chain_check.py on evaluation results written here: SFT that solves held-out tasks the base model
    did not, and GRPO that solves more than SFT and more than the shuffled-reward control, pass with intervals above
    zero; an lr control that moved nothing holds zero; an lr control that moved, an SFT or a GRPO that did not, or a
    shuffled-reward control that gained as much as GRPO, fails the check."""

    def evaluation(solved: int, of: int = 40) -> dict:  # tasks 0..solved-1 solved in both samples, the rest in none
        by_task = {str(n): [2 if n < solved else 0, 2] for n in range(of)}
        return {"by_test_set": {chain.TEST_SET: {"by_task": by_task, "success_rate": solved / of}}}

    base, sft, still = evaluation(0), evaluation(10), evaluation(10)
    grpo, shuffled = evaluation(20), evaluation(12)
    report = {"sft_minus_base": chain.difference(base, sft), "grpo_minus_sft": chain.difference(sft, grpo),
              "control_minus_sft": chain.difference(sft, still), "shuffled_minus_sft": chain.difference(sft, shuffled),
              "grpo_minus_shuffled": chain.difference(shuffled, grpo)}
    assert report["sft_minus_base"]["difference"] == pytest.approx(0.25) and report["sft_minus_base"]["ci95"][0] > 0
    assert report["control_minus_sft"]["ci95"] == [0.0, 0.0]
    assert chain.passed(report)
    assert not chain.passed({**report, "control_minus_sft": chain.difference(sft, evaluation(20))})  # the control moved
    assert not chain.passed({**report, "sft_minus_base": chain.difference(base, evaluation(0))})  # SFT changed nothing
    assert not chain.passed({**report, "grpo_minus_sft": chain.difference(sft, still)})  # GRPO added nothing
    # shuffled rewards did as well as GRPO: the gain is not the reward's
    assert not chain.passed({**report, "grpo_minus_shuffled": chain.difference(evaluation(20), grpo)})
    # a seed recorded before the shuffled-reward control passes nothing it did not measure
    earlier = {key: value for key, value in report.items() if "shuffled" not in key}
    assert not chain.passed(earlier) and chain.interval(earlier, "grpo_minus_shuffled") == "not measured"
    outcomes = {name: dict.fromkeys(chain.FAILURE_KINDS, 0) for name in chain.POLICIES}
    outcomes["SFT"].update({"success": 20, "wrong id": 60})
    table = chain.table({**report, "grpo_minus_sft": chain.difference(sft, evaluation(14)), "outcomes": outcomes,
                         "success": {"base": 0.0, "SFT": 0.25, "GRPO": 0.35, "control": 0.25, "shuffled": 0.3},
                         "wall_seconds_total": 1200.0, "wall_seconds_total_normalised": 900.0})
    assert table["rows"][0] == ["held-out tau2 success", "0.000", "0.250", "0.350", "0.250", "0.300"]
    assert table["rows"][1][2].startswith("+0.250 [") and table["rows"][1][3].startswith("+0.100 [")
    assert "+0.200 [" in table["rows"][1][3] and table["rows"][1][5].startswith("+0.050 [")  # GRPO - shuffled; shuffled - SFT
    assert table["rows"][2] == ["held-out episodes by outcome", "", "wrong id 60, success 20", "", "", ""]
    rows = chain.seeds_table([{**report, "seed": 1, "success": {"base": 0.0, "SFT": 0.25, "GRPO": 0.5, "control": 0.25, "shuffled": 0.3},
                               "wall_seconds_total": 60.0, "wall_seconds_total_normalised": 60.0, "commit": "abcdef0"},
                              {**earlier, "seed": 2, "success": {"base": 0.0, "SFT": 0.25, "GRPO": 0.5, "control": 0.25},
                               "wall_seconds_total": 60.0, "wall_seconds_total_normalised": 60.0, "commit": "abcdef0"}])
    assert rows["rows"][0][5:8] == ["0.300", chain.interval(report, "grpo_minus_sft") + ": above zero",
                                    chain.interval(report, "grpo_minus_shuffled") + ": above zero"]
    assert rows["rows"][1][5] == "-" and rows["rows"][1][7] == "not measured" and [1, 7] in rows["misses"]


def test_the_chains_held_out_episodes_are_counted_by_what_became_of_their_write(chain, tmp_path: Path):
    """`chain_check.failure_kinds` on trajectory lines as `ctu eval` writes them (the policy's calls as hermes text):
    each held-out episode is a success (by tau2's own reward, not the run's shaped one), a wrong id, a wrong status,
    another tool, a garbled call or no call."""
    gold = {"task_id": "task_158", "status": "pending"}
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps([{"id": "t0", "evaluation_criteria": {"actions": [{"name": "update_task_status", "arguments": gold}]}}]))

    def call(name: str, arguments: dict) -> str:
        return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'

    replies = {"success": call("update_task_status", gold),
               "wrong id": call("update_task_status", {**gold, "task_id": "task_15"}),
               "wrong status": call("update_task_status", {**gold, "status": "completed"}),
               "wrong tool": call("get_user", {"user_id": "user_2"}),
               "garbled call": '<tool_call>\n{"name": "update_task_status", "arguments": {"task_id": "task_158": "status"}}\n</tool_call>',
               "no call": "Goodbye."}
    # tau2's own reward (`raw_reward`) decides success: the run's reward may be shaped past 1 (a dense reward's bonus)
    lines = [{"test_set": chain.TEST_SET, "task_id": "t0", "raw_reward": 1.0 if kind == "success" else 0.0,
              "reward": 1.5 if kind == "success" else 1.2, "parse_failures": int(kind == "garbled call"),
              "messages": [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": text}]}
             for kind, text in replies.items()]
    lines.append({**lines[0], "test_set": "other"})  # not a held-out episode
    (tmp_path / "trajectories.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert chain.failure_kinds(tmp_path, tasks) == {kind: int(kind in replies) for kind in chain.FAILURE_KINDS}


def test_the_chains_held_out_success_is_split_by_template_with_its_count_of_sft_tasks(chain, tmp_path: Path):
    """`chain_report.success_by_template`: held-out episodes by their task's template, each with how many of the
    template's tasks the ``train`` split (the SFT data's) holds; only held-out episodes count, by tau2's own success;
    the console's summary lists the templates."""
    def task(task_id: str, template: str) -> dict:
        return {"id": task_id, "description": {"purpose": f"template t:{template}"}}

    (tmp_path / "tasks.json").write_text(json.dumps([task("a", "plain"), task("b", "plain"), task("c", "new"), task("d", "new"),
                                                     {"id": "e", "description": None}]))
    (tmp_path / "split_tasks.json").write_text(json.dumps({"train": ["a"], "validation": ["b", "c", "e"], "rl": ["d"]}))
    lines = [{"test_set": chain.TEST_SET, "task_id": task_id, "raw_reward": reward}
             for task_id, reward in (("b", 1.0), ("b", 0.0), ("c", 0.0), ("c", 0.0), ("c", 1.0), ("e", 1.0))]
    lines.append({"test_set": "other", "task_id": "d", "raw_reward": 1.0})
    (tmp_path / "trajectories.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    by_template = chain.success_by_template(tmp_path, tmp_path)
    assert by_template == {"-": {"sft_tasks": 0, "episodes": 1, "success": 1.0},
                           "new": {"sft_tasks": 0, "episodes": 3, "success": 1 / 3},
                           "plain": {"sft_tasks": 1, "episodes": 2, "success": 0.5}}
    interval = {"difference": 0.0, "ci95": [0.0, 0.0]}
    report = {"output": "runs/x", "seed": 2, "held_out_tasks": 3, "success": dict.fromkeys(chain.POLICIES, 0.5),
              "sft_minus_base": interval, "grpo_minus_sft": interval, "control_minus_sft": interval,
              "shuffled_minus_sft": interval, "grpo_minus_shuffled": interval,
              "outcomes": {name: {"success": 3, "wrong id": 3} for name in chain.POLICIES},
              "success_by_template": dict.fromkeys(chain.POLICIES, by_template), "grpo_steps": [], "control_steps": [],
              "shuffled_steps": [],
              "wall_seconds": {}, "wall_seconds_total": 60.0, "reference_loop_seconds": 0.3,
              "wall_seconds_total_normalised": 66.0, "passed": False}
    text = chain.summary(report)
    assert "  plain (1, 2): base 0.500, SFT 0.500, GRPO 0.500, control 0.500, shuffled 0.500" in text
    assert "GRPO - shuffled +0.000, paired bootstrap 95% interval [+0.000, +0.000]" in text
    assert "  new (0, 3): base 0.333" in text and text.endswith("the lr control's excludes zero")
    one = {name: {"plain": by_template["plain"]} for name in chain.POLICIES}
    assert "by template" not in chain.summary({**report, "success_by_template": one})  # one template: no split
    text = chain.summary({**report, "grpo_changed": {"episodes": 4, "changed": 3, "to_success": 1, "from_success": 1},
                          "grpo_steps": [{"step": 1, "mean_success": 0.5, "episodes": 8, "entropy": 0.05}]})
    assert "held-out episodes GRPO changed: 3 of 4, 1 to a success, 1 from one" in text
    assert "GRPO policy entropy per step: 0.050" in text


def test_the_chains_report_pairs_held_out_episodes_by_task_and_sample_and_reads_each_steps_entropy(chain, tmp_path: Path):
    """`chain_report.changed_episodes`: episodes of two evaluations paired by (task, sample), changed when any
    policy turn differs, counted to and from tau2's success; other test sets and unpaired episodes left out.
    `step_entropy` reads each step's ``policy/policy_entropy`` from a run's metrics.jsonl."""
    def episode(task_id: str, sample: int, reply: str, reward: float, test_set: str = "heldout") -> dict:
        return {"test_set": test_set, "task_id": task_id, "sample": sample, "raw_reward": reward,
                "messages": [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": reply}]}

    before = [episode("a", 0, "x", 0.0), episode("a", 1, "y", 1.0), episode("b", 0, "z", 1.0), episode("b", 1, "w", 0.0),
              episode("c", 0, "v", 0.0)]
    after = [episode("a", 0, "x2", 1.0), episode("a", 1, "y2", 0.0), episode("b", 0, "z2", 1.0), episode("b", 1, "w", 0.0),
             episode("a", 0, "q", 1.0, test_set="other")]
    for name, lines in (("sft", before), ("grpo", after)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "trajectories.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert chain.changed_episodes(tmp_path / "sft", tmp_path / "grpo") == {"episodes": 4, "changed": 3, "to_success": 1,
                                                                         "from_success": 1}
    assert chain.changed_episodes(tmp_path / "sft", tmp_path / "sft")["changed"] == 0
    metrics = [{"step": 1, "policy/policy_entropy": 0.05}, {"step": 1, "eval/x": 1.0}, {"step": 2, "policy/policy_entropy": 0.3}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in metrics))
    assert chain.step_entropy(tmp_path) == {1: 0.05, 2: 0.3}
    assert chain.step_entropy(tmp_path / "sft") == {}  # a run that wrote no metrics.jsonl


def test_a_chain_record_keeps_earlier_seeds_only_on_the_same_chain_inputs(tmp_path: Path):
    """`chain_check.py --seed S --add`: the seeds already recorded and not repeated are kept, each with its commit in
    the table; a seed measured where the chain's inputs (the specs its backend's stages read, the CPU backend
    section, the locked versions) differ is refused, naming what differs, before any stage runs. A comment edited
    in a spec is no difference."""
    import subprocess

    check = benchmark("chain_check")

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "HEAD")
    if not head:
        pytest.skip("not a git checkout")
    record = tmp_path / "chain_check_skyrl.json"
    seeds = [{"seed": seed, "commit": head} for seed in (1, 2)]
    record.write_text(json.dumps({"figures": {"seeds": seeds}}))
    assert check.kept_seeds(record, {1}, "skyrl") == [seeds[1]]  # seed 1 is re-run: only seed 2 is kept
    assert check.kept_seeds(tmp_path / "none.json", {1}, "skyrl") == []
    assert "seed 2 measured earlier on commit " + head[:7] in check.mixed_note([seeds[1]])
    assert check.held_out([{"seed": 1, "held_out_tasks": 99}, {"seed": 2, "held_out_tasks": 97}]) == "99 (seed 1), 97 (seed 2)"
    assert check.held_out([{"seed": 1, "held_out_tasks": 99}, {"seed": 3, "held_out_tasks": 99}]) == "99"

    before = git("rev-parse", "--verify", "--quiet", "ebb43b6^")  # before the SFT stage's cosine decay (sft.yaml)
    if not before:
        pytest.skip("a shallow clone: no commit before the chain's SFT stage last changed")
    record.write_text(json.dumps({"figures": {"seeds": [{"seed": 2, "commit": before}]}}))
    with pytest.raises(SystemExit, match=r"seed 2 .* chain inputs differ .*specs/learning_chain/"):
        check.kept_seeds(record, {1}, "skyrl")
    for unknown in ({"commit": None}, {"commit": head, "uncommitted_changes": True}):
        record.write_text(json.dumps({"figures": {"seeds": [{"seed": 2, **unknown}]}}))
        with pytest.raises(SystemExit, match="no commit"):
            check.kept_seeds(record, {1}, "skyrl")
    # 8cf1c9f changed a comment of the CPU backend section and nothing else; be77dfc its FSDP dtype
    inputs = benchmark("chain_inputs")
    assert inputs.changed_inputs("8cf1c9f^", "skyrl", head="8cf1c9f") == []
    dtype = "backend.skyrl_overrides.trainer.{}.fsdp_config.mixed_precision.param_dtype"
    assert inputs.changed_inputs("be77dfc^", "skyrl", head="be77dfc") == [
        f"tests/skyrl_cpu/backend_cpu.yaml: {dtype.format('policy')}, {dtype.format('ref')}"]
    # a spec only the other backend's GRPO reads is not compared (acee8ed changed grpo_skyrl.yaml alone)
    assert inputs.changed_inputs("acee8ed^", "tinker", head="acee8ed") == []
    assert inputs.changed_inputs("acee8ed^", "skyrl", head="acee8ed") == [
        "specs/learning_chain/grpo_skyrl.yaml: algorithm.kl_loss_coef, algorithm.use_kl_loss, model.reference_path"]
    # a stage compares as it runs, merged with what it extends: fe9fd1c set grpo.yaml's learning rate, which
    # grpo_skyrl.yaml (extending it) sets for itself; ebb43b6 changed sft.yaml, which sft_skyrl.yaml extends
    assert inputs.changed_inputs("fe9fd1c^", "tinker", head="fe9fd1c") == ["specs/learning_chain/grpo.yaml: trainer.optimizer.lr"]
    assert inputs.changed_inputs("fe9fd1c^", "skyrl", head="fe9fd1c") == []
    assert inputs.changed_inputs("ebb43b6^", "skyrl", head="ebb43b6") == ["specs/learning_chain/sft_skyrl.yaml: trainer.optimizer.scheduler"]


def test_a_locked_package_added_is_no_change_of_the_chains_inputs_and_one_changed_or_removed_is():
    lock = benchmark("chain_inputs")

    def uv_lock(*packages: tuple[str, str]) -> str:
        return "version = 1\n" + "".join(f'[[package]]\nname = "{name}"\nversion = "{version}"\nsource = {{ registry = "x" }}\n'
                                         for name, version in packages) + '[[package]]\nname = "ctu"\nversion = "0.1.0"\nsource = { editable = "." }\n'

    before = uv_lock(("torch", "2.13.0"), ("numpy", "2.0.0"), ("numpy", "1.26.4"))
    assert lock.lock_changes(before, uv_lock(("torch", "2.13.0"), ("numpy", "2.0.0"), ("numpy", "1.26.4"), ("pytest-xdist", "3.8.0"))) == []
    assert lock.lock_changes(before, uv_lock(("torch", "2.14.0"), ("numpy", "2.0.0"))) == [
        "numpy 1.26.4, 2.0.0 -> 2.0.0", "torch 2.13.0 -> 2.14.0"]
    assert lock.lock_changes(before, uv_lock(("torch", "2.13.0"))) == ["numpy 1.26.4, 2.0.0 -> removed"]
    assert "ctu" not in lock.locked_versions(before)  # the project's own code is compared apart


def test_one_sft_stage_serves_both_backends_grpo_each_in_folders_of_its_own(tmp_path: Path, monkeypatch):
    """`chain_check.py --grpo-backend tinker skyrl`: the shared stages (tasks, SFT data, SFT and the base and SFT
    evaluations) run once; each backend's GRPO and control start from the SFT export's last step, write their own
    run folders and are evaluated into their own; a backend's report counts the shared stages' time and its own."""
    check = benchmark("chain_check")
    calls: list[tuple[str, ...]] = []

    def sft(output: Path, overrides: list[str]) -> None:
        calls.append(("sft", *overrides))
        for step in (200, 1000):
            (output / "sft" / "exports" / f"global_step_{step}" / "policy").mkdir(parents=True)

    monkeypatch.setattr(check, "ctu", lambda *args: calls.append(("ctu", *args)))
    monkeypatch.setattr(check, "sft_on_skyrl", sft)
    monkeypatch.setattr(check, "grpo_on_skyrl", lambda output, run_dir, overrides: calls.append(("skyrl", run_dir.name, *overrides)))
    readings = iter(range(1, 100))
    monkeypatch.setattr(check, "reference_loop_seconds", lambda: float(next(readings)))
    walls = check.run_stages(3, ["tinker", "skyrl"], tmp_path)

    assert [call[:3] for call in calls if call[0] == "ctu" and call[1] != "eval"] == [
        ("ctu", "tasks", "generate"), ("ctu", "data", "sft"), *[("ctu", "run", str(check.GRPO_SPECS["tinker"]))] * 3]
    assert [call for call in calls if call[0] == "sft"] == [("sft", "experiment.seed=3")]
    export = f"model.path={tmp_path}/sft/exports/global_step_1000/policy"
    tinker_runs = [call for call in calls if call[:2] == ("ctu", "run")]
    assert all(export in call and "experiment.seed=3" in call for call in tinker_runs)
    assert [next(arg for arg in call if arg.startswith("experiment.name=")) for call in tinker_runs] == [
        "experiment.name=grpo", "experiment.name=grpo_control", "experiment.name=grpo_shuffled"]
    assert f"trainer.optimizer.lr={check.CONTROL_LR}" in tinker_runs[1] and not any("lr=" in arg for arg in tinker_runs[0] + tinker_runs[2])
    # the shuffled-reward control: the GRPO stage with only its rewards' assignment changed
    assert "algorithm.shuffle_rewards=true" in tinker_runs[2] and not any("shuffle" in arg for arg in tinker_runs[0] + tinker_runs[1])
    skyrl_runs = [call for call in calls if call[0] == "skyrl"]
    assert [call[1] for call in skyrl_runs] == ["grpo_skyrl", "grpo_skyrl_control", "grpo_skyrl_shuffled"]
    assert all(export in call for call in skyrl_runs) and "algorithm.shuffle_rewards=true" in skyrl_runs[2]
    evaluated = [call[call.index("--out") + 1] for call in calls if call[:2] == ("ctu", "eval")]
    assert evaluated == [str(tmp_path / name) for name in ("eval_base", "eval_sft", "eval_grpo", "eval_grpo_control", "eval_grpo_shuffled",
                                                            "eval_grpo_skyrl", "eval_grpo_skyrl_control", "eval_grpo_skyrl_shuffled")]
    own = [f"{name}{kind}" for name in ("GRPO", "control", "shuffled") for kind in ("", "_eval")]
    own = [name if not name.endswith("_eval") else f"eval {name.removesuffix('_eval')}" for name in own]
    assert list(walls) == [*check.SHARED, *(f"tinker: {name}" for name in own), *(f"skyrl: {name}" for name in own)]
    assert check.eval_folders(tmp_path, "skyrl")["SFT"] == check.eval_folders(tmp_path, "tinker")["SFT"] == tmp_path / "eval_sft"
    assert [timed.loop for timed in walls.values()] == [n + 0.5 for n in range(1, len(walls) + 1)]  # read around each
    # a slow hour and a fast one: each stage normalised at its own speed, the total's loop their weighted harmonic mean
    total, loop = check.normalised_stages({"SFT": check.Timed(3600.0, 0.66), "GRPO": check.Timed(1800.0, 0.33)})
    assert total == pytest.approx(1800.0 + 1800.0) and loop == pytest.approx(5400.0 * 0.33 / 3600.0)
    reported = {}
    monkeypatch.setattr(check, "run_stages", lambda seed, backends: {stage: check.Timed(1.0, 0.5) for stage in walls})
    monkeypatch.setattr(check, "report_chain", lambda seed, backend, own, report_only: reported.setdefault(backend, own))
    check.chain(3, False, ["tinker", "skyrl"])
    assert list(reported["skyrl"]) == [*check.SHARED, *(f"skyrl: {name}" for name in own)]
    assert len(reported["tinker"]) == len(check.SHARED) + 6 and not any(stage.startswith("skyrl") for stage in reported["tinker"])


def test_a_record_written_by_the_same_run_is_no_uncommitted_change_of_its_checkout(tmp_path, monkeypatch):
    """`results.checkout` of a benchmark writing two records (the chain check of both backends): the first record,
    changed in the working tree, does not call the second one's commit changed; a changed spec does."""
    import subprocess

    results = benchmark("results")
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "spec.yaml").write_text("a: 1\n")
    (tmp_path / "benchmarks" / "results" / "chain_check_tinker.json").write_text("{}\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
    monkeypatch.setattr(results, "REPO", tmp_path)
    monkeypatch.setattr(results, "RESULTS", tmp_path / "benchmarks" / "results")
    (tmp_path / "benchmarks" / "results" / "chain_check_tinker.json").write_text('{"seed": 3}\n')
    assert not results.checkout().endswith(results.UNCOMMITTED)
    (tmp_path / "spec.yaml").write_text("a: 2\n")
    assert results.checkout().endswith(results.UNCOMMITTED)
