"""`flash_attn.bert_padding`'s names, for SkyRL's module-level import on machines without CUDA. Never called on the
CPU path (packing is off there); calling one is a configuration error, said so."""


def _unavailable(*args, **kwargs):
    raise RuntimeError("flash-attn is not installed (CPU test run): set trainer.remove_microbatch_padding: false")


pad_input = unpad_input = index_first_axis = _unavailable
