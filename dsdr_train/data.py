"""Training problems (JSONL or a hub dataset) and a resumable, seeded prompt sampler.

A training problem is the eval suite's :class:`dsdr_eval.tasks.Problem` (one problem type for
evaluation and training): ``benchmark`` names the source (the JSONL file's stem, or the hub id).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dsdr_eval.errors import DsdrError
from dsdr_eval.tasks import Problem

PROBLEM_FIELDS = ("problem", "prompt", "question")
ANSWER_FIELDS = ("answer", "solution", "ground_truth")


def _pick_field(record: dict[str, Any], explicit: str | None, candidates: tuple[str, ...], what: str,
                where: str) -> str:
    if explicit is not None:
        if explicit not in record:
            raise DsdrError(f"{where}: field {explicit!r} ({what}) not found; fields are {sorted(record)}")
        return explicit
    for name in candidates:
        if name in record:
            return name
    raise DsdrError(f"{where}: no {what} field (looked for {', '.join(candidates)}); "
                    f"fields are {sorted(record)}; set problem_field/answer_field")


def _as_text(value: Any) -> str:
    # open-r1/DAPO-Math-17K-Processed keeps the problem as text; verl-style datasets store a chat
    # list [{"role": "user", "content": ...}] or a reward_model dict {"ground_truth": ...}.
    if isinstance(value, list) and value and isinstance(value[-1], dict) and "content" in value[-1]:
        return str(value[-1]["content"])
    if isinstance(value, dict) and "ground_truth" in value:
        return str(value["ground_truth"])
    return str(value)


def _records_to_problems(records: list[dict[str, Any]], source: str, problem_field: str | None,
                         answer_field: str | None, benchmark: str) -> list[Problem]:
    if not records:
        raise DsdrError(f"{source}: no training problems")
    problems: list[Problem] = []
    pf = _pick_field(records[0], problem_field, PROBLEM_FIELDS, "problem", f"{source} record 1")
    af = _pick_field(records[0], answer_field, ANSWER_FIELDS, "answer", f"{source} record 1")
    for i, record in enumerate(records, start=1):
        if pf not in record or af not in record or record[pf] is None or record[af] is None:
            raise DsdrError(f"{source} record {i}: missing {pf!r} or {af!r}")
        problem, answer = _as_text(record[pf]).strip(), _as_text(record[af]).strip()
        if not problem or not answer:
            raise DsdrError(f"{source} record {i}: empty {pf!r} or {af!r}")
        problems.append(Problem(benchmark, str(record.get("id", f"{Path(source).stem}-{i - 1}")), problem, answer))
    return problems


def load_train_problems(spec: str, *, problem_field: str | None = None, answer_field: str | None = None,
                        split: str = "train", dataset_config: str | None = None,
                        limit: int | None = None) -> list[Problem]:
    """A JSONL path (fields problem/answer, or as mapped) or a hub dataset id loaded with `datasets`."""
    path = Path(spec).expanduser()
    if path.suffix == ".jsonl" or path.exists():
        from dsdr_eval.rundir.jsonl import read_jsonl

        records = read_jsonl(path)
        if limit is not None:
            records = records[:limit]
        return _records_to_problems(records, str(path), problem_field, answer_field, path.stem)
    if spec.startswith((".", "/", "~")):
        raise DsdrError(f"{spec}: training data file does not exist")
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is a core dependency
        raise DsdrError("loading a hub dataset needs the `datasets` package") from None
    try:
        ds = datasets.load_dataset(spec, dataset_config, split=split)
    except Exception as exc:  # noqa: BLE001 - hub/network errors are user-facing here
        raise DsdrError(f"{spec}: could not load hub dataset (config={dataset_config!r}, split={split!r}): "
                        f"{type(exc).__name__}: {exc}") from None
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))
    return _records_to_problems([dict(r) for r in ds], f"{spec}[{split}]", problem_field, answer_field, spec)


class PromptSampler:
    """Epoch-wise shuffled problem order; the state is one integer (problems drawn so far).

    The order of epoch e is a permutation seeded by (seed, e), so resuming from a checkpoint
    with the saved cursor reproduces exactly the problems an uninterrupted run would draw."""

    def __init__(self, n_problems: int, seed: int, cursor: int = 0) -> None:
        if n_problems <= 0:
            raise DsdrError("no training problems to sample from")
        self.n = n_problems
        self.seed = seed
        self.cursor = cursor
        self._epoch = -1
        self._order: np.ndarray | None = None

    def _order_for(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            self._order = np.random.default_rng([self.seed, epoch]).permutation(self.n)
            self._epoch = epoch
        assert self._order is not None
        return self._order

    def next_indices(self, k: int) -> list[int]:
        out = []
        for _ in range(k):
            epoch, pos = divmod(self.cursor, self.n)
            out.append(int(self._order_for(epoch)[pos]))
            self.cursor += 1
        return out

    def state_dict(self) -> dict[str, int]:
        return {"cursor": self.cursor, "seed": self.seed, "n": self.n}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state.get("n") != self.n:
            raise DsdrError(f"resume: the checkpoint was trained on {state.get('n')} problems, the data now has {self.n}")
        self.cursor = int(state["cursor"])
