"""Decoding: the loop (engine), the drafter interface, block layouts and masks, the verifier, the KV commit."""
