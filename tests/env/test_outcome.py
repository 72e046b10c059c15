"""`EpisodeResult` pickles its messages as one blob, unpickled only when they are read."""

from __future__ import annotations

import copy
import pickle
from dataclasses import replace

import pytest

from tau_bench_env.outcome import EpisodeResult


@pytest.fixture
def result():
    from tau2.data_model.message import AssistantMessage, ToolMessage

    trajectory = [AssistantMessage(role="assistant", content="one moment"),
                  ToolMessage(id="call_1", role="tool", content='{"user_id": "u1"}', requestor="assistant")]
    return EpisodeResult("retail", "7", turns=3, termination="user_stop", reward=1.0, tool_errors=1,
                         conversation=[{"role": "user", "content": "hi"}], tools=[{"type": "function"}],
                         trajectory=trajectory)


def test_the_messages_are_unpickled_when_first_read(result):
    loaded = pickle.loads(pickle.dumps(result))
    assert "conversation" not in vars(loaded) and "trajectory" not in vars(loaded)
    assert (loaded.turns, loaded.reward, loaded.tool_errors, loaded.tools) == (3, 1.0, 1, [{"type": "function"}])
    assert loaded.trajectory == result.trajectory and type(loaded.trajectory[1]) is type(result.trajectory[1])
    assert vars(loaded)["conversation"] == result.conversation  # both loaded by the first read
    assert loaded == result


def test_an_unread_result_pickles_its_blob_on_and_copies_whole(result):
    twice = pickle.loads(pickle.dumps(pickle.loads(pickle.dumps(result))))
    assert "conversation" not in vars(twice)
    assert twice == result
    assert copy.deepcopy(pickle.loads(pickle.dumps(result))) == result
    assert replace(pickle.loads(pickle.dumps(result)), turns=4).conversation == result.conversation


def test_a_missing_attribute_is_still_an_attribute_error(result):
    loaded = pickle.loads(pickle.dumps(result))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        loaded.nope  # noqa: B018
    assert not hasattr(result, "nope") and loaded.conversation == result.conversation
