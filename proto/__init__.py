"""The stram wire contract: generated protobuf and gRPC modules, re-exported."""

from .stram_pb2 import *  # noqa: F401,F403
from . import stram_pb2, stram_pb2_grpc  # noqa: F401
from .stram_pb2_grpc import (  # noqa: F401
    StreamingContainerUmbilicalServicer,
    StreamingContainerUmbilicalStub,
    add_StreamingContainerUmbilicalServicer_to_server,
)

#: gRPC metadata key carrying the application token.
TOKEN_METADATA_KEY = "stram-token"
