"""Property: whatever is done to a valid spec, loading raises nothing but `SpecError` (or succeeds)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctu.spec import LoadedSpec, SpecError, dump_spec, load_spec, spec_from_dict

from .conftest import MINIMAL_SPEC, SPECS

VALID: list[dict[str, Any]] = [copy.deepcopy(MINIMAL_SPEC)] + [
    yaml.safe_load(dump_spec(load_spec(path).spec)) for path in SPECS[:4]
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["hermes", "retail", "${oc.env:HOME}", "${nope}", "${oc.env:A_KEY}", "type", "tinker", "skyrl", "", "${"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.one_of(st.text(max_size=8), st.sampled_from(["type", "domain", "weight"])), inner, max_size=3)
    ),
    max_leaves=8,
)


def paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            found += paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += paths(value, (*prefix, index))
    return found


def get(data: Any, path: tuple) -> Any:
    for part in path:
        data = data[part]
    return data


@st.composite
def mutated_specs(draw) -> dict[str, Any]:
    spec = copy.deepcopy(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 4))):
        candidates = paths(spec)[1:]
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        parent = get(spec, path[:-1])
        action = draw(st.sampled_from(["replace", "delete", "insert", "rename"]))
        if action == "replace":
            parent[path[-1]] = draw(values)
        elif action == "delete":
            del parent[path[-1]]
        elif action == "insert" and isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = draw(values)
        elif action == "rename" and isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = parent.pop(path[-1])
    return spec


overrides = st.lists(
    st.one_of(
        st.text(max_size=30),
        st.builds(
            lambda key, value: f"{key}={value}",
            st.sampled_from(["trainer.epochs", "rollout.parser", "data.train.0.split", "rewards.3", "a.b.c", "experiment", "model.path.x"]),
            st.text(max_size=12),
        ),
    ),
    max_size=3,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=mutated_specs(), extra=overrides)
def test_mutated_specs_raise_only_spec_error(spec: dict[str, Any], extra: list[str]):
    try:
        result = spec_from_dict(spec, extra)
    except SpecError as error:
        assert error.issues
        return
    assert isinstance(result, LoadedSpec)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    base=st.sampled_from(VALID),
    position=st.floats(0, 1),
    junk=st.text(alphabet=st.sampled_from(list(":{}[]-,#&*!|>'\"%@` \n\tabc012=$.")), max_size=8),
)
def test_corrupted_yaml_text_raises_only_spec_error(tmp_path_factory, base, position, junk):
    text = yaml.safe_dump(base, sort_keys=False)
    cut = int(position * len(text))
    path: Path = tmp_path_factory.mktemp("prop") / "spec.yaml"
    path.write_text(text[:cut] + junk + text[cut:])
    try:
        load_spec(path)
    except SpecError as error:
        assert error.issues
