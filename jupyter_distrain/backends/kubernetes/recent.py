"""What the cluster answered a moment ago, given again: a form's checks while its user types, and a check with the
outlook that follows it, read the same engines, nodes, pods and claims, and ask the API server once. Only what admits
may come from a recent answer: a refusal is decided on a fresh one (see Engines)."""

from __future__ import annotations

import time
from typing import Callable, Generic, TypeVar

T = TypeVar("T")
RECENT = 10  # seconds an answer is given again (the Cache asks what the cluster serves as often)


class Recent(Generic[T]):
    """`fetch()`'s answer, fetched again once it is `seconds` old or when asked `fresh`. A failure is not kept. Callers
    at once do not wait for each other: each that needs a fetch makes its own, under the client's own limits on
    requests waiting (apiclient.py), and the last answer is kept."""

    def __init__(self, fetch: Callable[[], T], seconds: float):
        self.fetch, self.seconds = fetch, seconds
        self.answer: tuple[float, T] | None = None

    def __call__(self, fresh: bool = False) -> T:
        answer = self.answer
        if fresh or answer is None or time.monotonic() - answer[0] > self.seconds:
            answer = self.answer = time.monotonic(), self.fetch()
        return answer[1]

    def admitting(self, admits: Callable[[T], bool]) -> T:
        """The recent answer if `admits(answer)`, else a fresh one: what refuses is decided on a fresh answer."""
        answer = self()
        return answer if admits(answer) else self(fresh=True)
