"""A stand-in for the `flash_attn` package on machines without CUDA (test support; see `tests/skyrl_cpu/shim.py`).

SkyRL's FSDP model wrapper imports `flash_attn.bert_padding` at module scope; with `trainer.flash_attn: false` and
`trainer.remove_microbatch_padding: false` (as the CPU runs set them) nothing calls into it.
"""
