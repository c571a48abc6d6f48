"""``hivebatch``: cells, model, controller, simulate and db subcommands."""
