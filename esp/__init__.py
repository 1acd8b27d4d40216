"""ESP Explorer's engine: Embedding-Space Probing and training-free baselines on Hugging Face causal LMs."""
from esp.api import Result, decode, stream
from esp.decoding.engine import Decoder, Generation
from esp.errors import ESPError
from esp.sampling import Sampling

__all__ = ["Decoder", "ESPError", "Generation", "Result", "Sampling", "decode", "stream"]
