"""A fake Go rank: the other end of a tempotrain channel, written in Python.

It starts ``python3 -u -m tempotrain.train._rank`` in a new session with one end
of a socketpair, records every message, and answers requests with handlers.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

PYDIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable

# Variables of the test's own environment that would change the child's context.
_SCRUB = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
          "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT")


def child_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPOTRAIN_") and k not in _SCRUB}
    env["PYTHONPATH"] = PYDIR
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


class FakeGo:
    def __init__(self, cwd, entrypoint, config=None, args=None, checkpoint=None, context=None,
                 handlers=None, env=None):
        self.cwd = cwd
        self.scratch = tempfile.mkdtemp(prefix="fakego-scratch-")
        ctx = {"world_rank": 0, "world_size": 1, "local_rank": 0, "local_world_size": 1, "node_rank": 0,
               "experiment_name": "exp", "attempt": 0, "device": -1}
        ctx.update(context or {})
        self.hello = {"entrypoint": entrypoint, "args": args or [], "config": config, "checkpoint": checkpoint,
                      "context": ctx, "backend": "gloo", "scratch_dir": self.scratch}
        self.handlers = {
            "hello": lambda m: dict(self.hello),
            "report": lambda m: {},
            "should_stop": lambda m: {"stop": False},
            "checkpoint_dir": lambda m: {"path": tempfile.mkdtemp(dir=self.scratch)},
        }
        self.handlers.update(handlers or {})
        self.messages = []
        self.seen = threading.Condition()
        self.sock, child = socket.socketpair()
        e = child_env(env)
        e["TEMPOTRAIN_CHANNEL_FD"] = str(child.fileno())
        self.proc = subprocess.Popen([PYTHON, "-u", "-m", "tempotrain.train._rank"], cwd=cwd, env=e,
                                     pass_fds=[child.fileno()], start_new_session=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        child.close()
        self._wlock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        f = self.sock.makefile("rb")
        try:
            for line in f:
                msg = json.loads(line)
                with self.seen:
                    self.messages.append(msg)
                    self.seen.notify_all()
                if "id" not in msg:
                    continue
                h = self.handlers.get(msg["op"])
                if h is None:
                    ans = {"ok": False, "error": f"unknown op {msg['op']}"}
                else:
                    ans = h(msg)
                    if ans is None:  # the handler holds the answer back
                        continue
                    ans = dict(ans)
                    ans.setdefault("ok", True)
                ans["id"] = msg["id"]
                with self._wlock:
                    self.sock.sendall((json.dumps(ans) + "\n").encode())
        except (OSError, ValueError):
            pass

    def wait_for(self, op, timeout=30):
        with self.seen:
            ok = self.seen.wait_for(lambda: any(m["op"] == op for m in self.messages), timeout)
        if not ok:
            raise AssertionError(f"no {op!r} message within {timeout}s; got {self.messages}")

    def close(self):
        """Closes Go's end of the channel: the Python side sees end-of-file."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def wait(self, timeout=60):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            out, err = self.proc.communicate()
            raise AssertionError(f"rank process did not exit within {timeout}s; stderr:\n{err.decode()}")
        self._reader.join(10)
        self.sock.close()
        self.stdout, self.stderr = out.decode(), err.decode()
        shutil.rmtree(self.scratch, ignore_errors=True)
        return self.proc.returncode

    def ops(self):
        return [m["op"] for m in self.messages]

    def only(self, op):
        ms = [m for m in self.messages if m["op"] == op]
        if len(ms) != 1:
            raise AssertionError(f"want one {op!r} message, got {len(ms)}: {self.messages}")
        return ms[0]
