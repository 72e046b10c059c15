"""Bad input one level above the spec, as a user meets it: run directories, resume, eval, compare, data prepare,
secrets. Each case runs the command as users type it (``python -m ctu.cli``) and asserts a message naming what is
wrong, exit 2, no traceback, and nothing written or lost. The run directory they start from is a real one, made
by the toy backend (tests/support/toy_backend.py) in seconds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from tests.support.openai_server import Answer, ScriptedOpenAIServer

from .conftest import REPO
from .runners.test_toy_backend import toy_spec

KEY_ENV = "CTU_PLANTED_USER_KEY"
KEY = f"sk-planted-{uuid.uuid4().hex}"
"""An API key the tests plant: it must reach its endpoint and appear in no file of a run directory."""


def ctu(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctu.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def refused(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """The one-line error of a command that refused bad input: exit 2, no traceback, every word in it."""
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, output[-2000:]
    assert "Traceback" not in output and all(word in output for word in words), output[-2000:]
    return output


def files_holding(text: str, folder: Path) -> list[str]:
    return [str(path) for path in folder.rglob("*") if path.is_file() and text.encode() in path.read_bytes()]


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory) -> Path:
    """A finished toy run of two steps whose user simulator is an LLM endpoint asking for `KEY` (exported only in
    the command's environment): every request carried it, and no file of the run holds it."""
    folder = tmp_path_factory.mktemp("toy")
    spec = toy_spec(folder)
    with ScriptedOpenAIServer(default=Answer.text("###STOP###"), api_key=KEY) as user:
        data = yaml.safe_load(spec.read_text())
        data["environment"]["user_simulator"] = {"type": "llm", "model": "user", "base_url": user.base_url,
                                                 "api_key_env": KEY_ENV, "max_retries": 0}
        spec.write_text(yaml.safe_dump(data))
        result = ctu("run", str(spec), "--no-progress", env={KEY_ENV: KEY})
        assert result.returncode == 0, result.stderr[-3000:]
        assert user.requests and user.refused == []
    run = folder / "runs" / "toy"
    assert json.loads((run / "state.json").read_text()) == {"backend": "toy", "step": 2}
    return run


def copy_of(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "toy"))


def test_a_planted_key_reaches_its_endpoint_and_no_file_of_the_run(toy_run: Path):
    assert files_holding(KEY, toy_run) == []


@pytest.mark.parametrize("override", [
    # the key pasted where its variable's name belongs
    f"environment.user_simulator={{type: llm, model: u, base_url: 'http://127.0.0.1:9/v1', api_key_env: {KEY}}}",
    f"experiment.tags=[{KEY}]",  # anywhere else
], ids=["as_api_key_env", "in_tags"])  # not the key: each collection (each pytest-xdist worker's) draws its own
def test_a_key_pasted_into_a_spec_is_refused_without_repeating_it(tmp_path: Path, override: str):
    result = ctu("validate", str(toy_spec(tmp_path)), override)
    output = refused(result, "not repeated here", "override")
    assert KEY not in output


def test_a_key_in_the_ray_workers_environment_is_refused_without_repeating_it():
    result = ctu("validate", "specs/retail_8b_taxonomy.yaml", f"backend.runtime_env.env_vars={{MY_SETTING: {KEY}}}")
    output = refused(result, "backend.runtime_env.env_vars.MY_SETTING", "api_key_env")
    assert KEY not in output


def test_resume_and_overwrite_together_are_refused_at_once(toy_run: Path):
    refused(ctu("run", "--resume", str(toy_run), "--overwrite"), "--resume", "--overwrite", "choose one")


def test_resuming_what_is_not_a_run_directory_exits_2(tmp_path: Path):
    refused(ctu("run", "--resume", str(tmp_path / "absent")), "no such directory")
    refused(ctu("run", "--resume", str(tmp_path)), "not a run directory")


def test_starting_a_run_where_one_exists_exits_2_pointing_to_resume(toy_run: Path, tmp_path: Path):
    run = copy_of(toy_run, tmp_path)
    result = ctu("run", str(run / "spec.resolved.yaml"), f"experiment.output_dir={run.parent}")
    refused(result, "already holds a run", "--resume")


@pytest.mark.parametrize("content", ["", '{"backend": "toy", "st'])
def test_a_truncated_or_empty_state_is_named_and_nothing_changes(toy_run: Path, tmp_path: Path, content: str):
    run = copy_of(toy_run, tmp_path)
    (run / "state.json").write_text(content)
    metrics = (run / "metrics.jsonl").read_text()
    refused(ctu("run", "--resume", str(run), "trainer.max_steps=3"), "state.json cannot be read")
    assert (run / "metrics.jsonl").read_text() == metrics


@pytest.mark.parametrize(("state", "named"), [({"backend": "toy"}, "no `step`"), ({"backend": "toy", "step": -1}, "`step` is -1"),
                                              ({"backend": "toy", "step": "2"}, "`step` is '2'"), ([2], "not a JSON object")])
def test_a_state_without_a_step_is_refused_and_the_run_kept_whole(toy_run: Path, tmp_path: Path, state, named: str):
    """A state that says no step (emptied of it, edited) is not taken as step 0: the resume, which would start the
    finished run over in place, is refused naming what is wrong, and the metrics stay as they were."""
    run = copy_of(toy_run, tmp_path)
    (run / "state.json").write_text(json.dumps(state))
    metrics = (run / "metrics.jsonl").read_text()
    refused(ctu("run", "--resume", str(run), "trainer.max_steps=3"), "is not the state ctu wrote", named, "nothing in this one was changed")
    assert (run / "metrics.jsonl").read_text() == metrics and not (run / "superseded").exists()


def test_a_metric_line_cut_by_a_kill_is_dropped_on_resume_and_no_line_is_duplicated(toy_run: Path, tmp_path: Path):
    """A resume replays the steps after its checkpoint: their earlier lines, and a line a kill cut, are set aside
    under superseded/ (never deleted), and none is duplicated in metrics.jsonl."""
    run = copy_of(toy_run, tmp_path)
    with (run / "metrics.jsonl").open("a") as file:
        file.write('{"step": 3, "train/rew')  # the kill came mid-write
    result = ctu("run", "--resume", str(run), "trainer.max_steps=3", "--no-progress")
    assert result.returncode == 0, result.stderr[-3000:]
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]
    [aside] = (run / "superseded").glob("*/metrics.jsonl")
    assert aside.read_text() == '{"step": 3, "train/rew\n'


def test_a_resume_that_changes_the_experiment_is_refused_naming_the_keys_unless_allowed(toy_run: Path, tmp_path: Path):
    run = copy_of(toy_run, tmp_path)
    digest = (run / "spec.sha256").read_text()
    refused(ctu("run", "--resume", str(run), "rollout.temperature=0.3", "trainer.max_steps=3"),
            "rollout.temperature", "--allow-spec-change")
    assert (run / "spec.sha256").read_text() == digest and not (run / "spec_changes.jsonl").exists()
    allowed = ctu("run", "--resume", str(run), "rollout.temperature=0.3", "trainer.max_steps=3", "--allow-spec-change",
                  "--no-progress")
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    [change] = [json.loads(line) for line in (run / "spec_changes.jsonl").read_text().splitlines()]
    assert change["changed"] == ["rollout.temperature", "trainer.max_steps"] and change["started_sha256"] == digest.strip()


def test_a_hand_edited_resolved_spec_is_not_resumed_silently(toy_run: Path, tmp_path: Path):
    run = copy_of(toy_run, tmp_path)
    spec = run / "spec.resolved.yaml"
    text = spec.read_text()
    assert "  seed: 42\n" in text
    spec.write_text(text.replace("  seed: 42\n", "  seed: 43\n", 1))
    refused(ctu("run", "--resume", str(run), "trainer.max_steps=3"), "was changed after the run started")


def test_a_run_an_earlier_ctu_started_resumes_though_the_schema_has_grown(toy_run: Path, tmp_path: Path):
    """A run whose resolved spec lacks a section a later ctu added (here `environment.overflow`, as every run started
    before it) is not taken for an edited one: the new section's defaults change nothing it trains."""
    import yaml

    from ctu.spec import data_hash

    run = copy_of(toy_run, tmp_path)
    spec = run / "spec.resolved.yaml"
    data = yaml.safe_load(spec.read_text())
    del data["environment"]["overflow"]
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    (run / "spec.sha256").write_text(data_hash(data) + "\n")  # as that ctu recorded it
    resumed = ctu("run", "--resume", str(run), "trainer.max_steps=3", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert not (run / "spec_changes.jsonl").exists()


def test_compare_names_a_file_that_is_not_an_evaluation_result(toy_run: Path, tmp_path: Path):
    refused(ctu("compare", str(toy_run / "state.json")), "is not a `ctu eval` result")
    (tmp_path / "broken.json").write_text("{")
    refused(ctu("compare", str(tmp_path / "broken.json")), "is not JSON")


def test_an_output_folder_below_a_file_exits_2_naming_it(tmp_path: Path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    refused(ctu("data", "prepare", "--out", str(blocker / "data"), "--domains", "retail"), "cannot use", str(blocker))
    refused(ctu("run", str(toy_spec(tmp_path)), f"experiment.output_dir={blocker}/runs", "--no-progress"), "cannot use")


def test_data_prepare_writes_nothing_when_a_split_fails_or_nothing_is_asked(tmp_path: Path):
    out = tmp_path / "data"
    refused(ctu("data", "prepare", "--out", str(out), "--domains", "retail", "--splits", "train,nosuch"), "nosuch")
    assert not out.exists() or list(out.iterdir()) == []
    refused(ctu("data", "prepare", "--out", str(out), "--domains", ""), "name at least one domain")


def test_an_evaluation_folder_whose_configuration_is_truncated_is_named_not_resumed(tmp_path: Path):
    out = tmp_path / "eval"
    out.mkdir()
    (out / "eval_config.json").write_text('{"spec": "to')
    result = ctu("eval", str(toy_spec(tmp_path)), "--endpoint", "http://127.0.0.1:9/v1", "--model", "m", "--out", str(out))
    refused(result, "eval_config.json cannot be read", "--overwrite")
    assert sorted(p.name for p in out.iterdir()) == ["eval_config.json"]


@pytest.mark.parametrize(("code", "reason"), [
    ("import sys\nsys.exit(0)\n", "called sys.exit(0) while being imported"),
    ("assert 1 + 1 == 3\n", "AssertionError without a message at"),
])
def test_user_code_that_exits_or_fails_a_bare_assert_at_import_is_a_spec_error_with_its_reason(tmp_path: Path, code: str, reason: str):
    (tmp_path / "mine.py").write_text(code)
    output = refused(ctu("validate", str(toy_spec(tmp_path)), f"imports=['{tmp_path / 'mine.py'}']"), reason)
    assert "imports.0" in output


def test_a_run_resumed_on_another_backend_is_refused_naming_both(toy_run: Path, tmp_path: Path):
    run = copy_of(toy_run, tmp_path)
    result = ctu("run", "--resume", str(run), "backend={type: tinker, local: true}", "--allow-spec-change")
    refused(result, "trained by the toy backend", "names tinker")
    assert not (run / "spec_changes.jsonl").exists()


def test_a_key_an_endpoint_echoes_in_its_error_is_scrubbed_from_every_file_page_and_line(tmp_path: Path):
    """An endpoint refusing the policy's key answers 401 with the request's `Authorization` header in its message:
    the key comes back inside ctu's own text (each episode's infrastructure error, the tracebacks in eval.log, the
    console) and is replaced by its variable's name at every writer, the trajectory lines, the log, the console and
    `ctu view`'s page among them."""
    from .conftest import MINIMAL_SPEC

    spec = json.loads(json.dumps(MINIMAL_SPEC))
    spec["model"] = {"path": "builtin:tiny-qwen3", "family": "qwen3", "chat_template": "qwen3_no_thinking"}
    spec["data"]["test_sets"] = {"mock": {"domain": "mock", "split": "base", "max_tasks": 1}}
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    out = tmp_path / "eval"
    with ScriptedOpenAIServer(api_key="not-the-planted-key", echo_refused=True) as server:
        done = ctu("eval", str(spec_file), "--endpoint", server.base_url, "--model", "m", "--api-key-env", KEY_ENV,
                   "--limit", "1", "--no-progress", "--out", str(out), env={KEY_ENV: KEY})
        assert server.refused and all(headers["authorization"] == f"Bearer {KEY}" for headers in server.refused), done.stdout + done.stderr
    assert done.returncode == 3, done.stdout + done.stderr  # every episode an infrastructure error: nothing measured
    viewed = ctu("view", str(out), "--out", str(tmp_path / "page.html"), env={KEY_ENV: KEY})
    assert viewed.returncode == 0, viewed.stderr
    assert KEY not in done.stdout + done.stderr + viewed.stdout + viewed.stderr
    assert files_holding(KEY, tmp_path) == [] and files_holding(KEY, out) == []
    lines = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert lines and all(f"<{KEY_ENV}>" in line["infra_error"] for line in lines)  # the text was there, scrubbed
    assert f"<{KEY_ENV}>" in (out / "eval.log").read_text()
