"""`library`: the smallest complete tau-bench domain, a library's loan desk with two tools (docs/domains.md).

A domain is four things: a database (a tau2 `DB`, pydantic), a toolkit over it (tau2's `ToolKitBase`; each
tool's docstring is the schema the policy sees), the policy the agent follows, and tasks with gold actions (tau2
`Task`s). tau2 scores an episode by replaying the task's gold actions on a fresh database and comparing the two.
"""

from __future__ import annotations

from pydantic import BaseModel

from ctu.components.domains import Domain
from ctu.registry import registry
from tau_bench_env.runtime import prepare

prepare()  # tau2 quiet and offline before it is imported (no loguru output, no litellm download)
from tau2.data_model.tasks import Task  # noqa: E402
from tau2.environment.db import DB  # noqa: E402
from tau2.environment.environment import Environment  # noqa: E402
from tau2.environment.toolkit import ToolKitBase, ToolType, is_tool  # noqa: E402

POLICY = "You are a library's loan desk. Find the member's loan by its book title, then renew it once if asked."


class Loan(BaseModel):
    loan_id: str
    title: str
    due: str
    renewed: bool = False


class LibraryDB(DB):
    """The library's loans, by id."""

    loans: dict[str, Loan]


def fresh_db() -> LibraryDB:
    """The database every episode starts from."""
    return LibraryDB(loans={
        "L1": Loan(loan_id="L1", title="Dune", due="2026-12-01"),
        "L2": Loan(loan_id="L2", title="Emma", due="2026-12-03"),
    })


class LibraryTools(ToolKitBase):
    """The loan desk's tools."""

    db: LibraryDB

    @is_tool(ToolType.READ)
    def find_loan(self, title: str) -> Loan:
        """The loan of a book.

        Args:
            title: The book's title, e.g. 'Dune'.
        """
        for loan in self.db.loans.values():
            if loan.title.lower() == title.strip().lower():
                return loan
        raise ValueError(f"No loan of {title!r}")

    @is_tool(ToolType.WRITE)
    def renew_loan(self, loan_id: str) -> Loan:
        """Renew a loan by two weeks; a loan is renewed once at most.

        Args:
            loan_id: The loan's id, e.g. 'L1'.
        """
        loan = self.db.loans.get(loan_id)
        if loan is None or loan.renewed:
            raise ValueError(f"Loan {loan_id} cannot be renewed")
        loan.renewed, loan.due = True, {"2026-12-01": "2026-12-15", "2026-12-03": "2026-12-17"}[loan.due]
        return loan


def renewal(task_id: str, title: str, loan_id: str) -> Task:
    """A task: a member renews the loan of `title`."""
    return Task.model_validate({
        "id": task_id,
        "user_scenario": {"instructions": {
            "domain": "library", "reason_for_call": f"You want to renew your loan of '{title}'.",
            "known_info": f"The book is '{title}'.", "task_instructions": "Ask for the renewal; confirm when asked."}},
        "evaluation_criteria": {"reward_basis": ["DB"], "actions": [
            {"action_id": f"{task_id}_0", "name": "find_loan", "arguments": {"title": title}},
            {"action_id": f"{task_id}_1", "name": "renew_loan", "arguments": {"loan_id": loan_id}}]},
    })


@registry.domains.register("library")
class Library(Domain):
    """A library's loan desk: find a loan by title, renew it (the minimal example domain)."""

    splits = ("train", "test")

    def make_environment(self) -> Environment:
        """A fresh environment: the tools over a fresh database, and the policy."""
        return Environment(domain_name="library", policy=POLICY, tools=LibraryTools(fresh_db()))

    def load_tasks(self, split: str) -> list[Task]:
        """One renewal task a split.

        Raises:
            ValueError: `split` is not one of `splits`.
        """
        if split not in self.splits:
            raise ValueError(f"domain {self.name!r} has no split {split!r}; its splits: {', '.join(self.splits)}")
        return [renewal("renew_dune", "Dune", "L1")] if split == "train" else [renewal("renew_emma", "Emma", "L2")]
