"""The broker's request processors (RocketMQ's broker/processor): one handler table, one processor per
family of request codes."""
