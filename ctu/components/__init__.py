"""Built-in components, one subpackage per kind. Importing a subpackage registers its components.

Every module here must import without torch, ray, skyrl or tau2: `ctu validate` imports them all
(through `ctu.registry.populate_registry`). Heavy imports go inside the methods that need them.
"""
