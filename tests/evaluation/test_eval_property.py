"""Properties of `ctu eval`'s inputs, generated rather than listed (the seeded, bounded settings of
tests/test_input_property.py; tests/README.md says what is generated): whatever an endpoint answers and whatever a
folder holds, an evaluation ends in a result or in a `CtuError` (a line and an exit code for the user, never a
traceback), a key never reaches a file, and a refused folder is left as it was.

- The policy endpoint answers a generated sequence: text (the key in it or not), tool calls of any name and
  arguments, HTTP errors, bodies that are no JSON or JSON of any shape; then a closing line.
- The output folder is a finished evaluation's, then cut, edited or added to: trajectory lines cut at any byte or
  replaced, ctu's files removed, its configuration edited, a foreign file put in.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctu.errors import CtuError
from ctu.evaluation.policies import PolicyChoice
from ctu.evaluation.report import read_report
from ctu.evaluation.runner import TRAJECTORIES, run_evaluation
from ctu.spec import spec_from_dict

from ..conftest import MINIMAL_SPEC
from ..support.openai_server import Answer, ScriptedOpenAIServer
from ..test_input_property import BOUNDED, json_values, mutated

KEY_ENV, KEY = "CTU_PROPERTY_TEST_KEY", "sk-property-7f3a9c41d2"
CLOSING = Answer.text("Thank you, goodbye. ###STOP###")
FEW = settings(BOUNDED, max_examples=15)
"""Each example runs an evaluation (about a second): fewer examples than the file-reading properties."""


def spec():
    data = json.loads(json.dumps(MINIMAL_SPEC))
    data["model"] = {"path": "builtin:tiny-qwen3", "family": "qwen3", "chat_template": "qwen3_no_thinking"}
    data["data"]["test_sets"] = {"mock": {"domain": "mock", "split": "base", "max_tasks": 2}}
    data["environment"]["max_turns"] = 4
    data["rollout"] = {"parser": "hermes"}
    return spec_from_dict(data).spec


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch):
    """The policy endpoint's retries without their seconds of backoff, and its key in the environment."""
    from ctu.components import endpoint

    monkeypatch.setattr(endpoint, "OpenAIEndpointParams",
                        functools.partial(endpoint.OpenAIEndpointParams, backoff_s=0.001, max_backoff_s=0.001))
    monkeypatch.setenv(KEY_ENV, KEY)


def evaluate(out: Path, answers: list[Answer], server: ScriptedOpenAIServer | None = None):
    """`ctu eval` of `spec()` into `out` against an endpoint answering `answers`, then `CLOSING` (`server`, else a
    new one); its result, or the `CtuError` it raised."""
    if server is None:
        with ScriptedOpenAIServer(default=CLOSING, api_key=KEY) as server:
            return evaluate(out, answers, server)
    server.push(*answers)
    try:
        return run_evaluation(spec(), PolicyChoice(endpoint=server.base_url, model="any", api_key_env=KEY_ENV), out,
                              concurrency=1, progress=False)
    except CtuError as error:
        assert KEY not in str(error)
        return error


def leaked(folder: Path) -> list[str]:
    return [str(path) for path in folder.rglob("*") if path.is_file() and KEY.encode() in path.read_bytes()]


text_with_key = st.tuples(st.text(max_size=20), st.booleans()).map(lambda t: t[0] + (f" my key is {KEY}" if t[1] else ""))
answers = st.one_of(
    text_with_key.map(Answer.text),
    st.tuples(st.sampled_from(["create_task", "get_users", "update_task_status", "no_such_tool", ""]),
              st.dictionaries(st.text(max_size=6), json_values, max_size=2)).map(lambda call: Answer.calls(call)),
    st.sampled_from([400, 401, 404, 422, 429, 500, 503]).map(Answer.error),
    st.binary(max_size=30).map(Answer.malformed),
    json_values.map(lambda value: Answer(raw_body=json.dumps(value).encode())),
)


@FEW
@given(st.lists(answers, max_size=8))
def test_an_evaluation_against_any_endpoint_ends_in_a_result_or_a_named_error_and_writes_no_key(tmp_path_factory, script):
    out = tmp_path_factory.mktemp("eval")
    outcome = evaluate(out, script)
    assert not leaked(out)
    if not isinstance(outcome, CtuError):
        lines = (out / TRAJECTORIES).read_text().splitlines()
        assert len(lines) == outcome.report["overall"]["episodes"] == 2
        read_report(out / "eval.json")


@pytest.fixture(scope="module")
def server():
    """One endpoint for a module's evaluations: a folder is continued only against the policy it holds."""
    with ScriptedOpenAIServer(default=CLOSING, api_key=KEY) as server:
        yield server


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory, server: ScriptedOpenAIServer) -> Path:
    """A finished evaluation's folder."""
    out = tmp_path_factory.mktemp("finished")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, KEY)
        assert not isinstance(evaluate(out, [], server), CtuError)
    return out


@st.composite
def edited_folder(draw: st.DrawFn) -> list[tuple[str, object]]:
    """One to three edits of a finished evaluation's folder, each ``(kind, argument)``."""
    edits = st.one_of(
        st.tuples(st.just("cut"), st.floats(0, 1)),
        st.tuples(st.just("line"), st.tuples(st.integers(0, 1), st.one_of(json_values.map(json.dumps), st.text(max_size=20)))),
        st.tuples(st.just("remove"), st.sampled_from(["eval.json", "eval_config.json", "eval.log", "eval.png", TRAJECTORIES])),
        st.tuples(st.just("config"), st.just(None)),
        st.tuples(st.just("foreign"), st.sampled_from(["notes.txt", "trajectories.jsonl.bak", "plots/mine.png"])),
    )
    return draw(st.lists(edits, min_size=1, max_size=3))


def apply(folder: Path, kind: str, argument: object, draw_config) -> None:
    trajectories = folder / TRAJECTORIES
    if kind == "cut" and trajectories.exists():
        data = trajectories.read_bytes()
        trajectories.write_bytes(data[:int(len(data) * float(argument))])
    elif kind == "line" and trajectories.exists():
        index, text = argument
        lines = trajectories.read_text().splitlines()
        if index < len(lines):
            lines[index] = text.replace("\n", " ")
            trajectories.write_text("\n".join(lines) + "\n")
    elif kind == "remove":
        (folder / str(argument)).unlink(missing_ok=True)
    elif kind == "config" and (folder / "eval_config.json").exists():
        (folder / "eval_config.json").write_text(json.dumps(draw_config(json.loads((folder / "eval_config.json").read_text()))))
    elif kind == "foreign":
        (folder / str(argument)).parent.mkdir(parents=True, exist_ok=True)
        (folder / str(argument)).write_text("the user's own")


def contents(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@FEW
@given(edited_folder(), st.data())
def test_an_edited_evaluation_folder_is_completed_or_refused_as_it_was(tmp_path_factory, server, finished: Path, edits, data):
    folder = tmp_path_factory.mktemp("edited") / "eval"
    shutil.copytree(finished, folder)
    for kind, argument in edits:
        apply(folder, kind, argument, lambda config: data.draw(mutated(config)))
    before = contents(folder)
    outcome = evaluate(folder, [], server)
    after = contents(folder)
    assert not leaked(folder)
    if isinstance(outcome, CtuError):
        assert after == before, "a refused folder changed"
        return
    assert len((folder / TRAJECTORIES).read_text().splitlines()) == outcome.report["overall"]["episodes"] == 2
    foreign = [name for name in before if name.startswith(("notes", "plots", "trajectories.jsonl."))]
    assert all(after.get(name) == before[name] for name in foreign), "a file ctu did not write changed"
    assert os.path.exists(folder / "eval.json") and read_report(folder / "eval.json")


def test_an_evaluation_cut_mid_line_is_completed_with_every_episode(tmp_path: Path, server, finished: Path):
    """Found by the property above: a resume appended its first episode to the line a kill had cut, and lost it."""
    folder = tmp_path / "eval"
    shutil.copytree(finished, folder)
    data = (folder / TRAJECTORIES).read_bytes()
    first = data.index(b"\n") + 1
    (folder / TRAJECTORIES).write_bytes(data[: first + (len(data) - first) // 2])  # the second line cut
    outcome = evaluate(folder, [], server)
    assert not isinstance(outcome, CtuError) and outcome.ran == 1
    assert [json.loads(text)["task_id"] for text in (folder / TRAJECTORIES).read_text().split("\n")[:-1]] == \
        [json.loads(text)["task_id"] for text in data.decode().split("\n")[:-1]]
