"""Environment cost per episode, tau2 against ctu side by side: reward, reset and memory.

Run: `uv run python benchmarks/reward_speed.py [--tasks N] [--live 256] [--domains retail,airline,telecom]`.
For each domain it

- plays N gold episodes (scripted user, gold replay agent) and times the reward of each finished episode by
  tau2's `evaluate_simulation` and by ctu's fast path (`tau_bench_env.fast_eval`; "warm": the task's gold
  state is cached, as for every episode after a task's first in a process; "first": including computing it),
  and counts disagreements;
- times a reset, i.e. a fresh database with the task's initial state: tau2's `get_environment()` (JSON load)
  against ctu's `Domain.episode_environment` (retail, airline: a copy-on-access overlay; telecom: private
  copies of the agent's and the user's databases, unpickled from bytes loaded once), and ctu's whole
  `Episode.reset()` (system prompt, user session, the user's first message);
- measures the memory (tracemalloc) of live episodes: 16 tau2 environments, and `--live` ctu episodes
  played to the end and kept alive at once (what ctu's episodes share, the base database or the database
  bytes, is counted once, separately).

Every figure is a median over the episodes; ratios are tau2 / ctu. The goals are printed alongside. The figures
and the table docs/benchmarks.md shows are recorded in `benchmarks/results/reward_speed.json` (`results.record`).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from machine import reference_loop_seconds
from results import record

from ctu.components.parsers.hermes import HermesParser
from ctu.components.user_simulators.scripted import ScriptedUserSimulator
from tau_bench_env.env import shared_domain
from tau_bench_env.episode import Episode
from tau_bench_env.fast_eval import fast_reward
from tau_bench_env.outcome import EpisodeConfig
from tau_bench_env.replay import GoldReplayAgent, play
from tau_bench_env.runtime import prepare


def median_ms(samples: list[float]) -> float:
    """Median of `samples` (seconds), in milliseconds."""
    return statistics.median(samples) * 1000


def timed(function: Callable[[], Any]) -> float:
    """Seconds one call of `function` takes."""
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def new_episode(name: str, task: Any) -> Episode:
    return Episode(shared_domain(name), task, ScriptedUserSimulator(), HermesParser(), EpisodeConfig(max_turns=80, max_errors=50))


async def played(name: str, tasks: list[Any]) -> list[Episode]:
    """Gold replays of `tasks`, played to the end."""
    episodes = []
    for task in tasks:
        episode = new_episode(name, task)
        await play(episode, GoldReplayAgent(task))
        episodes.append(episode)
    return episodes


def tau2_environment(name: str, task: Any) -> Any:
    """A fresh tau2 environment with the task's initial state, as tau2's orchestrator builds it."""
    from tau2.registry import registry

    environment = registry.get_env_constructor(name)()
    state = task.initial_state
    if state is not None:
        environment.set_state(state.initialization_data, state.initialization_actions, list(state.message_history or []))
    return environment


def ctu_environment(name: str, task: Any) -> Any:
    """A fresh episode database with the task's initial state, as `Episode.reset` builds it."""
    environment = shared_domain(name).episode_environment(task)
    state = task.initial_state
    if state is not None:
        environment.set_state(state.initialization_data, state.initialization_actions, list(state.message_history or []))
    return environment


def live_memory(build: Callable[[], list[Any]]) -> float:
    """Bytes held by what `build` returns (tracemalloc, after a collection), per object."""
    gc.collect()
    tracemalloc.start()
    baseline, _ = tracemalloc.get_traced_memory()
    objects = build()
    gc.collect()
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    count = len(objects)
    del objects
    return (current - baseline) / count


def row(label: str, tau2: float, ctu: float, unit: str, goal: str) -> str:
    return f"  {label:<28} tau2 {tau2:10.2f} {unit:<3} ctu {ctu:9.3f} {unit:<3} ratio {tau2 / ctu:8.1f}x   goal {goal}"


def bench_domain(name: str, count: int, live: int) -> dict[str, float]:
    """Time and measure `count` gold episodes of domain `name` and `live` live ones; print the rows and return the
    figures (milliseconds, megabytes, counts)."""
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    domain = shared_domain(name)
    tasks = domain.tasks("base")[:count]
    domain.warm_up()  # what every episode shares, built once, outside the timings
    episodes = asyncio.run(played(name, tasks))

    tau2_times, first_times, warm_times, mismatches = [], [], [], 0
    for episode in episodes:
        arguments = (domain, episode.task, episode.environment, list(episode.trajectory), True)
        run = episode.simulation_run()
        start = time.perf_counter()
        expected = evaluate_simulation(run, episode.task, EvaluationType.ALL, False, name).reward
        tau2_times.append(time.perf_counter() - start)
        domain.gold_outcomes.clear()
        first_times.append(timed(functools.partial(fast_reward, *arguments)))
        start = time.perf_counter()
        got = fast_reward(*arguments).reward
        warm_times.append(time.perf_counter() - start)
        mismatches += got != expected

    tau2_reset = [timed(lambda t=task: tau2_environment(name, t)) for task in tasks[:20]]
    ctu_reset = [timed(lambda t=task: ctu_environment(name, t)) for task in tasks]
    episode_reset = [timed(lambda t=task: asyncio.run(new_episode(name, t).reset())) for task in tasks]

    tau2_memory = live_memory(lambda: [tau2_environment(name, tasks[i % len(tasks)]) for i in range(16)])
    all_tasks = domain.tasks("base")
    ctu_memory = live_memory(lambda: asyncio.run(played(name, [all_tasks[i % len(all_tasks)] for i in range(live)])))
    if domain.copy_on_access:
        shared = "shared base database"
        base_memory = live_memory(lambda: [type(domain.base_database)(domain.make_environment().tools.db)])
    else:
        shared = "shared database bytes"
        base_memory = float(sum(len(data) for data in domain.database_bytes if data))

    tau2_ms, first_ms, warm_ms = median_ms(tau2_times), median_ms(first_times), median_ms(warm_times)
    print(f"{name}: {len(episodes)} gold episodes, reward disagreements with tau2: {mismatches}")
    print(row("reward (warm gold cache)", tau2_ms, warm_ms, "ms", "<= 5 ms"))
    print(row("reward (first of its task)", tau2_ms, first_ms, "ms", "(gold state computed once per task)"))
    print(row("reset: fresh database", median_ms(tau2_reset), median_ms(ctu_reset), "ms", "<= 2 ms"))
    print(row("reset: whole Episode.reset", median_ms(tau2_reset), median_ms(episode_reset), "ms", "(scripted user)"))
    print(row("memory per live episode", tau2_memory / 2**20, ctu_memory / 2**20, "MB",
              f"<= 1 MB ({live} ctu episodes alive, played to the end; tau2: 16 environments)"))
    print(f"  {shared} (once per domain and process): {base_memory / 2**20:.2f} MB")
    return {"episodes": len(episodes), "disagreements": mismatches, "reward_tau2_ms": tau2_ms, "reward_ctu_ms": warm_ms,
            "reward_first_ctu_ms": first_ms, "reset_tau2_ms": median_ms(tau2_reset), "reset_ctu_ms": median_ms(ctu_reset),
            "episode_reset_ctu_ms": median_ms(episode_reset), "memory_tau2_mb": tau2_memory / 2**20,
            "memory_ctu_mb": ctu_memory / 2**20, "shared_mb": base_memory / 2**20}


def table(figures: dict[str, dict[str, float]]) -> dict[str, list]:
    """The docs' table of each domain's figures: tau2's and ctu's side by side, ratios in brackets, the goals."""
    names = list(figures)

    def pair(tau2: str | None, ctu: str, unit: str, digits: int, ratio: bool = True) -> list[str]:
        cells = []
        for name in names:
            values = figures[name]
            ours = f"{values[ctu]:.{digits}f} {unit}"
            if tau2 is None:
                cells += ["", ours]
                continue
            theirs = values[tau2]
            cells += [f"{theirs:.{max(digits - 2, 1)}f} {unit}", ours + (f" ({theirs / values[ctu]:.0f}x)" if ratio else "")]
        return cells

    rows = [
        ["reward of a finished episode", *pair("reward_tau2_ms", "reward_ctu_ms", "ms", 2), "<= 5 ms"],
        ["same, first episode of its task (gold state computed)", *pair("reward_tau2_ms", "reward_first_ctu_ms", "ms", 2, False), ""],
        ["reset (fresh database, initial state)", *pair("reset_tau2_ms", "reset_ctu_ms", "ms", 3), "<= 2 ms"],
        ["whole `Episode.reset` (prompt, user's opening)", *pair(None, "episode_reset_ctu_ms", "ms", 2), ""],
        ["memory per live episode", *pair("memory_tau2_mb", "memory_ctu_mb", "MB", 2, False), "<= 1 MB"],
        ["reward disagreements with tau2", *[cell for name in names for cell in ("", f"{figures[name]['disagreements']:.0f} of "
                                                                                 f"{figures[name]['episodes']:.0f}")], "0"],
    ]
    return {"columns": ["", *[f"{name}: {who}" for name in names for who in ("tau2", "ctu")], "goal"], "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=30, help="gold episodes timed per domain")
    parser.add_argument("--live", type=int, default=256, help="ctu episodes alive at once for the memory figure")
    parser.add_argument("--domains", default="retail,airline,telecom", help="comma-separated domains")
    args = parser.parse_args()
    prepare()
    loop_before = reference_loop_seconds()
    figures = {name: bench_domain(name, args.tasks, args.live) for name in args.domains.split(",")}
    loop = (loop_before + reference_loop_seconds()) / 2
    print(f"this machine: a reference loop of 10M additions takes {loop:.2f} s of CPU (mean of before and after)")
    record("reward_speed", figures, table(figures), loop,
           note=f"Medians over {args.tasks} gold episodes a domain; memory with {args.live} ctu episodes alive "
                "(played to the end) and 16 tau2 environments; ratios tau2 / ctu.")


if __name__ == "__main__":
    main()
