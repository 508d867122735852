"""examples/fashion_resnet18 under two fake Go ranks: deterministic training gives
byte-identical weights, and a run stopped mid-epoch (should_stop) and resumed from
its checkpoint ends with the same bytes as one that ran through."""

import os
import shutil
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fakego import PYDIR, FakeGo  # noqa: E402
from test_torch import free_port  # noqa: E402

EXAMPLE = os.path.join(PYDIR, "examples", "fashion_resnet18")
CONFIG = {"epochs": 2, "batch_size": 8, "num_samples": 64, "test_samples": 32, "deterministic": True, "seed": 3}


class ExampleTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tempotrain-example-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def start_group(self, name, stop_at=None, checkpoint=None):
        """Starts two ranks; should_stop answers True on its stop_at-th call on both
        (the group's agreement). Rank 0's reported checkpoints are copied, as a commit."""
        port = str(free_port())
        committed = []
        # The same file name for every run: torch.save's zip names its records after it.
        os.makedirs(os.path.join(self.dir, name))
        final = os.path.join(self.dir, name, "final_state.pt")
        ranks = []
        for r in range(2):
            calls = [0]

            def should_stop(m, calls=calls):
                calls[0] += 1
                return {"stop": stop_at is not None and calls[0] >= stop_at}

            def report(m, r=r):
                if m["checkpoint"]:
                    dst = os.path.join(self.dir, f"{name}-commit-{len(committed)}")
                    shutil.copytree(m["checkpoint"], dst)
                    committed.append((dst, m["metrics"]))
                return {}

            env = {"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2",
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMP_NUM_THREADS": "1",
                   "TEMPOTRAIN_PG_TIMEOUT_S": "120"}
            cfg = dict(CONFIG, final_state_path=final)
            ranks.append(FakeGo(EXAMPLE, "train.py:train_func", config=cfg, env=env, checkpoint=checkpoint,
                                context={"world_rank": r, "world_size": 2, "local_rank": r, "local_world_size": 2},
                                handlers={"should_stop": should_stop, "report": report}))
        return ranks, committed, final

    def wait_group(self, ranks):
        for r, g in enumerate(ranks):
            rc = g.wait(timeout=240)
            self.assertEqual(rc, 0, f"rank {r}: {g.messages[-1]}\n{g.stderr}")
            self.assertEqual(g.ops()[-1], "done")

    def test_deterministic_and_resumable(self):
        full, full_commits, full_final = self.start_group("full")
        stopped, stop_commits, stop_final = self.start_group("stopped", stop_at=6)  # epoch 1, step 1
        self.wait_group(full)
        self.wait_group(stopped)

        # The full run: two epoch reports with a checkpoint each, from rank 0.
        self.assertEqual([m["epoch"] for _, m in full_commits], [0, 1])
        for _, m in full_commits:
            self.assertGreaterEqual(m["accuracy"], 0.0)
            self.assertLessEqual(m["accuracy"], 1.0)
        p0 = [m for m in full[0].messages if m["op"] == "progress"]
        self.assertEqual([(m["epoch"], m["step"]) for m in p0], [(0, 1), (0, 2), (0, 3), (0, 4),
                                                                 (1, 1), (1, 2), (1, 3), (1, 4)])
        self.assertEqual(sum(m["n"] for m in full[1].messages if m["op"] == "samples"), 2 * 32)

        # The stopped run saved its position (epoch 1 after 1 step) and wrote no final state.
        self.assertFalse(os.path.exists(stop_final))
        ckpt, metrics = stop_commits[-1]
        self.assertEqual((metrics["epoch"], metrics["step"]), (1, 1))
        self.assertEqual(sorted(os.listdir(ckpt)), ["model.pt", "state.pt"])

        resumed, _, resumed_final = self.start_group("resumed", checkpoint=ckpt)
        again, _, again_final = self.start_group("again")  # a second full run
        self.wait_group(resumed)
        self.wait_group(again)
        self.assertIn("resuming at epoch 1, step 1", resumed[0].stdout)
        p0 = [m for m in resumed[0].messages if m["op"] == "progress"]
        self.assertEqual([(m["epoch"], m["step"]) for m in p0], [(1, 2), (1, 3), (1, 4)])
        with open(full_final, "rb") as f:
            a = f.read()
        with open(resumed_final, "rb") as f:
            b = f.read()
        self.assertGreater(len(a), 1000)
        self.assertTrue(a == b, "the resumed run's final state_dict differs from the full run's")

        # The second full run gives the same bytes too.
        with open(again_final, "rb") as f:
            self.assertTrue(f.read() == a, "two deterministic runs differ")


if __name__ == "__main__":
    unittest.main()
