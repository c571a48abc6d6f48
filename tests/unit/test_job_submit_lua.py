"""The job_submit plugin: its Lua unit tests (busted, Lua 5.1 as slurmctld links) and the rendered file."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from hivebatch.jobsubmit import cli_filter_lua, job_submit_lua, site_table

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "etc" / "hivebatch.example.yaml"


def _lua() -> str:
    lua = shutil.which("lua5.1")
    assert lua, "lua5.1 is missing: install Debian's lua5.1 and lua-busted (scripts/test does)"
    return lua


def test_busted_specs_pass() -> None:
    busted = shutil.which("busted")
    assert busted, "busted is missing: install Debian's lua-busted (scripts/test does)"
    out = subprocess.run(
        [_lua(), busted, "--output=plainTerminal", "tests/lua"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert " 0 failures / 0 errors" in out.stdout


def _run_rendered(path: Path, text: str, probe: str) -> str:
    """What Lua prints running ``probe`` after the rendered file ``text``, written to ``path``."""
    path.write_text(text)
    stub = (
        "slurm = {SUCCESS=0, ERROR=-1, ESLURM_ACCESS_DENIED=2002, log_info=function() end,"
        " log_error=function() end, log_user=function() end}\n"
    )
    out = subprocess.run(
        [_lua(), "-e", f"{stub}dofile({str(path)!r})\n{probe}"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_rendered_plugin_loads_and_knows_the_site(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    probe = (
        "assert(type(slurm_job_submit) == 'function' and type(slurm_job_modify) == 'function')\n"
        "for _, vc in ipairs({'cv', 'nlp', 'sys'}) do io.write(vc, '=', HIVEBATCH_SITE.vcs[vc].gpus, ' ') end\n"
        "io.write(HIVEBATCH_SITE.gpu_types.v100.max_per_node, ' ', tostring(HIVEBATCH_SITE.operator_uids[0]))\n"
        "io.write(' ', (HIVEBATCH_SPREAD.nodes(32, 1, 0, 0, 16, 64000)))\n"
    )
    out = _run_rendered(tmp_path / "job_submit.lua", job_submit_lua(data, []), probe)
    assert out == "cv=12 nlp=16 sys=4 8 true 2"


def test_rendered_cli_filter_holds_the_plugins_spread_rule(tmp_path: Path) -> None:
    # srun's filter asks for the nodes a job's tasks need by the rule the plugin refuses by
    data = yaml.safe_load(EXAMPLE.read_text())
    probe = (
        "HIVEBATCH_CLI_FILTER.node_sizes = function() return {cpus = 16, mem = 64000, fewest = 1, most = 0} end -- the lab's, not sinfo's\n"
        "local set = HIVEBATCH_CLI_FILTER.rewrite_counts(function(n) return ({type='srun', nodes='1-0',"
        " gres='gres:gpu:2', ntasks='16', ['ntasks-per-node']='4'})[n] end, function() return nil end)\n"
        "io.write(set.nodes, ' ', set.gpus, ' ', (HIVEBATCH_SPREAD.nodes(16, 1, 5000, 0, 16, 64000)))\n"
    )
    assert _run_rendered(tmp_path / "cli_filter.lua", cli_filter_lua(data), probe) == "4 8 2"


def test_site_table_names_vcs_and_types_from_the_config() -> None:
    site = site_table(yaml.safe_load(EXAMPLE.read_text()), [])
    # cv: a node cell and a socket cell (one whole node); nlp: two node cells; sys: below node level
    assert site["vcs"] == {
        "cv": {"gpus": 12, "whole_nodes": {"v100": 1}, "node_gpus": {"v100": 8}},
        "nlp": {"gpus": 16, "whole_nodes": {"v100": 2}, "node_gpus": {"v100": 8}},
        "sys": {"gpus": 4, "whole_nodes": {"v100": 0}, "node_gpus": {"v100": 2}},
    }
    assert site["gpu_types"]["v100"]["name"] == "V100"
    assert site["gpu_types"]["v100"]["mem_mib"] == 32768
