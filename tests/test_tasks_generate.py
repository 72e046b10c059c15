"""`ctu tasks generate`: training tasks proposed by a task generator, each verified before it is kept.

The `template` generator writes hundreds of verified tasks of tau2's `mock` domain offline (byte-identical on a
rerun, none overlapping mock's own tasks, a killed generation continued without a task lost or doubled); the
`llm` generator, against a real OpenAI-compatible HTTP server on 127.0.0.1 that proposes valid retail tasks
among broken ones, keeps exactly the valid ones and names each rejection's reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ctu.cli import app
from ctu.tasks.check import check_task_file
from ctu.tasks.verify import write_signature

from .conftest import REPO
from .support.openai_server import Answer, ScriptedOpenAIServer

SMOKE = str(REPO / "specs" / "smoke.yaml")


def generation_spec(tmp_path: Path, section: dict, name: str = "gen.yaml") -> Path:
    spec = tmp_path / name
    spec.write_text(yaml.safe_dump({"extends": SMOKE, "experiment": {"name": "gen"}, "environment": {"max_turns": 10},
                                    "task_generation": section}))
    return spec


def generate(*args: str):
    return CliRunner().invoke(app, ["tasks", "generate", *args, "--no-progress"])


MOCK_SECTION = {"domain": "mock", "generator": {"type": "template", "templates": "mock"}, "count": 200, "seed": 5}


@pytest.fixture(scope="module")
def mock_tasks(tmp_path_factory) -> Path:
    tmp_path = tmp_path_factory.mktemp("mock")
    result = generate(str(generation_spec(tmp_path, MOCK_SECTION)), "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    return tmp_path / "out"


def test_the_template_generator_writes_200_verified_mock_tasks_in_tau2s_format(mock_tasks: Path):
    from ctu.components.domains import build_domain

    tasks = json.loads((mock_tasks / "tasks.json").read_text())
    splits = json.loads((mock_tasks / "split_tasks.json").read_text())
    assert len(tasks) == 200 and len({task["id"] for task in tasks}) == 200
    assert sorted(splits["train"] + splits["validation"]) == sorted(task["id"] for task in tasks)
    assert len(splits["validation"]) == 20  # validation_ratio 0.1, seeded
    report = check_task_file("mock", mock_tasks / "tasks.json", mock_tasks / "split_tasks.json", "train", 10, 10)
    assert report.checked == 180 and report.faults == []  # `ctu tasks check`'s verdict, independently of the generation
    mock = build_domain("mock", {})
    held_out = {write_signature(task, mock.write_tools) for task in mock.tasks("base")}
    from tau2.data_model.tasks import Task

    generated = [write_signature(Task.model_validate(task), mock.write_tools) for task in tasks]
    assert not held_out & set(generated) and len(set(generated)) == 200  # no test task, no duplicate
    provenance = json.loads((mock_tasks / "provenance.json").read_text())
    assert provenance["generator"] == "template" and provenance["seed"] == 5 and provenance["kept"] == 200
    assert provenance["proposed"] == 200 + sum(provenance["rejected"].values())
    intents = {task["description"]["purpose"] for task in tasks}
    assert len(intents) == 4  # every template of the set


def test_a_rerun_with_the_same_seed_writes_the_same_bytes_and_a_killed_one_continues(mock_tasks: Path, tmp_path: Path):
    spec = generation_spec(tmp_path, MOCK_SECTION)
    out = tmp_path / "out"
    first = generate(str(spec), "--out", str(out), "task_generation.count=120")
    assert first.exit_code == 0, first.output
    lines = (out / "proposals.jsonl").read_text().splitlines(keepends=True)
    (out / "proposals.jsonl").write_text("".join(lines[:70]) + lines[70][:25])  # killed while writing line 71
    for name in ("tasks.json", "split_tasks.json"):
        (out / name).unlink()
    continued = generate(str(spec), "--out", str(out), "task_generation.count=120")
    assert continued.exit_code == 0, continued.output
    assert "120 task(s) kept" in continued.output and "proposal(s) decided" in continued.output
    now = (out / "proposals.jsonl").read_text().split("\n")[:-1]
    assert now[70] == lines[70][:25]  # the cut line stays a line of its own (readers skip it), swallowing none after it
    assert [json.loads(text) for text in now[:70] + now[71:]] == [json.loads(text) for text in lines]
    whole = json.loads((mock_tasks / "tasks.json").read_text())
    assert json.loads((out / "tasks.json").read_text()) == whole[:120]  # the same proposals, the same ids
    again = tmp_path / "again"
    assert generate(str(spec), "--out", str(again)).exit_code == 0
    for name in ("tasks.json", "split_tasks.json"):
        assert (again / name).read_bytes() == (mock_tasks / name).read_bytes()
    other = generate(str(spec), "--out", str(out), "task_generation.seed=6")  # another generation, same folder
    assert other.exit_code == 2 and "holds another generation (its generation.json has another seed)" in other.output
    more = generate(str(spec), "--out", str(out), "task_generation.count=150", "task_generation.concurrency=4")
    assert more.exit_code == 0 and "150 task(s) kept" in more.output  # a larger count continues it
    assert json.loads((out / "tasks.json").read_text()) == whole[:150]


def test_bad_generation_input_is_refused_in_a_line(tmp_path: Path):
    no_section = tmp_path / "plain.yaml"
    no_section.write_text(yaml.safe_dump({"extends": SMOKE}))
    result = generate(str(no_section), "--out", str(tmp_path / "a"))
    assert result.exit_code == 2 and "no task_generation section" in result.output
    wrong_domain = generation_spec(tmp_path, {**MOCK_SECTION, "domain": "retail"}, "wrong.yaml")
    result = generate(str(wrong_domain), "--out", str(tmp_path / "b"))
    assert result.exit_code == 2 and "is for domain 'mock', not 'retail'" in result.output
    missing = generation_spec(tmp_path, {**MOCK_SECTION, "generator": {"type": "template", "templates": "nope.yaml"}}, "m.yaml")
    result = generate(str(missing), "--out", str(tmp_path / "c"))
    assert result.exit_code == 2 and "no template set 'nope.yaml'" in result.output and "mock, retail" in result.output
    typo = generation_spec(tmp_path, {**MOCK_SECTION, "generator": {"type": "templat"}}, "t.yaml")
    result = generate(str(typo), "--out", str(tmp_path / "d"))
    assert result.exit_code == 2 and "task_generation.generator" in result.output and "template" in result.output


def retail_proposals(tmp_path: Path) -> tuple[list[dict], list[tuple[str, dict]]]:
    """Three valid retail tasks (from the retail template set) and broken proposals, each with the reason it must
    be rejected for."""
    from ctu.components.domains import build_domain

    section = {"domain": "retail", "generator": {"type": "template", "templates": "retail"}, "count": 3, "seed": 11}
    assert generate(str(generation_spec(tmp_path, section, "r.yaml")), "--out", str(tmp_path / "valid")).exit_code == 0
    valid = [{k: v for k, v in task.items() if k != "id"} for task in json.loads((tmp_path / "valid" / "tasks.json").read_text())]

    def variant(task: dict, action: int, **changes) -> dict:
        copy = json.loads(json.dumps(task))
        copy["evaluation_criteria"]["actions"][action].update(changes)
        return copy

    cancel = next(task for task in valid if "cancel_pending_order" in json.dumps(task))
    retail = build_domain("retail", {})
    orders = retail.base_database.tables["orders"]
    delivered = next(order for order in orders.values() if order.status == "delivered")
    user = retail.base_database.tables["users"][delivered.user_id]
    failing_write = json.loads(json.dumps(cancel))
    failing_write["user_scenario"]["instructions"]["known_info"] = f"You are {user.name.first_name} {user.name.last_name}."
    failing_write["evaluation_criteria"]["actions"] = [
        {"action_id": "a", "name": "find_user_id_by_name_zip", "arguments": {
            "first_name": user.name.first_name, "last_name": user.name.last_name, "zip": user.address.zip}},
        {"action_id": "b", "name": "cancel_pending_order", "arguments": {"order_id": delivered.order_id, "reason": "no longer needed"}}]
    test_task = retail.tasks("test")[0].model_dump(mode="json", exclude_none=True, include={"user_scenario", "evaluation_criteria"})
    stranger = json.loads(json.dumps(cancel))
    stranger["user_scenario"]["instructions"]["known_info"] = "You are Jane Placeholder-Doe."
    write = stranger["evaluation_criteria"]["actions"][2]["arguments"]
    write["reason"] = {"no longer needed": "ordered by mistake"}.get(write["reason"], "no longer needed")
    broken = [
        ("unknown_tool", variant(cancel, 2, name="refund_everything")),
        ("tool_error", variant(cancel, 2, arguments={"order_id": "#W0000000", "reason": "no longer needed"})),
        ("tool_error", failing_write),
        ("placeholder", variant(cancel, 1, arguments={"order_id": "<order id>"})),
        ("duplicate", valid[0]),
        ("test_overlap", test_task),
        ("malformed", "Sure! Here is a task: {\"user_scenario\": "),
        ("bad_arguments", variant(cancel, 2, arguments={"order_id": 42})),
        ("identity_mismatch", stranger),
    ]
    return valid, broken


def test_the_llm_generator_keeps_exactly_the_valid_proposals_and_names_each_rejection(tmp_path: Path):
    valid, broken = retail_proposals(tmp_path)
    answers = [valid[0], *(task for _, task in broken[:5]), valid[1], *(task for _, task in broken[5:]), valid[2]]
    script = [Answer.text(task if isinstance(task, str) else json.dumps({"tasks": [task]})) for task in answers]
    with ScriptedOpenAIServer([Answer.error(503), *script]) as server:  # the first request fails and is retried
        section = {"domain": "retail", "count": 3, "seed": 2, "max_proposals": 12,
                   "generator": {"type": "llm", "model": "teacher", "base_url": server.base_url, "api_key_env": None,
                                 "backoff_s": 0.01}}
        result = generate(str(generation_spec(tmp_path, section)), "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    kept = json.loads((tmp_path / "out" / "tasks.json").read_text())
    assert [{k: v for k, v in task.items() if k != "id"} for task in kept] == [
        json.loads(json.dumps(task)) for task in valid]
    lines = [json.loads(line) for line in (tmp_path / "out" / "proposals.jsonl").read_text().splitlines()]
    assert [line.get("reason") for line in lines if not line["kept"]] == [reason for reason, _ in broken]
    details = " | ".join(line.get("detail", "") for line in lines)
    assert "'refund_everything' is not one of the agent's tools" in details and "Order not found" in details
    assert "Non-pending order cannot be cancelled" in details and "'<order id>' is a placeholder" in details
    assert "whom the scenario never names" in details and "as test task" in details
    provenance = json.loads((tmp_path / "out" / "provenance.json").read_text())
    assert provenance["rejected"] == {"bad_arguments": 1, "duplicate": 1, "identity_mismatch": 1, "malformed": 1,
                                      "placeholder": 1, "test_overlap": 1, "tool_error": 2, "unknown_tool": 1}
    request = server.requests[1]
    prompt = request["messages"][0]["content"]
    assert request["model"] == "teacher" and request["response_format"]["type"] == "json_schema"
    assert "# Retail agent policy" in prompt and '"name":"cancel_pending_order"' in prompt and '"orders":{"#W' in prompt


def test_pass_rates_fall_into_buckets_and_a_list_of_splits_is_their_union(tmp_path: Path):
    from ctu.spec.models import DatasetSource
    from ctu.tasks.calibrate import bucket
    from tau_bench_env.domains import split_task_ids

    assert [bucket(rate) for rate in (0.0, 0.25, 0.5, 0.75, 1.0)] == ["unsolved", "hard", "medium", "medium", "easy"]
    splits = {"medium": ["c", "a"], "hard": ["b"], "easy": []}
    assert split_task_ids(["a", "b", "c", "d"], splits, "medium+hard", "f") == ["a", "b", "c"]  # the file's order
    with pytest.raises(ValueError, match="no split 'hardd'"):
        split_task_ids(["a"], splits, "medium+hardd", "f")
    assert DatasetSource.model_validate({"domain": "mock", "split": ["medium", "hard", "medium"]}).split == "medium+hard"
    with pytest.raises(ValueError, match="a list of split names"):
        DatasetSource.model_validate({"domain": "mock", "split": []})
    from ctu.components.domains import build_domain

    retail = build_domain("retail", {})
    union = retail.tasks("train+test")
    assert [task.id for task in union] == [task.id for task in retail.tasks("train")] + [task.id for task in retail.tasks("test")]


def test_more_splits_are_carved_out_of_the_training_tasks_and_the_rest_stays_put(mock_tasks: Path, tmp_path: Path):
    """`splits: {rl: 0.4}` (tasks RL trains on that the SFT data never holds): a share of its own, after
    `validation`, which stays the same tasks; the rerun of a finished generation only writes its splits again."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(mock_tasks, out)
    result = generate(str(generation_spec(tmp_path, {**MOCK_SECTION, "splits": {"rl": 0.4}})), "--out", str(out))
    assert result.exit_code == 0, result.output
    before = json.loads((mock_tasks / "split_tasks.json").read_text())
    after = json.loads((out / "split_tasks.json").read_text())
    assert after["validation"] == before["validation"] and after["base"] == before["base"]
    assert len(after["rl"]) == 80 and len(after["train"]) == 100
    assert sorted(after["train"] + after["rl"]) == sorted(before["train"])
    assert (out / "tasks.json").read_bytes() == (mock_tasks / "tasks.json").read_bytes()
    refused = generate(str(generation_spec(tmp_path, {**MOCK_SECTION, "validation_ratio": 0.5, "splits": {"rl": 0.5}})),
                       "--out", str(tmp_path / "none"))
    assert refused.exit_code == 2 and "leave no task for split `train`" in refused.output


def test_a_generation_folder_is_continued_only_by_the_generation_it_holds(tmp_path: Path):
    """An edited template file is another generation: the same command with a larger count is refused (not
    continued into one tasks.json holding tasks of both versions); a folder holding a task set of one's own, or
    other files, is refused and left as it was, `--overwrite` or not."""
    templates = tmp_path / "templates.yaml"
    templates.write_text((REPO / "specs" / "learning_chain" / "templates.yaml").read_text())
    section = {"domain": "mock", "generator": {"type": "template", "templates": str(templates)}, "count": 4, "seed": 1}
    out = tmp_path / "out"
    assert generate(str(generation_spec(tmp_path, section)), "--out", str(out)).exit_code == 0
    templates.write_text(templates.read_text().replace("want your task marked as completed", "need the task done"))
    larger = generation_spec(tmp_path, {**section, "count": 8}, "larger.yaml")
    result = generate(str(larger), "--out", str(out))
    assert result.exit_code == 2 and "holds another generation" in result.output
    assert "generator_inputs_sha256" in result.output and len(json.loads((out / "tasks.json").read_text())) == 4
    assert generate(str(larger), "--out", str(out), "--overwrite").exit_code == 0  # afresh, on the new templates
    assert "need the task done" in (out / "tasks.json").read_text() and "want your task marked as completed" not in (out / "tasks.json").read_text()
    for name, content in (("tasks.json", "[]"), ("notes.txt", "mine")):
        mine = tmp_path / f"mine_{name}"
        mine.mkdir()
        (mine / name).write_text(content)
        for extra in ((), ("--overwrite",)):
            refused = generate(str(larger), "--out", str(mine), *extra)
            assert refused.exit_code == 2 and "holds files `ctu tasks generate` does not write" in " ".join(refused.output.split())
        assert [(p.name, p.read_text()) for p in mine.iterdir()] == [(name, content)]


def test_a_generation_that_keeps_nothing_exits_3_and_writes_no_task_set(tmp_path: Path):
    spec = tmp_path / "none.yaml"
    spec.write_text(yaml.safe_dump({"extends": SMOKE, "experiment": {"name": "gen"}, "environment": {"max_turns": 1},
                                    "task_generation": {**MOCK_SECTION, "count": 2, "max_proposals": 4}}))
    result = generate(str(spec), "--out", str(tmp_path / "out"))
    assert result.exit_code == 3 and "no task kept of 4 proposed (rejected: " in " ".join(result.output.split())
    assert not (tmp_path / "out" / "tasks.json").exists() and (tmp_path / "out" / "proposals.jsonl").exists()


def test_a_generation_whose_every_proposal_names_an_unknown_tool_names_it_and_the_nearest_real_one(tmp_path: Path):
    valid, _ = retail_proposals(tmp_path)
    typo = json.loads(json.dumps(next(task for task in valid if "cancel_pending_order" in json.dumps(task))))
    for action in typo["evaluation_criteria"]["actions"]:
        action["name"] = action["name"].replace("cancel_pending_order", "cancel_pending_ordr")
    with ScriptedOpenAIServer(default=Answer.text(json.dumps({"tasks": [typo]}))) as server:
        section = {"domain": "retail", "count": 1, "seed": 2, "max_proposals": 2,
                   "generator": {"type": "llm", "model": "teacher", "base_url": server.base_url, "api_key_env": None}}
        result = generate(str(generation_spec(tmp_path, section)), "--out", str(tmp_path / "out"))
    said = " ".join(result.output.split())
    assert result.exit_code == 3 and "rejected: unknown_tool 2 (most often: 'cancel_pending_ordr' is not one of the agent's tools (nearest 'cancel_pending_order';" in said


def test_a_templates_train_share_keeps_its_tasks_out_of_train_and_train_only_keeps_them_in_train_alone(tmp_path: Path):
    """`train_share` (the `template` generator's, per template): its tasks are drawn into `validation` and the other
    splits as any task is; of those left for `train`, that share stays (seeded by the task: a rerun writes the same
    splits); the rest are in `base` alone. `train_only`: its tasks are all in `train` and in no other split, whose
    shares are of the other templates' tasks; with a `train_share` below 1 it is refused."""
    templates = yaml.safe_load((REPO / "specs" / "learning_chain" / "templates.yaml").read_text())
    templates["templates"] = [t for t in templates["templates"] if t["name"] in ("complete_task", "reopen_task")]
    [reopen] = [t for t in templates["templates"] if t["name"] == "reopen_task"]
    section = {"domain": "mock", "count": 200, "seed": 3, "validation_ratio": 0.1, "splits": {"rl": 0.2}}
    outs = {}
    for name, setting in (("quarter", {"train_share": 0.25}), ("none", {"train_share": 0.0}), ("only", {"train_only": True})):
        reopen.pop("train_share", None)
        reopen.update(setting)
        path = tmp_path / f"templates_{name}.yaml"
        path.write_text(yaml.safe_dump(templates))
        spec = generation_spec(tmp_path, {**section, "generator": {"type": "template", "templates": str(path)}}, f"gen_{name}.yaml")
        out = outs[name] = tmp_path / f"out_{name}"
        result = generate(str(spec), "--out", str(out))
        assert result.exit_code == 0, result.output
    tasks = json.loads((outs["quarter"] / "tasks.json").read_text())
    reopening = {t["id"] for t in tasks if t["description"]["purpose"].endswith(":reopen_task")}
    assert 60 < len(reopening) < 140
    splits = json.loads((outs["quarter"] / "split_tasks.json").read_text())
    assert len(splits["validation"]) == 20 and len(splits["rl"]) == 40 and len(splits["base"]) == 200
    assert reopening & set(splits["validation"]) and reopening & set(splits["rl"])  # held out and set apart as any task
    left = [i for i in splits["base"] if i not in splits["validation"] + splits["rl"]]
    assert [i for i in left if i not in reopening] == [i for i in splits["train"] if i not in reopening]  # the others all stay
    kept = [i for i in splits["train"] if i in reopening]
    assert 0.05 < len(kept) / len([i for i in left if i in reopening]) < 0.5
    none = json.loads((outs["none"] / "split_tasks.json").read_text())
    assert not reopening & set(none["train"]) and none["validation"] == splits["validation"] and none["rl"] == splits["rl"]
    same = [(t["id"], t["user_scenario"]) for t in json.loads((outs["only"] / "tasks.json").read_text())]
    assert same == [(t["id"], t["user_scenario"]) for t in tasks]  # the same tasks, split otherwise
    only = json.loads((outs["only"] / "split_tasks.json").read_text())
    others = len(tasks) - len(reopening)
    assert reopening <= set(only["train"]) and not reopening & set(only["validation"] + only["rl"])
    assert len(only["validation"]) == round(others * 0.1) and len(only["rl"]) == round(others * 0.2)
    assert sorted(only["train"] + only["validation"] + only["rl"]) == sorted(only["base"])
    reopen["train_share"] = 0.5
    path.write_text(yaml.safe_dump(templates))
    result = generate(str(generation_spec(tmp_path, {**section, "generator": {"type": "template", "templates": str(path)}}, "gen_both.yaml")),
                      "--out", str(tmp_path / "out_both"))
    assert result.exit_code == 2 and "train_only puts every task in `train`" in " ".join(result.output.split())
