"""The spec's schema: one pydantic model per section, unknown keys rejected everywhere.

Each field's docstring is its description: it feeds SPEC_REFERENCE.md, the JSON schema and `ctu explain`.
Names follow SkyRL's config where a field maps onto it (``train_batch_size``, ``policy_mini_batch_size``,
``n_samples_per_prompt``, ``eps_clip_low``...), so a SkyRL user finds them where they expect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator

from ctu.registry import booleans_as_numbers
from ctu.registry.config import ComponentConfig, ComponentMarker


class Section(BaseModel):
    """Base of every spec section: unknown keys are errors, infinities, NaN and booleans are not numbers;
    attribute docstrings are descriptions."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_default=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_as_numbers(cls, data: Any) -> Any:
        return booleans_as_numbers(cls, data)


MAX_CONTEXT = 1_048_576
"""The longest context a spec may ask for, in tokens: the longest of the open models this field trains
(Qwen2.5-7B-Instruct-1M); a larger number is a typo."""
MAX_BATCH = 65_536
"""The largest batch (tasks, or sequences per GPU) a spec may ask for; a larger number is a typo."""


def by_name(name: str) -> Any:
    """The default of a component field: the component's registered name, validated into a `ComponentConfig`
    with the spec (`validate_default`)."""
    return name


if TYPE_CHECKING:  # what each field builds, for the type checker: the kind's Protocol (or base class)
    from ctu.components.chat_templates.base import ChatTemplate
    from ctu.components.generators.base import GeneratorComponent
    from ctu.components.judges.base import Judge
    from ctu.components.rewards.base import Reward
    from ctu.components.task_generators.base import TaskGenerator
    from ctu.components.trackers.base import Tracker
    from ctu.components.user_fault_detectors.base import UserFaultDetector
    from ctu.spec.backend_rules import BackendRules
    from tau_bench_env.domains import Domain
    from tau_bench_env.interfaces import Parser, UserSimulator

    ChatTemplateRef = ComponentConfig[ChatTemplate]
    DomainRef = ComponentConfig[Domain]
    UserSimulatorRef = ComponentConfig[UserSimulator]
    GeneratorRef = ComponentConfig[GeneratorComponent]
    ParserRef = ComponentConfig[Parser]
    RewardRef = ComponentConfig[Reward]
    JudgeRef = ComponentConfig[Judge]
    TrackerRef = ComponentConfig[Tracker]
    BackendRef = ComponentConfig[BackendRules]
    TaskGeneratorRef = ComponentConfig[TaskGenerator]
    UserFaultDetectorRef = ComponentConfig[UserFaultDetector]
else:  # what pydantic validates: a name or a mapping, looked up in the kind's registry
    ChatTemplateRef = Annotated[ComponentConfig, ComponentMarker("chat_templates")]
    DomainRef = Annotated[ComponentConfig, ComponentMarker("domains")]
    UserSimulatorRef = Annotated[ComponentConfig, ComponentMarker("user_simulators")]
    GeneratorRef = Annotated[ComponentConfig, ComponentMarker("generators")]
    ParserRef = Annotated[ComponentConfig, ComponentMarker("parsers")]
    RewardRef = Annotated[ComponentConfig, ComponentMarker("rewards")]
    JudgeRef = Annotated[ComponentConfig, ComponentMarker("judges")]
    TrackerRef = Annotated[ComponentConfig, ComponentMarker("trackers")]
    BackendRef = Annotated[ComponentConfig, ComponentMarker("backends")]
    TaskGeneratorRef = Annotated[ComponentConfig, ComponentMarker("task_generators")]
    UserFaultDetectorRef = Annotated[ComponentConfig, ComponentMarker("user_fault_detectors")]


class Experiment(Section):
    """What the run is called and where it writes."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    """Run name: letters, digits, `_`, `-`, `.`; used in the run directory and the tracker's run name."""
    seed: int = 42
    """Seed for data order, sampling and the built-in model."""
    output_dir: str = "runs"
    """Folder under which the run directory `<output_dir>/<name>` is created."""
    tags: list[str] = []
    """Free-form tags passed to the trackers."""


ModelFamily = Literal["auto", "qwen2.5", "qwen3", "llama3", "other"]


class Model(Section):
    """The policy model and how conversations become tokens."""

    path: str = Field(min_length=1)
    """Hugging Face id or local path of the policy, or `builtin:tiny-qwen3` for the CPU smoke model."""
    reference_path: str | None = Field(None, min_length=1)
    """The reference model of the KL loss, when it is not the policy's starting weights: e.g. the base Instruct
    model while `path` is an SFT checkpoint of it (CTU-Agent-v0's `run_retail_3b_grpo*.sh`). null: `path`."""
    family: ModelFamily = "auto"
    """Model family; `auto` infers it from `path`. Decides the native tool-call parser and the Qwen3 thinking check."""
    chat_template: ChatTemplateRef = by_name("default")
    """Chat-template policy: the one place ctu turns messages (and tools) into tokens."""
    max_model_len: PositiveInt = Field(16384, le=MAX_CONTEXT)
    """Longest conversation in tokens (prompt and every turn); longer episodes are cut and end as truncated."""


class DatasetSource(Section):
    """Tasks of one domain and split."""

    domain: DomainRef
    """Domain component: a name (`retail`, `airline`, `telecom`, `mock`, or a registered one) or a mapping with its
    params (`{type: my_domain, ...}`); telecom's extra splits are `split: small` or `split: full`."""
    split: str = "train"
    """Task split of the domain: `train`, `test`, or `base` (every task); telecom also has `small` and `full`; a
    task file's own splits (e.g. `ctu tasks calibrate`'s `easy`, `medium`, `hard`, `unsolved`). A list of splits
    (`[medium, hard]`) is their union, written `medium+hard`."""

    @field_validator("split", mode="before")
    @classmethod
    def _union(cls, value: Any) -> Any:
        if isinstance(value, list):
            if not value or not all(isinstance(part, str) and part and "+" not in part for part in value):
                raise ValueError("a list of split names (at least one, none empty or holding '+')")
            return "+".join(dict.fromkeys(value))
        return value
    max_tasks: PositiveInt | None = None
    """Use at most this many tasks (the first ones, in task-id order); null for all."""


class Data(Section):
    """Which tasks train the policy and which test it."""

    train: list[DatasetSource] = Field(min_length=1)
    """Training tasks: one entry per domain and split; their tasks are pooled and shuffled."""
    test_sets: dict[str, DatasetSource] = {}
    """Named test sets, each logged as `test-<name>/average_reward`, `test-<name>/success_rate` and pass^k."""
    validation: DatasetSource | None = None
    """A validation set, distinct from the test sets: evaluated with them at every evaluation, logged as
    `validation/average_reward`, `validation/success_rate` and pass^k, and the one the run chooses its best step
    on (`best_validation.json` in the run directory: the step with the highest validation success rate, ties to
    the earlier); the test sets are only reported. `ctu validate` warns when it shares tasks with the training or
    a test set."""
    shuffle: bool = True
    """Shuffle the training tasks each epoch (seeded by `experiment.seed`)."""
    sft: str | None = Field(None, min_length=1)
    """SFT conversations (`ctu data sft`'s folder, or its `train.parquet`): with it, the run fine-tunes the policy
    on them (cross-entropy on the assistant's tokens, tokenised as GRPO tokenises episodes; `trainer.train_batch_size`
    conversations a step) instead of GRPO, with the same checkpoints and exports: on the `tinker` backend with LoRA
    and the same evaluations, on the `skyrl` backend through SkyRL's `SFTTrainer` (full fine-tuning, no evaluation
    during the run). `train` still names the tasks the conversations are of."""

    def evaluation_sets(self) -> dict[str, DatasetSource]:
        """What every evaluation during training runs, by the name its metrics carry: the validation set as
        ``validation`` (`ctu.metrics.VALIDATION`), then the test sets."""
        return {**({"validation": self.validation} if self.validation is not None else {}), **self.test_sets}


class UserFaults(Section):
    """Which faults of the simulated customer are looked for in each finished episode, and what one does."""

    detectors: list[UserFaultDetectorRef] = []
    """User-fault detectors (`ctu components user_fault_detectors`): `stop_before_write`, `unfounded_exit`,
    `identity_mismatch`, `empty_user_message`, `unperformed_device_action`, `llm_reviewer` (an LLM on an endpoint),
    or one's own. Empty: none (tau2's way)."""
    action: Literal["exclude", "retry", "keep"] = "exclude"
    """What a detected fault does: `exclude` leaves the episode out as an infrastructure error (out of its GRPO
    group and the loss, out of success and pass^k, counted); `retry` plays it again, up to `max_retries` times, then
    excludes it; `keep` only flags it and scores it as tau2 does."""
    max_retries: int = Field(2, ge=1, le=10)
    """With `retry`: how many times an episode is played again before it is excluded."""


class Environment(Section):
    """How an episode runs: turn limits and the simulated user."""

    max_turns: PositiveInt = Field(20, le=1000)
    """Most agent turns in an episode; the episode then ends with reason `max_turns` and reward 0."""
    max_errors: PositiveInt = Field(10, le=1000)
    """Most errors in an episode before it ends with reason `too_many_errors`: the agent's and the user's tool
    errors (as tau2 counts them), plus the policy's parse failures and empty turns."""
    user_simulator: UserSimulatorRef
    """The simulated customer: `llm` (an OpenAI-compatible endpoint) or `scripted` (offline)."""
    user_faults: UserFaults = UserFaults()
    """User-simulator faults: which are detected, and whether such an episode is excluded, replayed or kept."""
    warn_unsolvable_tasks: bool = True
    """Warn when a training or test set holds tasks whose gold solution takes more than `max_turns` turns or
    `max_errors` errors (one tool call a turn). Smoke specs, which cut episodes short on purpose, turn it off."""
    evaluate_nl_assertions: bool = False
    """Also score tau2's natural-language assertions (needs the top-level `judge`); tau2 leaves them out of rewards."""
    domain_policy: bool = True
    """Put the domain's policy (tau2's rules for the agent) in the system prompt. false leaves it out: a prompt
    ablation, or a short prompt for a CPU check; tau2's figures assume it is in."""


class Rollout(Section):
    """How the policy is sampled during rollouts."""

    generator: GeneratorRef = by_name("tau_multiturn")
    """The rollout generator: runs episodes and returns token ids, loss masks and rewards."""
    parser: ParserRef = by_name("hermes")
    """Tool-call parser for the policy's text (unused for tool calls when `native_tool_calling` is on)."""
    native_tool_calling: bool = False
    """Send tools as OpenAI `tools` and receive structured tool calls (needs a model family with a known parser)."""
    n_samples_per_prompt: PositiveInt = Field(5, le=1024)
    """GRPO group size: episodes per task per step."""
    temperature: float = Field(0.8, ge=0.0, le=2.0)
    """Sampling temperature during training rollouts."""
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    """Nucleus sampling during training rollouts."""
    repetition_penalty: float = Field(1.0, gt=0.0, allow_inf_nan=False)
    """vLLM's repetition penalty: above 1 discourages every token already in the prompt or the turn, below 1
    encourages it; 1.0 is off."""
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    """OpenAI/vLLM frequency penalty: subtracted from a token's logit once per time it occurs in the turn so far;
    0 is off; vLLM accepts [-2, 2]."""
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    """OpenAI/vLLM presence penalty: subtracted once from the logit of every token already in the turn; 0 is off;
    vLLM accepts [-2, 2]."""
    max_tokens_per_turn: PositiveInt = Field(1024, le=MAX_CONTEXT)
    """Most tokens the policy may generate in one turn."""
    eval_temperature: float = Field(0.0, ge=0.0, le=2.0)
    """Sampling temperature on test sets."""
    eval_n_samples_per_prompt: PositiveInt = Field(1, le=1024)
    """Episodes per test task; pass^k is reported for every k up to this."""


class DynamicSampling(Section):
    """Re-sample until a step's batch holds enough groups with a reward spread (groups without one carry no GRPO
    signal)."""

    type: Literal["filter", "replace"] = "filter"
    """`filter` (DAPO, Yu et al. 2025, arXiv:2503.14476): drop groups without a spread and sample more tasks until
    `trainer.train_batch_size` groups with one are collected. `replace` (POLARIS; skyrl only): fill the places of
    groups without a spread with copies of groups with one, re-sampling only when too few have one
    (`min_replace_ratio`)."""
    max_sample_batches: int = Field(30, ge=-1)
    """Most batches sampled for one step; the run stops with an error past it (the tasks are too easy or too hard
    for the policy). -1: no limit. SkyRL's default."""
    min_replace_ratio: float = Field(0.3, ge=0.0, le=1.0)
    """`replace` only: the share of a batch's groups that must have a spread for their copies to replace the rest."""


class OffPolicyCorrection(Section):
    """Truncated importance sampling of the rollout policy (Yao et al. 2025, "Your efficient RL framework secretly
    brings you off-policy RL training"): the loss is weighted by the ratio of the trainer's to the sampler's
    probability of each sampled token, capped. skyrl only: SkyRL's `algorithm.off_policy_correction`."""

    tis_ratio_type: Literal["token", "sequence"] = "token"
    """`token`: one ratio per token; `sequence`: the product over the trajectory's tokens."""
    token_tis_ratio_clip_high: float = Field(2.0, gt=1.0)
    """`token`: the cap on each token's ratio (SkyRL's default; it recommends 1.5-5)."""
    sequence_tis_ratio_clip_high: float = Field(5.0, gt=1.0)
    """`sequence`: the cap on a trajectory's ratio (SkyRL's default; it recommends 2-10)."""


class LogprobGap(Section):
    """How far the sampler's log-probability of each sampled token may be from the trainer's before the update
    (``train/logprob_gap_mean``, ``_max``, ``_frac_over``, ``_tokens`` every step, both backends) before the run
    warns that it trains off-policy (`ctu.runners.grpo.logprob_gap`)."""

    token_threshold: float = Field(0.5, gt=0.0)
    """A token whose difference exceeds this (nats) counts in ``train/logprob_gap_frac_over``."""
    warn_mean: float | None = Field(0.1, gt=0.0)
    """Warn, once per step, when the step's mean difference exceeds this (nats); null: never. On-policy training
    shows ~0.005-0.02 on GPUs, plus up to -log(top_p) where the sampler reports the renormalised nucleus."""


class Algorithm(Section):
    """GRPO: group-normalised advantages and a clipped policy loss (Shao et al. 2024, arXiv:2402.03300)."""

    advantage_estimator: Literal["grpo"] = "grpo"
    """Advantage estimator; ctu trains with GRPO."""
    norm_adv_by_std: bool = True
    """Divide group-centred rewards by the group's standard deviation (GRPO); false gives Dr. GRPO's form."""
    negative_advantage_weight: float = Field(1.0, ge=0.0, le=1.0)
    """Multiplies every negative advantage (1: GRPO; 0: only the group's better-than-average episodes train, positive
    sample reinforcement, Zhu et al. 2025, arXiv:2506.01347). Below 1 when the policy rarely succeeds and GRPO's
    many negative samples raise its entropy until its outputs break (`policy/policy_entropy`, parse failures):
    `ctu.runners.grpo.weigh_negative`."""
    eps_clip_low: float = Field(0.1, gt=0.0)
    """PPO clip range below 1 for the probability ratio."""
    eps_clip_high: float = Field(0.1, gt=0.0)
    """PPO clip range above 1 for the probability ratio."""
    value_clip: float = Field(0.1, gt=0.0)
    """Value clip (used only by critic-based estimators; kept for parity with SkyRL's config)."""
    use_kl_loss: bool = True
    """Add a KL penalty to the reference policy to the loss."""
    kl_loss_coef: float = Field(0.01, ge=0.0)
    """Coefficient of the KL loss."""
    kl_estimator: Literal["k1", "k2", "k3", "abs"] = "k3"
    """KL estimator (Schulman's k1/k2/k3)."""
    entropy_coef: float = Field(0.0, ge=0.0)
    """Entropy bonus coefficient (0 is off)."""
    loss_reduction: Literal["token_mean", "sequence_mean", "seq_mean_token_sum_norm"] = "token_mean"
    """How token losses are averaged into the batch loss."""
    policy_loss: Literal["regular", "rollout_is", "dppo"] = "regular"
    """The policy loss. `regular`: PPO's clipped ratio to the policy before the step (recomputed by the trainer).
    `rollout_is` (GLM-5 report, arXiv:2602.15763, section 4.1.2) and `dppo` (arXiv:2602.04879) weigh against the
    sampler's own logprobs, as asynchronous training needs (`trainer.fully_async`). skyrl only for the last two
    (SkyRL's `policy_loss_type`)."""
    zero_variance_filter: bool = False
    """Leave out of the loss every group without a reward spread (fewer than two of its rewards differ by more than
    1e-6): GRPO gives it zero advantages, and it would only dilute a `token_mean` loss (SkyRL, prime-rl and verl
    filter them alike). An episode ended by an infrastructure error adds no spread. Such groups are counted in
    `train/zero_variance_groups` either way. tinker: its loop never trains a zero-advantage trajectory, so this is
    always in effect there."""
    dynamic_sampling: DynamicSampling | None = None
    """Sample more until the batch has enough groups with a spread (null: off); `train/sampling_rounds` counts the
    batches a step sampled. skyrl: the extra batches are the epoch's next ones (SkyRL's dynamic sampling); with
    `trainer.fully_async` only `filter` (SkyRL's `sample_full_batch`). tinker: round r of step s draws
    `train_batch_size` of all training tasks, seeded by (experiment.seed, s, r), so a resumed step draws alike."""
    off_policy_correction: OffPolicyCorrection | None = None
    """Correct for the sampler's probabilities differing from the trainer's (null: off). Needs the sampler's
    logprobs of the sampled ids after temperature, which ctu's SkyRL sampler always returns."""
    logprob_gap: LogprobGap = Field(default_factory=LogprobGap)
    """Measure, every step, how far the sampler's log-probabilities are from the trainer's, and when to warn."""


class Optimizer(Section):
    """AdamW for the policy."""

    lr: float = Field(5e-7, gt=0.0)
    """Learning rate."""
    weight_decay: float = Field(0.05, ge=0.0)
    """AdamW weight decay."""
    max_grad_norm: float = Field(0.5, gt=0.0)
    """Gradient clipping norm."""
    warmup_steps: int = Field(0, ge=0)
    """Linear learning-rate warm-up, in optimizer steps (SkyRL steps its optimizer once per policy mini-batch, Tinker
    once per GRPO step; `ctu explain` prints the run's count); 0, SkyRL's default, is none."""


class FullyAsync(Section):
    """Asynchronous training (SkyRL's fully async trainer; AReaL, Fu et al. 2025, arXiv:2505.24298): episodes are
    sampled while the trainer trains, each group by the newest weights when it started, and a step trains on the
    first `policy_mini_batch_size` groups to finish. skyrl only."""

    max_staleness_steps: int = Field(1, ge=0, le=100)
    """A group started at step i is trained at step j <= i + this; 0 is on-policy. Logged per step as
    `async/staleness_mean` and `async/staleness_max` (steps between a trained group's start and its step)."""
    num_parallel_generation_workers: PositiveInt | None = None
    """Groups in flight at once, between `policy_mini_batch_size` and `policy_mini_batch_size x (max_staleness_steps
    + 1)`; null: the largest."""


class Trainer(Section):
    """Steps, batches, evaluation and checkpoints."""

    epochs: PositiveInt = Field(1, le=100_000)
    """Passes over the training tasks."""
    max_steps: PositiveInt | None = None
    """Stop after this many steps (null: run all epochs)."""
    train_batch_size: PositiveInt = Field(64, le=MAX_BATCH)
    """Tasks per step (each sampled `rollout.n_samples_per_prompt` times)."""
    policy_mini_batch_size: PositiveInt = Field(16, le=MAX_BATCH)
    """Tasks per optimizer step; must divide `train_batch_size`."""
    micro_train_batch_size_per_gpu: PositiveInt = Field(1, le=MAX_BATCH)
    """Sequences per forward/backward pass on one GPU (SkyRL backend)."""
    eval_batch_size: PositiveInt = Field(32, le=MAX_BATCH)
    """Tasks per evaluation batch."""
    eval_interval: int = Field(3, ge=0)
    """Evaluate the test sets every this many steps and after the last step (0: only after the last step); both
    backends alike."""
    eval_before_train: bool = True
    """Evaluate the test sets before the first step."""
    ckpt_interval: int = Field(10, ge=0)
    """Save a checkpoint every this many steps, at the end of each epoch and after the last step (0: only at
    epoch ends and after the last step); both backends alike."""
    hf_save_interval: int = Field(0, ge=0)
    """Export the policy as a Hugging Face model (loadable with `transformers.AutoModelForCausalLM.from_pretrained`)
    under `exports/global_step_<N>/policy` every this many steps and after the last step (0: only after the last
    step); both backends. tinker: the LoRA adapter, downloaded through the Tinker API, merged into the base model.
    skyrl: SkyRL also exports at each epoch's end; `ctu validate` warns when that means many exports. `ctu eval
    --run-dir` evaluates the newest."""
    max_ckpts_to_keep: int = Field(2, ge=-1)
    """Checkpoints kept on disk (-1: all)."""
    max_infra_error_rate: float = Field(0.5, ge=0.0, le=1.0)
    """A step where more than this fraction of the episodes ended by an infrastructure error (user simulator,
    evaluator or fatal judge failure) is skipped with a warning: no update (`train/skipped_steps`). Below it,
    such episodes are only left out of their groups and the loss."""
    fully_async: FullyAsync | None = None
    """Train asynchronously (null: synchronous: every step samples, then trains). Needs `train_batch_size` equal to
    `policy_mini_batch_size`, a loss against the sampler's logprobs (`algorithm.policy_loss: rollout_is` or `dppo`),
    and the policy and vLLM on separate GPUs (`backend.colocate_all: false`)."""
    optimizer: Optimizer = Field(default_factory=Optimizer)
    """Policy optimizer."""


class TrajectoryLog(Section):
    """Full conversations written as JSONL in the run directory."""

    every_n_steps: int = Field(1, ge=0)
    """Log a sample of training trajectories every this many steps (0: never; evaluations are always logged)."""
    train_samples: int = Field(8, ge=0)
    """Training trajectories logged each time."""


class Tracking(Section):
    """Where metrics and trajectories go."""

    project: str = "ctu"
    """Project name for trackers; a run with the `taxonomy_feedback` reward gets `_with_taxonomy_feedback` appended."""
    trackers: list[TrackerRef] = Field(default_factory=lambda: [by_name("console")])
    """Metric trackers, all used at once: `console`, `jsonl`, `wandb`, `tensorboard`, or registered ones."""
    trajectories: TrajectoryLog = Field(default_factory=TrajectoryLog)
    """Trajectory logging."""




class TaskGeneration(Section):
    """Training tasks `ctu tasks generate SPEC --out DIR` writes: proposed by a task generator, each verified
    (`ctu.tasks.verify`) before it is kept, written in tau2's format (tasks.json, split_tasks.json with `train`
    and `validation`) with provenance.json, for `data.train: [{domain: {type: ..., tasks_file: DIR/tasks.json,
    split_file: DIR/split_tasks.json}}]`."""

    domain: DomainRef
    """The domain the tasks are for (its tools, database and policy; the test tasks they must not overlap)."""
    generator: TaskGeneratorRef
    """Task generator component: `template` (offline, from a template set), `llm` (an OpenAI-compatible endpoint)
    or a registered one."""
    count: PositiveInt = Field(le=1_000_000)
    """Verified tasks to keep."""
    seed: int = 0
    """Seed of every random choice (a rerun with the same seed writes the same files)."""
    max_proposals: PositiveInt | None = None
    """Stop after this many proposals even if fewer than `count` tasks were kept (default 20 x count)."""
    validation_ratio: float = Field(0.1, ge=0.0, lt=1.0)
    """Share of the kept tasks in split `validation` (seeded); the rest are split `train`."""
    splits: dict[str, float] = Field(default_factory=dict)
    """More splits carved out of the kept tasks after `validation`, each with its share (seeded), for example
    `{rl: 0.4}`: tasks GRPO trains on that the SFT data (split `train`) never holds. The rest are split `train`."""

    @field_validator("splits")
    @classmethod
    def _extra_splits(cls, splits: dict[str, float]) -> dict[str, float]:
        for name, share in splits.items():
            if name in ("train", "validation", "base") or not name or "+" in name:
                raise ValueError(f"split {name!r}: a name of its own (not train, validation or base, without '+')")
            if not 0.0 < share < 1.0:
                raise ValueError(f"split {name!r}: a share between 0 and 1, not {share}")
        return splits

    @model_validator(mode="after")
    def _shares(self) -> TaskGeneration:
        if self.validation_ratio + sum(self.splits.values()) >= 1.0:
            raise ValueError("validation_ratio and the splits' shares leave no task for split `train`")
        return self
    concurrency: PositiveInt = Field(1, le=256)
    """Proposals requested at once (an `llm` generator's requests in flight); they are verified and recorded in
    order, so the files do not depend on it."""
    test_splits: list[str] | None = None
    """The domain's splits no generated task may overlap (default: `test` where the domain has it, else every
    task of the domain: tau2's `mock` has one split); the spec's test sets of the same domain are added."""


class Spec(Section):
    """One ctu experiment."""

    extends: str | list[str] | None = Field(None, exclude=True)
    """Base spec file(s), relative to this file, deep-merged in order before this one (mappings merge, lists
    are replaced). Resolved at load time; a resolved spec has none."""
    imports: list[str] = Field(default_factory=list)
    """Your own components' code, imported before the rest of the spec is checked: Python files (relative to
    the spec that names them) or module names, e.g. ``[my_rewards.py, my_pkg.parsers]``. A base's imports are
    kept by the specs that extend it. Imported in every process that runs ctu code (the CLI, the Tinker runner,
    SkyRL's Ray entrypoint)."""
    experiment: Experiment
    """Run name, seed and output folder."""
    model: Model
    """The policy model."""
    data: Data
    """Training tasks and named test sets."""
    environment: Environment
    """Episode limits and the user simulator."""
    rollout: Rollout = Field(default_factory=Rollout)
    """Sampling and the rollout generator."""
    algorithm: Algorithm = Field(default_factory=Algorithm)
    """GRPO hyperparameters."""
    trainer: Trainer = Field(default_factory=Trainer)
    """Batches, steps, evaluation and checkpoints."""
    rewards: list[RewardRef] = Field(default_factory=lambda: [by_name("tau_outcome")], min_length=1)
    """Reward components applied in order, each seeing the reward so far (the first is usually `tau_outcome`)."""
    judge: JudgeRef | None = None
    """Default judge for rewards that need one and do not name their own."""
    tracking: Tracking = Field(default_factory=Tracking)
    """Metric trackers and trajectory logs."""
    task_generation: TaskGeneration | None = None
    """Training tasks to generate (`ctu tasks generate`); a spec that only trains on them leaves it out."""
    backend: BackendRef = by_name("skyrl")
    """Where training runs: `skyrl` (GPU cluster), `tinker` (a Tinker API server; local on CPU), or a registered
    backend."""
