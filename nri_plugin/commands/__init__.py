"""Subcommands of `nri-sla`: each module has `add_arguments(parser)` and `main(args)`."""
