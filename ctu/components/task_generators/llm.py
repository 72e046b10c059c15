"""`llm`: tasks proposed by an LLM on an OpenAI-compatible endpoint, from what the domain's agent is given.

Each request shows the model the domain's policy, its tool schemas, a seeded sample of its database records (ids
that exist) and a few example tasks of its training split, and asks for tasks in tau2's format as JSON. Nothing it
answers is trusted: the pipeline verifies every task (`ctu.tasks.verify`) and counts each rejection by reason.
Prompting with policy, tools, records and examples follows CTU-Agent-v0's ``tau_bench/task_generator.py`` (which
generated its training tasks with gpt-4o, unverified); the JSON answer format is tau2's task format.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import Field

from ctu.components.endpoint import ChatEndpoint, OpenAIEndpointParams
from ctu.components.task_generators.base import GenerationContext, Proposal

INSTRUCTIONS = """You write training tasks for a customer-service agent in the `{domain}` domain, in tau2-bench's \
task format. A task is a customer's situation (`user_scenario`) and the exact tool calls a correct agent makes \
(`evaluation_criteria.actions`), in order, including the lookups that authenticate the customer. Every id and \
value in an action must come from the database records shown; every action must succeed and follow the policy; \
at least one action must change the database. The scenario must name the customer the actions are for and give \
them everything the agent must ask for; it must not mention tool names.

Answer with JSON only: {{"tasks": [TASK, ...]}} with {count} task(s), each
{{"user_scenario": {{"persona": str, "instructions": {{"domain": "{domain}", "reason_for_call": str, \
"known_info": str, "unknown_info": str, "task_instructions": str}}}}, "evaluation_criteria": {{"actions": \
[{{"action_id": str, "requestor": "assistant", "name": TOOL, "arguments": {{...}}}}], "reward_basis": ["DB"]}}}}

# Policy
{policy}

# Tools
{tools}

# Database records (a sample)
{records}

# Example tasks
{examples}"""

RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"tasks": {"type": "array", "items": {
        "type": "object",
        "properties": {"user_scenario": {"type": "object"}, "evaluation_criteria": {"type": "object"}},
        "required": ["user_scenario", "evaluation_criteria"],
    }}},
    "required": ["tasks"],
}
"""The answer's shape, sent as OpenAI's ``response_format`` (``json_schema``, not strict) where
`structured_output` is on; the verification checks the rest."""

FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


class LLMTaskGenerator:
    """Tasks proposed by an LLM on an OpenAI-compatible endpoint from the domain's policy, tool schemas, a seeded
    sample of database records and example tasks (retried like every endpoint; a malformed answer is a rejection)."""

    class Params(OpenAIEndpointParams):
        temperature: float = Field(1.0, ge=0.0, le=2.0)
        """Sampling temperature (high: proposals should differ)."""
        tasks_per_request: int = Field(1, ge=1, le=20)
        """Tasks asked for in one request."""
        records_per_table: int = Field(3, ge=0, le=50)
        """Database records shown per table (seeded sample)."""
        examples: int = Field(2, ge=0, le=20)
        """Example tasks of the domain's training split shown (seeded sample)."""
        structured_output: bool = True
        """Send OpenAI's `response_format` with a JSON schema (turn off for an endpoint that refuses it)."""
        max_tokens: int = Field(4096, ge=1)
        """Longest answer, in tokens."""
        policy_chars: int = Field(20_000, ge=0)
        """The policy is cut to this many characters."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self.endpoint = ChatEndpoint(params)

    def prompt(self, context: GenerationContext) -> str:
        """The request's text for `context` (its records and examples drawn with `context.rng()`)."""
        rng = context.rng()
        database = context.domain.base_database
        records = {}
        for table, rows in sorted(database.tables.items()):
            keys = sorted(rows)
            chosen = rng.sample(keys, min(self.params.records_per_table, len(keys)))
            records[table] = {key: _dumped(rows[key]) for key in chosen}
        shown = rng.sample(context.examples, min(self.params.examples, len(context.examples)))
        examples = [task.model_dump(mode="json", exclude_none=True, include={"user_scenario", "evaluation_criteria"})
                    for task in shown]
        return INSTRUCTIONS.format(
            domain=context.domain_type, count=self.params.tasks_per_request,
            policy=context.domain.policy[: self.params.policy_chars],
            tools=json.dumps(context.domain.tool_schemas, separators=(",", ":")),
            records=json.dumps(records, separators=(",", ":"), default=str),
            examples=json.dumps(examples, indent=1) if examples else "(none)",
        )

    async def propose(self, context: GenerationContext) -> list[Proposal]:
        """The tasks of one answer (`tasks_per_request` asked for); a malformed answer is one rejected proposal.

        Raises:
            EndpointError: the endpoint gave no usable answer after its retries.
        """
        extra: dict[str, Any] = {"max_tokens": self.params.max_tokens, "seed": (context.seed * 1_000_003 + context.index) % 2**31}
        if self.params.structured_output:
            extra["response_format"] = {"type": "json_schema",
                                        "json_schema": {"name": "tasks", "schema": RESPONSE_SCHEMA, "strict": False}}
        message = await self.endpoint.complete([{"role": "user", "content": self.prompt(context)}], **extra)
        return parse_answer(message.content or "")


def parse_answer(text: str) -> list[Proposal]:
    """The proposals in one answer: ``{"tasks": [...]}``, a list of tasks, or one task, as JSON (in a Markdown
    code fence or not); anything else is one proposal rejected as ``malformed``."""
    fenced = FENCE.match(text)
    body = fenced.group(1) if fenced else text
    try:
        decoded = json.loads(body)
    except ValueError as error:
        return [Proposal(None, "malformed", f"not JSON ({error}): {text[:120]!r}")]
    if isinstance(decoded, dict) and isinstance(decoded.get("tasks"), list):
        decoded = decoded["tasks"]
    items = decoded if isinstance(decoded, list) else [decoded]
    return [Proposal(item) if isinstance(item, dict) else Proposal(None, "malformed", f"not a task object: {str(item)[:120]!r}")
            for item in items] or [Proposal(None, "malformed", "an empty list of tasks")]


def _dumped(record: Any) -> Any:
    return record.model_dump(mode="json") if hasattr(record, "model_dump") else record
