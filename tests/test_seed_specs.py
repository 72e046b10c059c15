"""Every shipped experiment spec reproduces the CTU-Agent-v0 script it is named for, value for value.

The table below is written from the scripts (github.com/mert-cemri/CTU-Agent-v0 at commit b4b86e0,
`training/run_*.sh`, and `training/configs/tau_bench_config.yaml` for what a script leaves to it); each spec's
header names its script and lists where and why it departs. A spec drifting from its script fails here.

How a script's setting reads as a spec entry:
- `environment.max_turns` is the environment's `max_turns` (10 in every script), which ends the episode before
  the generator's `max_turns` (15 or 20) is reached;
- `model.max_model_len` is `trainer.max_prompt_length` (= `generator.max_input_length`);
- the taxonomy reward's `weight` is `TAXONOMY_ALPHA`, with the `mast` judge (`llm_judge.py`: gpt-4o-mini at
  temperature 1.0), which makes the bonus `alpha / failures`;
- `run_multi_domain*.sh` run `run_tau_bench*.sh` (whose own `POLICY_MODEL` they do not override) on the
  multi-domain data, which `run_tau_bench*.sh` also train on by default (the config's `data.train_data`).
"""

from __future__ import annotations

from typing import Any

import pytest

from ctu.spec import load_spec

from .conftest import REPO

COMMON: dict[str, Any] = {
    # training/configs/tau_bench_config.yaml, unless a script sets it
    "experiment.seed": 42,
    "trainer.epochs": 100,  # EPOCHS=100 in every script
    "backend.micro_train_batch_size_per_gpu": 1,
    "trainer.max_ckpts_to_keep": 3,
    "trainer.hf_save_interval": 20,
    "trainer.optimizer.weight_decay": 0.05,
    "trainer.optimizer.max_grad_norm": 0.5,
    "algorithm.advantage_estimator": "grpo",
    "algorithm.use_kl_loss": True,
    "algorithm.kl_estimator": "k3",
    "algorithm.eps_clip_low": 0.1,
    "algorithm.eps_clip_high": 0.1,
    "backend.value_clip": 0.1,
    "backend.loss_reduction": "token_mean",
    "rollout.native_tool_calling": True,
    "rollout.eval_temperature": 0.0,
    "rollout.eval_n_samples_per_prompt": 1,
    "environment.max_turns": 10,
    "environment.user_simulator.type": "llm",
    "environment.user_simulator.model": "gpt-4o",
    "backend.type": "skyrl",
    "backend.num_nodes": 1,
    "backend.num_gpus_per_node": 8,
    "backend.num_inference_engines": 2,
    "backend.inference_engine_tensor_parallel_size": 4,
    "backend.colocate_all": True,
    "backend.strategy": "fsdp",
    "backend.gradient_checkpointing": True,
}

RETAIL_3B: dict[str, Any] = {  # run_retail_3b_grpo*.sh
    "model.path": "mcemri/qwen2.5_3b_alldata_sft_v0", "model.reference_path": "Qwen/Qwen2.5-3B-Instruct",
    "model.max_model_len": 8192,
    "trainer.train_batch_size": 8, "trainer.policy_mini_batch_size": 4, "trainer.eval_batch_size": 2,
    "trainer.eval_before_train": False, "trainer.eval_interval": 5, "trainer.ckpt_interval": 5,
    "trainer.optimizer.lr": 3.0e-7, "trainer.optimizer.warmup_steps": 200, "algorithm.kl_loss_coef": 0.02,
    "rollout.n_samples_per_prompt": 2, "rollout.temperature": 0.9, "rollout.top_p": 0.9, "rollout.max_tokens_per_turn": 1024,
    "backend.gpu_memory_utilization": 0.3, "backend.policy_cpu_offload": False, "backend.ref_cpu_offload": True,
    "tracking.project": "tau_bench_retail_grpo",
}
OFFLOADED_7B: dict[str, Any] = {  # run_retail_7b_grpo*.sh, run_retail_8b_grpo_taxonomy.sh, run_multi_domain_7b_optimized.sh
    "model.max_model_len": 16384,
    "trainer.train_batch_size": 32, "trainer.policy_mini_batch_size": 8, "trainer.eval_batch_size": 16,
    "trainer.eval_before_train": True, "trainer.eval_interval": 10, "trainer.ckpt_interval": 10,
    "trainer.optimizer.lr": 2.0e-7, "trainer.optimizer.warmup_steps": 100, "algorithm.kl_loss_coef": 0.01,
    "rollout.n_samples_per_prompt": 3, "rollout.temperature": 0.8, "rollout.top_p": 0.9, "rollout.max_tokens_per_turn": 512,
    "backend.gpu_memory_utilization": 0.75, "backend.policy_cpu_offload": True, "backend.ref_cpu_offload": True,
}
TAU_BENCH: dict[str, Any] = {  # run_tau_bench.sh, run_tau_bench_7b.sh (and so run_multi_domain*.sh)
    "model.max_model_len": 16384,
    "trainer.train_batch_size": 64, "trainer.policy_mini_batch_size": 16, "trainer.eval_batch_size": 32,
    "trainer.eval_before_train": True, "trainer.eval_interval": 5, "trainer.ckpt_interval": 5,
    "trainer.optimizer.lr": 3.0e-7, "trainer.optimizer.warmup_steps": 200, "algorithm.kl_loss_coef": 0.02,
    "rollout.n_samples_per_prompt": 5, "rollout.temperature": 0.9, "rollout.top_p": 0.9, "rollout.max_tokens_per_turn": 1024,
    "backend.gpu_memory_utilization": 0.8, "backend.policy_cpu_offload": False, "backend.ref_cpu_offload": True,
    "tracking.project": "tau_bench_rl",
}
NO_TAXONOMY = {"rewards": ["tau_outcome"], "judge": None}
MAST = {"rewards": ["tau_outcome", "taxonomy_feedback"], "rewards.1.weight": 0.5,
        "judge.type": "mast", "judge.model": "gpt-4o-mini", "judge.temperature": 1.0}
RETAIL = {"data.train": [("retail", "train")]}
MULTI_DOMAIN = {"data.train": [("telecom", "train")]}

SCRIPTS: dict[str, dict[str, Any]] = {
    "retail_3b_grpo": {**RETAIL_3B, **RETAIL, **NO_TAXONOMY},
    "retail_3b_grpo_repetition_fix": {
        **RETAIL_3B, **RETAIL, **NO_TAXONOMY, "rollout.max_tokens_per_turn": 512, "rollout.temperature": 0.7,
        "rollout.repetition_penalty": 1.05, "rollout.frequency_penalty": 0.5, "rollout.presence_penalty": 0.1,
    },
    "retail_3b_grpo_taxonomy": {**RETAIL_3B, **RETAIL, **MAST},
    "retail_7b_grpo": {**OFFLOADED_7B, **RETAIL, **NO_TAXONOMY, "model.path": "Qwen/Qwen2.5-7B-Instruct",
                       "model.reference_path": None, "tracking.project": "tau_bench_retail_grpo_7b"},
    "retail_7b_grpo_taxonomy": {**OFFLOADED_7B, **RETAIL, **MAST, "model.path": "Qwen/Qwen2.5-7B-Instruct",
                                "model.reference_path": None, "tracking.project": "tau_bench_retail_grpo_7b"},
    "retail_8b_taxonomy": {**OFFLOADED_7B, **RETAIL, **MAST, "model.path": "Qwen/Qwen3-8B", "model.reference_path": None,
                           "tracking.project": "tau_bench_retail_grpo_7b"},
    "multi_domain_7b_optimized": {**OFFLOADED_7B, **MULTI_DOMAIN, **NO_TAXONOMY, "model.path": "Qwen/Qwen2.5-7B-Instruct",
                                  "model.reference_path": None, "tracking.project": "tau_bench_rl_7b"},
    "tau_bench": {**TAU_BENCH, **MULTI_DOMAIN, **NO_TAXONOMY, "model.path": "Qwen/Qwen2.5-3B-Instruct", "model.reference_path": None},
    "multi_domain": {**TAU_BENCH, **MULTI_DOMAIN, **NO_TAXONOMY, "model.path": "Qwen/Qwen2.5-3B-Instruct", "model.reference_path": None},
    "tau_bench_7b": {**TAU_BENCH, **MULTI_DOMAIN, **NO_TAXONOMY, "model.path": "Qwen/Qwen2.5-7B-Instruct", "model.reference_path": None},
    "multi_domain_7b": {**TAU_BENCH, **MULTI_DOMAIN, **NO_TAXONOMY, "model.path": "Qwen/Qwen2.5-7B-Instruct", "model.reference_path": None},
    "tau_bench_llama": {
        **TAU_BENCH, **MULTI_DOMAIN, **NO_TAXONOMY, "model.path": "unsloth/Meta-Llama-3.1-8B-Instruct", "model.reference_path": None,
        "trainer.train_batch_size": 32, "trainer.policy_mini_batch_size": 8, "trainer.eval_batch_size": 16,
        "trainer.optimizer.lr": 2.0e-7, "backend.gpu_memory_utilization": 0.65,
    },
}


def lookup(spec: Any, path: str) -> Any:
    """The resolved spec's value at dotted `path`, in the table's terms: a component (a reward, the judge) by
    its type, its params by name (``judge.model``, ``rewards.1.weight``), training sources as (domain, split)."""
    node = spec
    for part in path.split("."):
        if node is None:
            return None
        if isinstance(node, list):
            node = node[int(part)]
        elif hasattr(node, part):
            node = getattr(node, part)
        else:
            node = getattr(node.params, part)
    if path == "rewards":
        return [reward.type for reward in node]
    if path == "data.train":
        return [(source.domain.type, source.split) for source in node]
    if hasattr(node, "params") and hasattr(node, "type"):
        return node.type
    return node


def test_the_table_covers_every_shipped_experiment_spec():
    experiments = {p.stem for p in (REPO / "specs").glob("*.yaml")} - {"smoke", "smollm2", "learning_check"}  # ctu's CPU runs
    assert experiments == set(SCRIPTS)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_spec_reproduces_its_script(name: str):
    loaded = load_spec(REPO / "specs" / f"{name}.yaml")
    spec = loaded.spec
    expected = {**COMMON, **SCRIPTS[name]}
    found = {path: lookup(spec, path) for path in expected}
    drift = {path: (found[path], want) for path, want in expected.items() if found[path] != want}
    assert not drift, f"{name} departs from its script: {{path: (spec, script)}} = {drift}"
    header = (REPO / "specs" / f"{name}.yaml").read_text().split("\n\n")[0]
    script = "run_" + {"retail_8b_taxonomy": "retail_8b_grpo_taxonomy"}.get(name, name) + ".sh"
    assert f"training/{script}" in header and "b4b86e0" in header


def test_the_sampling_figures_the_readme_states_for_a_shipped_spec_are_what_it_resolves_to():
    """The docs' words "the 8B spec's temperature T and top_p P" (docs/cluster.md's CI section) against the spec itself."""
    import re

    readme = " ".join(" ".join(path.read_text().split()) for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])
    stated = re.findall(r"the 8B spec's temperature ([\d.]+) and top_p ([\d.]+)", readme)
    assert stated, "the README no longer states the 8B spec's sampling parameters: update this test"
    rollout = load_spec(REPO / "specs" / "retail_8b_taxonomy.yaml").spec.rollout
    assert {(float(t), float(p)) for t, p in stated} == {(rollout.temperature, rollout.top_p)}
