"""A multi-host test bed on one machine (design §11): hosts as Linux network namespaces on a bridge
the harness makes (`netns.Hosts`), partitions made by the kernel with nftables rules inside them
(`nemesis.Nemesis`, its rules from the pure `rules`), latency from a delaying TCP relay in front of a
host's ports (`relay`, placed by `delays` with the pure `delay_rules`), and a Ray node per host
(`ray_nodes.RayOnHosts`).

    with Hosts(3) as hosts, RayOnHosts(hosts) as cluster:
        nemesis = Nemesis(hosts)
        nemesis.partition([[0, 1], [2]])
        ...
        nemesis.heal()

Everything needs root (namespaces, veths, nft); `netns.require_host_tools` says what is missing.
The layout and the rules are pure (no subprocess, no Ray): tests/unit/clients/test_hosts_rules.py and
test_hosts_delay.py; the relay runs on loopback in test_hosts_relay.py.
"""
