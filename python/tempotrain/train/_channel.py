"""The channel to the Go rank: line-delimited JSON over a Unix socket (PROTOCOL.md).

One lock serialises writes; one reader thread reads answers and hands each to
the caller waiting on its id. The channel's end-of-file means the Go rank is
gone: the process then kills its own process group (when it leads one).
"""

import itertools
import json
import os
import signal
import socket
import sys
import threading


class ChannelError(ConnectionError):
    """The channel to the Go rank is closed or broken."""


class RequestError(RuntimeError):
    """The Go rank answered a request with ``"ok": false``."""

    def __init__(self, op, text):
        super().__init__(f"tempotrain: {op} failed: {text}")
        self.op = op
        self.text = text


class _Waiter:
    __slots__ = ("event", "answer")

    def __init__(self):
        self.event = threading.Event()
        self.answer = None


class Channel:
    """A socket to the Go rank. ``request`` waits for the answer; ``send`` does not."""

    def __init__(self, fd, kill_on_eof=True):
        # socket.socket detects the family and type of an inherited fd. Programs the
        # function execs do not inherit it (forked DataLoader workers share it, unused).
        self._sock = socket.socket(fileno=fd)
        os.set_inheritable(fd, False)
        self._wlock = threading.Lock()
        self._plock = threading.Lock()
        self._pending = {}
        self._ids = itertools.count(1)
        self._closed = None  # the reason, once closed
        self._finished = False  # error or done was sent: the end is expected
        self._kill_on_eof = kill_on_eof
        self._reader = threading.Thread(target=self._read, name="tempotrain-channel", daemon=True)
        self._reader.start()

    @classmethod
    def from_env(cls, environ=None):
        env = os.environ if environ is None else environ
        raw = env.get("TEMPOTRAIN_CHANNEL_FD")
        if raw is None:
            return None
        try:
            fd = int(raw)
        except ValueError:
            raise ValueError(f"TEMPOTRAIN_CHANNEL_FD={raw!r} is not a file descriptor number") from None
        return cls(fd)

    def _write(self, msg):
        data = (json.dumps(msg, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")
        with self._wlock:
            if self._closed is not None:
                raise ChannelError(f"tempotrain: channel closed ({self._closed}); cannot send {msg.get('op')!r}")
            try:
                self._sock.sendall(data)
            except OSError as e:
                raise ChannelError(f"tempotrain: channel write of {msg.get('op')!r}: {e}") from e

    def send(self, op, **fields):
        """Sends a message that gets no answer."""
        msg = {"op": op}
        msg.update(fields)
        self._write(msg)

    def request(self, op, **fields):
        """Sends a request and returns its answer (a dict); RequestError on ``ok: false``."""
        w = _Waiter()
        with self._plock:
            if self._closed is not None:
                raise ChannelError(f"tempotrain: channel closed ({self._closed}); cannot send {op!r}")
            rid = next(self._ids)
            self._pending[rid] = w
        msg = {"op": op, "id": rid}
        msg.update(fields)
        try:
            self._write(msg)
        except BaseException:
            with self._plock:
                self._pending.pop(rid, None)
            raise
        w.event.wait()
        ans = w.answer
        if ans is None:
            raise ChannelError(f"tempotrain: channel closed ({self._closed}) while waiting for the answer to {op!r}")
        if not ans.get("ok"):
            raise RequestError(op, ans.get("error") or "no reason given")
        return ans

    def finish(self, op, **fields):
        """Sends the last message (``error`` or ``done``); a broken channel is ignored."""
        self._finished = True
        try:
            self.send(op, **fields)
        except ChannelError:
            pass

    def _read(self):
        reason = "end of file: the Go rank is gone"
        try:
            with self._sock.makefile("rb") as f:
                for line in f:
                    if not line.strip():
                        continue
                    try:
                        msg = json.loads(line)
                        rid = msg["id"]
                    except (ValueError, KeyError, TypeError) as e:
                        print(f"tempotrain: channel: unreadable message {line[:200]!r}: {e}", file=sys.stderr, flush=True)
                        continue
                    with self._plock:
                        w = self._pending.pop(rid, None)
                    if w is None:
                        print(f"tempotrain: channel: answer to unknown id {rid!r}", file=sys.stderr, flush=True)
                        continue
                    w.answer = msg
                    w.event.set()
        except OSError as e:
            reason = f"read error: {e}"
        # Kill before waking the waiters: a woken caller would raise, send error and
        # exit, leaving the group's other processes (DataLoader workers) behind.
        if not self._finished and self._kill_on_eof:
            _kill_own_group(reason)
        self._close(reason)

    def _close(self, reason):
        with self._plock:
            self._closed = reason
            pending, self._pending = self._pending, {}
        for w in pending.values():
            w.event.set()
        with self._wlock:
            self._sock.close()


def _kill_own_group(reason):
    """Kills this process's group (DataLoader workers, a script's children) when it leads it."""
    if os.getpgrp() != os.getpid():
        print(f"tempotrain: channel {reason}; not a process-group leader, so not killing the group",
              file=sys.stderr, flush=True)
        return
    try:
        sys.stderr.write(f"tempotrain: channel {reason}: killing process group {os.getpgrp()}\n")
        sys.stderr.flush()
    except Exception:
        pass
    os.killpg(os.getpgrp(), signal.SIGKILL)
