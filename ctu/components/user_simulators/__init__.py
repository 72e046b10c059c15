"""User simulators: the customer side of a tau-bench episode (`llm` over an endpoint, `scripted` offline)."""

from ctu.components.user_simulators.base import UserSession, UserSimulator, UserSimulatorError

__all__ = ["UserSession", "UserSimulator", "UserSimulatorError"]
