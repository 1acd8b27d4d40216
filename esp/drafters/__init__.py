"""Drafters: ESP and the training-free baselines, all behind `Drafter`."""
from .base import Context, Drafter, Notes, Proposal, StepResult

__all__ = ["Context", "Drafter", "Notes", "Proposal", "StepResult"]
