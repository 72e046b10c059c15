"""What the GRPO and SFT loops (`ctu.backends.tinker.runner`) hand Tinker's `forward_backward` and read from its
result: a trajectory as a `Datum`, and the summed loss and the trainer's log-probability of each target token, read
from the server's metrics or its per-datum ``loss_fn_outputs`` (SkyRL's JAX backend returns the latter)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import tinker

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
