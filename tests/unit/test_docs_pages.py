"""How the docs tests read a page: who runs each console command, which output belongs to it, and which
parts of a shown line may differ from run to run."""

from __future__ import annotations

from pathlib import Path

from docs_pages import console_commands, console_steps, shape_pattern

PAGE = """\
```console
$ hsub job.sh
Submitted batch job 12
...
bob$ hq -u bob
JOBID USER
admin$ hivebatch controller run --once
root# scripts/slurm-lab status
munged           running
# a comment in the output is output
```

```console
2026-11-24T14:50:34Z controller placed job 12: placed on node1:[0]
```
"""


def test_prompts_name_who_runs_a_command_and_output_stays_in_its_block(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    assert console_steps(page) == [
        ("", "hsub job.sh", ["Submitted batch job 12"]),
        ("bob", "hq -u bob", ["JOBID USER"]),
        ("admin", "hivebatch controller run --once", []),
        (
            "root",
            "scripts/slurm-lab status",
            ["munged           running", "# a comment in the output is output"],
        ),
    ]
    assert console_commands(page) == [("hsub job.sh", ["Submitted batch job 12"])]


def test_a_shown_line_leaves_numbers_and_column_widths_open_but_not_words() -> None:
    pattern = shape_pattern("4037  carol sys R  1    node1:[0] 8G/32G +59m")
    assert pattern.fullmatch("5120 carol sys R 1 node3:[2] 8G/32G +58m")
    assert not pattern.fullmatch("5120 alice sys R 1 node3:[2] 8G/32G +58m")
    assert not pattern.fullmatch("4037  carol sys R  1    node1:[0] 8G/32G +59m extra")
    # a number's sign is open where it leads a column (an excess wait may come out either way), not inside
    # a word or a range
    signed = shape_pattern("nlp\t3\t+0.3\tnode[1-3]")
    assert signed.fullmatch("nlp\t3\t-0.2\tnode[2-4]")
    assert not signed.fullmatch("nlp\t3\t0.2\tnode[2-4]") and not signed.fullmatch("nlp\t3\t+0.2\tnode[2+4]")
    # a job ending after midnight shows its end with the date
    ends = shape_pattern("88    bob   nlp R  4    node1:[0,1] 16:27 17:27 +59m")
    assert ends.fullmatch("53    bob   nlp R  4    node2:[0,1] 23:12 11-25 00:12 +59m")
    assert not ends.fullmatch("53    bob   nlp R  4    node2:[0,1] 23:12 +59m")


def test_a_line_cut_short_matches_whatever_follows() -> None:
    pattern = shape_pattern("error: another controller holds this database (pid 598 on …")
    assert pattern.fullmatch("error: another controller holds this database (pid 7 on build-7 since 10:00)")
    assert not pattern.fullmatch("error: the database is locked")


def test_a_page_shows_a_failure_by_an_error_line_and_a_file_by_cat_of_one_plain_name() -> None:
    from docs_pages import shown_file, shows_error

    assert shows_error(["hsub: error: --gpu-mem 40G is more than one V100 GPU has (32G)"])
    assert shows_error(["error: another controller holds this database"])
    assert not shows_error(["the error: column counts refusals", "Submitted batch job 12"])
    assert shown_file("cat train.sh") == "train.sh"
    assert (
        shown_file("cat infer-*.out") is None and shown_file("cat a b") is None and shown_file("hq") is None
    )
