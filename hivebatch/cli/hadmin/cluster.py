"""``hadmin cluster``: the node × GPU map now, coloured per VC, with bad nodes and fragmentation."""

from __future__ import annotations

import json

import click

from hivebatch.cli.common import config_option


@click.command()
@config_option
@click.option("--no-slurm", is_flag=True, help="show only the controller's last picture; do not ask Slurm")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="output format")  # fmt: skip
def cluster(config: str | None, no_slurm: bool, fmt: str) -> None:
    """Show every node's GPUs: which VC and job hold them, opportunistic and foreign work, bad nodes.

    Gaps mark cell boundaries (│ or | a PCIe switch, ┃ or || a socket); the summary says where free GPUs are
    fragmented (free GPUs on partly used nodes cannot serve whole-node jobs) and which reservations are set.
    """
    from hivebatch.reports.load import cluster_map, live_reservations, load_report_data
    from hivebatch.reports.mapview import map_dict, print_map, reservation_lines
    from hivebatch.reports.timeutil import fmt_time

    data = load_report_data(config, with_jobs=True)
    cmap, source = cluster_map(data, use_slurm=not no_slurm)
    reservations = [] if no_slurm else live_reservations()
    if fmt == "json":
        payload = map_dict(cmap)
        payload["source"] = source
        payload["taken_at"] = data.slots_taken_at.isoformat() if data.slots_taken_at else None
        payload["reservations"] = [
            {"name": r.name, "nodes": list(r.nodes), "start": r.start.isoformat(), "end": r.end.isoformat()}
            for r in reservations
        ]
        click.echo(json.dumps(payload, indent=2))
        return
    when = f" as of {fmt_time(data.slots_taken_at)} UTC" if data.slots_taken_at else ""
    print_map(cmap, f"Cluster GPUs{when} ({source})", [v.name for v in data.vcs])
    for line in reservation_lines(reservations):
        click.echo(line)
