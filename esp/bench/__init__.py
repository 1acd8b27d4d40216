"""Measuring: the Spec-Bench protocol (run), its subcommands (commands: report, table, merge, model-size, verdict,
costs, first-call), the lossless verdict, the oracle, engine overhead, sharding, what-if; every result with its
provenance."""
