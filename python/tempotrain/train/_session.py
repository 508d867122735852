"""The process's session: a channel to the Go rank, or local mode.

It lives in its own module so that the runner (run as ``__main__``) and the
user's ``import tempotrain.train`` share it.
"""

import math
import numbers
import os
import tempfile
import threading

_lock = threading.Lock()
_current = None


def _env_int(environ, name, default):
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"tempotrain: {name}={raw!r} is not an integer") from None


class Context:
    """Ray Train's TrainContext: where this rank stands in the group."""

    def __init__(self, world_rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0,
                 experiment_name="", attempt=0, device=-1):
        self._world_rank = int(world_rank)
        self._world_size = int(world_size)
        self._local_rank = int(local_rank)
        self._local_world_size = int(local_world_size)
        self._node_rank = int(node_rank)
        self._experiment_name = str(experiment_name)
        self._attempt = int(attempt)
        self._device = int(device)

    def get_world_rank(self):
        return self._world_rank

    def get_world_size(self):
        return self._world_size

    def get_local_rank(self):
        return self._local_rank

    def get_local_world_size(self):
        return self._local_world_size

    def get_node_rank(self):
        return self._node_rank

    def get_experiment_name(self):
        return self._experiment_name

    def get_attempt(self):
        """How many times the group was restarted before this attempt (0 on the first)."""
        return self._attempt

    def _device_index(self):
        """The rank's GPU as Go assigned it (CUDA_VISIBLE_DEVICES holds it), -1 for CPU, -2 in local mode."""
        return self._device

    def __repr__(self):
        return (f"Context(world_rank={self._world_rank}, world_size={self._world_size}, "
                f"local_rank={self._local_rank}, node_rank={self._node_rank}, "
                f"experiment_name={self._experiment_name!r}, attempt={self._attempt}, device={self._device})")


def encode_metrics(metrics):
    """Checks and encodes metrics for the wire: numbers as they are, bools as 0/1,
    NaN and infinities as "NaN", "Infinity", "-Infinity"; anything else is a TypeError
    naming the key."""
    if not isinstance(metrics, dict):
        raise TypeError(f"tempotrain.train.report: metrics must be a dict of numbers, not {type(metrics).__name__}")
    out = {}
    for k, v in metrics.items():
        if not isinstance(k, str):
            raise TypeError(f"tempotrain.train.report: metric key {k!r} is a {type(k).__name__}, not a str")
        if isinstance(v, bool):
            out[k] = 1 if v else 0
        elif isinstance(v, numbers.Integral):
            out[k] = int(v)
        elif isinstance(v, numbers.Real):
            f = float(v)
            if math.isnan(f):
                out[k] = "NaN"
            elif math.isinf(f):
                out[k] = "Infinity" if f > 0 else "-Infinity"
            else:
                out[k] = f
        else:
            hint = " (a tensor? use .item())" if hasattr(v, "item") else ""
            raise TypeError(f"tempotrain.train.report: metric {k!r} is a {type(v).__name__}{hint}: "
                            f"metrics must be ints, floats or bools")
    return out


class LocalSession:
    """Local mode: no Go rank (plain python, torchrun). The context comes from
    torchrun's environment; rank 0's reports are printed as JSON lines."""

    local = True

    def __init__(self, environ=None):
        env = os.environ if environ is None else environ
        rank = _env_int(env, "RANK", 0)
        local_rank = _env_int(env, "LOCAL_RANK", 0)
        self.context = Context(
            world_rank=rank,
            world_size=_env_int(env, "WORLD_SIZE", 1),
            local_rank=local_rank,
            local_world_size=_env_int(env, "LOCAL_WORLD_SIZE", 1),
            node_rank=_env_int(env, "GROUP_RANK", _env_int(env, "NODE_RANK", 0)),
            experiment_name=env.get("TEMPOTRAIN_EXPERIMENT_NAME", "local"),
            attempt=_env_int(env, "TORCHELASTIC_RESTART_COUNT", 0),
            device=-2,  # unknown: torch.get_device decides (cuda:LOCAL_RANK when CUDA is there)
        )
        resume = env.get("TEMPOTRAIN_RESUME_FROM") or None
        if resume is not None and not os.path.isdir(resume):
            raise FileNotFoundError(f"tempotrain: TEMPOTRAIN_RESUME_FROM={resume!r} is not a directory")
        self.checkpoint_path = os.path.abspath(resume) if resume else None
        self.backend = None
        self._lock = threading.Lock()
        self._root = None
        self._reported = set()

    def report(self, metrics, checkpoint_path):
        import json
        import sys
        if self.context.get_world_rank() != 0:
            return
        line = json.dumps({"tempotrain_report": metrics, "checkpoint": checkpoint_path}, allow_nan=False)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        with self._lock:
            self._prune(checkpoint_path)

    def should_stop(self):
        return False

    def progress(self, epoch, step):
        pass

    def samples(self, n):
        pass

    def checkpoint_dir(self):
        # One directory per process; report keeps only the last checkpoint reported
        # from it (a ResNet's checkpoint each epoch would fill /tmp otherwise).
        with self._lock:
            if self._root is None:
                self._root = tempfile.mkdtemp(prefix=f"tempotrain-local-{os.getpid()}-")
            return tempfile.mkdtemp(prefix="checkpoint-", dir=self._root)

    def _prune(self, keep):
        """Removes the checkpoints reported before keep (those made by checkpoint_dir)."""
        import shutil
        if self._root is None or keep is None or os.path.dirname(keep) != self._root:
            return
        for p in self._reported - {keep}:
            shutil.rmtree(p, ignore_errors=True)
        self._reported = {keep}


class ChannelSession:
    """A session whose rank is a Go process at the other end of a channel."""

    local = False

    def __init__(self, channel, hello):
        self.channel = channel
        self.hello = hello
        c = hello.get("context") or {}
        self.context = Context(
            world_rank=c.get("world_rank", 0),
            world_size=c.get("world_size", 1),
            local_rank=c.get("local_rank", 0),
            local_world_size=c.get("local_world_size", 1),
            node_rank=c.get("node_rank", 0),
            experiment_name=c.get("experiment_name", ""),
            attempt=c.get("attempt", 0),
            device=c.get("device", -1),
        )
        self.checkpoint_path = hello.get("checkpoint") or None
        self.backend = hello.get("backend") or None

    def report(self, metrics, checkpoint_path):
        self.channel.request("report", metrics=metrics, checkpoint=checkpoint_path)

    def should_stop(self):
        return bool(self.channel.request("should_stop").get("stop"))

    def progress(self, epoch, step):
        self.channel.send("progress", epoch=epoch, step=step)

    def samples(self, n):
        self.channel.send("samples", n=n)

    def checkpoint_dir(self):
        path = self.channel.request("checkpoint_dir").get("path")
        if not isinstance(path, str) or not path:
            raise RuntimeError(f"tempotrain: checkpoint_dir: the answer holds no path: {path!r}")
        return path


def set_session(s):
    global _current
    with _lock:
        _current = s


def get_session():
    """The channel session set by the runner, else a local session (made once)."""
    global _current
    s = _current
    if s is not None:
        return s
    with _lock:
        if _current is None:
            _current = LocalSession()
        return _current
