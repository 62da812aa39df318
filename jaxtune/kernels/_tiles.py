"""Block sizes Mosaic accepts along one dimension of an array.

Mosaic TPU lays an array out in tiles of 8 sublanes by 128 lanes, and a Pallas block's last
two dimensions must be multiples of them or span the array (the (8, 128) rule). The tuned
kernels here take whole blocks only (each block size divides its dimension), from the powers
of two between 128 and 2048 that divide it, or the whole dimension where none does.

They also keep what a kernel holds in VMEM within :data:`VMEM`, the scope Mosaic gives a
kernel unless it asks for more.
"""

from __future__ import annotations

__all__ = ["LANES", "SIZES", "SUBLANES", "VMEM", "blocks", "lane_block", "sublane_block"]

#: The candidate block sizes, smallest first: the space's order, so that its first config
#: (the fallback default) has the smallest blocks.
SIZES = (128, 256, 512, 1024, 2048)
#: Mosaic's tile: 8 sublanes (second-to-last dimension) by 128 lanes (last dimension).
SUBLANES = 8
LANES = 128
#: The most bytes of blocks a config may keep in VMEM (16 MiB: the scoped VMEM Mosaic gives a
#: kernel by default on a TPU v5e).
VMEM = 16 << 20


def blocks(dim: int) -> tuple[int, ...]:
    """The block sizes a space offers along a dimension of ``dim``: those of :data:`SIZES`
    that divide it, else ``dim`` itself (a block spanning the array is always legal)."""
    fits = tuple(b for b in SIZES if b <= dim and dim % b == 0)
    return fits or (dim,)


def lane_block(block: int, dim: int) -> bool:
    """Whether ``block`` is a legal whole block along a last (lane) dimension of ``dim``."""
    return block > 0 and dim % block == 0 and (block == dim or block % LANES == 0)


def sublane_block(block: int, dim: int) -> bool:
    """Whether ``block`` is a legal whole block along a second-to-last (sublane) dimension
    of ``dim``."""
    return block > 0 and dim % block == 0 and (block == dim or block % SUBLANES == 0)
