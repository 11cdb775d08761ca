"""How deep the arrays and objects of a JSON text nest, counted on the text: no parse, no recursion.

Readers of untrusted JSON (a peer's message, a packed grid, a run folder from someone else) bound
its nesting with these, cheaply: a count of opening brackets rules most texts out, and the depth
itself is one vectorised pass.
"""

from __future__ import annotations

import numpy as np


def could_nest_deeper(text: str, depth: int) -> bool:
    """Whether ``text`` holds more than ``depth`` opening brackets at all (if not, it cannot nest
    deeper; counting is cheaper than :func:`nesting_depth`)."""
    return text.count("[") + text.count("{") > depth


def nesting_depth(text: str) -> int:
    """How deep the arrays and objects of the JSON ``text`` nest, outside its strings, found
    without parsing it (so without recursion) in one vectorised pass."""
    code = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    if code.size == 0:
        return 0
    position = np.arange(code.size)
    slash = code == ord("\\")
    last_other = np.maximum.accumulate(np.where(slash, -1, position))  # the last non-backslash up to here
    escaped = np.zeros(code.size, dtype=bool)  # a character after an odd run of backslashes
    escaped[1:] = (position[:-1] - last_other[:-1]) % 2 == 1
    quote = (code == ord('"')) & ~escaped
    outside = np.cumsum(quote) % 2 == 0  # not inside a string
    opens = np.isin(code, (ord("["), ord("{"))) & outside
    closes = np.isin(code, (ord("]"), ord("}"))) & outside
    return int(np.cumsum(opens.astype(np.int64) - closes).max(initial=0))
