"""Entries that moved into a backend's own section (`ctu.spec.moved`): a spec written before the move loads the
same, with a deprecation warning at the line it sets the old entry; a backend without the entry, or the entry set at
both places, is an error at that line."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctu.spec import SpecError, dump_spec, load_spec

SPEC = """\
experiment: {name: moved}
model: {path: Qwen/Qwen2.5-3B-Instruct}
data:
  train: [{domain: retail}]
environment:
  user_simulator: {type: scripted}
trainer:
  train_batch_size: 4
  policy_mini_batch_size: 4
  micro_train_batch_size_per_gpu: 5
  fully_async: {max_staleness_steps: 2}
algorithm:
  policy_loss: rollout_is
  off_policy_correction: {tis_ratio_type: sequence}
  entropy_coef: 0.05
  loss_reduction: sequence_mean
  value_clip: 0.3
"""
OLD_PLACES = {  # the old place -> its line in SPEC
    "trainer.micro_train_batch_size_per_gpu": 10,
    "trainer.fully_async": 11,
    "algorithm.policy_loss": 13,
    "algorithm.off_policy_correction": 14,
    "algorithm.entropy_coef": 15,
    "algorithm.loss_reduction": 16,
    "algorithm.value_clip": 17,
}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def test_an_entry_at_its_old_place_is_read_into_the_backend_section_with_a_warning_at_its_line(tmp_path):
    path = write(tmp_path, SPEC + "backend: {type: skyrl, colocate_all: false}\n")
    loaded = load_spec(path)
    params = loaded.spec.backend.params
    assert loaded.spec.backend.type == "skyrl"
    assert params.micro_train_batch_size_per_gpu == 5
    assert params.fully_async is not None and params.fully_async.max_staleness_steps == 2
    assert params.policy_loss == "rollout_is"
    assert params.off_policy_correction is not None and params.off_policy_correction.tis_ratio_type == "sequence"
    assert (params.entropy_coef, params.loss_reduction, params.value_clip) == (0.05, "sequence_mean", 0.3)
    deprecations = {issue.path: issue for issue in loaded.warnings if "deprecated" in issue.message}
    assert set(deprecations) == set(OLD_PLACES)
    for old, line in OLD_PLACES.items():
        issue = deprecations[old]
        assert f"moved to `backend.{old.split('.')[-1]}`" in issue.message
        assert issue.location is not None and (issue.location.file, issue.location.line) == (str(path), line)
    again = write(tmp_path / "..", dump_spec(loaded.spec))  # the resolved spec writes the new place only
    reloaded = load_spec(again)
    assert reloaded.spec == loaded.spec
    assert not [issue for issue in reloaded.warnings if "deprecated" in issue.message]


@pytest.mark.parametrize("backend", ["", "backend: skyrl\n"])
def test_a_spec_naming_its_backend_by_name_or_not_at_all_gets_the_section(tmp_path, backend):
    path = write(tmp_path, SPEC.split("  fully_async")[0] + backend)
    loaded = load_spec(path)
    assert loaded.spec.backend.type == "skyrl"
    assert loaded.spec.backend.params.micro_train_batch_size_per_gpu == 5
    assert [issue.path for issue in loaded.warnings if "deprecated" in issue.message] == ["trainer.micro_train_batch_size_per_gpu"]


def test_an_old_entry_set_on_the_command_line_moves_too(tmp_path):
    path = write(tmp_path, SPEC.split("trainer:")[0] + "backend: {type: skyrl}\n")
    loaded = load_spec(path, ["trainer.micro_train_batch_size_per_gpu=4"])
    assert loaded.spec.backend.params.micro_train_batch_size_per_gpu == 4
    (issue,) = [issue for issue in loaded.warnings if "deprecated" in issue.message]
    assert issue.path == "trainer.micro_train_batch_size_per_gpu"
    assert issue.location is not None and "override" in issue.location.file


def test_a_bad_value_at_the_old_place_is_reported_at_its_line(tmp_path):
    path = write(tmp_path, SPEC.replace("micro_train_batch_size_per_gpu: 5", "micro_train_batch_size_per_gpu: 0"))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    (issue,) = [issue for issue in info.value.issues if "micro_train_batch_size_per_gpu" in issue.path]
    assert "greater than 0" in issue.message
    assert issue.location is not None and issue.location.line == OLD_PLACES["trainer.micro_train_batch_size_per_gpu"]


def test_an_entry_set_at_both_places_is_an_error(tmp_path):
    path = write(tmp_path, SPEC + "backend: {type: skyrl, colocate_all: false, micro_train_batch_size_per_gpu: 5}\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    (issue,) = info.value.issues
    assert issue.path == "trainer.micro_train_batch_size_per_gpu"
    assert "set twice" in issue.message and "backend.micro_train_batch_size_per_gpu" in issue.message
    assert issue.location is not None and issue.location.line == OLD_PLACES["trainer.micro_train_batch_size_per_gpu"]


def test_a_backend_without_the_entry_names_the_backend_that_has_it(tmp_path):
    path = write(tmp_path, SPEC + "backend: {type: tinker}\n" + "rollout: {top_p: 2.0}\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    by_path = {issue.path: issue for issue in info.value.issues}
    for old, line in OLD_PLACES.items():
        assert f"the tinker backend has no `{old.split('.')[-1]}` (only skyrl has it" in by_path[old].message
        assert by_path[old].location is not None and by_path[old].location.line == line
    assert "rollout.top_p" in by_path  # the schema's own errors are listed with them


def test_a_run_written_before_the_move_loads_on_a_backend_without_the_entries(tmp_path):
    """A tinker run's ``spec.resolved.yaml`` of before the move writes every entry at its old place, set to its
    default (off): it loads as it did, each entry dropped with a warning."""
    defaults = {"trainer.micro_train_batch_size_per_gpu=1", "trainer.fully_async=null", "algorithm.policy_loss=regular",
                "algorithm.off_policy_correction=null", "algorithm.entropy_coef=0.0", "algorithm.loss_reduction=token_mean",
                "algorithm.value_clip=0.1"}
    path = write(tmp_path, SPEC.split("trainer:")[0] + "backend: {type: tinker}\nalgorithm: {use_kl_loss: false}\n")
    loaded = load_spec(path, sorted(defaults))
    assert loaded.spec.backend.type == "tinker"
    dropped = {issue.path for issue in loaded.warnings if "is its default: remove it" in issue.message}
    assert dropped == {entry.split("=")[0] for entry in defaults}
