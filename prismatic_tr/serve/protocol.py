"""OpenVLA's deploy protocol: parse and check a ``POST /act`` body, encode the answer.

A body is what OpenVLA's ``vla-scripts/deploy.py`` clients send (json-numpy arrays inside JSON)::

    {"image": ndarray (H, W, 3) uint8, "instruction": str, "unnorm_key": str (optional)}
    {"encoded": "<the same object as a JSON string, arrays json-numpy encoded>"}      (double-encoded)

OpenVLA-OFT's clients send ``full_image`` (instead of ``image``), ``*wrist*`` images and the proprio ``state``;
a model that takes one image and no proprio refuses those with 422 naming the field, and an OFT model needs
exactly its number of images (and the state, when it has a proprio projector). The answer is the action array
json-numpy encoded, as OpenVLA's server writes ``JSONResponse(action)`` with ``json_numpy.patch()`` in force;
for an OFT model, the chunk as a list of per-step action arrays (what OFT's ``get_vla_action`` returns and its
deploy.py sends); for a double-encoded request, that text again as a JSON string.
Nothing here patches the ``json`` module: json-numpy's hooks are passed explicitly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import json_numpy
import numpy as np

from .config import ServeLimits
from .errors import BAD_REQUEST, UNPROCESSABLE, RequestError

IMAGE_FIELDS = ("image", "full_image")  # the primary camera: OpenVLA's name, OpenVLA-OFT's name
PROPRIO_FIELD = "state"  # OpenVLA-OFT's proprio
FIELDS = ("image", "instruction", "unnorm_key")  # what OpenVLA's deploy.py reads
ENCODED = "encoded"


@dataclass(frozen=True)
class ModelSpec:
    """What the served model takes: its action statistics keys, images per request (``min_images`` to
    ``max_images``; an OFT model takes exactly its number), proprio size (None: none; required when set)."""

    unnorm_keys: tuple[str, ...]
    max_images: int = 1
    proprio_dim: int | None = None
    min_images: int = 1

    @property
    def allowed_fields(self) -> str:
        """The fields a request may hold, in words."""
        wrist = self.max_images - 1
        extra = f", {wrist} *wrist* image{'s' if wrist > 1 else ''}" if wrist else ""
        extra += f", {PROPRIO_FIELD} ({self.proprio_dim} numbers)" if self.proprio_dim else ""
        return f"image (or full_image), instruction, unnorm_key (optional){extra}"


@dataclass(frozen=True)
class ActRequest:
    """One checked request: ``images`` uint8 (H, W, 3), primary camera first; ``unnorm_key`` resolved to one of
    the model's keys; ``proprio`` (D,) float or None; ``encoded``: answer double-encoded."""

    images: tuple[np.ndarray, ...]
    instruction: str
    unnorm_key: str
    proprio: np.ndarray | None = None
    encoded: bool = False


def _loads(text: str | bytes, what: str) -> Any:
    """JSON with json-numpy arrays -> Python objects; 400 naming ``what`` when it is not valid."""
    try:
        return json.loads(text, object_hook=json_numpy.object_hook)
    except Exception as err:  # any malformed JSON or json-numpy array is the client's, never a crash
        raise RequestError(BAD_REQUEST, f"{what} is not valid JSON with json-numpy arrays "
                                        f"({type(err).__name__}: {str(err)[:200]})") from None


def decode_body(body: bytes) -> tuple[dict[str, Any], bool]:
    """The request's fields and whether it came double-encoded (``{"encoded": "..."}``); 400 / 422 otherwise."""
    payload = _loads(body, "the body")
    if not isinstance(payload, dict):
        raise RequestError(BAD_REQUEST, f"the body is a JSON {type(payload).__name__}; send a JSON object with "
                                        f"the fields {', '.join(FIELDS)}")
    if ENCODED not in payload:
        return payload, False
    if len(payload) != 1:
        others = sorted(k for k in payload if k != ENCODED)
        raise RequestError(UNPROCESSABLE, f"field 'encoded' comes with {others}; allowed: 'encoded' alone (a "
                                          "double-encoded request)", ENCODED)
    if not isinstance(payload[ENCODED], str):
        raise RequestError(UNPROCESSABLE, f"field 'encoded' is a {type(payload[ENCODED]).__name__}; allowed: a "
                                          "string holding the request as JSON (json_numpy.dumps of it)", ENCODED)
    inner = _loads(payload[ENCODED], "field 'encoded'")
    if not isinstance(inner, dict):
        raise RequestError(UNPROCESSABLE, f"field 'encoded' holds a JSON {type(inner).__name__}; allowed: an "
                                          "object with the fields image, instruction, unnorm_key", ENCODED)
    return inner, True


def check_image(value: Any, field: str, limits: ServeLimits) -> np.ndarray:
    """``value`` if it is a uint8 (H, W, 3) array with sides in the limits; else 422 naming ``field``."""
    allowed = (f"a uint8 array of shape (H, W, 3), sides {limits.min_image_side} to {limits.max_image_side}, "
               "sent with json-numpy")
    if not isinstance(value, np.ndarray):
        raise RequestError(UNPROCESSABLE, f"field {field!r} is a {type(value).__name__}; allowed: {allowed}", field)
    if value.dtype != np.uint8:
        raise RequestError(UNPROCESSABLE, f"field {field!r} has dtype {value.dtype}; allowed: {allowed}", field)
    if value.ndim != 3 or value.shape[2] != 3:
        raise RequestError(UNPROCESSABLE, f"field {field!r} has shape {tuple(value.shape)}; allowed: {allowed}",
                           field)
    low, high = limits.min_image_side, limits.max_image_side
    if not (low <= value.shape[0] <= high and low <= value.shape[1] <= high):
        raise RequestError(UNPROCESSABLE, f"field {field!r} is {value.shape[0]} x {value.shape[1]} pixels; "
                                          f"allowed: {allowed}", field)
    return value


def check_instruction(value: Any, limits: ServeLimits) -> str:
    """A non-blank string of at most ``max_instruction_chars`` characters; else 422."""
    allowed = f"a non-empty string of at most {limits.max_instruction_chars} characters"
    if not isinstance(value, str) or not value.strip() or len(value) > limits.max_instruction_chars:
        shown = f"a string of {len(value)} characters" if isinstance(value, str) else f"a {type(value).__name__}"
        raise RequestError(UNPROCESSABLE, f"field 'instruction' is {shown}; allowed: {allowed}", "instruction")
    return value


def check_unnorm_key(value: Any, spec: ModelSpec) -> str:
    """The dataset key to un-normalise with: ``value``, or the model's only key when it is missing; else 422."""
    keys = list(spec.unnorm_keys)
    if value is None:
        if len(keys) == 1:
            return keys[0]
        raise RequestError(UNPROCESSABLE, f"field 'unnorm_key' is missing and the model has action statistics for "
                                          f"{keys}; pass one of them", "unnorm_key")
    if not isinstance(value, str) or value not in keys:
        raise RequestError(UNPROCESSABLE, f"field 'unnorm_key' is {value!r}; allowed: one of {keys}", "unnorm_key")
    return value


def _check_fields(fields: Mapping[str, Any], spec: ModelSpec) -> None:
    """422 for an unknown field, for OFT fields the model does not take, and for two primary images."""
    for name in fields:
        if name in (*IMAGE_FIELDS, "instruction", "unnorm_key"):
            continue
        if "wrist" in name:
            if spec.max_images > 1:
                continue
            raise RequestError(UNPROCESSABLE, f"field {name!r}: this model takes 1 image per request (several "
                                              f"images need an OpenVLA-OFT model); allowed: {spec.allowed_fields}",
                               name)
        if name == PROPRIO_FIELD:
            if spec.proprio_dim:
                continue
            raise RequestError(UNPROCESSABLE, f"field {name!r}: this model takes no proprio state (an OpenVLA-OFT "
                                              f"model with proprio does); allowed: {spec.allowed_fields}", name)
        raise RequestError(UNPROCESSABLE, f"unknown field {name!r}; allowed: {spec.allowed_fields}", name)
    given = [f for f in IMAGE_FIELDS if f in fields]
    if len(given) != 1:
        detail = "both" if given else "neither"
        raise RequestError(UNPROCESSABLE, f"the request has {detail} of 'image' and 'full_image'; allowed: the "
                                          "camera image in exactly one of them", "image")
    if "instruction" not in fields:
        raise RequestError(UNPROCESSABLE, "field 'instruction' is missing; allowed: a non-empty string",
                           "instruction")


def _check_proprio(value: Any, spec: ModelSpec) -> np.ndarray:
    """A finite float array of shape (proprio_dim,); else 422."""
    arr = value if isinstance(value, np.ndarray) else None
    if arr is None or arr.dtype.kind not in "fiu" or arr.shape != (spec.proprio_dim,) or \
            not np.isfinite(arr).all():
        shown = f"{arr.dtype} {tuple(arr.shape)}" if arr is not None else type(value).__name__
        raise RequestError(UNPROCESSABLE, f"field {PROPRIO_FIELD!r} is {shown}; allowed: a finite numeric array of "
                                          f"shape ({spec.proprio_dim},)", PROPRIO_FIELD)
    return arr.astype(np.float32)


def parse_request(body: bytes, spec: ModelSpec, limits: ServeLimits) -> ActRequest:
    """A ``POST /act`` body -> :class:`ActRequest`; :class:`RequestError` (400 / 422) naming what is wrong."""
    fields, encoded = decode_body(body)
    _check_fields(fields, spec)
    primary = next(f for f in IMAGE_FIELDS if f in fields)
    wrist = sorted(f for f in fields if "wrist" in f)
    if 1 + len(wrist) > spec.max_images:
        raise RequestError(UNPROCESSABLE, f"{1 + len(wrist)} images ({primary}, {', '.join(wrist)}); this model "
                                          f"takes at most {spec.max_images}", wrist[-1])
    if 1 + len(wrist) < spec.min_images:
        raise RequestError(UNPROCESSABLE, f"{1 + len(wrist)} image(s) ({', '.join([primary, *wrist])}); this model "
                                          f"takes {spec.min_images}: {primary} and {spec.min_images - 1} *wrist* "
                                          "image field(s), e.g. wrist_image", "wrist_image")
    images = tuple(check_image(fields[f], f, limits) for f in (primary, *wrist))
    if spec.proprio_dim and PROPRIO_FIELD not in fields:
        raise RequestError(UNPROCESSABLE, f"field {PROPRIO_FIELD!r} is missing; allowed: a finite numeric array of "
                                          f"shape ({spec.proprio_dim},), the robot's raw state", PROPRIO_FIELD)
    proprio = _check_proprio(fields[PROPRIO_FIELD], spec) if PROPRIO_FIELD in fields else None
    return ActRequest(images, check_instruction(fields["instruction"], limits),
                      check_unnorm_key(fields.get("unnorm_key"), spec), proprio, encoded)


def encode_action(action: np.ndarray, encoded: bool) -> bytes:
    """The answer body: an (A,) ``action`` json-numpy encoded (what OpenVLA's ``JSONResponse(action)`` writes with
    json-numpy patched); a (chunk, A) one as a list of per-step arrays (OFT's answer); for a double-encoded
    request, that text as one JSON string."""
    value: Any = np.ascontiguousarray(action)
    if value.ndim == 2:
        value = [np.ascontiguousarray(step) for step in value]
    text = json_numpy.dumps(value)
    return (json.dumps(text) if encoded else text).encode()
