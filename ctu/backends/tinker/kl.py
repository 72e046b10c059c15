"""The tinker backend's KL penalty to its reference, the LoRA's base model (`algorithm.use_kl_loss`).

Tinker's losses take per-token advantages and no reference model, so the penalty goes into the advantages, as the
Tinker cookbook's RL loop does (`kl_penalty_coef`) and verl's KL in the reward (`use_kl_in_reward`, its
`core_algos.kl_penalty`): for each generated token t of the step's trained samples, ``d_t`` is the spec's
`algorithm.kl_estimator` of the KL to the reference at t (`token_kl`, Schulman's estimators of
``log r_t = sampler logprob_t - reference logprob_t``: k1 ``log r``, k2 ``(log r)^2 / 2``, k3 ``1/r - 1 + log r``,
abs ``|log r|``), and ``advantage_t += coef * (mean d - d_t)``, the mean over every generated token of the step. A
token the policy now likes more than the reference did is pushed back; centred, the penalty moves no advantage on
average. The reference's log-probabilities come from a sampling client of the base model the LoRA adapter was made
on (`SamplingClient.compute_logprobs_async`: one forward pass over a sample's tokens).

Unlike SkyRL's KL loss (the same estimators in the loss, over the whole mini-batch), the penalty reaches only the
samples the step feeds `forward_backward`: with a KL penalty, every sample of the step that is not an
infrastructure error (a zero-advantage one carries the penalty alone), unless `algorithm.zero_variance_filter`
leaves its group out.
"""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING, Literal

from ctu.metrics import TRAIN, metric

if TYPE_CHECKING:
    import tinker

    from ctu.runners.grpo import TokenData
    from ctu.spec import Spec


def penalty_coef(spec: Spec) -> float:
    """The KL penalty's coefficient of a tinker run of `spec`: `algorithm.kl_loss_coef` for a GRPO run with
    `algorithm.use_kl_loss`, else 0.0 (none; an SFT run has no penalty)."""
    algorithm = spec.algorithm
    return algorithm.kl_loss_coef if spec.data.sft is None and algorithm.use_kl_loss else 0.0


Estimator = Literal["k1", "k2", "k3", "abs"]


def token_kl(sampled: float, reference: float, estimator: Estimator) -> float:
    """One generated token's estimate of the KL from the policy to the reference (nats), from the two
    log-probabilities: `estimator` is Schulman's k1, k2 or k3 ("Approximating KL Divergence", 2020) or abs, as
    SkyRL's and verl's `kl_estimator`/`kl_penalty` name them; ``log r`` is clamped to [-20, 20] for k3's
    exponential, as verl clamps it."""
    log_ratio = sampled - reference
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return log_ratio * log_ratio / 2
    if estimator == "abs":
        return abs(log_ratio)
    log_ratio = max(-20.0, min(20.0, log_ratio))
    return math.exp(-log_ratio) - 1 + log_ratio


async def reference_logprobs(client: tinker.SamplingClient, data: TokenData) -> list[float]:
    """The reference's log-probability of each of `data.targets` (one float per target; 0.0 where the server gives
    none), from one `compute_logprobs_async` over the sample's tokens. Tinker's API gives one value per token, None
    for the first; SkyRL's local server (0.4.0, JAX backend) gives one per token after the first: both are read."""
    import tinker

    tokens = [*data.inputs, data.targets[-1]]
    values = list(await client.compute_logprobs_async(tinker.types.ModelInput.from_ints(tokens)))
    if len(values) == len(tokens):
        values = values[1:]
    return [0.0 if value is None else float(value) for value in values]


async def penalise(client: tinker.SamplingClient, samples: list[TokenData], coef: float,
                   estimator: Estimator = "k1") -> dict[str, float]:
    """Add the KL penalty (module docstring) to the advantages of `samples`' generated tokens, in place, with the
    reference's log-probabilities from `client` (fetched concurrently) and `estimator` (`token_kl`); returns
    ``train/kl_to_reference``, the mean estimate (nats per generated token, before the penalty moves anything),
    and ``train/kl_penalty_coef``; nothing when no sample has a generated token.

    Raises:
        ValueError: the server gave a sample a different number of log-probabilities than it has targets.
    """
    references = await asyncio.gather(*(reference_logprobs(client, data) for data in samples))
    diffs: list[list[float]] = []
    for data, reference in zip(samples, references, strict=True):
        if len(reference) != len(data.targets):
            raise ValueError(f"the reference gave {len(reference)} log-probabilities for {len(data.targets)} targets")
        diffs.append([token_kl(sampled, ref, estimator) if generated else 0.0
                      for sampled, ref, generated in zip(data.logprobs, reference, data.generated, strict=True)])
    tokens = sum(sum(data.generated) for data in samples)
    if not tokens:
        return {}
    mean = sum(sum(diff) for diff in diffs) / tokens
    for data, diff in zip(samples, diffs, strict=True):
        data.advantages[:] = [advantage + coef * (mean - d) if generated else advantage
                              for advantage, d, generated in zip(data.advantages, diff, data.generated, strict=True)]
    return {metric(TRAIN, "kl_to_reference"): mean, metric(TRAIN, "kl_penalty_coef"): coef}
