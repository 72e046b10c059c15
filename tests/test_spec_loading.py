"""Loading: extends, overrides, interpolation, dumping, hashing, and every shipped spec."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ctu.backends.skyrl.params import SkyRLParams
from ctu.backends.tinker.params import TinkerParams
from ctu.spec import SpecError, dump_spec, load_spec, spec_from_dict, spec_hash

from .conftest import REPO, SPECS


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_every_shipped_spec_is_valid_with_only_the_warnings_its_header_explains(path: Path):
    """The specs of CTU-Agent-v0's scripts keep the scripts' values on tau2's tasks, so `ctu validate` warns
    where specs/base/ctu_agent_v0.yaml says it will: tasks left out by drop_last (74 tasks at the scripts' batch
    sizes), tasks unsolvable in the scripts' 10 turns, and SkyRL's HF export at every epoch's end. Other specs
    validate without a warning."""
    loaded = load_spec(path)
    assert loaded.spec.experiment.name == path.stem
    if "ctu-agent-v0" not in loaded.spec.experiment.tags:
        assert loaded.warnings == []
        return
    for warning in loaded.warnings:
        assert (warning.path == "trainer.train_batch_size" and "drop_last" in warning.message) or (
            warning.path.startswith("data.") and "environment.max_turns 10" in warning.message) or (
            warning.path == "trainer.hf_save_interval" and "every epoch's end" in warning.message), warning


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_resolved_spec_reloads_unchanged(path: Path, tmp_path: Path):
    spec = load_spec(path).spec
    text = dump_spec(spec)
    again_file = tmp_path / "resolved.yaml"
    again_file.write_text(text)
    again = load_spec(again_file).spec
    assert again == spec
    assert dump_spec(again) == text
    assert spec_hash(again) == spec_hash(spec)
    assert "extends" not in yaml.safe_load(text)


def test_twelve_training_specs_ship():
    names = {p.stem for p in SPECS}
    assert {
        "tau_bench", "tau_bench_7b", "tau_bench_llama", "multi_domain", "multi_domain_7b",
        "multi_domain_7b_optimized", "retail_3b_grpo", "retail_3b_grpo_repetition_fix", "retail_3b_grpo_taxonomy",
        "retail_7b_grpo", "retail_7b_grpo_taxonomy", "retail_8b_taxonomy",
    } <= names


def test_retail_8b_taxonomy_is_qwen3_without_thinking_with_taxonomy_feedback():
    spec = load_spec(Path(SPECS[0]).parent / "retail_8b_taxonomy.yaml").spec
    assert spec.model.path == "Qwen/Qwen3-8B"
    assert spec.model.chat_template.type == "qwen3_no_thinking"
    assert [r.type for r in spec.rewards] == ["tau_outcome", "taxonomy_feedback"]
    assert spec.judge is not None and spec.judge.type == "mast"


def test_multi_domain_holds_out_retail_and_airline():
    spec = load_spec(Path(SPECS[0]).parent / "multi_domain.yaml").spec
    trained = {source.domain.type for source in spec.data.train}
    tested = {source.domain.type for source in spec.data.test_sets.values()}
    assert {"retail", "airline"} <= tested
    assert not {"retail", "airline"} & trained


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


BASE_TEXT = """\
experiment: {name: base, tags: [a, b]}
model: {path: Qwen/Qwen2.5-3B-Instruct}
data:
  train: [{domain: retail}, {domain: airline}]
environment:
  user_simulator: {type: scripted, turn_budget: 4}
trainer:
  epochs: 2
  optimizer: {lr: 1.0e-6, weight_decay: 0.1}
backend: {type: tinker}
algorithm: {use_kl_loss: false}
"""


def test_extends_merges_mappings_and_replaces_lists(tmp_path: Path):
    write(tmp_path, "base.yaml", BASE_TEXT)
    write(tmp_path, "mid.yaml", "extends: base.yaml\ntrainer:\n  optimizer: {lr: 2.0e-6}\n")
    child = write(
        tmp_path,
        "child.yaml",
        "extends: [mid.yaml]\nexperiment: {name: child, tags: [c]}\ndata:\n  train: [{domain: mock, split: base}]\n",
    )
    spec = load_spec(child).spec
    assert spec.experiment.name == "child"
    assert spec.experiment.tags == ["c"]  # lists are replaced
    assert [s.domain.type for s in spec.data.train] == ["mock"]
    assert spec.trainer.optimizer.lr == 2.0e-6  # mid overrides base
    assert spec.trainer.optimizer.weight_decay == 0.1  # and keeps base's siblings
    assert spec.trainer.epochs == 2
    assert spec.environment.user_simulator.params.turn_budget == 4


def test_extends_paths_are_relative_to_the_extending_file(tmp_path: Path):
    (tmp_path / "bases").mkdir()
    write(tmp_path / "bases", "base.yaml", BASE_TEXT)
    write(tmp_path / "bases", "more.yaml", "extends: base.yaml\ntrainer: {epochs: 5}\n")
    child = write(tmp_path, "child.yaml", "extends: bases/more.yaml\n")
    assert load_spec(child).spec.trainer.epochs == 5


def test_locations_follow_the_file_that_set_the_value(tmp_path: Path):
    write(tmp_path, "base.yaml", BASE_TEXT)
    child = write(tmp_path, "child.yaml", "extends: base.yaml\n\ntrainer:\n  epochs: 0\n")
    with pytest.raises(SpecError) as info:
        load_spec(child)
    (issue,) = info.value.issues
    assert issue.path == "trainer.epochs"
    assert issue.location.file == str(child) and issue.location.line == 4
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, "c2.yaml", "extends: base.yaml\n"), ["trainer.optimizer.lr=-1"])
    assert info.value.issues[0].location.file == "override 'trainer.optimizer.lr=-1'"
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, "c3.yaml", "extends: base.yaml\n"), ["experiment.seed=x"])
    assert info.value.issues[0].location.file == "override 'experiment.seed=x'"
    # untouched values still point at the base file
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, "c4.yaml", "extends: base.yaml\nrollout: {n_samples_per_prompt: 0}\n"))
    assert info.value.issues[0].location.line == 2


def test_overrides_parse_values_and_address_list_items(tmp_path: Path):
    base = write(tmp_path, "base.yaml", BASE_TEXT)
    spec = load_spec(
        base,
        [
            "trainer.epochs=3",
            "rollout.temperature=0.7",
            "data.train.1.max_tasks=5",
            "experiment.tags=[x,y]",
            "rollout.parser={type: hermes}",
            "trainer.max_steps=null",
            "tracking.trackers=[console,jsonl]",
        ],
    ).spec
    assert spec.trainer.epochs == 3
    assert spec.rollout.temperature == 0.7
    assert spec.data.train[1].max_tasks == 5
    assert spec.experiment.tags == ["x", "y"]
    assert spec.trainer.max_steps is None
    assert [t.type for t in spec.tracking.trackers] == ["console", "jsonl"]


def test_env_interpolation_with_default_and_cross_references(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("CTU_TEST_MODEL", "Qwen/Qwen3-4B")
    monkeypatch.delenv("CTU_TEST_UNSET", raising=False)
    text = BASE_TEXT.replace("Qwen/Qwen2.5-3B-Instruct", "'${oc.env:CTU_TEST_MODEL}'")
    text += "tracking: {project: '${oc.env:CTU_TEST_UNSET,fallback}-${experiment.name}'}\n"
    text = text.replace("model: {path:", "model: {chat_template: qwen3_no_thinking, path:")
    spec = load_spec(write(tmp_path, "s.yaml", text)).spec
    assert spec.model.path == "Qwen/Qwen3-4B"
    assert spec.tracking.project == "fallback-base"


def test_a_child_that_changes_a_components_type_does_not_inherit_its_params(tmp_path: Path):
    write(tmp_path, "base.yaml", BASE_TEXT + "judge: {type: llm_taxonomy, model: gpt-4o, base_url: 'http://127.0.0.1:8002/v1'}\n")
    child = write(tmp_path, "child.yaml", "extends: base.yaml\njudge: {type: rule_taxonomy}\n")
    judge = load_spec(child).spec.judge
    assert judge.type == "rule_taxonomy"
    same_type = write(tmp_path, "same.yaml", "extends: base.yaml\njudge: {type: llm_taxonomy, model: other}\n")
    kept = load_spec(same_type).spec.judge
    assert kept.params.model == "other" and str(kept.params.base_url).startswith("http://127.0.0.1:8002")


def test_interpolation_under_a_key_with_dots(tmp_path: Path, monkeypatch):
    """`backend.skyrl_overrides` keys are dotted SkyRL paths; their values were once resolved to null."""
    monkeypatch.setenv("CTU_TEST_URL", "http://127.0.0.1:9")
    monkeypatch.delenv("CTU_TEST_UNSET", raising=False)
    text = BASE_TEXT.replace("backend: {type: tinker}", "backend: {type: skyrl, skyrl_overrides: {"
                             "generator.inference_engine.external_proxy_url: '${oc.env:CTU_TEST_URL}',"
                             " generator.inference_engine.external_server_urls: ['${oc.env:CTU_TEST_URL}']}}")
    spec = load_spec(write(tmp_path, "s.yaml", text)).spec
    assert spec.backend.params.skyrl_overrides["generator.inference_engine.external_proxy_url"] == "http://127.0.0.1:9"
    assert spec.backend.params.skyrl_overrides["generator.inference_engine.external_server_urls"] == ["http://127.0.0.1:9"]
    with pytest.raises(SpecError, match="CTU_TEST_UNSET"):
        load_spec(write(tmp_path, "u.yaml", text.replace("CTU_TEST_URL", "CTU_TEST_UNSET")))


def test_secrets_are_never_interpolated_into_a_spec(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("MY_API_TOKEN", "sekrit")
    text = BASE_TEXT + "tracking: {project: '${oc.env:MY_API_TOKEN}'}\n"
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, "s.yaml", text))
    assert info.value.issues[0].path == "tracking.project"
    assert "sekrit" not in str(info.value)


def test_dates_and_odd_scalars_stay_strings_or_are_reported(tmp_path: Path):
    spec = load_spec(write(tmp_path, "s.yaml", BASE_TEXT), ["experiment.tags=[2024-01-01]"]).spec
    assert spec.experiment.tags == ["2024-01-01"]
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, "b.yaml", BASE_TEXT + "judge: !!binary aGVsbG8=\n"))
    assert info.value.issues[0].path == "judge"
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, "k.yaml", BASE_TEXT + "rollout: {1: 2}\n"))
    assert "keys must be strings" in info.value.issues[0].message


def test_backend_is_chosen_by_type(minimal):
    assert isinstance(spec_from_dict(minimal).spec.backend.params, TinkerParams)
    minimal["backend"] = {"type": "skyrl"}
    minimal["algorithm"] = minimal["trainer"] = {}
    assert isinstance(spec_from_dict(minimal).spec.backend.params, SkyRLParams)


def test_qwen3_without_thinking_policy_is_a_warning(minimal):
    minimal["model"] = {"path": "Qwen/Qwen3-8B"}
    loaded = spec_from_dict(minimal)
    (warning,) = loaded.warnings
    assert warning.path == "model.chat_template" and "qwen3_no_thinking" in warning.message
    minimal["model"]["chat_template"] = "qwen3_no_thinking"
    assert spec_from_dict(minimal).warnings == []


def test_several_greedy_eval_samples_per_task_are_a_warning(minimal):
    minimal["rollout"] = {"eval_n_samples_per_prompt": 4}
    (warning,) = spec_from_dict(minimal).warnings
    assert warning.path == "rollout.eval_n_samples_per_prompt" and "eval_temperature" in warning.message
    minimal["rollout"]["eval_temperature"] = 0.7
    assert spec_from_dict(minimal).warnings == []


def test_native_tool_calling_accepts_known_families_and_explicit_family(minimal):
    minimal["rollout"] = {"native_tool_calling": True}
    for path in ("Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"):
        minimal["model"] = {"path": path}
        spec_from_dict(minimal)
    minimal["model"] = {"path": "/models/my-finetune", "family": "qwen2.5"}
    spec_from_dict(minimal)
    minimal["model"] = {"path": "/models/my-finetune"}
    with pytest.raises(SpecError):
        spec_from_dict(minimal)


def test_hash_ignores_yaml_form_but_not_values(minimal):
    first = spec_from_dict(minimal).spec
    minimal["rollout"] = {"parser": {"type": "hermes"}}  # the default, written out
    assert spec_hash(spec_from_dict(minimal).spec) == spec_hash(first)
    minimal["rollout"] = {"temperature": 0.5}
    assert spec_hash(spec_from_dict(minimal).spec) != spec_hash(first)


def test_spec_from_dict_does_not_mutate_its_input(minimal):
    snapshot = yaml.safe_dump(minimal)
    spec_from_dict(minimal, ["trainer.epochs=4", "data.train.0.max_tasks=3"])
    assert yaml.safe_dump(minimal) == snapshot


def test_tasks_whose_gold_solution_exceeds_the_limits_are_a_warning_at_their_source(minimal):
    minimal["data"]["test_sets"] = {"airline": {"domain": "airline", "split": "test"}}
    (warning,) = spec_from_dict(minimal).warnings
    assert warning.path == "data.test_sets.airline" and "44 (21 turns)" in warning.message and "1 of 20 tasks" in warning.message
    minimal["environment"]["max_turns"] = 21
    assert spec_from_dict(minimal).warnings == []
    minimal["environment"].update(max_turns=3, warn_unsolvable_tasks=False)
    assert spec_from_dict(minimal).warnings == []
    minimal["environment"].update(max_turns=30, max_errors=2, warn_unsolvable_tasks=True)
    minimal["data"]["train"] = [{"domain": "retail", "split": "train", "max_tasks": 20}]  # task 21: 3 gold tool errors
    warnings = {w.path: w.message for w in spec_from_dict(minimal).warnings}
    assert set(warnings) == {"data.train.0"} and "21 (13 turns, 3 errors)" in warnings["data.train.0"]


def test_a_spec_that_is_not_utf8_is_a_spec_error_at_its_line(tmp_path: Path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("# Qwen2.5, d\u00e9j\u00e0 vu\nexperiment: {name: x}\n".encode("latin-1"))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    [issue] = info.value.issues
    assert "not UTF-8 text: byte 0xe9" in issue.message and str(issue.location) == f"{path}:1"


def test_a_spec_removes_an_inherited_key_with_delete(tmp_path: Path):
    """`key: !delete` removes what a base spec set (a test set, a tracker list's owner key...); on a key no base
    sets, or with a value, it is an error at its file and line."""
    child = tmp_path / "child.yaml"
    child.write_text(f"extends: {REPO / 'specs' / 'smoke.yaml'}\ndata:\n  test_sets:\n    retail: !delete\n")
    spec = load_spec(child).spec
    assert "retail" not in spec.data.test_sets and load_spec(REPO / "specs" / "smoke.yaml").spec.data.test_sets
    nowhere = tmp_path / "nowhere.yaml"
    nowhere.write_text(f"extends: {REPO / 'specs' / 'smoke.yaml'}\ndata:\n  test_sets:\n    airline: !delete\n")
    with pytest.raises(SpecError) as error:
        load_spec(nowhere)
    [issue] = error.value.issues
    assert issue.path == "data.test_sets.airline" and "no base spec sets this one" in issue.message
    assert issue.location is not None and issue.location.line == 4
    valued = tmp_path / "valued.yaml"
    valued.write_text(f"extends: {REPO / 'specs' / 'smoke.yaml'}\ndata:\n  test_sets: !delete 3\n")
    with pytest.raises(SpecError, match="!delete takes no value"):
        load_spec(valued)


def test_a_kl_penalty_on_the_tinker_backend_is_to_the_loras_base_model(minimal):
    """The tinker backend's KL reference is the model its LoRA trains on (`ctu.backends.tinker.kl`): named or left
    out, never another; every estimator is applied (no warning)."""
    minimal["algorithm"] = {"use_kl_loss": True, "kl_loss_coef": 0.1}
    assert spec_from_dict(minimal).warnings == []
    minimal["model"]["reference_path"] = "${model.path}"
    loaded = spec_from_dict(minimal)
    assert loaded.warnings == [] and loaded.spec.model.reference_path == loaded.spec.model.path
    minimal["model"]["reference_path"] = "Qwen/Qwen2.5-7B-Instruct"
    with pytest.raises(SpecError) as info:
        spec_from_dict(minimal)
    assert [issue.path for issue in info.value.issues] == ["model.reference_path"]
