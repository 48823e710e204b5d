"""bub code mode: the child process that runs one piece of model-written Python.

Started by the bub host as `python -u -c <this source>` (stdlib only, Python 3.9+).
The code calls bub's tools as `await tools.<name>(key=value, ...)`; every call is
sent to the host, which executes it (hooks included) and sends the result back.

Protocol, JSON lines in both directions (host side: src/codemode/runner.rs):
  host -> child  {"type": "run", "code", "filename", "tools"}          (first line)
                 {"type": "result", "id", "value"} | {"type": "error", "id", "message"}
  child -> host  {"type": "call", "id", "name", "arguments"}
                 {"type": "output", "data"}
                 {"type": "done"} | {"type": "failed", "error", "error_type", "message", "traceback"}

File descriptors: the protocol runs on private, non-inheritable duplicates of
fds 0 and 1. fd 0 becomes /dev/null, so neither `input()` nor a subprocess can
swallow host messages; fd 1 becomes a pipe this process reads back into the
output, so whatever the code or its subprocesses write there is returned, and no
stray write can split or fake a protocol line.

Output printed by the code is buffered and sent at 8 KiB, every 0.2 s (from a
thread, so it survives a timeout while the code blocks), before each tool call
and before the final message.
"""

import ast
import asyncio
import builtins
import codecs
import difflib
import inspect
import io
import json
import linecache
import os
import select
import sys
import threading
import time
import traceback

FLUSH_CHARS = 8192
FLUSH_EVERY = 0.2


class ToolError(Exception):
    """A bub tool call failed on the host; the message says why."""


def _json_line(message, errors):
    text = json.dumps(message, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return (text + "\n").encode("utf-8", errors)


class _Channel:
    """Writes protocol lines to the host, one whole line at a time."""

    def __init__(self, fd):
        self._fd = fd
        self._lock = threading.Lock()

    def send(self, message):
        """Sends a message whose strings may hold lone surrogates (they become '?')."""
        self.send_line(_json_line(message, "replace"))

    def send_line(self, data):
        view = memoryview(data)
        with self._lock:
            try:
                while view:
                    view = view[os.write(self._fd, view):]
            except OSError:
                # Nobody reads the protocol any more: the host is gone.
                os._exit(1)


class _Output(io.TextIOBase):
    """`sys.stdout` for the code: buffers text and sends it as `output` messages."""

    def __init__(self, channel, fd1_captured):
        super().__init__()
        self._channel = channel
        self._fd1_captured = fd1_captured
        # Guards the buffer and keeps flushes in order (a flush sends under it).
        self._lock = threading.Lock()
        self._parts = []
        self._size = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.buffer = _BinaryOutput(self)

    @property
    def encoding(self):
        return "utf-8"

    @property
    def errors(self):
        return "replace"

    def writable(self):
        return True

    def isatty(self):
        return False

    def fileno(self):
        if self._fd1_captured:
            return 1  # fd 1 is read back into this output
        raise io.UnsupportedOperation("fileno")

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not " + type(s).__name__)
        if s:
            with self._lock:
                self._parts.append(s)
                self._size += len(s)
                full = self._size >= FLUSH_CHARS
            if full:
                self.flush()
        return len(s)

    def write_bytes(self, data, final=False):
        with self._lock:
            text = self._decoder.decode(bytes(data), final)
        return self.write(text)

    def flush(self):
        with self._lock:
            if not self._parts:
                return
            data = "".join(self._parts)
            self._parts = []
            self._size = 0
            self._channel.send({"type": "output", "data": data})

    def close(self):
        self.flush()  # the host's output stays open whatever the code does


class _BinaryOutput:
    """`sys.stdout.buffer`: bytes are decoded as UTF-8 (invalid bytes replaced)."""

    def __init__(self, text):
        self._text = text

    def write(self, data):
        self._text.write_bytes(data)
        return len(data)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        self._text.flush()

    def writable(self):
        return True

    def fileno(self):
        return self._text.fileno()


def _flush_periodically(out):
    while True:
        time.sleep(FLUSH_EVERY)
        out.flush()


class _Fd1Pump:
    """Reads what lands on fd 1 (subprocesses, C code, os.write) into the output."""

    def __init__(self, read_fd, out):
        self._fd = read_fd
        self._out = out
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._eof = False
        os.set_blocking(read_fd, False)
        self._thread = threading.Thread(target=self._run, name="bub-fd1", daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set() and not self._eof:
            try:
                ready, _, _ = select.select([self._fd], [], [], 0.05)
            except (OSError, ValueError):
                return
            if ready:
                self.poll()

    def poll(self):
        """Takes in what is waiting on fd 1 now (a bounded amount)."""
        self._drain(max_chunks=16)

    def _drain(self, max_chunks):
        with self._lock:
            for _ in range(max_chunks):
                try:
                    chunk = os.read(self._fd, 65536)
                except BlockingIOError:
                    return
                except OSError:
                    self._eof = True
                    return
                if not chunk:
                    self._eof = True
                    return
                self._out.write_bytes(chunk)

    def finish(self):
        """Takes in what was written so far; later writes are dropped."""
        self._stop.set()
        self._thread.join(1.0)
        self._drain(max_chunks=64)  # bounded: a subprocess may still be writing
        self._out.write_bytes(b"", final=True)


def _take_fds():
    """Moves the protocol off fds 0 and 1; returns (protocol in, protocol out, fd 1 pipe or None)."""
    proto_in = os.dup(0)
    proto_out = os.dup(1)
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    except OSError:
        pass
    try:
        read_end, write_end = os.pipe()
        os.dup2(write_end, 1)
        os.close(write_end)
    except (OSError, AttributeError):
        return proto_in, proto_out, None  # raw writes to fd 1 reach the host as plain lines
    return proto_in, proto_out, read_end


class _Host:
    """Tool calls to the host and their pending results."""

    def __init__(self, channel, reader, out, pump):
        self._channel = channel
        self._reader = reader
        self._out = out
        self._pump = pump
        self._pending = {}
        self._next_id = 0
        self._loop = None
        self._closed = None

    def start(self, loop):
        self._loop = loop
        threading.Thread(target=self._read, name="bub-host", daemon=True).start()

    def _read(self):
        while True:
            try:
                line = self._reader.readline()
            except (OSError, ValueError):
                line = b""
            if not line:
                self._post(self._close)
                return
            try:
                message = json.loads(line)
            except ValueError:
                sys.stderr.write("bub code mode: ignoring a host line that is not JSON\n")
                continue
            if isinstance(message, dict):
                self._post(self._settle, message)

    def _post(self, callback, *args):
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            pass  # the loop is closed: the run is over

    def _settle(self, message):
        call_id = message.get("id")
        kind = message.get("type")
        if not isinstance(call_id, int) or kind not in ("result", "error"):
            return
        future = self._pending.pop(call_id, None)
        if future is None or future.done():
            return  # the caller stopped waiting (cancelled)
        if kind == "result":
            future.set_result(message.get("value"))
        else:
            future.set_exception(ToolError(str(message.get("message") or "the tool call failed")))

    def _close(self):
        self._closed = "the bub host closed the tool channel"
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ToolError(self._closed))
        self._pending.clear()

    async def call(self, name, arguments):
        if self._closed:
            raise ToolError(self._closed)
        self._next_id += 1
        call_id = self._next_id
        message = {"type": "call", "id": call_id, "name": name, "arguments": arguments}
        try:
            line = _json_line(message, "strict")
        except (TypeError, ValueError) as error:
            raise TypeError("arguments of tools.%s must be JSON-serializable: %s" % (name, error)) from None
        future = self._loop.create_future()
        self._pending[call_id] = future
        try:
            # Output printed before the call reaches the host before the call.
            if self._pump is not None:
                self._pump.poll()
            self._out.flush()
            self._channel.send_line(line)
            return await future
        finally:
            self._pending.pop(call_id, None)


class _Tools:
    """The bub tools this code may call: `await tools.<name>(key=value, ...)`."""

    def __getattr__(self, name):  # only reached for names that are not tools
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        available = sorted(self.__dict__)
        if not available:
            raise AttributeError("no tool named %r: no tools are available in this run" % name)
        hint = difflib.get_close_matches(name, available, n=1)
        message = "no tool named %r; available tools: %s" % (name, ", ".join(available))
        if hint:
            message += " (did you mean %r?)" % hint[0]
        raise AttributeError(message)

    def __dir__(self):
        return sorted(self.__dict__)

    def __repr__(self):
        return "<bub tools: %s>" % ", ".join(sorted(self.__dict__))


def _tool_function(name, host):
    def tool(*args, **kwargs):
        if args:
            raise TypeError(
                "tools.%s() takes keyword arguments only (got %d positional); call it as "
                "`await tools.%s(name=value, ...)`" % (name, len(args), name)
            )
        return host.call(name, kwargs)

    tool.__name__ = name
    tool.__qualname__ = "tools." + name
    tool.__doc__ = "Calls the bub tool %r on the host. Keyword arguments only; await the result." % name
    return tool


def _make_tools(names, host):
    tools = _Tools()
    for name in names:
        tools.__dict__[name] = _tool_function(name, host)
    return tools


async def _run(request, host):
    host.start(asyncio.get_running_loop())
    code = request["code"]
    filename = request["filename"]
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    namespace = {
        "__name__": "__main__",
        "__builtins__": builtins,
        "tools": _make_tools(request.get("tools") or [], host),
        "ToolError": ToolError,
    }
    compiled = compile(code, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    result = eval(compiled, namespace)
    if compiled.co_flags & inspect.CO_COROUTINE:
        await result


def _type_name(cls):
    module = getattr(cls, "__module__", None)
    name = getattr(cls, "__qualname__", None) or cls.__name__
    if module in (None, "builtins", "__main__"):
        return name
    return module + "." + name


def _keep_user_frames(exception, filename, seen):
    if exception is None or id(exception) in seen:
        return
    seen.add(id(exception))
    exception.stack = traceback.StackSummary.from_list([f for f in exception.stack if f.filename == filename])
    _keep_user_frames(exception.__cause__, filename, seen)
    _keep_user_frames(exception.__context__, filename, seen)
    for inner in getattr(exception, "exceptions", None) or ():
        _keep_user_frames(inner, filename, seen)


def _failure(exc, filename):
    error_type = _type_name(type(exc))
    try:
        message = str(exc)
    except Exception:
        message = "<str() of the exception failed>"
    try:
        summary = traceback.TracebackException(type(exc), exc, exc.__traceback__)
        _keep_user_frames(summary, filename, set())
        text = "".join(summary.format())
    except Exception:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {
        "type": "failed",
        "error": error_type + ": " + message if message else error_type,
        "error_type": error_type,
        "message": message,
        "traceback": text,
    }


def main():
    proto_in, proto_out, fd1 = _take_fds()
    channel = _Channel(proto_out)
    out = _Output(channel, fd1 is not None)
    reader = os.fdopen(proto_in, "rb")
    try:
        request = json.loads(reader.readline())
        if not (isinstance(request, dict) and request.get("type") == "run" and isinstance(request.get("code"), str)):
            raise ValueError("expected a run message")
    except ValueError as error:
        sys.stderr.write("bub code mode: bad first message from the host: %s\n" % error)
        os._exit(2)
    filename = request.get("filename")
    if not isinstance(filename, str) or not filename:
        filename = request["filename"] = "<run_code>"

    sys.stdin = io.StringIO()
    sys.stdout = out
    pump = _Fd1Pump(fd1, out) if fd1 is not None else None
    threading.Thread(target=_flush_periodically, args=(out,), name="bub-flush", daemon=True).start()
    host = _Host(channel, reader, out, pump)

    try:
        asyncio.run(_run(request, host))
        outcome = {"type": "done"}
    except SystemExit as exc:
        outcome = {"type": "done"} if exc.code in (None, 0) else _failure(exc, filename)
    except BaseException as exc:
        outcome = _failure(exc, filename)

    if pump is not None:
        pump.finish()
    out.flush()
    channel.send(outcome)
    # The host kills the whole process group next; do not wait for threads the code left running.
    os._exit(0)


main()
