"""The core layer: what every other layer may use and which uses none of them.

``stage`` (the stage protocol and the types stages share), ``artifacts`` (the content-addressed
store), ``registry`` (plug-ins by name), ``schema`` (the one validator of input files),
``errors``, ``console``, ``check`` (outputs against eager), ``milp`` (HiGHS models) and
``plots``.
"""
