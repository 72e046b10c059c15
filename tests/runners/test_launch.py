"""What `ctu run` does before a runner starts: the built-in model's first build, said and shown."""

from __future__ import annotations

import pytest
from rich.console import Console

from ctu.models import tiny_qwen3
from ctu.runners.launch import build_builtin_model


@pytest.mark.parametrize("progress", [True, False])
def test_the_first_run_says_it_builds_the_model_and_shows_each_phase(monkeypatch, progress: bool):
    built: list[str] = []

    def fake_resolve(model: str, progress=None) -> str:
        for phase in ("training the tokenizer", "warm-up on gold agent turns"):
            for done in range(3):
                progress(phase, done, 3)
        built.append(model)
        return "/cache/tiny-qwen3"

    monkeypatch.setattr(tiny_qwen3, "is_built", lambda: False)
    monkeypatch.setattr(tiny_qwen3, "resolve", fake_resolve)
    console = Console(record=True, width=120, force_terminal=False)
    build_builtin_model("builtin:tiny-qwen3", console, progress=progress)
    text = console.export_text()
    assert built == ["builtin:tiny-qwen3"]
    assert "building builtin:tiny-qwen3: first run only" in text
    assert "warm-up on gold agent turns" in text


def test_nothing_is_built_for_a_hub_model_or_a_cached_one(monkeypatch):
    monkeypatch.setattr(tiny_qwen3, "resolve", lambda *args, **kwargs: pytest.fail("nothing to build"))
    console = Console(record=True)
    build_builtin_model("Qwen/Qwen3-8B", console)
    monkeypatch.setattr(tiny_qwen3, "is_built", lambda: True)
    build_builtin_model("builtin:tiny-qwen3", console)
    assert console.export_text() == ""
