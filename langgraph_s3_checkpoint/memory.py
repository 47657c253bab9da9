"""An S3 bucket in memory, for test graphs (and the saver itself) with no server.

The public path of :class:`MemoryBucket`, which lives with the other transports in
:mod:`langgraph_s3_checkpoint._transport.memory_bucket`.
"""

from ._transport.memory_bucket import MemoryBucket

__all__ = ["MemoryBucket"]
