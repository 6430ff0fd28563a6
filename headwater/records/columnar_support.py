"""The compiled kernels' loader and the one array type they take.

Shared by the decoder (``columnar``) and the encoder (``columnar_encode``)
so that neither imports the other.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def kernels() -> Any:
    """The compiled kernels module, imported on first use (it imports numba)."""
    from headwater.records import columnar_kernels

    return columnar_kernels


def readonly(array: Any) -> Any:
    """``array`` as a read-only view: kernels then see one array type whatever the source.

    numba compiles one specialisation per argument type, and writability is
    part of the type: a bytes-backed fetch buffer is read-only, an inflated
    arena is not. One type means one compile (and one cache entry) per kernel.
    """
    view = array.view()
    view.setflags(write=False)
    return view
