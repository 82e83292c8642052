"""RocketMQ's mqadmin verbs (RocketMQ's tools/command) as `namesrv` subcommands, each verb's options
beside its handler."""
