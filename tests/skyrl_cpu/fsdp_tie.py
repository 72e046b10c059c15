"""One rank of SkyRL's FSDP2 strategy on CPU with a tiny Qwen3: init, two training steps, what became of a tied
model's tie, and how far a sampler serving the trained weights is from the trainer after each step. Test support for
tests/runners/test_skyrl_tied_embeddings.py, never shipped.

Run: `python -m tests.skyrl_cpu.fsdp_tie RANK WORLD_SIZE PORT OUT.json [--no-fix] [--untied]`, one process per rank.
`--no-fix`: ctu's tie fix is not installed (the tie broken on purpose, as SkyRL 0.4.0 alone leaves it). `--untied`:
an untied copy of the same model (its output projection a copy of its embedding), the bound on-policy training gives.

Writes, from every rank: whether ``lm_head.weight`` is the embedding's parameter after init and after the steps, and
the optimizer's parameter count; from rank 0: the largest difference between the full state dict's output projection
and embedding after the last step, and `ctu.runners.grpo.logprob_gap` of a sampler against the trainer on a fixed
sequence after each step (``logprob_gap_means``, one per step). The sampler is the trained full state dict loaded as vLLM loads it: for a config that ties
the embeddings, every ``lm_head.*`` weight skipped (vLLM 0.30's `AutoWeightsLoader(skip_prefixes=["lm_head."])`) and
the embedding used as the head; transformers stands in for vLLM here (its CPU server takes minutes to start).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

VOCAB = 128
LR = 3e-2
"""One step at this learning rate moves a head trained apart from its embedding visibly."""
STEPS = 2
"""Optimizer steps, each followed by the sampler-trainer comparison (a GRPO run's weight sync after each step)."""


def main() -> None:
    rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    tied = "--untied" not in sys.argv
    from tests.skyrl_cpu.shim import install as cpu

    logging.basicConfig(level=logging.INFO, stream=sys.stdout)
    cpu()
    if "--no-fix" not in sys.argv:
        from ctu.backends.skyrl import tied_embeddings

        tied_embeddings.install()
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM, Qwen3Config

    from ctu.runners.grpo import LOGPROB_GAP_MEAN, logprob_gap

    empty = torch.empty  # SkyRL's buffer broadcast allocates on "cuda" on ranks past 0 (the shim covers rank 0's)
    torch.empty = lambda *args, device=None, **kwargs: empty(*args, device="cpu" if device == "cuda" else device, **kwargs)
    dist.init_process_group(backend="gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    from skyrl.backends.skyrl_train.distributed.fsdp_strategy import FSDPStrategy
    from skyrl.backends.skyrl_train.distributed.fsdp_utils import fsdp2_get_full_state_dict
    from skyrl.train.config import FSDPConfig, OptimizerConfig

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=32, tie_word_embeddings=tied)
    model = AutoModelForCausalLM.from_config(config)
    if not tied:  # the same weights as the tied model, the head a copy
        with torch.no_grad():
            model.lm_head.weight.copy_(model.model.embed_tokens.weight)
    strategy = FSDPStrategy(FSDPConfig(), OptimizerConfig(lr=LR, max_grad_norm=1.0), num_training_steps=2)
    strategy.setup_distributed()
    model, optimizer, scheduler = strategy.prepare((model, None, None))
    tied_after_init = model.lm_head.weight is model.model.embed_tokens.weight
    sequence = torch.randint(0, VOCAB, (1, 24), generator=torch.Generator().manual_seed(99))
    gaps: list[float] = []
    for step in range(STEPS):
        ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(rank + world * step))
        loss = torch.nn.functional.cross_entropy(model(input_ids=ids).logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        loss.backward()
        strategy.optimizer_step(optimizer, model, scheduler)
        with torch.no_grad():
            trainer = torch.log_softmax(model(input_ids=sequence).logits.float()[0, :-1], -1).gather(-1, sequence[0, 1:, None])[:, 0]
        state = fsdp2_get_full_state_dict(model, cpu_offload=True, rank0_only=True)  # every rank takes part
        if rank == 0:
            sampler = AutoModelForCausalLM.from_config(config).float()
            served = {name: tensor.float() for name, tensor in state.items() if not (tied and name.startswith("lm_head."))}
            sampler.load_state_dict(served, strict=False)
            if tied:
                sampler.tie_weights()
            with torch.no_grad():
                sampled = torch.log_softmax(sampler(input_ids=sequence).logits[0, :-1], -1).gather(-1, sequence[0, 1:, None])[:, 0]
            gaps.append(logprob_gap(sampled.tolist(), trainer.tolist(), 0.5)[LOGPROB_GAP_MEAN])
    tied_after_step = model.lm_head.weight is model.model.embed_tokens.weight
    report = {"rank": rank, "tied_after_init": tied_after_init, "tied_after_step": tied_after_step,
              "optimizer_params": sum(len(group["params"]) for group in optimizer.param_groups)}
    if rank == 0:
        report["head_minus_embedding_max"] = float((state["lm_head.weight"].float() - state["model.embed_tokens.weight"].float()).abs().max())
        report["logprob_gap_means"] = gaps
    out.write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()
    # Leave without running C++ static destructors: a gloo rank exiting normally was seen to abort in CI
    # ("terminate called without an active exception") after its report was written and the group destroyed.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
