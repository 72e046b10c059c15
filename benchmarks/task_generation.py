"""What `ctu tasks generate` costs and keeps: the built-in template sets run through the verification, and tau2's
own training tasks offered to the verification as proposals.

Run: `uv run python benchmarks/task_generation.py [--mock N] [--retail N] [--seed S]`.

For each template set (tau2's `mock` domain; two retail intents) it runs `ctu tasks generate` in-process into a
temporary folder and prints the tasks proposed, kept and rejected by reason, the wall time and the seconds per
verified task. Then it offers tau2's own retail training tasks (74) to the same verification as if a generator had
proposed them (against retail's test split and each other, with the smoke job's limits widened to 30 turns and 20
errors) and prints what it rejects by reason: what the checks say of tasks written by people. Figures are this
machine's (`machine.py` prints its reference loop); the generations' table is recorded in
`benchmarks/results/task_generation.json`, from which docs/training-tasks.md's table is generated.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml
from machine import reference_loop_seconds
from results import record

REPO = Path(__file__).resolve().parents[1]


def generate(domain: str, count: int, seed: int, out: Path) -> list[str]:
    """Generate `count` tasks of `domain` from its built-in template set into `out`; print and return the table
    row (generation, proposed, kept, rejected, wall time, per verified task)."""
    from ctu.spec import load_spec
    from ctu.tasks.generate import generate_tasks

    spec_file = out / f"{domain}.yaml"
    spec_file.write_text(yaml.safe_dump({"extends": str(REPO / "specs" / "smoke.yaml"), "environment": {"max_turns": 10},
                                         "task_generation": {"domain": domain, "count": count, "seed": seed,
                                                             "generator": {"type": "template", "templates": domain}}}))
    spec = load_spec(spec_file).spec
    started = time.perf_counter()
    result = generate_tasks(spec, out / domain)
    seconds = time.perf_counter() - started
    rejected = dict(result.rejected.most_common()) or "none"
    print(f"template {domain:6s}: {result.proposed} proposed, {result.kept} kept, rejected {rejected}; "
          f"{seconds:.1f} s, {seconds / max(result.kept, 1) * 1000:.0f} ms per verified task")
    reasons = ", ".join(f"{reason} {n}" for reason, n in result.rejected.most_common()) or "none"
    return [f"`template` `{domain}`, {count} tasks", str(result.proposed), str(result.kept), reasons, f"{seconds:.1f} s",
            f"{seconds / max(result.kept, 1) * 1000:.0f} ms"]


def tau2_tasks_as_proposals() -> None:
    from ctu.components.domains import build_domain
    from ctu.components.task_generators.base import Proposal
    from ctu.tasks.verify import TaskVerifier

    retail = build_domain("retail", {})
    verifier = TaskVerifier(retail, 30, 20, retail.tasks("test"))
    reasons: collections.Counter[str] = collections.Counter()
    details = collections.defaultdict(list)
    started = time.perf_counter()
    for task in retail.tasks("train"):
        raw = task.model_dump(mode="json", exclude_none=True)
        verdict = asyncio.run(verifier.verify(Proposal(raw), str(task.id)))
        reasons[verdict.reason or "kept"] += 1
        if verdict.reason:
            details[verdict.reason].append(f"{task.id}: {verdict.detail[:110]}")
    seconds = time.perf_counter() - started
    print(f"tau2 retail train (74) as proposals: {dict(reasons.most_common())}; {seconds:.1f} s")
    for reason, lines in details.items():
        print(f"  {reason}: e.g. {lines[0]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mock", type=int, default=200)
    parser.add_argument("--retail", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    loop = reference_loop_seconds()
    print(f"machine reference loop: {loop:.3f} s; python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as folder:
        rows = [generate("mock", args.mock, args.seed, Path(folder)), generate("retail", args.retail, args.seed, Path(folder))]
        print(json.dumps(json.loads((Path(folder) / "retail" / "provenance.json").read_text())["this_call"]))
    columns = ["generation", "proposed", "kept", "rejected", "wall time", "per verified task"]
    record("task_generation", {"rows": [dict(zip(columns, row, strict=True)) for row in rows]},
           {"columns": columns, "rows": rows}, loop)
    tau2_tasks_as_proposals()


if __name__ == "__main__":
    main()
