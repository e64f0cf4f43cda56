/// <reference no-default-lib="true" />
/// <reference lib="deno.worker" />
// A Python interpreter (Pyodide) in a Worker that may read only Pyodide's own
// files: no host files, no network, no environment, no subprocesses. It is
// loaded once (from a memory snapshot when one exists) and runs one exec at
// a time; each exec gets fresh globals unless it names a session.
import { FsMirror } from "./fs_mirror.ts";
import type { Entry } from "./store.ts";
import childProcess from "node:child_process";
import { OutputGate } from "./output_gate.ts";

interface Init {
  op: "init";
  indexURL: string;
  snapshot: string; // file of the memory snapshot, or ""

  stdin: SharedArrayBuffer;
}
interface Run {
  op: "run";
  code: string;
  filename: string;
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  session: string;
  tree: Entry[] | null; // the whole store, when this worker's copy is stale
  outflow: SharedArrayBuffer; // this exec's output bytes on their way (output_gate.ts)
}

// deno-lint-ignore no-explicit-any
let py: any;
let stdinCtl: Int32Array;
let gate: OutputGate;
let stdinData: Uint8Array;
const fs = new FsMirror();
const sessions = new Map<string, unknown>();

function post(msg: unknown, transfer: Transferable[] = []) {
  self.postMessage(msg, transfer);
}

// Blocks this worker until the agent has stdin for it: ctl[0] is 0 (empty),
// 1 (ctl[1] bytes waiting) or 2 (end of input).
function readStdin(buf: Uint8Array): number {
  for (;;) {
    const state = Atomics.load(stdinCtl, 0);
    if (state === 2 || Atomics.load(stdinCtl, 2) !== 0) return 0; // EOF, or interrupted
    if (state === 1) {
      const n = Math.min(buf.length, Atomics.load(stdinCtl, 1));
      buf.set(stdinData.subarray(0, n));
      const rest = Atomics.load(stdinCtl, 1) - n;
      if (rest > 0) {
        stdinData.copyWithin(0, n, n + rest);
        Atomics.store(stdinCtl, 1, rest);
      } else {
        Atomics.store(stdinCtl, 0, 0);
        post({ op: "stdin_taken" });
      }
      return n;
    }
    Atomics.wait(stdinCtl, 0, 0);
  }
}

const RUNNER = `
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
import importlib
__sbx_base_path = [p for p in sys.path if p]

def __sbx_path(filename, env):
    head = "" if filename.startswith("<") else os.path.dirname(os.path.abspath(filename))
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [head] + extra + __sbx_base_path

def __sbx_run(code, filename, argv, env, cwd, g):
    fresh = g is None
    before = set(sys.modules) if fresh else None
    try:
        return __sbx_run_in(code, filename, argv, env, cwd, g)
    finally:
        if fresh:
            for name in set(sys.modules) - before:
                del sys.modules[name]

def __sbx_run_in(code, filename, argv, env, cwd, g):
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
    status = 0
    try:
        exec(compile(code, filename, "exec"), g)
    except SystemExit as e:
        if e.code is None:
            status = 0
        elif isinstance(e.code, int):
            status = e.code & 0xff
        else:
            print(e.code, file=sys.stderr)
            status = 1
    except BaseException:
        traceback.print_exc()
        status = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
    return status
`;

// Pyodide takes Deno for Node and asks Node's process for ids and
// child_process for system(): the Worker may do neither, and a refusal inside
// Pyodide is fatal to the interpreter. Answer without the host instead.
function confine() {
  // deno-lint-ignore no-explicit-any
  const proc = (globalThis as any).process;
  for (const k of ["getuid", "geteuid", "getgid", "getegid"]) {
    Object.defineProperty(proc, k, { value: () => 1000, configurable: true, writable: true });
  }
  const noProcesses = {
    spawnSync: () => {
      post({ op: "out", fd: 2, data: new TextEncoder().encode("sbx: a deno sandbox cannot start processes\n") });
      return { status: 127, signal: null, pid: 0, output: [], stdout: null, stderr: null };
    },
  };
  Object.assign(childProcess, noProcesses);
}

async function init(m: Init) {
  confine();
  stdinCtl = new Int32Array(m.stdin, 0, 3);
  stdinData = new Uint8Array(m.stdin, 16);
  const { loadPyodide } = await import(new URL("pyodide.mjs", "file://" + m.indexURL).href);
  const opts: Record<string, unknown> = { indexURL: m.indexURL };
  if (m.snapshot) opts._loadSnapshot = Deno.readFileSync(m.snapshot);
  py = await loadPyodide(opts);
  const writer = (fd: number) => (b: Uint8Array) => (gate.send((data) => post({ op: "out", fd, data }), b), b.length);
  py.setStdout({ write: writer(1) });
  py.setStderr({ write: writer(2) });
  py.setStdin({ read: readStdin, isatty: false });
  // ctl[2] = 2 (SIGINT) raises KeyboardInterrupt at the next bytecode: how a
  // timeout or a signal stops the exec without losing the interpreter.
  py.setInterruptBuffer(new Int32Array(m.stdin, 8, 1));
  py.runPython(RUNNER);
  fs.attach(py.FS);
  post({ op: "ready" });
}

function run(m: Run) {
  gate = new OutputGate(new Int32Array(m.outflow), () => Atomics.load(stdinCtl, 2) !== 0);
  if (m.tree) fs.load(m.tree);
  const runner = py.globals.get("__sbx_run");
  let g: unknown = undefined;
  if (m.session) {
    if (!sessions.has(m.session)) sessions.set(m.session, py.runPython("{'__name__': '__main__', '__builtins__': __builtins__}"));
    g = sessions.get(m.session);
  }
  let status: number;
  try {
    status = runner(m.code, m.filename, py.toPy(m.argv), py.toPy(m.env), m.cwd, g);
  } finally {
    runner.destroy();
  }
  const changes = fs.collect();
  Atomics.store(stdinCtl, 2, 0);
  post({ op: "done", status, changes });
}

self.onmessage = async (e: MessageEvent) => {
  try {
    if (e.data.op === "init") await init(e.data);
    else if (e.data.op === "run") run(e.data);
  } catch (err) {
    post({ op: "fatal", message: String((err as Error)?.stack ?? err) });
  }
};
