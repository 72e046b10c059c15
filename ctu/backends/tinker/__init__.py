"""The `tinker` backend: a client-side GRPO loop over the Tinker API (`runner`; GRPO's arithmetic is
`ctu.runners.grpo`), sampling through a Tinker `SamplingClient` (`sampler`), and SkyRL's Tinker API server with
its JAX backend started on this machine when the spec asks (`server`). Importing this package imports neither
tinker nor JAX.
"""
