"""Placement rules of a spec (``AFFINITY_RULES``): resolved to operator names and checked with the graph.

A rule is AFFINITY (its operators on one node, or with CONTAINER_LOCAL in one container) or
ANTI_AFFINITY (its operators on distinct nodes; one operator alone: its partitions on distinct
nodes). What contradicts itself is refused before anything starts: an operator both with and
against another, anti-affine operators that streams or other rules put on one node, operators
forced into one container with different NODE_LABELs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from stram.master.spec.errors import SpecError
from stram.master.spec.parts import INLINE_LOCALITIES, SpecGraph

__all__ = ["AffinityRule", "resolve_rules", "check_affinity", "NODE_LOCALITIES"]

#: Stream localities that put both ends on one node.
NODE_LOCALITIES = (*INLINE_LOCALITIES, "NODE_LOCAL")


@dataclass(frozen=True)
class AffinityRule:
    """One ``AFFINITY_RULES`` entry with its operators named (a regex resolved, in file order)."""

    index: int
    type: str  #: AFFINITY or ANTI_AFFINITY
    locality: str  #: NODE_LOCAL or CONTAINER_LOCAL
    operators: tuple[str, ...]
    relax: bool = True

    @property
    def path(self) -> str:
        return f"attributes.AFFINITY_RULES[{self.index}]"

    @property
    def what(self) -> str:
        """How messages name it: ``ANTI_AFFINITY of 'a', 'b'``."""
        return f"{self.type} of {', '.join(repr(o) for o in self.operators)}"


def resolve_rules(spec: Any) -> list[AffinityRule]:
    """The spec's ``AFFINITY_RULES``, each with its operators named; names a spec does not have are kept
    (:func:`check_affinity` refuses them)."""
    rules = []
    for i, raw in enumerate(spec.attributes.get("AFFINITY_RULES") or ()):
        if "regex" in raw:
            pattern = re.compile(raw["regex"])
            names = tuple(n for n in spec.operators if pattern.fullmatch(n))
        else:
            names = tuple(raw["operators"])
        rules.append(AffinityRule(i, raw["type"], raw.get("locality", "NODE_LOCAL"), names, raw.get("relax", True)))
    return rules


class _Groups:
    """Union-find over operator names, remembering why two were joined (for messages)."""

    def __init__(self, names: Any) -> None:
        self.parent = {n: n for n in names}

    def find(self, x: str) -> str:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return self.parent[x]

    def join(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)


def check_affinity(spec: SpecGraph, error: Callable[[str, str], SpecError]) -> None:
    """Refuse rules that name no operator, cannot hold, or contradict the streams or each other."""
    rules = resolve_rules(spec)
    for rule in rules:
        unknown = [n for n in rule.operators if n not in spec.operators]
        if unknown:
            raise error(f"{rule.path}.operators", f"unknown operator {unknown[0]!r} "
                                                  f"(operators: {', '.join(spec.operators)})")
        if not rule.operators:
            raise error(f"{rule.path}.regex", "the regex matches no operator "
                                              f"(operators: {', '.join(spec.operators)})")
        if rule.type == "AFFINITY" and len(rule.operators) < 2:
            raise error(rule.path, f"AFFINITY needs two operators or more, got {rule.what}")
        if rule.type == "ANTI_AFFINITY" and rule.locality != "NODE_LOCAL":
            raise error(f"{rule.path}.locality", "ANTI_AFFINITY is between nodes: its locality is NODE_LOCAL "
                                                 "(operators are in distinct containers unless streams join them)")
        if rule.type == "AFFINITY" and rule.locality == "CONTAINER_LOCAL":
            counts = {spec.operators[n].partitions for n in rule.operators}
            if len(counts) > 1:
                raise error(rule.path, f"CONTAINER_LOCAL {rule.what} puts partition i of each in one container: "
                                       f"they need the same partition count, got "
                                       + ", ".join(f"{n!r} {spec.operators[n].partitions}" for n in rule.operators))
    _check_conflicts(spec, rules, error)
    _check_labels(spec, rules, error)


def _node_groups(spec: SpecGraph, rules: list[AffinityRule], localities: tuple[str, ...],
                 rule_localities: tuple[str, ...]) -> tuple[_Groups, dict[frozenset[str], str]]:
    """Operators joined onto one node (or container) by streams of ``localities`` and AFFINITY rules of
    ``rule_localities``; and for each joined pair, what joined it."""
    groups = _Groups(spec.operators)
    why: dict[frozenset[str], str] = {}
    for stream in spec.streams.values():
        if stream.locality in localities:
            for sink in stream.sinks:
                groups.join(stream.source.operator, sink.operator)
                why.setdefault(frozenset((stream.source.operator, sink.operator)),
                               f"stream {stream.name!r} is {stream.locality}")
    for rule in rules:
        if rule.type == "AFFINITY" and rule.locality in rule_localities:
            for other in rule.operators[1:]:
                groups.join(other, rule.operators[0])
            for a in rule.operators:
                for b in rule.operators:
                    if a != b:
                        why.setdefault(frozenset((a, b)), f"{rule.path} is {rule.what}")
    return groups, why


def _check_conflicts(spec: SpecGraph, rules: list[AffinityRule], error: Callable[[str, str], SpecError]) -> None:
    """Anti-affine operators that other rules or streams put on one node."""
    groups, why = _node_groups(spec, rules, NODE_LOCALITIES, ("NODE_LOCAL", "CONTAINER_LOCAL"))
    for rule in rules:
        if rule.type != "ANTI_AFFINITY":
            continue
        names = rule.operators
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if groups.find(a) == groups.find(b):
                    reason = why.get(frozenset((a, b)), "streams or rules join them onto one node")
                    raise error(rule.path, f"{rule.what} contradicts itself: {a!r} and {b!r} must share a node "
                                           f"({reason}); drop one of the two")
        if len(names) == 1 and spec.operators[names[0]].partitions > 1:
            _check_partitions_apart(spec, rule, groups, error)


def _check_partitions_apart(spec: SpecGraph, rule: AffinityRule, groups: _Groups,
                            error: Callable[[str, str], SpecError]) -> None:
    """The partitions of a lone anti-affine operator stay apart only if whatever shares their nodes is
    partitioned alike (a node-local peer with another partition count joins them on one node)."""
    name = rule.operators[0]
    count = spec.operators[name].partitions
    root = groups.find(name)
    for other, op in spec.operators.items():
        if other != name and groups.find(other) == root and op.partitions != count:
            raise error(rule.path, f"{rule.what} wants its {count} partitions on distinct nodes, but "
                                   f"{other!r} ({op.partitions} partition{'s' if op.partitions != 1 else ''}) "
                                   f"shares their nodes (a node-local stream or an AFFINITY rule) and so joins "
                                   f"them on one node; drop one of the two")


def _check_labels(spec: SpecGraph, rules: list[AffinityRule], error: Callable[[str, str], SpecError]) -> None:
    """Operators that run in one container (inline streams, CONTAINER_LOCAL affinity) or on one node must
    not ask for different node labels."""
    groups, _ = _node_groups(spec, rules, NODE_LOCALITIES, ("NODE_LOCAL", "CONTAINER_LOCAL"))
    seen: dict[str, tuple[str, str]] = {}
    for name, op in spec.operators.items():
        label = op.attributes.get("NODE_LABEL")
        if label is None:
            continue
        root = groups.find(name)
        if root in seen and seen[root][1] != label:
            other, other_label = seen[root]
            raise error(f"operators.{name}.attributes.NODE_LABEL",
                        f"{name!r} asks for node label {label!r} but {other!r}, which must share its node "
                        f"(streams or AFFINITY_RULES), asks for {other_label!r}; give them the same label")
        seen.setdefault(root, (name, label))
