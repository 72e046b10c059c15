"""Token accounting (`ctu.rollout.tokens.TokenAccount`): cached system blocks and short-context assistant turns
give the same ids as rendering and encoding whole conversations."""

from __future__ import annotations

import json

import pytest

from ctu.registry import registry
from ctu.rollout.tokens import TokenAccount
from tau_bench_env.env import shared_domain

QWEN3_LIKE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.role == 'assistant' and loop.last and enable_thinking is defined and not enable_thinking %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{{- (message.content or '') }}"
    "{%- for call in (message.tool_calls or []) %}"
    "{{- '<tool_call>\\n{\"name\": \"' + call.function.name + '\", \"arguments\": ' + call.function.arguments + '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and not enable_thinking %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)
"""Real Qwen3's behaviour in small: the last assistant turn repeats the generation prompt's empty thinking block."""


def policy(name: str, **params):
    info = registry.chat_templates.get(name)
    return info.build(info.params_model(**params))


def call(name: str, arguments: dict) -> dict:
    return {"id": "c0", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def conversation(system: str, user: str) -> list[dict]:
    return [
        {"role": "system", "content": system},
        {"role": "assistant", "content": "Hi! How can I help you today?"},
        {"role": "user", "content": user},
        {"role": "assistant", "content": None, "tool_calls": [call("get_order_details", {"order_id": "#W1"})]},
        {"role": "tool", "tool_call_id": "c0", "content": json.dumps({"order_id": "#W1", "status": "pending"})},
    ]


@pytest.mark.parametrize("template", ["default", "qwen3_no_thinking"])
def test_prompt_ids_equal_a_whole_encoding_and_cache_the_system_block(tokenizer, template):
    account = TokenAccount(policy(template), tokenizer)
    tools = shared_domain("retail").tool_schemas
    system = shared_domain("retail").policy
    for user in ("Where is my order #W1?", "Hello\n\n  I want to return something.", "<tool_call>not really"):
        for tool_schemas in (tools, None):
            messages = conversation(system, user)
            whole = account.policy.encode(tokenizer, messages, tool_schemas, add_generation_prompt=True)
            assert account.prompt_ids(messages, tool_schemas) == whole
            assert account.prompt_ids(messages, tool_schemas) == whole  # the cached block's turn
    assert len(account._system_blocks) == 2  # one block with the tool schemas, one without


def _full_context_turn(account: TokenAccount, messages: list[dict], message: dict, tools) -> list[int]:
    """The assistant turn's ids by rendering the whole conversation before and after it (prefix-stable templates)."""
    before = account.policy.render(account.tokenizer, messages, tools, add_generation_prompt=True)
    after = account.policy.render(account.tokenizer, [*messages, message], tools, add_generation_prompt=False)
    assert after.startswith(before)
    turn = after[len(before):]
    return account.policy.encode_text(account.tokenizer, turn[: turn.index(account.eos_text) + len(account.eos_text)])


@pytest.mark.parametrize("message", [
    {"role": "assistant", "content": "Your order is pending. Anything else?"},
    {"role": "assistant", "content": None, "tool_calls": [call("cancel_pending_order", {"order_id": "#W1", "reason": "no longer needed"})]},
    {"role": "assistant", "content": "Let me look.", "tool_calls": [call("get_user_details", {"user_id": "u1"})]},
])
def test_assistant_turn_in_short_context_equals_the_whole_conversations(tokenizer, message):
    account = TokenAccount(policy("default"), tokenizer)
    tools = shared_domain("retail").tool_schemas
    messages = conversation(shared_domain("retail").policy, "Where is my order?")
    ids = account.assistant_ids(message)
    assert ids == _full_context_turn(account, messages, message, tools)
    assert ids[-1] == tokenizer.eos_token_id


def test_assistant_turn_after_an_empty_thinking_generation_prompt(tokenizer, tmp_path):
    """The turn is what the policy generates after the generation prompt, whether or not the template repeats
    the prompt's empty thinking block in past turns (real Qwen3 does; ctu's tiny template does not)."""
    path = tmp_path / "qwen3_like.jinja"
    path.write_text(QWEN3_LIKE)
    message = {"role": "assistant", "content": None, "tool_calls": [call("get_user_details", {"user_id": "u1"})]}
    expected = '<tool_call>\n{"name": "get_user_details", "arguments": {"user_id": "u1"}}\n</tool_call><|im_end|>'
    for template in (policy("qwen3_no_thinking"), _with_kwargs(policy("jinja_file", path=str(path)))):
        account = TokenAccount(template, tokenizer)
        assert account._generation_prompt.endswith("<think>\n\n</think>\n\n")
        ids = account.assistant_ids(message)
        assert tokenizer.decode(ids) == expected
        prompt = account.prompt_ids(conversation("Be brief.", "Hi"), None)
        assert tokenizer.decode(prompt + ids).endswith("<think>\n\n</think>\n\n" + expected)


def _with_kwargs(template):
    template.template_kwargs = {"enable_thinking": False}
    return template


def test_encoding_cache_returns_the_encoders_ids_as_private_lists_and_stays_bounded(tokenizer, monkeypatch):
    from ctu.rollout import tokens

    texts = [json.dumps({"order_id": f"#W{n}", "items": ["a lamp", "a kettle"] * n}) for n in range(5)]
    lengths = [len(TokenAccount(policy("default"), tokenizer).encode_text(text)) for text in texts]
    monkeypatch.setattr(tokens, "ENCODING_CACHE_TOKENS", sum(lengths[2:]))  # room for the last three texts
    account = TokenAccount(policy("default"), tokenizer)
    for text in texts + texts[::-1]:
        expected = account.policy.encode_text(tokenizer, text)
        first = account.encode_text(text)
        assert first == expected
        first.append(-1)  # a caller extending its ids must not change what the cache hands out next
        assert account.encode_text(text) == expected
    assert account.encoding_cache_hits == 10 + 3  # every second call; and, on the way back, the last three texts
    assert account.encoding_cache_misses == 10 - 3
    assert sum(len(ids) for ids in account._encoded.values()) <= tokens.ENCODING_CACHE_TOKENS
    observation = [{"role": "tool", "tool_call_id": "c0", "content": texts[0]}]
    whole_text = account._after_base(account.policy.render(tokenizer, tokens.BASE + observation, None, True))
    assert account.observation_ids(observation, True) == account.policy.encode_text(tokenizer, whole_text)


DATED = (
    "{{- '<|im_start|>system\\nToday Date: ' + strftime_now('%d %b %Y') + '\\n' }}"
    "{%- if tools %}{{- tools | tojson }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}{{- message.content + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') }}"
    "{%- for call in (message.tool_calls or []) %}{{- call.function.name + ' ' + call.function.arguments }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""Llama 3.1's habit in small: today's date (transformers' `strftime_now`) in the system header of every render."""


def test_a_date_in_the_template_changing_mid_run_neither_breaks_nor_goes_stale(tokenizer, tmp_path, monkeypatch):
    import datetime as real

    from transformers.utils import chat_template_utils

    today = {"date": real.datetime(2026, 11, 22, 23, 59)}

    class Clock:
        @staticmethod
        def now():
            return today["date"]

    monkeypatch.setattr(chat_template_utils, "datetime", Clock)
    path = tmp_path / "dated.jinja"
    path.write_text(DATED)
    account = TokenAccount(policy("jinja_file", path=str(path)), tokenizer)
    tools = shared_domain("retail").tool_schemas
    message = {"role": "assistant", "content": None, "tool_calls": [call("get_user_details", {"user_id": "u1"})]}
    messages = conversation("Be brief.", "Hi")
    before = (account.assistant_ids(message), account.prompt_ids(messages, tools))
    today["date"] = real.datetime(2026, 11, 23, 0, 1)  # midnight passes mid-run
    assert account.prompt_ids(messages, tools) == before[1]  # within a batch, a group's samples share their prompt
    account.new_batch()
    after_midnight = account.prompt_ids(messages, tools)
    assert after_midnight == account.policy.encode(tokenizer, messages, tools, add_generation_prompt=True)
    assert "23 Nov 2026" in tokenizer.decode(after_midnight) and "22 Nov 2026" in tokenizer.decode(before[1])
    assert account.assistant_ids(message) == before[0]
    assert tokenizer.decode(before[0]) == 'get_user_details {"user_id": "u1"}<|im_end|>'


def test_the_batch_memo_gives_the_first_ids_again_until_the_next_batch(tokenizer, monkeypatch):
    """Prompts and observations seen before in the batch are not rendered again; their ids are private lists;
    messages that are not JSON data are tokenised every time; `new_batch` forgets."""
    account = TokenAccount(policy("qwen3_no_thinking"), tokenizer)
    tools = shared_domain("retail").tool_schemas
    messages = conversation(shared_domain("retail").policy, "Where is my order #W1?")[:3]
    observation = [{"role": "tool", "tool_call_id": "c0", "content": json.dumps({"order_id": "#W1"})}]
    prompt, seen = account.prompt_ids(messages, tools), account.observation_ids(observation, True)
    assert prompt == account.policy.encode(tokenizer, messages, tools, add_generation_prompt=True)
    renders = []
    real_render = account.policy.render
    monkeypatch.setattr(account.policy, "render", lambda *args, **kwargs: renders.append(1) or real_render(*args, **kwargs))
    again = account.prompt_ids(messages, tools)
    assert again == prompt
    again.append(-1)  # a caller extending its ids must not change what the memo hands out next
    assert account.prompt_ids(messages, tools) == prompt
    assert account.observation_ids(observation, True) == seen
    assert account.observation_ids(observation, False) == [tokenizer.eos_token_id, *seen]  # a cut turn: not the same key
    assert len(renders) == 1 and (account.memo_hits, account.memo_misses) == (3, 3)
    odd = [{"role": "tool", "tool_call_id": "c0", "content": json.dumps({"order_id": "#W1"}), "extra": {1: "x"}}]
    account.observation_ids(odd, True)
    account.observation_ids(odd, True)
    assert len(renders) == 3 and account.memo_misses == 3  # not JSON data (an int key): never memoised
    account.new_batch()
    assert account.prompt_ids(messages, tools) == prompt and len(renders) == 4


def test_assistant_turns_differing_only_in_call_ids_share_ids_unless_the_template_renders_them(tokenizer, tmp_path, monkeypatch):
    """An inference server gives each call a random id: where the template ignores ids, a group's samples making
    the same call are rendered once; where it renders them (Mistral's habit), each turn keeps its own ids."""

    def turn(call_id: str) -> dict:
        return {"role": "assistant", "content": None, "tool_calls": [{**call("get_order_details", {"order_id": "#W1"}), "id": call_id}]}

    quiet = TokenAccount(policy("qwen3_no_thinking"), tokenizer)
    assert not quiet.renders_call_ids
    renders = []
    real_render = quiet.policy.render
    monkeypatch.setattr(quiet.policy, "render", lambda *args, **kwargs: renders.append(1) or real_render(*args, **kwargs))
    first = quiet.assistant_ids(turn("chatcmpl-tool-1"))
    assert quiet.assistant_ids(turn("chatcmpl-tool-2")) == first and len(renders) == 1
    assert quiet.assistant_ids({**turn("chatcmpl-tool-3"), "content": "Let me look."}) != first  # text is in the key
    assert first == quiet._assistant_ids(turn("chatcmpl-tool-9"))  # what rendering it would give

    path = tmp_path / "ids.jinja"
    with_ids = QWEN3_LIKE.replace("call.function.name + '\", \"arguments", "call.function.name + '\", \"id\": \"' + call.id + '\", \"arguments")
    assert with_ids != QWEN3_LIKE
    path.write_text(with_ids)
    loud = TokenAccount(_with_kwargs(policy("jinja_file", path=str(path))), tokenizer)
    assert loud.renders_call_ids
    one, two = loud.assistant_ids(turn("chatcmpl-tool-1")), loud.assistant_ids(turn("chatcmpl-tool-2"))
    assert one != two and "chatcmpl-tool-2" in tokenizer.decode(two)
