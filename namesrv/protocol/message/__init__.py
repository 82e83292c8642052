"""Messages in RocketMQ's own forms (RocketMQ's common/message): the binary codec, the client-side
decoder and message properties."""
