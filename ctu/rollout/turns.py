"""One policy turn of an episode (sampled token-in/token-out, or asked of a chat sampler: the ids to train on, their
logprobs and the action the environment gets), and the trajectory's tokens as the turns add up."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ctu.components.parsers.base import ParsedTurn, Parser, ToolCall
from ctu.components.rewards.base import Phase
from ctu.rollout.sampling import Sampler, SamplingParams
from ctu.rollout.tokens import TokenAccount
from tau_bench_env.messages import parse_openai_tool_calls


@dataclass
class PolicyTurn:
    """A policy turn.

    Attributes:
        generated: the turn's token ids (what was sampled, or, `rendered`, the chat template's rendering).
        logprobs: one per id in `generated` (0.0 where the sampler gave none).
        action: the turn for the environment: text for the spec's parser, or an already parsed turn (native tool
            calling).
        stop_reason: the sampler's (``"stop"``, ``"length"``).
        rendered: the sampler returned no ids, so `generated` is the template's rendering and `logprobs` are no
            sampler's.
        reasoning: what the turn reasoned before its answer (a chat server's, or a thinking template's
            `split_reasoning`; never part of `action`), else "".
    """

    generated: list[int]
    logprobs: list[float]
    action: str | ParsedTurn
    stop_reason: str
    rendered: bool = False
    reasoning: str = ""


Splitter = Callable[[str], tuple[str, str]]
"""A thinking template's ``split_reasoning``: a turn's text -> ``(reasoning, answer)``
(`ctu.components.chat_templates.base.reasoning_splitter`)."""


def _answer(text: str, split: Splitter | None) -> tuple[str, str]:
    """``(reasoning, answer)`` of a turn's text: all answer without a splitter."""
    return split(text) if split is not None else ("", text)


async def chat_turn(sampler: Sampler, account: TokenAccount, conversation: list[dict[str, object]],
                    tools: list[dict[str, object]] | None, params: SamplingParams, session: str | None = None,
                    split: Splitter | None = None) -> PolicyTurn:
    """Ask a chat sampler for the next turn of `conversation`, for the episode `session` (`Sampler.chat`); with
    `tools` (native tool calling) its tool calls are the action, otherwise its text is, for the spec's parser; the
    reasoning the server returned apart (`SampleResult.reasoning`), else what a thinking template's `split` finds in
    the text, is kept out of the action. A server that returns no ids or no logprobs for them: the turn as the chat
    template renders it (`rendered`), without its reasoning."""
    result = await sampler.chat(conversation, tools, params, session)
    reasoning, text = _answer(result.text or "", split)
    reasoning = result.reasoning or reasoning
    message: dict[str, object] = {"role": "assistant", "content": result.text or None}
    if tools is not None and result.tool_calls:
        message["tool_calls"] = result.tool_calls
    action: str | ParsedTurn = text
    if tools is not None:
        calls, errors = parse_openai_tool_calls(result.tool_calls, requestor="assistant")
        action = ParsedTurn(content=text, tool_calls=tuple(ToolCall(c.name, c.arguments) for c in calls),
                            parse_errors=tuple(errors))
    if result.token_ids and result.logprobs is not None and len(result.logprobs) == len(result.token_ids):
        return PolicyTurn(list(result.token_ids), list(result.logprobs), action, result.stop_reason, reasoning=reasoning)
    generated = account.assistant_ids(message)
    return PolicyTurn(generated, [0.0] * len(generated), action, result.stop_reason, rendered=True, reasoning=reasoning)


async def token_turn(sampler: Sampler, account: TokenAccount, ids: list[int], params: SamplingParams, phase: Phase,
                     native_parser: Parser | None, session: str | None = None, split: Splitter | None = None) -> PolicyTurn:
    """Sample the next turn after the token ids `ids` for the episode `session` (`Sampler.sample`); its text is the
    action (parsed here by the model family's `native_parser` in native mode, else by the spec's parser later), the
    reasoning before it left out by a thinking template's `split`.

    Raises:
        ValueError: in training, the sampler returned no logprob for every id (an infrastructure error: nothing is
            trained against made-up logprobs); evaluation trains nothing and takes zeros.
    """
    result = await sampler.sample(ids, params, session)
    generated = list(result.token_ids)
    if result.logprobs is not None and len(result.logprobs) == len(generated):
        logprobs = list(result.logprobs)
    elif phase == "train":
        raise ValueError(f"the sampler returned {len(generated)} token ids and "
                         f"{'no' if result.logprobs is None else len(result.logprobs)} logprobs")
    else:
        logprobs = [0.0] * len(generated)
    reasoning, text = _answer(account.decode(generated), split)
    action: str | ParsedTurn = native_parser.parse(text) if native_parser is not None else text
    return PolicyTurn(generated, logprobs, action, result.stop_reason, reasoning=reasoning)


@dataclass
class TrajectoryTokens:
    """A trajectory's tokens as its turns add up.

    Attributes:
        context: the prompt's ids, then every id added (a token sampler's input for the next turn).
        response: the ids after the prompt.
        mask: one per `response` id: 1 on the policy's, 0 on observations'.
        logprobs: one per `response` id (0.0 on observations').
    """

    context: list[int]
    response: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    def add(self, ids: list[int], logprobs: list[float] | None = None) -> None:
        """Append a policy turn's ids with their `logprobs`, or, without, an observation's (masked)."""
        self.context += ids
        self.response += ids
        self.mask += [0 if logprobs is None else 1] * len(ids)
        self.logprobs += [0.0] * len(ids) if logprobs is None else logprobs

    def trained(self, sampled: bool, eos_id: int | None) -> tuple[list[int], list[int], list[float]]:
        """``(response, mask, logprobs)`` for the trainer: no logprobs unless every policy token was `sampled` (none
        made up: the batch then reports none), and one masked token when nothing was added (the user hung up at
        once), which keeps the batch's shapes valid."""
        if not self.response:
            return [eos_id if eos_id is not None else 0], [0], [0.0]
        return self.response, self.mask, self.logprobs if sampled else []
