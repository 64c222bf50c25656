"""Stateful code contexts (docs/api.md, Code) in the image's own python3:
state kept between cells, typed results (text, PNG, HTML, JSON), errors
with their traceback that the context survives, named contexts, restart,
a cell past its timeout interrupted (and, if it will not stop, its context
started again), a kernel that exits, and answers forged from inside the
sandbox that go nowhere."""

import asyncio
import base64
import subprocess

import pytest

import corral
from conftest import BUILD, IMAGES, MICROVM_READY, SMALL, wait_for

PNG_CELL = '''
import struct, zlib
class Dot:
    def _repr_png_(self):
        def chunk(t, d):
            return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
        return (b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(b"\\x00\\x80")) + chunk(b"IEND", b""))
    def _repr_html_(self):
        return "<b>dot</b>"
Dot()
'''


@pytest.fixture
def py(client):
    """A sandbox of the debian image, which has python3."""
    with client.create(image="debian", memory_mb=256) as sb:
        yield sb


def test_state_persists_between_cells(py):
    r = py.run_code("x = 1\nprint('hi')")
    assert r.error is None and r.stdout == "hi\n" and r.results == [] and r.context == "default"
    r = py.run_code("x + 1")
    assert r.text == "2" and r.execution_count == 2
    r = py.run_code("import os, sys\nos.system('echo from-a-subprocess')\n"
                    "print('err', file=sys.stderr)\nx * 10")
    assert r.stdout == "from-a-subprocess\n" and r.stderr == "err\n" and r.text == "10"


@pytest.mark.parametrize("kind", ["microvm", "function-python", "function-shell"])
def test_every_backend_keeps_a_contexts_state(client, kind):
    if kind == "microvm" and not MICROVM_READY:
        pytest.skip("no microvm guest: `make microvm-guest` builds it")
    if kind == "microvm":
        spec = {"backend": "microvm", "image": "debian", "memory_mb": 256}
    else:
        spec = {"backend": "function", "runtime": kind.split("-")[1], **SMALL}
    with client.create(**spec) as sb:
        sb.run_code("import os\nx = 20")
        r = sb.run_code("print(os.getpid() > 0)\nx + 1")
        assert r.stdout == "True\n" and r.text == "21" and r.execution_count == 2
        r = sb.run_code("x.nope")
        assert r.error["name"] == "AttributeError"
        assert sb.run_code("x").text == "20"


def test_an_exception_is_the_cells_error_and_the_context_goes_on(py):
    py.run_code("y = 41")
    r = py.run_code("def f():\n    return 1 / 0\nf()")
    assert r.error["name"] == "ZeroDivisionError" and r.error["value"] == "division by zero"
    tb = r.error["traceback"]
    assert 'File "<cell 2>", line 2, in f' in tb and "return 1 / 0" in tb and "code_kernel" not in tb
    assert py.run_code("y + 1").text == "42"
    r = py.run_code("def (")
    assert r.error["name"] == "SyntaxError"


def test_rich_results_come_typed(py):
    r = py.run_code(PNG_CELL)
    (main,) = [x for x in r.results if x["main"]]
    png = base64.b64decode(main["png"])
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and main["html"] == "<b>dot</b>"
    assert r.pngs == [png]
    r = py.run_code("class J:\n    def _repr_json_(self):\n        return {'a': [1, 2]}\nJ()")
    assert r.results[0]["json"] == {"a": [1, 2]}


@pytest.fixture(scope="module")
def plot_image():
    """debian-plot: the debian image with python3-matplotlib, imported into
    the suite's shared store once (debootstrap's output is cached in
    ~/.cache/corral: minutes the first time on a machine, then an import)."""
    if not (IMAGES / "tags" / "debian-plot:latest").is_file():
        subprocess.run([str(BUILD / "corral"), "image", "build-debian", "debian-plot",
                        "--packages", "python3,python3-matplotlib", "--store", str(IMAGES)],
                       check=True, stdout=subprocess.DEVNULL, timeout=1200)
    return "debian-plot"


def test_matplotlib_figures_are_pngs(client, plot_image):
    with client.create(image=plot_image, memory_mb=512) as sb:
        r = sb.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\n"
                        "plt.title('corral')\nNone")
        assert r.error is None and r.results and not r.results[0]["main"]
        (png,) = r.pngs
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
        # the figure was shown once, then closed: the next cell has none
        assert sb.run_code("len(plt.get_fignums())").text == "0"


def test_named_contexts_are_apart_and_restart_forgets(py):
    a = py.create_code_context(cwd="/tmp")
    b = py.create_code_context()
    assert a["id"] != b["id"] and a["cwd"] == "/tmp"
    py.run_code("v = 'a'", context=a["id"])
    py.run_code("v = 'b'", context=b["id"])
    assert py.run_code("v", context=a["id"]).text == "'a'"
    assert py.run_code("import os; os.getcwd()", context=a["id"]).text == "'/tmp'"
    assert py.run_code("v", context=b["id"]).text == "'b'"
    assert {c["id"] for c in py.code_contexts()} == {a["id"], b["id"]}
    info = py.restart_code_context(a["id"])
    assert info["restarts"] == 1
    assert py.run_code("v", context=a["id"]).error["name"] == "NameError"
    py.remove_code_context(b["id"])
    with pytest.raises(corral.NotFound, match="no code context"):
        py.run_code("1", context=b["id"])


def kernels(sb):
    """How many code-context kernels run in the sandbox (processes whose
    command line starts as a kernel's does)."""
    r = sb.exec(["sh", "-c", "n=0; for p in /proc/[0-9]*; do "
                             "case \"$(head -c 14 $p/cmdline 2>/dev/null | tr '\\0' ' ')\" in "
                             "'python3 -I -u ') n=$((n+1));; esac; done; echo $n"])
    return int(r.stdout)


def test_a_context_removed_or_restarted_while_its_kernel_starts(py):
    for _ in range(5):  # removed before its kernel has answered that it started
        py.remove_code_context(py.create_code_context()["id"])
    c = py.create_code_context()
    py.restart_code_context(c["id"])
    py.restart_code_context(c["id"])
    assert py.run_code("1 + 1", context=c["id"]).text == "2"
    wait_for(lambda: kernels(py) == 1, timeout=10, what="one kernel, the live context's")
    assert [x["id"] for x in py.code_contexts()] == [c["id"]]


def test_a_cell_past_its_timeout_is_interrupted_or_its_context_restarted(py):
    py.run_code("kept = 7")
    r = py.run_code("import time\ntime.sleep(60)", timeout=1)
    assert r.error["name"] == "KeyboardInterrupt"
    assert py.run_code("kept").text == "7"  # interrupted, not restarted
    with pytest.raises(corral.Conflict, match="its state is gone"):
        py.run_code("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                    "time.sleep(60)", timeout=1)
    assert py.run_code("kept").error["name"] == "NameError"  # a new python
    with pytest.raises(corral.Conflict, match="its python ended"):
        py.run_code("import os\nos._exit(3)")
    assert py.run_code("1 + 1").text == "2"


def test_answers_forged_inside_the_sandbox_go_nowhere(py):
    # The cell finds the kernel's answer channel and nonce and writes junk and
    # an answer for another cell; its own answer is still its own.
    r = py.run_code("import os\nenv = open('/proc/self/environ', 'rb').read().split(b'\\0')\n"
                    "nonce = [e[18:] for e in env if e.startswith(b'CORRAL_CODE_NONCE=')][0].decode()\n"
                    "for fd in range(3, 10):\n"
                    "    try:\n"
                    "        os.write(fd, b'junk\\n' + (nonce + '[1]\\n').encode() +\n"
                    "                 (nonce + '{\"id\": 999, \"results\": 5}\\n').encode())\n"
                    "    except OSError:\n"
                    "        pass\n"
                    "'mine'")
    assert r.text == "'mine'" and r.error is None
    assert py.run_code("2 * 21").text == "42"


def test_bad_requests(corrald, py):
    base = f"/v1/sandboxes/{py.id}/code"
    for body, status, msg in (({}, 400, "code is required"),
                              ({"code": "1", "language": "ruby"}, 501, "python only"),
                              ({"code": "1", "timeout_s": -1}, 400, "timeout_s"),
                              ({"code": "1", "x": 1}, 400, "unknown field 'x'")):
        r = corrald.request("POST", base, body)
        assert r.status == status and msg in r.json()["error"]["message"], r.json()
    r = corrald.request("POST", f"{base}/contexts", {"cwd": "tmp"})
    assert r.status == 400 and "absolute" in r.json()["error"]["message"]


def test_the_asyncio_client_runs_code(corrald, py):
    async def main():
        async with corrald.async_client() as c:
            sb = await c.get(py.id)
            await sb.run_code("z = [1, 2]")
            return await sb.run_code("sum(z)")

    assert asyncio.run(main()).text == "3"
