"""Task generators: propose training tasks for a domain (`ctu tasks generate`); `ctu.tasks.verify` decides which
are kept. A generator of one's own implements `base.TaskGenerator` and registers like any component (`ctu.registry`)."""

from ctu.components.task_generators.base import TaskGenerator

__all__ = ["TaskGenerator"]
