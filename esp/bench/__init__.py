"""Measuring: the Spec-Bench protocol (run), the lossless verdict, the oracle, engine overhead, sharding, what-if."""
