"""SFT on the `skyrl` backend: SkyRL's own `SFTTrainer` (FSDP, or Megatron with `backend.strategy`) on the
conversations of `data.sft`, tokenised by ctu as the generator tokenises an episode (`ctu.sft.tokens`) and
handed to SkyRL pretokenized, so SFT and GRPO see one chat-template policy (Qwen3's thinking off included).

`sft_overrides` is the one place the spec becomes SkyRL's `SFTConfig` (SkyRL's `validate_sft_cfg` checks it);
`run_skyrl_sft` launches it on the Ray cluster as `run_skyrl` launches GRPO (the same preflight, log routing and
node checks; the run directory's spec, state, checkpoints and exports in the same places). The trainer runs in
`ctu.backends.skyrl.sft_experiment`. Importing this module imports neither SkyRL nor Ray.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctu.backends.skyrl.params import SkyRLParams
from ctu.composition import Components
from ctu.runners.rundir import RunDir, RunState
from ctu.spec import Spec

TOKENS_FILE = "sft_tokens.parquet"
"""The pretokenized SFT rows in a run's ``data/`` folder (SkyRL's `pretokenized_dataset_paths` schema: unpadded
``input_ids`` and a 0/1 ``loss_mask`` of the same length)."""
TRAINER_OVERRIDES = ("trainer.flash_attn", "trainer.gradient_checkpointing", "trainer.policy.",
                     "trainer.disable_fast_tokenizer")
"""`backend.skyrl_overrides` keys an SFT run applies to the config SkyRL's SFT trainer hands its workers (the
policy worker's settings); the rest concern rollouts and GRPO, which an SFT run has none of."""
POLICY_FSDP = "trainer.policy.fsdp_config."
"""`backend.skyrl_overrides` keys of the policy's FSDP settings, which an SFT run sets in `SFTConfig.fsdp_config`
(SkyRL's SFT trainer copies it over the policy worker's)."""


def write_token_rows(components: Components, tokenizer: Any, out: Path) -> dict[str, int]:
    """Tokenise `data.sft`'s conversations (`ctu.sft.tokens.conversation_tokens`) into `out` (parquet, SkyRL's
    pretokenized schema), each cut at `model.max_model_len` tokens; returns ``{"conversations", "tokens",
    "trained_tokens"}`` (trained: loss mask 1).

    Raises:
        ValueError: a conversation has no assistant turn after its first user message, or none is left with a
            trained token once cut at `model.max_model_len`.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ctu.rollout.tokens import TokenAccount
    from ctu.sft.tokens import conversation_tokens, read_sft_rows

    spec = components.spec
    assert spec.data.sft is not None
    account = TokenAccount(components.chat_template, tokenizer)
    limit = spec.model.max_model_len
    input_ids: list[list[int]] = []
    masks: list[list[int]] = []
    for row in read_sft_rows(spec.data.sft):
        prompt, response, mask = conversation_tokens(account, row["messages"], row["tools"])
        tokens, weights = (prompt + response)[:limit], ([0] * len(prompt) + mask)[:limit]
        if any(weights):
            input_ids.append(tokens)
            masks.append(weights)
    if not input_ids:
        raise ValueError(f"no SFT conversation of {spec.data.sft} has an assistant token within model.max_model_len "
                         f"({limit}) tokens")
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"input_ids": input_ids, "loss_mask": masks}), out)
    return {"conversations": len(input_ids), "tokens": sum(map(len, input_ids)), "trained_tokens": sum(map(sum, masks))}


def decay_horizon(spec: Spec) -> int | None:
    """SkyRL's `max_training_steps` for an SFT spec: `trainer.max_steps`, or, when that is null and the learning rate
    decays (`trainer.optimizer.scheduler`), the run's SFT steps (`ctu.spec.schedule`): SkyRL's SFT trainer decays over
    `max_training_steps` and, without it, over a default horizon far past the run's end."""
    if spec.trainer.max_steps is not None or spec.trainer.optimizer.scheduler == "constant":
        return spec.trainer.max_steps
    from ctu.spec.schedule import schedule

    plan = schedule(spec)
    return plan.total_steps if plan is not None else None


def sft_overrides(spec: Spec, backend: SkyRLParams, tokens_file: Path, run_dir: Path, resume: bool = False) -> dict[str, object]:
    """SkyRL `SFTConfig` fields (dotted keys) for an SFT spec whose rows are in `tokens_file`: the model, placement
    and strategy of `backend`, the optimizer, batches and steps of `trainer` (`train_batch_size` conversations a
    step, `epochs` capped by `max_steps`), checkpoints and the Hugging Face export in the run directory's usual
    folders (an export after the last step, as GRPO's), and ``resume_from: latest`` when `resume`. Every path is
    absolute (see `ctu.backends.skyrl.config.skyrl_overrides`)."""
    from ctu.backends.skyrl.config import NEVER, SCHEDULERS
    from ctu.models.builtin import local_path

    trainer, optimizer = spec.trainer, spec.trainer.optimizer
    run = RunDir(Path(run_dir).absolute())
    return {
        "strategy": backend.strategy,
        "model.path": local_path(spec.model.path),
        "placement.num_nodes": backend.num_nodes,
        "placement.num_gpus_per_node": backend.num_gpus_per_node,
        "fsdp_config.cpu_offload": backend.policy_cpu_offload,
        "pretokenized_dataset_paths": [str(Path(tokens_file).absolute())],
        "max_length": spec.model.max_model_len,
        "sampler": "random" if spec.data.shuffle else "sequential",
        "seed": spec.experiment.seed,
        "batch_size": trainer.train_batch_size,
        "micro_train_batch_size_per_gpu": backend.micro_train_batch_size_per_gpu,
        "num_epochs": trainer.epochs,
        "max_training_steps": decay_horizon(spec),
        "optimizer_config.lr": optimizer.lr,
        "optimizer_config.weight_decay": optimizer.weight_decay,
        "optimizer_config.max_grad_norm": optimizer.max_grad_norm,
        "optimizer_config.num_warmup_steps": optimizer.warmup_steps,
        "optimizer_config.scheduler": SCHEDULERS[optimizer.scheduler],
        "project_name": spec.tracking.project,
        "run_name": spec.experiment.name,
        "tags": list(spec.experiment.tags),
        "ckpt_path": str(run.checkpoints),
        "ckpt_interval": trainer.ckpt_interval or NEVER,  # SkyRL saves after the last step whatever the interval
        "max_ckpts_to_keep": trainer.max_ckpts_to_keep,
        "hf_save_interval": trainer.hf_save_interval or NEVER,  # > 0: SkyRL exports after the last step
        "export_path": str(run.exports),
        "resume_from": "latest" if resume else "",
        "num_workers": 0,  # pretokenized: SkyRL tokenises nothing
        "enable_ray_gpu_monitor": False,  # its figures go to wandb only; ctu's trackers log the step's
        "remove_microbatch_padding": bool(backend.skyrl_overrides.get("trainer.remove_microbatch_padding", True)),
        # SkyRL hands its SFT config's `fsdp_config` to the policy worker: the policy's FSDP overrides go there
        **{key.removeprefix("trainer.policy."): value for key, value in backend.skyrl_overrides.items()
           if key.startswith(POLICY_FSDP)},
    }


def resolve_sft_config(spec: Spec, backend: SkyRLParams, tokens_file: Path, run_dir: Path,
                       resume: bool = False) -> tuple[Any, Any]:
    """``(SFTConfig, SkyRLTrainConfig)``: SkyRL's SFT config for `spec` on `backend` (`sft_overrides`, checked by SkyRL's
    `validate_sft_cfg`) and the config SkyRL's SFT trainer builds from it for its workers, with the spec's
    `TRAINER_OVERRIDES` and the run's log folder applied. Imports skyrl.

    Raises:
        ValueError, AssertionError: SkyRL rejects the config (the message is SkyRL's).
    """
    from skyrl.train.config.sft_config import SFTConfig, build_skyrl_config_for_sft

    config = SFTConfig.from_cli_overrides(sft_overrides(spec, backend, tokens_file, run_dir, resume))
    skyrl_config = build_skyrl_config_for_sft(config)
    skyrl_config.trainer.log_path = str(Path(run_dir).absolute() / "logs")
    for key, value in backend.skyrl_overrides.items():
        if key.startswith(TRAINER_OVERRIDES) and not key.startswith(POLICY_FSDP):  # those are in `config` (`sft_overrides`)
            *parents, name = key.split(".")
            target = skyrl_config
            for part in parents:
                target = getattr(target, part)
            if not hasattr(target, name):
                raise ValueError(f"backend.skyrl_overrides.{key}: not a field of SkyRL's SFT worker config")
            setattr(target, name, value)
    return config, skyrl_config


def sft_config_yaml(config: Any) -> str:
    """SkyRL's `SFTConfig` as plain YAML (its enums as their values)."""
    import dataclasses
    import json

    import yaml

    return str(yaml.safe_dump(json.loads(json.dumps(dataclasses.asdict(config), default=str)), sort_keys=True))


def sft_launch_plan(spec: Spec, backend: SkyRLParams, run_dir: Path) -> list[str]:
    """What `ctu run` does for an SFT spec on the `skyrl` backend `backend`, in order, as readable lines."""
    return [
        f"tokenise {spec.data.sft} as the generator tokenises an episode into {Path(run_dir) / 'data' / TOKENS_FILE}",
        f"initialise Ray; {backend.num_nodes} node(s) x {backend.num_gpus_per_node} GPU(s), strategy {backend.strategy}",
        f"in the remote entrypoint: SkyRL's SFTTrainer, cross-entropy on the assistant's tokens, "
        f"{spec.trainer.train_batch_size} conversations a step",
        f"write checkpoints, metrics and the Hugging Face export under {run_dir}",
    ]


def run_skyrl_sft(spec: Spec, backend: SkyRLParams, run_dir: Path, resume: bool = False, verbose: bool = False) -> RunState:
    """SFT of `spec` (`data.sft` set) through SkyRL's `SFTTrainer` on the Ray cluster at ``RAY_ADDRESS`` (or a
    one-node cluster started here); returns the final state. As `ctu.backends.skyrl.launch.run_skyrl` in every
    step (logs, preflight, cluster, node checks, the run directory's spec and state), with the SFT rows tokenised
    here first (`write_token_rows`). No endpoint is probed: SFT calls none.

    Raises:
        PreflightError: the GPU packages do not import (here or on a node), CUDA sees no GPU, or the placement
            does not fit.
        RunError: `resume` with no checkpoint in `run_dir`.
    """
    import ray
    from transformers import AutoTokenizer

    from ctu.backends.skyrl.checkpoints import latest_checkpoint_step
    from ctu.backends.skyrl.cluster import joining_cluster
    from ctu.backends.skyrl.launch import join_cluster, open_launch
    from ctu.backends.skyrl.preflight import check_skyrl_run
    from ctu.composition import build_components
    from ctu.errors import CtuError
    from ctu.models.builtin import local_path

    run, log_file, resume_step = open_launch(run_dir, resume, verbose)
    tokens_file = run.path / "data" / TOKENS_FILE
    config, skyrl_config = resolve_sft_config(spec, backend, tokens_file, run.path, resume)
    modules = tuple(name for name in ("flash_attn",) if skyrl_config.trainer.flash_attn)
    for line in check_skyrl_run(spec, backend, joining_cluster(), modules, endpoints=False):
        print(f"preflight: {line}", flush=True)
    components = build_components(spec)
    counts = write_token_rows(components, AutoTokenizer.from_pretrained(local_path(spec.model.path)), tokens_file)
    print(f"SFT data: {counts['conversations']} conversations, {counts['tokens']} tokens, {counts['trained_tokens']} "
          f"of them the assistant's (trained on)", flush=True)
    join_cluster(skyrl_config, backend, modules, log_file, verbose)
    run.write_spec(spec)
    run.write_state({"backend": spec.backend.type, "step": resume_step or 0})
    print(f"SkyRL's and the libraries' logs: {log_file}" + ("" if verbose else " (`ctu run --verbose` shows them here too)"),
          flush=True)
    try:
        ray.get(ray.remote(num_cpus=1)(sft_main).remote(config, skyrl_config, spec.model_dump(mode="json"), str(run.path),
                                                        resume_step, str(log_file), verbose))
    except ray.exceptions.RayTaskError as error:
        if isinstance(error.cause, CtuError):
            raise error.cause from None
        raise
    finally:
        state: RunState = {"backend": spec.backend.type, "step": latest_checkpoint_step(run.path) or 0}
        run.write_state(state)
    return state


def sft_main(config: Any, skyrl_config: Any, spec_data: dict[str, object], run_dir: str, resume_step: int | None = None,
             log_file: str | None = None, verbose: bool = False) -> None:
    """The Ray entrypoint of an SFT run (`run_skyrl_sft` makes it a task): SkyRL's SFT loop (setup, train,
    shutdown, as SkyRL's own `sft_entrypoint`) with ctu's trackers (`ctu.backends.skyrl.sft_experiment`), resumed
    from the newest checkpoint when `config.resume_from` says so; SkyRL's and the libraries' logs go to `log_file`
    (the console too when `verbose`) from before SkyRL is imported."""
    import skyrl.utils.log  # noqa: F401  (its import gives SkyRL's logger its console handler, which routing replaces)

    from ctu.runners.console import route_library_logs
    from ctu.spec import spec_from_dict

    if log_file is not None:
        route_library_logs(Path(log_file), verbose)
    from ctu.backends.skyrl.sft_experiment import CtuSFTTrainer

    spec = spec_from_dict(spec_data, source="resolved spec").spec
    trainer = CtuSFTTrainer(config, skyrl_config, spec, Path(run_dir), resume_step)
    trainer.setup()
    if log_file is not None:
        route_library_logs(Path(log_file), verbose)  # SkyRL's setup set its console sink up again
    try:
        trainer.train()
    finally:
        trainer.shutdown()
