"""The stram wire contract: generated protobuf and gRPC modules, re-exported."""

from . import stram_pb2, stram_pb2_grpc  # noqa: F401
from .stram_pb2 import *  # noqa: F401,F403
from .stram_pb2_grpc import (StreamingContainerUmbilicalServicer, StreamingContainerUmbilicalStub,  # noqa: F401
                             add_StreamingContainerUmbilicalServicer_to_server)

#: How a master that cannot take calls for a while (its journal waits for disk space, or it is
#: taking over the previous attempt's containers) begins the details of its UNAVAILABLE
#: refusal: an agent that reads it retries and counts no failure.
PAUSED = "paused:"

#: gRPC metadata key carrying the caller's credential: a container's own
#: (``stram.common.secret.container_credential``), or the application token.
TOKEN_METADATA_KEY = "stram-token"
#: gRPC metadata key naming the container whose credential the call carries.
CONTAINER_METADATA_KEY = "stram-container"
