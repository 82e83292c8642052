"""The end-to-end tests use the shared Ray fixtures of tests/conftest.py; the real RocketMQ client
runs in its own process through clients/interop/real_client.py."""
