"""The real job_submit.lua, run by Lua 5.1 for the fake Slurm: tests submit the way users do and get
what slurmctld would make of the job (request in the admin comment, GPU ask gone, held) or its refusal.

Each call starts ``lua5.1`` with the rendered plugin and a job_desc built from sbatch's options the way
slurmctld 22.05 fills it (unset numbers NO_VAL, GRES as ``gres:NAME[:TYPE]:N``), recorded on the lab.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hivebatch.jobsubmit import job_submit_lua, lua_literal
from hivebatch.testing.fake_slurm.sbatch import min_cpus, size_mb

NO_VAL = 4294967294
NO_VAL16 = 65534
_DRIVER = """
slurm = { SUCCESS = 0, ERROR = -1, ESLURM_ACCESS_DENIED = 2002,
  log_info = function() end, log_error = function() end,
  log_user = function(fmt, ...) io.stderr:write(string.format(fmt, ...), "\\n") end }
HIVEBATCH_SITE = nil
"""
_REPORT = """
local d = JOB_DESC
-- the lab's one partition, default, holding every GPU node (what an --exclusive job reaches)
local names = {}
for n, _ in pairs(HIVEBATCH_SITE.gpu_nodes or {}) do names[#names + 1] = n end
table.sort(names)
local rc = slurm_job_submit(d, {gpu = {name = "gpu", nodes = table.concat(names, ","), flag_default = 1}}, 1000)
io.write("rc=", tostring(rc), "\\n")
for _, k in ipairs({"admin_comment", "priority", "tres_per_job", "tres_per_node", "tres_per_task",
                    "tres_per_socket", "num_tasks", "pn_min_cpus", "min_mem_per_node"}) do
  if d[k] ~= nil then io.write(k, "=", tostring(d[k]), "\\n") end
end
"""


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    message: str
    fields: dict[str, str]


#: where the fake's plugin looks for the controller's files unless told: nowhere a test or a lab
#: controller writes, so a fresh lab file on the same machine never decides a unit test
NO_SLURMCTLD_DIR = Path("/nonexistent/hivebatch-fake-slurmctld")


class LuaJobSubmit:
    """Runs the plugin rendered for one cluster config on a job_desc mapping; ``conf_dir`` is the
    directory it reads the controller's files from (as slurm.conf's, where no config names them)."""

    def __init__(self, config: Mapping[str, Any], conf_dir: Path = NO_SLURMCTLD_DIR) -> None:
        lua = shutil.which("lua5.1")
        if lua is None:
            raise RuntimeError(
                "lua5.1 is not installed (Debian package lua5.1): the fake runs the real plugin"
            )
        self._lua = lua
        self._plugin = job_submit_lua(config, [], conf_dir)

    def __call__(self, desc: Mapping[str, Any]) -> Verdict:
        table = {k: v for k, v in desc.items() if v is not None}
        program = _DRIVER + self._plugin + f"\nJOB_DESC = {lua_literal(table)}\n" + _REPORT
        out = subprocess.run([self._lua, "-"], input=program, capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            raise RuntimeError(f"job_submit.lua crashed: {out.stderr.strip()}")
        fields = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
        return Verdict(fields.pop("rc") == "0", out.stderr.strip(), fields)


def job_desc(
    opts: Mapping[str, str],
    user: str,
    default_account: str | None,
    tres_per_node: str,
    script: str | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """slurmctld's job_desc for the fake's parsed sbatch options (and the job's script and environment)."""
    lo, _, hi = str(opts.get("nodes") or "").partition("-")
    desc: dict[str, Any] = {
        "user_name": user,
        "default_account": default_account,
        "default_qos": "normal",
        "account": opts.get("account"),
        "qos": opts.get("qos"),
        "priority": 0 if opts.get("hold") else NO_VAL,
        "shared": 0 if opts.get("exclusive") else NO_VAL16,
        "min_nodes": int(lo) if lo else NO_VAL,
        "max_nodes": int(hi or lo) if lo else NO_VAL,
        "num_tasks": int(opts["ntasks"]) if opts.get("ntasks") else NO_VAL,
        "min_cpus": min_cpus(opts, int(lo) if lo else 1),
        "ntasks_per_node": int(opts["ntasks_per_node"]) if opts.get("ntasks_per_node") else NO_VAL16,
        "ntasks_per_tres": NO_VAL16,
        "sockets_per_node": NO_VAL16,
        "time_limit": NO_VAL,
        "pn_min_tmp_disk": size_mb(opts["tmp"]) if opts.get("tmp") else NO_VAL,
        "tres_per_node": tres_per_node or None,
        "tres_per_job": f"gres:gpu:{opts['gpus']}" if opts.get("gpus") else None,
        "tres_per_task": f"gres:gpu:{opts['gpus_per_task']}" if opts.get("gpus_per_task") else None,
        "script": script,
        "environment": dict(env) if env else None,
        "begin_time": int(opts["begin_epoch"]) if opts.get("begin_epoch") else 0,
    }
    return desc
