"""SkyRL's checkpoints in a run directory: the newest one's step, a resume from an epoch's last batch made to train
the next epoch (SkyRL 0.4.0 on its own trains nothing more there), and old ones removed without a Ray task on a
single node (`SingleNodeCleanup`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def latest_checkpoint_step(run_dir: Path) -> int | None:
    """The global step of the newest checkpoint SkyRL saved in `run_dir` (None if none)."""
    marker = Path(run_dir) / "checkpoints" / "latest_ckpt_global_step.txt"
    return int(marker.read_text().strip()) if marker.exists() else None


def batches_yielded(state: Mapping[str, Any]) -> int:
    """Batches a torchdata `StatefulDataLoader` (SkyRL's training dataloader) had handed out in its current epoch
    when `state` (its ``state_dict()``) was taken: ``_num_yielded`` without worker processes, the snapshot's step
    with them (both count from 0 at each epoch's start, torchdata 0.11).

    Raises:
        KeyError: `state` is of neither shape.
    """
    return int(state["_num_yielded"] if "_num_yielded" in state else state["_snapshot"]["_snapshot_step"])


def restart_finished_epoch(run_dir: Path, step: int, train_data: Path, batch_size: int) -> bool:
    """Make a resume from the last batch of an epoch train the next epoch; returns whether it had to.

    SkyRL 0.4.0 restores its training dataloader's position from the checkpoint (``data.pt``); restored right
    after an epoch's last batch, the dataloader finishes that exhausted epoch while the trainer has moved on to
    the next, so the next epoch trains nothing and the run ends early (seen on CPU runs of its trainer). Without
    ``data.pt`` SkyRL starts the dataloader afresh, which at an epoch boundary is the next epoch's start; the file
    is kept as ``data.pt.epoch_end``. The next epoch then visits the tasks in the first epoch's order (SkyRL
    seeds the shuffle per dataloader, not per epoch), where an uninterrupted run would reshuffle. The position is
    the dataloader's own (`batches_yielded`), not the step's: dynamic sampling draws several batches a step.
    """
    import pyarrow.parquet as pq
    import torch

    batches_per_epoch = pq.ParquetFile(train_data).metadata.num_rows // batch_size  # SkyRL drops the last short batch
    state = Path(run_dir) / "checkpoints" / f"global_step_{step}" / "data.pt"
    if batches_per_epoch == 0 or not state.exists():
        return False
    if batches_yielded(torch.load(state, weights_only=True)) < batches_per_epoch:
        return False
    state.replace(state.with_name("data.pt.epoch_end"))
    return True


class SingleNodeCleanup:
    """A mixin before SkyRL's `RayPPOTrainer` (in ctu's `CtuTraining`): its removal of old checkpoints without a
    Ray task where every worker is on the driver's node."""

    def _cleanup_old_checkpoints(self) -> None:
        """SkyRL's removal of checkpoints past ``trainer.max_ckpts_to_keep`` after a save, run here when every
        worker is on this process's node. SkyRL 0.4.0 (`RayPPOTrainer._cleanup_old_checkpoints`) runs it as a Ray
        task on each worker's node and then here again: on a single node the task is a second, redundant pass that
        costs a new Ray worker process importing SkyRL: 18.6 s of a 19.2 s save on two CPU cores (SkyRL's
        ``timing/cleanup_old_checkpoints``, the chain check's GRPO run). Several nodes: SkyRL's."""
        import ray
        from skyrl.train.utils.trainer_utils import cleanup_old_checkpoints

        if not self._node_ids:
            self._node_ids = self.dispatch.get_node_ids()
        if set(self._node_ids) <= {ray.get_runtime_context().get_node_id()}:
            cleanup_old_checkpoints(self.cfg.trainer.ckpt_path, self.cfg.trainer.max_ckpts_to_keep)
        else:
            super()._cleanup_old_checkpoints()  # type: ignore[misc]

    # what the mixin reads of the SkyRL trainer it is mixed into
    cfg: Any
    dispatch: Any
    _node_ids: list[str] | None
