"""Arrays on the policy wire: numpy arrays to `Tensor` messages and back, for clients and the server.

Images travel as C-contiguous bytes with a dtype and a shape: decoding is a zero-copy
`np.frombuffer`, and nothing from the network is ever unpickled. A malformed tensor is refused with
the exact field at fault.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from evalfleet.policy_api.errors import InvalidField
from evalfleet.v1 import policy_pb2

# Only plain numeric dtypes may cross the wire; object or structured dtypes never do.
WIRE_DTYPES = {
    name: np.dtype(name)
    for name in ("uint8", "uint16", "int16", "int32", "int64", "float16", "float32", "float64", "bool")
}


def encode(array: npt.NDArray[np.generic]) -> policy_pb2.Tensor:
    array = np.ascontiguousarray(array)
    if array.dtype.name not in WIRE_DTYPES:
        raise ValueError(f"dtype {array.dtype} cannot travel as a Tensor")
    return policy_pb2.Tensor(dtype=array.dtype.name, shape=array.shape, data=array.tobytes())


def decode(tensor: policy_pb2.Tensor, field: str = "tensor") -> npt.NDArray[Any]:
    """The array a Tensor carries (read-only view of the message bytes), of the dtype it names."""
    if tensor.dtype not in WIRE_DTYPES:
        raise InvalidField(f"dtype {tensor.dtype!r} is not one of {sorted(WIRE_DTYPES)}", field=f"{field}.dtype")
    dtype = WIRE_DTYPES[tensor.dtype]
    shape = tuple(tensor.shape)
    expected = math.prod(shape) * dtype.itemsize
    data = tensor.data  # each access copies the bytes out of the message: read it once
    if len(data) != expected:
        raise InvalidField(
            f"{len(data)} bytes do not hold shape {list(shape)} of {tensor.dtype} ({expected} bytes)",
            field=f"{field}.data",
        )
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def observation_request(
    step: int, executed: int, images: Mapping[str, npt.NDArray[np.generic]], state: Mapping[str, npt.ArrayLike]
) -> policy_pb2.SessionRequest:
    """The wire form of one observation (client side), written in place: building sub-messages
    and then embedding them would copy every image once more, which costs more than the send.
    Each state entry (an array as the benchmark observed it, or a sequence) is flattened to float64
    here, once, as it goes into the message."""
    request = policy_pb2.SessionRequest()
    message = request.observation
    message.step = step
    message.executed = executed
    for name, image in images.items():
        array = np.ascontiguousarray(image)
        if array.dtype.name not in WIRE_DTYPES:
            raise ValueError(f"camera {name}: dtype {array.dtype} cannot travel as a Tensor")
        tensor = message.images[name]
        tensor.dtype = array.dtype.name
        tensor.shape.extend(array.shape)
        tensor.data = array.tobytes()
    for name, values in state.items():
        message.state[name].values.extend(np.asarray(values, dtype=np.float64).ravel().tolist())
    return request
