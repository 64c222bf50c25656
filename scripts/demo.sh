#!/bin/sh
# `make demo`: start corrald with its default state dir and socket, then show
# sandboxes being created, used and destroyed from the CLI and the Python SDK.
set -eu
cd "$(dirname "$0")/.."
B=${B:-build}
SOCK=/run/corral/corrald.sock
PIDFILE=/run/corral/corrald.pid
export CORRAL_URL="unix://$SOCK"
export PATH="$PWD/$B:$PATH"

if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    echo "== corrald already running (pid $(cat "$PIDFILE"))"
else
    mkdir -p /run/corral /var/log
    set -- --state /var/lib/corral --socket "$SOCK"
    [ -d build/images ] && set -- "$@" --images-from "$PWD/build/images"
    [ -f build/microvm/initrd.cpio ] && set -- "$@" --microvm-kernel "$PWD/build/microvm/vmlinuz" \
        --microvm-initrd "$PWD/build/microvm/initrd.cpio"
    "$B/corrald" "$@" >>/var/log/corrald.log 2>&1 &
    echo $! >"$PIDFILE"
    for _ in $(seq 100); do
        corral host >/dev/null 2>&1 && break
        sleep 0.1
    done
    echo "== corrald started (pid $(cat "$PIDFILE")), state /var/lib/corral, log /var/log/corrald.log"
fi

run() {
    echo "\$ $*"
    "$@"
}

echo
echo "== the CLI"
run corral run --memory-mb 128 -- sh -c 'echo "hello from $(hostname), uid $(id -u)"; cat /proc/self/uid_map'
if [ -f build/microvm/initrd.cpio ]; then
    echo "# a microVM: its own kernel (under TCG here when the CPU has no vmx/svm; the first"
    echo "# create of a shape boots a template, later ones restore it)"
    run corral run --backend microvm --memory-mb 256 -- sh -c 'echo "kernel $(uname -r) on $(hostname)"'
    run corral run --backend microvm --memory-mb 256 -- sh -c 'echo "kernel $(uname -r) on $(hostname)"'
fi
ID=$(corral create --memory-mb 256 --label demo=yes)
echo "\$ corral create --memory-mb 256 --label demo=yes"
echo "$ID"
run corral exec "$ID" -- sh -c 'echo "some state" > /tmp/state.txt; ls -l /tmp'
run corral ls --label demo=yes
demo_dir=$(mktemp -d)
echo "local file" >"$demo_dir/hello.txt"
run corral cp "$demo_dir/hello.txt" "$ID:/root/hello.txt"
run corral exec "$ID" -- cat /root/hello.txt
run corral cp "$ID:/tmp/state.txt" "$demo_dir/state.txt"
run cat "$demo_dir/state.txt"
rm -rf "$demo_dir"
run corral inspect "$ID"
run corral rm "$ID"

echo
echo "== images (a content-addressed store of EROFS layers)"
run corral image ls
if corral image inspect debian >/dev/null 2>&1; then
    run corral run --image debian --memory-mb 256 -- python3 -c 'import sys; print("python", sys.version.split()[0], "in the debian image")'
fi

echo
echo "== a registered function (STATE/functions/add.json, called as JSON in, JSON out)"
mkdir -p /var/lib/corral/functions
cat >/var/lib/corral/functions/demo_tools.py <<'PY'
def add(a, b):
    print("adding", a, b)  # to stderr: only the result reaches stdout
    return {"sum": a + b}
PY
cat >/var/lib/corral/functions/add.json <<'JSON'
{"runtime": "python", "entry": "demo_tools.py:add", "description": "Add two integers",
 "limits": {"timeout_s": 10, "memory_mb": 128},
 "schema": {"type": "object", "required": ["a", "b"], "additionalProperties": false,
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}
JSON
run corral call add '{"a": 2, "b": 40}'
echo "\$ corral call add '{\"a\": \"two\", \"b\": 1}'   # refused by the schema"
corral call add '{"a": "two", "b": 1}' || true

echo
echo "== the Python SDK"
PYTHONPATH="$PWD/sdk/python" python3 - <<'PY'
import corral

client = corral.Client()
with client.create(backend="container", image="busybox", memory_mb=256) as sb:
    print("created", sb.id)
    r = sb.exec("echo hi; exit 3")
    print("exec ->", r.stdout, "exit", r.exit_code, r.reason)
    sb.files.write("/tmp/a.txt", b"data")
    print("files ->", sb.files.read("/tmp/a.txt"))
    sh = sb.session()
    sh.run("cd /tmp && export X=1")
    print("session ->", sh.run("pwd; echo $X").stdout)
    r = sb.exec("sleep 30 & sleep 30", timeout=0.5)
    print("timeout ->", r.reason, "after", round(r.duration_s, 2), "s")
with client.create(backend="function", runtime="python") as fn:
    r = fn.exec("import json, os\nprint(json.dumps({'uid': os.getuid(), 'cwd': os.getcwd()}))")
    print("function (python) ->", r.stdout.decode().strip(), "in", round(r.duration_s * 1000, 1), "ms")
print("call ->", client.call("add", {"a": 1, "b": 2}))

# A trajectory: a preempted agent resumes without running anything twice.
import uuid
traj = "demo-" + uuid.uuid4().hex[:8]
calls = ["echo $RANDOM >> /tmp/log; wc -l < /tmp/log", "date +%s", "echo $RANDOM >> /tmp/log; wc -l < /tmp/log"]
with client.create(image="busybox", memory_mb=256, trajectory=traj) as sb:
    first = [sb.exec(c) for c in calls]
    print("trajectory", traj, "recorded:", [(r.step, r.stdout.decode().strip()) for r in first])
with client.create(image="busybox", memory_mb=256, trajectory=traj) as sb:
    again = [sb.exec(c) for c in calls]
    print("resumed, replayed:", [(r.step, r.replayed, r.stdout.decode().strip()) for r in again])
    live = sb.exec("wc -l < /tmp/log")
    print("live again at step", live.step, "on the restored state: /tmp/log has",
          live.stdout.decode().strip(), "lines (not 4)")
    fork = sb.fork(step=1)
    print("fork from step 1 ->", fork.exec("wc -l < /tmp/log").stdout.decode().strip(), "line")
    fork.destroy()
print("destroyed; live sandboxes left:", len([s for s in client.list() if s.info["state"] != "destroyed"]))
PY

echo
echo "== the trajectory, from the CLI"
run corral traj ls
T=$(corral traj ls | awk 'NR > 1 && /^demo-/ {print $1; exit}')
[ -n "$T" ] && run corral traj show "$T"

echo
echo "== corrald keeps running:"
echo "   reach it:  export CORRAL_URL=unix://$SOCK; $B/corral ls   (or PYTHONPATH=sdk/python python3 -c 'import corral; ...')"
echo "   stop it:   kill \$(cat $PIDFILE)"
