// The Python half of an exec, loaded once into each interpreter: runs the
// exec's code (and the interactive console) as a new python3 process would,
// and prints what a deno sandbox lacks in one line. __sbx_explain and
// __sbx_listen_refused come from py_worker.ts (permissions.ts's wording).
export const RUNNER = String.raw`
import sys, os, builtins, traceback, time

# Pyodide's sleep blocks in one wait that its interrupt flag cannot cut short:
# sleeping in steps lets a timeout or a signal stop a sleeping exec.
def __sbx_sleep(seconds, _sleep=time.sleep, _now=time.monotonic):
    end = _now() + seconds
    while (left := end - _now()) > 0:
        _sleep(min(left, 0.05))
time.sleep = __sbx_sleep

# The interpreter outlives one exec, but each exec must see what a new
# python3 process would: its own sys.path (the script's directory, then
# PYTHONPATH, then the standard library) and the current version of every
# module it imports from the sandbox's files.
# invalidate_caches() imports importlib.metadata: loaded here (the snapshot
# has it), it stays out of what __sbx_run unloads after each exec, which made
# every exec import it again (~90 ms of a print(1) under the CPU cap).
import importlib, importlib.metadata
__sbx_base_path = [p for p in sys.path if p]

def __sbx_path(filename, env):
    head = "" if filename.startswith("<") else os.path.dirname(os.path.abspath(filename))
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [head] + extra + __sbx_base_path

def __sbx_run(code, filename, argv, env, cwd, g, console, tty):
    fresh = g is None
    before = set(sys.modules) if fresh else None
    try:
        return __sbx_run_in(code, filename, argv, env, cwd, g, console, tty)
    finally:
        if fresh:
            for name in set(sys.modules) - before:
                del sys.modules[name]

def __sbx_run_in(code, filename, argv, env, cwd, g, console, tty):
    sys.argv = list(argv)
    os.environ.clear()
    os.environ.update(dict(env))
    try:
        os.chdir(cwd)
    except OSError as e:
        print(f"sbx: cannot enter working directory {cwd}: {e.strerror}", file=sys.stderr)
        return 126
    sys.path[:] = __sbx_path(filename, env)
    importlib.invalidate_caches()
    if g is None:
        g = {"__name__": "__main__", "__builtins__": builtins}
    g["__file__"] = filename
    # A terminal shows each line as it is printed.
    for f in (sys.stdout, sys.stderr):
        f.reconfigure(line_buffering=bool(tty))
    try:
        status, ended = 0, False
        if code or not console:
            status, ended = __sbx_status(lambda: exec(compile(code, filename, "exec"), g))
        if console and not ended:
            status, _ = __sbx_status(lambda: __SbxConsole(g).interact(banner=__sbx_banner, exitmsg=""))
        return status
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass

def __sbx_status(run):
    """Runs run(): its exit status, and whether it asked to end the program (SystemExit)."""
    try:
        run()
        return 0, False
    except SystemExit as e:
        if e.code is None:
            return 0, True
        if isinstance(e.code, int):
            return e.code & 0xff, True
        print(e.code, file=sys.stderr)
        return 1, True
    except KeyboardInterrupt:
        traceback.print_exc()
        return 130, False
    except BaseException as e:
        __sbx_print_uncaught(e)
        return 1, False

# What the sandbox lacks, in one line instead of a traceback that ends in
# Deno's "run again with the --allow-net flag" (permissions.ts words it).
def __sbx_unavailable(e):
    if isinstance(e, PermissionError) and str(e.strerror).startswith("deno sandboxes"):
        return e.strerror
    if type(e).__name__ == "JsException" or (isinstance(e, OSError) and e.errno == errno.EACCES):
        why = __sbx_explain(str(e), "".join(traceback.format_exception(e)))
        return why or None
    return None

def __sbx_print_uncaught(e):
    why = __sbx_unavailable(e)
    if why:
        print(f"sbx: {why}", file=sys.stderr)
    else:
        traceback.print_exception(e)

# exit() and quit() without closing sys.stdin, which the next exec reads.
class __SbxQuitter:
    def __init__(self, name):
        self.name = name
    def __repr__(self):
        return f"Use {self.name}() or Ctrl-D (i.e. EOF) to exit"
    def __call__(self, code=None):
        raise SystemExit(code)
builtins.exit = __SbxQuitter("exit")
builtins.quit = __SbxQuitter("quit")

# The interactive console: the standard library's (pyodide.console's runs code
# on Pyodide's asyncio loop, which this Worker's blocking reads would stall).
import code as __sbx_code
__sbx_banner = (f"Python {sys.version.split()[0]} on {sys.platform} (Pyodide, in a deno sandbox)\n"
                'Type "help", "copyright", "credits" or "license" for more information.')

_sbx_unavailable = __sbx_unavailable  # unmangled inside a class body

class __SbxConsole(__sbx_code.InteractiveConsole):
    def showtraceback(self):
        why = _sbx_unavailable(sys.exc_info()[1])
        if why:
            self.write(f"sbx: {why}\n")
        else:
            super().showtraceback()

# Listening sockets do not exist here: say so at the call (Emscripten's own
# listen would ask Node for a WebSocket server, a permission the Worker lacks).
import socket, errno
def __sbx_no_listen(self, *args):
    raise PermissionError(errno.EACCES, __sbx_listen_refused)
def __sbx_bind(self, address, _bind=socket.socket.bind):
    if self.type == socket.SOCK_DGRAM:
        __sbx_no_listen(self)
    return _bind(self, address)
socket.socket.listen = __sbx_no_listen
socket.socket.bind = __sbx_bind
`;
