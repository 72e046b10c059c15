"""The spec's training sections every backend reads alike: the algorithm (GRPO's advantages and loss, dynamic
sampling, the sampler-trainer log-probability gap), the optimizer and the trainer's schedule. Part of the schema in
`ctu.spec.models`, which holds the rest and the whole `Spec`; what only one backend has lives in that backend's own
section (`backend:`), e.g. SkyRL's fully async training in `ctu.backends.skyrl.params`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from ctu.spec.section import MAX_BATCH, Section


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
    shuffle_rewards: bool = False
    """A negative control, not a way to train: each GRPO group's rewards are dealt out at random among its episodes
    before advantages are computed (same tasks, samples, steps and advantage magnitudes; only which episode earned
    which reward is lost). A policy's gain over this control's is the reward's doing. Both backends; the episodes'
    own rewards stay in their trajectory lines and metrics, and ``train/shuffled_rewards`` is the share trained
    with another's (`ctu.runners.grpo.shuffle_group_rewards`)."""
    eps_clip_low: float = Field(0.1, gt=0.0)
    """PPO clip range below 1 for the probability ratio."""
    eps_clip_high: float = Field(0.1, gt=0.0)
    """PPO clip range above 1 for the probability ratio."""
    use_kl_loss: bool = True
    """Penalise the policy's KL to a reference policy. skyrl: SkyRL's KL loss to `model.reference_path`, with
    `kl_estimator`. tinker: the `kl_estimator` estimate put into each sampled token's advantage, to the base model
    the LoRA adapter trains on (`model.path`; the Tinker cookbook's `kl_penalty_coef`): `ctu.backends.tinker.kl`."""
    kl_loss_coef: float = Field(0.01, ge=0.0)
    """Coefficient of the KL loss (tinker: of the penalty in the advantages)."""
    kl_estimator: Literal["k1", "k2", "k3", "abs"] = "k3"
    """KL estimator (Schulman's k1/k2/k3, or abs) of the KL loss (tinker: of each token's penalty in the
    advantages)."""
    zero_variance_filter: bool = False
    """Leave out of the loss every group without a reward spread (fewer than two of its rewards differ by more than
    1e-6): GRPO gives it zero advantages, and it would only dilute a `token_mean` loss (SkyRL, prime-rl and verl
    filter them alike). An episode ended by an infrastructure error adds no spread. Such groups are counted in
    `train/zero_variance_groups` either way. tinker: its loop never trains a zero-advantage trajectory but for a
    KL penalty's term, which this leaves out for such groups."""
    dynamic_sampling: DynamicSampling | None = None
    """Sample more until the batch has enough groups with a spread (null: off); `train/sampling_rounds` counts the
    batches a step sampled. skyrl: the extra batches are the epoch's next ones (SkyRL's dynamic sampling); with
    `backend.fully_async` only `filter` (SkyRL's `sample_full_batch`). tinker: round r of step s draws
    `train_batch_size` of all training tasks, seeded by (experiment.seed, s, r), so a resumed step draws alike."""
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
    scheduler: Literal["constant", "linear", "cosine"] = "constant"
    """The learning rate after the warm-up: constant (SkyRL's default), or decaying towards 0 at the end of the run's
    optimizer steps (0 after its last), along a line or a half cosine. These are transformers' schedule types
    (`constant_with_warmup`, `linear`, `cosine` of `transformers.get_scheduler`), which SkyRL's trainer is handed;
    the tinker backend computes the same each step (`ctu.runners.grpo.learning_rate`)."""


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
    eval_batch_size: PositiveInt = Field(32, le=MAX_BATCH)
    """Tasks per evaluation batch."""
    eval_interval: int = Field(3, ge=0)
    """Evaluate the test sets every this many steps and after the last step (0: only after the last step); both
    backends alike."""
    eval_before_train: bool = True
    """Evaluate the test sets before the first step."""
    eval_after_train: bool = True
    """Evaluate the test sets after the last step. False for a run whose policy is evaluated on its own afterwards
    (`ctu eval --run-dir`, as the learning chain does): the run saves the evaluation's episodes. skyrl: SkyRL
    evaluates after the last step whenever it evaluates at all, so false needs `eval_interval: 0` and
    `eval_before_train: false` there."""
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
    """Checkpoints kept on disk (-1: all). skyrl only: the tinker backend keeps every checkpoint on its server and
    refuses another value."""
    max_infra_error_rate: float = Field(0.5, ge=0.0, le=1.0)
    """A step where more than this fraction of the episodes ended by an infrastructure error (user simulator,
    a scoring fault outside the episode such as tau2's NL-assertion judge, or fatal judge failure) is skipped with a warning: no update (`train/skipped_steps`). Below it,
    such episodes are only left out of their groups and the loss."""
    optimizer: Optimizer = Field(default_factory=Optimizer)
    """Policy optimizer."""
