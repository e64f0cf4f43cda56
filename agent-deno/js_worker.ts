/// <reference no-default-lib="true" />
/// <reference lib="deno.worker" />
// One JavaScript/TypeScript exec in a Worker with no permissions at all.
// The sandbox's files are an in-memory copy of the store behind Deno's file
// functions; console, process and Deno.exit are redirected to the exec's
// streams and status. The exec ends when its module has been evaluated and no
// timer it set is pending.
import { cleanPath, parentOf, type Changes, type Entry } from "./store.ts";
import { OutputGate } from "./output_gate.ts";
import { explainError, LISTEN, useInstead } from "./permissions.ts";
import { type Repl, startRepl } from "./js_repl.ts";

// Deno builds its Node compatibility layer (`process`) on first use, ~15-20
// ms: here, while the Worker boots as the pool's spare, rather than in the
// exec, whose installRuntime redirects process.stdout.
void (globalThis as { process?: unknown }).process;

interface Run {
  code: string;
  filename: string;
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  stdin: Uint8Array;
  tree: Entry[];
  outflow: SharedArrayBuffer; // output bytes on their way (output_gate.ts)
  console: boolean; // the REPL (js_repl.ts) instead of a module
  otherDrivers: string;
}

const enc = new TextEncoder();
const dec = new TextDecoder();
// deno-lint-ignore no-explicit-any
const D = Deno as any;
let gate: OutputGate | null = null;
const out = (fd: number, s: string | Uint8Array) => {
  const bytes = typeof s === "string" ? enc.encode(s) : s;
  const post = (data: Uint8Array) => self.postMessage({ op: "out", fd, data });
  if (gate) gate.send(post, bytes);
  else post(bytes.slice());
};

class Exit extends Error {
  constructor(public status: number) {
    super(`exit ${status}`);
  }
}

// ---- the file tree -------------------------------------------------------

const files = new Map<string, Entry>();
const touched = new Set<string>();
let cwd = "/";
const now = () => Math.floor(Date.now() / 1000);

function notFound(p: string): never {
  throw new Deno.errors.NotFound(`No such file or directory (os error 2): ${p}`);
}
function resolve(p: string | URL): string {
  return cleanPath(p instanceof URL ? p.pathname : String(p), cwd);
}
function lookup(p: string): Entry | undefined {
  return p === "/" ? { path: "/", type: "dir", mode: 0o755, mtime: 0 } : files.get(p);
}
function put(e: Entry) {
  const parent = lookup(parentOf(e.path));
  if (!parent || parent.type !== "dir") notFound(parentOf(e.path));
  files.set(e.path, e);
  touched.add(e.path);
}
function readBytes(p: string | URL): Uint8Array {
  const path = resolve(p);
  let e = lookup(path);
  for (let hops = 0; e?.type === "symlink" && hops < 40; hops++) e = lookup(cleanPath(e.target ?? "", parentOf(e.path)));
  if (!e) notFound(path);
  if (e.type === "dir") throw new Deno.errors.IsADirectory(`Is a directory (os error 21): ${path}`);
  return e.data ?? new Uint8Array();
}
function writeBytes(p: string | URL, data: Uint8Array, opts?: { append?: boolean; mode?: number }) {
  const path = resolve(p);
  const cur = lookup(path);
  if (cur?.type === "dir") throw new Deno.errors.IsADirectory(`Is a directory (os error 21): ${path}`);
  let bytes = data;
  if (opts?.append && cur?.data) {
    bytes = new Uint8Array(cur.data.length + data.length);
    bytes.set(cur.data);
    bytes.set(data, cur.data.length);
  }
  put({ path, type: "file", mode: cur?.mode ?? opts?.mode ?? 0o644, mtime: now(), data: bytes });
}
function statOf(p: string | URL) {
  const path = resolve(p);
  const e = lookup(path);
  if (!e) notFound(path);
  return {
    isFile: e.type === "file",
    isDirectory: e.type === "dir",
    isSymlink: e.type === "symlink",
    size: e.data?.length ?? 0,
    mtime: new Date(e.mtime * 1000),
    mode: e.mode,
  };
}
function mkdir(p: string | URL, opts?: { recursive?: boolean; mode?: number }) {
  const path = resolve(p);
  if (lookup(path)) {
    if (opts?.recursive && lookup(path)!.type === "dir") return;
    throw new Deno.errors.AlreadyExists(`File exists (os error 17): ${path}`);
  }
  if (opts?.recursive && !lookup(parentOf(path))) mkdir(parentOf(path), opts);
  put({ path, type: "dir", mode: opts?.mode ?? 0o755, mtime: now() });
}
function remove(p: string | URL, opts?: { recursive?: boolean }) {
  const path = resolve(p);
  if (!lookup(path) || path === "/") notFound(path);
  const kids = [...files.keys()].filter((k) => k.startsWith(path + "/"));
  if (kids.length && !opts?.recursive) throw new Error(`Directory not empty (os error 39): ${path}`);
  for (const k of [path, ...kids]) files.delete(k), touched.add(k);
}
function readDir(p: string | URL) {
  const path = resolve(p);
  const prefix = path === "/" ? "/" : path + "/";
  return [...files.values()]
    .filter((e) => e.path.startsWith(prefix) && !e.path.slice(prefix.length).includes("/"))
    .map((e) => ({
      name: e.path.slice(prefix.length),
      isFile: e.type === "file",
      isDirectory: e.type === "dir",
      isSymlink: e.type === "symlink",
    }));
}

function installFs() {
  const sync = {
    readFileSync: readBytes,
    readTextFileSync: (p: string) => dec.decode(readBytes(p)),
    writeFileSync: writeBytes,
    writeTextFileSync: (p: string, s: string, o?: { append?: boolean }) => writeBytes(p, enc.encode(s), o),
    statSync: statOf,
    lstatSync: statOf,
    mkdirSync: mkdir,
    removeSync: remove,
    readDirSync: readDir,
  };
  for (const [name, fn] of Object.entries(sync)) {
    D[name] = fn;
    // deno-lint-ignore no-explicit-any
    const asyncName = name.slice(0, -4);
    D[asyncName] = asyncName === "readDir"
      ? (p: string) => (async function* () { yield* readDir(p); })()
      : // deno-lint-ignore no-explicit-any
        async (...a: any[]) => (fn as (...x: unknown[]) => unknown)(...a);
  }
  D.cwd = () => cwd;
  D.chdir = (p: string) => {
    const path = resolve(p);
    if (lookup(path)?.type !== "dir") notFound(path);
    cwd = path;
  };
}

function changes(original: Map<string, Entry>): Changes {
  const c: Changes = { put: [], del: [] };
  for (const p of [...touched].sort()) {
    const e = files.get(p);
    if (e) c.put.push(e);
    else if (original.has(p)) c.del.push(p);
  }
  return c;
}

// ---- streams, process, exit ------------------------------------------------

function fmt(args: unknown[]): string {
  return args.map((a) => (typeof a === "string" ? a : Deno.inspect(a, { colors: false, depth: 6 }))).join(" ") + "\n";
}

let pendingTimers = 0;

function installRuntime(m: Run) {
  const c = globalThis.console;
  for (const k of ["log", "info", "debug"] as const) c[k] = (...a: unknown[]) => out(1, fmt(a));
  for (const k of ["error", "warn", "trace"] as const) c[k] = (...a: unknown[]) => out(2, fmt(a));
  const exit = (code?: number) => {
    throw new Exit((code ?? 0) & 0xff);
  };
  const env = { ...m.env };
  D.exit = exit;
  Object.defineProperty(D, "args", { value: m.argv.slice(1), configurable: true });
  D.env = {
    get: (k: string) => env[k],
    set: (k: string, v: string) => void (env[k] = v),
    delete: (k: string) => void delete env[k],
    has: (k: string) => k in env,
    toObject: () => ({ ...env }),
  };
  const writer = (fd: number) => ({
    write: async (b: Uint8Array) => (out(fd, b), b.length),
    writeSync: (b: Uint8Array) => (out(fd, b), b.length),
  });
  D.stdout = writer(1);
  D.stderr = writer(2);
  let stdinOff = 0;
  D.stdin = {
    readSync: (b: Uint8Array) => {
      if (stdinOff >= m.stdin.length) return null;
      const n = Math.min(b.length, m.stdin.length - stdinOff);
      b.set(m.stdin.subarray(stdinOff, stdinOff + n));
      stdinOff += n;
      return n;
    },
    read: async (b: Uint8Array) => D.stdin.readSync(b),
    readable: new Blob([m.stdin.slice() as Uint8Array<ArrayBuffer>]).stream(),
  };
  // deno-lint-ignore no-explicit-any
  const p = (globalThis as any).process;
  if (p) {
    for (const [k, v] of Object.entries({
      argv: ["node", ...m.argv],
      env,
      exit,
      cwd: () => cwd,
      stdout: { write: (s: string | Uint8Array) => (out(1, s), true) },
      stderr: { write: (s: string | Uint8Array) => (out(2, s), true) },
    })) Object.defineProperty(p, k, { value: v, configurable: true, writable: true });
  }
  const st = globalThis.setTimeout, ct = globalThis.clearTimeout;
  const live = new Set<ReturnType<typeof setTimeout>>();
  globalThis.setTimeout = ((fn: () => void, ms?: number, ...a: unknown[]) => {
    pendingTimers++;
    const id = st(() => {
      live.delete(id);
      pendingTimers--;
      runGuarded(() => fn(...(a as [])));
    }, ms);
    live.add(id);
    return id;
  }) as typeof setTimeout;
  globalThis.clearTimeout = ((id: ReturnType<typeof setTimeout>) => {
    if (live.delete(id)) pendingTimers--;
    ct(id);
  }) as typeof clearTimeout;
}

let finished = false;
let original = new Map<string, Entry>();

function finish(status: number) {
  if (finished) return;
  finished = true;
  self.postMessage({ op: "done", status, changes: changes(original) });
}

let otherDrivers = "";
let repl: Repl | null = null;

/// Prints an uncaught error (what the sandbox lacks in one line, not Deno's
/// permission error); true when it ends the exec: Deno.exit, or any error
/// outside the REPL.
function uncaught(err: unknown): boolean {
  if (err instanceof Exit) return finish(err.status), true;
  const why = explainError(err, otherDrivers);
  const prefix = repl ? "Uncaught " : "";
  if (why) out(2, `sbx: ${why}\n`);
  else if (repl) out(2, `${prefix}${err instanceof Error ? `${err.name}: ${err.message}` : Deno.inspect(err)}\n`);
  else out(2, (err instanceof Error ? err.stack ?? String(err) : `Uncaught ${Deno.inspect(err)}`) + "\n");
  if (repl) return false;
  finish(1);
  return true;
}

function fail(err: unknown) {
  if (!uncaught(err)) repl?.prompt();
}

function runGuarded(fn: () => void) {
  try {
    fn();
  } catch (err) {
    fail(err);
  }
}

self.addEventListener("unhandledrejection", (e) => {
  e.preventDefault();
  fail((e as PromiseRejectionEvent).reason);
});
self.addEventListener("error", (e) => {
  e.preventDefault();
  fail((e as ErrorEvent).error ?? (e as ErrorEvent).message);
});

// Serving a port cannot work here: say so at the call, whatever catches it.
function refuseListening() {
  const refuse = () => {
    throw new Deno.errors.NotCapable(`${LISTEN}; ${useInstead(otherDrivers)}`);
  };
  for (const name of ["listen", "listenTls", "listenDatagram", "serve"]) D[name] = refuse;
}

self.onmessage = async (e: MessageEvent) => {
  const op = e.data?.op;
  if (op === "alive?") return self.postMessage({ op: "alive" });
  if (op === "line") return repl?.line(e.data.text);
  if (op === "interrupt") return repl?.interrupt(), self.postMessage({ op: "interrupted" });
  if (op === "eof") return repl?.eof();
  const m = e.data as Run;
  otherDrivers = m.otherDrivers;
  const flow = new Int32Array(m.outflow);
  gate = new OutputGate(flow.subarray(0, 1), () => finished || Atomics.load(flow, 1) !== 0);
  for (const en of m.tree) files.set(en.path, en);
  original = new Map(files);
  cwd = m.cwd;
  if (lookup(cwd)?.type !== "dir") {
    out(2, `sbx: cannot enter working directory ${cwd}: No such file or directory\n`);
    return finish(126);
  }
  installFs();
  installRuntime(m);
  refuseListening();
  if (m.console) {
    repl = await startRepl({ out, uncaught, finish });
    return;
  }
  const ts = /\.(ts|tsx|mts)$/.test(m.filename) || m.filename === "[eval]" ? "typescript" : "javascript";
  try {
    const b64 = btoa(Array.from(enc.encode(m.code), (c) => String.fromCharCode(c)).join(""));
    await import(`data:application/${ts};base64,${b64}`);
  } catch (err) {
    return fail(err);
  }
  const wait = () => (finished ? undefined : pendingTimers > 0 ? setTimeoutRaw(wait, 5) : finish(0));
  wait();
};

const setTimeoutRaw = globalThis.setTimeout.bind(globalThis);
