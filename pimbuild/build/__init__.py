"""The build layer: the composed configuration (``config``), the task graph of one build
(``graph``: one doit task per stage artifact, named ``<stage>:<artifact key>``), its runner
(``runner``: doit through its API, never ``sys.argv``) and one build end to end (``driver``:
plan, run, write the run's manifest).
"""
