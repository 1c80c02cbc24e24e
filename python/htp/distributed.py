"""A node's shared tier from torch.distributed's environment: one process per GPU (torchrun).

``tier = htp.distributed.node_tier("8GiB")`` opens the node's :class:`htp.SharedTier`: every
process of one node (torchrun's ``GROUP_RANK``) gets the same segment, every node its own, so
``htp.torch.offload(model, budget, tier=tier, tier_prefix=f"rank{rank}/")`` holds each rank's
weights once per node in shared memory. See docs/python.md, "A process per GPU (torchrun)".

Only the environment variables of the ``env://`` rendezvous are read (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``); the
process group itself is not needed.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from ._htp import InvalidArgumentError, SharedTier

__all__ = ["Placement", "node_tier", "placement", "tier_name"]


@dataclass(frozen=True)
class Placement:
    """Where this process is in a torchrun job."""
    rank: int              # in the world
    local_rank: int        # on its node
    world_size: int
    local_world_size: int  # processes on its node
    node: int              # the node's index (GROUP_RANK)


def _int_env(name: str, default: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        if default is not None:
            return default
        raise InvalidArgumentError(
            f"htp.distributed: {name} is not set; run under torchrun (python -m "
            "torch.distributed.run), which sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, "
            "GROUP_RANK, MASTER_ADDR and MASTER_PORT")
    try:
        return int(value)
    except ValueError:
        raise InvalidArgumentError(f"htp.distributed: {name}={value!r} is not an integer") from None


def placement() -> Placement:
    """This process's rank, local rank, world and local world sizes and node index, from torchrun's
    environment (a single process without torchrun is rank 0 of 1 on node 0)."""
    world = _int_env("WORLD_SIZE", 1)
    local_world = _int_env("LOCAL_WORLD_SIZE", world)
    return Placement(rank=_int_env("RANK", 0), local_rank=_int_env("LOCAL_RANK", 0),
                     world_size=world, local_world_size=local_world,
                     node=_int_env("GROUP_RANK", 0))


def tier_name() -> str:
    """The node's tier name: ``HTP_TIER`` when set, else one made of the job's rendezvous address
    (``MASTER_ADDR``, ``MASTER_PORT``) and the node's index (``GROUP_RANK``), so every process of
    a node agrees on it, two jobs do not collide, and two nodes simulated on one machine get two
    tiers."""
    explicit = os.environ.get("HTP_TIER")
    if explicit:
        return explicit
    addr = os.environ.get("MASTER_ADDR")
    port = os.environ.get("MASTER_PORT")
    if not addr or not port:
        raise InvalidArgumentError(
            "htp.distributed.node_tier: MASTER_ADDR and MASTER_PORT are not set, so the node's "
            "tier has no name every process would agree on; run under torchrun, set HTP_TIER, or "
            "pass name=")
    node = _int_env("GROUP_RANK", 0)
    safe_addr = re.sub(r"[^A-Za-z0-9._-]", "_", addr)[:120]
    return f"torchrun-{safe_addr}-{port}-node{node}"


def node_tier(bytes: int | str, name: str | None = None, **opts: Any) -> SharedTier:
    """Opens (creates or attaches to) this node's :class:`htp.SharedTier` of ``bytes`` for
    entries. ``name``: default :func:`tier_name`. ``opts``: SharedTier's other arguments
    (``page_bytes``, ``max_entries``, ``lock_in_memory``, ``timeout_ms``, ``shm_dir``); every
    process of the node must pass the same ``bytes`` and ``page_bytes``."""
    return SharedTier(name if name is not None else tier_name(), bytes, **opts)
