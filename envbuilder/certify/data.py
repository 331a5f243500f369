"""Mock pretraining data both trainers share: a learnable synthetic token stream.

Uniform random tokens cannot be learned, so the loss would not fall. Instead every
sequence is a window of one fixed cycle through the vocabulary (a full-period linear
congruential walk): the next token is a function of the current one, which a tiny model
learns within a few dozen steps. Fixed seed: the same batches on every run.
"""

from __future__ import annotations

from typing import Any


def vocab_cycle(vocab: int) -> list[int]:
    """x -> (5x + 1) mod vocab visits every token once when vocab is a power of two."""
    assert vocab & (vocab - 1) == 0, "vocab must be a power of two"
    out, x = [], 0
    for _ in range(vocab):
        out.append(x)
        x = (5 * x + 1) % vocab
    return out


def batches(torch: Any, vocab: int, seq: int, batch: int, seed: int, device: Any) -> Any:
    """Infinite iterator of (tokens, labels) LongTensors of shape [batch, seq]."""
    cycle = torch.tensor(vocab_cycle(vocab), dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)
    ar = torch.arange(seq + 1)
    while True:
        start = torch.randint(0, vocab, (batch, 1), generator=gen)
        idx = (start + ar) % vocab
        toks = cycle[idx]
        yield toks[:, :-1].contiguous().to(device), toks[:, 1:].contiguous().to(device)
