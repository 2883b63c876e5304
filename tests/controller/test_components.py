"""The controller's middle is made of components that own their fields (issue 30): read from the
source (an AST walk), no component assigns an attribute another one assigns, none reaches
into another object's private fields, and the service inherits from nothing."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from iris.controller import (
    budget_book,
    figures_feed,
    job_requests,
    placement_pass,
    preemption_notices,
    region_pushes,
    region_requests,
    service,
    stop_book,
    worker_desk,
    worker_requests,
)
from iris.controller.gangs import tracking

COMPONENTS = {
    "WorkerDesk": worker_desk, "RegionPushes": region_pushes, "PlacementPass": placement_pass,
    "BudgetBook": budget_book, "FiguresFeed": figures_feed, "StopBook": stop_book,
    "GangTracker": tracking,
}
REQUESTS = (job_requests, worker_requests, region_requests, preemption_notices)


def _records(module, name: str) -> set[str]:
    """The dataclasses a component's module declares besides the component: its records."""
    tree = ast.parse(Path(inspect.getfile(module)).read_text())
    return {n.name for n in tree.body if isinstance(n, ast.ClassDef) and n.name != name
            and any("dataclass" in ast.unparse(d) for d in n.decorator_list)}


def _class(module, name: str) -> ast.ClassDef:
    tree = ast.parse(Path(inspect.getfile(module)).read_text())
    [found] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return found


def _owned(cls: ast.ClassDef) -> set[str]:
    """Attributes the class assigns on self, less references handed to its constructor
    (`self._store = store`: a collaborator, not state of its own)."""
    params: set[str] = set()
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            params = {a.arg for a in node.args.args}
    owned = set()
    for node in ast.walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
        value = getattr(node, "value", None)
        for target in targets:
            for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) \
                        and t.value.id == "self" \
                        and not (isinstance(value, ast.Name) and value.id in params):
                    owned.add(t.attr)
    return owned


def _root(node: ast.AST) -> ast.AST:
    """`a` of `a.b[c].d`: the name a write lands under."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node


def _foreign_writes_and_private_reads(tree: ast.AST, refs: set[str] = frozenset(),
                                     records: set[str] = frozenset()) -> list[str]:
    """Writes into what was handed in (a function's parameters, or `self.<ref>` for the
    collaborators a component was given), and `x._private` read on anything but self.
    `records`: types of the component's own records (declared in its module), which its
    methods hand each other (GangTracker's GangRound); a parameter of one is not foreign."""
    bad = []
    for func in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
        params = {a.arg for a in func.args.args + func.args.kwonlyargs
                  if not (a.annotation is not None and ast.unparse(a.annotation) in records)
                  } - {"self", "cls"}
        for node in ast.walk(func):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
            for target in targets:
                for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if not isinstance(t, ast.Attribute | ast.Subscript):
                        continue
                    root = _root(t)
                    handed = isinstance(root, ast.Name) and root.id in params
                    held = any(n is not t and isinstance(n, ast.Attribute)
                               and isinstance(n.value, ast.Name) and n.value.id == "self"
                               and n.attr in refs for n in ast.walk(t))
                    if handed or held:
                        bad.append(f"line {t.lineno}: assigns {ast.unparse(t)}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__") \
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            bad.append(f"line {node.lineno}: reads {ast.unparse(node)}")
    return bad


def _refs(cls: ast.ClassDef) -> set[str]:
    """The collaborators handed to a component's constructor and kept (`self._store = store`)."""
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            params = {a.arg for a in node.args.args}
            return {t.attr for n in ast.walk(node) if isinstance(n, ast.Assign)
                    and isinstance(n.value, ast.Name) and n.value.id in params
                    for t in n.targets if isinstance(t, ast.Attribute)}
    return set()


def test_components_own_disjoint_fields():
    seen: dict[str, str] = {}
    clashes = []
    for name, module in COMPONENTS.items():
        for attr in _owned(_class(module, name)):
            if attr in seen:
                clashes.append(f"{attr}: {seen[attr]} and {name}")
            seen[attr] = name
    assert clashes == []


@pytest.mark.parametrize("name", sorted(COMPONENTS))
def test_component_touches_no_other_objects_fields(name):
    cls = _class(COMPONENTS[name], name)
    records = _records(COMPONENTS[name], name)
    assert _foreign_writes_and_private_reads(cls, _refs(cls), records) == []


@pytest.mark.parametrize("module", REQUESTS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_requests_go_through_public_interfaces(module):
    tree = ast.parse(Path(inspect.getfile(module)).read_text())
    assert _foreign_writes_and_private_reads(tree) == []


def test_service_is_composed_not_inherited():
    cls = _class(service, "ControllerService")
    assert cls.bases == []
    for name in ("WorkerDesk", "RegionPushes", "PlacementPass", "BudgetBook", "FiguresFeed",
                 "StopBook", "GangTracker"):
        assert name in ast.unparse(cls), f"ControllerService does not compose {name}"
    # The service itself assigns none of its components' fields.
    for attr in _owned(cls):
        owners = [n for n, m in COMPONENTS.items() if attr in _owned(_class(m, n))]
        assert owners == [], f"{attr} is set by the service and by {owners}"


@pytest.mark.parametrize("module, name", [
    ("iris.controller.service", "ControllerService"),
    ("iris.controller.actor", "Controller"),
    ("iris.controller.regions.region", "RegionCarrier"),
    ("iris.controller.regions.autoscaler", "Autoscaler"),
    ("iris.controller.scheduling.scheduler", "_Pass"),
    ("iris.controller.scheduling.gang_placement", "GangSteps"),
])
def test_no_class_is_split_by_a_mixin(module, name):
    """Classes once split across files by mixins for size alone now inherit nothing: one
    class with one job, or objects with an interface between them."""
    assert _class(importlib.import_module(module), name).bases == []


@pytest.mark.parametrize("module", ["iris.controller.actor", "iris.controller.regions.region",
                                    "iris.controller.upkeep"])
def test_the_controller_calls_nothing_through_its_own_nodes_address(module):
    """No loopback (issue 30): the Region actors this node hosts are reached on their turn
    (regions/region.py RegionCarrier), never by a call to the node's own address."""
    tree = ast.parse(Path(inspect.getfile(importlib.import_module(module))).read_text())
    loopback = [ast.unparse(n) for n in ast.walk(tree)
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr == "call" and n.args
                and ast.unparse(n.args[0]).endswith("_node.address")]
    assert loopback == []


@pytest.mark.parametrize("name", sorted(COMPONENTS))
def test_components_meet_only_in_the_service(name):
    """No component imports or is handed another: the service's turn wires them (its pass,
    `_scheduled`, gives the gangs object the pass's gang requests; the placement component
    is given the gangs reserving and cooling as ids and reasons)."""
    tree = ast.parse(Path(inspect.getfile(COMPONENTS[name])).read_text())
    imported = {alias.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                for alias in n.names}
    others = {n for n in COMPONENTS if n != name}
    assert imported & others == set()
