"""The minimal domain of docs/domains.md (examples/library/domain.py, shown there in full): its spec loads it
through `imports:`, each task's gold actions replay to tau2's reward 1 through ctu's environment, and a replay that
stops before the write scores 0."""

from __future__ import annotations

import asyncio

from ctu.components.domains import build_domain
from ctu.components.parsers.hermes import HermesParser
from ctu.components.user_simulators.scripted import ScriptedUserSimulator
from ctu.spec import load_spec
from tau_bench_env.episode import Episode
from tau_bench_env.interfaces import ParsedTurn
from tau_bench_env.outcome import EpisodeConfig
from tau_bench_env.replay import CLOSING, GoldReplayAgent

from ..conftest import REPO

EXAMPLE = REPO / "examples" / "library"


async def replay(domain, task, calls: int) -> float:
    """tau2's reward of an episode whose agent makes the task's first `calls` gold calls, then closes."""
    parser = HermesParser(HermesParser.Params())
    episode = Episode(domain, task, ScriptedUserSimulator(), parser, EpisodeConfig(max_turns=8))
    await episode.reset()
    turns = [turn for turn, _ in zip(GoldReplayAgent(task).turns(), range(calls), strict=False)]
    while not episode.done:
        turn = turns.pop(0) if turns else ParsedTurn(CLOSING)
        await episode.step(parser.write(turn))
    result = episode.result()
    assert result.tool_errors == 0 and result.parse_failures == 0, result.conversation[-3:]
    return result.reward


def test_the_minimal_domain_loads_from_its_spec_and_its_gold_actions_score_one():
    spec = load_spec(EXAMPLE / "spec.yaml").spec
    assert spec.data.train[0].domain.type == "library" and spec.data.test_sets == {}
    domain = build_domain("library", {})
    for split in ("train", "test"):
        (task,) = domain.tasks(split)
        assert asyncio.run(replay(domain, task, calls=2)) == 1.0
        assert asyncio.run(replay(domain, task, calls=1)) == 0.0  # found the loan, never renewed it


def test_the_domain_guide_shows_the_domain_in_full():
    guide = (REPO / "docs" / "domains.md").read_text()
    assert (EXAMPLE / "domain.py").read_text() in guide
