"""Token-exact multi-turn on real tokenizers: every policy turn is sampled after exactly the ids the chat template
renders for the conversation so far, or the turn is counted (`TrajectoryRecord.off_template_turns`,
`generation/off_template_turns`, a line in `ctu view`).

Checked on SmolLM2-135M-Instruct's tokenizer and ChatML template (`builtin:smollm2-135m-instruct`, a real 49k BPE)
and on the built-in tiny Qwen3's, over gold replays of tau2 mock tasks (tool calls, tool results, text to the user),
in whole and step-wise trajectories. The reference is Hugging Face's own `apply_chat_template`, called here apart
from ctu's token accounting.
"""

from __future__ import annotations

import pytest

from ctu.rollout.build import build_generator

from ..support.scripted_sampler import ScriptedSampler
from .conftest import ReplayScript, batch, components, run

MOCK_TASKS = ["create_task_1", "update_task_1", "update_task_with_initialization_data"]
"""tau2 mock tasks whose gold replays call tools, read their results and answer the user."""
MODELS = {
    "smollm2": {"path": "builtin:smollm2-135m-instruct", "family": "other", "chat_template": "default", "max_model_len": 8192},
    "tiny-qwen3": {"path": "builtin:tiny-qwen3", "family": "qwen2.5", "chat_template": "default", "max_model_len": 32768},
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request):
    from transformers import AutoTokenizer

    from ctu.models.builtin import resolve

    return request.param, AutoTokenizer.from_pretrained(resolve(MODELS[request.param]["path"]))


def generator_for(minimal, model, tokenizer, sampler, **rollout):
    """The generator of a spec training on tau2's mock tasks with `model` (its `model` section) in text mode."""
    minimal["data"] = {"train": [{"domain": "mock", "split": "base"}], "test_sets": {}}
    return build_generator(components(minimal, model=model, rollout={"parser": "hermes", **rollout}), tokenizer, sampler)


def template_prompts(tokenizer, conversation):
    """What Hugging Face's chat template renders before each policy turn of `conversation` (tau2's greeting, the
    first assistant message, is not the policy's), as ids."""
    turns = [i for i, message in enumerate(conversation) if message["role"] == "assistant"][1:]
    return [tokenizer.apply_chat_template(conversation[:i], add_generation_prompt=True, tokenize=True, return_dict=False)
            for i in turns]


def canonical(tokenizer, script):
    return ScriptedSampler(script, lambda text: tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id)


@pytest.mark.parametrize("trajectory", ["whole", "step_wise"])
def test_every_turn_is_sampled_after_what_the_template_renders(minimal, model, trajectory):
    name, tokenizer = model
    script = ReplayScript(tokenizer, "mock", MOCK_TASKS)
    sampler = canonical(tokenizer, script)
    output = run(generator_for(minimal, MODELS[name], tokenizer, sampler, trajectory=trajectory), batch(MOCK_TASKS, samples=1, domain="mock"))
    assert [r.reward for r in output.records] == [1.0] * len(MOCK_TASKS)  # gold replays, parsed by the hermes parser
    rendered = []
    for record in output.records:
        expected = template_prompts(tokenizer, record.result.conversation)
        assert len(expected) == record.policy_turns >= 2 and any(m["role"] == "tool" for m in record.result.conversation)
        assert record.off_template_turns == []
        rendered += expected
        if trajectory == "step_wise":
            assert [sample.prompt_ids for sample in record.turn_samples] == expected
        else:
            assert all((record.prompt_ids + record.response_ids)[: len(prompt)] == prompt for prompt in expected)
    # the ids each turn was sampled after (the episodes ran concurrently: their requests interleave)
    assert sorted(sampler.prompts) == sorted(rendered)
    assert output.metrics["generation/off_template_turns"] == 0.0


def test_a_turn_sampled_in_pieces_the_tokenizer_would_not_encode_is_counted(minimal, model):
    """A sampler may return ids that decode to the turn's text but are not its encoding (a word in single characters):
    every later turn is sampled after ids the template would render otherwise, and is counted as such."""
    name, tokenizer = model
    script = ReplayScript(tokenizer, "mock", MOCK_TASKS[:1])

    def pieces(text: str) -> list[int]:  # the first turn's text one character a token, as a sampler may produce it
        if sampler.calls == 1:
            return [i for character in text for i in tokenizer.encode(character, add_special_tokens=False)]
        return tokenizer.encode(text, add_special_tokens=False)

    sampler = ScriptedSampler(script, pieces, tokenizer.eos_token_id)
    output = run(generator_for(minimal, MODELS[name], tokenizer, sampler), batch(MOCK_TASKS[:1], samples=1, domain="mock"))
    record = output.records[0]
    expected = template_prompts(tokenizer, record.result.conversation)
    differ = [turn for turn, (sent, rendered) in enumerate(zip(sampler.prompts, expected), 1) if sent != rendered]
    assert record.policy_turns >= 2 and differ == list(range(2, record.policy_turns + 1))
    assert record.off_template_turns == differ
    assert output.metrics["generation/off_template_turns"] == float(len(differ))


def test_qwen3s_empty_thinking_block_left_out_of_past_turns_is_counted(minimal, tokenizer):
    """Qwen3's template with thinking off opens each turn with an empty ``<think>`` block and leaves it out of past
    turns: a growing sequence keeps it, so every turn after the first is sampled after ids the template would render
    otherwise, and those turns are counted; the difference is that block and nothing else."""
    qwen3 = {"path": "builtin:tiny-qwen3", "family": "qwen3", "chat_template": "qwen3_no_thinking", "max_model_len": 32768}
    sampler = canonical(tokenizer, ReplayScript(tokenizer, "mock", MOCK_TASKS[:1]))
    output = run(generator_for(minimal, qwen3, tokenizer, sampler), batch(MOCK_TASKS[:1], samples=1, domain="mock"))
    record = output.records[0]
    assert record.reward == 1.0 and record.off_template_turns == list(range(2, record.policy_turns + 1))
    conversation = record.result.conversation
    turns = [i for i, message in enumerate(conversation) if message["role"] == "assistant"][1:]
    for number, index in enumerate(turns[1:], 2):
        rendered = tokenizer.apply_chat_template(conversation[:index], add_generation_prompt=True, tokenize=False,
                                                 enable_thinking=False)
        sent = tokenizer.decode(sampler.prompts[number - 1])
        assert sent != rendered and sent.replace("<think>\n\n</think>\n\n", "") == rendered.replace("<think>\n\n</think>\n\n", "")
