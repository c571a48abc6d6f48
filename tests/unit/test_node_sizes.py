"""The node sizes file the controller writes each cycle for the job_submit plugin, which tests a GPU job
against the largest GPU node at submit because Slurm skips that test for the held jobs the plugin
makes (tests/fixtures/slurm/held_job_sizes.txt; the plugin's side: tests/lua/node_sizes_spec.lua)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from controller_support import CONFIG, Env, lua_read, make_env

from hivebatch.controller.context import load_context
from hivebatch.controller.node_sizes import node_figures, node_sizes, node_sizes_lua
from hivebatch.controller.usage import write_usage
from hivebatch.jobsubmit import nodes_file, site_table
from hivebatch.slurm.parse import parse_sinfo_json
from hivebatch.slurm.types import SlurmError, SlurmNode
from hivebatch.testing.lua_job_submit import LuaJobSubmit


def _node(name: str, cpus: int, mem_mb: int) -> SlurmNode:
    return SlurmNode(name, "IDLE", False, list(range(8)), cpus=cpus, mem_mb=mem_mb)


def test_the_largest_figures_per_gpu_type_and_over_all_of_them() -> None:
    nodes = [
        _node("a1", 16, 64000),
        _node("a2", 64, 32000),
        _node("v1", 32, 512000),
        _node("cpu1", 128, 1024000),
    ]
    types = {"a1": "A100", "a2": "A100", "v1": "V100"}  # cpu1 has no GPUs: its size is no GPU job's
    assert node_sizes(node_figures(nodes, types)) == {
        "a100": {"cpus": 64, "mem_mb": 64000},
        "v100": {"cpus": 32, "mem_mb": 512000},
        "any": {"cpus": 64, "mem_mb": 512000},
    }


def test_a_figure_slurm_did_not_report_is_left_out_so_nothing_is_tested_against_it() -> None:
    # a node slurmctld has not heard from yet lists no memory (sinfo shows 0 or nothing)
    assert node_sizes(node_figures([_node("v1", 16, 0)], {"v1": "V100"})) == {
        "v100": {"cpus": 16},
        "any": {"cpus": 16},
    }


def test_the_sizes_of_the_lab_as_sinfo_lists_them(slurm_fixture: Any) -> None:
    nodes = parse_sinfo_json(slurm_fixture("sinfo_mem_held.json"))
    sizes = node_sizes(node_figures(nodes, {n.name: "V100" for n in nodes}))
    # no TmpDisk in the lab's slurm.conf: 0 MB, and Slurm refuses any --tmp (held_job_sizes.txt)
    lab = {"cpus": 16, "mem_mb": 64000, "tmp_mb": 0, "sockets": 2, "cores": 8, "threads": 1}
    assert sizes["v100"] == sizes["any"] == lab


def test_the_most_temporary_disk_where_slurm_reports_it() -> None:
    nodes = [
        dataclasses.replace(_node("a1", 16, 64000), tmp_disk_mb=0),
        dataclasses.replace(_node("a2", 16, 64000), tmp_disk_mb=800000),
        _node("v1", 16, 64000),  # not reported: no figure, nothing tested against it
    ]
    sizes = node_sizes(node_figures(nodes, {"a1": "A100", "a2": "A100", "v1": "V100"}))
    assert sizes["a100"]["tmp_mb"] == sizes["any"]["tmp_mb"] == 800000
    assert "tmp_mb" not in sizes["v100"]
    figures = node_figures(nodes, {"a1": "A100", "v1": "V100"})
    assert figures["a1"]["tmp_mb"] == 0 and "tmp_mb" not in figures["v1"]


def test_each_gpu_nodes_own_figures() -> None:
    nodes = [_node("a1", 16, 64000), _node("cpu1", 128, 1024000)]
    nodes[0] = dataclasses.replace(nodes[0], sockets=2, cores_per_socket=8, threads_per_core=1)
    assert node_figures(nodes, {"a1": "A100"}) == {
        "a1": {"type": "a100", "cpus": 16, "mem_mb": 64000, "sockets": 2, "cores": 8, "threads": 1}
    }


def test_the_file_is_a_data_chunk_lua_reads_back(tmp_path: Path) -> None:
    now = dt.datetime(2026, 11, 28, 21, tzinfo=dt.UTC)
    path = tmp_path / "hivebatch_nodes.lua"
    write_usage(path, node_sizes_lua({"v100": {"cpus": 16, "mem_mb": 64000}, "any": {"cpus": 16}}, now))
    assert lua_read(path, "u.sizes.v100.cpus") == "16"
    assert lua_read(path, "u.sizes.v100.mem_mb") == "64000"
    assert lua_read(path, "u.sizes.any.mem_mb") == "nil"
    assert lua_read(path, "u.written_at") == str(int(now.timestamp()))
    assert path.stat().st_mode & 0o777 == 0o644


def test_the_plugin_reads_it_beside_the_usage_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", "/srv/slurm/etc/slurm.conf")
    assert nodes_file({}) == Path("/srv/slurm/etc/hivebatch_nodes.lua")
    assert nodes_file({}, "/out") == Path("/out/hivebatch_nodes.lua")
    # where the controller cannot write beside slurm.conf, the config's usage_file names its directory
    assert nodes_file({"controller": {"usage_file": "/var/lib/hb/u.lua"}}) == Path(
        "/var/lib/hb/hivebatch_nodes.lua"
    )


@pytest.fixture()
def env(tmp_path: Path) -> Env:
    return make_env(tmp_path, CONFIG)


class _SizedNodes:
    """The fake Slurm with the lab's node sizes (the fake lists none of its own)."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def list_nodes(self) -> list[SlurmNode]:
        return [dataclasses.replace(n, cpus=16, mem_mb=64000) for n in self._backend.list_nodes()]


def test_only_the_controller_serving_slurmctld_writes_it(tmp_path: Path, env: Env) -> None:
    cfg = tmp_path / "hivebatch.yaml"
    assert load_context(cfg).nodes_path is None  # tests and benches leave slurmctld's directory alone
    published = load_context(cfg, publish=True)
    assert published.nodes_path == Path(site_table(published.data, [])["nodes_file"])


def test_each_cycle_writes_the_sizes_slurm_lists(tmp_path: Path, env: Env) -> None:
    env.ctx.nodes_path = tmp_path / "etc" / "hivebatch_nodes.lua"
    env.ctx.nodes_path.parent.mkdir()
    assert env.cycle(_SizedNodes(env.ctl)).ok
    assert lua_read(env.ctx.nodes_path, "u.sizes.v100.cpus") == "16"
    assert lua_read(env.ctx.nodes_path, "u.sizes.any.mem_mb") == "64000"
    # each GPU node's own figures, for the largest within a job's partitions
    assert lua_read(env.ctx.nodes_path, "u.nodes.node3.cpus") == "16"
    assert lua_read(env.ctx.nodes_path, "u.nodes.node3.type") == "v100"
    assert lua_read(env.ctx.nodes_path, "u.nodes.node3.tmp_mb") == "0"  # the fake lists the lab's TmpDisk
    assert lua_read(env.ctx.nodes_path, "u.sizes.v100.threads") == "1"  # and its layout
    first = int(lua_read(env.ctx.nodes_path, "u.written_at"))
    assert abs(first - dt.datetime.now(dt.UTC).timestamp()) < 60


def test_an_unwritable_file_is_logged_once_and_the_cycle_goes_on(
    tmp_path: Path, env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    env.ctx.nodes_path = tmp_path / "missing-dir" / "hivebatch_nodes.lua"
    env.submit("alice", "cv", 1)
    with caplog.at_level(logging.WARNING, logger="hivebatch.controller"):
        report = env.cycle(_SizedNodes(env.ctl))
        again = env.cycle(_SizedNodes(env.ctl))
    assert report.ok and report.placed == 1 and again.ok
    warned = [r for r in caplog.records if "cannot write the node sizes file" in r.getMessage()]
    assert len(warned) == 1  # not once a cycle: the plugin only stops checking sizes at submit


def test_a_job_asking_more_temporary_disk_than_any_node_has_is_rejected_with_the_reason(env: Env) -> None:
    # with no sizes file the plugin lets it through (as with -H); the controller reads sinfo's TmpDisk
    jid = env.submit("alice", "cv", 1, extra=["--tmp=1G"])
    env.cycle()
    job = env.job(jid)
    assert job.state == "rejected"
    assert "node1: has 0 MB temporary disk, the job needs 1024 (--tmp)" in (job.reason or "")
    assert env.slurm.job(jid).state == "PENDING"  # left for its owner to cancel, as Slurm would keep it


def test_the_plugin_follows_the_controllers_vcs_without_being_written_again(tmp_path: Path) -> None:
    # the admin added sys to the config and the controller runs on it; the plugin slurmctld loads was
    # written before, when the VCs were cv and nlp alone
    etc = tmp_path / "etc"
    etc.mkdir()
    old = yaml.safe_load(CONFIG)
    del old["virtual_clusters"]["sys"]
    env = make_env(tmp_path, CONFIG, job_submit=LuaJobSubmit(old, etc))
    env.ctx.nodes_path = nodes_file(env.ctx.data, etc)
    with pytest.raises(SlurmError, match=r"'sys' is not a virtual cluster of hivebatch \(VCs: cv, nlp\)"):
        env.submit("carol", "sys", 2)
    assert env.cycle(_SizedNodes(env.ctl)).ok
    assert lua_read(env.ctx.nodes_path, "u.site.vc_list") == "cv, nlp, sys"
    assert lua_read(env.ctx.nodes_path, "u.site.vcs.sys.gpus") == "4"
    jid = env.submit("carol", "sys", 2)
    assert env.cycle(_SizedNodes(env.ctl)).placed == 1
    assert env.job(jid).vc_name == "sys"
    # sys's 4 GPUs, not the cluster's: the controller's sizes count too
    with pytest.raises(SlurmError, match="6 GPUs asked, but virtual cluster sys has 4"):
        env.submit("carol", "sys", 6)
