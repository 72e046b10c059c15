"""A spec's `imports:`: user code imported before validation, relative to the spec that names it, kept through
`extends`, every failure an error at `imports.<i>`; and the CLI's `--import`."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ctu.registry import registry
from ctu.spec import SpecError, load_spec, spec_from_dict

from .conftest import MINIMAL_SPEC, REPO


def reward_file(folder: Path, name: str) -> Path:
    """A file registering a complete reward `name` (a fresh name per test: registrations outlive a test)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(f'''
        from ctu.registry import ComponentParams, registry

        @registry.rewards.register("{name}")
        class Bonus:
            """Adds `bonus`."""

            training_only = True
            needs_judge = False

            class Params(ComponentParams):
                bonus: float = 0.1

            def __init__(self, params):
                self.params = params

            async def apply(self, reward, context):
                return reward + self.params.bonus
        '''))
    return path


def write_spec(path: Path, body: str) -> Path:
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(MINIMAL_SPEC) + textwrap.dedent(body))
    return path


@pytest.fixture
def unregister():
    names: list[str] = []
    yield names
    for name in names:
        registry.rewards.unregister(name)


def test_a_file_next_to_the_spec_registers_components_the_spec_uses(tmp_path, unregister, monkeypatch):
    unregister.append("imports_bonus_a")
    reward_file(tmp_path / "project", "imports_bonus_a")
    spec_path = write_spec(tmp_path / "project" / "spec.yaml", """
        imports: [imports_bonus_a.py]
        rewards: [tau_outcome, {type: imports_bonus_a, bonus: 0.3}]
        """)
    monkeypatch.chdir(tmp_path)
    spec = load_spec(spec_path).spec
    assert spec.imports == ["project/imports_bonus_a.py"]  # relative to where ctu runs, as Ray's workers see it
    assert spec.rewards[1].params.bonus == 0.3
    monkeypatch.chdir(REPO)  # outside the current directory, a file is kept by its absolute path
    assert load_spec(spec_path).spec.imports == [str(tmp_path / "project" / "imports_bonus_a.py")]


def test_imports_accumulate_through_extends_each_relative_to_its_own_spec(tmp_path, unregister, monkeypatch):
    unregister += ["imports_bonus_b", "imports_bonus_c"]
    reward_file(tmp_path / "base", "imports_bonus_b")
    reward_file(tmp_path / "child", "imports_bonus_c")
    write_spec(tmp_path / "base" / "base.yaml", "imports: [imports_bonus_b.py]\n")
    child = tmp_path / "child" / "child.yaml"
    child.write_text("extends: ../base/base.yaml\nimports: [imports_bonus_c.py, imports_bonus_c.py]\n"
                     "rewards: [tau_outcome, imports_bonus_b, imports_bonus_c]\n")
    monkeypatch.chdir(tmp_path)
    spec = load_spec(child).spec
    assert spec.imports == ["base/imports_bonus_b.py", "child/imports_bonus_c.py"]
    assert [r.type for r in spec.rewards] == ["tau_outcome", "imports_bonus_b", "imports_bonus_c"]


def test_every_failing_import_is_an_error_at_its_index(tmp_path):
    (tmp_path / "raises.py").write_text("raise RuntimeError('no database configured')\n")
    (tmp_path / "incomplete.py").write_text(textwrap.dedent('''
        from ctu.registry import registry

        @registry.parsers.register("imports_incomplete")
        class Half:
            """Parses but renders no tools."""

            def __init__(self, params):
                pass

            def parse(self, text):
                return None
        '''))
    spec_path = write_spec(tmp_path / "spec.yaml", "imports: [raises.py, missing.py, no_such_module_xyz, incomplete.py]\n")
    with pytest.raises(SpecError) as info:
        load_spec(spec_path)
    issues = {issue.path: issue.message for issue in info.value.issues}
    assert issues["imports.0"] == f"importing '{tmp_path / 'raises.py'}' failed: RuntimeError: no database configured"
    assert issues["imports.1"] == f"no such file: {tmp_path / 'missing.py'}"
    assert "no module named 'no_such_module_xyz'" in issues["imports.2"]
    assert "RegistryError" in issues["imports.3"] and "no method render_tools(tools)" in issues["imports.3"]
    assert all(str(issue.location).startswith(str(spec_path)) for issue in info.value.issues)
    assert "imports_incomplete" not in registry.parsers


def test_modules_import_by_name_and_a_malformed_list_is_a_schema_error(minimal):
    assert spec_from_dict({**minimal, "imports": ["json"]}).spec.imports == ["json"]
    with pytest.raises(SpecError) as info:
        spec_from_dict({**minimal, "imports": "json"})
    assert [issue.path for issue in info.value.issues] == ["imports"]


def test_the_cli_lists_and_documents_components_given_by_import(tmp_path, unregister):
    unregister.append("imports_bonus_d")
    reward_file(tmp_path, "imports_bonus_d")
    listed = subprocess.run([sys.executable, "-m", "ctu.cli", "components", "rewards", "--import", "imports_bonus_d.py"],
                            cwd=tmp_path, capture_output=True, text=True, env={**__import__("os").environ, "COLUMNS": "200"})
    assert listed.returncode == 0, listed.stderr
    assert "imports_bonus_d" in listed.stdout and "imports_bonus_d.py:4" in listed.stdout
    schema = subprocess.run([sys.executable, "-m", "ctu.cli", "schema", "-i", "imports_bonus_d.py"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert schema.returncode == 0 and "imports_bonus_d" in schema.stdout
    failed = subprocess.run([sys.executable, "-m", "ctu.cli", "docs", "-i", "nope.py", "-o", "ref.md"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert failed.returncode == 2 and "no such file" in failed.stderr and not (tmp_path / "ref.md").exists()


def project_spec(tmp_path, reward: str, unregister) -> Path:
    """``<tmp_path>/project/spec.yaml`` importing a file of the project that registers `reward`, and using it."""
    unregister.append(reward)
    reward_file(tmp_path / "project", reward)
    return write_spec(tmp_path / "project" / "spec.yaml", f"imports: [{reward}.py]\nrewards: [{reward}]\n")


def test_a_dumped_spec_loads_equal_from_its_run_directory(tmp_path, unregister, monkeypatch):
    """`spec.resolved.yaml` in a run directory (what `ctu run --resume` reads) names the same files."""
    from ctu.spec import dump_spec, spec_hash

    spec_path = project_spec(tmp_path, "imports_bonus_e", unregister)
    monkeypatch.chdir(tmp_path)
    spec = load_spec(spec_path).spec
    resolved = tmp_path / "runs" / "minimal" / "spec.resolved.yaml"
    resolved.parent.mkdir(parents=True)
    resolved.write_text(dump_spec(spec))
    again = load_spec(resolved).spec
    assert again == spec and spec_hash(again) == spec_hash(spec)


def test_a_specs_hash_names_its_imported_files_wherever_the_command_runs(tmp_path, unregister, monkeypatch):
    """A run resumed from another directory is the same experiment (`ctu run --resume` compares hashes)."""
    from ctu.spec import spec_hash

    spec_path = project_spec(tmp_path, "imports_bonus_f", unregister)
    monkeypatch.chdir(tmp_path)
    here = load_spec(spec_path).spec
    digest = spec_hash(here)  # imports are relative to the directory the command runs in
    monkeypatch.chdir(tmp_path / "project")
    there = load_spec(spec_path).spec
    assert here.imports != there.imports and spec_hash(there) == digest
