"""Drafters: ESP and the training-free baselines, all behind esp.decoding.drafter.Drafter."""
