"""Every shipped spec on the skyrl backend resolves to the SkyRL overrides it resolved to when the snapshot was
taken (`tests/snapshots/skyrl_overrides.json`): a refactoring of the composition root or of `skyrl_overrides`
must not change what a GPU run gets. A deliberate change regenerates the snapshot, in the same commit:
`uv run python -m tests.test_skyrl_snapshot`."""

from __future__ import annotations

import json
from pathlib import Path

from ctu.backends.skyrl.config import skyrl_overrides
from ctu.composition import build_components
from ctu.spec import load_spec

from .conftest import REPO

SNAPSHOT = REPO / "tests" / "snapshots" / "skyrl_overrides.json"
RUN = Path("/run-dir")
"""A fixed run directory, so the paths in the overrides do not depend on the machine."""


def resolved_overrides() -> dict[str, dict]:
    """``{spec file: its SkyRL overrides}`` for every spec under specs/ whose backend is skyrl (JSON-ready)."""
    found = {}
    for path in sorted((REPO / "specs").glob("*.yaml")):
        spec = load_spec(path).spec
        if spec.backend.type == "skyrl":
            overrides = skyrl_overrides(build_components(spec), spec.backend.params, RUN / "data", RUN)
            found[path.name] = json.loads(json.dumps(overrides, default=str))
    return found


def test_every_shipped_skyrl_spec_resolves_to_the_overrides_of_the_snapshot():
    expected = json.loads(SNAPSHOT.read_text())
    got = resolved_overrides()
    assert got.keys() == expected.keys()
    for name in got:
        changed = {key: (expected[name].get(key), got[name].get(key)) for key in got[name].keys() | expected[name].keys()
                   if expected[name].get(key) != got[name].get(key)}
        assert not changed, f"{name}: (snapshot, now) {changed}"


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(resolved_overrides(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}")
