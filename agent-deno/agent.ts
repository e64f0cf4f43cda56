// The deno driver's agent: serves core/protocol.hpp on a unix socket, keeps
// the sandbox's files in SQLite (store.ts) and runs each exec's Python
// (Pyodide) or JavaScript/TypeScript in a Worker that has fewer permissions
// than this process: none but reading Pyodide's own files.
//
// Usage: deno run ... agent.ts --socket PATH --store PATH --pyodide DIR
//        [--snapshot FILE] [--workdir /work] [--other-drivers "subprocess, runsc"]
//        [--max-output BYTES] [--pythons N] [--warm-python | --load-python | --exit-when-warm]
import { parseArgs } from "node:util";
import { Decoder, encode, HEADER, encodeError, encodeJson, type Frame, chunks, parseJson, ProtoError, T, VERSION } from "./protocol.ts";
import { cleanPath, type Entry, Store } from "./store.ts";
import { type ExecPlan, planExec } from "./commands.ts";
import { PyPool } from "./py_pool.ts";
import { JsPool } from "./js_pool.ts";
import type { RunIO } from "./run_io.ts";
import { released } from "./output_gate.ts";
import { LineDiscipline, onlcr } from "./tty.ts";
import { BACKGROUND, explainError, LISTEN, useInstead } from "./permissions.ts";

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    socket: { type: "string" },
    store: { type: "string" },
    pyodide: { type: "string" },
    snapshot: { type: "string", default: "" },
    workdir: { type: "string", default: "/work" },
    "other-drivers": { type: "string", default: "subprocess, runsc" },
    "max-output": { type: "string", default: String(64 << 20) },
    pythons: { type: "string", default: "1" },
    "warm-python": { type: "boolean", default: false },
    "load-python": { type: "boolean", default: false },
    "exit-when-warm": { type: "boolean", default: false },
  },
});
if (!args.socket || !args.store || !args.pyodide) {
  console.error("sbx-agent-deno: --socket, --store and --pyodide are required");
  Deno.exit(2);
}

const started = performance.now();
const store = new Store(args.store);
store.ensureDir(cleanPath(args.workdir!));
store.ensureDir("/tmp");
const maxOutput = Number(args["max-output"]);
let snapshot = args.snapshot!;
try {
  if (snapshot) Deno.statSync(snapshot);
} catch {
  console.error(`sbx-agent-deno: no Pyodide snapshot at ${snapshot}; Python starts slowly`);
  snapshot = "";
}
// Interpreters that fit the memory cap beside the agent (the driver works it out).
const maxPython = Math.max(1, Number(args.pythons) || 1);
const pyPool = new PyPool(args.pyodide!, snapshot, store, maxPython, () => restartProcess());
// --load-python (a Python one-shot's sandbox): at once, before any exec, and
// before the rest of the agent is set up (the Worker loads on its own thread).
// The host boots such a sandbox without its CPU cap and sets the cap when
// ping says the load has settled (loaded or failed), before its one exec.
let pythonSettled = false;
if (args["load-python"]) void pyPool.warm().finally(() => pythonSettled = true);
const jsPool = new JsPool(store, () => restartProcess());
const conns = new Set<Conn>();
let restarting = false;
let running = 0;

/// This Deno cannot stop a Worker stuck in a loop (terminate() leaves its
/// thread spinning and its memory held), so the agent hands its process back
/// to the supervisor (backends/deno/driver.cpp) for a fresh one once the
/// answers already queued are out. Other execs running here end with it.
export const RESTART_STATUS = 75;
function restartProcess() {
  if (restarting) return;
  restarting = true;
  const since = Date.now();
  console.error("sbx-agent-deno: a Worker did not stop; the agent process will be replaced");
  // New hosts wait for the next process (the driver's connect retries): the
  // socket's name goes first, and the listener only once the connections
  // already queued on it are accepted (closing it would reset them). Those
  // connected finish (for at most RESTART_WAIT_MS) before this process goes.
  try {
    Deno.removeSync(args.socket!);
  } catch {
    // already gone
  }
  setTimeout(() => listener.close(), 200);
  const deadline = Date.now() + RESTART_WAIT_MS;
  const idle = () => ((conns.size > 0 || Date.now() < since + 250) && Date.now() < deadline ? setTimeout(idle, 20) : drain());
  const flushed = Date.now() + RESTART_WAIT_MS + 2000;
  const drain = () => ([...conns].some((c) => c.pending()) && Date.now() < flushed ? setTimeout(drain, 10) : Deno.exit(RESTART_STATUS));
  idle();
}
const RESTART_WAIT_MS = 10_000;

// ---- one host connection ---------------------------------------------------

class Conn {
  private dec = new Decoder();
  private queue: { frame: Uint8Array; sent?: () => void }[] = [];
  private writing = false;
  private uploads = new Map<number, { path: string; req: Record<string, unknown>; parts: Uint8Array[] }>();
  execs = new Map<number, Exec>();
  dead = false;

  constructor(private conn: Deno.Conn) {
    conns.add(this);
  }

  /// Whether frames are still waiting to be written.
  pending(): boolean {
    return this.writing || this.queue.length > 0;
  }

  /// Queues a frame; `sent` runs once the socket has taken it (or never will).
  send(frame: Uint8Array, sent?: () => void) {
    if (this.dead) return sent?.();
    this.queue.push({ frame, sent });
    if (!this.writing) this.flush();
  }

  private async flush() {
    this.writing = true;
    try {
      while (this.queue.length && !this.dead) {
        // Batches of at most ~1 MiB: one write per batch, no copy of a whole backlog.
        let n = 0, size = 0;
        while (n < this.queue.length && (n === 0 || size + this.queue[n].frame.length <= 1 << 20)) {
          size += this.queue[n++].frame.length;
        }
        const items = this.queue.splice(0, n);
        const batch = n === 1 ? items[0].frame : concat(items.map((i) => i.frame));
        for (let off = 0; off < batch.length;) off += await this.conn.write(batch.subarray(off));
        for (const i of items) i.sent?.();
      }
    } catch {
      this.close();
    } finally {
      this.writing = false;
      if (this.dead) for (const i of this.queue.splice(0)) i.sent?.();
    }
  }

  async serve() {
    const buf = new Uint8Array(65536);
    try {
      for (;;) {
        const n = await this.conn.read(buf);
        if (n === null) break;
        this.dec.feed(buf.subarray(0, n));
        for (let f = this.dec.pop(); f; f = this.dec.pop()) this.handle(f);
      }
    } catch {
      // A broken stream or garbage on it: nothing after it can be trusted.
    }
    this.close();
  }

  close() {
    if (this.dead) return;
    this.dead = true;
    conns.delete(this);
    // A host that vanished mid-exec cannot read the result: stop its commands.
    for (const e of this.execs.values()) e.kill(9, false);
    try {
      this.conn.close();
    } catch {
      // already closed
    }
  }

  private handle(f: Frame) {
    try {
      switch (f.type) {
        case T.ping:
          return this.send(encodeJson(T.ok, f.channel, {
            version: VERSION,
            running,
            uptime_ms: Math.round(performance.now() - started),
            pid: Deno.pid,
            ...(args["load-python"] ? { python_settled: pythonSettled } : {}),
          }));
        case T.exec: {
          if (this.execs.has(f.channel)) throw new ProtoError("conflict", "channel already has a command");
          const e = new Exec(this, f.channel, parseJson(f));
          this.execs.set(f.channel, e);
          return e.start();
        }
        case T.stdin_data:
          return this.execs.get(f.channel)?.stdin(f.payload);
        case T.stdin_eof:
          return this.execs.get(f.channel)?.stdin(null);
        case T.signal: {
          const sig = Number(parseJson(f).signal ?? 15);
          return this.execs.get(f.channel)?.kill(sig, false);
        }
        case T.resize:
          return this.execs.get(f.channel)?.resize(parseJson(f));
        case T.proc_list:
          return this.send(encodeJson(T.ok, f.channel, { procs: [] }));
        case T.proc_attach:
        case T.proc_signal: {
          const pid = Number(parseJson(f).pid ?? 0);
          throw new ProtoError("not_found", `no background process ${pid} in this sandbox (${BACKGROUND})`);
        }
        case T.connect:
          throw new ProtoError("unavailable", `${LISTEN}; ${useInstead(args["other-drivers"]!)}`);
        case T.list:
          return this.list(f.channel, parseJson(f));
        case T.file_read:
          return this.read(f.channel, parseJson(f));
        case T.file_write:
          return this.beginUpload(f.channel, parseJson(f));
        case T.data: {
          this.uploads.get(f.channel)?.parts.push(f.payload);
          return;
        }
        case T.end:
          return this.endUpload(f.channel);
        default:
          throw new ProtoError("protocol", `frame type ${f.type} is not for the agent`);
      }
    } catch (err) {
      const code = err instanceof ProtoError ? err.code : err instanceof SyntaxError ? "invalid_argument" : "internal";
      this.send(encodeError(f.channel, code, (err as Error).message));
    }
  }

  private list(ch: number, req: Record<string, unknown>) {
    const path = reqPath(req);
    const self = store.get(path);
    if (!self) throw new ProtoError("not_found", `${path}: No such file or directory`);
    const all = [{ ...self, path: "" }];
    if (self.type === "dir") {
      const prefix = path === "/" ? "/" : path + "/";
      for (const e of store.children(path, Boolean(req.recursive))) all.push({ ...e, path: e.path.slice(prefix.length) });
    }
    for (let i = 0; i < all.length; i += 256) this.send(encodeJson(T.entries, ch, { entries: all.slice(i, i + 256).map(wire) }));
    this.send(encode(T.end, ch));
  }

  private read(ch: number, req: Record<string, unknown>) {
    const path = reqPath(req);
    const e = store.get(path);
    if (!e) throw new ProtoError("not_found", `${path}: No such file or directory`);
    if (e.type !== "file") throw new ProtoError("invalid_argument", `${path} is a ${e.type}, not a regular file`);
    const data = store.read(path);
    this.send(encodeJson(T.ok, ch, wire({ ...e, path: "" })));
    for (const fr of chunks(T.data, ch, data)) this.send(fr);
    this.send(encode(T.end, ch));
  }

  private beginUpload(ch: number, req: Record<string, unknown>) {
    const path = reqPath(req);
    const kind = String(req.kind ?? "file");
    if (!["file", "dir", "symlink"].includes(kind)) {
      throw new ProtoError("invalid_argument", `unknown file kind '${kind}'`);
    }
    store.checkWrite(path, kind);
    if (kind === "file") {
      this.uploads.set(ch, { path, req, parts: [] });
      return;
    }
    if (kind === "symlink" && !req.target) throw new ProtoError("invalid_argument", `symlink ${path} without a target`);
    store.apply({ put: [entryOf(path, kind, req, new Uint8Array())], del: kind === "symlink" ? [path] : [] });
    this.send(encodeJson(T.ok, ch, {}));
  }

  private endUpload(ch: number) {
    const up = this.uploads.get(ch);
    if (!up) return;
    this.uploads.delete(ch);
    store.checkWrite(up.path, "file");
    store.apply({ put: [entryOf(up.path, "file", up.req, concat(up.parts))], del: [] });
    this.send(encodeJson(T.ok, ch, {}));
  }
}

function reqPath(req: Record<string, unknown>): string {
  if (typeof req.path !== "string" || req.path === "") throw new ProtoError("invalid_argument", "request without a path");
  return cleanPath(req.path);
}

function entryOf(path: string, kind: string, req: Record<string, unknown>, data: Uint8Array): Entry {
  const mtime = Number(req.mtime ?? 0) || Math.floor(Date.now() / 1000);
  const mode = Number(req.mode ?? (kind === "dir" ? 0o755 : 0o644)) & 0o7777;
  const e: Entry = { path, type: kind as Entry["type"], mode, mtime };
  if (kind === "file") e.data = data;
  if (kind === "symlink") e.target = String(req.target);
  return e;
}

function wire(e: Entry) {
  return { path: e.path, type: e.type, mode: e.mode, size: e.type === "file" ? e.size ?? 0 : 0, mtime: e.mtime, target: e.target ?? "" };
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let off = 0;
  for (const p of parts) out.set(p, off), (off += p.length);
  return out;
}

// ---- one exec --------------------------------------------------------------

const enc = new TextEncoder();

class Exec {
  private t0 = performance.now();
  private plan: ExecPlan | null = null;
  private stdinParts: Uint8Array[] = [];
  private stdinDone: boolean;
  private waitStdin: (() => void) | null = null;
  private output = 0;
  private ended = false;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private killer: ((sig: number) => void) | null = null;
  private stdinSink: ((b: Uint8Array | null) => void) | null = null;
  private killedBy = 0;
  private timedOut = false;
  // A terminal (-t): its line discipline, the size the host reported, what Ctrl-C does.
  private tty: LineDiscipline | null = null;
  size = { rows: 24, cols: 80 };
  private interrupter: (() => void) | null = null;

  constructor(private c: Conn, private ch: number, private req: Record<string, unknown>) {
    this.stdinDone = !req.stdin;
    if (req.tty) {
      this.stdinDone = false;
      this.resize(req);
      this.tty = new LineDiscipline({
        echo: (b) => this.send(b),
        line: (b) => this.deliver(b),
        eof: () => this.deliver(new Uint8Array()),
        interrupt: () => this.interrupter?.(),
      });
    }
  }

  /// The terminal's size (kept for the record: nothing in a Worker asks for it).
  resize(req: Record<string, unknown>) {
    const rows = Number(req.rows ?? 0), cols = Number(req.cols ?? 0);
    if (rows > 0 && cols > 0) this.size = { rows, cols };
  }

  start() {
    if (this.req.background) {
      throw new ProtoError("unavailable", `${BACKGROUND}; ${useInstead(args["other-drivers"]!)}`);
    }
    running++;
    const argv = (this.req.cmd as string[]) ?? [];
    const env = (this.req.env as Record<string, string>) ?? {};
    const cwd = cleanPath(String(this.req.cwd || args.workdir));
    const timeout = Number(this.req.timeout_ms ?? 0);
    if (timeout > 0) this.timer = setTimeout(() => this.kill(9, true), timeout);
    if (store.get(cwd)?.type !== "dir") return this.end(126, 0, `cannot enter working directory ${cwd}: No such file or directory`);
    const plan = planExec(argv, cwd, store, args["other-drivers"]!, this.tty !== null);
    if ("error" in plan) return this.end(plan.status, 0, plan.error);
    this.plan = plan;
    this.c.send(encodeJson(T.started, this.ch, { pid: Deno.pid }));
    this.run(plan, env, cwd).catch((err) => {
      this.write(2, enc.encode(`sbx: ${err?.message ?? err}\n`));
      this.end(1, 0);
    });
  }

  private async run(plan: ExecPlan, env: Record<string, string>, cwd: string) {
    if (plan.codeFromStdin) {
      plan.code = new TextDecoder().decode(await this.allStdin());
    }
    const io: RunIO = {
      out: (fd: number, b: Uint8Array, outflow?: Int32Array) => this.write(fd, b, outflow),
      setKiller: (k: (sig: number) => void) => (this.killer = k),
      setStdinSink: (s: (b: Uint8Array | null) => void) => {
        this.stdinSink = s;
        for (const p of this.stdinParts) s(p);
        this.stdinParts = [];
        if (this.stdinDone) s(null);
      },
      allStdin: () => this.allStdin(),
      setInterrupter: (i: () => void) => (this.interrupter = i),
      kill: (sig: number) => this.kill(sig, false),
      tty: this.tty !== null,
      otherDrivers: args["other-drivers"]!,
    };
    if (this.ended) return;
    const status = plan.lang === "python"
      ? await pyPool.run(plan, env, cwd, io)
      : await jsPool.run(plan, env, cwd, io);
    if (this.killedBy) return; // already answered
    this.end(status, 0);
  }

  private allStdin(): Promise<Uint8Array> {
    return new Promise((resolve) => {
      const check = () => (this.stdinDone ? resolve(concat(this.stdinParts.splice(0))) : (this.waitStdin = check));
      check();
    });
  }

  /// stdin from the host: through the line discipline on a terminal, where
  /// the end of input is the user's Ctrl-D (stdin_eof is ignored).
  stdin(b: Uint8Array | null) {
    if (!this.tty) return this.deliver(b);
    if (b) this.tty.feed(b);
  }

  /// Input for the command: bytes, an empty array (one end of input: a read
  /// returns 0, later reads go on, as on a terminal) or null (the end).
  private deliver(b: Uint8Array | null) {
    if (b === null) this.stdinDone = true;
    if (this.stdinSink) return this.stdinSink(b);
    if (b?.length) this.stdinParts.push(b);
    else if (b && this.tty) this.stdinDone = true; // Ctrl-D ends a script typed on the terminal
    const w = this.waitStdin;
    this.waitStdin = null;
    w?.();
  }

  /// Sends output; `outflow` (output_gate.ts) learns when the socket has taken it.
  /// Past the cap the rest is dropped, a marker goes to stderr and the exec is stopped.
  private write(fd: number, b: Uint8Array, outflow?: Int32Array) {
    const done = (n: number) => outflow && released(outflow, n);
    if (this.ended) return done(b.length);
    const part = b.subarray(0, Math.max(0, maxOutput - this.output));
    this.output += part.length;
    done(b.length - part.length);
    this.send(part, fd, (n) => done(n));
    if (part.length < b.length) {
      this.c.send(encode(T.stderr_data, this.ch,
        enc.encode(`\n[sbx: output truncated at ${maxOutput} bytes; the command was stopped]\n`)));
      this.kill(9, false);
    }
  }

  /// Output frames; a terminal has one stream, and "\r\n" line ends.
  private send(b: Uint8Array, fd = 1, sent?: (n: number) => void) {
    const data = this.tty ? onlcr(b) : b;
    const type = fd === 2 && !this.tty ? T.stderr_data : T.stdout_data;
    // What the Worker's gate counts is its own bytes, not the added "\r"s.
    let owed = b.length;
    for (const fr of chunks(type, this.ch, data)) {
      const n = Math.min(owed, fr.length - HEADER);
      owed -= n;
      this.c.send(fr, () => sent?.(n));
    }
  }

  kill(sig: number, timedOut: boolean) {
    if (this.ended) return;
    this.killedBy = sig;
    this.timedOut = timedOut;
    this.killer?.(sig);
    this.end(128 + sig, sig);
  }

  private end(status: number, sig: number, error = "") {
    if (this.ended) return;
    this.ended = true;
    running--;
    clearTimeout(this.timer);
    const body: Record<string, unknown> = {
      exit_code: status,
      signal: sig,
      timed_out: this.timedOut,
      duration_ms: Math.round(performance.now() - this.t0),
    };
    if (error) body.error = error;
    this.c.send(encodeJson(T.exit, this.ch, body));
    this.c.execs.delete(this.ch);
    void this.plan;
  }
}

// ---- serve -----------------------------------------------------------------

try {
  Deno.removeSync(args.socket!);
} catch {
  // no stale socket
}
const listener = Deno.listen({ transport: "unix", path: args.socket! });
Deno.chmodSync(args.socket!, 0o600);
jsPool.warm();
// The JS spare boots at once (a few ms of CPU, ~30 MiB for the whole agent).
// Python's interpreter costs a few hundred ms of CPU and ~170 MiB, so it loads
// on the first Python exec, unless --warm-python (a warm pool's spare, whose
// point is a fast first exec): then once no exec has run for a moment, since
// loading under a JS exec would take the CPU cap they share.
const WARM_AFTER_IDLE_MS = 150;
let idleSince = performance.now();
const warmPythonWhenIdle = () => {
  if (running > 0) idleSince = performance.now();
  if (performance.now() - idleSince < WARM_AFTER_IDLE_MS) return void setTimeout(warmPythonWhenIdle, 50);
  void pyPool.warm();
};
if (args["warm-python"]) warmPythonWhenIdle();
// --exit-when-warm: the host's warm-up run (backends/deno/runtime.cpp), whose
// DENO_DIR then holds V8's compiled code of the agent, its Workers and
// Pyodide's JavaScript, for every sandbox's own DENO_DIR to start from.
if (args["exit-when-warm"]) {
  void Promise.all([pyPool.warm(), jsPool.booted()]).then(() => Deno.exit(0));
}
for await (const conn of listener) new Conn(conn).serve();
