"""The spec's schema: one pydantic model per section, unknown keys rejected everywhere.

Each field's docstring is its description: it feeds SPEC_REFERENCE.md, the JSON schema and `ctu explain`.
The shared base and field types are in `ctu.spec.section`, the training sections in `ctu.spec.training` (both
importable from here too). Names follow SkyRL's config where a field maps onto it (``train_batch_size``, ``policy_mini_batch_size``,
``n_samples_per_prompt``, ``eps_clip_low``...), so a SkyRL user finds them where they expect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, PositiveInt, field_validator, model_validator

from ctu.spec.section import (
    MAX_CONTEXT,
    BackendRef,
    ChatTemplateRef,
    DomainRef,
    GeneratorRef,
    JudgeRef,
    ParserRef,
    RewardRef,
    Section,
    TaskGeneratorRef,
    TrackerRef,
    UserFaultDetectorRef,
    UserSimulatorRef,
    by_name,
)
from ctu.spec.training import Algorithm, DynamicSampling, LogprobGap, Optimizer, Trainer

if TYPE_CHECKING:
    from tau_bench_env.outcome import EpisodeConfig

__all__ = [
    "Algorithm", "Data", "DatasetSource", "DynamicSampling", "Environment", "Experiment", "LogprobGap",
    "Model", "Optimizer", "Rollout", "Section", "Spec", "TaskGeneration", "Tracking", "Trainer",
    "TrajectoryLog", "UserFaults",
]


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
    """Hugging Face id or local path of the policy, or a built-in model built offline into ctu's cache:
    `builtin:tiny-qwen3` (the CPU smoke model, for tests), `builtin:smollm2-135m-instruct` (a real pretrained
    instruct model; the `smollm2` extra)."""
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
    """Shuffle the training tasks each epoch (seeded by `experiment.seed`). skyrl: its GRPO trainer always shuffles
    (false is refused there; its SFT trainer reads it)."""
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

    def sources(self) -> list[tuple[str, DatasetSource]]:
        """Every data source with its dotted path in the spec: ``data.train.<i>``, ``data.validation``,
        ``data.test_sets.<name>``."""
        sources = [(f"data.train.{index}", source) for index, source in enumerate(self.train)]
        if self.validation is not None:
            sources.append(("data.validation", self.validation))
        return sources + [(f"data.test_sets.{name}", source) for name, source in self.test_sets.items()]


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


class Overflow(Section):
    """What an episode does in training when its conversation outgrows the model's context (`model.max_model_len`).
    Such an episode always ends cleanly before the prompt that would not fit, with termination `context_overflow`
    (counted in ``environment/termination/context_overflow``, written in its trajectory line); tau2 scores it 0, as any
    end it does not check, and evaluations report that."""

    reward: float | None = Field(None, allow_inf_nan=False)
    """Its training reward in place of the reward chain's (e.g. -1 to push long episodes down); null: the chain's."""
    exclude: bool = False
    """Train on none of its tokens (its loss mask zeroed: DAPO's overlong filtering, Yu et al. 2025,
    arXiv:2503.14476), its reward still counted in its group's mean and in success rates."""


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
    overflow: Overflow = Overflow()
    """An episode that outgrows the model's context: its training reward, and whether it is trained on."""
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
    """Nucleus sampling during training rollouts (evaluation always samples at 1.0). Below 1.0 GRPO never samples
    the tail that evaluation samples, and the trainer scores the full distribution: the step is off-policy by up to
    -log(top_p) nats a token. 1.0 (SkyRL's default) trains on what evaluation samples; the learning chain ships it
    (docs/learning-checks.md)."""
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
    trajectory: Literal["whole", "step_wise"] = "whole"
    """How an episode is trained: `whole`, one sample of the whole conversation with the policy's turns in its loss
    mask; `step_wise`, each policy turn its own sample (its prompt the exact ids the turn was sampled from, its
    response the ids sampled), every turn given the episode's advantage (SkyRL's
    `generator.step_wise_trajectories`). The same tokens are trained either way unless the chat template drops
    earlier turns' reasoning (`qwen3_thinking`), which needs `step_wise`; `step_wise` re-reads each turn's prompt
    (docs/specs.md measures the cost)."""
    turn_discount: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    """With `step_wise`: turn t of an episode of T policy turns trains with its advantage times
    turn_discount^(T - 1 - t), so the turns nearest the outcome weigh most (AReaL's turn discount); 1.0 is off.
    The tinker backend only."""


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
    """Share of the kept tasks in split `validation` (seeded); the rest are split `train`. Of the tasks that may be
    held out: a generator's `train_only` tasks (a template's `train_only: true`) are in `train` alone and not counted."""
    splits: dict[str, float] = Field(default_factory=dict)
    """More splits carved out of the kept tasks after `validation`, each with its share (seeded), for example
    `{rl: 0.4}`: tasks GRPO trains on that the SFT data (split `train`) never holds. The rest are split `train`.
    Shares of the same tasks as `validation_ratio`."""

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

    def episode_config(self) -> EpisodeConfig:
        """The episode limits and modes every episode of the spec is played with (`environment`'s, and
        `rollout.native_tool_calling`)."""
        from tau_bench_env.outcome import EpisodeConfig

        environment = self.environment
        return EpisodeConfig(max_turns=environment.max_turns, max_errors=environment.max_errors,
                             native_tool_calling=self.rollout.native_tool_calling,
                             evaluate_nl_assertions=environment.evaluate_nl_assertions, domain_policy=environment.domain_policy)
