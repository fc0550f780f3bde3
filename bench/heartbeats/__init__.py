"""The master under heartbeat load, whole and in parts.

* :mod:`.bench_heartbeats`: the load harness: the production master in its own process under
  C containers x K operators of simulated agents over real gRPC (run it);
* :mod:`.profile_heartbeats`: the master's heartbeat path (state and journal) in one process,
  CPU per heartbeat without gRPC or agents (run it);
* :mod:`.bench_umbilical`: the master's gRPC server alone, answering at once: the transport's
  share of a heartbeat (run it);
* :mod:`.heartbeat_master`: the harness's master side (progress, adoption, restarts, the CLI);
* :mod:`.heartbeat_wire`: the simulated containers and their heartbeats, written straight to
  protobuf's wire format;
* :mod:`.heartbeat_report`: the harness's report and the steady state's slow seconds;
* :mod:`.heartbeat_ops`: the operators of the harness's application (planned, never run).
"""
