"""Where the Jinja2 templates (``templates/`` at the project's top level) are found."""

from __future__ import annotations

import os
import sys
from pathlib import Path

TEMPLATE_ENV = "HIVEBATCH_TEMPLATES"


def template_dir() -> Path:
    """$HIVEBATCH_TEMPLATES; else ``templates/`` next to the package (a checkout or editable install);
    else the copy a wheel install puts under ``<prefix>/share/hivebatch/templates``."""
    explicit = os.environ.get(TEMPLATE_ENV)
    if explicit:
        return Path(explicit)
    beside = Path(__file__).resolve().parents[1] / "templates"
    installed = Path(sys.prefix) / "share" / "hivebatch" / "templates"
    return beside if beside.is_dir() or not installed.is_dir() else installed
