"""Memory sizes, shard mapping, the `sharing:` config section, job environment, gres strings."""

import pytest

from hivebatch.errors import ConfigError, HivebatchError
from hivebatch.sharing import (
    format_mib,
    job_environment,
    parse_mem_mib,
    parse_shard_gres,
    parse_sharing_config,
    sbatch_export_arg,
    shard_rounded_mib,
    shards_for,
    shards_per_gpu,
    slice_gres,
)


@pytest.mark.parametrize(
    ("text", "mib"),
    [("8G", 8192), ("8GiB", 8192), ("8 gb", 8192), ("512M", 512), ("1.5G", 1536), (8138, 8138), ("700", 700)],
)
def test_sizes(text: object, mib: int) -> None:
    assert parse_mem_mib(text) == mib


@pytest.mark.parametrize("bad", ["", "eight", "8X", "-1G", "0", True])
def test_bad_sizes_say_what_to_write(bad: object) -> None:
    with pytest.raises(HivebatchError, match=r"8G|more than 0"):
        parse_mem_mib(bad)


def test_memory_maps_onto_whole_gib_shards_rounding_up() -> None:
    assert shards_for(8192) == 8
    assert shards_for(8138) == 8
    assert shards_for(8193) == 9
    assert shard_rounded_mib(1) == 1024
    assert shards_per_gpu(32768) == 32
    assert shards_per_gpu(32510) == 31  # a partial GiB is not offered by Slurm
    assert [format_mib(x) for x in (8192, 1536, 700, 32768)] == ["8G", "1.5G", "700M", "32G"]


def test_gres_strings_round_trip() -> None:
    assert slice_gres(3, 8) == "shard:g3:8"
    assert parse_shard_gres("gpu:g1:1,shard:g3:8,shard:g5:2") == {3: 8, 5: 2}
    with pytest.raises(ValueError):
        slice_gres(3, 0)


def test_environment_gives_the_limit_and_framework_hints() -> None:
    env = job_environment(8000, 32768)
    assert env["HIVEBATCH_GPU_MEM_MIB"] == "8192"
    assert env["HIVEBATCH_GPU_MEM_FRACTION"] == "0.250"
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.250"
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "garbage_collection_threshold:0.25"
    assert env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    # the fraction never exceeds the slice
    assert float(job_environment(10 * 1024, 3 * 10240 + 1)["HIVEBATCH_GPU_MEM_FRACTION"]) <= 10240 / 30721
    arg = sbatch_export_arg({"A": "1", "B": "x"})
    assert arg == "--export=ALL,A=1,B=x"


def test_sharing_config_defaults_and_full_form() -> None:
    cfg = parse_sharing_config({})
    assert cfg.enabled and not cfg.colocate.enabled and not cfg.mixed("node1")
    cfg = parse_sharing_config(
        {
            "sharing": {
                "allow_mixed_nodes": ["node4"],
                "colocate": {"vcs": ["sys"], "nodes": ["node3"], "headroom_mib": "4G", "max_jobs_per_gpu": 2},
            }
        },
        known_nodes={"node3", "node4"},
        known_vcs={"sys", "cv"},
    )
    assert cfg.mixed("node4") and not cfg.mixed("node3")
    assert cfg.colocate.headroom_mib == 4096 and cfg.colocate.max_jobs_per_gpu == 2
    assert cfg.colocate.allowed("sys", "node1") and cfg.colocate.allowed("cv", "node3")
    assert not cfg.colocate.allowed("cv", "node1")


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"sharing": []}, "must be a mapping"),
        ({"sharing": {"colocat": {}}}, "unknown key 'colocat'"),
        ({"sharing": {"allow_mixed_nodes": "node4"}}, "list of names"),
        ({"sharing": {"allow_mixed_nodes": ["node9"]}}, "unknown node 'node9'"),
        ({"sharing": {"colocate": {"vcs": ["xx"]}}}, "unknown virtual cluster 'xx'"),
        ({"sharing": {"colocate": {"headroom_mib": "lots"}}}, "headroom_mib"),
        ({"sharing": {"colocate": {"max_jobs_per_gpu": 0}}}, "max_jobs_per_gpu"),
        ({"sharing": {"enabled": "yes"}}, "true or false"),
    ],
)
def test_sharing_config_errors_are_one_line(section: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as exc:
        parse_sharing_config(section, known_nodes={"node4"}, known_vcs={"sys"})
    assert "\n" not in str(exc.value)
