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
import { RUNNER } from "./py_runner.ts";
import { explainPermission, LISTEN, useInstead } from "./permissions.ts";

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
  console: boolean; // the interactive console after the code (python3 -i, or on a terminal)
  tty: boolean;
  otherDrivers: string;
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
// 1 (ctl[1] bytes waiting), 2 (end of input) or 3 (one end of input: a
// terminal's Ctrl-D; reads after it wait again).
function readStdin(buf: Uint8Array): number {
  // C stdio's readv asks for 0 bytes first on a terminal: no end of input yet.
  if (buf.length === 0) return 0;
  for (;;) {
    const state = Atomics.load(stdinCtl, 0);
    // Interrupted (Ctrl-C, a signal, a timeout): KeyboardInterrupt from this read.
    if (Atomics.load(stdinCtl, 2) !== 0) py.checkInterrupt();
    if (state === 2 || Atomics.load(stdinCtl, 2) !== 0) return 0;
    if (state === 3) {
      Atomics.store(stdinCtl, 0, 0);
      post({ op: "stdin_taken" });
      return 0;
    }
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

// The whole file into one buffer of its size: Deno.readFileSync grows its
// buffer as it reads, measured at ~190 ms for the 30 MB snapshot against ~50.
function readWhole(path: string): Uint8Array {
  const f = Deno.openSync(path);
  try {
    const buf = new Uint8Array(f.statSync().size);
    for (let off = 0; off < buf.length;) {
      const n = f.readSync(buf.subarray(off));
      if (n === null || n === 0) throw new Error(`${path}: shorter than its size`);
      off += n;
    }
    return buf;
  } finally {
    f.close();
  }
}

async function init(m: Init) {
  confine();
  stdinCtl = new Int32Array(m.stdin, 0, 3);
  stdinData = new Uint8Array(m.stdin, 16);
  const { loadPyodide } = await import(new URL("pyodide.mjs", "file://" + m.indexURL).href);
  const opts: Record<string, unknown> = { indexURL: m.indexURL };
  if (m.snapshot) opts._loadSnapshot = readWhole(m.snapshot);
  py = await loadPyodide(opts);
  setStdio(false);
  // ctl[2] = 2 (SIGINT) raises KeyboardInterrupt at the next bytecode: how a
  // timeout or a signal stops the exec without losing the interpreter.
  py.setInterruptBuffer(new Int32Array(m.stdin, 8, 1));
  refuseListening();
  py.globals.set("__sbx_explain", (message: string, stack: string) =>
    explainPermission(message, stack, otherDrivers) ?? refused.splice(0).pop() ?? null);
  if (!py.globals.has("__sbx_run")) py.runPython(RUNNER);  // the snapshot has it
  fs.attach(py.FS);
  post({ op: "ready" });
}

// Whether the streams are a terminal (isatty) follows the exec.
let stdioTty: boolean | null = null;
function setStdio(tty: boolean) {
  if (tty === stdioTty) return;
  stdioTty = tty;
  const writer = (fd: number) => (b: Uint8Array) => (gate.send((data) => post({ op: "out", fd, data }), b), b.length);
  py.setStdout({ write: writer(1), isatty: tty });
  py.setStderr({ write: writer(2), isatty: tty });
  py.setStdin({ read: readStdin, isatty: tty });
}

// Emscripten's listen (also under a UDP bind) asks Node for a WebSocket
// server: a module this Worker may not read, and an error that would kill the
// interpreter. Refused as EACCES instead; the runner's socket.listen says why
// first, this catches what reaches the C level (_socket) directly.
let otherDrivers = "";
const refused: string[] = [];
function refuseListening() {
  const ops = py._module?.SOCKFS?.websocket_sock_ops;
  if (!ops) return;
  ops.listen = () => {
    refused.push(`${LISTEN}; ${useInstead(otherDrivers)}`);
    throw new py.FS.ErrnoError(2); // EACCES in Emscripten's numbering
  };
}

function run(m: Run) {
  gate = new OutputGate(new Int32Array(m.outflow), () => Atomics.load(stdinCtl, 2) !== 0);
  otherDrivers = m.otherDrivers;
  refused.length = 0;
  setStdio(m.tty);
  py.globals.set("__sbx_listen_refused", `${LISTEN}; ${useInstead(otherDrivers)}`);
  if (m.tree) fs.load(m.tree);
  const runner = py.globals.get("__sbx_run");
  let g: unknown = undefined;
  if (m.session) {
    if (!sessions.has(m.session)) sessions.set(m.session, py.runPython("{'__name__': '__main__', '__builtins__': __builtins__}"));
    g = sessions.get(m.session);
  }
  let status: number;
  try {
    status = runner(m.code, m.filename, py.toPy(m.argv), py.toPy(m.env), m.cwd, g, m.console, m.tty);
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
