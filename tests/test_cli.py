"""The `ctu` command line, run as users run it: a subprocess, exit codes, what it prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, SPECS

CTU = [sys.executable, "-m", "ctu.cli"]
INVALID = REPO / "tests" / "invalid_specs"


def ctu(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([*CTU, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120)


def test_validate_accepts_every_shipped_spec():
    result = ctu("validate", *map(str, SPECS))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("ok ") == len(SPECS)


def test_validate_exits_2_listing_every_problem_without_traceback():
    result = ctu("validate", str(INVALID / "several_problems.yaml"), str(SPECS[0]))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    for path in ("model.chat_templat", "trainer.optimizer.lrr", "rollout.temperature", "rewards.1.weight"):
        assert path in result.stderr
    assert "several_problems.yaml:6" in result.stderr
    assert "1 of 2 spec(s) invalid" in result.stderr
    assert f"ok {SPECS[0]}" in result.stdout


def test_validate_applies_overrides_and_reports_missing_files():
    result = ctu("validate", str(SPECS[0]), "trainer.epochs=0")
    assert result.returncode == 2 and "trainer.epochs" in result.stderr
    result = ctu("validate", "no/such/spec.yaml")
    assert result.returncode == 2 and "cannot read spec file" in result.stderr


def test_validate_prints_warnings_but_succeeds(tmp_path: Path):
    spec = tmp_path / "qwen3.yaml"
    spec.write_text(f"extends: {INVALID / '_base.yaml'}\nmodel: {{path: Qwen/Qwen3-8B}}\n")
    result = ctu("validate", str(spec))
    assert result.returncode == 0
    assert "warning" in result.stderr and "qwen3_no_thinking" in result.stderr


def test_run_prints_the_specs_warnings_as_validate_does():
    result = ctu("run", "specs/tau_bench.yaml", "--dry-run", "rollout.eval_n_samples_per_prompt=3")
    assert result.returncode == 0, result.stderr
    assert "warning rollout.eval_n_samples_per_prompt" in result.stdout


def test_a_local_tinker_server_that_exits_is_a_ctu_error_naming_its_log(tmp_path: Path):
    """A CtuError, so `ctu run` prints it in a line instead of a traceback."""
    from ctu.backends.tinker.server import LocalTinkerServer, TinkerServerError
    from ctu.errors import CtuError

    class Exiting(LocalTinkerServer):
        def command(self) -> list[str]:
            return [sys.executable, "-c", "import sys; sys.exit(3)"]

    server = Exiting("model", tmp_path)
    with pytest.raises(TinkerServerError, match="exited with code 3") as info:
        server.start().wait_healthy()
    assert isinstance(info.value, CtuError) and str(tmp_path / "server.log") in str(info.value)


def test_explain_prints_a_resolved_spec_that_validates(tmp_path: Path):
    result = ctu("explain", str(REPO / "specs" / "retail_8b_taxonomy.yaml"), "trainer.epochs=7")
    assert result.returncode == 0, result.stderr
    assert "epochs: 7" in result.stdout and "extends" not in result.stdout
    resolved = tmp_path / "resolved.yaml"
    resolved.write_text(result.stdout)
    again = ctu("explain", str(resolved))
    assert again.stdout == result.stdout


def test_schema_lists_component_params_for_editors(tmp_path: Path):
    out = tmp_path / "schema.json"
    assert ctu("schema", "-o", str(out)).returncode == 0
    schema = json.loads(out.read_text())
    parser = schema["$defs"]["Rollout"]["properties"]["parser"]
    assert "hermes" in parser["oneOf"][0]["enum"]
    user = schema["$defs"]["Environment"]["properties"]["user_simulator"]["oneOf"]
    llm = next(option for option in user if option.get("title") == "user_simulators.llm")
    assert {"type", "model", "base_url"} <= set(llm["required"])
    assert llm["additionalProperties"] is False


def test_docs_check_detects_a_stale_reference(tmp_path: Path):
    assert ctu("docs", "--check").returncode == 0
    stale = tmp_path / "REF.md"
    stale.write_text("old\n")
    result = ctu("docs", "--check", "-o", str(stale))
    assert result.returncode == 1 and "stale" in result.stderr
    assert ctu("docs", "-o", str(stale)).returncode == 0
    assert stale.read_text() == (REPO / "SPEC_REFERENCE.md").read_text()


def test_components_lists_every_kind_and_filters():
    result = ctu("components")
    assert result.returncode == 0
    for name in ("tau_multiturn", "hermes", "taxonomy_feedback", "llm_taxonomy", "console", "qwen3_no_thinking", "scripted", "telecom"):
        assert name in result.stdout
    only = ctu("components", "parsers")
    assert "hermes" in only.stdout and "telecom" not in only.stdout
    bad = ctu("components", "parser")
    assert bad.returncode == 1 and "did you mean 'parsers'" in bad.stderr


@pytest.mark.parametrize("command", [["--help"], ["validate", "specs/tau_bench.yaml", "specs/smoke.yaml"], ["docs", "--check"]])
def test_cli_stays_light(command: list[str], tmp_path: Path):
    """`ctu --help`, `ctu validate` and `ctu docs` import no torch, ray, skyrl, tau2 or transformers, nor ctu's
    runners (but the backends' contract, `ctu.runners.backend`, which a backend module imports as any component's
    module imports its kind's), rollout or evaluation: loading a spec (the registry's entry points, every built-in
    component's module and the spec's backend among them) reaches none of them, what the import statements alone
    cannot show. (ctu's cache is empty here: a first prompt `ctu validate` has not counted before loads tau2 once,
    and a counted one does not, `tests/test_prompt_fit.py`.)"""
    probe = (
        "import sys, runpy\n"
        f"sys.argv = ['ctu', *{command!r}]\n"
        "try:\n    runpy.run_module('ctu.cli', run_name='__main__')\n"
        "except SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        "heavy = [m for m in ('torch', 'ray', 'skyrl', 'tau2', 'transformers', 'vllm', 'jax') if m in sys.modules]\n"
        "heavy += [m for m in sys.modules if m.startswith(('ctu.runners', 'ctu.rollout', 'ctu.evaluation'))\n"
        "          and m not in ('ctu.runners', 'ctu.runners.backend')]\n"
        "print('HEAVY', heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "CTU_CACHE_DIR": str(tmp_path)})
    assert "HEAVY []" in result.stdout, result.stdout + result.stderr
