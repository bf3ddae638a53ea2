"""The errors the services raise: one sentence each, for the face to show as it is."""

from __future__ import annotations


class ServiceError(Exception):
    """A use case that could not be done; ``str()`` is the sentence to show."""


class BadRequest(ServiceError):
    """What was asked cannot be done as asked (a bad option, a missing question, a model that
    is not there); nothing was started or changed."""


class BadOption(BadRequest):
    """One option out of range; each face names the option its own way (a flag, a field), the
    problem is the same words."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"{option.replace('_', ' ')} {problem}")
        self.option, self.problem = option, problem


class HistoryUnavailable(ServiceError):
    """The history database cannot be read or written now (a full disk, a lock held too long,
    a damaged file); what was asked was not done."""
