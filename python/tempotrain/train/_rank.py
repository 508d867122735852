"""The process a tempotrain rank starts: ``python3 -u -m tempotrain.train._rank``.

It says hello to the Go rank, loads the entrypoint ("file.py:func",
"pkg.mod:func", or a script "file.py" run as __main__), runs it, and ends with
``done`` (exit 0) or ``error`` (exit 1). See PROTOCOL.md.
"""

import importlib
import importlib.util
import inspect
import os
import runpy
import sys
import traceback

from tempotrain.train import NonRetryableError, _session
from tempotrain.train._channel import Channel


class EntrypointError(Exception):
    """The entrypoint's file, module or function is missing (never retried)."""


def _type_name(t):
    mod = getattr(t, "__module__", "")
    return t.__qualname__ if mod in ("builtins", "__main__", None, "") else f"{mod}.{t.__qualname__}"


def is_non_retryable(exc):
    """Whether exc is a NonRetryableError or chained (cause or context) from one."""
    seen = set()
    stack = [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, (NonRetryableError, EntrypointError)):
            return True
        stack.append(e.__cause__)
        if not e.__suppress_context__:
            stack.append(e.__context__)
    return False


def _load_function(entrypoint, target, fn):
    if target.endswith(".py"):
        path = os.path.abspath(target)
        if not os.path.isfile(path):
            raise EntrypointError(f"entrypoint {entrypoint!r}: file {target!r} not found in the working "
                                  f"directory {os.getcwd()!r}")
        name = os.path.splitext(os.path.basename(path))[0]
        d = os.path.dirname(path)
        if d not in sys.path:
            sys.path.insert(0, d)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as e:
            # Missing only when the entrypoint's own module (or a parent) is the one not
            # found; an import inside the module that fails is the module's error.
            if e.name and (target == e.name or target.startswith(e.name + ".")):
                raise EntrypointError(f"entrypoint {entrypoint!r}: module {e.name!r} not found "
                                      f"(working directory {os.getcwd()!r}, sys.path {sys.path!r})") from None
            raise
    func = getattr(module, fn, None)
    if func is None:
        raise EntrypointError(f"entrypoint {entrypoint!r}: {target!r} has no function {fn!r}")
    if not callable(func):
        raise EntrypointError(f"entrypoint {entrypoint!r}: {fn!r} is a {type(func).__name__}, not a function")
    return func


def _takes_config(func):
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params)


def _torch_wanted():
    # env:// needs MASTER_ADDR (the Go rank always sets it); without torch there is no group.
    return bool(os.environ.get("MASTER_ADDR")) and importlib.util.find_spec("torch") is not None


def run(hello):
    entrypoint = hello.get("entrypoint")
    if not isinstance(entrypoint, str) or not entrypoint:
        raise EntrypointError(f"hello: entrypoint {entrypoint!r} is not a non-empty string")
    target, sep, fn = entrypoint.rpartition(":")
    if not sep:
        target, fn = entrypoint, ""
    if not fn:  # a script, as torchrun runs it: no process group until prepare_model
        if not target.endswith(".py"):
            raise EntrypointError(f"entrypoint {entrypoint!r}: a module needs its function (pkg.mod:func)")
        path = os.path.abspath(target)
        if not os.path.isfile(path):
            raise EntrypointError(f"entrypoint {entrypoint!r}: script {target!r} not found in the working "
                                  f"directory {os.getcwd()!r}")
        sys.argv = [target] + [str(a) for a in (hello.get("args") or [])]
        sys.path.insert(0, os.path.dirname(path))
        runpy.run_path(path, run_name="__main__")
        return
    func = _load_function(entrypoint, target, fn)
    config = hello.get("config")
    if config is None:
        config = {}
    tt = None
    if _torch_wanted():
        from tempotrain.train import torch as tt
        tt.init_process_group()
    if _takes_config(func):
        func(config)
    else:
        func()
    if tt is not None:
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()


def _flush():
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass


def main():
    try:
        channel = Channel.from_env()
    except (ValueError, OSError) as e:
        print(f"tempotrain: {e}", file=sys.stderr, flush=True)
        return 2
    if channel is None:
        print("tempotrain: TEMPOTRAIN_CHANNEL_FD is not set: this module is started by a tempotrain rank "
              "(run your script directly for local mode)", file=sys.stderr, flush=True)
        return 2
    # Children (DataLoader workers, a script's subprocesses) do not hold the channel: local mode.
    os.environ.pop("TEMPOTRAIN_CHANNEL_FD", None)
    hello = channel.request("hello", pid=os.getpid())
    _session.set_session(_session.ChannelSession(channel, hello))
    try:
        run(hello)
    except SystemExit as e:
        if e.code is None or e.code == 0:
            return _done(channel)
        return _fail(channel, e, message=f"exit status {e.code}" if isinstance(e.code, int) else str(e.code))
    except BaseException as e:  # noqa: B036 - everything the function raises is the run's error
        return _fail(channel, e)
    return _done(channel)


def _done(channel):
    _flush()
    channel.finish("done")
    return 0


def _fail(channel, exc, message=None):
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    # The runner's own frames (and runpy's, for a script) say nothing of the
    # user's code: the traceback starts at the function.
    own = (os.path.abspath(__file__), os.path.join("runpy.py"))
    te.stack = traceback.StackSummary.from_list(
        [f for f in te.stack if os.path.abspath(f.filename) != own[0] and not f.filename.endswith(os.sep + own[1])])
    tb = "".join(te.format())
    if isinstance(exc, EntrypointError):
        tb = f"{_type_name(type(exc))}: {exc}\n"
    sys.stderr.write(tb)
    _flush()
    channel.finish("error", type=_type_name(type(exc)), message=message if message is not None else str(exc),
                   traceback=tb, non_retryable=is_non_retryable(exc))
    return 1


if __name__ == "__main__":
    code = main()
    _flush()
    sys.exit(code)
