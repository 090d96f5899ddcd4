"""companion.scratch: forward-only NumPy twins of the package's core ideas, written to be read.

Each module here redoes one concept of the course with nothing but NumPy, in the fewest plain lines
that still work: no autograd, no modules, no dtype or device handling, little input checking. They are
for reading side by side with the chapters and with the torch modules of ``companion``; the tests check
that each twin gives the same numbers as its torch counterpart with the same weights.

Conventions: arrays are float64 by default; weights act on row vectors (``y = x @ W``), so a weight
copied from ``torch.nn.Linear`` is ``linear.weight.T``; shapes follow the package legend (B, T, S, D, H, D_h).

Modules: ``attention`` (softmax, scaled dot-product and multi-head attention), ``masks`` (causal mask),
``positions`` (sinusoidal encoding, RoPE), ``layers`` (LayerNorm, RMSNorm, feed-forward, GELU),
``gpt`` (a mini GPT forward pass). Import them by name, e.g. ``from companion.scratch import attention``.
"""

__all__ = ["attention", "gpt", "layers", "masks", "positions"]
