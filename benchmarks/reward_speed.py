"""Reward of a finished episode: tau2's `evaluate_simulation` against ctu's fast path, side by side.

Run: `uv run python benchmarks/reward_speed.py [--tasks N]`. For each domain it replays N gold episodes (the
scripted user and the gold replay agent), then times both reward paths on each finished episode (medians,
after one warm-up call that fills the gold-outcome cache), checks they agree, and prints the ratio. It also
times an episode reset (a fresh environment with the task's initial state) and the memory of live episodes.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
import tracemalloc

from ctu.components.parsers.hermes import HermesParser
from ctu.components.user_simulators.scripted import ScriptedUserSimulator
from ctu.registry import populate_registry
from tau_bench_env.env import shared_domain
from tau_bench_env.episode import Episode, EpisodeConfig
from tau_bench_env.fast_eval import fast_reward
from tau_bench_env.replay import GoldReplayAgent, play


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def finished_episodes(name: str, count: int) -> list[Episode]:
    domain = shared_domain(name)
    episodes = []
    for task in domain.tasks("base")[:count]:
        episode = Episode(domain, task, ScriptedUserSimulator(), HermesParser(), EpisodeConfig(max_turns=80, max_errors=50))
        await play(episode, GoldReplayAgent(task))
        episodes.append(episode)
    return episodes


def bench_domain(name: str, count: int) -> None:
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    domain = shared_domain(name)
    episodes = asyncio.run(finished_episodes(name, count))
    tau2_times, fast_times, mismatches = [], [], 0
    for episode in episodes:
        run = episode.simulation_run()
        start = time.perf_counter()
        expected = evaluate_simulation(run, episode.task, EvaluationType.ALL, False, name).reward
        tau2_times.append(time.perf_counter() - start)
        fast_reward(domain, episode.task, episode._env, list(episode.trajectory), True)  # fills the gold cache
        start = time.perf_counter()
        got = fast_reward(domain, episode.task, episode._env, list(episode.trajectory), True).reward
        fast_times.append(time.perf_counter() - start)
        mismatches += got != expected
    reset_times = []
    for episode in episodes[:20]:
        start = time.perf_counter()
        environment = domain.make_environment()
        state = episode.task.initial_state
        if state is not None:
            environment.set_state(state.initialization_data, state.initialization_actions, list(state.message_history or []))
        reset_times.append(time.perf_counter() - start)
    gc.collect()
    tracemalloc.start()
    live = [domain.make_environment() for _ in range(16)]
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del live
    tau2_ms, fast_ms = median_ms(tau2_times), median_ms(fast_times)
    print(f"{name}: {len(episodes)} episodes, reward mismatches: {mismatches}")
    print(f"  reward  tau2 evaluate_simulation {tau2_ms:8.2f} ms   ctu fast path {fast_ms:8.2f} ms   ratio {tau2_ms / fast_ms:6.1f}x   (goal <= 5 ms)")
    print(f"  reset   fresh environment        {median_ms(reset_times):8.2f} ms   (goal <= 2 ms; ctu uses tau2's environment as is)")
    print(f"  memory  per live environment      {current / 16 / 2**20:8.2f} MB   (goal <= 1 MB; not met yet)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=30)
    args = parser.parse_args()
    populate_registry()
    for name in ("retail", "airline"):
        bench_domain(name, args.tasks)


if __name__ == "__main__":
    main()
