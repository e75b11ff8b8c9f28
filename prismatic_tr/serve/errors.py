"""What the server answers when a request cannot be served: one exception per kind, one JSON body for all.

A :class:`RequestError` is the client's fault (4xx) and names the field and what is allowed; a
:class:`ModelError` is the server's (500) and carries an id that is also in the server log next to the
traceback. Every error body is ``{"error": message, "field": name or null, "id": id or null}``: never HTTP
200, unlike OpenVLA's ``deploy.py``, which answers a bad request with 200 and the string "error".
"""

from __future__ import annotations

import json
import uuid
from typing import Any

BAD_REQUEST = 400  # the body is not a JSON object (or its "encoded" string is not one)
TOO_LARGE = 413  # the body is over the server's limit
UNPROCESSABLE = 422  # a field is missing, unknown, of the wrong type or out of range
INTERNAL = 500  # the model raised; the id names the log entry


class RequestError(ValueError):
    """A request the server refuses: HTTP ``status`` (4xx), the ``field`` at fault (None: the body itself)."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        if not 400 <= status < 500:
            raise ValueError(f"status {status} is not allowed for a RequestError; use a 4xx code")
        super().__init__(message)
        self.status = status
        self.field = field
        self.message = message


class ModelError(RuntimeError):
    """The model raised while serving a request; ``error_id`` is logged with the traceback."""

    def __init__(self, error_id: str, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__} in the model (error id {error_id})")
        self.error_id = error_id


def new_error_id() -> str:
    """A short random id that ties a 500 answer to its log entry."""
    return uuid.uuid4().hex[:12]


def error_body(message: str, field: str | None = None, error_id: str | None = None) -> bytes:
    """The JSON body of every error answer."""
    body: dict[str, Any] = {"error": message, "field": field, "id": error_id}
    return json.dumps(body).encode()


def body_of(err: RequestError | ModelError) -> tuple[int, bytes]:
    """(status, body) of an error answer."""
    if isinstance(err, RequestError):
        return err.status, error_body(err.message, err.field)
    return INTERNAL, error_body(f"the model failed on this request; the server log has the traceback under id "
                                f"{err.error_id}", None, err.error_id)
