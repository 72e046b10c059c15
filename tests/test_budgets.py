"""The house's size budgets, read from the source (ctu/ and tau_bench_env/): a budget change is a visible diff here.

- no module over `MAX_FILE_LINES` lines, no function over `MAX_FUNCTION_LINES` (its signature and docstring
  included): a module holds one idea, a function one step;
- `Any` on fewer than `MAX_ANY_LINES` lines, and none in the modules users code against (`CONTRACT_MODULES`: the
  components' contracts, the rollout's, the sampler's and the backend's);
- no import cycle between modules (lazy imports inside functions included; imports only the type checker runs,
  under ``if TYPE_CHECKING:``, left out).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.support.import_graph import cycles

ROOT = Path(__file__).resolve().parent.parent
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_ANY_LINES = 150
CONTRACT_MODULES = (
    "ctu/rollout/records.py", "ctu/rollout/requests.py", "ctu/rollout/sampling.py", "ctu/runners/backend.py",
    "ctu/spec/backend_rules.py", "ctu/components/chat_templates/base.py", "ctu/components/generators/base.py",
    "ctu/components/judges/base.py", "ctu/components/parsers/base.py", "ctu/components/rewards/base.py",
    "ctu/components/task_generators/base.py", "ctu/components/trackers/base.py",
    "ctu/components/user_fault_detectors/base.py", "ctu/components/user_simulators/base.py",
    "tau_bench_env/interfaces.py",
)


def sources() -> dict[str, Path]:
    """Every module of ctu and tau_bench_env by dotted name."""
    found = {}
    for path in sorted([*ROOT.glob("ctu/**/*.py"), *ROOT.glob("tau_bench_env/**/*.py")]):
        relative = path.relative_to(ROOT).with_suffix("")
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        found[".".join(parts)] = path
    return found


def test_no_module_or_function_is_over_its_budget():
    long_files, long_functions = [], []
    for path in sources().values():
        text = path.read_text()
        if len(text.splitlines()) > MAX_FILE_LINES:
            long_files.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long_functions.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines} lines")
    assert long_files == [] and long_functions == []


def any_lines(path: Path) -> set[int]:
    """The lines of `path` whose code names `typing.Any`."""
    return {node.lineno for node in ast.walk(ast.parse(path.read_text()))
            if (isinstance(node, ast.Name) and node.id == "Any") or (isinstance(node, ast.Attribute) and node.attr == "Any")}


def test_any_stays_under_its_budget_and_off_the_contracts():
    counts = {str(path.relative_to(ROOT)): len(any_lines(path)) for path in sources().values()}
    assert sum(counts.values()) < MAX_ANY_LINES, sorted(counts.items(), key=lambda item: -item[1])[:10]
    assert {module: counts[module] for module in CONTRACT_MODULES if counts[module]} == {}


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Ids of the nodes under ``if TYPE_CHECKING:``."""
    return {id(sub) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for sub in ast.walk(node)}


def test_no_import_cycle_between_modules():
    modules = sources()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        skipped = _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):  # a package's own __init__
                    graph[name].add(target)

    assert cycles(graph) == []
