"""Built-in components, one subpackage per kind: each kind's contract in its `base` module (declared to the
registry when the subpackage is imported), its components beside it, registered by ctu's entry points
(``[project.entry-points.ctu_<kind>]`` in pyproject.toml).

Every module here must import without torch, ray, skyrl or tau2: `ctu validate` imports them all (the registry
loads every entry point at its first lookup, `ctu.registry.populate_registry`). Heavy imports go inside the
methods that need them.
"""
