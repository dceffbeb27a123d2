"""The plain-data codec: exact round trips of every plain type, refusal of everything else (both
when encoding inside the sandbox and when decoding on the host), and the type-tree comparison."""

from __future__ import annotations

import json
import math

import pytest

from sandbox import plain_data
from sandbox.plain_data import InvalidPlainData, NotPlainData, decode, dumps, encode, loads, same_type_tree

ROUND_TRIPS = [
    None, True, False, 0, -7, 2**200, -(2**plain_data.MAX_INT_BITS - 1), 0.1, -0.0, 1e308, 5e-324,
    float("inf"), float("-inf"), "", "héllo \u2603 \ud800", b"", b"\x00\xffbytes", [], (), {}, set(), frozenset(),
    [1, [2, (3, "x")], {"k": [None, b"b"]}], (1,), {(1, "a"): {2.5: frozenset({(1, 2)})}, None: set([1, "1"])},
    {True: "bool key", 2: "int key"}, [[[]]] * 3,
]


@pytest.mark.parametrize("value", ROUND_TRIPS, ids=lambda v: type(v).__name__)
def test_round_trip_is_exact_in_value_and_type(value):
    back = loads(dumps(value))
    assert back == value and same_type_tree(value, back, numbers_interchangeable=False)
    assert repr(back) == repr(value)  # -0.0 stays -0.0, tuple stays tuple, bool stays bool


def test_nan_round_trips():
    assert math.isnan(loads(dumps(float("nan"))))
    assert dumps(float("nan")) == '["float","nan"]'


class _Spy:
    touched: list = []

    def __eq__(self, other):
        _Spy.touched.append("eq")
        return True

    def __hash__(self):
        _Spy.touched.append("hash")
        return 0

    def __iter__(self):
        _Spy.touched.append("iter")
        return iter(())

    def __repr__(self):
        _Spy.touched.append("repr")
        return "spy"


class _Int(int):
    pass


class _Str(str):
    pass


class _List(list):
    pass


class _Dict(dict):
    pass


class _Float(float):
    pass


class _Tuple(tuple):
    pass


@pytest.mark.parametrize("value", [
    _Int(1), _Str("a"), _List(), _Dict(), _Float(1.0), _Tuple(), object(), _Spy(), [_Spy()], {"k": _Spy()},
    {_Spy(): 1}, (x for x in ()), iter([]), range(3), bytearray(b"x"), complex(1, 2), type, print, Ellipsis,
    NotImplemented, 2**plain_data.MAX_INT_BITS,
], ids=lambda v: type(v).__name__)
def test_encode_refuses_what_is_not_plain_data_without_calling_its_methods(value):
    _Spy.touched.clear()
    with pytest.raises(NotPlainData):
        encode(value)
    assert _Spy.touched == []


def test_encode_bounds_depth_and_size():
    deep: list = []
    for _ in range(plain_data.MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(NotPlainData, match="deeper"):
        encode(deep)
    with pytest.raises(NotPlainData, match="more than"):
        encode([0] * (plain_data.MAX_NODES + 1))
    nested = []
    for _ in range(plain_data.MAX_DEPTH - 1):
        nested = [nested]
    assert decode(encode(nested)) == nested


@pytest.mark.parametrize("tree", [
    "x", [], ["int"], ["int", 1, 2], [1, 2], ["object", []], ["int", 5], ["int", True], ["int", "01"], ["int", "+1"],
    ["int", " 1"], ["int", "1_000"], ["int", "1" * 5000], ["int", "-"], ["bool", 1], ["bool", "true"],
    ["NoneType", 0], ["float", 1.5], ["float", "1.5g"], ["float", "0x1.8p1"], ["float", "-nan"], ["float", "x" * 100], ["str", 1], ["str", None],
    ["bytes", "not base64!"], ["list", "ab"], ["tuple", {"a": 1}], ["dict", [["int", "1"]]], ["dict", [[["int", "1"]]]],
    ["dict", [[["list", []], ["int", "1"]]]], ["dict", [[["int", "1"], ["str", "a"]], [["bool", True], ["str", "b"]]]],
    ["set", [["int", "1"], ["int", "1"]]], ["set", [["list", []]]], ["frozenset", [["bool", True], ["int", "1"]]],
    ["list", [["int", "1"], ["unknown", None]]],
], ids=repr)
def test_decode_refuses_invalid_trees(tree):
    with pytest.raises(InvalidPlainData):
        decode(tree)


def test_decode_bounds_depth_nodes_and_refuses_non_json():
    tree: list = ["NoneType", None]
    for _ in range(plain_data.MAX_DEPTH + 1):
        tree = ["list", [tree]]
    with pytest.raises(InvalidPlainData, match="deeper"):
        decode(tree)
    with pytest.raises(InvalidPlainData, match="more than"):
        decode(["list", [["NoneType", None]] * (plain_data.MAX_NODES + 1)])
    for text in ("", "{", "[" * 100_000 + "]" * 100_000, "NaN", b"\xff\xfe", '["int", 1e999999]'):
        with pytest.raises(InvalidPlainData):
            loads(text)


def test_decoded_values_are_exact_builtins_only():
    value = loads(json.dumps(["list", [["dict", [[["str", "k"], ["tuple", [["set", [["int", "3"]]]]]]]]]]))
    assert type(value) is list and type(value[0]) is dict and type(value[0]["k"]) is tuple
    assert type(value[0]["k"][0]) is set and type(next(iter(value[0]["k"][0]))) is int


@pytest.mark.parametrize("expected, actual, same", [
    (1, 1, True), (1, 1.0, True), (1.5, 2, True), (True, 1, False), (1, True, False), (0.0, False, False),
    (None, None, True), (None, 0, False), ("a", b"a", False), ([1, 2], (1, 2), False), ([1, 2], [1, 2.0], True),
    ([1, 2], [1], False), ([1, 2], [1, True], False), ((0, 1), (0, 1), True), ({"a": 1}, {"a": 2.0}, True),
    ({1: "a"}, {True: "a"}, False), ({1: "a"}, {1.0: "a"}, False), ({"a": 1}, {"b": 1}, False), ({1}, {True}, False),
    ({1, 2}, {1, 2}, True), (frozenset({1}), {1}, False), ([[1], {"k": (None,)}], [[2], {"k": (None,)}], True),
    ([[1], {"k": (None,)}], [[2], {"k": [None]}], False),
])
def test_same_type_tree(expected, actual, same):
    assert same_type_tree(expected, actual) is same


def test_numbers_interchangeable_can_be_turned_off():
    assert not same_type_tree(1, 1.0, numbers_interchangeable=False)
    assert same_type_tree([1.0], [2.0], numbers_interchangeable=False)
