"""The runner (python -m tempotrain.train._rank) against a fake Go rank."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fakego import PYTHON, FakeGo, child_env  # noqa: E402


def write(d, name, src):
    p = os.path.join(d, name)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(textwrap.dedent(src))
    return p


def pid_gone(pid):
    """A process is gone when it no longer exists or is a zombie (dead, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


class RankTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tempotrain-test-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def run_rank(self, entrypoint, **kw):
        g = FakeGo(self.dir, entrypoint, **kw)
        rc = g.wait()
        return g, rc

    def test_function_gets_config_context_and_reports(self):
        write(self.dir, "train.py", """
            import os
            from tempotrain import train

            def train_func(config):
                ctx = train.get_context()
                d = train.new_checkpoint_dir()
                with open(os.path.join(d, "model.txt"), "w") as f:
                    f.write("weights")
                train.set_progress(2, 7)
                train.add_samples(64)
                ck = train.get_checkpoint()
                with ck.as_directory() as resumed:
                    had = os.path.exists(os.path.join(resumed, "old.txt"))
                train.report({"twice": config["a"] * 2, "loss": 0.5, "nan": float("nan"), "inf": float("-inf"),
                              "flag": True, "rank": ctx.get_world_rank(), "size": ctx.get_world_size(),
                              "local": ctx.get_local_rank(), "node": ctx.get_node_rank(),
                              "attempt": ctx.get_attempt(), "stop": train.should_stop(),
                              "resumed_had_file": had,
                              "name_ok": ctx.get_experiment_name() == "exp"},
                             checkpoint=train.Checkpoint.from_directory(d))
            """)
        old = os.path.join(self.dir, "old")
        os.mkdir(old)
        open(os.path.join(old, "old.txt"), "w").close()
        g, rc = self.run_rank("train.py:train_func", config={"a": 21}, checkpoint=old,
                              context={"world_rank": 3, "world_size": 4, "local_rank": 1, "node_rank": 1,
                                       "attempt": 2},
                              handlers={"should_stop": lambda m: {"stop": True}})
        self.assertEqual(rc, 0, g.stderr)
        self.assertEqual(g.ops()[0], "hello")
        self.assertEqual(g.messages[0]["pid"], g.proc.pid)
        self.assertEqual(g.ops()[-1], "done")
        rep = g.only("report")
        self.assertEqual(rep["metrics"], {"twice": 42, "loss": 0.5, "nan": "NaN", "inf": "-Infinity", "flag": 1,
                                          "rank": 3, "size": 4, "local": 1, "node": 1, "attempt": 2, "stop": 1,
                                          "resumed_had_file": 1, "name_ok": 1})
        self.assertTrue(os.path.isabs(rep["checkpoint"]), rep["checkpoint"])
        self.assertTrue(rep["checkpoint"].startswith(g.scratch), rep["checkpoint"])
        self.assertEqual(g.only("progress")["epoch"], 2)
        self.assertEqual(g.only("progress")["step"], 7)
        self.assertEqual(g.only("samples")["n"], 64)
        self.assertIsInstance(rep["id"], int)

    def test_function_without_parameter_and_module_entrypoint(self):
        write(self.dir, "mypkg/__init__.py", "")
        write(self.dir, "mypkg/loop.py", """
            from tempotrain import train
            def main():
                train.report({"called": 1})
            """)
        g, rc = self.run_rank("mypkg.loop:main", config={"ignored": True})
        self.assertEqual(rc, 0, g.stderr)
        self.assertEqual(g.only("report")["metrics"], {"called": 1})
        self.assertIsNone(g.only("report")["checkpoint"])

    def test_failed_commit_raises_in_python(self):
        write(self.dir, "train.py", """
            from tempotrain import train
            def f(config):
                try:
                    train.report({"x": 1})
                except train.RequestError as e:
                    raise SystemExit(f"caught: {e}")
            """)
        g, rc = self.run_rank("train.py:f", handlers={"report": lambda m: {"ok": False, "error": "disk full"}})
        self.assertEqual(rc, 1)
        err = g.only("error")
        self.assertIn("disk full", err["message"])
        self.assertIn("report failed", err["message"])

    def test_non_numeric_metric_names_the_key(self):
        write(self.dir, "train.py", """
            from tempotrain import train
            def f(config):
                train.report({"loss": 0.1, "tag": "high"})
            """)
        g, rc = self.run_rank("train.py:f")
        self.assertEqual(rc, 1)
        err = g.only("error")
        self.assertEqual(err["type"], "TypeError")
        self.assertIn("'tag'", err["message"])
        self.assertFalse(err["non_retryable"])
        self.assertNotIn("report", g.ops())
        self.assertEqual(g.ops()[-1], "error")

    def test_exception_sends_type_message_traceback(self):
        write(self.dir, "train.py", """
            class Boom(Exception):
                pass
            def helper():
                raise ValueError("the loss diverged at step 9")
            def f(config):
                helper()
            """)
        g, rc = self.run_rank("train.py:f")
        self.assertEqual(rc, 1)
        err = g.only("error")
        self.assertEqual(err["type"], "ValueError")
        self.assertEqual(err["message"], "the loss diverged at step 9")
        self.assertIn("Traceback (most recent call last)", err["traceback"])
        self.assertIn('raise ValueError("the loss diverged at step 9")', err["traceback"])
        self.assertIn("in helper", err["traceback"])
        self.assertFalse(err["non_retryable"])
        self.assertIn("the loss diverged", g.stderr)
        self.assertNotIn("done", g.ops())

    def test_non_retryable(self):
        write(self.dir, "train.py", """
            from tempotrain.train import NonRetryableError
            class BadConfig(NonRetryableError):
                pass
            def direct(config):
                raise BadConfig("lr must be positive")
            def chained(config):
                try:
                    raise NonRetryableError("no such column 'y'")
                except NonRetryableError as e:
                    raise RuntimeError("loading failed") from e
            def implicit(config):
                try:
                    raise NonRetryableError("bad")
                except NonRetryableError:
                    raise KeyError("during handling")
            def suppressed(config):
                try:
                    raise NonRetryableError("bad")
                except NonRetryableError:
                    raise KeyError("unrelated") from None
            """)
        for fn, want in (("direct", True), ("chained", True), ("implicit", True), ("suppressed", False)):
            with self.subTest(fn=fn):
                g, rc = self.run_rank("train.py:" + fn)
                self.assertEqual(rc, 1)
                err = g.only("error")
                self.assertIs(err["non_retryable"], want, err)
        self.assertEqual(err["type"], "KeyError")

    def test_missing_entrypoint_parts(self):
        write(self.dir, "train.py", "def f(config):\n    pass\nx = 1\n")
        write(self.dir, "pkg/__init__.py", "")
        write(self.dir, "pkg/broken.py", "import no_such_dependency_xyz\ndef f(config):\n    pass\n")
        cases = [
            ("missing.py:f", ["'missing.py'", "not found"], True),
            ("train.py:g", ["'g'", "no function"], True),
            ("train.py:x", ["'x'", "not a function"], True),
            ("nosuchpkg.mod:f", ["'nosuchpkg'", "not found"], True),
            ("pkg.nomod:f", ["'pkg.nomod'", "not found"], True),
            ("missing.py", ["'missing.py'", "not found"], True),
            # The module is there; what it imports is not: the module's own error.
            ("pkg.broken:f", ["no_such_dependency_xyz"], False),
        ]
        for ep, words, nonretry in cases:
            with self.subTest(entrypoint=ep):
                g, rc = self.run_rank(ep)
                self.assertEqual(rc, 1, g.stderr)
                err = g.only("error")
                self.assertIs(err["non_retryable"], nonretry, err)
                for w in words:
                    self.assertIn(w, err["message"])
                if nonretry:
                    self.assertIn(ep, err["message"])
                self.assertEqual(g.ops(), ["hello", "error"])

    def test_script_gets_argv_and_runs_as_main(self):
        write(self.dir, "scripts/run.py", """
            import json, sys
            import helper  # the script's directory is on sys.path
            from tempotrain import train
            if __name__ == "__main__":
                with open("argv.json", "w") as f:
                    json.dump(sys.argv, f)
                train.report({"n": len(sys.argv)})
                sys.exit(0)
            """)
        write(self.dir, "scripts/helper.py", "")
        g, rc = self.run_rank("scripts/run.py", args=["--epochs", "3", "--name=x y"])
        self.assertEqual(rc, 0, g.stderr)
        with open(os.path.join(self.dir, "argv.json")) as f:
            # argv[0] is the script's path, made absolute by runpy (as __file__ is).
            self.assertEqual(__import__("json").load(f),
                             [os.path.join(self.dir, "scripts/run.py"), "--epochs", "3", "--name=x y"])
        self.assertEqual(g.ops(), ["hello", "report", "done"])

    def test_script_exit_status(self):
        write(self.dir, "fail.py", "import sys\nsys.exit(3)\n")
        g, rc = self.run_rank("fail.py")
        self.assertEqual(rc, 1)
        err = g.only("error")
        self.assertEqual(err["type"], "SystemExit")
        self.assertEqual(err["message"], "exit status 3")

    def test_channel_eof_kills_the_process_group(self):
        write(self.dir, "spawn.py", """
            import subprocess, sys, time
            from tempotrain import train
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
            with open("child.pid", "w") as f:
                f.write(str(child.pid))
            train.should_stop()  # Go never answers: it goes away instead
            time.sleep(120)
            """)
        g = FakeGo(self.dir, "spawn.py", handlers={"should_stop": lambda m: None})
        try:
            g.wait_for("should_stop")
            with open(os.path.join(self.dir, "child.pid")) as f:
                gpid = int(f.read())
            self.assertFalse(pid_gone(gpid))
            g.close()
            rc = g.wait(timeout=30)
            self.assertEqual(rc, -signal.SIGKILL, g.stderr)
            self.assertIn("killing process group", g.stderr)
            deadline = time.time() + 10
            while not pid_gone(gpid) and time.time() < deadline:
                time.sleep(0.05)
            self.assertTrue(pid_gone(gpid), f"grandchild {gpid} outlived the channel")
        finally:
            if g.proc.poll() is None:
                os.killpg(g.proc.pid, signal.SIGKILL)

    def test_runner_without_channel_refuses(self):
        p = subprocess.run([PYTHON, "-m", "tempotrain.train._rank"], env=child_env(), cwd=self.dir,
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertIn("TEMPOTRAIN_CHANNEL_FD", p.stderr)


class LocalModeTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tempotrain-local-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        write(self.dir, "train.py", """
            import json, os
            from tempotrain import train
            ctx = train.get_context()
            ck = train.get_checkpoint()
            d = train.new_checkpoint_dir()
            train.set_progress(0, 1)
            train.add_samples(5)
            train.report({"rank": ctx.get_world_rank(), "size": ctx.get_world_size(), "node": ctx.get_node_rank(),
                          "local": ctx.get_local_rank(), "stop": train.should_stop(), "inf": float("inf"),
                          "resume": ck is not None and os.path.isfile(os.path.join(ck.path, "m"))},
                         checkpoint=train.Checkpoint.from_directory(d))
            print("end", flush=True)
            """)

    def run_local(self, extra):
        p = subprocess.run([PYTHON, "train.py"], env=child_env(dict(extra, TMPDIR=self.dir)), cwd=self.dir, capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout.splitlines()

    def test_plain_python(self):
        lines = self.run_local({})
        self.assertEqual(len(lines), 2, lines)
        rep = __import__("json").loads(lines[0])
        self.assertEqual(rep["tempotrain_report"], {"rank": 0, "size": 1, "node": 0, "local": 0, "stop": 0,
                                                     "inf": "Infinity", "resume": 0})
        self.assertTrue(os.path.isdir(rep["checkpoint"]))
        self.assertTrue(rep["checkpoint"].startswith(self.dir), rep["checkpoint"])

    def test_torchrun_env_and_resume(self):
        ck = os.path.join(self.dir, "ck")
        os.mkdir(ck)
        open(os.path.join(ck, "m"), "w").close()
        lines = self.run_local({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "GROUP_RANK": "1",
                                "TEMPOTRAIN_RESUME_FROM": ck})
        rep = __import__("json").loads(lines[0])
        self.assertEqual(rep["tempotrain_report"]["size"], 2)
        self.assertEqual(rep["tempotrain_report"]["node"], 1)
        self.assertEqual(rep["tempotrain_report"]["resume"], 1)
        # Other ranks print nothing.
        lines = self.run_local({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
        self.assertEqual(lines, ["end"])

    def test_local_mode_keeps_its_last_checkpoint(self):
        write(self.dir, "two.py", """
            import os
            from tempotrain import train
            paths = []
            for i in range(3):
                d = train.new_checkpoint_dir()
                open(os.path.join(d, "w"), "w").close()
                train.report({"i": i}, checkpoint=train.Checkpoint.from_directory(d))
                paths.append(d)
            print([os.path.isdir(p) for p in paths])
            """)
        p = subprocess.run([PYTHON, "two.py"], env=child_env({"TMPDIR": self.dir}), cwd=self.dir, capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.splitlines()
        self.assertEqual(lines[-1], "[False, False, True]")
        last = __import__("json").loads(lines[2])["checkpoint"]
        self.assertTrue(os.path.isfile(os.path.join(last, "w")))


if __name__ == "__main__":
    unittest.main()
