"""Where the Jinja2 templates (``hivebatch/templates/``, inside the package) are found."""

from __future__ import annotations

import os
from pathlib import Path

TEMPLATE_ENV = "HIVEBATCH_TEMPLATES"


def template_dir() -> Path:
    """$HIVEBATCH_TEMPLATES (a site's own templates), else the package's."""
    explicit = os.environ.get(TEMPLATE_ENV)
    if explicit:
        return Path(explicit)
    return Path(__file__).resolve().parent / "templates"
