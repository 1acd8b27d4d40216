"""ESP Explorer's engine: Embedding-Space Probing and training-free baselines on Hugging Face causal LMs."""
from esp.api import Result, decode, stream, wrap
from esp.budget import cost
from esp.decoding.batch import BatchDecoder
from esp.decoding.engine import Decoder, Generation
from esp.errors import ESPError
from esp.models.lm import LM
from esp.notebook import show
from esp.sampling import Sampling

__all__ = ["BatchDecoder", "Decoder", "ESPError", "Generation", "Result", "Sampling", "calibrate", "decode", "show",
           "stream"]


def calibrate(model, tokenizer=None, grid: tuple[int, ...] = cost.GRID, repeats: int = 5) -> cost.CostCurve:
    """Time this machine's cost curve for `model` (a Hugging Face causal LM as `decode` takes it, or an
    engine LM) now and store it, so that every later bc=auto drafter, in this process and later ones, starts
    from it: the one blocking sweep, for callers who ask for it before they serve (seconds on a CPU). A
    call of `decode` never sweeps: without a stored curve it starts from a default shape and learns."""
    return cost.calibrate(model if isinstance(model, LM) else wrap(model, tokenizer), grid, repeats)
