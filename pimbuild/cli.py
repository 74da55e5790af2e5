"""The ``pimbuild`` command: a Hydra app around ``pimbuild.build.build``."""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig
from rich.markup import escape

from pimbuild.config import register_configs
from pimbuild.console import error
from pimbuild.errors import PimbuildError

CONFIG_MODULE = "pimbuild.conf"  # the config tree ships with the package (conf/ in the repo)
register_configs()


@hydra.main(version_base="1.3", config_path=f"pkg://{CONFIG_MODULE}", config_name="config")
def app(cfg: DictConfig) -> None:
    from pimbuild.build import build  # heavy imports (torch) after Hydra parsed the overrides

    try:
        build(cfg, Path(HydraConfig.get().runtime.output_dir))
    except PimbuildError as e:
        error(escape(str(e)))
        sys.exit(1)
    except KeyboardInterrupt:
        error("interrupted: artifacts published so far are kept, nothing half-written is")
        sys.exit(130)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
