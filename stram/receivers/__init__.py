"""Receivers: push-based sources run as input operators, with blocks, backpressure and a write-ahead log.

This follows Spark Streaming's receiver path (ReceiverSupervisor → BlockGenerator
→ block handler / write-ahead log), fitted to stram's windows::

    receiver thread --store()--> BlockGenerator --every BLOCK_INTERVAL_MILLIS--> bounded queue
                                                                                      |
           pushing thread: WAL write, hand the block over, on_block_stored() (ack) |
                                                                                      v
    output port <--emit_tuples()-- ready blocks <-------------------------------------+

* A :class:`Receiver` is an input operator: ``class: stram.receivers:SocketTextReceiver``
  goes straight into a spec. Its code implements ``on_start()`` (must not block:
  start a thread) and ``on_stop()``, and calls ``store``/``store_many`` from its
  own threads, ``restart(reason, error)`` when the source breaks and
  ``stop(reason)`` when it is done.
* The :class:`ReceiverSupervisor` runs ``on_start``/``on_stop`` on its own thread
  and restarts the receiver with a doubling backoff; past
  ``RECEIVER_MAX_RESTARTS`` failures in a row the operator raises
  :class:`~stram.operator.FatalError` and the application fails.
* The :class:`BlockGenerator` cuts stored items into blocks; at most
  ``block_queue_capacity`` blocks wait between cutting and emission, beyond that
  ``store`` blocks (backpressure, never a drop).
* With ``RECEIVER_WAL`` on, the :class:`WriteAheadLog` keeps every block in
  ``APP_PATH/wal/<operator id>/<block seq>`` before it is acknowledged or
  emitted, and records which window emitted which blocks. A redeployed receiver
  re-emits exactly those blocks in exactly those windows after its checkpoint,
  then the blocks it had stored but not emitted, and only then restarts the
  source: with ``PROCESSING_MODE: EXACTLY_ONCE`` every acknowledged item
  reaches the outputs once.

The package is split by what runs where: ``blocks`` (:class:`Block`,
:class:`BlockGenerator`), ``wal`` (:class:`WriteAheadLog`), ``supervisor``
(:class:`ReceiverSupervisor`), ``operator`` (:class:`Receiver`,
:class:`ReceiverInputOperator` and their runtime) and ``builtin``
(:class:`SocketTextReceiver`, :class:`DirectoryReceiver`). The names below are
the public API; import them, and name receivers in specs, from here.
"""

# Not sorted: the operator classes are bound in their old definition order, the order in which
# a spec naming a missing class here lists "operators there" (tests/unit/spec/test_spec.py pins it).
from stram.receivers.blocks import Block, BlockGenerator, GeneratorStopped
from stram.receivers.operator import ReceiverInputOperator, Receiver
from stram.receivers.builtin import SocketTextReceiver, DirectoryReceiver
from stram.receivers.supervisor import ReceiverSupervisor, SupervisorState
from stram.receivers.wal import WriteAheadLog

__all__ = [
    "Block",
    "BlockGenerator",
    "GeneratorStopped",
    "WriteAheadLog",
    "SupervisorState",
    "ReceiverSupervisor",
    "ReceiverInputOperator",
    "Receiver",
    "SocketTextReceiver",
    "DirectoryReceiver",
]
