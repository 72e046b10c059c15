"""Task sets as data: checking them (`check`), verifying proposed tasks (`verify`), generating (`generate`) and
calibrating (`calibrate`) them. Every module here imports tau2, quietly and offline (`tau_bench_env.runtime`)."""

from tau_bench_env.runtime import prepare

prepare()
