"""The user-simulator seam: a per-episode session that answers the agent, asynchronously.

The protocols and `UserSimulatorError` are the environment's (`tau_bench_env.interfaces`), re-exported here for
authors of user simulators.
"""

from ctu.registry import registry
from tau_bench_env.interfaces import UserSession, UserSimulator, UserSimulatorError

__all__ = ["UserSession", "UserSimulator", "UserSimulatorError"]


registry.user_simulators.declare_contract(UserSimulator)
