"""One GPU's kernel times for callers outside the build: a catalogue device's specs, its
measured grid (``grid``) where the shipped data hold the shape, the fitted model elsewhere,
as ``gpus.backend=auto`` does inside the build."""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from pimbuild.core.errors import ConfigError
from pimbuild.core.schema import check
from pimbuild.targets.gpus.config import DeviceFile
from pimbuild.targets.gpus.kerneltime import grid, model, ops, sources


def catalogue_gpu(name: str, config_dir: Path | None
                  ) -> tuple[ops.Gpu, dict[str, Any], str | None]:
    """A device of the catalogue (``pimbuild/conf/device/<name>.yaml``, or the user's
    ``--config-dir``'s ``device/<name>.yaml``) or a measured GPU (``devices.csv``): its
    specs, its whole device file (empty for a measured GPU) and its name in the shipped
    measured data (None: not measured)."""
    catalogue = Path(str(importlib.resources.files("pimbuild.conf").joinpath("device")))
    for folder in ([config_dir / "device"] if config_dir else []) + [catalogue]:
        path = folder / f"{name}.yaml"
        if path.is_file():
            try:
                spec = OmegaConf.to_container(OmegaConf.load(path))
            except Exception as e:  # a YAML syntax error: one line, not a parser traceback
                raise ConfigError(f"cannot read device file {path}: "
                                  f"{str(e).splitlines()[0]}") from None
            if not isinstance(spec, dict):
                raise ConfigError(f"device file {path} is not a mapping of fields")
            spec.pop("defaults", None)
            check(DeviceFile, spec, f"device file {path}")
            return ops.gpu_of(spec), spec, spec.get("measured_as")
    measured = sources.devices()
    if name in measured:
        return measured[name], {}, name
    known = sorted(p.stem for p in catalogue.glob("*.yaml")) + sorted(measured)
    raise ConfigError(f"unknown device '{name}' (choices: {', '.join(known)})")


def measured_grid(name: str | None) -> grid.Grid | None:
    """The measured grid of the GPU the shipped data call ``name``, if they hold it."""
    return grid.load([name]).get(name) if name else None


class Clock:
    """Seconds per op on one GPU, cached: measured or interpolated (raised to the cold-cache
    floor) where the grid says, else the fitted model's; ``how`` counts each."""

    def __init__(self, gpu: ops.Gpu, held: grid.Grid | None, fitted: model.KernelModel):
        self.gpu, self.held, self.fitted = gpu, held, fitted
        self.cache: dict[ops.Op, float] = {}
        self.ready: dict[ops.Op, tuple[float, str]] = {}  # prefetched, not used yet
        self.how: dict[str, int] = {}

    def seconds(self, o: ops.Op) -> float:
        t = self.cache.get(o)
        if t is None:
            if o not in self.ready:
                self.prefetch([o])
            t, how = self.ready.pop(o)
            self.cache[o] = t
            self.how[how] = self.how.get(how, 0) + 1
        return t

    def prefetch(self, found: list[ops.Op]) -> None:
        """Time every op of ``found`` not timed yet, the fitted model's in one call (a call
        costs about as much as a hundred rows); ``how`` counts an op when it is first used."""
        todo = []
        for o in dict.fromkeys(found):
            if o in self.cache or o in self.ready:
                continue
            hit = self.held.lookup(o) if self.held else None
            if hit:
                self.ready[o] = (self.held.cold(o, hit[0]), hit[1])
            else:
                todo.append(o)
        if todo:
            for o, t in zip(todo, self.fitted.predict(todo, [self.gpu] * len(todo)),
                            strict=True):
                self.ready[o] = (float(t), "predicted")


def clock(name: str, config_dir: Path | None = None,
          model_path: Path | None = None) -> tuple[Clock, dict[str, Any]]:
    """The Clock of catalogue device ``name`` and its device file."""
    gpu, spec, measured_as = catalogue_gpu(name, config_dir)
    return Clock(gpu, measured_grid(measured_as), model.load(model_path)), spec
