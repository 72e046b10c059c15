"""vLLM's CPU worker, its tied output projection refreshed after each weight reload: test support for SkyRL's real
trainer on CPU (`backend_cpu.yaml`'s ``worker_cls``), never shipped.

vLLM's CPU build packs each embedding's weight for oneDNN once it is loaded (`UnquantizedEmbeddingMethod.
process_weights_after_loading` -> `dispatch_cpu_unquantized_gemm`, vLLM 0.30), and a tied model's output projection
computes its logits from that packed copy. `reload_weights` re-processes only the layers whose weights it loaded, and
a tied head loads none of its own (vLLM skips ``lm_head.*`` and shares the embedding's parameter): the head keeps the
weights of the first load while the embedding moves on, so the sampler serves another policy than the one trained.
On a GPU the head reads the shared weight itself (no packed copy) and stays in step. Here every embedding layer is
packed again after a reload, which is what a GPU's vLLM serves.
"""

from __future__ import annotations

from typing import Any

from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod
from vllm.v1.worker.cpu_worker import CPUWorker as VllmCPUWorker


class CPUWorker(VllmCPUWorker):
    """vLLM's CPU worker whose `reload_weights` packs every embedding layer again afterwards (the module docstring)."""

    def reload_weights(self, *args: Any, **kwargs: Any) -> None:
        super().reload_weights(*args, **kwargs)
        for module in self.model_runner.get_model().modules():
            method = getattr(module, "quant_method", None)
            if isinstance(method, UnquantizedEmbeddingMethod):
                method.process_weights_after_loading(module)
