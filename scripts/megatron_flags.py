#!/usr/bin/env python3
"""The command-line flags Megatron-LM's training script accepts, read from its
source without importing it (no torch needed): every `add_argument('--x',
...)` in megatron/training/arguments.py, and the flags that
`ArgumentGroupFactory(SomeConfig, exclude=[...])` generates from a config
dataclass's fields (megatron/training/argument_utils.py: `--field-name`; a
bool field defaulting to False is a store_true flag, one defaulting to True
becomes `--no-field-name` / `--disable-field-name`; `argparse_meta` names
override).

Prints one line per flag: `--flag KIND`, KIND one of flag (takes no value),
int, float, str (any other single value), list (one or more values).

Usage: scripts/megatron_flags.py MEGATRON_LM_CHECKOUT > tests/data/megatron_flags.txt
"""
import ast
import pathlib
import sys

root = pathlib.Path(sys.argv[1])
args_py = root / "megatron/training/arguments.py"
tree = ast.parse(args_py.read_text())
flags = {}


def kind_of_call(call):
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    if "action" in kw and isinstance(kw["action"], ast.Constant) and kw["action"].value in (
            "store_true", "store_false", "store_const", "count"):
        return "flag"
    if "nargs" in kw:
        n = kw["nargs"]
        if isinstance(n, ast.Constant) and n.value in ("+", "*"):
            return "list"
        if isinstance(n, ast.Constant) and n.value == "?":
            return "str"
    t = kw.get("type")
    if isinstance(t, ast.Name) and t.id in ("int", "float"):
        return t.id
    return "str"


# Explicit add_argument calls.
for node in ast.walk(tree):
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                 and a.value.startswith("--")]
        for n in names:
            flags[n] = kind_of_call(node)

# Dataclasses by name, over the whole tree (first definition wins).
classes = {}
for py in list((root / "megatron").rglob("*.py")):
    try:
        t = ast.parse(py.read_text())
    except (SyntaxError, UnicodeDecodeError):
        continue
    for node in t.body:
        if isinstance(node, ast.ClassDef) and node.name not in classes:
            classes[node.name] = node


def annotation_kind(ann):
    """int / float / str / flag(bool) / list, or None for a Union argparse cannot take."""
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        try:
            ann = ast.parse(ann.value, mode="eval").body
        except SyntaxError:
            return "str"
    if isinstance(ann, ast.Name):
        return {"int": "int", "float": "float", "bool": "bool", "str": "str"}.get(ann.id, "str")
    if isinstance(ann, ast.Attribute):
        return "str"  # an enum: one of its names
    if isinstance(ann, ast.Subscript):
        head = ann.value.id if isinstance(ann.value, ast.Name) else getattr(ann.value, "attr", "")
        inner = ann.slice
        if head == "Optional":
            return annotation_kind(inner)
        if head in ("list", "List"):
            return "list"
        if head == "Literal":
            vals = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            if vals and isinstance(vals[0], ast.Constant) and isinstance(vals[0].value, int) and not isinstance(vals[0].value, bool):
                return "int"
            return "str"
        if head == "Union":
            elts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            rest = [e for e in elts if not (isinstance(e, ast.Constant) and e.value is None)]
            return annotation_kind(rest[0]) if len(rest) == 1 else None
        return "str"
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):  # X | None
        parts = []
        def walk(a):
            if isinstance(a, ast.BinOp) and isinstance(a.op, ast.BitOr):
                walk(a.left); walk(a.right)
            else:
                parts.append(a)
        walk(ann)
        rest = [p for p in parts if not (isinstance(p, ast.Constant) and p.value is None)]
        return annotation_kind(rest[0]) if len(rest) == 1 else None
    return "str"


def field_flags(cls_name, exclude, seen=None):
    seen = seen or set()
    if cls_name in seen or cls_name not in classes:
        return
    seen.add(cls_name)
    node = classes[cls_name]
    for base in node.bases:
        if isinstance(base, ast.Name):
            field_flags(base.id, exclude, seen)
    for st in node.body:
        if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
            continue
        name = st.target.id
        if name in exclude or name.startswith("_"):
            continue
        default, meta_names, meta_kind, init = None, None, None, True
        if isinstance(st.value, ast.Call) and getattr(st.value.func, "id", getattr(st.value.func, "attr", "")) == "field":
            for k in st.value.keywords:
                if k.arg == "default" and isinstance(k.value, ast.Constant):
                    default = k.value.value
                if k.arg == "init" and isinstance(k.value, ast.Constant) and k.value.value is False:
                    init = False
                if k.arg == "metadata" and isinstance(k.value, ast.Dict):
                    for mk, mv in zip(k.value.keys, k.value.values):
                        if isinstance(mk, ast.Constant) and mk.value == "argparse_meta" and isinstance(mv, ast.Dict):
                            for ak, av in zip(mv.keys, mv.values):
                                if isinstance(ak, ast.Constant) and ak.value == "arg_names" and isinstance(av, ast.List):
                                    meta_names = [e.value for e in av.elts if isinstance(e, ast.Constant)]
                                if isinstance(ak, ast.Constant) and ak.value == "nargs":
                                    meta_kind = "list"
                                if isinstance(ak, ast.Constant) and ak.value == "action":
                                    meta_kind = "flag"
        elif isinstance(st.value, ast.Constant):
            default = st.value.value
        if not init:
            continue
        kind = annotation_kind(st.annotation)
        if kind is None and meta_names is None and meta_kind is None:
            continue  # argparse cannot take it: ArgumentGroupFactory skips it too
        dashed = name.replace("_", "-")
        if meta_names:
            names = meta_names
        elif kind == "bool":
            names = ["--" + dashed] if default is not True else ["--no-" + dashed, "--disable-" + dashed]
        else:
            names = ["--" + dashed]
        k = meta_kind or ("flag" if kind == "bool" else kind or "str")
        for n in names:
            flags.setdefault(n, k)


# Each factory call, with its exclude list (a literal, or a name assigned a
# literal list earlier in the same function).
for fn in ast.walk(tree):
    if not isinstance(fn, ast.FunctionDef):
        continue
    lists = {}
    for st in ast.walk(fn):
        if isinstance(st, ast.Assign) and isinstance(st.value, ast.List):
            for t in st.targets:
                if isinstance(t, ast.Name):
                    lists[t.id] = [e.value for e in st.value.elts if isinstance(e, ast.Constant)]
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "ArgumentGroupFactory" and node.args:
            cls = node.args[0].id if isinstance(node.args[0], ast.Name) else None
            exclude = []
            for k in node.keywords:
                if k.arg == "exclude":
                    if isinstance(k.value, ast.List):
                        exclude = [e.value for e in k.value.elts if isinstance(e, ast.Constant)]
                    elif isinstance(k.value, ast.Name):
                        exclude = lists.get(k.value.id, [])
            if cls:
                field_flags(cls, set(exclude))

for n in sorted(flags):
    print(n, flags[n])
