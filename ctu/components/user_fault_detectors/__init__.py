"""User-fault detectors: say whether the simulated customer, not the policy, broke a finished episode (the rules in
`rules`, an LLM reviewer in `reviewer`); `environment.user_faults` in the spec turns them on and says what a fault does. A detector of one's own
implements `base.UserFaultDetector` and registers with ``@registry.user_fault_detectors.register("name")``."""

from ctu.components.user_fault_detectors import reviewer as reviewer  # registers "llm_reviewer"
from ctu.components.user_fault_detectors import rules as rules  # registers the built-in rules
from ctu.components.user_fault_detectors.base import FinishedEpisode, UserFault, UserFaultDetector

__all__ = ["FinishedEpisode", "UserFault", "UserFaultDetector"]
