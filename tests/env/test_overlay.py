"""Copy-on-access episode databases (`tau_bench_env.overlay`) behave as tau2's own private databases."""

from __future__ import annotations

import pytest

from tau_bench_env.env import shared_domain
from tau_bench_env.overlay import OverlayDatabase
from tau_bench_env.tool_calls import tool_response


@pytest.fixture(scope="module")
def retail():
    return shared_domain("retail")


def test_reset_shares_the_base_and_copies_nothing(retail):
    task = retail.tasks("base")[0]
    first, second = retail.episode_environment(task), retail.episode_environment(task)
    assert isinstance(first.tools.db, OverlayDatabase)
    assert first.tools.db is not second.tools.db
    assert first.tools.db.base is second.tools.db.base is retail.base_database
    assert all(not table.touched() for table in first.tools.db.tables.values())
    assert type(first.tools) is type(retail.make_environment().tools)


def test_table_reads_copy_and_writes_stay_in_the_episode(retail):
    base = retail.base_database.tables["orders"]
    env = retail.episode_environment()
    orders = env.tools.db.orders
    order_id = next(iter(base))
    record = orders[order_id]
    assert record is not base[order_id] and record.model_dump() == base[order_id].model_dump()
    assert orders[order_id] is record  # copied once
    record.status = "cancelled-by-test"
    assert base[order_id].status != "cancelled-by-test"
    assert retail.episode_environment().tools.db.orders[order_id].status == base[order_id].status
    assert order_id in orders and "#nope" not in orders
    with pytest.raises(KeyError):
        orders["#nope"]
    assert orders.get("#nope") is None


def test_add_delete_iterate_and_len_follow_dict_semantics(retail):
    base = retail.base_database.tables["orders"]
    orders = retail.episode_environment().tools.db.orders
    keys = list(base)
    new = orders[keys[1]].model_copy(update={"order_id": "#NEW"})
    orders["#NEW"] = new
    del orders[keys[0]]
    assert keys[0] not in orders and keys[0] in base
    with pytest.raises(KeyError):
        orders[keys[0]]
    with pytest.raises(KeyError):
        del orders[keys[0]]
    assert list(orders) == keys[1:] + ["#NEW"]
    assert len(orders) == len(base)
    assert orders.pop("#NEW") is new and "#NEW" not in orders
    # iteration does not copy untouched records
    untouched = keys[2]
    assert dict(orders.items())[untouched] is base[untouched]
    assert untouched not in orders.own


def test_gold_actions_give_tau2s_responses_and_hash_on_every_task():
    """Every retail and airline task's gold actions, run on tau2's own environment (`get_response`) and on an
    episode's copy-on-access one (as episodes run them, `tool_response`): the same tool responses, the same final
    hash, and state comparison agrees with it."""
    from tau2.data_model.message import ToolCall

    for name in ("retail", "airline"):
        domain = shared_domain(name)
        before = domain.base_database.hash()
        states = []
        for task in domain.tasks("base"):
            reference, episode = domain.make_environment(), domain.episode_environment(task)
            for index, action in enumerate(task.evaluation_criteria.actions or []):
                call = ToolCall(id=str(index), name=action.name, arguments=dict(action.arguments), requestor=action.requestor)
                assert tool_response(episode, call).content == reference.get_response(call).content, (name, task.id, index)
            episode_hash = episode.get_db_hash()  # tau2's whole-database hash: ~0.1 s each here
            assert episode_hash == reference.get_db_hash(), (name, task.id)
            states.append((episode_hash, episode.tools.db.state(), episode.tools.db))
        verdicts = []
        for i, (hash_a, state_a, _) in enumerate(states[:25]):
            for j, (hash_b, _, db_b) in enumerate(states):
                assert state_a.matches(db_b) == (hash_a == hash_b), (name, i, j)
                verdicts.append((i != j, hash_a == hash_b))
        assert (True, True) in verdicts and (True, False) in verdicts  # both outcomes on distinct tasks
        assert domain.base_database.hash() == before, f"{name}: a tool wrote to the shared base database"


def test_effective_writes_over_an_episodes_database_are_those_tau2s_hash_sees():
    """`effective_writes` sees a change through the touched records of a copy-on-access database and through
    tau2's whole-database hash otherwise: both give the same writes, on tasks whose gold runs hold writes that
    fail (retail 12, 13, 64, 105, 110: a write tool that changes nothing) and on ordinary ones."""
    from tau_bench_env.replay import effective_writes

    failing_writes = {"retail": (12, 13, 64, 105, 110), "airline": ()}
    for name, indices in {"retail": (0, *failing_writes["retail"]), "airline": (0, 10, 20, 30)}.items():
        domain = shared_domain(name)
        tasks = domain.tasks("base")
        for index in indices:
            task = tasks[index]
            episode = domain.episode_environment(task)
            assert isinstance(episode.tools.db, OverlayDatabase)
            writes = effective_writes(episode, task)
            assert writes == effective_writes(domain.make_environment(), task), (name, task.id)
            nominal = [i for i, action in enumerate(task.evaluation_criteria.actions or []) if action.name in domain.write_tools]
            assert set(writes) <= set(nominal)
            if index in failing_writes[name]:
                assert set(writes) < set(nominal), task.id  # a gold write that changes nothing is not counted


def test_a_task_with_initialization_data_gets_a_private_database(retail):
    from tau2.data_model.tasks import InitializationData, InitialState

    task = retail.tasks("base")[0].model_copy(deep=True)
    task.initial_state = InitialState(initialization_data=InitializationData(agent_data={}))
    assert not isinstance(retail.episode_environment(task).tools.db, OverlayDatabase)
    assert not isinstance(shared_domain("telecom").episode_environment().tools.db, OverlayDatabase)
