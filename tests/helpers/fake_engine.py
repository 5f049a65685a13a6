"""A fake engine for ``dsdr-eval run`` through its ``engine=`` seam: every rollout answers ``\\boxed{1}``
(the tests of the API and benchmarks/walk_run.py)."""

from __future__ import annotations

from dsdr_eval.backends.base import Backend, Completion, RequestResult


class BoxedOne(Backend):
    def __init__(self, name: str) -> None:
        self.name = name

    def render(self, template, problem):
        return problem, problem

    def batch_capacity(self):
        return 8

    def generate(self, requests, batches, on_results):
        for batch in batches:
            on_results([(i, RequestResult(tuple(Completion("so \\boxed{1}", "stop", 5, 3, requests[i].seed)
                                                for _ in range(requests[i].n)))) for i in batch])

    def config(self):
        return {"name": self.name, "version": "fake"}
