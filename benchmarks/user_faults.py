"""What the user-fault detectors change in `ctu eval`'s figures, on a constructed fault: a policy that makes no
mistake, and a customer that in one conversation in five agrees to the write and hangs up before it runs
(tau2-bench issue #182's fault), evaluated tau2's way and with each `environment.user_faults.action`.

Run: `uv run python benchmarks/user_faults.py [--samples N]`.

There is no LLM customer on this machine, so both ends are scripted OpenAI-compatible servers on 127.0.0.1 (the
tests' `ScriptedOpenAIServer`, with `tests/support/hasty_customer.py`'s fault): the policy plays retail task 0's gold actions with native tool calls, asking the
customer to confirm before its write, as tau2's retail policy requires; the customer gives its order, zip code
and name, agrees to every confirmation, and in its reply to every fifth request to confirm (the 1st, 6th, ...)
adds tau2's ``###STOP###``. Each row is one `ctu eval SPEC --endpoint URL` process over `--samples` samples of
the task, as a user runs it; its figures are read from the `eval.json` it writes. The table is recorded in
`benchmarks/results/user_faults.json`, from which docs/running.md's table is generated.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from machine import reference_loop_seconds
from results import record

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.support.hasty_customer import HastyCustomer, confirming_turns  # noqa: E402
from tests.support.openai_server import Answer, ScriptedOpenAIServer  # noqa: E402

ROWS = {
    "tau2's way (no detector)": None,
    "`stop_before_write`, `exclude`": "exclude",
    "`stop_before_write`, `retry`": "retry",
    "`stop_before_write`, `keep`": "keep",
}
"""Each row's `user_faults.action` (None: no detector, as tau2 scores)."""


class ConfirmingPolicy:
    """Retail task 0's gold replay with a request to confirm before the write (`confirming_turns`), as native tool
    calls: the answer to a request is the turn whose index is the assistant messages in it, less tau2's greeting."""

    def __init__(self) -> None:
        self.turns = confirming_turns()

    def __call__(self, body: dict[str, Any]) -> Answer:
        played = sum(message["role"] == "assistant" for message in body["messages"]) - 1
        turn = self.turns[min(played, len(self.turns) - 1)]
        calls = [{"id": f"c{played}_{i}", "type": "function",
                  "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}
                 for i, call in enumerate(turn.tool_calls)]
        return Answer(content=turn.content or None, tool_calls=calls or None)


def spec(folder: Path, customer_url: str, action: str | None, samples: int) -> Path:
    """A spec evaluating retail task 0 (`samples` samples) with the scripted customer at `customer_url` and, unless
    `action` is None, the `stop_before_write` detector with that action; its file."""
    faults = {"detectors": ["stop_before_write"], "action": action} if action else {"detectors": []}
    data = {
        "extends": str(REPO / "specs" / "smoke.yaml"),
        "experiment": {"output_dir": str(folder / "runs")},
        "data": {"train": [{"domain": "airline", "split": "train", "max_tasks": 1}],
                 "test_sets": {"retail": {"domain": "retail", "split": "train", "max_tasks": 1}}},
        "environment": {"max_turns": 20, "user_faults": faults,
                        "user_simulator": {"type": "llm", "model": "customer", "base_url": customer_url, "api_key_env": None}},
        "rollout": {"native_tool_calling": True, "eval_n_samples_per_prompt": samples},
    }
    path = folder / f"{action or 'tau2'}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def evaluate(spec_file: Path, policy_url: str, out: Path) -> dict[str, Any]:
    """`ctu eval` of the policy at `policy_url` in a new process; the ``overall`` figures of its eval.json.

    Raises:
        RuntimeError: the command failed.
    """
    command = [sys.executable, "-m", "ctu.cli", "eval", str(spec_file), "--endpoint", policy_url, "--model", "gold",
               "--out", str(out), "--no-progress"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    if result.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return json.loads((out / "eval.json").read_text())["overall"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    loop = reference_loop_seconds()
    print(f"machine reference loop: {loop:.3f} s; python {sys.version.split()[0]}")
    k = str(args.samples)
    columns = ["user faults", "episodes scored", "flagged", "replays", "success", f"pass^{k}"]
    rows, figures = [], {}
    with tempfile.TemporaryDirectory(prefix="ctu-user-faults-") as folder, \
            ScriptedOpenAIServer(default=ConfirmingPolicy()) as policy:
        for label, action in ROWS.items():
            with ScriptedOpenAIServer(default=HastyCustomer()) as customer:  # each row's customer counts afresh
                found = evaluate(spec(Path(folder), customer.base_url, action, args.samples), policy.base_url,
                                 Path(folder) / f"eval-{action or 'tau2'}")
            figures[action or "tau2"] = found
            scored = found["episodes"] - found.get("infra_errors", 0)
            rows.append([label, f"{scored} of {found['episodes']}", str(found.get("user_faults", 0)),
                         str(found.get("user_fault_retries", 0)), f"{found['success_rate']:.3f}",
                         f"{found['pass^k'][k]:.3f}" if k in found["pass^k"] else "-"])
            print(" | ".join(rows[-1]))
    record("user_faults", {"samples": args.samples, "rows": figures}, {"columns": columns, "rows": rows}, loop,
           note=f"`ctu eval` of retail task 0, {args.samples} samples, a policy on 127.0.0.1 that makes no mistake and a "
                "customer on 127.0.0.1 that hangs up right after agreeing to the write in one conversation in five; "
                "success over the episodes scored (an excluded one is an infrastructure error); pass^k up to the fewest "
                "episodes a task kept.")


if __name__ == "__main__":
    main()
