"""`TauBenchEnv`, ctu's own environment class, and the episode rules it carries (termination, errors, records); the
SkyRL-gym wrapper the skyrl backend registers (`ctu.backends.skyrl.gym_env`)."""

from __future__ import annotations

import asyncio
import json

import pytest

from ctu.components.parsers.base import ParsedTurn, ToolCall
from ctu.components.parsers.hermes import HermesParser
from ctu.components.user_simulators.scripted import ScriptedUserSimulator
from tau_bench_env.env import EnvSetup, TauBenchEnv, tau2_domains
from tau_bench_env.outcome import EpisodeConfig

RETAIL_TASK = {"domain": "retail", "task_id": "0"}


def setup(user=None, **config) -> EnvSetup:
    return EnvSetup(user or ScriptedUserSimulator(), HermesParser(), EpisodeConfig(**config), tau2_domains("retail", "airline", "telecom", "mock"))


def make(extras=RETAIL_TASK, user=None, **config) -> TauBenchEnv:
    return TauBenchEnv(setup(user, **config), extras)


def call(name: str, **arguments) -> str:
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


def test_builds_from_row_extras_and_starts_with_tau2s_prompt():
    env = make()
    prompt, metadata = env.init([{"role": "system", "content": "ignored"}])
    assert [m["role"] for m in prompt] == ["system", "assistant", "user"]
    assert "<policy>" in prompt[0]["content"] and "<tool_call>" in prompt[0]["content"]  # text mode: tools rendered
    assert prompt[1]["content"] == "Hi! How can I help you today?"
    assert metadata["done"] is False
    assert {tool["function"]["name"] for tool in metadata["tools"]} >= {"find_user_id_by_name_zip", "get_order_details"}


def test_a_prompt_without_the_domain_policy_and_with_compact_tool_schemas():
    full, _ = make().init([])
    env = TauBenchEnv(EnvSetup(ScriptedUserSimulator(), HermesParser(HermesParser.Params(tool_descriptions=False)),
                               EpisodeConfig(domain_policy=False), tau2_domains("retail", "airline", "telecom", "mock")), RETAIL_TASK)
    short, metadata = env.init([])
    policy = env.episode.environment.get_policy()
    assert policy in full[0]["content"] and policy not in short[0]["content"]
    assert "<policy>" in short[0]["content"]  # tau2's prompt scaffold stays; the policy inside it is empty
    tools = short[0]["content"].split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    schemas = [json.loads(line) for line in tools]
    assert [s["function"]["name"] for s in schemas] == [t["function"]["name"] for t in metadata["tools"]]
    assert all("description" not in s["function"] for s in schemas)
    zip_tool = next(s for s in schemas if s["function"]["name"] == "find_user_id_by_name_zip")["function"]
    assert set(zip_tool["parameters"]["properties"]) == {"first_name", "last_name", "zip"}
    assert zip_tool["parameters"]["properties"]["zip"] == {"type": "string"}
    assert len(short[0]["content"]) < len(full[0]["content"]) / 2
    assert short[1:] == full[1:]  # the same greeting and user opening


def test_extras_nested_under_extra_info_are_accepted():
    env = make({"extra_info": RETAIL_TASK})
    assert env.episode.task.id == "0"


def test_missing_or_unknown_task_is_a_clear_error():
    with pytest.raises(KeyError, match="domain"):
        make({"task_id": "0"})
    with pytest.raises(KeyError, match="no task 'nope'"):
        make({"domain": "retail", "task_id": "nope"})


def test_tool_calls_run_against_the_episodes_own_database():
    env, other = make(), make()
    env.init([])
    other.init([])
    out = env.step(call("find_user_id_by_name_zip", first_name="Yusuf", last_name="Rossi", zip="19122"))
    assert out.observations == [{"role": "tool", "tool_call_id": "call_1_0", "content": "yusuf_rossi_9620"}]
    assert not out.done
    order = env.step(call("get_order_details", order_id="#W2378156"))
    status = json.loads(order.observations[0]["content"])["status"]
    env.step(call("cancel_pending_order", order_id="#W2378156", reason="no longer needed"))
    assert status == "delivered"  # delivered orders cannot be cancelled: a tool error, not an exception
    assert env.episode.tool_errors == 1
    assert env.episode._env.get_db_hash() == other.episode._env.get_db_hash()
    env.step(call("modify_user_address", user_id="yusuf_rossi_9620", address1="1 Main St", address2="", city="X", state="PA", country="USA", zip="19122"))
    assert env.episode._env.get_db_hash() != other.episode._env.get_db_hash()


def test_unparsable_and_empty_turns_are_errors_that_never_reach_the_user():
    env = make(max_errors=3)
    env.init([])
    before = len(env.episode.trajectory)
    bad = env.step("<tool_call>{not json}</tool_call>")
    assert bad.observations[0]["role"] == "tool" and "could not be parsed" in bad.observations[0]["content"]
    empty = env.step("   ")
    assert "empty" in empty.observations[0]["content"]
    assert len(env.episode.trajectory) == before
    last = env.step("")
    assert last.done and last.reward == 0.0
    assert last.metadata["termination"] == "too_many_errors"
    assert env.get_metrics()["parse_failures"] == 1 and env.episode.empty_turns == 2


def test_max_turns_ends_with_reward_zero():
    env = make(max_turns=2)
    env.init([])
    assert not env.step(call("list_all_product_types")).done
    out = env.step(call("list_all_product_types"))
    assert out.done and out.reward == 0.0 and out.metadata["termination"] == "max_turns"


def test_agent_stop_ends_and_is_evaluated():
    env = make()
    env.init([])
    out = env.step("I cannot help further. ###STOP###")
    assert out.done and out.metadata["termination"] == "agent_stop"
    assert out.reward == 0.0  # nothing was done, so tau2's database check fails
    assert out.metadata["reward_breakdown"] is not None


def test_agent_stop_with_tool_calls_stops_without_running_them():
    """As tau2's orchestrator does: the stop token ends the episode before any call of its turn runs."""
    env, untouched = make(), make()
    env.init([])
    untouched.init([])
    turn = call("modify_user_address", user_id="yusuf_rossi_9620", address1="1 Main St", address2="", city="X",
                state="PA", country="USA", zip="19122")
    out = env.step("Done. ###STOP###\n" + turn)
    assert out.done and out.metadata["termination"] == "agent_stop"
    assert env.episode.tool_errors == 0
    assert env.episode._env.get_db_hash() == untouched.episode._env.get_db_hash()
    assert not env.episode.trajectory[-1].tool_calls  # tau2's evaluator replays no call that never ran
    assert "###STOP###" in env.episode.conversation[-1]["content"]  # the policy's own words stay in its record


def test_user_stop_and_metadata_hold_the_full_conversation():
    env = make(user=ScriptedUserSimulator(ScriptedUserSimulator.Params(turn_budget=1)))
    env.init([])
    env.step(call("find_user_id_by_name_zip", first_name="Yusuf", last_name="Rossi", zip="19122"))
    out = env.step("Anything else I can do?")
    assert out.done and out.metadata["termination"] == "user_stop"
    metadata = out.metadata
    roles = [m["role"] for m in metadata["conversation"]]
    assert roles == ["system", "assistant", "user", "assistant", "tool", "assistant"]
    assert metadata["domain"] == "retail" and metadata["task_id"] == "0" and metadata["turns"] == 2
    assert env.get_metrics()["termination/user_stop"] == 1


def test_native_mode_takes_structured_tool_calls_and_keeps_tools_out_of_the_prompt():
    env = TauBenchEnv(setup(native_tool_calling=True), RETAIL_TASK)
    prompt, metadata = env.init([])
    assert "<tool_call>" not in prompt[0]["content"] and metadata["tools"]

    async def play():
        return await env.astep(ParsedTurn(content="", tool_calls=(ToolCall("find_user_id_by_name_zip", {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}),)))

    out = asyncio.run(play())
    assert out.observations[0]["content"] == "yusuf_rossi_9620"
    assistant = env.episode.conversation[-2]
    assert assistant["tool_calls"][0]["function"]["name"] == "find_user_id_by_name_zip"
    assert env.episode.result().parsed_turns == {}  # the conversation's turns carry their calls


def test_a_text_mode_turn_keeps_its_raw_text_and_notes_its_parsed_calls_or_the_parsers_reason():
    """In text mode the conversation holds each turn as the policy wrote it (what the sampler is sent again); the
    result notes what the parser read beside it, and a trajectory line carries that note (`parsed`), which reading
    the line back as a conversation drops."""
    from ctu.rollout.trajectories import conversation_of, logged_messages

    env = make()
    env.init([])
    env.step("Looking you up. " + call("find_user_id_by_name_zip", first_name="Yusuf", last_name="Rossi", zip="19122"))
    env.step("<tool_call>{not json}</tool_call>")
    env.step("How can I help?")
    result = env.episode.result()
    turns = [i for i, m in enumerate(result.conversation) if m["role"] == "assistant"]
    called, garbled, plain = turns[-3:]
    assert result.conversation[called]["content"].startswith("Looking you up. <tool_call>")
    assert "tool_calls" not in result.conversation[called]  # the sampler is sent the raw text only
    (parsed,) = result.parsed_turns[called]["tool_calls"]
    assert parsed["function"]["name"] == "find_user_id_by_name_zip"
    assert json.loads(parsed["function"]["arguments"]) == {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}
    assert result.parsed_turns[garbled]["tool_calls"] == [] and result.parsed_turns[garbled]["parse_errors"]
    assert plain not in result.parsed_turns
    logged = logged_messages(result.conversation, result.parsed_turns)
    assert logged[called]["parsed"] == result.parsed_turns[called] and "parsed" not in logged[plain]
    assert conversation_of(logged) == result.conversation


def test_step_after_done_is_refused():
    env = make(max_turns=1)
    env.init([])
    env.step("hello")
    with pytest.raises(RuntimeError, match="done"):
        env.step("again")


def test_sync_interface_works_inside_a_running_event_loop():
    async def inside():
        env = make()
        prompt, _ = env.init([])
        return prompt

    assert asyncio.run(inside())[-1]["role"] == "user"


def test_the_gold_state_is_computed_at_reset_and_a_failure_there_is_an_evaluator_fault_at_the_end(monkeypatch):
    """The fast reward's gold state is ready before the episode ends (its reset computes it); if computing it
    fails, the reset still succeeds and the episode's end records the failure, as the task's (an infrastructure
    error: tests/env/test_evaluation_faults.py)."""
    from tau_bench_env.fast_eval import GoldOutcomes

    env = make({"domain": "retail", "task_id": "1"})
    gold = env.episode.domain.gold_outcomes
    gold._states.pop(("1", True), None)
    env.init([])
    assert ("1", True) in gold._states
    computed = []
    monkeypatch.setattr(GoldOutcomes, "_gold_environment", lambda *args: computed.append(1) or 1 / 0)
    failing = make({"domain": "retail", "task_id": "2"})
    gold._states.pop(("2", True), None)
    failing.init([])  # does not raise
    out = failing.step("I cannot help further. ###STOP###")
    assert out.done and out.reward == 0.0 and len(computed) == 2
    assert out.metadata["evaluator_fault"] == "gold outcome: ZeroDivisionError: division by zero"


class RecordingUser:
    """The scripted user, noting in `events` when an opening is asked for and when it was cancelled; each reply
    takes 10 ms, as an endpoint would."""

    def __init__(self, events: list[str], hang: bool = False) -> None:
        self.inner, self.events, self.hang = ScriptedUserSimulator(), events, hang

    def session(self, task, user_tools, trajectory, *, seed=None):
        inner, events, hang = self.inner.session(task, user_tools, trajectory), self.events, self.hang

        class Session:
            async def reply(self, message):
                events.append("asked")
                try:
                    await asyncio.sleep(3600 if hang else 0.01)
                except asyncio.CancelledError:
                    events.append("cancelled")
                    raise
                return await inner.reply(message)

        return Session()


def test_a_batchs_openings_are_asked_for_before_any_environment_is_built_and_a_failed_build_cancels_its_opening(monkeypatch):
    """Episodes started together send their users' openings first and build their environments while the openings
    are in flight (so the last episode's opening does not wait for every environment); the prompts are those of
    episodes reset one by one. An environment that cannot be built cancels its episode's opening."""
    events: list[str] = []
    alone = [make({"domain": "retail", "task_id": str(n)}).init([])[0] for n in range(3)]
    envs = [make({"domain": "retail", "task_id": str(n)}, user=RecordingUser(events)) for n in range(3)]
    domain = envs[0].episode.domain
    build = type(domain).episode_environment
    monkeypatch.setattr(type(domain), "episode_environment", lambda self, task=None: events.append("built") or build(self, task))

    async def batch():
        return await asyncio.gather(*(env.ainit([]) for env in envs))

    prompts = [prompt for prompt, _ in asyncio.run(batch())]
    assert events == ["asked"] * 3 + ["built"] * 3
    assert prompts == alone

    events.clear()
    monkeypatch.setattr(type(domain), "episode_environment", lambda self, task=None: 1 / 0)
    broken = make(user=RecordingUser(events, hang=True))

    async def reset_and_settle():
        with pytest.raises(ZeroDivisionError):
            await broken.ainit([])
        await asyncio.sleep(0)  # the cancelled opening runs its last step

    asyncio.run(reset_and_settle())
    assert events == ["asked", "cancelled"]


def test_the_skyrl_backend_registers_a_skyrl_gym_environment_over_it():
    """SkyRL-gym at the edge: the skyrl backend's wrapper, registered under the datasets' `env_class`, plays the
    same episode through SkyRL-gym's interface (its step a dict)."""
    import skyrl_gym

    from ctu.backends.skyrl.datasets import ENV_CLASS
    from ctu.backends.skyrl.gym_env import SkyRLGymEnv, register_with_skyrl_gym

    register_with_skyrl_gym()
    register_with_skyrl_gym()  # idempotent
    wrapped = skyrl_gym.make(ENV_CLASS, env_config=setup(), extras={"extra_info": RETAIL_TASK})
    assert isinstance(wrapped, SkyRLGymEnv) and isinstance(wrapped.env, TauBenchEnv)
    prompt, metadata = wrapped.init([])
    assert prompt == make().init([])[0] and metadata["done"] is False
    out = wrapped.step(call("find_user_id_by_name_zip", first_name="Yusuf", last_name="Rossi", zip="19122"))
    assert out["observations"] == [{"role": "tool", "tool_call_id": "call_1_0", "content": "yusuf_rossi_9620"}]
    assert out["done"] is False and wrapped.turns == 1 and wrapped.get_metrics()["turns"] == 1
