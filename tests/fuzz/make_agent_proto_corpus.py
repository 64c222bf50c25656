#!/usr/bin/python3
"""Write the seed corpus of fuzz_agent_proto (tests/fuzz/corpus/agent_proto/).

Each file is a mode byte, a chunk-size seed and the rest.  Mode 0: a byte
stream of frames (lib/agent/proto.h: u32 len, u16 type, u16 flags, u32
stream, little-endian, then the payload), what a guest says over an exec
and a file transfer, what a host says, and frames the decoder refuses.
Mode 0x80: one JSON payload, given to every parser.  The output is
deterministic.

    tests/fuzz/make_agent_proto_corpus.py [OUT_DIR]
"""

import json
import struct
import sys
from pathlib import Path

(HELLO, CONFIG, READY, EXEC, STDIN, STDOUT, STDERR, EXIT, SIGNAL, FILE_GET,
 FILE_PUT, DATA, RESULT, CREDIT, PING, PONG, ERROR, BYE, STARTED, RESIZE) = range(1, 21)


def frame(ftype, stream=0, payload=b"", flags=0, length=None):
    if isinstance(payload, dict):
        payload = json.dumps(payload, separators=(",", ":")).encode()
    n = len(payload) if length is None else length
    return struct.pack("<IHHI", n, ftype, flags, stream) + payload


def stream(seed, *frames):
    return bytes([0, seed]) + b"".join(frames)


def json_seed(obj):
    return b"\x80\x01" + json.dumps(obj, separators=(",", ":")).encode()


USAGE = {"utime_us": 1200, "stime_us": 300, "maxrss_kb": 2048}
SEEDS = {
    "guest_exec": stream(
        7,
        frame(HELLO, 0, {"proto": 2, "agent": "corral-agent 0.1",
                         "kernel": "6.1.0-28-cloud-amd64"}),
        frame(READY, 0, {"uptime_ms": 412}),
        frame(STDOUT, 1, b"hello\n"),
        frame(STDERR, 1, b"warn\x00\xff\n"),
        frame(CREDIT, 1, struct.pack("<I", 65536)),
        frame(STDOUT, 1),
        frame(EXIT, 1, {"reason": "exited", "code": 0, "usage": USAGE}),
        frame(PONG, 0, struct.pack("<Q", 42)),
        frame(BYE)),
    "guest_file": stream(
        3,
        frame(DATA, 2, b"file contents"),
        frame(DATA, 2),
        frame(RESULT, 2, {"ok": True}),
        frame(RESULT, 4, {"ok": False, "error": "no such file: /x", "errno": 2}),
        frame(ERROR, 4, {"message": "the disk is full"}),
        frame(EXIT, 5, {"reason": "signaled", "signal": 9, "usage": USAGE}),
        frame(EXIT, 6, {"reason": "start_failed", "errno": 2, "usage": USAGE}),
        frame(STARTED, 7, {"pid": 42})),
    "host_session": stream(
        11,
        frame(CONFIG, 0, {"hostname": "sb-1", "realtime_ns": 1764645000000000000,
                          "seed": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
                          "layers": ["/dev/vdb", "/dev/vdc"], "disk": "/dev/vda"}),
        frame(EXEC, 1, {"argv": ["sh", "-c", "cat"], "env": ["PATH=/usr/bin:/bin"],
                        "cwd": "/root", "uid": 0, "gid": 0, "stdin": True, "tty": False}),
        frame(STDIN, 1, b"input\n"),
        frame(STDIN, 1),
        frame(SIGNAL, 1, {"signal": 15}),
        frame(EXEC, 3, {"argv": ["bash"], "env": [], "cwd": "/", "uid": 0, "gid": 0,
                        "stdin": True, "tty": True, "rows": 50, "cols": 132}),
        frame(RESIZE, 3, {"rows": 24, "cols": 80}),
        frame(SIGNAL, 3, {"signal": 2, "scope": "group"}),
        frame(FILE_GET, 2, {"path": "/etc/hostname", "tar": False}),
        frame(FILE_PUT, 4, {"path": "/tmp/x", "mode": 420, "tar": False}),
        frame(DATA, 4, b"xyz"),
        frame(PING, 0, struct.pack("<Q", 7))),
    "bad_oversize": stream(1, frame(STDOUT, 1, length=2000000)),
    "bad_flags": stream(1, frame(STDOUT, 1, b"x", flags=1)),
    "bad_direction": stream(1, frame(READY, 0, {"uptime_ms": 1}), frame(EXEC, 1, {})),
    "bad_utf8": stream(1, frame(ERROR, 0, b'{"message":"\xc0\x80"}')),
    "window_overrun": stream(5, *[frame(STDOUT, 3, b"z" * 2048)] * 4),
    "json_exec": json_seed({"argv": ["python3", "-c", "print(1)"], "env": ["A=1", "B="],
                            "cwd": "/", "uid": 1000, "gid": 1000}),
    "json_config": json_seed({"hostname": "h", "realtime_ns": 0,
                              "seed": "AAAAAAAAAAAAAAAAAAAAAA==", "layers": []}),
    "json_config_volumes": json_seed({"hostname": "h", "realtime_ns": 0,
                                      "seed": "AAAAAAAAAAAAAAAAAAAAAA==", "layers": ["/dev/vda"],
                                      "volumes": [{"device": "/dev/vdi", "path": "/data"},
                                                  {"device": "/dev/vdj", "path": "/ro",
                                                   "read_only": True}]}),
    "json_exit": json_seed({"reason": "oom_killed", "signal": 9, "usage": USAGE}),
    "json_file": json_seed({"path": "/a/b", "mode": 493, "tar": True}),
    "json_hello": json_seed({"proto": 2, "agent": "a", "kernel": "k"}),
    "json_started": json_seed({"pid": 77}),
    "json_resize": json_seed({"rows": 1, "cols": 4096}),
}


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "corpus/agent_proto")
    out.mkdir(parents=True, exist_ok=True)
    for name, data in SEEDS.items():
        (out / name).write_bytes(data)


if __name__ == "__main__":
    main()
