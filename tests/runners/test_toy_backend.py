"""A backend added in one file (`tests/support/toy_backend.py`, registered by the spec's `imports:`) runs every
command a backend serves, through the `Backend` interface only: `ctu validate` (its own rule), `ctu run --dry-run`,
`ctu run`, `ctu run --resume`, and `ctu eval --run-dir` on the policies it saved."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ..conftest import MINIMAL_SPEC, REPO
from ..test_cli import ctu

REPLY = "Thanks, that is all I can do. Goodbye!"


def toy_spec(tmp_path: Path) -> Path:
    data = json.loads(json.dumps(MINIMAL_SPEC))
    data.update(imports=[str(REPO / "tests" / "support" / "toy_backend.py")], backend={"type": "toy", "reply": REPLY})
    data["experiment"].update(name="toy", output_dir=str(tmp_path / "runs"))
    data["model"] = {"path": "toy/scripted", "family": "qwen3", "chat_template": "qwen3_no_thinking"}
    data["data"]["train"][0]["max_tasks"] = 4
    data["data"]["test_sets"]["retail"]["max_tasks"] = 2
    data["environment"].update(max_turns=4)
    data["rollout"] = {"n_samples_per_prompt": 2}
    data["trainer"].update(max_steps=2)
    data["tracking"] = {"trackers": ["jsonl"]}
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_backend_in_one_file_validates_plans_runs_resumes_and_is_evaluated(tmp_path: Path):
    spec = toy_spec(tmp_path)
    run_dir = tmp_path / "runs" / "toy"

    bad = ctu("validate", str(spec), "algorithm.use_kl_loss=true")
    assert bad.returncode == 2
    assert "algorithm.use_kl_loss: the toy backend has no reference model" in bad.stderr

    plan = ctu("run", str(spec), "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert f"# toy config\nreply: {REPLY}\n" in plan.stdout
    assert "1. 2 step(s) of 2 tasks x 2 samples" in plan.stdout
    assert not run_dir.exists()

    run = ctu("run", str(spec), "--no-progress")
    assert run.returncode == 0, run.stderr
    assert "done step 2" in run.stdout
    assert json.loads((run_dir / "state.json").read_text()) == {"backend": "toy", "step": 2}
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    assert all(line["train/reward_mean"] == 0.0 for line in lines)  # a goodbye solves no retail task

    resumed = ctu("run", "--resume", str(run_dir), "trainer.max_steps=3", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert "done step 3" in resumed.stdout
    assert [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]

    evaluated = ctu("eval", "--run-dir", str(run_dir), "--step", "2", "--no-progress", "--out", str(tmp_path / "eval"))
    assert evaluated.returncode == 0, evaluated.stderr
    report = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert report["policy"] == "toy-step2"
    episodes = [json.loads(line) for line in (tmp_path / "eval" / "trajectories.jsonl").read_text().splitlines()]
    assert len(episodes) == 2 and report["test_sets"] == ["retail"]
    for episode in episodes:  # the policy the run's backend opened: its spec's reply after ctu's greeting
        replies = [m["content"] for m in episode["messages"] if m["role"] == "assistant"][1:]
        assert replies and set(replies) == {REPLY}

    missing = ctu("eval", "--run-dir", str(run_dir), "--step", "7", "--no-progress")
    assert missing.returncode == 2
    assert "has no checkpoint of step 7; it has steps 1, 2, 3" in missing.stderr



def test_the_backend_guide_shows_the_toy_backends_training_loop_in_full():
    """docs/extending.md's loop is the one the test above runs, character for character."""
    source = (REPO / "tests" / "support" / "toy_backend.py").read_text()
    loop = source[source.index("    async def _train("):source.index("    def policies(")].rstrip() + "\n"
    assert f"```python\n{loop}```" in (REPO / "docs" / "extending.md").read_text()
