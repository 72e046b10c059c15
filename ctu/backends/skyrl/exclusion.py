"""Infrastructure errors kept out of SkyRL's training paths: the flag travels with each trajectory.

SkyRL's trainer moves trajectories between batches (dynamic sampling drops, replaces and re-samples groups; the
fully async trainer trains on groups from many `generate` calls), so an episode's infrastructure error
(`TrajectoryRecord.infra_error`) is read from the row itself: ctu's generator gives each trajectory an
``env_metrics`` row (`ctu.backends.skyrl.generator.episode_row`), which SkyRL slices and concatenates with the batch.

Where SkyRL looks at a group's spread (zero-variance filtering, dynamic sampling), an excluded episode carries its
group's mean kept reward and loss mask 0 (`neutral`), so it adds none. For the advantages only, its uid is made its
own (`mark_excluded`; SkyRL's mini-batches are cut by the real uids), so it is left out of its group's mean and
standard deviation; `ctu.backends.skyrl.trainer.CtuTraining` then zeroes its advantage. SkyRL's own reward
figures of a batch are computed over the kept trajectories alone (`kept_only`). Pure functions over SkyRL's
`GeneratorOutput` dict: no torch, no Ray.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

EXCLUDED = "/infra-error/"
"""What a uid of an excluded trajectory holds: ``<task uid>/infra-error/<row>``."""


def excluded_rows(output: Mapping[str, Any]) -> list[bool]:
    """One flag per trajectory of `output`: it ended by an infrastructure error.

    Raises:
        RuntimeError: `output` has no ``env_metrics`` row per trajectory (a generator that is not ctu's agent loop
            must give them, with ``infra_error``, or infrastructure errors would be trained on).
    """
    rows = output.get("env_metrics")
    count = len(output["response_ids"])
    if rows is None or len(rows) != count:
        raise RuntimeError(f"the generator output has {0 if rows is None else len(rows)} env_metrics rows for {count} "
                           "trajectories: ctu needs one per trajectory, with `infra_error`, to keep infrastructure "
                           "errors out of training")
    return [bool(row.get("infra_error")) for row in rows]


def infra_errors(output: Mapping[str, Any]) -> list[str | None]:
    """Each trajectory's infrastructure error (None for one without), from its ``env_metrics`` row."""
    excluded_rows(output)
    return [row.get("infra_error") or None for row in output["env_metrics"]]


def neutral(output: Mapping[str, Any], uids: Sequence[str]) -> dict[str, Any]:
    """A shallow copy of `output` where each excluded trajectory has its group's mean kept reward (0 when none is
    kept) and an all-zero loss mask, so that no spread check sees it. Response-level rewards only (ctu's)."""
    excluded = excluded_rows(output)
    if not any(excluded):
        return dict(output)
    kept: dict[str, list[float]] = defaultdict(list)
    for uid, reward, out in zip(uids, output["rewards"], excluded, strict=True):
        if not out:
            kept[uid].append(float(reward))
    rewards = [sum(kept[uid]) / len(kept[uid]) if out and kept[uid] else (0.0 if out else reward)
               for uid, reward, out in zip(uids, output["rewards"], excluded)]
    return {**output, "rewards": rewards, "loss_masks": zeroed(output["loss_masks"], excluded)}


def zeroed(loss_masks: Sequence[list[int]], rows: Sequence[bool]) -> list[list[int]]:
    """`loss_masks` with the mask of each of `rows` (one flag per trajectory) all 0: nothing of it is trained on."""
    return [[0] * len(mask) if out else mask for mask, out in zip(loss_masks, rows, strict=True)]


def mark_excluded(uids: Sequence[str], excluded: Sequence[bool]) -> list[str]:
    """`uids` with each excluded trajectory's made its own (``<uid>/infra-error/<row>``).

    Raises:
        ValueError: one flag per uid is not given.
    """
    if len(uids) != len(excluded):
        raise ValueError(f"{len(excluded)} exclusion flags for {len(uids)} uids")
    return [f"{uid}{EXCLUDED}{row}" if out else uid for row, (uid, out) in enumerate(zip(uids, excluded))]


def kept_only(output: Mapping[str, Any], uids: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """`output` and `uids` without the excluded trajectories: every list of `output` with one entry per trajectory
    sliced alike (other entries as they are). Both empty when every trajectory is excluded."""
    excluded = excluded_rows(output)
    count = len(excluded)
    rows = [row for row, out in enumerate(excluded) if not out]
    sliced = {key: [value[row] for row in rows] if isinstance(value, list) and len(value) == count else value
              for key, value in output.items()}
    return sliced, [uids[row] for row in rows]
