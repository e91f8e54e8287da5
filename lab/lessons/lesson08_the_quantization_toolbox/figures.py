"""Lesson 08's figures shown as one PNG each, drawn once.

The notebook's inline backend shows a figure with ``bbox_inches="tight"``: it draws the whole figure once to
measure it, measures every artist again, then draws it a second time for the picture. Lesson 08's figures
place their axes by margins in inches, so there is nothing to crop: ``shown`` draws the figure once into a PNG
at its own size and dpi (what the inline backend would show, without the crop) and closes it, so the backend
does not show it a second time at the end of the cell. About half of each figure's time in the kernel.
"""
from __future__ import annotations

import io


def shown(fig):
    """``fig`` rendered once as a PNG (an ``IPython.display.Image``, shown by ``display`` or as a cell's last
    value); the figure is closed, so pyplot does not show it again."""
    import matplotlib.pyplot as plt  # deferred: 1.8 s to import (python -X importtime); only figures need it
    from IPython.display import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", facecolor=fig.get_facecolor(), edgecolor=fig.get_edgecolor())
    plt.close(fig)
    return Image(buffer.getvalue(), format="png")
