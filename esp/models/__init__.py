"""Models: loading a causal LM (Hub, embedded GGUF, offline packages), the engine's view of one (LM), every edit
of its KV cache, and timing its forwards."""
