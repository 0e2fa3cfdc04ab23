"""The identity of a served policy on the wire: one digest over its record, and what differs.

A worker pins the digest resolved at submission; the server refuses any other, and names the
fields that differ when the client sends the full record it expects. The server builds the record
from a verified checkpoint (`inference_server.identity`); everything here is a pure function of
the `IdentityRecord` message, so clients compute the same digest as the server.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from google.protobuf import json_format

from evalfleet.v1 import policy_pb2

PROTOCOL_VERSION = policy_pb2.PROTOCOL_VERSION_1


def canonical_json(value: Any) -> str:
    """The one byte form of a JSON value that hashes are taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def as_dict(record: policy_pb2.IdentityRecord) -> dict[str, Any]:
    """Every field, defaults included, under its .proto name: the form that is hashed and printed."""
    return json_format.MessageToDict(
        record, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def digest(record: policy_pb2.IdentityRecord) -> str:
    return hashlib.sha256(canonical_json(as_dict(record)).encode()).hexdigest()


def differences(expected: policy_pb2.IdentityRecord, actual: policy_pb2.IdentityRecord) -> list[str]:
    """Dotted names of the fields that differ, e.g. ['precision.dtype', 'shard_sha256[b.safetensors]']."""
    return _diff(as_dict(expected), as_dict(actual), "")


def _diff(expected: object, actual: object, prefix: str) -> list[str]:
    if isinstance(expected, dict) and isinstance(actual, dict):
        found: list[str] = []
        for key in sorted(set(expected) | set(actual)):
            name = f"{prefix}[{key}]" if prefix.endswith("sha256") else f"{prefix}.{key}" if prefix else key
            found += _diff(expected.get(key), actual.get(key), name)
        return found
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [d for i, (e, a) in enumerate(zip(expected, actual, strict=True)) for d in _diff(e, a, f"{prefix}[{i}]")]
    return [] if expected == actual else [prefix]


def to_json(record: policy_pb2.IdentityRecord) -> str:
    """The record and its digest as a readable JSON document (what --dry-run prints)."""
    return json.dumps({"digest": digest(record), "identity": as_dict(record)}, indent=2, sort_keys=True)
