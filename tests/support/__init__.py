"""The one home of the harnesses tests share: a broker or NameServer core wired for a test, the
producer's fake transport, servers with ACL on, a small tmpfs, a local Ray and its deployments.
Waiting on state that has no event is `namesrv.common.waiting`, the project's one poll helper."""
