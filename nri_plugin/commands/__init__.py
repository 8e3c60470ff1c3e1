"""Subcommands of `nri-sla` (`nri_plugin.cli.COMMANDS` names them): each such module has
`add_arguments(parser)` and `main(args)`. The other modules here serve commands alone:
`common` (shared arguments), `config_render` (`nri-sla config`), `containerd_dropin`
(`nri-sla containerd-config`), `hostinstall` (`nri-sla host-hook`)."""
