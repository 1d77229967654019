"""CLI subcommands, one module each; `dpviz.cli` finds them here."""
