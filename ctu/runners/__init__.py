"""Runners: what every backend shares: the `Backend` interface and the commands that reach a backend only through
it (`ctu run`, `ctu eval`'s policies), the run directory, GRPO's arithmetic, the console and the watchdogs. The
built-in backends themselves are `ctu.backends.skyrl` and `ctu.backends.tinker`."""
