"""Step-wise trajectories (`rollout.trajectory: step_wise`) and the thinking template (`qwen3_thinking`) at the
rollout layer, with scripted samplers that record every prompt they were sent: each turn's sample is exactly what
was sampled, and no turn's reasoning reaches a later prompt or the environment."""

from __future__ import annotations

import pytest

from ctu.components.chat_templates.huggingface import Qwen3ThinkingChatTemplate
from ctu.rollout.build import build_generator

from .conftest import TASKS, ReplayScript, batch, components, run, scripted_sampler

THINKING = {"path": "builtin:tiny-qwen3", "family": "qwen3", "chat_template": "qwen3_thinking", "max_model_len": 32768}


def sampled_ids(tokenizer, text: str) -> list[int]:
    """The ids `ScriptedSampler` returns for a turn's text: its encoding, then the end-of-turn token."""
    return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]


def test_each_turn_is_a_sample_of_the_exact_prompt_and_ids_sampled(minimal, tokenizer):
    script = ReplayScript(tokenizer, "retail", TASKS[:2])
    sampler = scripted_sampler(tokenizer, script)
    generator = build_generator(components(minimal, rollout={"trajectory": "step_wise"}), tokenizer, sampler)
    records = run(generator, batch(TASKS[:2], samples=1)).records
    assert [r.reward for r in records] == [1.0, 1.0]
    samples = [sample for record in records for sample in record.turn_samples]
    assert len(samples) == sum(r.policy_turns for r in records) == len(sampler.prompts) > 2
    by_prompt = {tuple(prompt): text for prompt, text in zip(sampler.prompts, script.texts, strict=True)}
    for sample in samples:
        assert tuple(sample.prompt_ids) in by_prompt  # the ids the sampler was sent, token for token
        assert sample.response_ids == sampled_ids(tokenizer, by_prompt[tuple(sample.prompt_ids)])
        assert sample.logprobs == [-1.0] * len(sample.response_ids) and sample.loss_mask == [1] * len(sample.response_ids)
    for record in records:  # without a thinking template each turn's sample is a prefix of the whole episode's
        whole = record.prompt_ids + record.response_ids
        for sample in record.turn_samples:
            assert whole[: len(sample.prompt_ids) + len(sample.response_ids)] == sample.prompt_ids + sample.response_ids
        trained = sum(len(s.response_ids) for s in record.turn_samples)
        assert trained == sum(record.loss_mask)  # the same tokens trained as the whole sample's


def test_turn_weights_discount_the_turns_before_the_outcome(minimal, tokenizer):
    script = ReplayScript(tokenizer, "retail", TASKS[:1])
    spec = components(minimal, rollout={"trajectory": "step_wise", "turn_discount": 0.5})
    record = run(build_generator(spec, tokenizer, scripted_sampler(tokenizer, script)), batch(TASKS[:1], samples=1)).records[0]
    turns = len(record.turn_samples)
    assert [weight for _, weight in record.training_samples(0.5)] == [0.5 ** (turns - 1 - t) for t in range(turns)]
    assert [weight for _, weight in record.training_samples()] == [1.0] * turns
    whole = components(minimal)  # a whole trajectory: one sample of the whole episode, weight 1
    record = run(build_generator(whole, tokenizer, scripted_sampler(tokenizer, script)), batch(TASKS[:1], samples=1)).records[0]
    (sample, weight), = record.training_samples(0.5)
    assert record.turn_samples == [] and weight == 1.0 and sample.response_ids == record.response_ids


def test_evaluation_episodes_carry_no_turn_samples(minimal, tokenizer):
    script = ReplayScript(tokenizer, "retail", TASKS[:1])
    generator = build_generator(components(minimal, rollout={"trajectory": "step_wise"}), tokenizer, scripted_sampler(tokenizer, script))
    assert [r.turn_samples for r in run(generator, batch(TASKS[:1], phase="eval", samples=1)).records] == [[]]


class ThinkingScript(ReplayScript):
    """The gold replay, each turn reasoning first in Qwen3's format (a line naming the turn and its task)."""

    def __call__(self, prompt_ids: list[int], call: int) -> str:
        answer = super().__call__(prompt_ids, call)
        text = f"<think>\nreasoning {call} of this turn\n</think>\n\n{answer}"
        self.texts[-1] = text
        return text


def test_a_thinking_turn_keeps_its_reasoning_in_its_sample_and_out_of_every_later_prompt(minimal, tokenizer):
    script = ThinkingScript(tokenizer, "retail", TASKS[:1])
    sampler = scripted_sampler(tokenizer, script)
    spec = components(minimal, model=THINKING, rollout={"trajectory": "step_wise"})
    record = run(build_generator(spec, tokenizer, sampler), batch(TASKS[:1], samples=1)).records[0]
    assert record.reward == 1.0  # the environment got the answers: the calls ran and the customer saw no reasoning
    assert not any("<think>" in str(m.get("content")) for m in record.result.conversation)
    assert record.reasoning == [f"reasoning {turn} of this turn" for turn in range(1, record.policy_turns + 1)]
    assert len(record.turn_samples) == len(sampler.prompts) == record.policy_turns > 2
    for turn, (sample, prompt, text) in enumerate(zip(record.turn_samples, sampler.prompts, script.texts, strict=True)):
        assert sample.prompt_ids == prompt and sample.response_ids == sampled_ids(tokenizer, text)
        assert f"reasoning {turn + 1} of this turn" in tokenizer.decode(sample.response_ids)  # its own reasoning
        assert "reasoning" not in tokenizer.decode(prompt)  # no earlier turn's
        assert not tokenizer.decode(prompt).endswith("<think>\n\n</think>\n\n")  # thinking left on


def test_the_thinking_template_splits_reasoning_as_qwen3s_does():
    split = Qwen3ThinkingChatTemplate(Qwen3ThinkingChatTemplate.Params()).split_reasoning
    assert split("<think>\nwhy\n</think>\n\nanswer") == ("why", "answer")
    assert split("answer only") == ("", "answer only")
    assert split("<think>\ncut off while thin") == ("cut off while thin", "")
    assert split("why</think>answer") == ("why", "answer")  # a generation prompt that opened the block itself
    assert split("<think>\na</think>\nb\n</think>\n\nanswer") == ("a</think>\nb", "answer")  # the last one closes it


@pytest.mark.parametrize(("rollout", "model", "path"), [
    ({}, THINKING, "rollout.trajectory"),
    ({"turn_discount": 0.9}, None, "rollout.turn_discount"),
])
def test_validate_refuses_whole_trajectories_with_a_thinking_template_or_a_turn_discount(minimal, rollout, model, path):
    from ctu.spec import spec_from_dict
    from ctu.spec.errors import SpecError

    data = {**minimal, "rollout": {**minimal.get("rollout", {}), **rollout}}
    if model is not None:
        data["model"] = model
    with pytest.raises(SpecError) as error:
        spec_from_dict(data)
    assert [issue.path for issue in error.value.issues] == [path]
    assert "step_wise" in error.value.issues[0].message
    spec_from_dict({**data, "rollout": {**data["rollout"], "trajectory": "step_wise"}})  # valid with step-wise turns
