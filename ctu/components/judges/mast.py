"""`mast`: the MAST failure taxonomy as CTU-Agent-v0's taxonomy feedback used it.

MAST (Cemri et al. 2025, "Why Do Multi-Agent LLM Systems Fail?", arXiv:2503.13657) names 14 failure modes in
three groups: specification issues (1.x), inter-agent misalignment (2.x) and task verification (3.x). The judge
asks an LLM, for each mode, whether the episode shows it (yes or no), and scores the episode ``1 / failures``
(1 with none), so the `taxonomy_feedback` reward with ``weight: alpha`` adds ``alpha / failures``: the bonus of
CTU-Agent-v0's `tau_bench_env/llm_judge_integration.py` (its scripts: alpha 0.5, judge gpt-4o-mini at
temperature 1.0).

Unlike that judge, which counted a mode it could not find in the answer as "no", an answer that does not give
yes or no for every one of the 14 modes is a judge failure (no score, counted in `judge/failures`).
"""

from __future__ import annotations

import re

from pydantic import Field

from ctu.components.endpoint import OpenAIEndpointParams
from ctu.components.judges.base import EndpointJudge, JudgeInput, Verdict
from ctu.components.judges.taxonomy import transcript

MAST_FAILURE_MODES: dict[str, tuple[str, str]] = {
    "1.1": ("Disobey task specification", "does not follow the task's stated constraints or requirements"),
    "1.2": ("Disobey role specification", "acts outside its role (here: a customer-service agent bound by the policy)"),
    "1.3": ("Step repetition", "repeats a step or tool call it has already completed, without need"),
    "1.4": ("Loss of conversation history", "forgets or contradicts what was said or done earlier in the episode"),
    "1.5": ("Unaware of termination conditions", "does not recognise when the task is done, or stops caring when it is"),
    "2.1": ("Conversation reset", "restarts the conversation, dropping the context built so far"),
    "2.2": ("Fail to ask for clarification", "acts on ambiguous or missing information instead of asking for it"),
    "2.3": ("Task derailment", "drifts away from the customer's request"),
    "2.4": ("Information withholding", "keeps back information the customer or the task needs"),
    "2.5": ("Ignored other agent's input", "ignores what the customer said or what a tool returned"),
    "2.6": ("Reasoning-action mismatch", "says it will do one thing and does another"),
    "3.1": ("Premature termination", "ends the conversation before the task is complete"),
    "3.2": ("No or incorrect verification", "does not check, or checks wrongly, what its actions achieved"),
    "3.3": ("Weak verification", "checks its work only superficially"),
}
"""MAST's 14 failure modes: code -> (name, what the agent does), after Cemri et al. 2025's definitions."""

MAST_PROMPT = """You review a conversation between a customer-service agent (assistant) and a customer (user), with
the agent's tool calls and their results. For each failure mode below, decide whether the agent shows it in this
conversation. Mark a mode "yes" only if you can point to where it happens.

Failure modes (MAST, Cemri et al. 2025):
{modes}

Answer with one line per failure mode, each its code, a colon and yes or no, then one line "Summary:" with one
sentence. For example:
1.1: no
1.2: yes
...
3.3: no
Summary: <one sentence>

Conversation:
{transcript}"""

_ANSWER_LINE = re.compile(r"^\W*([123]\.[1-6])\b[^:\n]*:\s*\**\s*(yes|no)\b", re.IGNORECASE | re.MULTILINE)


def parse_mast_answer(text: str) -> dict[str, bool] | str:
    """``{code: shows_it}`` for all 14 modes from a judge's answer, or why it is malformed (a mode missing, or
    answered both yes and no)."""
    answers: dict[str, set[bool]] = {}
    for code, value in _ANSWER_LINE.findall(text):
        if code in MAST_FAILURE_MODES:
            answers.setdefault(code, set()).add(value.lower() == "yes")
    missing = [code for code in MAST_FAILURE_MODES if code not in answers]
    if missing:
        return f"no yes/no for failure mode(s) {', '.join(missing)}"
    twice = [code for code, values in answers.items() if len(values) > 1]
    if twice:
        return f"both yes and no for failure mode(s) {', '.join(twice)}"
    return {code: answers[code].pop() for code in MAST_FAILURE_MODES}


class MASTJudge(EndpointJudge):
    """An LLM on an OpenAI-compatible endpoint answers yes or no for each of MAST's 14 failure modes.

    The verdict's categories are the codes answered yes (``1.3``, ...; empty when none), its score
    ``1 / failures`` in (0, 1], 1 with no failure, and `details` the number of failures and the answer. A failed
    call or an answer without yes/no for every mode is a verdict with `error` set and no score.
    """

    class Params(OpenAIEndpointParams):
        temperature: float = Field(1.0, ge=0.0, le=2.0)
        """Sampling temperature of the judge's model (CTU-Agent-v0's judge sampled at 1.0)."""

    params: Params

    def prompt(self, episode: JudgeInput) -> str:
        """The request for `episode`: each mode with what the agent does in it, then the transcript."""
        modes = "\n".join(f"{code} {name}: the agent {what}" for code, (name, what) in MAST_FAILURE_MODES.items())
        return MAST_PROMPT.format(modes=modes, transcript=transcript(episode.result.conversation))

    def verdict(self, text: str) -> Verdict:
        """The failure modes answered yes, scored 1 / failures; an answer without yes/no for every mode is a
        verdict with `error` set."""
        parsed = parse_mast_answer(text)
        if isinstance(parsed, str):
            return Verdict(None, error=f"malformed judge answer: {parsed}: {text[:200]!r}")
        failures = tuple(code for code, shown in parsed.items() if shown)
        return Verdict(1.0 / len(failures) if failures else 1.0, failures, details={"failures": len(failures), "raw": text})
