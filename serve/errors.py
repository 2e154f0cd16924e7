"""Errors that cross deployments: they pickle, and carry the HTTP status and reason the client sees."""

from __future__ import annotations


class QueryError(Exception):
    status_code = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (type(self), (self.message,))


class BadRequestError(QueryError):
    status_code = 400


class UnauthorizedError(QueryError):
    status_code = 401


class NotFoundError(QueryError):
    status_code = 404


class UnavailableError(QueryError):
    status_code = 503


class DeadlineError(QueryError):
    status_code = 504


class RetryLaterError(QueryError):
    """A refusal that says when to come back (HTTP `Retry-After`, whole seconds)."""

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def __reduce__(self) -> tuple[type, tuple[str, float]]:  # type: ignore[override]
        return (type(self), (self.message, self.retry_after_s))


class RateLimitedError(RetryLaterError):
    """Over a tenant's limit."""

    status_code = 429


class NotReadyError(RetryLaterError):
    """A stage the answer needs is unreachable (starting, or its replica lost and being rescheduled)."""

    status_code = 503


class OverloadedError(RetryLaterError):
    """A stage without a fallback (retrieval) has a full queue: refused at once instead of waiting."""

    status_code = 503
