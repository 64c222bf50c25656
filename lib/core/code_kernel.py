"""Corral's code-context kernel: runs in a sandbox, in the image's own
python3 (stdlib only; matplotlib used when the image has it), as a
background process whose state (its globals) persists between cells.

Protocol (lib/core/code.c): one JSON request a line on fd 0
({"code": "...", "id": N}); one answer a line on the descriptor that was
fd 1 at start, prefixed with the nonce given in CORRAL_CODE_NONCE (taken
out of the environment the cells see) so that a line a cell prints cannot
pass for an answer by chance.  While a cell runs its
fd 0 is /dev/null and its fds 1 and 2 are files of their own, so output
written by the cell's subprocesses is caught too.  corrald treats every
answer as hostile input: it checks each field and its size.
"""

import ast
import base64
import io
import json
import linecache
import os
import sys
import tempfile
import traceback

LIMIT = 8 << 20  # bytes of a stream or a result kept


def clip(data):
    return data[:LIMIT], len(data) > LIMIT


def rich(value, main):
    """A value's typed representations, as IPython's display would give."""
    out = {"main": main}
    for attr, key in (("_repr_png_", "png"), ("_repr_jpeg_", "jpeg"), ("_repr_svg_", "svg"),
                      ("_repr_html_", "html"), ("_repr_markdown_", "markdown"),
                      ("_repr_latex_", "latex"), ("_repr_json_", "json")):
        fn = getattr(value, attr, None)
        if callable(fn):
            try:
                data = fn()
            except Exception:
                continue
            if data is None:
                continue
            if key in ("png", "jpeg") and isinstance(data, bytes):
                data = base64.b64encode(data[:LIMIT]).decode()
            out[key] = data if isinstance(data, (str, dict, list)) else str(data)
    try:
        out["text"] = clip(repr(value))[0]
    except Exception as e:  # a repr that raises is still a result
        out["text"] = f"<repr failed: {type(e).__name__}>"
    return out


def figures():
    """matplotlib's open figures as PNG results, then closed."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return []
    found = []
    for num in plt.get_fignums():
        buf = io.BytesIO()
        try:
            plt.figure(num).savefig(buf, format="png")
        except Exception:
            continue
        found.append({"main": False, "png": base64.b64encode(buf.getvalue()[:LIMIT]).decode(),
                      "text": f"<Figure {num}>"})
    plt.close("all")
    return found


def run(code, ns, name):
    """Run a cell: its results and error (its output is caught by fd).  Its
    source is kept under its name, so that tracebacks show its lines."""
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    tree = ast.parse(code, name, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, name, "exec"), ns)
    value = eval(compile(last, name, "eval"), ns) if last is not None else None
    ns["_"] = value if value is not None else ns.get("_")
    return ([rich(value, True)] if value is not None else []) + figures()


def main():
    nonce = os.environ.pop("CORRAL_CODE_NONCE", "")
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8", errors="replace")
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.environ.setdefault("MPLBACKEND", "Agg")
    ns = {"__name__": "__main__", "__builtins__": __builtins__}
    count = 0
    answers.write(nonce + json.dumps({"ready": True, "python": sys.version.split()[0]}) + "\n")
    for line in requests:
        try:
            req = json.loads(line)
            code = req["code"]
        except Exception:
            answers.write(nonce + json.dumps({"error": {"name": "ProtocolError",
                                                        "value": "not a request"}}) + "\n")
            continue
        count += 1
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        saved = os.dup(1), os.dup(2)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        results, error = [], None
        name = f"<cell {count}>"
        try:
            results = run(code, ns, name)
        except BaseException as e:  # KeyboardInterrupt (a timeout's SIGINT), SystemExit too
            tb = e.__traceback__  # from the cell's own frames on: none of the kernel's
            while tb is not None and tb.tb_frame.f_code.co_filename != name:
                tb = tb.tb_next
            error = {"name": type(e).__name__, "value": str(e),
                     "traceback": "".join(traceback.format_exception(type(e), e, tb))}
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        streams = {}
        for name, f in (("stdout", out), ("stderr", err)):
            f.seek(0)
            data, cut = clip(f.read(LIMIT + 1))
            f.close()
            streams[name] = data.decode("utf-8", errors="replace")
            streams[name + "_truncated"] = cut
        answer = {"id": req.get("id"), "execution_count": count, "results": results,
                  "error": error, **streams}
        answers.write(nonce + json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
