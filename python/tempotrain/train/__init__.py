"""Ray Train's names for a function that a tempotrain rank runs.

Code written for ``ray.train`` runs with ``import tempotrain.train as train``
(or ``from tempotrain import train``)::

    train.report({"loss": loss}, checkpoint=train.Checkpoint.from_directory(d))
    ckpt = train.get_checkpoint()
    rank = train.get_context().get_world_rank()

Without a Go rank (``TEMPOTRAIN_CHANNEL_FD`` unset: plain ``python3`` or
``torchrun``) everything works in local mode: the context comes from
torchrun's environment, rank 0 prints each report as a JSON line, and
``should_stop()`` is False. See ../../PROTOCOL.md.
"""

import contextlib
import numbers
import os
import shutil
import tempfile

from . import _session
from ._channel import ChannelError, RequestError

__all__ = [
    "Checkpoint",
    "NonRetryableError",
    "ChannelError",
    "RequestError",
    "report",
    "get_checkpoint",
    "get_context",
    "should_stop",
    "set_progress",
    "add_samples",
    "new_checkpoint_dir",
]


class NonRetryableError(Exception):
    """Raising it (or an exception chained from it) fails the run without restarts."""


class Checkpoint:
    """A directory of checkpoint files, as Ray Train's Checkpoint."""

    def __init__(self, path):
        self.path = os.path.abspath(os.fspath(path))

    @classmethod
    def from_directory(cls, path):
        p = os.fspath(path)
        if not os.path.isdir(p):
            raise FileNotFoundError(f"tempotrain.train.Checkpoint.from_directory: {p!r} is not a directory")
        return cls(p)

    @contextlib.contextmanager
    def as_directory(self):
        """Yields the checkpoint's local directory (it is already local)."""
        yield self.path

    def to_directory(self, path=None):
        """Copies the checkpoint's files into path (a new temporary directory when None); returns it."""
        if path is None:
            path = tempfile.mkdtemp(prefix="tempotrain-checkpoint-")
        path = os.fspath(path)
        shutil.copytree(self.path, path, dirs_exist_ok=True)
        return path

    def __fspath__(self):
        return self.path

    def __eq__(self, other):
        return isinstance(other, Checkpoint) and other.path == self.path

    def __hash__(self):
        return hash(self.path)

    def __repr__(self):
        return f"Checkpoint(path={self.path!r})"


def report(metrics, checkpoint=None):
    """Reports metrics, and a checkpoint directory to commit, for this step.

    Metrics are ints, floats or bools (a TypeError names any other key). Every
    rank may report (Ray's convention: rank 0 passes the checkpoint). With a Go
    rank, rank 0 returns once the checkpoint is committed; a failed commit raises
    RequestError.
    """
    wire = _session.encode_metrics(metrics)
    path = None
    if checkpoint is not None:
        if isinstance(checkpoint, Checkpoint):
            path = checkpoint.path
        elif isinstance(checkpoint, (str, os.PathLike)):
            path = os.path.abspath(os.fspath(checkpoint))
        else:
            raise TypeError(f"tempotrain.train.report: checkpoint must be a Checkpoint or a directory, "
                            f"not {type(checkpoint).__name__}")
        if not os.path.isdir(path):
            raise FileNotFoundError(f"tempotrain.train.report: checkpoint directory {path!r} does not exist")
    _session.get_session().report(wire, path)


def get_checkpoint():
    """The checkpoint this attempt resumes from, or None."""
    p = _session.get_session().checkpoint_path
    return Checkpoint(p) if p else None


def get_context():
    """This rank's Context: get_world_rank(), get_world_size(), get_local_rank(), ...."""
    return _session.get_session().context


def should_stop():
    """Whether the group agreed to stop (e.g. the run is being rescaled): save a
    checkpoint and return. A collective call: every rank must call it at the
    same points. Always False in local mode."""
    return _session.get_session().should_stop()


def _nonneg_int(name, v):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
        raise TypeError(f"tempotrain.train: {name} must be a non-negative int, not {v!r}")
    return int(v)


def set_progress(epoch, step):
    """Tells the rank where training is (shown when the group stalls or is cancelled)."""
    _session.get_session().progress(_nonneg_int("epoch", epoch), _nonneg_int("step", step))


def add_samples(n):
    """Counts n samples trained (the run's samples/s)."""
    _session.get_session().samples(_nonneg_int("n", n))


def new_checkpoint_dir():
    """A new empty directory to write a checkpoint into: with a Go rank, under the
    rank's scratch dir, so that the commit hard-links rather than copies it."""
    return _session.get_session().checkpoint_dir()
