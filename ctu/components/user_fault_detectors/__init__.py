"""User-fault detectors: say whether the simulated customer, not the policy, broke a finished episode (the rules in
`rules`, an LLM reviewer in `reviewer`); `environment.user_faults` in the spec turns them on and says what a fault does. A detector of one's own
implements `base.UserFaultDetector` and registers like any component (`ctu.registry`)."""

from ctu.components.user_fault_detectors.base import FinishedEpisode, UserFault, UserFaultDetector

__all__ = ["FinishedEpisode", "UserFault", "UserFaultDetector"]
