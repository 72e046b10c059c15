"""`frozen_heap`: the collector ignores pre-existing objects during a batch, and gets them back after it; its
youngest threshold is raised for the batch only."""

from __future__ import annotations

import gc

from ctu.rollout.heap import BATCH_GC_THRESHOLD, frozen_heap


def _tracked(item: object) -> bool:
    """Whether the collector's generations (not the permanent one) hold `item`."""
    return any(other is item for other in gc.get_objects())


def test_objects_alive_before_the_batch_are_frozen_for_it_and_only_for_it():
    before = [1, 2, 3]
    assert _tracked(before)
    with frozen_heap():
        assert not _tracked(before) and gc.get_freeze_count() > 0
        during = [4, 5, 6]
        assert _tracked(during)
        with frozen_heap():  # re-entrant: an inner block changes nothing
            assert _tracked(during)
        assert _tracked(during) and not _tracked(before)
    assert _tracked(before) and gc.get_freeze_count() == 0


def test_what_the_batch_leaves_alive_joins_the_oldest_generation_unwalked_by_young_collections():
    with frozen_heap():
        survivor = [7, 8, 9]
        assert any(item is survivor for item in gc.get_objects(generation=0))
    assert not any(item is survivor for item in gc.get_objects(generation=0))
    assert any(item is survivor for item in gc.get_objects(generation=2))


def test_garbage_made_during_the_batch_is_collected_and_the_heap_unfreezes_on_error():
    class Node:
        pass

    try:
        with frozen_heap():
            a, b = Node(), Node()
            a.other, b.other = b, a  # a reference cycle created during the batch
            del a, b
            assert gc.collect() >= 2
            raise RuntimeError("an episode failed")
    except RuntimeError:
        pass
    assert gc.get_freeze_count() == 0


def test_the_youngest_threshold_is_raised_for_the_batch_and_restored_after_it_even_on_error():
    original = gc.get_threshold()
    gc.set_threshold(500, 7, 9)  # whatever the process set is what comes back
    try:
        try:
            with frozen_heap():
                assert gc.get_threshold() == (BATCH_GC_THRESHOLD, 7, 9)
                with frozen_heap():
                    assert gc.get_threshold() == (BATCH_GC_THRESHOLD, 7, 9)
                assert gc.get_threshold() == (BATCH_GC_THRESHOLD, 7, 9)  # until the outermost block ends
                raise RuntimeError("an episode failed")
        except RuntimeError:
            pass
        assert gc.get_threshold() == (500, 7, 9)
    finally:
        gc.set_threshold(*original)
