"""The task graph: one doit task per stage artifact, named ``<stage>:<artifact key>``.

``stages.plan`` turns a composed config into ``StageTask`` records (what a stage reads, its
config slice, its key, how to produce it); ``runner.execute`` hands them to doit through its
API, never through ``sys.argv``.
"""

from tasks.stages import STAGES, StageTask, plan

__all__ = ["STAGES", "StageTask", "plan"]
