"""The chain check's report (`benchmarks/chain_check.py`), from the evaluation folders `ctu eval` wrote and the GRPO
runs' metrics: held-out success and its paired differences, the held-out episodes by outcome, by template and as GRPO
changed them, the verdict, the docs' tables and the plot. Nothing here runs a stage."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
from learning_check import CONTROL_LR
from machine import REFERENCE_LOOP_S
from results import UNCOMMITTED, missing

from ctu.components.task_generators.template import written_by
from ctu.evaluation.comparison import pair_tasks, paired_bootstrap, report_contents
from ctu.jsonl import text_lines
from ctu.metrics import is_success
from ctu.runners.rundir import RunDir

TEST_SET = "heldout"
"""The chain's test set: the held-out tasks (split `validation`), never in the SFT data, never trained on."""
GOAL_S = 30 * 60
"""The check's goal for one chain's wall time, normalised to the goals' day's machine (`machine.normalised`)."""
POLICIES = ("base", "SFT", "GRPO", "control", "shuffled")
"""The policies each chain evaluates, in the order its stages make them: the control is GRPO at a learning rate of
`CONTROL_LR` (the pipeline adds nothing by itself), shuffled is GRPO with each group's rewards shuffled among its
episodes (`algorithm.shuffle_rewards`: the gain is the reward's doing)."""
GRPO_STAGES = ("GRPO", "control", "shuffled")
"""The policies trained by GRPO from the SFT policy, each a run of its own."""


def report_of(folder: Path) -> dict:
    """An evaluation's ``eval.json``."""
    return json.loads((folder / "eval.json").read_text())


def success(report: dict) -> float:
    """The held-out success rate of an evaluation (every episode of the test set)."""
    return float(report["by_test_set"][TEST_SET]["success_rate"])


def difference(baseline: dict, other: dict) -> dict:
    """`other`'s held-out success minus `baseline`'s over the tasks `ctu compare` would compare (`pair_tasks`: the
    same task with the same recorded content), with its bootstrap 95% interval, and what was left out
    (``left_out``, only when something was)."""
    first, second = baseline["by_test_set"][TEST_SET]["by_task"], other["by_test_set"][TEST_SET]["by_task"]
    pairing = pair_tasks(first, second, report_contents(baseline, TEST_SET), report_contents(other, TEST_SET))
    result = paired_bootstrap(first, second, tasks=pairing.compared)
    if result is None:
        raise SystemExit(f"the evaluations share no held-out task: {pairing.left_out()}")
    tasks, mean, low, high = result
    return {"tasks": tasks, "difference": mean, "ci95": [low, high], **({"left_out": pairing.left_out()} if pairing.left_out() else {})}


FAILURE_KINDS = ("success", "wrong id", "wrong status", "wrong tool", "no call", "garbled call", "other")
"""What became of a held-out episode (`failure_kinds`)."""


def held_out_lines(folder: Path) -> list[dict]:
    """The trajectory lines of the held-out test set in the evaluation in `folder` (its trajectories.jsonl)."""
    lines = (json.loads(text) for text in text_lines(folder / "trajectories.jsonl"))
    return [line for line in lines if line.get("test_set") == TEST_SET]


def failure_kinds(folder: Path, tasks_file: Path) -> dict[str, int]:
    """The held-out episodes of the evaluation in `folder`, counted by what became of them against their task's gold
    write (from `tasks_file`): success; a call of `update_task_status` with a wrong task id (``wrong id``) or the
    right id and a wrong status (``wrong status``); tool calls, none of them `update_task_status` (``wrong tool``);
    no well-formed call, with a parse failure (``garbled call``) or without (``no call``: the episode ended first);
    ``other`` (the right write among others that broke the outcome)."""
    from ctu.components.parsers.hermes import HermesParser

    parser = HermesParser()  # the chain's policy writes its calls as text (the spec's `hermes` parser)
    gold = {str(task["id"]): task["evaluation_criteria"]["actions"][0]["arguments"]
            for task in json.loads(tasks_file.read_text())}
    counts = dict.fromkeys(FAILURE_KINDS, 0)
    for line in held_out_lines(folder):
        calls = [call for message in line["messages"] if message.get("role") == "assistant" and message.get("content")
                 for call in parser.parse(message["content"]).tool_calls]
        writes = [call.arguments for call in calls if call.name == "update_task_status"]
        want = gold[str(line["task_id"])]
        if is_success(float(line["raw_reward"])):  # tau2's own success, whatever shaping the run's reward adds
            kind = "success"
        elif not calls:
            kind = "garbled call" if line.get("parse_failures") else "no call"
        elif not writes:
            kind = "wrong tool"
        elif not any(write.get("task_id") == want["task_id"] for write in writes):
            kind = "wrong id"
        elif not any(write == want for write in writes):
            kind = "wrong status"
        else:
            kind = "other"
        counts[kind] += 1
    return counts


def changed_episodes(baseline: Path, other: Path) -> dict[str, int]:
    """How the held-out episodes of the evaluation in `other` differ from those in `baseline` (two `ctu eval`
    folders of the same tasks), each episode paired with its namesake by (task id, sample): ``episodes`` paired,
    ``changed`` (any of the policy's turns differs), ``to_success`` and ``from_success`` (by tau2's own success).
    Each task's sample k is seeded alike in both evaluations (`ctu.rollout.generator.episode_seed`), so an episode
    that did not change is one the policy's update did not reach."""
    def episodes(folder: Path) -> dict[tuple[str, int], dict]:
        return {(str(line["task_id"]), int(line["sample"])): line for line in held_out_lines(folder)}

    def turns(line: dict) -> list:
        return [message.get("content") for message in line["messages"] if message.get("role") == "assistant"]

    before, after = episodes(baseline), episodes(other)
    paired = [(before[key], after[key]) for key in before if key in after]
    changed = [(old, new) for old, new in paired if turns(old) != turns(new)]
    succeeded = [(is_success(float(old["raw_reward"])), is_success(float(new["raw_reward"]))) for old, new in changed]
    return {"episodes": len(paired), "changed": len(changed), "to_success": sum(new and not old for old, new in succeeded),
            "from_success": sum(old and not new for old, new in succeeded)}


def step_entropy(run_dir: Path) -> dict[int, float]:
    """The policy's mean token entropy (nats) at each training step of the run in `run_dir`, from its
    ``metrics.jsonl`` (``policy/policy_entropy``; a step without it left out; {} without the file): a GRPO run whose
    entropy climbs step after step while its success does not is drifting where the reward does not look
    (docs/recipes.md)."""
    return {line["step"]: float(line["policy/policy_entropy"]) for line in RunDir(run_dir).metric_lines()
            if "policy/policy_entropy" in line}


def template_of(task: dict) -> str:
    """The name of the template a generated task came from (`written_by` its ``description.purpose``); the purpose
    itself (or ``-``) for a task of another generator."""
    purpose = (task.get("description") or {}).get("purpose") or "-"
    written = written_by(purpose)
    return written[1] if written is not None else purpose


def success_by_template(folder: Path, tasks_dir: Path) -> dict[str, dict]:
    """The held-out episodes of the evaluation in `folder` by their task's template (`template_of`), with how many
    tasks of that template the ``train`` split (the SFT data's) of the task set in `tasks_dir` holds (tasks.json,
    split_tasks.json): {template: {"sft_tasks", "episodes", "success"}}, `success` tau2's success rate; templates
    with no held-out episode left out."""
    tasks = {str(task["id"]): task for task in json.loads((tasks_dir / "tasks.json").read_text())}
    train = json.loads((tasks_dir / "split_tasks.json").read_text())["train"]
    taught = Counter(template_of(tasks[str(task_id)]) for task_id in train)
    outcomes: dict[str, list[bool]] = {}
    for line in held_out_lines(folder):
        outcomes.setdefault(template_of(tasks[str(line["task_id"])]), []).append(is_success(float(line["raw_reward"])))
    return {name: {"sft_tasks": taught.get(name, 0), "episodes": len(found), "success": float(np.mean(found))}
            for name, found in sorted(outcomes.items())}


def interval(report: dict, key: str) -> str:
    """A difference of `report` (``sft_minus_base``, ``grpo_minus_sft``, ``control_minus_sft``,
    ``shuffled_minus_sft``, ``grpo_minus_shuffled``) with its 95% interval, as the tables write it:
    ``+0.023 [+0.010, +0.038]``; "not measured" for a seed recorded before the shuffled-reward control."""
    if key not in report:
        return "not measured"
    low, high = report[key]["ci95"]
    return f"{report[key]['difference']:+.3f} [{low:+.3f}, {high:+.3f}]"


def grpo_added(report: dict) -> bool:
    """Whether GRPO's held-out success over SFT's has its interval above zero."""
    return bool(report["grpo_minus_sft"]["ci95"][0] > 0)


def control_held(report: dict) -> bool:
    """Whether the control's held-out success over SFT's has an interval holding zero."""
    low, high = report["control_minus_sft"]["ci95"]
    return bool(low <= 0 <= high)


def reward_did_it(report: dict) -> bool:
    """Whether GRPO's held-out success over the shuffled-reward control's has its interval above zero (False for a
    seed recorded before that control)."""
    return "grpo_minus_shuffled" in report and bool(report["grpo_minus_shuffled"]["ci95"][0] > 0)


def passed(report: dict) -> bool:
    """The check's verdict: SFT's interval over the base model, GRPO's over SFT and GRPO's over the shuffled-reward
    control lie above zero, and the lr control's interval over SFT holds zero."""
    return report["sft_minus_base"]["ci95"][0] > 0 and grpo_added(report) and control_held(report) and reward_did_it(report)


def table(report: dict) -> dict[str, list]:
    """The docs' table of a report (`results.record`): held-out success after each stage, the differences with
    their intervals, the wall times."""
    success = report["success"]
    total, normal = report["wall_seconds_total"] / 60, report["wall_seconds_total_normalised"] / 60
    table = {"columns": ["", "base", "SFT", "GRPO after SFT", f"control (GRPO at lr {CONTROL_LR:g})", "shuffled-reward control"],
             "rows": [["held-out tau2 success", *(f"{success[name]:.3f}" for name in POLICIES)],
                      ["difference, paired bootstrap 95% interval", "", f"{interval(report, 'sft_minus_base')} vs base",
                       f"{interval(report, 'grpo_minus_sft')} vs SFT; {interval(report, 'grpo_minus_shuffled')} vs shuffled",
                       f"{interval(report, 'control_minus_sft')} vs SFT", f"{interval(report, 'shuffled_minus_sft')} vs SFT"],
                      ["held-out episodes by outcome", *(outcomes(report, name) for name in POLICIES)],
                      ["wall time of the check (normalised)", f"{total:.1f} min ({normal:.1f} min)", "", "", "", ""]]}
    if report["wall_seconds_total_normalised"] > GOAL_S:
        missing(table, 3, 1)
    return table


def outcomes(report: dict, policy: str) -> str:
    """A policy's held-out episodes by outcome (`failure_kinds`), the kinds that occurred, most first."""
    counts = sorted(((count, kind) for kind, count in report["outcomes"][policy].items() if count), reverse=True)
    return ", ".join(f"{kind} {count}" for count, kind in counts)


def seeds_table(reports: list[dict]) -> dict[str, list]:
    """The docs' table of a run over several seeds: each seed's held-out success after each stage, GRPO's and the
    control's difference from SFT with their intervals and verdicts, its wall time, and the commit it ran (seeds
    recorded by separate runs: `chain_check.py --add`)."""
    rows: list[list[str]] = []
    table: dict[str, list] = {"columns": ["seed", "base", "SFT", "GRPO", "control", "shuffled",
                                          "GRPO - SFT, paired 95% interval", "GRPO - shuffled", "control - SFT",
                                          "wall time (normalised)", "commit"], "rows": rows}
    for report in reports:
        success = report["success"]
        rows.append([str(report["seed"]), *(f"{success[name]:.3f}" if name in success else "-" for name in POLICIES),
                     interval(report, "grpo_minus_sft") + (": above zero" if grpo_added(report) else ""),
                     interval(report, "grpo_minus_shuffled") + (": above zero" if reward_did_it(report) else ""),
                     interval(report, "control_minus_sft") + (": holds zero" if control_held(report) else ""),
                     f"{report['wall_seconds_total'] / 60:.1f} min ({report['wall_seconds_total_normalised'] / 60:.1f} min)",
                     (report.get("commit") or "?")[:7] + (UNCOMMITTED if report.get("uncommitted_changes") else "")])
        for column, missed in ((6, not grpo_added(report)), (7, not reward_did_it(report)), (8, not control_held(report)),
                               (9, report["wall_seconds_total_normalised"] > GOAL_S)):
            if missed:
                missing(table, len(rows) - 1, column)
    return table


def plot(report: dict, path: Path) -> None:
    """Held-out success of each policy (left) and the GRPO and control runs' training success per step (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    values = [report["success"][name] for name in POLICIES]
    left.bar(POLICIES, values, color=["#999999", "#4c72b0", "#55a868", "#c44e52", "#8172b2"])
    for x, value in enumerate(values):
        left.text(x, value + 0.01, f"{value:.3f}", ha="center", va="bottom", fontsize=9)
    left.set_ylim(0, max(1.0, max(values) + 0.1))
    left.set_ylabel("tau2 success, held-out tasks")
    left.set_title("Held-out success after each stage")
    for label, key, color in (("GRPO", "grpo_steps", "#55a868"), (f"control (lr {CONTROL_LR:g})", "control_steps", "#c44e52"),
                              ("shuffled rewards", "shuffled_steps", "#8172b2")):
        steps = report[key]
        right.plot([s["step"] for s in steps], [s["mean_success"] for s in steps], marker="o", markersize=3, color=color, label=label)
    right.xaxis.set_major_locator(MaxNLocator(integer=True))
    right.set_xlabel("GRPO step")
    right.set_ylabel("training success (mean of the step)")
    right.set_title("GRPO from the SFT policy")
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)



def summary(report: dict) -> str:
    """The console's account of one chain's report: held-out success and the differences with their intervals, the
    episodes by outcome, by template (when the held-out tasks come from more than one), GRPO's and the control's
    training success per step, the wall times and the verdict."""
    lines = [f"the chain's learning check: {report['output']}  ({report['held_out_tasks']} held-out tasks; seed "
             f"{'of the specs' if report['seed'] is None else report['seed']})",
             "held-out tau2 success: " + ", ".join(f"{name} {report['success'][name]:.3f}" for name in POLICIES)]
    for key, label in (("sft_minus_base", "SFT - base"), ("grpo_minus_sft", "GRPO - SFT"), ("control_minus_sft", "control - SFT"),
                       ("shuffled_minus_sft", "shuffled - SFT"), ("grpo_minus_shuffled", "GRPO - shuffled")):
        low, high = report[key]["ci95"]
        lines.append(f"{label:15} {report[key]['difference']:+.3f}, paired bootstrap 95% interval [{low:+.3f}, {high:+.3f}]")
    lines.append("held-out episodes by outcome: " + "; ".join(f"{name} {outcomes(report, name)}" for name in POLICIES))
    templates = report["success_by_template"][POLICIES[0]]
    if len(templates) > 1:
        lines.append("held-out success by template (its SFT tasks, held-out episodes):")
        lines += [f"  {name} ({found['sft_tasks']}, {found['episodes']}): " + ", ".join(
                  f"{policy} {report['success_by_template'][policy][name]['success']:.3f}" for policy in POLICIES)
                  for name, found in templates.items()]
    if "grpo_changed" in report:
        changed = report["grpo_changed"]
        lines.append(f"held-out episodes GRPO changed: {changed['changed']} of {changed['episodes']}, "
                     f"{changed['to_success']} to a success, {changed['from_success']} from one")
    lines.append("GRPO training success per step: " + " ".join(f"{s['mean_success']:.2f}" for s in report["grpo_steps"]))
    if report["grpo_steps"] and "entropy" in report["grpo_steps"][0]:
        lines.append("GRPO policy entropy per step: " + " ".join(f"{s['entropy']:.3f}" for s in report["grpo_steps"]))
    lines.append("control training success per step: " + " ".join(f"{s['mean_success']:.2f}" for s in report["control_steps"]))
    lines.append("shuffled-reward control's training success per step (its episodes' own rewards): "
                 + " ".join(f"{s['mean_success']:.2f}" for s in report["shuffled_steps"]))
    if report["wall_seconds"]:
        lines.append("wall: " + ", ".join(f"{name} {seconds / 60:.1f} min" for name, seconds in report["wall_seconds"].items()))
    lines.append(f"total {report['wall_seconds_total'] / 60:.1f} min; reference loop {report['reference_loop_seconds']:.2f} s, "
                 f"normalised to {REFERENCE_LOOP_S:.2f} s: {report['wall_seconds_total_normalised'] / 60:.1f} min "
                 f"(goal <= {GOAL_S / 60:.0f} min)")
    lines.append("PASSED: SFT's interval over the base model and GRPO's over SFT and over the shuffled-reward control lie "
                 "above zero, and the lr control's holds zero" if report["passed"] else
                 "FAILED: SFT's interval over the base model or GRPO's over SFT or over the shuffled-reward control does not "
                 "lie above zero, or the lr control's excludes zero")
    return "\n".join(lines)
