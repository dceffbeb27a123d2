"""Plain data across a trust boundary: a strict, tagged JSON encoding of Python's plain builtin values.

It carries arguments into a sandboxed program and its results back out (see ``function_calls``).
The untrusted side may send any bytes at all; the trusted side only ever gets back values built
from these builtin types, so comparing them with ``==`` runs no code of the sender's:

    None, bool, int, float (nan and +-inf included), str, bytes, list, tuple, dict, set, frozenset

Every value is a two-item JSON array ``[tag, payload]``, the tag being the type's name:
``["NoneType", null]``, ``["bool", true]``, ``["int", "-12"]`` (decimal text: no float rounding),
``["float", "0x1.8000000000000p+1"]`` (``float.hex``: exact, and ``"nan"``/``"inf"``/``"-inf"``),
``["str", "text"]``, ``["bytes", "<base64>"]``, ``["list", [...]]``, ``["tuple", [...]]``,
``["set", [...]]``, ``["frozenset", [...]]``, ``["dict", [[key, value], ...]]``.

Rules, both ways:

- exact types only: a subclass of ``int``/``str``/``list``/... (which could override ``__eq__``)
  is not plain data, and encoding never calls a method of the value (it only reads builtin
  containers and numbers), so encoding inside the sandbox cannot be steered by the value itself;
- bounded: at most ``MAX_DEPTH`` levels of nesting, ``MAX_NODES`` values in all, ints of at most
  ``MAX_INT_BITS`` bits (below CPython's 4,300-digit ``int``/``str`` conversion limit);
- decoding is strict: an unknown tag, a payload of the wrong JSON type, a duplicate dict key or
  set element (``1`` and ``True`` are duplicates), an unhashable key, a non-canonical int or float text
  or anything over a bound raises :class:`InvalidPlainData`.

:func:`same_type_tree` compares the *shape* of two plain values (type of every node, lengths, keys),
used to refuse a result that compares equal to the expected one with other types: ``True == 1``
holds, yet a bool is not an int (and, with ``numbers_interchangeable=False``, 1 is not 1.0).

Stdlib only, with no import from this package: the sandbox runs a copy of this file next to the
harness under the system Python.
"""

from __future__ import annotations

import json

# Only json at import time: this module starts inside every sandboxed run, where each import costs
# CPU on every execution (typing alone ~5 ms); base64 is imported where bytes need it.

MAX_DEPTH = 64
MAX_NODES = 200_000
MAX_INT_BITS = 13_000  # ~3,900 decimal digits
_MAX_INT_CHARS = MAX_INT_BITS * 30103 // 100_000 + 2  # decimal digits of a MAX_INT_BITS int, sign
_SEQUENCES = {"list": list, "tuple": tuple}
_SETS = {"set": set, "frozenset": frozenset}


class NotPlainData(ValueError):
    """A value to encode is not plain data (a subclass, an object, too deep or too big)."""


class InvalidPlainData(ValueError):
    """Encoded text that is not a valid encoding of plain data."""


# -- encoding -------------------------------------------------------------------------------------

def encode(value: object) -> list:
    """The JSON-ready tagged tree of ``value``; raises :class:`NotPlainData`."""
    budget = [MAX_NODES]
    return _encode(value, 0, budget)


def _encode(value: object, depth: int, budget: list) -> list:
    if depth > MAX_DEPTH:
        raise NotPlainData(f"nested deeper than {MAX_DEPTH} levels")
    budget[0] -= 1
    if budget[0] < 0:
        raise NotPlainData(f"more than {MAX_NODES} values")
    kind = type(value)
    if value is None:
        return ["NoneType", None]
    if kind is bool:
        return ["bool", value]
    if kind is int:
        if value.bit_length() > MAX_INT_BITS:
            raise NotPlainData(f"an int of {value.bit_length()} bits (at most {MAX_INT_BITS})")
        return ["int", str(value)]
    if kind is float:
        return ["float", float.hex(value)]
    if kind is str:
        return ["str", value]
    if kind is bytes:
        import base64

        return ["bytes", base64.b64encode(value).decode("ascii")]
    if kind is list or kind is tuple or kind is set or kind is frozenset:
        return [kind.__name__, [_encode(item, depth + 1, budget) for item in value]]
    if kind is dict:
        return ["dict", [[_encode(k, depth + 1, budget), _encode(v, depth + 1, budget)] for k, v in value.items()]]
    raise NotPlainData(f"a value of type {type_name(kind)} is not plain data")


def type_name(kind: type) -> str:
    """A type's name, read from ``type`` itself: a metaclass cannot make this run code of its own."""
    name = type.__dict__["__name__"].__get__(kind)
    return name if isinstance(name, str) and type(name) is str else "<unnamed type>"


def dumps(value: object) -> str:
    """``value`` encoded as JSON text (ASCII only)."""
    return json.dumps(encode(value), ensure_ascii=True, separators=(",", ":"), allow_nan=False)


# -- decoding -------------------------------------------------------------------------------------

def decode(tree: object) -> object:
    """The plain value a tagged tree encodes; raises :class:`InvalidPlainData`."""
    budget = [MAX_NODES]
    return _decode(tree, 0, budget)


def _decode(tree: object, depth: int, budget: list) -> object:
    if depth > MAX_DEPTH:
        raise InvalidPlainData(f"nested deeper than {MAX_DEPTH} levels")
    budget[0] -= 1
    if budget[0] < 0:
        raise InvalidPlainData(f"more than {MAX_NODES} values")
    if type(tree) is not list or len(tree) != 2 or type(tree[0]) is not str:
        raise InvalidPlainData("every value must be a [tag, payload] pair")
    tag, payload = tree
    if tag == "NoneType" and payload is None:
        return None
    if tag == "bool" and type(payload) is bool:
        return payload
    if tag == "int" and type(payload) is str:
        if len(payload) > _MAX_INT_CHARS or not _canonical_int_text(payload):
            raise InvalidPlainData(f"not a canonical int of at most {MAX_INT_BITS} bits: {payload[:40]!r}")
        number = int(payload)
        if number.bit_length() > MAX_INT_BITS:
            raise InvalidPlainData(f"an int of {number.bit_length()} bits (at most {MAX_INT_BITS})")
        return number
    if tag == "float" and type(payload) is str and len(payload) <= 40:
        try:
            number = float.fromhex(payload)
        except (ValueError, OverflowError):
            number = None
        if number is None or float.hex(number) != payload:
            raise InvalidPlainData(f"not the float.hex text of a float: {payload!r}")
        return number
    if tag == "str" and type(payload) is str:
        return payload
    if tag == "bytes" and type(payload) is str:
        import base64
        import binascii

        try:
            return base64.b64decode(payload.encode("ascii"), validate=True)
        except (ValueError, binascii.Error):
            raise InvalidPlainData("bytes payload is not base64") from None
    if type(payload) is not list:
        raise InvalidPlainData(f"unknown tag or wrong payload for {tag[:40]!r}")
    if tag in _SEQUENCES:
        return _SEQUENCES[tag](_decode(item, depth + 1, budget) for item in payload)
    if tag in _SETS:
        items = [_decode(item, depth + 1, budget) for item in payload]
        try:
            built = _SETS[tag](items)
        except TypeError:
            raise InvalidPlainData(f"a {tag} holds an unhashable value") from None
        if len(built) != len(items):
            raise InvalidPlainData(f"a {tag} holds duplicate elements")
        return built
    if tag == "dict":
        out: dict = {}
        for pair in payload:
            if type(pair) is not list or len(pair) != 2:
                raise InvalidPlainData("a dict item must be a [key, value] pair")
            key = _decode(pair[0], depth + 1, budget)
            try:
                if key in out:
                    raise InvalidPlainData("a dict holds a duplicate key")
            except TypeError:
                raise InvalidPlainData("a dict key is unhashable") from None
            out[key] = _decode(pair[1], depth + 1, budget)
        return out
    raise InvalidPlainData(f"unknown tag {tag[:40]!r}")


def _canonical_int_text(text: str) -> bool:
    """``-?(0|[1-9][0-9]*)`` in ASCII, what ``str(int)`` writes (no ``+``, spaces, ``_`` or ``01``)."""
    digits = text[1:] if text.startswith("-") else text
    return digits.isascii() and digits.isdigit() and (digits == "0" or not digits.startswith("0")) and text != "-0"


def loads(text: "str | bytes") -> object:
    """The plain value encoded in JSON ``text``; raises :class:`InvalidPlainData`."""
    try:
        tree = json.loads(text)
    except (ValueError, RecursionError, TypeError) as exc:
        raise InvalidPlainData(f"not JSON: {type(exc).__name__}") from None
    return decode(tree)


# -- comparing shapes ------------------------------------------------------------------------------

def _node_kind(value: object) -> str:
    kind = type(value)
    return "number" if kind is int or kind is float else kind.__name__


def same_type_tree(expected: object, actual: object, *, numbers_interchangeable: bool = True) -> bool:
    """Whether two plain values have the same shape: the same type at every node (``bool`` is not
    ``int``, ``list`` is not ``tuple``), the same lengths, the same dict keys and set elements
    (matched by ``==``, then compared by type). With ``numbers_interchangeable``, an ``int`` may
    stand where a ``float`` is expected and the other way round.

    Both values must be plain data (decoded by this module, or built by trusted code).
    """
    if numbers_interchangeable:
        same = _node_kind(expected) == _node_kind(actual)
    else:
        same = type(expected) is type(actual)
    if not same:
        return False
    kind = type(expected)
    if kind is list or kind is tuple:
        return len(expected) == len(actual) and all(
            same_type_tree(e, a, numbers_interchangeable=numbers_interchangeable) for e, a in zip(expected, actual))
    if kind is dict:
        if len(expected) != len(actual):
            return False
        actual_keys = {key: key for key in actual}  # lookup by an equal key returns the stored one
        for key, value in expected.items():
            if key not in actual_keys:
                return False
            other = actual_keys[key]
            if not (same_type_tree(key, other, numbers_interchangeable=False)
                    and same_type_tree(value, actual[other], numbers_interchangeable=numbers_interchangeable)):
                return False
        return True
    if kind is set or kind is frozenset:
        if len(expected) != len(actual):
            return False
        actual_items = {item: item for item in actual}
        return all(item in actual_items and same_type_tree(item, actual_items[item], numbers_interchangeable=False)
                   for item in expected)
    return True
