"""What `ctu run` does before a runner starts: the built-in model's first build, said and shown."""

from __future__ import annotations

import pytest
from rich.console import Console

from ctu.models import builtin
from ctu.runners.launch import build_builtin_model


@pytest.mark.parametrize("progress", [True, False])
def test_the_first_run_says_it_builds_the_model_and_shows_each_phase(monkeypatch, progress: bool):
    built: list[str] = []

    def fake_resolve(model: str, progress=None) -> str:
        for phase in ("training the tokenizer", "warm-up on gold agent turns"):
            for done in range(3):
                progress(phase, done, 3)
        built.append(model)
        return "/cache/tiny-qwen3"

    monkeypatch.setattr(builtin.BuiltinModel, "is_built", lambda self: False)
    monkeypatch.setattr(builtin, "resolve", fake_resolve)
    console = Console(record=True, width=120, force_terminal=False)
    build_builtin_model("builtin:tiny-qwen3", console, progress=progress)
    text = console.export_text()
    assert built == ["builtin:tiny-qwen3"]
    assert "building builtin:tiny-qwen3: first run only" in text
    assert "warm-up on gold agent turns" in text


def test_nothing_is_built_for_a_hub_model_or_a_cached_one(monkeypatch):
    monkeypatch.setattr(builtin, "resolve", lambda *args, **kwargs: pytest.fail("nothing to build"))
    console = Console(record=True)
    build_builtin_model("Qwen/Qwen3-8B", console)
    monkeypatch.setattr(builtin.BuiltinModel, "is_built", lambda self: True)
    build_builtin_model("builtin:tiny-qwen3", console)
    assert console.export_text() == ""


def test_the_reward_plot_steps_are_whole_numbers(tmp_path, monkeypatch):
    """A two-step run's `plots/reward.png` has ticks at steps 1 and 2 only (it had 0.25, 0.5, 0.75...)."""
    import json

    import matplotlib.figure

    from ctu.runners.rundir import RunDir

    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.metrics_file.write_text("".join(json.dumps({"step": step, "generation/avg_reward": 0.1 * step}) + "\n" for step in (1, 2)))
    seen: list[list[float]] = []
    save = matplotlib.figure.Figure.savefig

    def recording(figure, *args, **kwargs):
        seen.append([tick for tick in figure.axes[0].get_xticks() if 1 <= tick <= 2])
        return save(figure, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", recording)
    assert run.plot_rewards() == run.plots / "reward.png" and (run.plots / "reward.png").stat().st_size > 1000
    assert seen == [[1.0, 2.0]]


def test_metric_lines_a_kill_cut_are_named_as_lost_steps_and_the_plot_still_draws(tmp_path):
    import json

    from ctu.runners.rundir import RunDir

    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.write_state({"backend": "tinker", "step": 3})
    run.metrics_file.write_text(json.dumps({"step": 1, "generation/avg_reward": 0.1}) + "\n"
                                + json.dumps({"step": 3, "generation/avg_reward": 0.3}) + "\n" + '{"step": 2, "gener')
    assert [line["step"] for line in run.metric_lines()] == [1, 3]
    assert run.lost_metric_steps() == [2]
    assert run.plot_rewards() == run.plots / "reward.png"
    run.write_state({"backend": "tinker", "step": 1})
    assert run.lost_metric_steps() == []
