"""The serving systems the GPU target compares on a device set: the device sets themselves
(``devicesets``: pairs, the first of a kind, twins), their closed forms (``closedform``: request
distribution, PD, AF, pipeline splits, ``tp``: AF with TP attention, ``pipeline``: splits by
layers), the baselines a placement is reported against (``baselines``), the planned and
monitored systems (``serving_systems``) and the discrete-event serving simulation
(``serving`` on the ``engine``, with the request ``arrivals``)."""
