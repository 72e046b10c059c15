"""`llm_reviewer`: an LLM on any OpenAI-compatible endpoint reads a finished episode against the customer's
scenario and says whether the customer deviated from it; its reason is kept as the fault's line."""

from __future__ import annotations

import logging
import re

from ctu.components.endpoint import ChatEndpoint, EndpointError, OpenAIEndpointParams
from ctu.components.user_fault_detectors.base import Detector, FinishedEpisode

logger = logging.getLogger(__name__)

REVIEW_PROMPT = (
    "You review a customer-service conversation in which an LLM played the customer from the scenario below. Judge "
    "only the customer, never the agent.\n\n<scenario>\n{scenario}\n</scenario>\n\n<conversation>\n{conversation}\n"
    "</conversation>\n\nDid the customer deviate from its scenario in a way that could make the agent fail: give "
    "facts that contradict it, end the conversation (###STOP###, ###TRANSFER###, ###OUT-OF-SCOPE###) before its "
    "request was handled or without reason, claim things it did not do, or ask for something the scenario does not "
    "want? Answer in exactly two lines:\nVerdict: deviated OR followed\nReason: <one sentence>"
)
VERDICT = re.compile(r"verdict\s*:\s*(deviated|followed)", re.IGNORECASE)
REASON = re.compile(r"reason\s*:\s*(.+)", re.IGNORECASE)


class LLMReviewer(Detector):
    """An LLM reviewer of the customer's conduct: a fault when it answers ``Verdict: deviated``, with its
    ``Reason:`` kept. An endpoint that stays down after its retries, or an answer without a verdict, finds no fault
    (logged): the reviewer never decides an episode it could not read."""

    class Params(OpenAIEndpointParams):
        max_messages: int = 60
        """The conversation's last messages shown to the reviewer (each cut to 600 characters)."""

    def __init__(self, params: Params) -> None:
        super().__init__(params)
        self.params: LLMReviewer.Params = params
        self.endpoint = ChatEndpoint(params)

    def prompt(self, episode: FinishedEpisode) -> str:
        """The review request for `episode`."""
        lines = []
        for message in list(episode.messages)[-self.params.max_messages:]:
            calls = getattr(message, "tool_calls", None) or []
            text = str(getattr(message, "content", None) or "")[:600]
            shown = text + "".join(f" [calls {call.name}({call.arguments})]" for call in calls)
            lines.append(f"{message.role}: {shown.strip()}")
        return REVIEW_PROMPT.format(scenario=str(episode.task.user_scenario), conversation="\n".join(lines))

    async def detect(self, episode: FinishedEpisode) -> str | None:
        """The reviewer's reason when it says the customer deviated, else None."""
        try:
            answer = await self.endpoint.complete([{"role": "user", "content": self.prompt(episode)}])
        except EndpointError as error:
            logger.warning("llm_reviewer gave no verdict on %s/%s: %s", episode.domain, episode.task.id, error)
            return None
        text = str(answer.content or "")
        verdict = VERDICT.search(text)
        if verdict is None:
            logger.warning("llm_reviewer's answer on %s/%s holds no verdict: %r", episode.domain, episode.task.id, text[:120])
            return None
        if verdict.group(1).lower() != "deviated":
            return None
        reason = REASON.search(text)
        return f"the reviewer: {reason.group(1).strip() if reason else 'deviated (no reason given)'}"
