"""`RolloutSetup`: everything the agent loop needs, resolved from the spec by a runner (`ctu.rollout.build`), and
the loop it makes: one event loop in this process (`TauGenerator`), or a batch spread over worker processes
(`ProcessRollout`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ctu.components.chat_templates.base import ChatTemplate, Tokenizer
from ctu.components.generators.base import LoopSettings
from ctu.components.parsers.base import Parser
from ctu.components.rewards.base import Phase
from ctu.components.rewards.chain import RewardChain
from ctu.components.user_fault_detectors.base import UserFaultPolicy
from ctu.rollout.generator import TauGenerator
from ctu.rollout.processes import EPISODES_PER_LOOP, ProcessRollout, auto_processes, unsendable, usable_cores
from ctu.rollout.records import TrajectoryRecord
from ctu.rollout.sampling import Sampler, SamplingParams
from tau_bench_env.env import EnvSetup

logger = logging.getLogger(__name__)


@dataclass
class RolloutSetup:
    """Everything the generator needs, resolved from the spec by a runner.

    Attributes:
        tokenizer: the policy's Hugging Face tokenizer.
        chat_template: the chat-template policy (built component).
        sampler: the policy's sampler.
        env: the environment setup (user simulator, parser, episode config).
        rewards: the reward chain of each phase.
        user_faults: the user-fault detectors and what a fault does (`environment.user_faults`).
        sampling: sampling params of each phase.
        max_model_len: longest conversation in tokens.
        overflow_reward: the training reward of an episode that outgrew `max_model_len` (termination
            ``context_overflow``), None: the reward chain's (`environment.overflow.reward`).
        overflow_exclude: zero such a training episode's loss mask (`environment.overflow.exclude`).
        step_wise: give each training episode's policy turns as samples of their own
            (`TrajectoryRecord.turn_samples`; ``rollout.trajectory: step_wise``).
        native_tool_calling: tools as OpenAI `tools` (chat samplers) or in the template (token samplers).
        native_parser: parses the model family's own tool-call format on token samplers in native mode.
        max_concurrent_episodes: episodes in flight at once (over all worker processes).
        on_records: called with each batch's `TrajectoryRecord`s, its phase and global step (trajectory logs).
        on_episode: called with the batch size when a batch starts (episodes 0 of n) and after each episode
            that finishes (progress bars).
        in_worker: builds this setup again, without the callbacks, in a worker process
            (`ctu.rollout.build.WorkerSetup`: picklable when the sampler is), for a loop spread over processes;
            None when the setup cannot be rebuilt elsewhere (a setup made by hand).
    """

    tokenizer: Tokenizer
    chat_template: ChatTemplate
    sampler: Sampler
    env: EnvSetup
    rewards: dict[Phase, RewardChain]
    sampling: dict[Phase, SamplingParams]
    user_faults: UserFaultPolicy = field(default_factory=UserFaultPolicy)
    max_model_len: int = 16384
    overflow_reward: float | None = None
    overflow_exclude: bool = False
    step_wise: bool = False
    native_tool_calling: bool = False
    native_parser: Parser | None = None
    max_concurrent_episodes: int = 256
    on_records: Callable[[list[TrajectoryRecord], Phase, int], object] | None = None
    on_episode: Callable[[int, bool], None] | None = None
    in_worker: Callable[[], RolloutSetup] | None = None

    def agent_loop(self, settings: LoopSettings) -> TauGenerator | ProcessRollout:
        """ctu's agent loop over this setup, run as `settings` say (a generator component's `loop_settings()`).

        `settings.processes` 1 runs every episode on this process's event loop (`TauGenerator`); more spread each
        batch over as many worker processes, each with its own event loop (`ProcessRollout`); ``"auto"`` as many
        as `ctu.rollout.processes.auto_processes` gives for the episodes and this process's cores (at most
        `EPISODES_PER_LOOP` episodes a loop), or 1 when the setup cannot go to a worker (the Tinker training
        loop's sampler). The choice is logged.

        Raises:
            ComponentError: `processes` > 1 and the setup cannot be rebuilt in a worker process (no
                `in_worker`, or a sampler that cannot be sent to another process).
        """
        setup = replace(self, max_concurrent_episodes=settings.max_concurrent_episodes)
        processes = settings.processes
        if processes == "auto":
            processes = self._auto_processes(setup.max_concurrent_episodes)
        if processes > 1:
            return ProcessRollout(setup, processes)
        return TauGenerator(setup)

    def _auto_processes(self, episodes: int) -> int:
        """What ``processes: auto`` resolves to for `episodes` concurrent episodes here (see `agent_loop`)."""
        cores = usable_cores()
        processes = auto_processes(episodes, cores)
        if processes > 1 and (reason := unsendable(self)) is not None:
            logger.info("rollout: processes auto: every episode on this process's event loop, as the loop %s", reason)
            return 1
        logger.info("rollout: processes auto: %d concurrent episodes on %d event loop(s)%s (%d usable cores, at most "
                    "%d episodes a loop)", episodes, processes, " in worker processes" if processes > 1 else "", cores,
                    EPISODES_PER_LOOP)
        return processes
