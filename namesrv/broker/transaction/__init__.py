"""Transactional messages (RocketMQ's broker/transaction): half messages, op records and check-back."""
