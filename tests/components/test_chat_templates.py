"""Chat-template policies, and the rule that every tokenisation in ctu goes through them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ctu.registry import registry

from ..conftest import REPO

MESSAGES = [{"role": "system", "content": "policy"}, {"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from ctu.models.tiny_qwen3 import tokenizer_path

    return AutoTokenizer.from_pretrained(str(tokenizer_path()))


def policy(name: str, **params):
    info = registry.chat_templates.get(name)
    return info.build(info.params_model(**params))


def test_default_is_the_tokenizers_own_template(tokenizer):
    text = policy("default").render(tokenizer, MESSAGES, add_generation_prompt=True)
    assert text == tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert "<think>" not in text


def test_qwen3_no_thinking_disables_thinking_in_every_call(tokenizer):
    no_thinking = policy("qwen3_no_thinking")
    text = no_thinking.render(tokenizer, MESSAGES, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    ids = no_thinking.encode(tokenizer, MESSAGES, add_generation_prompt=True)
    assert tokenizer.decode(ids) == text
    assert no_thinking.server_kwargs()["chat_template_kwargs"] == {"enable_thinking": False}


def test_jinja_file_replaces_the_template(tokenizer, tmp_path: Path):
    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}")
    jinja = policy("jinja_file", path=str(template))
    assert jinja.render(tokenizer, MESSAGES) == "[system] policy\n[user] hello\n"
    assert jinja.server_kwargs()["chat_template"] == template.read_text()


def test_tools_are_rendered_by_the_template(tokenizer):
    tools = [{"type": "function", "function": {"name": "get_order_details", "parameters": {"type": "object"}}}]
    text = policy("default").render(tokenizer, MESSAGES, tools=tools, add_generation_prompt=True)
    assert "<tools>" in text and "get_order_details" in text


ALLOWED = {Path("ctu/components/chat_templates/huggingface.py")}
TOKENISING = re.compile(r"\.apply_chat_template\(|tokenizer\.encode\(|tokenizer\(")


def test_no_code_path_tokenises_around_the_policy():
    """Only the chat-template module calls the tokenizer's template or encoder in ctu's own code."""
    offenders = []
    for root in ("ctu", "tau_bench_env"):
        for path in (REPO / root).rglob("*.py"):
            relative = path.relative_to(REPO)
            if relative in ALLOWED or relative.parts[:2] == ("ctu", "models"):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if TOKENISING.search(line):
                    offenders.append(f"{relative}:{number}: {line.strip()}")
    assert not offenders, offenders


def test_encode_text_gives_the_tokenizers_own_ids(tokenizer):
    """The Rust backend called directly gives `tokenizer.encode`'s ids, special tokens and odd text included."""
    template = policy("default")
    texts = [
        "<|im_start|>user\nWhere is order #W2378156?<|im_end|>\n<|im_start|>assistant\n",
        '<tool_call>\n{"name": "get_order_details", "arguments": {"order_id": "#W1"}}\n</tool_call><|im_end|>',
        "  leading spaces, trailing\t\n\n", "ünïcödé – “quotes” 价格 🚀", "",
    ]
    for text in texts:
        assert template.encode_text(tokenizer, text) == tokenizer.encode(text, add_special_tokens=False)


def test_decode_gives_the_tokenizers_own_text(tokenizer):
    """The Rust backend's decode, as the policy's parser sees a sampled turn, is `tokenizer.decode`'s, special
    tokens dropped or kept, ids that split a character included."""
    template = policy("default")
    assert tokenizer.clean_up_tokenization_spaces is False  # the backend is what is called here
    texts = ["<think>\n\n</think>\n\nSure.<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call><|im_end|>",
             "  leading spaces , before punctuation .\t\n", "ünïcödé – “quotes” 价格 🚀", ""]
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False)
        for cut in (ids, ids[:-1], ids[1:]):
            for skip in (True, False):
                assert template.decode(tokenizer, cut, skip) == tokenizer.decode(cut, skip_special_tokens=skip)
    cleaning = type("Cleaning", (), {"backend_tokenizer": object(), "clean_up_tokenization_spaces": True,
                                     "decode": lambda self, ids, skip_special_tokens: f"wrapper {ids}"})()
    assert template.decode(cleaning, [1, 2]) == "wrapper [1, 2]"  # cleanup asked for: the wrapper's own decode
