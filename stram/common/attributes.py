"""The table of DAG, operator and port attributes: names, types, defaults and checks."""

from __future__ import annotations

import copy
import difflib
import enum
import re
from dataclasses import dataclass
from typing import Any

import yaml

__all__ = [
    "Scope",
    "Kind",
    "Attribute",
    "ATTRIBUTES",
    "ALIASES",
    "PROCESSING_MODES",
    "AFFINITY_TYPES",
    "AFFINITY_LOCALITIES",
    "affinity_rule",
    "canonical_name",
    "coerce_attribute",
    "default",
    "names",
]


class Scope(str, enum.Enum):
    """Where an attribute may be set in a spec."""

    #: Top-level ``attributes``.
    DAG = "dag"
    #: ``operators.<op>.attributes``.
    OPERATOR = "operator"
    #: ``operators.<op>.port_attributes.<input port>``.
    INPUT_PORT = "input_port"
    #: ``operators.<op>.port_attributes.<output port>``.
    OUTPUT_PORT = "output_port"


class Kind(str, enum.Enum):
    """Value types of attributes."""

    INT = "int"
    BOOL = "bool"
    STR = "str"
    CHOICE = "choice"
    STR_LIST = "str_list"
    #: A ``"module:function"`` reference.
    REF = "ref"
    #: A list of placement rules (``AFFINITY_RULES``): mappings checked by :func:`affinity_rule`.
    RULES = "rules"


#: Values of ``PROCESSING_MODE``.
PROCESSING_MODES = ("AT_LEAST_ONCE", "AT_MOST_ONCE", "EXACTLY_ONCE")
#: Types and localities of an ``AFFINITY_RULES`` rule, and its keys.
AFFINITY_TYPES = ("AFFINITY", "ANTI_AFFINITY")
AFFINITY_LOCALITIES = ("NODE_LOCAL", "CONTAINER_LOCAL")
AFFINITY_KEYS = ("type", "locality", "operators", "regex", "relax")

_DAG = frozenset({Scope.DAG})
_DAG_OP = frozenset({Scope.DAG, Scope.OPERATOR})
_OP = frozenset({Scope.OPERATOR})
_IN = frozenset({Scope.INPUT_PORT})

_NULL_STRINGS = ("null", "none", "~")
_TRUE_STRINGS = ("true", "yes", "on", "1")
_FALSE_STRINGS = ("false", "no", "off", "0")
_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
_REF_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
                     r":[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


@dataclass(frozen=True)
class Attribute:
    """One known attribute.

    Parameters
    ----------
    name:
        Apex name, upper case.
    kind:
        Value type.
    default:
        Value when nobody sets it (``None``: unset / unlimited).
    description:
        One line for help and docs.
    scopes:
        Where it may be set.
    minimum:
        Smallest allowed value of an ``INT`` attribute.
    maximum:
        Largest allowed value of an ``INT`` attribute (None: no bound).
    nullable:
        ``null`` is a valid value (meaning given in ``null_means``).
    choices:
        Allowed values of a ``CHOICE`` attribute.
    null_means:
        What ``null`` stands for, shown in error messages.
    """

    name: str
    kind: Kind
    default: Any
    description: str
    scopes: frozenset[Scope]
    minimum: int | None = None
    maximum: int | None = None
    nullable: bool = False
    choices: tuple[str, ...] = ()
    null_means: str = ""

    @property
    def expected(self) -> str:
        """What a valid value looks like, in words (used in error messages)."""
        if self.kind is Kind.INT:
            text = "an integer"
            if self.minimum is not None and self.maximum is not None:
                text += f" from {self.minimum} to {self.maximum}"
            elif self.minimum is not None:
                text += " > 0" if self.minimum == 1 else f" >= {self.minimum}"
        elif self.kind is Kind.BOOL:
            text = "true or false"
        elif self.kind is Kind.CHOICE:
            text = "one of " + ", ".join(self.choices)
        elif self.kind is Kind.STR_LIST:
            text = "a list of strings"
        elif self.kind is Kind.REF:
            text = "a 'module:function' reference"
        elif self.kind is Kind.RULES:
            text = "a list of rules {type, operators or regex, locality, relax}"
        else:
            text = "a non-empty string"
        if self.nullable:
            text += " or null" + (f" ({self.null_means})" if self.null_means else "")
        return text

    def coerce(self, value: Any) -> Any:
        """Check ``value`` and convert it to this attribute's type.

        Strings (as given with ``-D``) are converted: ``"200"`` to 200,
        ``"true"`` to True, ``"exactly_once"`` to ``"EXACTLY_ONCE"``,
        ``"a,b"`` to ``["a", "b"]``, ``"null"`` to None where null is allowed.

        Raises
        ------
        ValueError
            With the reason, e.g. ``expected an integer > 0, got -5``.
        """
        if value is None or (isinstance(value, str) and self.nullable
                             and value.strip().lower() in _NULL_STRINGS):
            if self.nullable:
                return None
            raise self._bad(value)
        convert = {
            Kind.INT: self._coerce_int,
            Kind.BOOL: self._coerce_bool,
            Kind.STR: self._coerce_str,
            Kind.CHOICE: self._coerce_choice,
            Kind.STR_LIST: self._coerce_str_list,
            Kind.REF: self._coerce_ref,
            Kind.RULES: self._coerce_rules,
        }[self.kind]
        return convert(value)

    # -- per kind ----------------------------------------------------------
    def _bad(self, value: Any) -> ValueError:
        return ValueError(f"expected {self.expected}, got {show(value)}")

    def _coerce_int(self, value: Any) -> int:
        if isinstance(value, str) and _INT_RE.match(value.strip()):
            number = int(value.strip())
        elif isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            raise self._bad(value)
        if (self.minimum is not None and number < self.minimum) or (self.maximum is not None and number > self.maximum):
            raise self._bad(value)
        return number

    def _coerce_bool(self, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            text = value.strip().lower()
            if text in _TRUE_STRINGS:
                return True
            if text in _FALSE_STRINGS:
                return False
        raise self._bad(value)

    def _coerce_str(self, value: Any) -> str:
        if isinstance(value, str) and value.strip():
            return value.strip()
        raise self._bad(value)

    def _coerce_choice(self, value: Any) -> str:
        if isinstance(value, str):
            text = value.strip().upper()
            if text in self.choices:
                return text
        raise self._bad(value)

    def _coerce_str_list(self, value: Any) -> list[str]:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    value = yaml.safe_load(text)
                except yaml.YAMLError:
                    raise self._bad(value) from None
            else:
                value = [part.strip() for part in text.split(",") if part.strip()]
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value):
            return list(value)
        raise self._bad(value)

    def _coerce_ref(self, value: Any) -> str:
        if isinstance(value, str) and _REF_RE.match(value.strip()):
            return value.strip()
        raise self._bad(value)

    def _coerce_rules(self, value: Any) -> list[dict[str, Any]]:
        if isinstance(value, str):  # -D AFFINITY_RULES='[{type: ANTI_AFFINITY, operators: [a, b]}]'
            try:
                value = yaml.safe_load(value)
            except yaml.YAMLError:
                raise self._bad(value) from None
        if value is None:
            return []
        if not isinstance(value, (list, tuple)):
            raise self._bad(value)
        rules = []
        for i, item in enumerate(value):
            try:
                rules.append(affinity_rule(item))
            except ValueError as exc:
                raise ValueError(f"rule {i}: {exc}") from None
        return rules


def show(value: Any) -> str:
    """A short rendering of a value for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def affinity_rule(item: Any) -> dict[str, Any]:
    """One ``AFFINITY_RULES`` rule checked and completed: ``type`` (AFFINITY or ANTI_AFFINITY),
    ``locality`` (NODE_LOCAL, the default, or CONTAINER_LOCAL), ``operators`` (a list of operator
    names) or ``regex`` (matched in full against the operator names), ``relax`` (default true).

    Raises
    ------
    ValueError
        What is wrong with it (the operators it names are checked with the spec's graph).
    """
    if not isinstance(item, dict):
        raise ValueError(f"expected a mapping with type and operators or regex, got {show(item)}")
    unknown = [k for k in item if k not in AFFINITY_KEYS]
    if unknown:
        raise ValueError(f"unknown key {show(unknown[0])} (known: {', '.join(AFFINITY_KEYS)})")
    kind = item.get("type")
    if not isinstance(kind, str) or kind.strip().upper() not in AFFINITY_TYPES:
        raise ValueError(f"'type' must be one of {', '.join(AFFINITY_TYPES)}, got {show(kind)}")
    locality = item.get("locality", "NODE_LOCAL")
    if not isinstance(locality, str) or locality.strip().upper() not in AFFINITY_LOCALITIES:
        raise ValueError(f"'locality' must be one of {', '.join(AFFINITY_LOCALITIES)}, got {show(locality)}")
    relax = item.get("relax", True)
    if not isinstance(relax, bool):
        raise ValueError(f"'relax' must be true or false, got {show(relax)}")
    rule: dict[str, Any] = {"type": kind.strip().upper(), "locality": locality.strip().upper()}
    if ("operators" in item) == ("regex" in item):
        raise ValueError("give either 'operators' (a list of operator names) or 'regex', not both or neither")
    if "operators" in item:
        names = item["operators"]
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"'operators' must be a non-empty list of operator names, got {show(item['operators'])}")
        if len(set(names)) != len(names):
            raise ValueError(f"'operators' names an operator twice: {show(names)}")
        rule["operators"] = list(names)
    else:
        regex = item["regex"]
        try:
            re.compile(regex)
        except (re.error, TypeError) as exc:
            raise ValueError(f"'regex' must be a regular expression, got {show(regex)} ({exc})") from None
        rule["regex"] = regex
    rule["relax"] = relax
    return rule


def _int(name: str, default: int | None, description: str, scopes: frozenset[Scope],
         minimum: int = 1, null_means: str = "", maximum: int | None = None) -> Attribute:
    return Attribute(name, Kind.INT, default, description, scopes, minimum=minimum, maximum=maximum,
                     nullable=bool(null_means), null_means=null_means)


def _table(*attributes: Attribute) -> dict[str, Attribute]:
    return {a.name: a for a in attributes}


#: Every known attribute by name. Defaults follow Apache Apex where Apex has one.
ATTRIBUTES: dict[str, Attribute] = _table(
    _int("STREAMING_WINDOW_SIZE_MILLIS", 500, "Length of a streaming window.", _DAG),
    _int("HEARTBEAT_INTERVAL_MILLIS", 1000, "Interval of container heartbeats to the master.",
         _DAG),
    _int("HEARTBEAT_TIMEOUT_MILLIS", 30000,
         "A container silent this long is considered lost.", _DAG),
    _int("HEARTBEAT_MAX_INTERVAL_MILLIS", None,
         "Longest heartbeat interval the master asks for while it cannot keep up with its containers' "
         "heartbeats (stram.master.core.pacing); HEARTBEAT_INTERVAL_MILLIS keeps the interval fixed.", _DAG,
         null_means="a third of HEARTBEAT_TIMEOUT_MILLIS"),
    _int("UMBILICAL_PROCESS_MIN_CONTAINERS", 500,
         "Containers from which the master serves its umbilical (the containers' gRPC calls) from a "
         "process of its own beside its state (stram.master.umbilical.front): the gRPC side of the answers then "
         "takes none of the master's interpreter.", _DAG, null_means="never"),
    _int("CHECKPOINT_WINDOW_COUNT", 60, "Windows between two checkpoints of an operator.",
         _DAG_OP),
    _int("TIMEOUT_WINDOW_COUNT", 120,
         "Windows an operator may take for one window before it is considered stuck.", _DAG_OP),
    Attribute("PROCESSING_MODE", Kind.CHOICE, "AT_LEAST_ONCE",
              "Delivery guarantee after a failure.", _DAG_OP, choices=PROCESSING_MODES),
    _int("RECOVERY_ATTEMPTS", None,
         "Failures of one operator before the application fails.", _DAG_OP, minimum=0,
         null_means="no limit"),
    Attribute("RETRY_DETERMINISTIC_FAILURES", Kind.BOOL, False,
              "Keep restarting an operator that failed twice at the same window with the same "
              "error (false: the application fails, naming it).", _DAG_OP),
    _int("BUFFER_MEMORY_MB", 64,
         "Buffer-server memory per publisher before windows spill to disk.", _DAG),
    _int("BUFFER_LAG_MB", 64,
         "Flow control: a publisher waits while a subscriber that is reading is more than this many "
         "MiB of its stream behind, so a fast upstream runs at its slowest downstream's pace instead of "
         "filling memory and disk; a subscriber that took nothing for a second holds nobody back.",
         _DAG, null_means="no flow control"),
    _int("QUEUE_CAPACITY", 32768,
         "Tuples an operator's input queue holds (CONTAINER_LOCAL streams and tuples from the buffer "
         "server; a control tuple counts one, an Arrow record batch its rows) before its upstream "
         "waits, until the queue is half drained. Smaller: less memory, but a throttled input "
         "operator spreads its data over more windows.", _DAG_OP, minimum=2),
    _int("DISK_FULL_TIMEOUT_SECS", 300,
         "Seconds a write that fails for want of space (ENOSPC, EDQUOT, an HDFS quota: the journal, "
         "status, containers' credentials, checkpoints, the built-in outputs) is retried while the "
         "application pauses and says why; then the application fails with that diagnostic.", _DAG, minimum=1),
    _int("END_TIMEOUT_SECS", 600,
         "Seconds the master waits, once the application ended, for containers still ending their "
         "operators (an output making its last committed windows final; they say so in heartbeats). "
         "A container stopped while still ending makes a SUCCEEDED application FAILED, naming it.",
         _DAG, minimum=1),
    Attribute("TLS", Kind.BOOL, None,
              "Encrypt the umbilical and buffer-server connections with TLS under the application's "
              "own key and certificate, which the master makes (docs/security.md).", _DAG,
              nullable=True, null_means="on YARN, off locally"),
    Attribute("BUFFER_SPOOLING", Kind.BOOL, True,
              "Spill buffer-server windows to local disk beyond BUFFER_MEMORY_MB "
              "(false: block the publisher).", _DAG),
    Attribute("WATERMARK_ALIGNMENT_GROUP", Kind.STR, None,
              "Watermark alignment (Flink's): an input operator in a group pauses, emitting empty windows, "
              "while its watermark is more than WATERMARK_MAX_DRIFT_MILLIS ahead of the lowest watermark of "
              "the group's other input operators, so a source far ahead in event time (a join's faster "
              "side) does not fill the state downstream (docs/event-time.md).", _OP,
              nullable=True, null_means="not aligned"),
    _int("WATERMARK_MAX_DRIFT_MILLIS", 10_000,
         "Watermark alignment: how far, in event time, an input operator of a WATERMARK_ALIGNMENT_GROUP may "
         "run ahead of the slowest other one of its group (as the master last heard from them).", _DAG_OP,
         minimum=0),
    _int("CONTAINERS_MAX_COUNT", None, "Most containers the application may hold: operators are "
         "packed into this many (MAX_CONTAINERS refuses instead).", _DAG, null_means="no limit"),
    _int("MAX_CONTAINERS", 2000, "Most containers a plan may need (after CONTAINERS_MAX_COUNT's "
         "packing); a bigger one is refused before anything starts.", _DAG, maximum=100_000),
    _int("MAX_PHYSICAL_OPERATORS", 20_000, "Most physical operators (partitions and unifiers) a plan "
         "may have; a bigger one is refused before anything starts.", _DAG, maximum=1_000_000),
    _int("MASTER_ATTEMPTS", 2, "Attempts of the application master: one that dies without a final "
         "state is started again (resuming from its journal) until this many (YARN max_attempts; "
         "locally the supervisor, waiting longer between attempts each time).", _DAG, maximum=20),
    _int("MASTER_MEMORY_MB", 1024, "Memory of the application master's container.", _DAG),
    _int("MASTER_VCORES", 1, "Virtual cores of the application master's container.", _DAG),
    _int("CONTAINER_MEMORY_MB", 1024,
         "Memory of an operator's container (operator alias: MEMORY_MB).", _DAG_OP),
    _int("VCORES", 1, "Virtual cores of an operator's container.", _DAG_OP),
    Attribute("LOCALITY_HOST", Kind.STR, None,
              "Preferred host of the operator's container.", _OP),
    Attribute("QUEUE", Kind.STR, "default", "YARN queue the application is submitted to.",
              _DAG),
    Attribute("APPLICATION_TAGS", Kind.STR_LIST, [], "YARN application tags.", _DAG),
    _int("BLOCK_INTERVAL_MILLIS", 200, "Receivers cut stored items into blocks this often.",
         _DAG_OP),
    Attribute("RECEIVER_WAL", Kind.BOOL, False,
              "Receivers write blocks to a write-ahead log under APP_PATH before "
              "acknowledging them.", _DAG_OP),
    _int("RECEIVER_MAX_RESTARTS", 10, "Restarts of a failing receiver before it gives up.",
         _DAG_OP, minimum=0),
    Attribute("STATS_LISTENER", Kind.REF, None,
              "'module:function' called by the master with each window's stats.", _DAG,
              nullable=True, null_means="none"),
    Attribute("DEBUG", Kind.BOOL, False, "Verbose logging in the master and containers.",
              _DAG),
    Attribute("PARTITION_PARALLEL", Kind.BOOL, False,
              "Partition the operator like the upstream operator feeding this input port "
              "(one partition per upstream partition, no unifier).", _IN),
    Attribute("AFFINITY_RULES", Kind.RULES, [],
              "Placement rules between operators: AFFINITY (same node, or CONTAINER_LOCAL: same "
              "container) or ANTI_AFFINITY (distinct nodes) of the operators listed (or matching a "
              "regex; one operator: its partitions), relax: false to fail rather than place otherwise "
              "(docs/applications.md, Placement).", _DAG),
    Attribute("NODE_LABEL", Kind.STR, None,
              "YARN node label the operator's container must run on (a node label expression).", _OP,
              nullable=True, null_means="any node"),
    # many nodes (docs/running-on-yarn.md "Many nodes")
    _int("MAX_CONSECUTIVE_CONTAINER_FAILURES_FOR_BLACKLIST", 3,
         "Containers that end abnormally in a row on one node (not stopped by the master; a container "
         "lost with its node counts) before the node is blacklisted: no new container goes there.", _DAG),
    _int("BLACKLISTED_NODE_REMOVAL_TIME_MILLIS", 3_600_000,
         "How long a node stays blacklisted; its failure count starts again afterwards.", _DAG),
    _int("PLACEMENT_MAX_NODES", 100,
         "On YARN, the most RUNNING nodes a cluster may have for stram to add a pinned service per "
         "node and rack at submit (placement on chosen hosts/racks, blacklisting); a bigger cluster "
         "gets none: placement is relaxed, with a warning in the events.", _DAG, minimum=0),
    _int("PLACEMENT_TIMEOUT_MILLIS", 30_000,
         "On YARN, how long a container asked for on a chosen host or rack may wait for it; then it is "
         "asked anywhere (a relaxed request) or the application fails naming the host.", _DAG),
)

#: Other names accepted for an attribute: alias -> (attribute name, scopes of the alias).
ALIASES: dict[str, tuple[str, frozenset[Scope]]] = {
    "MEMORY_MB": ("CONTAINER_MEMORY_MB", _OP),
}

_SCOPE_WORDS = {
    Scope.DAG: "a DAG attribute",
    Scope.OPERATOR: "an operator attribute",
    Scope.INPUT_PORT: "an input port attribute",
    Scope.OUTPUT_PORT: "an output port attribute",
}
_SCOPE_PLACES = {
    Scope.DAG: "the top-level 'attributes'",
    Scope.OPERATOR: "operators.<name>.attributes",
    Scope.INPUT_PORT: "operators.<name>.port_attributes.<input port>",
    Scope.OUTPUT_PORT: "operators.<name>.port_attributes.<output port>",
}


def names(scope: Scope | str | None = None) -> list[str]:
    """Attribute names valid at ``scope`` (all of them for None), aliases included.

    Parameters
    ----------
    scope:
        A :class:`Scope` or its value.
    """
    if scope is None:
        return list(ATTRIBUTES) + list(ALIASES)
    scope = Scope(scope)
    result = [n for n, a in ATTRIBUTES.items() if scope in a.scopes]
    result += [alias for alias, (_, scopes) in ALIASES.items() if scope in scopes]
    return result


def canonical_name(name: str) -> str:
    """The table name of an attribute or one of its aliases.

    Raises
    ------
    ValueError
        ``name`` is no known attribute (the message suggests close names).
    """
    return _canonical(name, names())


def _canonical(name: str, known: list[str]) -> str:
    """``canonical_name``, suggesting names from ``known`` when ``name`` is unknown."""
    if name in ATTRIBUTES:
        return name
    if name in ALIASES:
        return ALIASES[name][0]
    guess = difflib.get_close_matches(str(name).upper(), known, n=1)
    hint = f"did you mean {guess[0]}?" if guess else "known: " + ", ".join(known)
    raise ValueError(f"unknown attribute {name!r} ({hint})")


def coerce_attribute(name: str, value: Any, scope: Scope | str) -> Any:
    """Check that attribute ``name`` may be set at ``scope`` and return ``value`` converted.

    Parameters
    ----------
    name:
        Attribute name or alias (``MEMORY_MB``).
    value:
        The value as written in YAML, or a string as given with ``-D``.
    scope:
        Where it is set: ``"dag"``, ``"operator"``, ``"input_port"`` or ``"output_port"``.

    Returns
    -------
    The value in the attribute's type (int, bool, str, list of str, or None).

    Raises
    ------
    ValueError
        The reason, written to be shown after the key path: unknown attribute,
        attribute not valid at this scope (and where to set it), or bad value.
    """
    scope = Scope(scope)
    canonical = _canonical(name, names(scope))
    attribute = ATTRIBUTES[canonical]
    allowed = ALIASES[name][1] if name in ALIASES else attribute.scopes
    if scope not in allowed:
        if name in ALIASES and scope in attribute.scopes:
            raise ValueError(f"{name!r} is {_SCOPE_WORDS[next(iter(allowed))]}; "
                             f"use {canonical} here")
        places = " or ".join(_SCOPE_PLACES[s] for s in Scope if s in allowed)
        raise ValueError(f"{name!r} is not {_SCOPE_WORDS[scope]} (set it under {places})")
    return attribute.coerce(value)


def default(name: str) -> Any:
    """The default value of attribute ``name`` (or of the attribute it is an alias of).

    Raises
    ------
    ValueError
        ``name`` is no known attribute.
    """
    return copy.deepcopy(ATTRIBUTES[canonical_name(name)].default)
