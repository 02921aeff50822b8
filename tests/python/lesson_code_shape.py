"""The course's code, as a learner reads it in the "Lab code" tab (issue 49): every file under
lessons/ is a lesson's text, its Python or the build's list of them -- no C++ -- and no function or
method in it runs over 60 lines, so that each reads as one step of the lesson.

    python3 lesson_code_shape.py LESSONS_DIR
"""
import ast
import pathlib
import sys

MAX_LINES = 60
ALLOWED_SUFFIXES = {".md", ".py", ".txt"}  # the lessons' text, their Python, CMakeLists.txt


def long_functions(path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_LINES:
                yield f"{path}:{node.lineno}: {node.name}() is {lines} lines (at most {MAX_LINES})"


def main(root):
    root = pathlib.Path(root)
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    problems = [f"{p}: not a lesson's text or Python ({p.suffix or 'no suffix'})" for p in files
                if p.suffix not in ALLOWED_SUFFIXES]
    sources = [p for p in files if p.suffix == ".py"]
    for p in sources:
        problems += long_functions(p)
    if len(sources) < 16:  # the labs and the module they share: a wrong folder would check nothing
        problems.append(f"only {len(sources)} Python files under {root}: is it the lessons folder?")
    print("\n".join(problems) if problems else f"{len(sources)} files of lesson code, no function over {MAX_LINES} lines")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
