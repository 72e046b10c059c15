"""Which policy `ctu eval --run-dir` evaluates (`latest_checkpoint`): a step's Hugging Face export where it has
one, else a Tinker run's checkpoint; on run directories laid out as the backends write them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctu.evaluation.policies import EvalError, latest_checkpoint
from ctu.spec import dump_spec, load_spec

from ..conftest import REPO


def resolved_spec(backend: str) -> str:
    """A run's ``spec.resolved.yaml`` on `backend` (the main job's spec)."""
    return dump_spec(load_spec(REPO / "specs" / "smoke.yaml", [f"backend={{type: {backend}}}"]).spec)


def tinker_run(folder: Path, checkpoints: list[int], exports: list[int]) -> Path:
    (folder / "checkpoints").mkdir(parents=True)
    for step in checkpoints:
        record = {"step": step, "path": f"tinker://run/weights/step_{step:06d}"}
        (folder / "checkpoints" / f"step_{step:06d}.json").write_text(json.dumps(record) + "\n")
    for step in exports:
        (folder / "exports" / f"global_step_{step}" / "policy").mkdir(parents=True)
        (folder / "exports" / f"global_step_{step}" / "policy" / "config.json").write_text("{}")
    (folder / "state.json").write_text(json.dumps({"step": max(checkpoints)}))  # as before ctu wrote "backend" there
    (folder / "spec.resolved.yaml").write_text(resolved_spec("tinker"))
    return folder


def test_a_step_with_an_export_is_evaluated_from_it_and_one_without_from_its_checkpoint(tmp_path: Path):
    run = tinker_run(tmp_path / "run", checkpoints=[1, 2, 3], exports=[2])
    assert latest_checkpoint(run) == (3, "tinker://run/weights/step_000003")  # killed before its final export
    assert latest_checkpoint(run, 2) == (2, str((run / "exports" / "global_step_2" / "policy").absolute()))
    assert latest_checkpoint(run, 1)[1].startswith("tinker://")
    (run / "exports" / "global_step_4" / "policy").mkdir(parents=True)  # an export being written: no config yet
    assert latest_checkpoint(run)[0] == 3
    with pytest.raises(EvalError, match="no checkpoint of step 7; it has steps 1, 2, 3"):
        latest_checkpoint(run, 7)
    with pytest.raises(EvalError, match=r"holds no spec\.resolved\.yaml; is it a run directory"):
        latest_checkpoint(tmp_path)


def test_a_skyrl_run_is_evaluated_from_its_exports_only(tmp_path: Path):
    run = tmp_path / "run"
    (run / "checkpoints" / "global_step_2" / "policy").mkdir(parents=True)  # SkyRL's own (FSDP) checkpoint
    (run / "state.json").write_text(json.dumps({"backend": "skyrl", "step": 2}))
    (run / "spec.resolved.yaml").write_text(resolved_spec("skyrl"))
    with pytest.raises(EvalError, match="holds no Hugging Face export"):
        latest_checkpoint(run)
    (run / "exports" / "global_step_2" / "policy").mkdir(parents=True)
    (run / "exports" / "global_step_2" / "policy" / "config.json").write_text("{}")
    assert latest_checkpoint(run) == (2, str((run / "exports" / "global_step_2" / "policy").absolute()))


def test_a_skyrl_runs_export_is_served_batching_the_episodes_the_evaluation_runs_at_once(tmp_path: Path, monkeypatch):
    """A spec without Tinker settings (a SkyRL run's) is served by a local Tinker server sampling up to 16 of the
    episodes in flight in one batch, where a Tinker run's spec says its own; `Backend.open_policy`'s `in_flight`
    reaches the server from the evaluation."""
    import asyncio
    import contextlib

    import ctu.backends.tinker.policy as served
    from ctu.backends.tinker.params import TinkerParams
    from ctu.evaluation.policies import PolicyChoice, open_policy

    assert served.serving_params(None, 32).sample_batch_size == 16
    assert served.serving_params(None, 3).sample_batch_size == 3  # no padding to sequences nobody samples
    assert served.serving_params(None, None) is None
    own = TinkerParams(sample_batch_size=4)
    assert served.serving_params(own, 32) is own
    seen = []

    @contextlib.asynccontextmanager
    async def serve_policy(spec, params, policy, run_dir, work_dir, *, in_flight=None):
        seen.append((params, policy, in_flight))
        yield "sampler", "tokenizer"

    monkeypatch.setattr(served, "serve_policy", serve_policy)
    run = tmp_path / "run"
    (run / "exports" / "global_step_2" / "policy").mkdir(parents=True)
    (run / "exports" / "global_step_2" / "policy" / "config.json").write_text("{}")
    (run / "state.json").write_text(json.dumps({"backend": "skyrl", "step": 2}))
    (run / "spec.resolved.yaml").write_text(resolved_spec("skyrl"))
    spec = load_spec(run / "spec.resolved.yaml").spec

    async def opened() -> tuple[str, str]:
        async with open_policy(spec, PolicyChoice(run_dir=run), tmp_path / "eval", in_flight=32) as handle:
            return handle

    assert asyncio.run(opened()) == ("sampler", "tokenizer")
    assert seen == [(None, str((run / "exports" / "global_step_2" / "policy").absolute()), 32)]
