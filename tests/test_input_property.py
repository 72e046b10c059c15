"""Properties of the files commands read back, generated rather than listed: whatever an edit, a truncation or a
foreign file makes of them, a command gets either what it can use or the error it turns into exit 2 (bad input),
never another exception (a traceback for the user), and the file is left as it was.

Generated (hypothesis, seeded: `derandomize`, a bounded number of examples each, see tests/README.md):
- ``state.json`` of a run (`ctu run --resume`): any JSON value, a valid state with fields dropped, retyped or
  moved, or bytes that are no JSON -> `RunDir.read_state` gives a state or raises `RunError`.
- ``eval.json`` (`ctu compare`, `ctu view`): a valid result with any of its values replaced, removed or set to
  another JSON type -> `read_report` raises `ValueError`, or the comparison table and its task pairing are made.
- a folder given to `ctu view`: an evaluation's trajectory lines replaced by any JSON or text, beside a valid
  result -> the page's data is made (lines it cannot read are skipped) or `ViewError` is raised.
- the episodes `ctu data sft --from-eval` reads: a valid line with values replaced or removed, any JSON, text ->
  each is kept as an SFT row that writes to parquet, or rejected by reason.
- a domain's task files (`tasks_file`, `split_file`): tau2's mock tasks and a split mapping with values replaced or
  removed, any JSON, bytes that are no JSON -> `ctu validate` refuses the spec (`SpecError`) or the domain loads
  every task of the split it accepted.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ctu.evaluation.report import comparison_table, figures, read_report
from ctu.runners.rundir import RunDir, RunError

from .test_spec_property import get, paths

BOUNDED = settings(max_examples=60, derandomize=True, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
"""Seeded and bounded: the same examples on every run, in a few seconds."""

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=False), st.text(max_size=12)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6,
)


def mutated(valid: dict[str, Any]) -> st.SearchStrategy[object]:
    """`valid` with one to three of its values replaced by any JSON value or removed."""

    @st.composite
    def build(draw: st.DrawFn) -> object:
        data: Any = copy.deepcopy(valid)
        for _ in range(draw(st.integers(1, 3))):
            candidates = paths(data)
            path = draw(st.sampled_from(candidates))
            if not path:
                return draw(json_values)
            parent = get(data, path[:-1])
            if draw(st.booleans()) and isinstance(parent, dict):
                del parent[path[-1]]
            else:
                parent[path[-1]] = draw(json_values)
        return data

    return build()


VALID_STATE = {"backend": "tinker", "step": 4, "checkpoint": "tinker://run/step_000004", "total_steps": 10}


@BOUNDED
@given(st.one_of(mutated(VALID_STATE), json_values, st.binary(max_size=40)))
def test_a_state_file_is_a_state_or_a_named_refusal(tmp_path_factory, state: object):
    run = RunDir(tmp_path_factory.mktemp("run"))
    run.path.mkdir(parents=True, exist_ok=True)
    raw = state if isinstance(state, bytes) else json.dumps(state).encode()
    run.state_file.write_bytes(raw)
    try:
        read = run.read_state()
    except RunError as error:
        assert str(run.state_file) in str(error)
    else:
        assert isinstance(read.get("step"), int) and read["step"] >= 0
    assert run.state_file.read_bytes() == raw  # reading changed nothing


def valid_report(policy: str) -> dict[str, Any]:
    lines = [{"domain": "retail", "task_id": str(task), "raw_reward": float(task % 2), "reward": 0.0, "policy_turns": 2,
              "termination": "user_stop"} for task in range(3) for _ in range(2)]
    group = figures(lines)
    return {"spec": "s", "policy": policy, "samples_per_task": 2, "by_test_set": {"retail": group}, "overall": group,
            "test_set_sources": {"retail": {"domain": "retail", "split": "test", "task_ids": ["retail/0", "retail/1", "retail/2"],
                                            "task_scenarios": {"0": "a", "1": "b", "2": "c"}}}}


@BOUNDED
@given(mutated(valid_report("other")))
def test_an_evaluation_result_is_compared_or_refused_as_not_one(tmp_path_factory, report: object):
    folder = tmp_path_factory.mktemp("eval")
    (folder / "eval.json").write_text(json.dumps(report))
    try:
        read = read_report(folder / "eval.json")
    except ValueError as error:
        assert "eval.json" in str(error)
        return
    import io

    from rich.console import Console

    Console(file=io.StringIO(), width=80).print(comparison_table([valid_report("base"), read]))


@BOUNDED
@given(st.lists(st.one_of(json_values.map(json.dumps), st.text(max_size=30)), max_size=6))
def test_a_folder_for_ctu_view_is_shown_or_refused(tmp_path_factory, lines: list[str]):
    from ctu.view.data import ViewError, page_data

    base, other = tmp_path_factory.mktemp("base"), tmp_path_factory.mktemp("other")
    for folder, policy in ((base, "base"), (other, "other")):
        (folder / "eval.json").write_text(json.dumps(valid_report(policy)))
    (other / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
    try:
        data = page_data([Path(base), Path(other)])
    except ViewError:
        return
    json.dumps(data)  # the page embeds it


MOCK_TASKS = json.loads((Path(__import__("tau2").__file__).parent / "data/tau2/domains/mock/tasks.json").read_text())[:3]
"""Three of tau2's mock tasks, as its tasks file holds them."""


def same_type(value: object) -> st.SearchStrategy[object]:
    """Another value of `value`'s JSON type (a list or mapping shortened)."""
    if isinstance(value, bool) or value is None:
        return st.sampled_from([value, not value if isinstance(value, bool) else None])
    if isinstance(value, int | float):
        return st.integers(-3, 3)
    if isinstance(value, str):
        return st.sampled_from(["", value, value + "x", "create_task_1", "0"])
    if isinstance(value, list):
        return st.lists(st.sampled_from(value), max_size=len(value)) if value else st.just([])
    return st.just({key: item for index, (key, item) in enumerate(value.items()) if index % 2})  # type: ignore[union-attr]


def kept_types(valid: object) -> st.SearchStrategy[object]:
    """`valid` with one or two of its values replaced by another of the same JSON type: files tau2's shape may accept."""

    @st.composite
    def build(draw: st.DrawFn) -> object:
        data: Any = copy.deepcopy(valid)
        for _ in range(draw(st.integers(1, 2))):
            path = draw(st.sampled_from([path for path in paths(data) if path]))
            parent = get(data, path[:-1])
            parent[path[-1]] = draw(same_type(parent[path[-1]]))
        return data

    return build()


def task_file(valid: object) -> st.SearchStrategy[object]:
    return st.one_of(kept_types(valid), mutated(valid), json_values, st.binary(max_size=40))  # type: ignore[arg-type]


@BOUNDED
@given(task_file(MOCK_TASKS), st.one_of(st.none(), task_file({"train": [MOCK_TASKS[0]["id"]], "test": [MOCK_TASKS[1]["id"]]})))
@example(MOCK_TASKS, {"train": [], "test": [MOCK_TASKS[1]["id"]]})  # found: an empty split was accepted, and trained nothing
@example(b"", b"0")  # found: a split file holding a number crashed `ctu validate` (the held-out check)
def test_task_files_validate_accepts_are_task_files_the_domain_loads(tmp_path_factory, tasks: object, splits: object):
    from ctu.components.domains import build_domain
    from ctu.spec import spec_from_dict
    from ctu.spec.errors import SpecError

    from .conftest import MINIMAL_SPEC

    folder = tmp_path_factory.mktemp("tasks")
    domain: dict[str, object] = {"type": "mock"}
    for name, content in (("tasks_file", tasks), ("split_file", splits)):
        if content is not None:
            (folder / f"{name}.json").write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
            domain[name] = str(folder / f"{name}.json")
    data = copy.deepcopy(MINIMAL_SPEC)
    split = "train" if splits is not None else "base"
    data["data"] = {"train": [{"domain": domain, "split": split}], "test_sets": {}}
    data["trainer"] = {"train_batch_size": 1, "policy_mini_batch_size": 1}
    try:
        spec = spec_from_dict(data).spec
    except SpecError as error:
        assert "data.train.0" in str(error)
        return
    source = spec.data.train[0]
    loaded = build_domain(source.domain.type, source.domain.params.model_dump(mode="json")).tasks(source.split)
    assert loaded, "validate accepted a split without tasks"


EPISODE = {"domain": "mock", "task_id": "create_task_1", "raw_reward": 1.0, "infra_error": None, "messages": [
    {"role": "system", "content": "policy"}, {"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "hello"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                           "function": {"name": "create_task", "arguments": '{"title": "x"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{}"}, {"role": "assistant", "content": "Done."}]}


@BOUNDED
@given(st.lists(st.one_of(mutated(EPISODE), json_values, st.text(max_size=20)), min_size=1, max_size=4))
@example([{**EPISODE, "messages": [*EPISODE["messages"][:-1], {"role": "assistant", "content": "Done.\u2028Bye\x85"}]}])
# found: ctu writes JSON with ensure_ascii=False, and str.splitlines split this episode's line at U+2028 (lost it)
def test_episodes_for_sft_data_are_kept_as_rows_or_rejected_by_reason(tmp_path_factory, lines: list[object]):
    import pyarrow as pa

    from ctu.sft.data import _message, eval_rows, eval_task_keys, parquet_schema

    folder = tmp_path_factory.mktemp("eval")
    texts = [line if isinstance(line, str) else json.dumps(line, ensure_ascii=False) for line in lines]  # as ctu writes
    (folder / "trajectories.jsonl").write_text("\n".join(text.replace("\n", " ") for text in texts) + "\n")
    rows, rejected = eval_rows([folder], 1.0, 4, None)
    assert len(rows) + sum(rejected.values()) == len(texts)
    assert len(rows) >= sum(1 for line in lines if line == EPISODE or "\u2028" in json.dumps(line, ensure_ascii=False))
    assert len(eval_task_keys([folder])) >= len(rows)
    pa.Table.from_pylist([{**row, "messages": [_message(m) for m in row["messages"]], "tools": None} for row in rows],
                         schema=parquet_schema())
