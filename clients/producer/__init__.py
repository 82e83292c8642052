"""Producers (RocketMQ's DefaultMQProducer and TransactionMQProducer) and a producer as a Ray actor."""
