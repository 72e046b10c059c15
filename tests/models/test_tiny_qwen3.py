"""The built-in tiny model builds from any calling context, once, however many processes ask for it."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from ctu.models import builtin, cache, tiny_qwen3, tiny_qwen3_data


def test_gold_examples_replay_from_inside_a_running_event_loop():
    async def inside_a_loop() -> list:
        return tiny_qwen3_data.gold_examples(limit=2)

    examples = asyncio.run(inside_a_loop())
    conversation, tools, index = examples[0]
    assert conversation[index]["role"] == "assistant" and tools
    assert len({id(conversation) for conversation, _, _ in examples}) == 2


def test_builds_taking_turns_build_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    builds: list[Path] = []

    def slow_tokenizer(path: Path) -> None:
        builds.append(path)
        time.sleep(0.5)
        (path / "tokenizer.json").write_text("{}")

    monkeypatch.setattr(tiny_qwen3, "build_tokenizer", slow_tokenizer)
    target = tmp_path / "tok"
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(tiny_qwen3.build(target, with_model=False))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [target] * 3
    assert len(builds) == 1
    assert (target / "tokenizer.json").exists()
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == ["tok"]  # no staging folder left behind


def test_a_failed_build_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def broken(path: Path) -> None:
        (path / "half.json").write_text("{}")
        raise RuntimeError("disk full")

    monkeypatch.setattr(tiny_qwen3, "build_tokenizer", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        tiny_qwen3.build(tmp_path / "tok", with_model=False)
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == []


def test_the_model_builds_inside_a_running_event_loop_and_samples_agent_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The cold path of every first run: `resolve` called from async code with no model in the cache (~1.5 min).
    In a session whose cache holds no model yet (CI's: every run starts with empty caches) it builds there, and the
    tests after it use that build; where one is cached already, it builds into an empty cache of its own."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if tiny_qwen3.is_built():
        monkeypatch.setenv("CTU_CACHE_DIR", str(tmp_path))
    folder = cache.cache_dir()
    assert not tiny_qwen3.is_built()
    phases: list[str] = []

    async def inside_a_loop() -> str:
        return builtin.resolve("builtin:tiny-qwen3", progress=lambda phase, done, total: phases.append(phase))

    path = Path(asyncio.run(inside_a_loop()))
    assert path == folder / f"tiny-qwen3-{tiny_qwen3.VERSION}" and tiny_qwen3.is_built()
    assert list(dict.fromkeys(phases)) == ["training the tokenizer", "warm-up on gold agent turns",
                                           "replaying gold episodes", "gold turns in their context"]
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path))
    prompt = tokenizer.apply_chat_template([{"role": "system", "content": "You are a retail agent."},
                                            {"role": "user", "content": "Please cancel my order #W2378156."}],
                                           add_generation_prompt=True, tokenize=False, enable_thinking=False)
    ids = torch.tensor([tokenizer.encode(prompt, add_special_tokens=False)])
    torch.manual_seed(0)
    output = model.generate(ids, max_new_tokens=40, do_sample=False)
    text = tokenizer.decode(output[0, ids.shape[1]:], skip_special_tokens=True)
    # the warm-up taught it the shape of an agent turn: a Hermes call or a sentence, ended by <|im_end|>
    assert text.strip() and (text.startswith("<tool_call>") or text[0].isupper()), text
