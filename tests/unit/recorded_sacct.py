"""The sacct outputs recorded before JobName became the last column (tests/fixtures/slurm/sacct*.txt but
sacct_user_text.txt), and the same rows as sacct prints them for the CLI backend's own command."""

from __future__ import annotations

#: their columns, "|"-separated; Comment, the last, was the only one that could hold a "|"
RECORDED_FIELDS = (
    "JobID", "JobIDRaw", "JobName", "User", "Account", "QOS", "State", "Submit", "Start", "End", "ElapsedRaw",
    "NodeList", "AllocTRES", "ExitCode", "AdminComment", "Comment",
)  # fmt: skip


def as_printed_for(argv: list[str], recorded: str) -> str:
    """The recorded rows with the columns and delimiter ``argv`` (a ``CliBackend.history`` command) asks for."""
    delimiter = next(a.split("=", 1)[1] for a in argv if a.startswith("--delimiter="))
    fields = argv[argv.index("-o") + 1].split(",")
    lines = []
    for line in recorded.splitlines():
        parts = line.split("|", len(RECORDED_FIELDS) - 1)
        if len(parts) < len(RECORDED_FIELDS):  # the files' own comment lines
            continue
        row = dict(zip(RECORDED_FIELDS, parts, strict=True))
        lines.append(delimiter.join(row[f] for f in fields))
    return "\n".join(lines) + "\n"
