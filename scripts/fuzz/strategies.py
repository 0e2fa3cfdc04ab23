"""Hypothesis strategies for fuzzing gRPC services: any protobuf message with hostile field values.

Values sit where validation tends to break: empty and huge strings, unicode and NUL, integers at
the bounds of their wire type, NaN and infinities, unknown enum numbers, and long repeated fields.
The CI fuzz tests (`tests/test_fuzz_*.py`, whose settings profile `tests/conftest.py` loads) and
`python -m scripts.fuzz.long` draw from them.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar, cast

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

# What a server may answer to any request; UNKNOWN and INTERNAL mean an unhandled exception, and
# DEADLINE_EXCEEDED or UNAVAILABLE a hang or a crash.
ALLOWED_CODES = frozenset(
    {
        grpc.StatusCode.OK,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)

M = TypeVar("M", bound=Message)

# Unicode category of lone surrogates, which protobuf refuses to encode client-side.
SURROGATES: tuple[Literal["Cs"]] = ("Cs",)

_BOUNDS = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


def integers(low: int, high: int) -> st.SearchStrategy[int]:
    """Small values, values at and around the type's bounds and the signed-overflow edges, and any."""
    edges = [v for v in (low, high, 0, 1, -1, 2, 2**31 - 1, 2**31, 2**32 - 1, 2**63 - 1, 2**63) if low <= v <= high]
    return st.one_of(
        st.integers(0, 16).filter(lambda v: low <= v <= high), st.sampled_from(edges), st.integers(low, high)
    )


def doubles() -> st.SearchStrategy[float]:
    return st.one_of(st.sampled_from([0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1e308, -1.0]), st.floats())


def texts() -> st.SearchStrategy[str]:
    """Unicode without lone surrogates (protobuf refuses to encode those client-side)."""
    alphabet = st.characters(blacklist_categories=SURROGATES)
    return st.one_of(
        st.sampled_from(["", " ", "\x00", "a b", "..", "../etc", "w1", "{}", "[]", "null", "0" * 64, "é" * 300]),
        st.text(alphabet, max_size=40),
        st.text(alphabet, min_size=300, max_size=70_000).map(lambda s: s[:70_000]),
        st.sampled_from(["[" * 50_000, '{"a":' * 20_000, '{"n": 1' + "0" * 5_000 + "}", '{"a": NaN}', '{"a": 1e999}']),
    )


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in _BOUNDS:
        return integers(*_BOUNDS[kind])
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return doubles() if kind == FieldDescriptor.TYPE_DOUBLE else st.floats(width=32)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_STRING:
        return texts()
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.one_of(st.binary(max_size=200), texts().map(lambda s: s.encode("utf-8")))
    if kind == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None  # set on every enum field
        return st.one_of(st.sampled_from([v.number for v in field.enum_type.values]), integers(-(2**31), 2**31 - 1))
    raise TypeError(f"no strategy for field {field.full_name} of type {kind}")


def messages(
    descriptor: Descriptor, known: dict[str, list[Any]] | None = None, depth: int = 3
) -> st.SearchStrategy[Message]:
    """Any message of this type: every field set or left unset, each with a hostile value.

    ``known`` maps field names to values the server holds (task ids, fencing tokens), so that some
    requests get past the lookups and the hostile values reach the deeper checks.
    """
    known = known or {}
    cls = _message_class(descriptor)
    fields: dict[str, st.SearchStrategy[Any]] = {}

    def scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
        if field.name in known:
            return st.one_of(st.sampled_from(known[field.name]), _scalar(field))
        return _scalar(field)

    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key = scalar(field.message_type.fields_by_name["key"])
            value_field = field.message_type.fields_by_name["value"]
            value = (
                messages(value_field.message_type, known, depth - 1)
                if value_field.message_type
                else scalar(value_field)
            )
            fields[field.name] = st.dictionaries(key, value, max_size=3) if depth > 0 else st.just({})
        elif field.message_type is not None:
            sub = (
                messages(field.message_type, known, depth - 1)
                if depth > 0
                else st.just(_message_class(field.message_type)())
            )
            fields[field.name] = st.lists(sub, max_size=4) if _repeated(field) else sub
        else:
            fields[field.name] = st.lists(scalar(field), max_size=6) if _repeated(field) else scalar(field)
    return st.fixed_dictionaries({}, optional=fields).map(lambda values: _build(cls, descriptor, values))


def messages_of(cls: type[M], known: dict[str, list[Any]] | None = None, depth: int = 3) -> st.SearchStrategy[M]:
    """``messages`` of a generated message class, typed as that class."""
    # A generated class's DESCRIPTOR is upb's descriptor where protobuf runs on upb: the same interface.
    return cast("st.SearchStrategy[M]", messages(cast(Descriptor, cls.DESCRIPTOR), known, depth))


def _repeated(field: FieldDescriptor) -> bool:
    return field.is_repeated


def _build(cls: type[Message], descriptor: Descriptor, values: dict[str, Any]) -> Message:
    """Sets the fields; of a oneof, the last one set wins, as on the wire."""
    message = cls()
    for name, value in values.items():
        field = descriptor.fields_by_name[name]
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            target = getattr(message, name)
            for key, item in value.items():
                if isinstance(item, Message):
                    target[key].CopyFrom(item)
                else:
                    target[key] = item
        elif field.message_type is not None:
            if _repeated(field):
                getattr(message, name).extend(value)
            else:
                getattr(message, name).CopyFrom(value)
        elif _repeated(field):
            getattr(message, name).extend(value)
        else:
            setattr(message, name, value)
    return message


def _message_class(descriptor: Descriptor) -> type[Message]:
    return message_factory.GetMessageClass(descriptor)


def status_of(call: Any) -> tuple[grpc.StatusCode, str]:
    """Runs a unary call; returns its status code and details (OK and "" on success)."""
    try:
        call()
    except grpc.RpcError as error:
        return error.code(), error.details() or ""
    return grpc.StatusCode.OK, ""
