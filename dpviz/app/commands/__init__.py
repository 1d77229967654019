"""CLI subcommands, one module each; `dpviz.app.cli` finds them here."""
