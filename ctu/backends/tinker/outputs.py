"""What the GRPO and SFT loops (`ctu.backends.tinker.runner`) hand Tinker's `forward_backward` and read from its
result: a trajectory as a `Datum`, a GRPO step's data fed one at a time (`FedBatch`), and the summed loss and the
trainer's log-probability of each target token, read from the server's metrics or its per-datum ``loss_fn_outputs``
(SkyRL's JAX backend returns the latter)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ctu.runners.grpo import token_data

if TYPE_CHECKING:
    import numpy as np
    import tinker

    from ctu.rollout.records import TrajectoryRecord
    from ctu.runners.grpo import TokenData


def grpo_datum(data: TokenData) -> tinker.types.Datum:
    """`data` as a Tinker `Datum` for the `importance_sampling` and `ppo` losses: the inputs, and per target its token
    id (int64), the sampler's logprob and the advantage (float32)."""
    import numpy as np
    import tinker

    def tensor(values: list, dtype: type[np.generic]) -> tinker.types.TensorData:
        return tinker.types.TensorData.from_numpy(np.array(values, dtype=dtype))

    return tinker.types.Datum(model_input=tinker.types.ModelInput.from_ints(data.inputs),
                              loss_fn_inputs={"target_tokens": tensor(data.targets, np.int64),
                                              "logprobs": tensor(data.logprobs, np.float32),
                                              "advantages": tensor(data.advantages, np.float32)})


def target_logprobs(result: object) -> list[float] | None:
    """The trainer's log-probability of each target token of a one-datum `forward_backward` result, computed with the
    weights before the step's update (Tinker's ``loss_fn_outputs[0]["logprobs"]``; SkyRL's JAX backend returns it for
    every loss); None when the result has none."""
    outputs = getattr(result, "loss_fn_outputs", None) or []
    if len(outputs) != 1 or not isinstance(outputs[0], dict) or outputs[0].get("logprobs") is None:
        return None
    values = outputs[0]["logprobs"]
    values = getattr(values, "data", None) if not isinstance(values, dict) else values.get("data")
    return None if values is None else [float(value) for value in values]


def loss_sum(result: object) -> float | None:
    """A `forward_backward` result's summed loss: the server's ``loss:sum`` metric, else the sum of its per-token
    ``elementwise_loss`` outputs (what SkyRL's JAX backend returns: already weighted by the loss mask); None when
    it gives neither."""
    metrics = getattr(result, "metrics", None) or {}
    if "loss:sum" in metrics:
        return float(metrics["loss:sum"])
    outputs = getattr(result, "loss_fn_outputs", None) or []
    parts: list[Any] = [output.get("elementwise_loss") for output in outputs if isinstance(output, dict)]
    if not parts or any(part is None for part in parts):
        return None
    total = 0.0
    for part in parts:
        total += sum(float(value) for value in getattr(part, "data", part))
    return total


@dataclass
class FedBatch:
    """What one GRPO step fed Tinker's `forward_backward` (`feed`).

    Attributes:
        trajectories: episodes with at least one sample trained.
        samples: data fed (an episode each, or each policy turn of a step-wise one).
        losses: each datum's summed loss, where the server reported one.
        sampled_logprobs: the sampler's logprob of each trained sampled token, where the trainer's is known too.
        trainer_logprobs: the trainer's, before the update, of the same tokens.
    """

    trajectories: int = 0
    samples: int = 0
    losses: list[float] = field(default_factory=list)
    sampled_logprobs: list[float] = field(default_factory=list)
    trainer_logprobs: list[float] = field(default_factory=list)

    async def feed_data(self, training: tinker.TrainingClient, samples: list[TokenData], sampler_logprobs: bool,
                        loss: Literal["importance_sampling", "ppo"], config: dict[str, float] | None) -> None:
        """`forward_backward` with `loss` (and its `config`) on each of one episode's `samples` (`samples_of`), one
        datum at a time (gradients accumulate until the optimizer step). What came back is added here (the trainer's
        logprobs of the sampled tokens only where `sampler_logprobs`: the sampler's are real)."""
        for data in samples:
            result = await (await training.forward_backward_async([grpo_datum(data)], loss, config)).result_async()
            summed = (getattr(result, "metrics", None) or {}).get("loss:sum")
            if summed is not None and math.isfinite(summed):
                self.losses.append(float(summed))
            forward = target_logprobs(result)
            if sampler_logprobs and forward is not None and len(forward) == len(data.targets):
                self.sampled_logprobs += [p for p, generated in zip(data.logprobs, data.generated, strict=True) if generated]
                self.trainer_logprobs += [p for p, generated in zip(forward, data.generated, strict=True) if generated]
        self.samples += len(samples)
        self.trajectories += bool(samples)


def samples_of(record: TrajectoryRecord, whole_logprobs: list[float], advantage: float, turn_discount: float = 1.0) -> list[TokenData]:
    """`record`'s training samples (the episode, or each of its turns: `TrajectoryRecord.training_samples` with
    `turn_discount`) as next-token data, `advantage` times each sample's weight; `whole_logprobs` are the whole
    episode's sampler logprobs. A sample without a generated token is left out."""
    return [token_data(sample.prompt_ids, sample.response_ids, sample.loss_mask, sample.logprobs, advantage * weight)
            for sample, weight in record.training_samples(turn_discount, whole_logprobs) if any(sample.loss_mask)]
