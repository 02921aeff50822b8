"""An exercise's values (lessons/README.md): expressions a lesson evaluates after the learner's run, over
the names the run left -- ``len(preds)``, ``outputs.device == weights.device``,
``lab.fits(80 * 2**20)``. A lesson folder from outside GPU Lab is somebody else's text, so a value is
not Python to run but an expression checked before it runs and evaluated under guard:

- only expressions: no lambda, no assignment (``:=``), and no name or attribute that begins with an
  underscore (``().__class__.__base__.__subclasses__()`` is how a Python sandbox is escaped);
- the builtins are a few pure functions (len, sum, isinstance, ...): no ``__import__``, ``open``,
  ``exec``, ``eval``, ``getattr``, ``compile``;
- a name or an attribute that gives a module other than torch's own and ``math`` is refused
  (``torch.serialization.os``), and so is any callable but those builtins, ``math``'s functions,
  torch's functions, classes and objects (torch.serialization's aside: it reaches files and
  unpickles), methods of those and of plain values, and the functions and classes the session's own
  cells defined -- code the learner can read; nothing whose name says it saves, loads, exports, dumps,
  writes or opens.

What the guard refuses raises ValueError naming it; the exercise shows that value as not measured.
"""
import ast
import builtins
import math
import types

SAFE_BUILTINS = {name: getattr(builtins, name) for name in (
    "abs", "all", "any", "bool", "dict", "divmod", "enumerate", "filter", "float", "frozenset", "int",
    "isinstance", "len", "list", "map", "max", "min", "pow", "range", "reversed", "round", "set", "sorted",
    "str", "sum", "tuple", "zip", "True", "False", "None")}
_SAFE_BUILTIN_IDS = {id(f) for f in SAFE_BUILTINS.values()}

_NODES = (ast.Expression, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.IfExp, ast.Call, ast.keyword,
          ast.Attribute, ast.Subscript, ast.Slice, ast.Name, ast.Load, ast.Store, ast.Constant, ast.Tuple,
          ast.List, ast.Set, ast.Dict, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp,
          ast.comprehension, ast.Starred, ast.JoinedStr, ast.FormattedValue,
          ast.boolop, ast.operator, ast.unaryop, ast.cmpop, ast.expr_context)
# torch's modules that reach the file system or unpickle, and the app's own.
_REFUSED_TORCH = {"gpulab.serialization", "torch.serialization", "gpulab.kernel", "gpulab.exercise_values"}


def _torch_name(module_name):
    """Whether a module name is torch's (GPU Lab's package, or "torch..." where it names itself so)."""
    return module_name in ("gpulab", "torch") or module_name.startswith(("gpulab.", "torch.")) and module_name not in _REFUSED_TORCH


def _allowed_module(module):
    return module.__name__ == "math" or _torch_name(module.__name__)


def _checked_value(value, what):
    """A name's or an attribute's value, unless it is a module or a callable a value may not use:
    refused where it is reached, so that map(), sorted(key=) and a cell's function cannot call it either."""
    if isinstance(value, types.ModuleType):
        if not _allowed_module(value):
            raise ValueError(f"{what} is the module {value.__name__}, which an exercise's value may not use")
    elif callable(value) and not _callable_allowed(value):
        raise ValueError(f"{what} is {_label(value)}, which an exercise's value may not use")
    return value


def _label(f):
    module = getattr(f, "__module__", None)
    return (module + "." if module else "") + (getattr(f, "__qualname__", None) or type(f).__name__)


# Methods and functions whose names say they write or read files, whoever defines them
# (profiler.export_chrome_trace, torch.save, torch.load, ...): a value only reads what the run left.
_FILE_WORDS = ("save", "load", "export", "dump", "write", "open")


def _ours(kind):
    """Whether a type is torch's, a builtin's or one the session's cells defined."""
    module = getattr(kind, "__module__", "") or ""
    return module in ("builtins", "__main__") or _torch_name(module)


def _callable_allowed(f):
    if id(f) in _SAFE_BUILTIN_IDS:
        return True
    name = getattr(f, "__name__", "") or ""
    if name.startswith(_FILE_WORDS):
        return False
    if isinstance(f, types.FunctionType):
        # torch's, or defined in the session's cells: code the learner can read
        return _torch_name(f.__module__ or "") or f.__code__.co_filename.startswith("<cell ")
    owner = getattr(f, "__self__", None)
    if isinstance(f, (types.MethodType, types.BuiltinMethodType)) and owner is not None:
        if isinstance(owner, types.ModuleType):
            return _allowed_module(owner)  # a C function of math or of torch's engine
        if getattr(type(owner), "callable_from_exercise_values", False):
            return True  # the kernel's lab object: lab.fits(), lab.call_with_cuda_available(), ...
        return _ours(type(owner)) and not isinstance(owner, type) or isinstance(owner, type) and _ours(owner)
    if isinstance(f, type):
        return _ours(f) and (f.__module__ != "builtins" or id(f) in _SAFE_BUILTIN_IDS)
    module = getattr(f, "__module__", None) or ""
    if module == "math":
        return True
    if _torch_name(module):
        return True  # torch's functions (the engine's, bound with pybind11)
    return _ours(type(f)) and type(f).__module__ != "builtins"  # a model or other callable object of torch's or the cells'


class _Guard(ast.NodeTransformer):
    """Checks every node, then routes attribute reads and calls through the guard's functions."""

    def generic_visit(self, node):
        if not isinstance(node, _NODES):
            raise ValueError(f"an exercise's value is one expression; {type(node).__name__} is not allowed in it")
        return super().generic_visit(node)

    def visit_Name(self, node):
        if node.id.startswith("_"):
            raise ValueError(f"an exercise's value may not use the name {node.id!r} (it begins with an underscore)")
        return self.generic_visit(node)

    def visit_Attribute(self, node):
        if node.attr.startswith("_"):
            raise ValueError(f"an exercise's value may not read the attribute {node.attr!r} (it begins with an underscore)")
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            raise ValueError("an exercise's value may not assign")
        return ast.copy_location(ast.Call(ast.Name("__value_attribute", ast.Load()), [node.value, ast.Constant(node.attr)], []), node)

    def visit_Call(self, node):
        self.generic_visit(node)
        return ast.copy_location(ast.Call(ast.Name("__value_call", ast.Load()), [node.func] + node.args, node.keywords), node)


def compile_value(expression, name):
    """The value's code, checked; ValueError (or SyntaxError) says what was refused."""
    tree = ast.parse(str(expression), filename=f"<value {name}>", mode="eval")
    tree = ast.fix_missing_locations(_Guard().visit(tree))
    return compile(tree, f"<value {name}>", "eval")


def evaluate(expression, name, namespace):
    """The value of one exercise expression over the session's names (what the run left)."""
    code = compile_value(expression, name)

    def attribute(obj, attr):
        return _checked_value(getattr(obj, attr), f"the attribute {attr!r}")

    def call(f, *args, **kwargs):
        if not _callable_allowed(f):
            raise ValueError(f"an exercise's value may not call {_label(f)}")
        return f(*args, **kwargs)

    scope = {"__builtins__": SAFE_BUILTINS, "__value_attribute": attribute, "__value_call": call, "math": math}
    for key, value in namespace.items():
        if key.startswith("_") or key in scope:
            continue
        try:
            scope[key] = _checked_value(value, f"the name {key!r}")
        except ValueError:
            pass  # not a name a value may use: using it is a NameError
    return eval(code, scope)
