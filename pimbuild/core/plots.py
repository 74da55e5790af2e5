"""matplotlib without a display (the Agg backend), and saving a figure: what every report's
plots share. Heavy (matplotlib): imported inside the functions that plot."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plt", "save_figure"]


DPI = 120


def save_figure(fig, path: Path) -> None:
    """Laid out and drawn at the resolution it is saved at, so its text is measured once."""
    fig.set_dpi(DPI)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
