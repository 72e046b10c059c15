"""The `jsonl` and `console` trackers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctu.registry import registry


def build(name: str, **params):
    info = registry.trackers.get(name)
    return info.build(info.params_model(**params))


def test_jsonl_writes_one_line_per_step_and_appends_on_resume(tmp_path: Path):
    tracker = build("jsonl")
    tracker.start(tmp_path, "run", "proj", {})
    tracker.log({"generation/avg_reward": 0.5, "reward/parse_failure_rate": float("nan")}, step=1)
    tracker.log({"generation/avg_reward": 0.75}, step=2)
    tracker.finish()
    resumed = build("jsonl")
    resumed.start(tmp_path, "run", "proj", {})
    resumed.log({"generation/avg_reward": 1.0}, step=3)
    resumed.finish()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3]
    assert lines[0] == {"step": 1, "generation/avg_reward": 0.5, "reward/parse_failure_rate": None}


@pytest.mark.parametrize(("resume_step", "kept"), [(1, [0, 1]), (-1, [])])
def test_jsonl_resumed_drops_later_steps_and_a_line_a_kill_cut_short(tmp_path: Path, resume_step: int, kept: list[int]):
    """A resume from step 1's checkpoint keeps steps 0 and 1; one that starts over (-1: killed before its first
    checkpoint) keeps nothing, so its evaluation before training is not logged twice. What it replays is set aside
    under superseded/, the cut line with it: nothing deleted."""
    lines = ['{"step": 0, "a": 1.0}', '{"step": 1, "a": 2.0}', '{"step": 2, "a": 3.0}', '{"step": 3, "a"']
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines))
    tracker = build("jsonl")
    tracker.start(tmp_path, "run", "proj", {}, resume_step=resume_step)
    tracker.finish()
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == kept
    [aside] = (tmp_path / "superseded").glob("*/metrics.jsonl")
    assert aside.read_text().splitlines() == lines[len(kept):]


def test_trackers_refuse_to_log_before_start(tmp_path: Path):
    for name in ("jsonl", "console"):
        with pytest.raises(RuntimeError, match="before start"):
            build(name).log({"a/b": 1.0}, step=0)


def test_console_prints_every_nth_step(tmp_path: Path, capsys):
    tracker = build("console", every_n_steps=2)
    tracker.start(tmp_path, "run", "proj", {})
    tracker.log({"generation/avg_reward": 0.25}, step=1)
    tracker.log({"generation/avg_reward": 0.5}, step=2)
    tracker.finish()
    out = capsys.readouterr().out
    assert "step 2" in out and "step 1" not in out and "generation/avg_reward" in out
