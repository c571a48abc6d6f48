"""``hadmin``: the administrator's commands."""
