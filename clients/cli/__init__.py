"""The `namesrv` command: the entry point, what subcommands share, and the deploy, top, demo and
scenario subcommands."""
