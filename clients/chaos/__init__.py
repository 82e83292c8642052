"""The chaos harness: break brokers and NameServers on a seeded timeline while producers send, then
check that nothing acknowledged was lost, that routes followed every fault within its bound, and that
the run left nothing behind. One job per module:

- `schema`: fault kinds, the output directory's files and their Parquet schemas (the contract with
  the Spark analysis);
- `plan`: `ChaosConfig`, the timing bounds, the fault plan from a seeded RNG;
- `driver`: `ChaosDriver` makes the faults (kills, signals, restarts) and records them;
- `observe`: route observer, removal log, route-snapshot collector, producers' records;
- `invariants`: per-fault detection / recovery measurements and the invariant checks (1-4, with 3a-3d);
- `summary`: the per-fault summary table (shared with the analysis);
- `report`: `ChaosReport`, its Parquet files and text;
- `run`: `run_chaos`, the orchestration;
- `cli`: `namesrv chaos`.

Nothing is imported here, so `clients.chaos.schema` stays light for the analysis.
"""
