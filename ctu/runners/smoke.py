"""`--smoke`: any spec at smoke scale on CPU, so the full component set of an experiment runs before any GPU
time is spent.

The smoke version keeps the spec's components and modes (parser, native tool calling, rewards, trackers,
domains, test sets) and shrinks or replaces what needs a GPU or a network: the tiny built-in model, the local
Tinker backend (so no separate reference model and no sampling penalties, which Tinker lacks), the scripted user,
the rule judge instead of an LLM judge, wandb offline, a handful of tasks, two samples per prompt, two steps.
"""

from __future__ import annotations

import copy
from typing import Any

from ctu.spec import LoadedSpec, Spec, spec_from_dict, spec_to_dict

SMOKE_TRAIN_TASKS = 4
SMOKE_TEST_TASKS = 2


def _rule_judge(judge: object) -> dict[str, object] | None:
    if not isinstance(judge, dict):
        return None
    replaced: dict[str, object] = {"type": "rule_taxonomy"}
    if "taxonomy" in judge:
        replaced["taxonomy"] = judge["taxonomy"]
    return replaced


def smoke_dict(spec: Spec) -> dict[str, object]:
    """The smoke-scale version of `spec`, as plain data."""
    data: dict[str, Any] = copy.deepcopy(spec_to_dict(spec))  # the spec's YAML data, edited in place
    no_thinking = data["model"]["chat_template"]["type"] == "qwen3_no_thinking"
    data["experiment"]["name"] = spec.experiment.name + "_smoke"
    data["model"].update(path="builtin:tiny-qwen3", family="qwen3" if no_thinking else "qwen2.5", max_model_len=32768,
                         reference_path=None)
    data["environment"].update(user_simulator={"type": "scripted", "turn_budget": 3}, max_turns=3, evaluate_nl_assertions=False,
                                warn_unsolvable_tasks=False)
    data["rollout"].update(n_samples_per_prompt=2, max_tokens_per_turn=48, temperature=1.0, eval_n_samples_per_prompt=1,
                           repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0)
    data["algorithm"].update(use_kl_loss=False)
    data["trainer"].update(
        epochs=2, max_steps=2, train_batch_size=SMOKE_TRAIN_TASKS, policy_mini_batch_size=SMOKE_TRAIN_TASKS,
        eval_batch_size=SMOKE_TEST_TASKS, eval_interval=2, eval_before_train=True,
        ckpt_interval=2,
    )
    data["trainer"]["optimizer"].update(lr=1e-4, warmup_steps=0)
    data["trainer"].pop("max_ckpts_to_keep", None)  # the tinker backend keeps every checkpoint: its default
    if isinstance(data["algorithm"].get("dynamic_sampling"), dict):
        data["algorithm"]["dynamic_sampling"].pop("min_replace_ratio", None)  # `replace`'s only, which tinker lacks
    sources = data["data"]["train"]
    share = max(1, SMOKE_TRAIN_TASKS // len(sources))
    for source in sources:
        source["max_tasks"] = share
    for source in data["data"]["test_sets"].values():
        source["max_tasks"] = SMOKE_TEST_TASKS
    for reward in data["rewards"]:
        if isinstance(reward.get("judge"), dict):
            reward["judge"] = _rule_judge(reward["judge"])
    data["judge"] = _rule_judge(data.get("judge"))
    for tracker in data["tracking"]["trackers"]:
        if tracker["type"] == "wandb":
            tracker["mode"] = "offline"
    data["backend"] = {"type": "tinker", "local": True, "loss": "importance_sampling", "lora_rank": 8}
    return data


def smoke_spec(spec: Spec) -> LoadedSpec:
    """`smoke_dict(spec)`, validated.

    Raises:
        SpecError: the smoke version is invalid (a bug in this module or a third-party component).
    """
    return spec_from_dict(smoke_dict(spec), source=f"{spec.experiment.name} (smoke)")
