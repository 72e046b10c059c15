"""`tool_response` answers every tool call as tau2's `Environment.get_response` does, and leaves the same state."""

from __future__ import annotations

import itertools

import pytest

from tau_bench_env.env import shared_domain
from tau_bench_env.tool_calls import tool_response


def calls_of(task, broken: bool):
    """The task's gold actions as tau2 tool calls; with `broken`, each followed by calls that fail in tau2's
    ways (an unknown tool, an argument the tool lacks, a missing argument, a user call, an argument named like
    `make_tool_call`'s own)."""
    from tau2.data_model.message import ToolCall

    for index, action in enumerate(task.evaluation_criteria.actions or []):
        yield ToolCall(id=f"gold_{index}", name=action.name, arguments=dict(action.arguments), requestor=action.requestor)
        if broken:
            yield ToolCall(id=f"unknown_{index}", name=action.name + "_nope", arguments={}, requestor="assistant")
            yield ToolCall(id=f"extra_{index}", name=action.name, arguments={**action.arguments, "nope": 1},
                           requestor=action.requestor)
            yield ToolCall(id=f"missing_{index}", name=action.name, arguments={}, requestor=action.requestor)
            yield ToolCall(id=f"user_{index}", name=action.name, arguments=dict(action.arguments), requestor="user")
            yield ToolCall(id=f"reserved_{index}", name=action.name, arguments={**action.arguments, "tool_name": "x"},
                           requestor=action.requestor)


@pytest.mark.parametrize(("name", "tasks"), [("retail", 12), ("airline", 8), ("telecom", 40)])
def test_every_answer_and_state_is_tau2s(name, tasks):
    """Gold actions and failing calls (every second task's; retail's and airline's gold actions of every task are
    compared in `test_overlay`)."""
    domain = shared_domain(name)
    answers = 0
    for number, task in enumerate(itertools.islice(domain.tasks("base"), tasks)):
        ours, theirs = domain.episode_environment(task), domain.episode_environment(task)
        for call in calls_of(task, broken=number % 2 == 1):
            mine, reference = tool_response(ours, call), theirs.get_response(call)
            assert mine.model_dump(exclude={"timestamp"}) == reference.model_dump(exclude={"timestamp"}), (task.id, call)
            answers += 1
        assert ours.get_db_hash() == theirs.get_db_hash(), task.id
        if ours.user_tools is not None:
            assert ours.get_user_db_hash() == theirs.get_user_db_hash(), task.id
    assert answers > tasks


def test_solo_mode_runs_the_users_tools_for_the_agent_as_tau2_does():
    from tau2.data_model.message import ToolCall

    domain = shared_domain("telecom")
    task = next(task for task in domain.tasks("base")
                if any(action.requestor == "user" for action in task.evaluation_criteria.actions or []))
    ours, theirs = domain.episode_environment(task), domain.episode_environment(task)
    for environment in (ours, theirs):
        environment.solo_mode = True  # tau2's `set_solo_mode` refuses telecom's overlapping tool names
    for action in task.evaluation_criteria.actions:
        for requestor in ("assistant", "user"):
            call = ToolCall(id="1", name=action.name, arguments=dict(action.arguments), requestor=requestor)
            assert tool_response(ours, call).model_dump(exclude={"timestamp"}) == \
                theirs.get_response(call).model_dump(exclude={"timestamp"})
    assert ours.get_user_db_hash() == theirs.get_user_db_hash()


def test_an_environment_that_answers_its_own_way_is_asked():
    from tau2.data_model.message import ToolCall, ToolMessage

    domain = shared_domain("retail")
    environment = domain.episode_environment()

    class Answering(type(environment)):
        def get_response(self, message):
            return ToolMessage(id=message.id, content="mine", role="tool", requestor=message.requestor)

    environment.__class__ = Answering
    call = ToolCall(id="1", name="get_order_details", arguments={"order_id": "#W0000000"}, requestor="assistant")
    assert tool_response(environment, call).content == "mine"


def test_the_environment_syncs_after_each_call_that_ran():
    """tau2 syncs the user's surroundings after a tool call that returned (telecom's `sync_tools`), not after
    one that raised."""
    from tau2.data_model.message import ToolCall

    domain = shared_domain("telecom")
    task = next(task for task in domain.tasks("base") if task.evaluation_criteria.actions)
    environment = domain.episode_environment(task)
    synced = []

    class Counting(type(environment)):
        def sync_tools(self):
            synced.append(True)
            super().sync_tools()

    environment.__class__ = Counting
    action = task.evaluation_criteria.actions[0]
    tool_response(environment, ToolCall(id="1", name=action.name, arguments=dict(action.arguments), requestor=action.requestor))
    assert tool_response(environment, ToolCall(id="2", name="nope", arguments={}, requestor="assistant")).error
    assert len(synced) == 1
