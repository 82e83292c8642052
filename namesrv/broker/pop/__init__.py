"""Pop consumption (RocketMQ 5's broker/pop: POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME):
its processor and invisibility index go here."""
