"""Models: loading a causal LM (Hub, embedded GGUF, offline packages) and the engine's view of one (LM)."""
