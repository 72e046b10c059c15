"""What a chain check's figures are measured on besides ctu's code, and whether two commits differ in it.

A recorded seed of `chain_check.py` may be kept beside seeds measured later (`--add`) only when the two commits
ran the same chain: the same specs, as the stages of its backend read them, and the same locked dependencies. The
comparison is of what the stages run, not of the files' bytes: a stage's spec compares merged with what it extends
(a comment, a line break or a base's value the stage's own spec overrides changes nothing), the lock as the
versions it pins (a package added for the tests changes nothing; one that changed or left does). A spec another
backend's stages alone read is not compared.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "specs" / "learning_chain"
CPU_BACKEND = REPO / "tests" / "skyrl_cpu" / "backend_cpu.yaml"
"""The skyrl backend's section for this CPU (SkyRL's trainer with the test suite's stand-ins), added to each stage
that runs on SkyRL."""
TASKS_SPEC, TRAIN_SPEC, SFT_SPEC = SPECS / "tasks.yaml", SPECS / "train.yaml", SPECS / "sft_skyrl.yaml"
"""The shared stages' specs: the tasks' generation; the SFT data's, the evaluations' and (extended) GRPO's; the SFT
stage's (on SkyRL's trainer, with `CPU_BACKEND`)."""
GRPO_SPECS = {"tinker": SPECS / "grpo.yaml", "skyrl": SPECS / "grpo_skyrl.yaml"}
"""Each backend's GRPO stage (and its control's) spec."""
LOCK = "uv.lock"


def stage_specs(grpo_backend: str) -> list[str]:
    """The spec files the chain with GRPO on `grpo_backend` starts its stages from (not those they extend), relative
    to the repository's root."""
    return [str(path.relative_to(REPO)) for path in (TASKS_SPEC, TRAIN_SPEC, SFT_SPEC, CPU_BACKEND, GRPO_SPECS[grpo_backend])]


def yaml_named(data: object, folder: Path, root: Path) -> list[Path]:
    """The YAML files that exist and that `data` (parsed YAML) names anywhere in its values, by a path relative to
    `folder` (the naming file's) or to `root` (the repository's, as a task generator's `templates:` does)."""
    if isinstance(data, str):
        if data.endswith((".yaml", ".yml")):
            for candidate in (folder / data, root / data):
                if candidate.is_file():
                    return [candidate.resolve()]
        return []
    values = data.values() if isinstance(data, dict) else data if isinstance(data, list) else []
    return [path for value in values for path in yaml_named(value, folder, root)]


def resolved_inputs(root: Path, grpo_backend: str) -> dict[str, object]:
    """What the chain's stages with GRPO on `grpo_backend` read from the tree at `root` (a checkout, or the spec
    folders of one): ``{path relative to root: data}``, each stage spec (`stage_specs`) merged with the files it
    extends (`ctu.spec.loading.load_file`: what the stage runs, whichever file of its `extends` chain says it), and
    each other YAML file a merged spec names (a task generator's templates), parsed, followed through. A stage spec
    missing at `root` is left out; one that cannot be loaded maps to its problems (paths relative to `root`)."""
    from ctu.spec.loading import load_file

    root = root.resolve()
    found: dict[str, object] = {}
    for name in stage_specs(grpo_backend):
        if (root / name).is_file():
            issues: list = []
            data, _ = load_file(root / name, issues)
            found[name] = {"problems": [str(issue).replace(f"{root}/", "") for issue in issues]} if issues else data
    todo = [path for name, data in found.items() for path in yaml_named(data, (root / name).parent, root)]
    while todo:
        path = todo.pop()
        name = str(path.relative_to(root))
        if name not in found:
            found[name] = yaml.safe_load(path.read_text())
            todo.extend(yaml_named(found[name], path.parent, root))
    return found


def tree_at(commit: str, root: Path) -> None:
    """Write the folders the chain's specs live in (`specs/`, the CPU backend section's) as they were at `commit` (one
    this clone has) under `root`."""
    folders = ["specs", str(CPU_BACKEND.parent.relative_to(REPO))]
    archive = subprocess.run(["git", "archive", "--format=tar", commit, "--", *folders], cwd=REPO, capture_output=True,
                             check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(root, filter="data")


def at(commit: str, path: str) -> str | None:
    """The text of `path` (relative to the repository's root) at `commit` (one this clone has), or None where it
    did not exist."""
    shown = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=REPO, capture_output=True, text=True)
    return shown.stdout if shown.returncode == 0 else None


def locked_versions(lock: str) -> dict[str, set[str]]:
    """`{package: {versions}}` that a `uv.lock`'s text pins (a package may be locked at several versions, one per
    platform or extra), without the project's own entry (its code is compared apart)."""
    versions: dict[str, set[str]] = {}
    for package in tomllib.loads(lock).get("package", []):
        if "editable" not in package.get("source", {}) and "virtual" not in package.get("source", {}):
            versions.setdefault(package["name"], set()).add(package.get("version", "?"))
    return versions


def lock_changes(before: str, after: str) -> list[str]:
    """The locked packages of `before` (a `uv.lock`'s text) that `after` pins at other versions or not at all, as
    ``"name 1.0 -> 1.1"`` lines; packages `after` adds are not changes of what `before` ran."""
    old, new = locked_versions(before), locked_versions(after)
    return [f"{name} {', '.join(sorted(versions))} -> {', '.join(sorted(new.get(name, set()))) or 'removed'}"
            for name, versions in sorted(old.items()) if not versions <= new.get(name, set())]


def changed_inputs(commit: str, grpo_backend: str, head: str = "HEAD") -> list[str]:
    """What differs in the chain's inputs with GRPO on `grpo_backend` between `commit` and `head`: each of
    `resolved_inputs` that differs, as ``"path: key, key"`` (the dotted keys whose values differ, as a resumed run
    names its spec's changes: `ctu.runners.launch.spec_changes`), or that one of the two lacks, then each changed
    lock entry (`lock_changes`). Empty when the two ran the same chain: a change to a file that every stage reading
    it overrides (a base's learning rate that a GRPO spec sets) is none.

    Raises:
        SystemExit: this clone does not have `commit` or `head`.
    """
    from ctu.runners.launch import spec_changes

    trees = []
    for name in (commit, head):
        if subprocess.run(["git", "cat-file", "-e", name], cwd=REPO, capture_output=True).returncode != 0:
            raise SystemExit(f"--add: cannot compare with commit {name}: this clone does not have it")
        with tempfile.TemporaryDirectory() as root:
            tree_at(name, Path(root))
            trees.append(resolved_inputs(Path(root), grpo_backend))
    before, after = trees
    changed = []
    for path in sorted(set(before) | set(after)):
        if path not in before or path not in after:
            changed.append(path + (" (added since)" if path not in before else " (removed since)"))
        elif keys := spec_changes(before[path], after[path]):
            changed.append(f"{path}: {', '.join(keys)}")
    before_lock, after_lock = at(commit, LOCK), at(head, LOCK)
    if before_lock is None or after_lock is None:
        return [*changed, f"{LOCK} (missing)"]
    return [*changed, *(f"{LOCK}: {line}" for line in lock_changes(before_lock, after_lock))]


def changed_files(commit: str, paths: tuple[str, ...]) -> list[str]:
    """The files under `paths` whose bytes differ between `commit` and this checkout's HEAD.

    Raises:
        SystemExit: this clone does not have `commit`.
    """
    found = subprocess.run(["git", "diff", "--name-only", commit, "HEAD", "--", *paths], cwd=REPO, capture_output=True, text=True)
    if found.returncode != 0:
        raise SystemExit(f"--add: cannot compare with commit {commit}: {found.stderr.strip()}")
    return found.stdout.split()
