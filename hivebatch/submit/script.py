"""The job script hsub submits: ``templates/job.sh.j2`` wrapped around the user's script.

The user's script travels verbatim inside a quoted here-document (no expansion), and every other
value the user typed is put through ``shlex.quote`` (the ``q`` filter), so nothing reaches a shell
unquoted.
"""

from __future__ import annotations

import shlex

from hivebatch import __version__
from hivebatch.errors import HivebatchError
from hivebatch.template_files import TEMPLATE_ENV, template_dir

TEMPLATE_NAME = "job.sh.j2"


def heredoc_delimiter(script: str) -> str:
    """A here-document end marker that no line of the script equals."""
    lines = set(script.splitlines())
    base = "HIVEBATCH_SCRIPT_END"
    candidate, n = base, 0
    while candidate in lines:
        n += 1
        candidate = f"{base}_{n}"
    return candidate


def render_job_script(
    script: str,
    args: list[str],
    vc: str,
    qos: str,
    gpu_mem_mib: int | None = None,
    job_env: dict[str, str] | None = None,
) -> str:
    import jinja2  # only when a script is really generated

    directory = template_dir()
    if not (directory / TEMPLATE_NAME).is_file():
        raise HivebatchError(f"job template {directory / TEMPLATE_NAME} is missing (set {TEMPLATE_ENV})")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(directory)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # a shell script: quoting is done by the q filter, not HTML escaping
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    body = script[:-1] if script.endswith("\n") else script
    return env.get_template(TEMPLATE_NAME).render(
        version=__version__,
        script=body,
        delimiter=heredoc_delimiter(body),
        args=args,
        vc=vc,
        qos=qos,
        gpu_mem_mib=gpu_mem_mib,
        job_env=dict(sorted((job_env or {}).items())),
    )
