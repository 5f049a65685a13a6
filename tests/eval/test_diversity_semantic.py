"""D_emb and d = (D_emb + D_eq)/2 (DSDR §3.1) with a fake encoder; one check with the real MiniLM."""

from __future__ import annotations

import numpy as np
import pytest

from dsdr_eval.diversity_metrics import dsdr_diversity, dsdr_diversity_batch, load_encoder, semantic_diversity
from dsdr_eval.diversity_metrics.semantic import DEFAULT_ENCODER, embed_texts


class DictEncoder:
    """Deterministic fake encoder: a fixed vector per text (unnormalised on purpose)."""

    def __init__(self, table: dict[str, list[float]]):
        self.table = table
        self.calls = 0

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        return np.asarray([self.table[t] for t in texts], dtype=np.float64)


def test_semantic_diversity_hand_computed() -> None:
    z = np.asarray([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    # cos: (0,1)=0, (0,2)=1, (1,2)=0 -> D_0 = ((1-0)/2 + (1-1)/2)/2 = 0.25, D_1 = 0.5, D_2 = 0.25
    np.testing.assert_allclose(semantic_diversity(z), [0.25, 0.5, 0.25])
    np.testing.assert_allclose(semantic_diversity(np.asarray([[1.0, 0.0], [-1.0, 0.0]])), [1.0, 1.0])
    np.testing.assert_allclose(semantic_diversity(np.ones((4, 3)) / np.sqrt(3)), np.zeros(4), atol=1e-12)
    np.testing.assert_array_equal(semantic_diversity(np.ones((1, 3))), [0.0])  # G = 1
    assert semantic_diversity(np.zeros((0, 3))).shape == (0,)


def test_dsdr_diversity_combines_both_terms() -> None:
    texts = ["$a$ and $b$", "$a$", "$c$", ""]
    encoder = DictEncoder({texts[0]: [2.0, 0.0], texts[1]: [0.0, 3.0], texts[2]: [1.0, 0.0], texts[3]: [0.0, 0.0]})
    result = dsdr_diversity(texts, encoder=encoder)
    # unit rows z0=(1,0) z1=(0,1) z2=(1,0) z3=0 (empty text -> zero row -> cosine 0 to all)
    # D_emb_0 = ((1-0) + (1-1) + (1-0)) / 2 / 3 = 1/3 ; D_emb_1 = (1 + 1 + 1)/2/3 = 1/2
    # D_emb_2 = 1/3 ; D_emb_3 = 1/2
    np.testing.assert_allclose(result.d_emb, [1 / 3, 1 / 2, 1 / 3, 1 / 2])
    np.testing.assert_allclose(result.d_eq, [0.5, 0.0, 1.0, 0.0])
    np.testing.assert_allclose(result.d, (result.d_emb + result.d_eq) / 2)
    np.testing.assert_array_equal(result.n_formulas, [2, 1, 1, 0])
    assert encoder.calls == 1


def test_dsdr_diversity_degenerate_groups() -> None:
    one = dsdr_diversity(["$x$"], encoder=DictEncoder({"$x$": [1.0, 0.0]}))
    np.testing.assert_array_equal(one.d, [0.0])
    same = dsdr_diversity(["$x$ y"] * 3, encoder=DictEncoder({"$x$ y": [0.3, 0.4]}))
    np.testing.assert_allclose(same.d, [0.0, 0.0, 0.0], atol=1e-12)
    empty = dsdr_diversity(["", ""], encoder=DictEncoder({"": [1.0, 1.0]}))
    np.testing.assert_allclose(empty.d, [0.0, 0.0], atol=1e-12)


def test_precomputed_embeddings_skip_the_encoder() -> None:
    result = dsdr_diversity(["$a$", "$b$"], embeddings=np.asarray([[1.0, 0.0], [0.0, 5.0]]))
    np.testing.assert_allclose(result.d_emb, [0.5, 0.5])
    np.testing.assert_allclose(result.d, [0.75, 0.75])
    with pytest.raises(ValueError):
        dsdr_diversity(["$a$", "$b$"], embeddings=np.zeros((3, 2)))


def test_batch_matches_per_group_and_encodes_once() -> None:
    texts = ["$a$", "$b$", "$a$", "$c$ $a$", "$d$"]
    table = {t: [float(len(t)), float(i + 1), 1.0] for i, t in enumerate(dict.fromkeys(texts))}
    encoder = DictEncoder(table)
    groups = ["g1", "g2", "g1", "g2", "g1"]  # non-contiguous on purpose
    batched = dsdr_diversity_batch(texts, groups, encoder=encoder)
    assert encoder.calls == 1
    for gid in ("g1", "g2"):
        idx = [i for i, g in enumerate(groups) if g == gid]
        alone = dsdr_diversity([texts[i] for i in idx], encoder=DictEncoder(table))
        np.testing.assert_allclose(batched.d[idx], alone.d)
        np.testing.assert_allclose(batched.d_eq[idx], alone.d_eq)


@pytest.fixture(scope="module")
def minilm():
    return load_encoder()


@pytest.mark.slow  # loads MiniLM
def test_real_minilm_matches_sentence_transformers(minilm) -> None:
    texts = ["The answer is 4 because 2+2=4.", "Two plus two equals four, so the answer is 4.",
             "A completely unrelated sentence about the weather in Paris.", ""]
    assert minilm.name == DEFAULT_ENCODER and minilm.max_seq_length == 256
    raw = minilm.model.encode(texts, convert_to_numpy=True)
    z = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    expected = np.asarray([np.mean([(1 - z[i] @ z[j]) / 2 for j in range(4) if j != i]) for i in range(4)])
    result = dsdr_diversity(texts, encoder=minilm)
    np.testing.assert_allclose(result.d_emb, expected, atol=1e-5)
    # the two paraphrases are closer to each other than to the weather sentence
    sims = z @ z.T
    assert sims[0, 1] > sims[0, 2] + 0.2


@pytest.mark.slow  # loads MiniLM
def test_real_minilm_chunked_mode(minilm) -> None:
    from dsdr_eval.diversity_metrics.semantic import Encoder

    chunked = Encoder(minilm.model, name=minilm.name, path=minilm.path, device="cpu", chunked=True)
    assert chunked.settings()["truncation"] == "chunk-mean"
    assert minilm.settings()["truncation"] == "encoder-truncation"
    short = "We add the numbers and get 7."
    long_text = "First we expand the square and simplify the terms. " * 20 + \
        "Then the weather in Paris is sunny and the cafes are full. " * 60
    truncated = embed_texts([short, long_text], minilm)
    chunk_mean = embed_texts([short, long_text], chunked)
    np.testing.assert_allclose(chunk_mean[0], truncated[0], atol=1e-5)  # one chunk: identical
    assert float(chunk_mean[1] @ truncated[1]) < 0.99  # the tail beyond 256 tokens now counts
    pieces, owners = chunked._chunks([short, long_text])
    assert owners.tolist().count(1) >= 3 and "".join(pieces[1:]).replace(" ", "") in long_text.replace(" ", "")
    np.testing.assert_allclose(np.linalg.norm(chunk_mean, axis=1), 1.0, atol=1e-5)


@pytest.mark.slow  # loads MiniLM
def test_long_texts_are_clipped_before_tokenizing_without_changing_an_embedding(minilm) -> None:
    # Thinking-model traces of ~64 KB: the encoder sees a whitespace-cut prefix, which must hold the
    # same first 256 tokens. Reference: sentence-transformers on the whole texts, its own truncation.
    rng = np.random.default_rng(0)
    words = ["we", "expand", "the", "square", "so", "$x^2+2xy+y^2$", "\\frac{a}{b}", "equals", "12345", "thus"]
    prose = " ".join(rng.choice(words, size=12000))
    lines = "\n".join(" ".join(rng.choice(words, size=7)) for _ in range(2000))
    # words of 150 letters are one [UNK] each: a 4 KB prefix holds ~27 tokens, so the whole text is kept
    unk_words = " ".join("q" * 150 for _ in range(80)) + " " + prose
    no_space = "x" * 20000 + " " + prose
    texts = [prose, lines, unk_words, no_space, "short text, 7."]
    clipped = minilm._clipped(texts)
    assert len(clipped[0]) <= 4096 and len(clipped[1]) <= 4096  # the prose is clipped
    assert clipped[2] == unk_words and clipped[3] == no_space and clipped[4] == texts[4]
    raw = minilm.model.encode(texts, batch_size=1, convert_to_numpy=True)
    expected = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    np.testing.assert_allclose(embed_texts(texts, minilm), expected, atol=1e-5)


def test_package_import_is_light_and_exports_the_agreed_api() -> None:
    import subprocess
    import sys

    code = ("import sys, dsdr_eval.diversity_metrics as d; "
            "assert all(callable(getattr(d, n)) for n in ('dsdr_diversity', 'load_encoder', 'darling_partition', "
            "'darling_div')); "
            "heavy = [m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules]; "
            "assert not heavy, heavy")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


class _SlowSharedModel:
    """A sentence-transformers stand-in that records the truncation each encode ran under; the
    first call blocks until released (so a second thread can try to encode meanwhile)."""

    def __init__(self) -> None:
        import threading

        self.max_seq_length = 256
        self.seen: list[int] = []
        self.entered, self.release = threading.Event(), threading.Event()

    def encode(self, texts, **kwargs) -> np.ndarray:
        first = not self.entered.is_set()
        self.entered.set()
        if first:
            self.release.wait(5)
        self.seen.append(self.max_seq_length)
        return np.ones((len(texts), 2), dtype=np.float32)


def test_an_encode_never_runs_under_another_encoders_truncation_override() -> None:
    import threading

    from dsdr_eval.diversity_metrics.semantic import Encoder

    model = _SlowSharedModel()  # one cached model, two Encoders over it
    short = Encoder(model, name="m", path="m", device="cpu", max_seq_length=128)
    plain = Encoder(model, name="m", path="m", device="cpu")
    overriding = threading.Thread(target=short.encode, args=(["a"],))
    overriding.start()
    assert model.entered.wait(5)
    meanwhile = threading.Thread(target=plain.encode, args=(["b"],))
    meanwhile.start()
    meanwhile.join(0.3)  # without the lock it runs now, under the override
    model.release.set()
    overriding.join(5)
    meanwhile.join(5)
    assert model.seen == [128, 256] and model.max_seq_length == 256
