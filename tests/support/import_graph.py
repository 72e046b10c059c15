"""Cycles in an import graph, for the tests that read the source's imports (`tests/test_layering.py` between
packages, `tests/test_budgets.py` between modules)."""

from __future__ import annotations

from collections.abc import Mapping, Set


def cycles(graph: Mapping[str, Set[str]]) -> list[str]:
    """Each edge ``a -> b`` of `graph` (a node -> the nodes it imports) that lies on a cycle, as ``"a <-> b"``,
    sorted; [] for a graph without one."""
    def reaches(start: str, goal: str) -> bool:
        seen, stack = {start}, [start]
        while stack:
            for following in graph.get(stack.pop(), ()):
                if following == goal:
                    return True
                if following not in seen:
                    seen.add(following)
                    stack.append(following)
        return False

    return sorted(f"{a} <-> {b}" for a in graph for b in graph[a] if reaches(b, a))
