"""The figures of an evaluation, from its trajectory lines, and how they are shown: a table, ``eval.json``, a
plot, and several evaluations side by side (`ctu compare`).

Definitions (per test set, and over every test set as ``overall`` when there are several):

- ``episodes``; ``infra_errors``: episodes that ended by an infrastructure error (left out of everything else,
  as tau2 leaves failed simulations out).
- ``average_reward``: the evaluation reward chain's reward (training-only rewards are not in it; with the usual
  chain it is tau2's reward); ``outcome_reward``: tau2's own reward; ``success_rate``: episodes tau2 scored 1.
- ``pass^k`` for k = 1 .. samples per task: tau2's pass^k (`ctu.metrics.pass_hat_ks`), up to the fewest trials
  a task kept.
- ``terminations``: the fraction of episodes ending each way (``user_stop``, ``agent_stop``, ``max_turns``...).
- ``tool_error_rate``: the agent's tool calls that returned an error, per policy turn; ``parse_failure_rate``:
  policy turns whose tool call could not be parsed or that were empty, per policy turn.
- ``policy_tokens_per_episode``: tokens the policy generated (as the spec's tokenizer counts them);
  ``turns_per_episode``: policy turns.
- ``by_task``: ``{"domain/task_id": [successes, trials]}`` over the episodes without an infrastructure error: what
  `ctu compare`'s paired bootstrap resamples (`ctu.evaluation.comparison`).
- With user faults found (`environment.user_faults`): ``user_faults``, the episodes flagged, and
  ``user_faults_by_kind``, those each detector flagged; and success both ways, ``success_rate_without_faults``
  (flagged episodes left out) and ``success_rate_tau2`` (flagged episodes scored as tau2 scores them, whatever the
  spec's action).
- With episodes played again for a user fault (action ``retry``): ``user_fault_retries``, the replays.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctu.metrics import is_success, mean, pass_hat_ks

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["comparison_table", "figures", "plot_comparison", "plot_report", "report_table", "summarize"]

SHOWN = (
    ("episodes", "episodes", "{:.0f}"),
    ("infra_errors", "infra errors", "{:.0f}"),
    ("average_reward", "avg reward", "{:.3f}"),
    ("success_rate", "success", "{:.3f}"),
    ("tool_error_rate", "tool errors/turn", "{:.3f}"),
    ("parse_failure_rate", "parse failures/turn", "{:.3f}"),
    ("turns_per_episode", "turns/episode", "{:.1f}"),
    ("policy_tokens_per_episode", "tokens/episode", "{:.0f}"),
    ("user_faults", "user faults", "{:.0f}"),
    ("success_rate_without_faults", "success, faults out", "{:.3f}"),
    ("success_rate_tau2", "success, tau2's way", "{:.3f}"),
    ("user_fault_retries", "user-fault replays", "{:.0f}"),
)
"""The figures a table shows: key, column title, format. pass^k columns follow."""
ONLY_WHEN_FOUND = ("user_faults", "success_rate_without_faults", "success_rate_tau2", "user_fault_retries")
"""Figures a table shows only when some group has them (an evaluation with user faults)."""


def figures(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures (see the module docstring) of one group of trajectory lines. A figure over no episode is
    absent (e.g. every episode an infrastructure error)."""
    valid = [line for line in lines if line.get("infra_error") is None]
    result: dict[str, Any] = {"episodes": len(lines), "infra_errors": len(lines) - len(valid)}
    if not valid:
        return result
    turns = sum(int(line.get("policy_turns") or 0) for line in valid)
    by_task: dict[str, list[bool]] = defaultdict(list)
    for line in valid:
        by_task[f"{line.get('domain')}/{line['task_id']}"].append(is_success(float(line["raw_reward"])))
    terminations = Counter(str(line.get("termination")) for line in valid)
    result.update({
        "average_reward": mean(float(line["reward"]) for line in valid),
        "outcome_reward": mean(float(line["raw_reward"]) for line in valid),
        "success_rate": mean(float(is_success(float(line["raw_reward"]))) for line in valid),
        "pass^k": {str(k): value for k, value in pass_hat_ks(by_task).items()},
        "terminations": {reason: n / len(valid) for reason, n in sorted(terminations.items())},
        "tool_error_rate": sum(int(line.get("tool_errors") or 0) for line in valid) / turns if turns else 0.0,
        "parse_failure_rate": (sum(int(line.get("parse_failures") or 0) + int(line.get("empty_turns") or 0)
                                   for line in valid) / turns) if turns else 0.0,
        "turns_per_episode": mean(float(line.get("policy_turns") or 0) for line in valid),
        "policy_tokens_per_episode": mean(float(line.get("policy_tokens") or 0) for line in valid),
        "by_task": {task: [sum(results), len(results)] for task, results in sorted(by_task.items())},
    })
    faulted = [line for line in lines if line.get("user_fault")]
    if faulted:
        clean = [line for line in valid if not line.get("user_fault")]
        tau2_way = [line for line in lines if line.get("infra_error") is None or line.get("user_fault")]
        result["user_faults"] = len(faulted)
        if clean:
            result["success_rate_without_faults"] = mean(float(is_success(float(line["raw_reward"]))) for line in clean)
        result["success_rate_tau2"] = mean(float(is_success(float(line["raw_reward"]))) for line in tau2_way)
        kinds = Counter(str(line.get("user_fault_kind") or str(line["user_fault"]).split(":", 1)[0]) for line in faulted)
        result["user_faults_by_kind"] = dict(sorted(kinds.items()))
    retries = sum(int(line.get("user_fault_retries") or 0) for line in lines)
    if retries:
        result["user_fault_retries"] = retries
    return result


def policy_never_played(overall: Mapping[str, object]) -> str | None:
    """Why the figures of an evaluation (its `figures`) measure nothing of the policy although episodes finished:
    none of them reached a policy turn (e.g. each first prompt longer than the context, every episode
    ``context_overflow`` before the policy spoke), said with how the episodes ended; None when a policy turn was
    played, or when no episode finished (the infrastructure errors say why)."""
    turns, ended = overall.get("turns_per_episode"), overall.get("terminations")
    if not isinstance(turns, int | float) or turns > 0:
        return None
    how = ", ".join(f"{reason} {share:.0%}" for reason, share in ended.items()) if isinstance(ended, dict) else "unknown"
    finished = int(str(overall.get("episodes", 0))) - int(str(overall.get("infra_errors", 0)))
    return (f"none of the {finished} finished episode(s) reached a policy turn (they ended: {how}), so their success "
            "says nothing of the policy; with context_overflow, the first prompt (system prompt, tools, first user "
            "turn) does not fit model.max_model_len with rollout.max_tokens_per_turn")


def summarize(lines: list[dict[str, Any]], samples: int) -> dict[str, Any]:
    """``{"samples_per_task", "by_test_set": {name: figures}, "overall": figures}`` from an evaluation's lines
    (``overall`` pools every test set; with one test set it equals that set's figures)."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in lines:
        groups[str(line["test_set"])].append(line)
    return {"samples_per_task": samples, "by_test_set": {name: figures(group) for name, group in groups.items()},
            "overall": figures(lines)}


def read_report(file: Path) -> dict[str, Any]:
    """An ``eval.json`` `ctu eval` wrote (`summarize`'s shape, with the policy's name), read from `file`.

    Raises:
        ValueError: the file cannot be read, is not JSON, or is not an evaluation result
            (`ctu.evaluation.result_schema`; the message says what is wrong, and where).
    """
    import json

    try:
        data = json.loads(Path(file).read_text(encoding="utf-8"))
    except OSError as error:
        raise ValueError(f"cannot read {file}: {error.strerror or error}") from None
    except ValueError as error:
        raise ValueError(f"{file} is not JSON ({error})") from None
    from ctu.evaluation.result_schema import check_result

    problem = check_result(data)
    if problem is not None:
        raise ValueError(f"{file} is not a `ctu eval` result (eval.json: `policy`, `by_test_set` and `overall` "
                         f"figures): {problem}")
    return data


def _row(values: dict[str, Any], ks: list[str]) -> list[str]:
    cells = [fmt.format(values[key]) if values.get(key) is not None else "-" for key, _, fmt in SHOWN]
    return cells + [f"{values['pass^k'][k]:.3f}" if k in values.get("pass^k", {}) else "-" for k in ks]


def _ks(groups: list[dict[str, Any]]) -> list[str]:
    return sorted({k for group in groups for k in group.get("pass^k", {})}, key=int)


def report_table(report: dict[str, Any]) -> RenderableType:
    """A rich `Table` of one evaluation: a row per figure (pass^k last), a column per test set and ``overall``
    when there are several, so it stays readable in an 80-column terminal (a column per figure did not: its
    headers were cut to "epis…")."""
    from rich.table import Table

    groups = dict(report["by_test_set"])
    if len(groups) > 1:
        groups["overall"] = report["overall"]
    ks = _ks(list(groups.values()))
    table = Table(title=f"{report['spec']} · {report['policy']} · {report['samples_per_task']} sample(s) per task")
    table.add_column("figure", no_wrap=True)
    for name in groups:
        table.add_column(name, justify="right", no_wrap=True)
    rows = [_row(values, ks) for values in groups.values()]
    titles = [title for _, title, _ in SHOWN] + [f"pass^{k}" for k in ks]
    keys = [key for key, _, _ in SHOWN] + [f"pass^{k}" for k in ks]
    for index, title in enumerate(titles):
        if keys[index] in ONLY_WHEN_FOUND and not any(keys[index] in values for values in groups.values()):
            continue
        table.add_row(title, *(row[index] for row in rows))
    repeats = report.get("repeats")
    if isinstance(repeats, dict) and repeats.get("count", 1) > 1:  # `ctu.evaluation.repeats`
        table.add_section()
        spreads = [repeats["by_test_set"].get(name, {}) for name in groups]
        shown = sorted({figure for spread in spreads for figure in spread}, key=lambda f: (f != "success_rate", f))
        for figure in shown:
            title = "success" if figure == "success_rate" else figure
            cells = [spread.get(figure) for spread in spreads]
            table.add_row(f"{title}, {repeats['count']} repeats", *("-" if c is None or c["sd"] is None else
                                                                   f"{c['mean']:.3f} ± {c['sd']:.3f}" for c in cells))
            table.add_row("  95% interval", *("-" if c is None or c["low"] is None else
                                              f"[{c['low']:.3f}, {c['high']:.3f}]" for c in cells))
    return table


def comparison_table(reports: list[dict[str, Any]]) -> RenderableType:
    """Several evaluations side by side, readable in an 80-column terminal: a table per test set (``overall`` last
    when a result holds several), a row per figure and a column per evaluation; then, for each evaluation after
    the first, its success rate's difference from the first with the paired bootstrap's 95% interval and whether
    it excludes 0 (`ctu.evaluation.comparison`), and a note for test sets whose results hold different tasks."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from ctu.evaluation.comparison import differences, task_mismatches

    names: list[str] = []
    for report in reports:
        names += [name for name in report["by_test_set"] if name not in names]
    if any(len(report["by_test_set"]) > 1 for report in reports):
        names.append("overall")
    found = differences(reports, names)
    parts: list[RenderableType] = []
    for name in names:
        held = [(report, group) for report in reports
                if (group := report["overall"] if name == "overall" else report["by_test_set"].get(name)) is not None]
        ks = _ks([group for _, group in held])
        table = Table(title=f"{name}: evaluations compared")
        table.add_column("figure", no_wrap=True)
        for report, _ in held:
            table.add_column(str(report["policy"]), justify="right", overflow="fold")
        rows = [_row(group, ks) for _, group in held]
        keys = [key for key, _, _ in SHOWN] + [f"pass^{k}" for k in ks]
        for index, title in enumerate([title for _, title, _ in SHOWN] + [f"pass^{k}" for k in ks]):
            if keys[index] in ONLY_WHEN_FOUND and not any(keys[index] in group for _, group in held):
                continue
            table.add_row(title, *(row[index] for row in rows))
        here = {d.policy: d for d in found if d.test_set == name}
        if here:
            table.add_section()
            cells = [here.get(str(report["policy"])) for report, _ in held]
            table.add_row(f"success - {reports[0]['policy']}", *("" if d is None else f"{d.difference:+.3f}" for d in cells))
            table.add_row("95% interval", *("" if d is None else f"[{d.low:+.3f}, {d.high:+.3f}]" for d in cells))
            table.add_row("excludes 0", *("" if d is None else ("yes" if d.significant else "no") for d in cells))
        parts.append(table)
    if found:
        parts.append(Text("success - FIRST: the difference from the first evaluation over the tasks both\n"
                          "ran; its 95% interval from a paired bootstrap over those tasks (excludes 0: a\n"
                          "real difference at that level)"))
    for line in task_mismatches(reports):
        parts.append(Text(f"different tasks under one name: {line}", style="yellow"))
    return Group(*parts)


def _axes_for(reports: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ctu.evaluation.comparison import differences

    figure, (bars, curves) = plt.subplots(1, 2, figsize=(11, 4))
    names = sorted({name for report in reports for name in report["by_test_set"]})
    width = 0.8 / max(len(reports), 1)
    found = {(d.test_set, d.policy): d for d in differences(reports, names)} if len(reports) > 1 else {}
    for index, report in enumerate(reports):
        values = [report["by_test_set"].get(name, {}).get("success_rate", 0.0) for name in names]
        positions = [i + index * width for i in range(len(names))]
        bars.bar(positions, values, width=width, label=str(report["policy"]))
        for position, value, name in zip(positions, values, names):
            if (d := found.get((name, str(report["policy"])))) is not None:  # the paired difference from the first
                bars.annotate(f"{d.difference:+.2f}{'*' if d.significant else ''}\n[{d.low:+.2f}, {d.high:+.2f}]",
                              (position, min(value, 0.85)), ha="center", va="bottom", fontsize="x-small")
        for name in names:
            passes = report["by_test_set"].get(name, {}).get("pass^k", {})
            if passes:
                ks = sorted(passes, key=int)
                label = f"{report['policy']} · {name}" if len(reports) > 1 else name
                curves.plot([int(k) for k in ks], [passes[k] for k in ks], marker="o", label=label)
    bars.set_xticks([i + width * (len(reports) - 1) / 2 for i in range(len(names))], names)
    bars.set_ylabel("success rate")
    bars.set_ylim(0, 1)
    bars.set_title("success rate per test set" + ("\n(vs the first: difference, 95% interval; * excludes 0)" if found else ""))
    from matplotlib.ticker import MaxNLocator

    curves.xaxis.set_major_locator(MaxNLocator(integer=True))
    top_k = max((int(k) for report in reports for group in report["by_test_set"].values() for k in group.get("pass^k", {})),
                default=1)
    curves.set_xlim(0.5, top_k + 0.5)  # whole k only: with k = 1 alone matplotlib spanned 0.945-1.05
    curves.set_xlabel("k")
    curves.set_ylabel("pass^k")
    curves.set_ylim(0, 1)
    curves.set_title("pass^k")
    for axes in (bars, curves):
        axes.grid(alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize="small")
    figure.suptitle(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def plot_report(report: dict[str, Any], path: Path) -> Path:
    """``eval.png``: success rate per test set (bars) and pass^k against k (one curve per test set)."""
    _axes_for([report], path, f"{report['spec']} · {report['policy']}")
    return path


def plot_comparison(reports: list[dict[str, Any]], path: Path) -> Path:
    """The same two panels with one bar and one set of curves per evaluation."""
    _axes_for(reports, path, "evaluations compared")
    return path
