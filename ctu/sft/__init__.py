"""Supervised fine-tuning data for the warm start before GRPO (`data`: `ctu data sft`). Its modules import tau2,
quietly and offline (`tau_bench_env.runtime`)."""

from tau_bench_env.runtime import prepare

prepare()
