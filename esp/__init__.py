"""ESP Explorer's engine: Embedding-Space Probing and training-free baselines on Hugging Face causal LMs."""
from .api import Result, decode, stream
from .engine import Decoder, Generation
from .errors import ESPError
from .sampling import Sampling

__all__ = ["Decoder", "ESPError", "Generation", "Result", "Sampling", "decode", "stream"]
