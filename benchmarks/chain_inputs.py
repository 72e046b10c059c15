"""What a chain check's figures are measured on besides ctu's code, and whether two commits differ in it.

A recorded seed of `chain_check.py` may be kept beside seeds measured later (`--add`) only when the two commits
ran the same chain: the same specs, as the stages of its backend read them, and the same locked dependencies. The
comparison is of what the files say, not of their bytes: a spec compares as parsed YAML (a comment or a line
break changes nothing), the lock as the versions it pins (a package added for the tests changes nothing; one that
changed or left does). A spec another backend's stages alone read is not compared.
"""

from __future__ import annotations

import subprocess
import tomllib
from collections.abc import Iterable
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


def stage_specs(grpo_backend: str) -> list[Path]:
    """The spec files the chain with GRPO on `grpo_backend` starts its stages from (not those they extend)."""
    return [TASKS_SPEC, TRAIN_SPEC, SFT_SPEC, CPU_BACKEND, GRPO_SPECS[grpo_backend]]


def referenced(path: Path) -> list[Path]:
    """The YAML files `path` (a YAML file) names anywhere in its values, by a path relative to its own folder (as
    `extends:` does) or to the repository's root (as a task generator's `templates:` does), that exist."""

    def strings(value: object) -> Iterable[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for item in value.values():
                yield from strings(item)
        elif isinstance(value, list):
            for item in value:
                yield from strings(item)

    found = []
    for text in strings(yaml.safe_load(path.read_text())):
        if text.endswith((".yaml", ".yml")):
            for candidate in (path.parent / text, REPO / text):
                if candidate.is_file():
                    found.append(candidate.resolve())
                    break
    return found


def spec_files(grpo_backend: str) -> list[str]:
    """Every YAML file the chain's stages with GRPO on `grpo_backend` read at this checkout (`stage_specs` and the
    files they name, followed through), as paths relative to the repository's root, sorted."""
    seen: set[Path] = set()
    todo = [path.resolve() for path in stage_specs(grpo_backend)]
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo.extend(referenced(path))
    return sorted(str(path.relative_to(REPO)) for path in seen)


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
    """What differs in the chain's inputs with GRPO on `grpo_backend` between `commit` and `head`: each spec file
    (`spec_files` at this checkout) whose parsed YAML differs or that `commit` lacks, then each changed lock entry
    (`lock_changes`). Empty when the two ran the same chain.

    Raises:
        SystemExit: this clone does not have `commit`.
    """
    for name in (commit, head):
        if subprocess.run(["git", "cat-file", "-e", name], cwd=REPO, capture_output=True).returncode != 0:
            raise SystemExit(f"--add: cannot compare with commit {name}: this clone does not have it")
    changed = []
    for path in spec_files(grpo_backend):
        before, after = at(commit, path), at(head, path)
        if before is None or after is None:
            if before != after:
                changed.append(path + (" (added since)" if before is None else " (removed since)"))
        elif yaml.safe_load(before) != yaml.safe_load(after):
            changed.append(path)
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
