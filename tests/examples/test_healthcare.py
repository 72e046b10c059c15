"""The worked extension in examples/healthcare: its spec loads its own code through `imports:`, its gold actions
replay to reward 1 through ctu's environment (with its own parser reading the calls), spoiled replays score 0,
its parser never raises, and its reward wrapper penalises a write before the identity check."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from ctu.components.domains import build_domain
from ctu.components.rewards.base import RewardContext
from ctu.components.user_simulators.scripted import ScriptedUserSimulator
from ctu.registry import registry
from ctu.spec import load_spec
from tau_bench_env.episode import Episode
from tau_bench_env.interfaces import ParsedTurn
from tau_bench_env.outcome import EpisodeConfig
from tau_bench_env.replay import CLOSING, Corruption, GoldReplayAgent, effective_writes

from ..conftest import REPO

SPEC = REPO / "examples" / "healthcare" / "spec.yaml"


@pytest.fixture(scope="module")
def spec():
    return load_spec(SPEC).spec


def as_text(turn: ParsedTurn) -> str:
    """A parsed turn written the way the example's `xml_call` parser reads it."""
    calls = "".join(f'<call name="{c.name}">{json.dumps(c.arguments)}</call>' for c in turn.tool_calls)
    return f"{turn.content}\n{calls}".strip()


async def replay(domain, task, parser, corruption=None) -> float:
    writes = effective_writes(domain.episode_environment(task), task) if corruption else ()
    agent = GoldReplayAgent(task, corruption, writes)
    episode = Episode(domain, task, ScriptedUserSimulator(), parser, EpisodeConfig(max_turns=16))
    await episode.reset()
    turns = agent.turns()
    while not episode.done:
        await episode.step(as_text(next(turns, ParsedTurn(CLOSING))))
    result = episode.result()
    assert result.parse_failures == 0 and result.tool_errors == 0, result.conversation[-3:]
    return result.reward


def test_the_spec_registers_the_examples_components(spec):
    assert {"healthcare" in registry.domains, "xml_call" in registry.parsers, "verified_first" in registry.rewards} == {True}
    assert spec.rollout.parser.type == "xml_call"
    assert [r.type for r in spec.rewards] == ["tau_outcome", "verified_first"]


def test_splits_hold_at_least_twelve_tasks_with_gold_actions(spec):
    domain = build_domain("healthcare", {})
    train, test, base = (domain.tasks(split) for split in ("train", "test", "base"))
    assert len(base) >= 12 and len(train) + len(test) == len(base)
    assert not {t.id for t in train} & {t.id for t in test}
    assert all(task.evaluation_criteria.actions for task in base)


def test_every_gold_replay_scores_1_and_a_spoiled_one_0(spec):
    domain = build_domain("healthcare", {})
    parser = spec.rollout.parser.build()
    tasks = domain.tasks("base")
    assert [asyncio.run(replay(domain, task, parser)) for task in tasks] == [1.0] * len(tasks)
    spoiled = [asyncio.run(replay(domain, task, parser, Corruption.MISSING_ACTION)) for task in tasks
               if effective_writes(domain.episode_environment(task), task)]
    assert len(spoiled) >= 12 and set(spoiled) == {0.0}


def test_the_parser_reads_calls_and_flags_malformed_ones_without_raising(spec):
    parser = spec.rollout.parser.build()
    turn = parser.parse('Let me check. <call name="find_patient">{"name": "A", "date_of_birth": "1990-01-01"}</call>')
    assert turn.content == "Let me check."
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("find_patient", {"name": "A", "date_of_birth": "1990-01-01"})]
    assert parser.parse('<call name="x">{not json}</call>').is_parse_failure
    assert parser.parse('<call name="x">[1]</call>').is_parse_failure
    assert parser.parse('<call name="x">{"a": 1}').is_parse_failure
    assert parser.parse("Hello there.") == ParsedTurn("Hello there.")
    rng = random.Random(0)
    alphabet = '<>/"{}[]: call name=x\n'
    for _ in range(2000):
        parser.parse("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))))
    assert "xml_call" not in parser.render_tools([]) and "<call name=" in parser.render_tools([])


def test_the_reward_wrapper_penalises_a_write_before_the_identity_check(spec):
    from tau_bench_env.outcome import EpisodeResult

    reward = spec.rewards[1].build()

    from tau2.data_model.message import AssistantMessage, ToolCall

    def context(*names: str) -> RewardContext:
        message = AssistantMessage(role="assistant", tool_calls=[ToolCall(id=str(i), name=n, arguments={}) for i, n in enumerate(names)])
        result = EpisodeResult("healthcare", "t", trajectory=[message])
        return RewardContext(result, None, frozenset({"book_appointment", "update_phone"}), "train")

    assert asyncio.run(reward.apply(1.0, context("find_patient", "book_appointment"))) == 1.0
    late = context("update_phone", "find_patient")
    assert asyncio.run(reward.apply(1.0, late)) == 0.5 and late.metrics == {"verified_first/violations": 1.0}
    assert asyncio.run(reward.apply(0.0, context("list_doctors"))) == 0.0
    assert reward.training_only


def test_the_cli_validates_and_lists_the_examples_components():
    import subprocess
    import sys

    validate = subprocess.run([sys.executable, "-m", "ctu.cli", "validate", str(SPEC)], capture_output=True, text=True, cwd=REPO)
    assert validate.returncode == 0, validate.stderr
    listed = subprocess.run([sys.executable, "-m", "ctu.cli", "components", "--spec", str(SPEC)], capture_output=True,
                            text=True, cwd=REPO, env={**__import__("os").environ, "COLUMNS": "200"})
    assert listed.returncode == 0, listed.stderr
    for name, where in [("healthcare", "domain.py"), ("xml_call", "parser.py"), ("verified_first", "reward.py")]:
        (row,) = [line for line in listed.stdout.splitlines() if f" {name} " in line]
        assert f"examples/healthcare/{where}:" in row


def test_ctu_run_smoke_trains_on_the_example(tmp_path):
    """`ctu run examples/healthcare/spec.yaml --smoke`, as a user types it: the tiny model on the local Tinker
    backend, the example's domain, parser and reward, two steps and both evaluations."""
    import subprocess
    import sys

    from ..support.cli import run_env

    result = subprocess.run([sys.executable, "-m", "ctu.cli", "run", str(SPEC.relative_to(REPO)), "--smoke", "--no-progress",
                             f"experiment.output_dir={tmp_path}"], cwd=REPO, env=run_env(), capture_output=True, text=True,
                            timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = [json.loads(line) for line in (tmp_path / "healthcare_grpo_smoke" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1, 2]
    assert all("reward/verified_first/contribution" in line for line in lines[1:])
    assert all(line["test-healthcare/num_episodes"] == 2 for line in (lines[0], lines[2]))
