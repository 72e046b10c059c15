"""`ctu validate`'s first-prompt check (`ctu.spec.prompt_fit`): the count it makes without transformers is the one
the rollout makes, it bounds every real first prompt from below, the warnings come where the run would measure
nothing or cut the first turn, and a count is made once."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ctu.composition import build_components
from ctu.models.tokenizer_files import FileTokenizer
from ctu.rollout.build import env_setup
from ctu.rollout.requests import TaskRow
from ctu.rollout.tokens import TokenAccount
from ctu.spec import spec_from_dict
from ctu.spec.prompt_fit import count_first_prompt
from tau_bench_env.env import TauBenchEnv
from tau_bench_env.prompts import opening_floor

from .conftest import MINIMAL_SPEC, REPO

CALL = {"id": "call-1", "type": "function", "function": {"name": "find_user", "arguments": '{"email": "ü@x.org"}'}}
TOOLS = [{"type": "function", "function": {"name": "find_user", "description": "Find a user <b>☃</b> & more",
                                           "parameters": {"type": "object", "properties": {"email": {"type": "string"}}}}}]
CONVERSATIONS = [
    [{"role": "system", "content": "Be brief, ü"}, {"role": "user", "content": "hi"}],
    [{"role": "system", "content": "s"}, {"role": "assistant", "content": "Hi!"}, {"role": "user", "content": ""}],
    [{"role": "user", "content": "find me"}, {"role": "assistant", "content": None, "tool_calls": [CALL]},
     {"role": "tool", "tool_call_id": "call-1", "content": '{"user_id": "u1"}'}, {"role": "assistant", "content": "Done."}],
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model folder holding the built-in tiny Qwen3's tokenizer files only (what a count reads)."""
    from ctu.models.tiny_qwen3 import tokenizer_path

    folder = tmp_path_factory.mktemp("model")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tokenizer_path() / name, folder)
    return folder


def spec_data(folder: Path, **model: object) -> dict:
    data = copy.deepcopy(MINIMAL_SPEC)
    data["model"] = {"path": str(folder), "family": "qwen3", "chat_template": "qwen3_no_thinking", **model}
    data["data"] = {"train": [{"domain": "retail", "split": "train"}], "test_sets": {"mock": {"domain": "mock", "split": "base"}}}
    return data


def test_the_file_tokenizer_renders_and_encodes_as_transformers_does(folder: Path, tmp_path: Path):
    """Text and ids equal transformers' for conversations with and without tools, tool calls and results, non-ASCII
    text and HTML in schemas, the template's own arguments; a folder's named templates (``tool_use`` chosen when
    there are tools) and a ``{% generation %}`` block too."""
    from transformers import AutoTokenizer

    theirs, ours = AutoTokenizer.from_pretrained(str(folder)), FileTokenizer(folder)
    for conversation in CONVERSATIONS:
        for tools in (None, TOOLS):
            for kwargs in ({}, {"enable_thinking": False}):
                for prompt in (False, True):
                    text = theirs.apply_chat_template(conversation, tools=tools, tokenize=False, add_generation_prompt=prompt, **kwargs)
                    assert ours.apply_chat_template(conversation, tools=tools, add_generation_prompt=prompt, **kwargs) == text
                    assert ours.encode(text, add_special_tokens=False) == theirs.encode(text, add_special_tokens=False)
    assert (ours.eos_token, ours.eos_token_id) == (theirs.eos_token, theirs.eos_token_id)
    assert sorted(ours.all_special_tokens) == sorted(theirs.all_special_tokens)

    named = tmp_path / "named"
    named.mkdir()
    shutil.copy(folder / "tokenizer.json", named)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = [
        {"name": "default", "template": "{% for m in messages %}{% generation %}[{{ m.role }}]{{ m.content }}{% endgeneration %}{% endfor %}"},
        {"name": "tool_use", "template": "{{ tools | tojson }}{% for m in messages %}<{{ m.content }}>{{ eos_token }}{% endfor %}"},
    ]
    (named / "tokenizer_config.json").write_text(json.dumps(config))
    theirs, ours = AutoTokenizer.from_pretrained(str(named)), FileTokenizer(named)
    for tools in (None, TOOLS):
        assert ours.apply_chat_template(CONVERSATIONS[0], tools=tools) == theirs.apply_chat_template(CONVERSATIONS[0], tools=tools, tokenize=False)


@pytest.mark.parametrize("native", [False, True])
def test_the_count_is_the_rollouts_own_and_bounds_every_real_first_prompt_from_below(folder: Path, native: bool):
    """The count equals the rollout's ids of the same opening (`TokenAccount.prompt_ids` over transformers'
    tokenizer), and each task's real first prompt (the scripted user's opening line added) is longer."""
    from transformers import AutoTokenizer

    data = spec_data(folder)
    data["rollout"] = {"native_tool_calling": native}
    spec = spec_from_dict(data).spec
    source = spec.data.test_sets["mock"]
    floor = count_first_prompt(spec, source, folder)
    components = build_components(spec)
    account = TokenAccount(components.chat_template, AutoTokenizer.from_pretrained(str(folder)))
    messages, tools = opening_floor(components.domain(source), components.parser, spec.episode_config())
    assert isinstance(floor, int) and floor == len(account.prompt_ids(messages, tools))
    for task_id in ("create_task_1", "update_task_1"):
        env = TauBenchEnv(env_setup(components), TaskRow("mock", task_id, "base"))
        prompt, metadata = env.init()
        assert len(account.prompt_ids(prompt, metadata["tools"] if native else None)) > floor
        assert [message["role"] for message in prompt] == ["system", "assistant", "user"] and prompt[0] == messages[0]


def validate(spec: Path, cache: Path, *overrides: str, probe: bool = False) -> subprocess.CompletedProcess[str]:
    """`ctu validate SPEC OVERRIDES` in a new process with ctu's cache at `cache`; `probe`: print the heavy modules
    it imported."""
    code = (f"import sys, runpy\nsys.argv = ['ctu', 'validate', {str(spec)!r}, *{list(overrides)!r}]\n"
            "try:\n    runpy.run_module('ctu.cli', run_name='__main__')\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
            "print('HEAVY', [m for m in ('torch', 'transformers', 'tau2') if m in sys.modules])\n")
    return subprocess.run([sys.executable, "-c", code] if probe else [sys.executable, "-m", "ctu.cli", "validate", str(spec), *overrides],
                          capture_output=True, text=True, cwd=REPO, env={**os.environ, "CTU_CACHE_DIR": str(cache), "COLUMNS": "300"},
                          timeout=300)


def test_validate_warns_where_the_first_prompt_cannot_fit_and_counts_once(folder: Path, tmp_path: Path):
    """At a context the first prompt fills, validate warns that nothing would be measured; where it leaves less
    than a turn, that the first turn is cut; with room, nothing. The count is read from ctu's cache afterwards
    (no tau2, no torch), and made anew when the tokenizer's files change."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps(spec_data(folder) | {"rollout": {"max_tokens_per_turn": 64}}))
    loaded = spec_from_dict(spec_data(folder)).spec
    retail, mock = (count_first_prompt(loaded, source, folder) for source in (loaded.data.train[0], loaded.data.test_sets["mock"]))
    assert isinstance(retail, int) and isinstance(mock, int) and mock + 64 < retail  # retail's policy is longer
    cache = tmp_path / "cache"
    first = validate(spec, cache, f"model.max_model_len={mock}", probe=True)
    said = " ".join(first.stderr.split())
    assert first.returncode == 0 and "HEAVY ['tau2']" in first.stdout, first.stdout + first.stderr
    for path, floor in (("data.train.0", retail), ("data.test_sets.mock", mock)):
        assert (f"{path}: the first prompt of its episodes is at least {floor} tokens (system prompt, tools and greeting, "
                f"before the user's first words) and model.max_model_len is {mock}: every episode would end "
                "context_overflow before the policy's first turn and nothing would be measured") in said
    cut = validate(spec, cache, f"model.max_model_len={retail + 10}", probe=True)
    said = " ".join(cut.stderr.split())
    assert (f"data.train.0: the first prompt of its episodes is at least {retail} tokens, which leaves at most 10 of "
            "rollout.max_tokens_per_turn's 64 for the policy's first turn") in said and "data.test_sets.mock" not in said
    assert "HEAVY []" in cut.stdout, cut.stdout + cut.stderr  # both counts read from the cache
    roomy = validate(spec, cache, f"model.max_model_len={retail + 64}")
    assert roomy.returncode == 0 and "first prompt" not in roomy.stderr, roomy.stderr
    (folder / "tokenizer_config.json").write_text((folder / "tokenizer_config.json").read_text() + "\n")
    again = validate(spec, cache, f"model.max_model_len={mock}", probe=True)
    assert "HEAVY ['tau2']" in again.stdout and f"at least {mock} tokens" in again.stderr


def test_a_first_prompt_that_cannot_be_counted_is_said(folder: Path, tmp_path: Path):
    """A chat template that raises on the opening (as the run would) is a warning naming the error, not a crash."""
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    (broken / "chat_template.jinja").write_text("{{ raise_exception('no system messages here') }}")
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps(spec_data(broken)))
    done = validate(spec, tmp_path / "cache")
    said = " ".join(done.stderr.split())
    assert done.returncode == 0 and "its first prompt could not be counted" in said and "no system messages here" in said


def test_a_hub_model_is_counted_from_the_hugging_face_cache_once_downloaded(folder: Path, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch):
    """A hub id is looked up in the Hugging Face cache (its snapshot of the model, as huggingface_hub lays it out);
    a model never downloaded is not counted."""
    from ctu.models.tokenizer_files import tokenizer_folder

    snapshot = tmp_path / "hf" / "hub" / "models--org--tiny" / "snapshots" / "0123abc"
    shutil.copytree(folder, snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0123abc")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    assert tokenizer_folder("org/tiny") == snapshot and tokenizer_folder("org/elsewhere") is None
