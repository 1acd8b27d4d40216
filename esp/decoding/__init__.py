"""Decoding: the loop (engine, batch), the drafter interface and its step records, block layouts and masks, the
verifier, the step traces."""
