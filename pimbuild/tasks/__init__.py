"""The task graph: one doit task per stage artifact, named ``<stage>:<artifact key>``.

``graph.plan`` derives the tasks from the stage modules (``pimbuild.<stage>``: what each reads,
its params, its key); ``runner.execute`` hands them to doit through its API, never through
``sys.argv``. Installed as ``pimbuild.tasks``.
"""

from pimbuild.tasks.graph import STAGES, StageTask, plan, stage_module

__all__ = ["STAGES", "StageTask", "plan", "stage_module"]
