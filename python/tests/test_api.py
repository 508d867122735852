"""In-process tests of the channel, the metrics' encoding and Checkpoint."""

import json
import math
import os
import shutil
import socket
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tempotrain import train  # noqa: E402
from tempotrain.train import _session  # noqa: E402
from tempotrain.train._channel import Channel, ChannelError, RequestError  # noqa: E402


class ChannelTest(unittest.TestCase):
    def test_answers_reach_their_callers_out_of_order(self):
        go, py = socket.socketpair()
        ch = Channel(py.detach(), kill_on_eof=False)
        n = 16
        got = {}

        def call(i):
            got[i] = ch.request("echo", value=i)["value"]

        threads = [threading.Thread(target=call, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        f = go.makefile("rb")
        reqs = [json.loads(f.readline()) for _ in range(n)]
        self.assertEqual(len({r["id"] for r in reqs}), n, "ids must be unique")
        for r in reversed(reqs):  # answer the last request first
            go.sendall((json.dumps({"id": r["id"], "ok": True, "value": r["value"] * 10}) + "\n").encode())
        for t in threads:
            t.join(10)
        self.assertEqual(got, {i: i * 10 for i in range(n)})
        ch.send("progress", epoch=1, step=2)
        self.assertEqual(json.loads(f.readline()), {"op": "progress", "epoch": 1, "step": 2})
        go.sendall(b'{"id": 999, "ok": false, "error": "nobody"}\n')  # unknown id: ignored

        # An error answer raises; end-of-file wakes a waiting caller with ChannelError.
        errs = []

        def failing():
            try:
                ch.request("report")
            except RequestError as e:
                errs.append(e)

        t = threading.Thread(target=failing)
        t.start()
        r = json.loads(f.readline())
        go.sendall((json.dumps({"id": r["id"], "ok": False, "error": "commit failed: disk full"}) + "\n").encode())
        t.join(10)
        self.assertEqual(len(errs), 1)
        self.assertIn("disk full", str(errs[0]))

        waiting = []

        def blocked():
            try:
                ch.request("should_stop")
            except ChannelError as e:
                waiting.append(e)

        t = threading.Thread(target=blocked)
        t.start()
        f.readline()
        go.close()
        f.close()
        t.join(10)
        self.assertEqual(len(waiting), 1)
        self.assertIn("the Go rank is gone", str(waiting[0]))
        with self.assertRaises(ChannelError):
            ch.send("samples", n=1)


class MetricsTest(unittest.TestCase):
    def test_encoding(self):
        class MyFloat(float):
            pass

        got = _session.encode_metrics({"a": 1, "b": 2.5, "c": True, "d": False, "e": math.nan, "f": math.inf,
                                       "g": -math.inf, "h": MyFloat(0.25)})
        self.assertEqual(got, {"a": 1, "b": 2.5, "c": 1, "d": 0, "e": "NaN", "f": "Infinity", "g": "-Infinity",
                               "h": 0.25})
        json.dumps(got, allow_nan=False)

    def test_refusals_name_the_key(self):
        for bad in ({"loss": None}, {"loss": "0.1"}, {"loss": [1.0]}, {"loss": {"x": 1}}, {"loss": 1j}):
            with self.subTest(bad=bad):
                with self.assertRaisesRegex(TypeError, "'loss'"):
                    train.report(dict(bad, ok=1))
        with self.assertRaisesRegex(TypeError, "key 3"):
            train.report({3: 1.0})
        with self.assertRaisesRegex(TypeError, "dict"):
            train.report([("loss", 1)])

    def test_progress_arguments(self):
        with self.assertRaisesRegex(TypeError, "epoch"):
            train.set_progress(-1, 0)
        with self.assertRaisesRegex(TypeError, "step"):
            train.set_progress(0, 1.5)
        with self.assertRaisesRegex(TypeError, "n must"):
            train.add_samples(True)


class CheckpointTest(unittest.TestCase):
    def test_directory_round_trip(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        os.makedirs(os.path.join(d, "sub"))
        with open(os.path.join(d, "sub", "w.bin"), "wb") as f:
            f.write(b"\x00\x01")
        ck = train.Checkpoint.from_directory(d)
        self.assertEqual(ck.path, os.path.abspath(d))
        with ck.as_directory() as p:
            self.assertTrue(os.path.isfile(os.path.join(p, "sub", "w.bin")))
        out = ck.to_directory()
        self.addCleanup(shutil.rmtree, out, True)
        with open(os.path.join(out, "sub", "w.bin"), "rb") as f:
            self.assertEqual(f.read(), b"\x00\x01")
        self.assertNotEqual(out, d)
        with self.assertRaisesRegex(FileNotFoundError, "nope"):
            train.Checkpoint.from_directory(os.path.join(d, "nope"))
        with self.assertRaisesRegex(FileNotFoundError, "gone"):
            train.report({"x": 1}, checkpoint=train.Checkpoint(os.path.join(d, "gone")))

    def test_core_does_not_import_torch(self):
        self.assertNotIn("torch", sys.modules)


if __name__ == "__main__":
    unittest.main()
