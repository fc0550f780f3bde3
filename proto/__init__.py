"""The stram wire contract: generated protobuf and gRPC modules, re-exported."""

from .stram_pb2 import *  # noqa: F401,F403
from . import stram_pb2, stram_pb2_grpc  # noqa: F401
from .stram_pb2_grpc import (  # noqa: F401
    StreamingContainerUmbilicalServicer,
    StreamingContainerUmbilicalStub,
    add_StreamingContainerUmbilicalServicer_to_server,
)

#: gRPC metadata key carrying the caller's credential: a container's own
#: (``container.secret.container_credential``), or the application token.
TOKEN_METADATA_KEY = "stram-token"
#: gRPC metadata key naming the container whose credential the call carries.
CONTAINER_METADATA_KEY = "stram-container"
