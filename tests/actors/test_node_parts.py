"""Node and NodeLoop are two objects with an interface between them (issue 30, item 1): the
node uses only the loop's public names, the loop only the `Inbound` methods of its node, and
neither assigns the other's fields. Read from the source, so a change that reaches across
fails here, not in review."""

from __future__ import annotations

import ast
import inspect

from iris.actors import node, node_loop


def _tree(module) -> ast.Module:
    return ast.parse(inspect.getsource(module))


def _chain(expr: ast.expr) -> str:
    """`self.io` for the expression self.io; "" for anything but names and attributes."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        inner = _chain(expr.value)
        return f"{inner}.{expr.attr}" if inner else ""
    return ""


def _uses_of(tree: ast.Module, *owners: str) -> list[ast.Attribute]:
    """Every `owner.x` in the tree, for each dotted owner given."""
    return [n for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and _chain(n.value) in owners]


def test_node_uses_only_the_loops_public_names_and_assigns_none_of_its_fields():
    tree = _tree(node)
    uses = _uses_of(tree, "self.io", "io")
    assert uses, "the node calls its loop through self.io"
    private = sorted({u.attr for u in uses if u.attr.startswith("_")})
    assert private == [], f"node.py reaches into NodeLoop's private fields: {private}"
    stores = sorted({u.attr for u in uses if isinstance(u.ctx, ast.Store)})
    assert stores == [], f"node.py assigns NodeLoop's fields: {stores}"


def test_loop_calls_only_the_inbound_interface_of_its_node():
    tree = _tree(node_loop)
    interface = {"on_request", "serves", "on_bulk_reply", "on_sweep"}
    assert all(callable(getattr(node_loop.Inbound, name)) for name in interface)
    called = {u.attr for u in _uses_of(tree, "self._inbound", "inbound")}
    assert called and called <= interface, f"beyond Inbound: {sorted(called - interface)}"
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert "Node" not in names, "node_loop.py names Node: it must know its node as Inbound"


def test_node_implements_inbound():
    for name in ("on_request", "serves", "on_bulk_reply", "on_sweep"):
        assert callable(getattr(node.Node, name, None)), name
    assert node_loop.NodeLoop not in node.Node.__mro__  # owned, not inherited
