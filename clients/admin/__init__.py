"""Admin: RocketMQ's DefaultMQAdminExt over TCP or Ray (`client`, `transport`, `tcp`, `brokers`,
`messages`, `controller`) and the mqadmin verbs (`command/`)."""
