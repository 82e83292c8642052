"""Admin: RocketMQ's DefaultMQAdminExt over TCP or Ray (`client`, `transport`, `tcp`, `brokers`,
`messages`, `controller`). The mqadmin verbs that use it are `namesrv` subcommands in
`clients.cli.mqadmin`."""
