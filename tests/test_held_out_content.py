"""Held out by content: a test task copied into the training tasks under another id (the same customer and starting
database: `tau_bench_env.task_content.scenario_digest`) is held out like the original; `ctu run` refuses it before
anything is written, and `ctu data sft` before anything is written, naming the copy and its original. None of tau2's
own train tasks shares a test task's scenario, so specs training on tau2's splits are not touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tau2
import yaml

from ctu.composition import build_components
from ctu.runners.task_rows import held_out_copies
from ctu.spec import spec_from_dict

from .conftest import MINIMAL_SPEC, REPO

MOCK = Path(tau2.__file__).parent / "data" / "tau2" / "domains" / "mock" / "tasks.json"


def spec_with_a_copy(tmp_path: Path, copied: bool) -> dict:
    """A spec training on mock tasks of a task file whose test split holds `update_task_1`; with `copied`, the
    training split holds it again as `update_task_1_again`."""
    tasks = json.loads(MOCK.read_text())
    original = next(task for task in tasks if task["id"] == "update_task_1")
    train = ["create_task_1", "update_task_with_initialization_data"]
    if copied:
        tasks.append({**original, "id": "update_task_1_again"})
        train.append("update_task_1_again")
    (tmp_path / "tasks.json").write_text(json.dumps(tasks))
    (tmp_path / "split_tasks.json").write_text(json.dumps({"train": train, "test": ["update_task_1"]}))
    domain = {"type": "mock", "tasks_file": str(tmp_path / "tasks.json"), "split_file": str(tmp_path / "split_tasks.json")}
    data = json.loads(json.dumps(MINIMAL_SPEC))
    data["model"] = {"path": "builtin:tiny-qwen3", "family": "qwen3", "chat_template": "qwen3_no_thinking"}
    data["data"] = {"train": [{"domain": domain, "split": "train"}], "test_sets": {"mock": {"domain": domain, "split": "test"}}}
    data["experiment"] = {**data.get("experiment", {}), "output_dir": str(tmp_path / "runs")}
    data["backend"] = {"type": "tinker", "local": True}
    data["algorithm"] = {"use_kl_loss": False}
    data["trainer"] = {"train_batch_size": 2, "policy_mini_batch_size": 2, "max_steps": 1}
    return data


def test_a_test_task_copied_under_another_id_is_held_out(tmp_path: Path):
    copied = spec_from_dict(spec_with_a_copy(tmp_path, copied=True)).spec  # by id, nothing is held out here
    assert held_out_copies(build_components(copied)) == ["mock/update_task_1_again (held-out mock/update_task_1)"]
    clean = tmp_path / "clean"
    clean.mkdir()
    assert held_out_copies(build_components(spec_from_dict(spec_with_a_copy(clean, copied=False)).spec)) == []
    tau2_splits = json.loads(json.dumps(MINIMAL_SPEC))  # tau2's own retail train and test splits share no scenario
    assert held_out_copies(build_components(spec_from_dict(tau2_splits).spec)) == []


def test_ctu_run_and_ctu_data_sft_refuse_the_copy_before_writing(tmp_path: Path):
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(spec_with_a_copy(tmp_path, copied=True)))
    env = {**os.environ, "COLUMNS": "200"}
    for command in (["run", str(spec_file), "--no-progress"], ["data", "sft", str(spec_file), "--out", str(tmp_path / "sft")]):
        done = subprocess.run([sys.executable, "-m", "ctu.cli", *command], capture_output=True, text=True, cwd=REPO, env=env,
                              timeout=300)
        said = " ".join((done.stdout + done.stderr).split())
        assert done.returncode == 2 and "Traceback" not in said, said[-2000:]
        assert "1 training task(s) are held-out tasks under another id" in said and "mock/update_task_1_again" in said
    assert not (tmp_path / "runs").exists() and not (tmp_path / "sft").exists()


def test_ctu_data_sft_from_an_evaluation_of_a_copy_refuses_it_by_its_recorded_content(tmp_path: Path):
    """`--from-eval` of an evaluation whose recorded tasks (eval.json's scenario digests) hold a test task under
    another id: refused before anything is written, naming the copy; the same folder recording other content passes
    that check."""
    from ctu.evaluation.report import figures
    from ctu.sft.data import SFTDataError, build_sft_data
    from tau_bench_env.domains import tau2_domain
    from tau_bench_env.task_content import scenario_digest

    spec = spec_from_dict(spec_with_a_copy(tmp_path, copied=False)).spec
    original, other = (scenario_digest(tau2_domain("mock").task(task_id)) for task_id in ("update_task_1", "create_task_1"))
    line = {"domain": "mock", "task_id": "renamed", "raw_reward": 1.0, "reward": 1.0, "test_set": "elsewhere", "infra_error": None,
            "policy_turns": 1, "termination": "agent_stop",
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]}
    for digest, refused in ((original, True), (other, False)):
        folder = tmp_path / f"eval_{refused}"
        folder.mkdir()
        (folder / "trajectories.jsonl").write_text(json.dumps(line) + "\n")
        group = figures([line])
        (folder / "eval.json").write_text(json.dumps({
            "spec": "s", "policy": "teacher", "samples_per_task": 1, "by_test_set": {"elsewhere": group}, "overall": group,
            "test_set_sources": {"elsewhere": {"domain": "mock", "split": "base", "task_ids": ["mock/renamed"],
                                               "task_scenarios": {"renamed": digest}}}}))
        out = tmp_path / f"sft_{refused}"
        if refused:
            with pytest.raises(SFTDataError, match=r"1 evaluated task\(s\) are held-out tasks under another id .*"
                                                   r"mock/renamed \(held-out mock/update_task_1\)"):
                build_sft_data(spec, out, gold=False, from_eval=[folder], tokens=False)
            assert not out.exists()
        else:
            assert len(build_sft_data(spec, out, gold=False, from_eval=[folder], tokens=False).rows) == 1
