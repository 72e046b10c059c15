"""`ctu eval` with user faults reports success both ways: with the flagged episodes left out, and as tau2 scores
them."""

from __future__ import annotations

from rich.console import Console

from ctu.evaluation.report import figures, report_table, summarize


def line(task: str, reward: float, fault: str | None = None, excluded: bool = False, infra: str | None = None,
         retries: int = 0) -> dict:
    return {"test_set": "retail", "domain": "retail", "task_id": task, "sample": 0, "raw_reward": reward,
            "reward": 0.0 if excluded or infra else reward, "policy_turns": 3, "termination": "user_stop",
            "user_fault": fault, "user_fault_kind": fault and fault.split(":")[0], "user_fault_retries": retries,
            "infra_error": infra or (f"user fault: {fault}" if excluded else None)}


def test_success_is_reported_with_faults_left_out_and_as_tau2_scores_them():
    fault = "stop_before_write: the user stopped before exchange_delivered_order_items ran"
    excluded = [line("0", 1.0), line("1", 1.0), line("2", 0.0), line("3", 0.0, fault, excluded=True),
                line("4", 1.0, infra="user simulator: endpoint down")]
    found = figures(excluded)
    assert found["infra_errors"] == 2 and found["user_faults"] == 1 and found["user_faults_by_kind"] == {"stop_before_write": 1}
    assert "user_fault_retries" not in found
    assert found["success_rate"] == found["success_rate_without_faults"] == 2 / 3
    assert found["success_rate_tau2"] == 2 / 4  # the faulted episode counts, the outage does not
    kept = figures([line("0", 1.0), line("3", 0.0, fault)])  # action keep: flagged, scored
    assert kept["success_rate"] == kept["success_rate_tau2"] == 0.5 and kept["success_rate_without_faults"] == 1.0
    assert "user_faults" not in figures([line("0", 1.0)])
    replayed = figures([line("0", 1.0, retries=2), line("1", 1.0)])  # action retry: the replays are counted
    assert replayed["user_fault_retries"] == 2 and "user_faults" not in replayed
    console = Console(width=80, record=True)
    console.print(report_table({"spec": "s", "policy": "p", **summarize(excluded, 1)}))
    text = console.export_text()
    assert "user faults" in text and "success, faults out" in text and "success, tau2's way" in text
    assert "user-fault replays" not in text
    console = Console(width=80, record=True)
    console.print(report_table({"spec": "s", "policy": "p", **summarize([line("0", 1.0)], 1)}))
    assert "user faults" not in console.export_text()
    console = Console(width=80, record=True)
    console.print(report_table({"spec": "s", "policy": "p", **summarize([line("0", 1.0, retries=2)], 1)}))
    assert "user-fault replays" in console.export_text()
