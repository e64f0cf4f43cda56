// Pyodide interpreters, each in its own Worker: one is kept loaded (so a warm
// exec only runs code); concurrent execs get extra ones (as many as the memory
// cap allows), which are dropped after a while idle. A killed or timed-out
// exec is interrupted (KeyboardInterrupt); an interpreter that does not stop
// within a grace period costs the agent its process (see restartProcess).
import type { ExecPlan } from "./commands.ts";
import type { Store } from "./store.ts";
import type { RunIO } from "./run_io.ts";
import { explainPermission } from "./permissions.ts";

const IDLE_MS = 30_000;
const GRACE_MS = 1000;
const STDIN_BUF = 64 * 1024;

interface PyWorker {
  w: Worker;
  ready: Promise<void>;
  busy: boolean;
  gen: number; // the store generation its file system mirrors; 0 = stale
  ctl: Int32Array;
  data: Uint8Array;
  idleTimer: ReturnType<typeof setTimeout> | undefined;
  onMessage: (m: Record<string, unknown>) => void;
}

export class PyPool {
  private workers: PyWorker[] = [];
  private waiting: (() => void)[] = [];

  constructor(private indexURL: string, private snapshot: string, private store: Store, private max: number,
              private restart: () => void) {}

  /// Loads the first interpreter in the background; resolves when it is ready.
  warm(): Promise<void> {
    if (this.workers.length === 0) this.spawn();
    return this.workers[0].ready.catch(() => {});
  }

  private spawn(): PyWorker {
    const w = new Worker(new URL("./py_worker.ts", import.meta.url).href, {
      type: "module",
      name: "sbx-python",
      // Reads only Pyodide's own files; nothing else at all.
      // deno-lint-ignore no-explicit-any
      deno: { permissions: { read: this.snapshot ? [this.indexURL, this.snapshot] : [this.indexURL], write: false, net: false, env: false, run: false, ffi: false, sys: false, import: false } } as any,
    });
    // ctl[0] stdin state, ctl[1] bytes waiting, ctl[2] Pyodide's interrupt flag; stdin data from byte 16.
    const sab = new SharedArrayBuffer(16 + STDIN_BUF);
    const pw: PyWorker = {
      w,
      ready: Promise.resolve(),
      busy: false,
      gen: 0,
      ctl: new Int32Array(sab, 0, 3),
      data: new Uint8Array(sab, 16),
      idleTimer: undefined,
      onMessage: () => {},
    };
    pw.ready = new Promise((resolve, reject) => {
      const t0 = performance.now();
      pw.onMessage = (m) => {
        if (m.op === "ready") {
          console.error(`sbx-agent-deno: a Python interpreter loaded in ${Math.round(performance.now() - t0)} ms`);
          resolve();
        }
        else if (m.op === "fatal") reject(new Error(`Python did not start: ${m.message}`));
      };
    });
    pw.ready.catch(() => this.drop(pw));
    w.onmessage = (e) => pw.onMessage(e.data);
    w.onerror = (e) => {
      e.preventDefault();
      pw.onMessage({ op: "fatal", message: e.message });
    };
    w.postMessage({ op: "init", indexURL: this.indexURL, snapshot: this.snapshot, stdin: sab });
    this.workers.push(pw);
    return pw;
  }

  private drop(pw: PyWorker) {
    pw.w.terminate();
    clearTimeout(pw.idleTimer);
    this.workers = this.workers.filter((x) => x !== pw);
  }

  private async acquire(): Promise<PyWorker> {
    for (;;) {
      const idle = this.workers.find((x) => !x.busy);
      if (idle) {
        idle.busy = true;
        clearTimeout(idle.idleTimer);
        // A spare loads once this one is ready (not beside it: they would share
        // the CPU cap), so that a concurrent exec need not wait for one.
        void idle.ready.then(() => {
          if (!this.workers.some((x) => !x.busy) && this.workers.length < this.max) this.spawn();
        }, () => {});
        return idle;
      }
      if (this.workers.length < this.max) {
        const pw = this.spawn();
        pw.busy = true;
        return pw;
      }
      await new Promise<void>((r) => this.waiting.push(r));
    }
  }

  private release(pw: PyWorker) {
    pw.busy = false;
    pw.onMessage = () => {};
    if (this.workers.indexOf(pw) > 0) pw.idleTimer = setTimeout(() => !pw.busy && this.drop(pw), IDLE_MS);
    this.waiting.shift()?.();
  }

  async run(plan: ExecPlan, env: Record<string, string>, cwd: string, io: RunIO): Promise<number> {
    const pw = await this.acquire();
    let killed = false;
    let running = false;
    let finish = (_status: number) => {};
    io.setKiller((sig) => {
      killed = true;
      finish(128 + sig);
      // KeyboardInterrupt, and no input after it: code that catches the one
      // (the console does) ends at its next read.
      Atomics.store(pw.ctl, 2, 2);
      Atomics.store(pw.ctl, 0, 2);
      Atomics.notify(pw.ctl, 0);
      // Interrupted code that swallows KeyboardInterrupt keeps running; so does
      // a Worker still loading. Neither can be stopped short of a new process.
      const stuck = setTimeout(() => {
        // Out of the pool at once, so that waiting execs get another interpreter
        // while the agent waits for a quiet moment to be replaced.
        this.workers = this.workers.filter((x) => x !== pw);
        this.waiting.shift()?.();
        this.restart();
      }, GRACE_MS);
      pw.onMessage = (m) => {
        if (m.op !== "done") return;
        clearTimeout(stuck);
        pw.gen = 0; // its files hold the killed exec's writes, which the store never got
        this.release(pw);
      };
      if (!running) clearTimeout(stuck); // killed before its code started: nothing to stop
    });
    try {
      await pw.ready;
    } catch (err) {
      this.release(pw);
      throw err;
    }
    if (killed) {
      this.release(pw);
      return 137;
    }
    // stdin: the Worker blocks on the shared buffer until bytes or EOF arrive.
    // An empty piece is a terminal's Ctrl-D: one read returns 0.
    const queue: Uint8Array[] = [];
    let eof = false;
    const feed = () => {
      if (Atomics.load(pw.ctl, 0) !== 0) return;
      const next = queue.shift();
      if (next?.length === 0) {
        Atomics.store(pw.ctl, 0, 3);
      } else if (next) {
        const n = Math.min(next.length, pw.data.length);
        pw.data.set(next.subarray(0, n));
        if (n < next.length) queue.unshift(next.subarray(n));
        Atomics.store(pw.ctl, 1, n);
        Atomics.store(pw.ctl, 0, 1);
      } else if (eof) {
        Atomics.store(pw.ctl, 0, 2);
      } else {
        return;
      }
      Atomics.notify(pw.ctl, 0);
    };
    Atomics.store(pw.ctl, 0, 0);
    Atomics.store(pw.ctl, 1, 0);
    // This exec's output bytes on their way to the host (output_gate.ts).
    const outflow = new Int32Array(new SharedArrayBuffer(4));
    const fresh = pw.gen === this.store.generation;
    const startGen = this.store.generation;
    const status = await new Promise<number>((resolve) => {
      finish = resolve;
      pw.onMessage = (m) => {
        if (m.op === "out") io.out(m.fd as number, m.data as Uint8Array, outflow);
        else if (m.op === "stdin_taken") feed();
        else if (m.op === "done") {
          const before = this.store.generation;
          try {
            this.store.apply(m.changes as never);
            pw.gen = before === startGen ? this.store.generation : 0;
          } catch (err) {
            pw.gen = 0;
            io.out(2, new TextEncoder().encode(`sbx: the exec's file changes were not saved: ${err}\n`));
            return resolve(1);
          }
          resolve(m.status as number);
        } else if (m.op === "fatal") {
          const why = explainPermission(String(m.message), String(m.message), io.otherDrivers);
          io.out(2, new TextEncoder().encode(why ? `sbx: ${why}\n` : `sbx: the Python interpreter failed: ${m.message}\n`));
          this.drop(pw);
          void this.warm();
          resolve(1);
        }
      };
      io.setStdinSink((b) => {
        if (b) queue.push(b);
        else eof = true;
        feed();
      });
      // Ctrl-C: KeyboardInterrupt at the next bytecode or in the read it waits
      // in; input typed but not yet read goes, as a terminal flushes it.
      io.setInterrupter(() => {
        queue.length = 0;
        Atomics.store(pw.ctl, 2, 2);
        Atomics.notify(pw.ctl, 0);
      });
      running = true;
      pw.w.postMessage({
        op: "run",
        code: plan.code,
        filename: plan.filename,
        argv: plan.argv,
        env,
        cwd,
        session: env.SBX_PYTHON_SESSION ?? "",
        console: plan.console,
        tty: io.tty,
        otherDrivers: io.otherDrivers,
        tree: fresh ? null : this.store.dump(),
        outflow: outflow.buffer,
      });
      pw.gen = startGen;
    });
    if (!killed && this.workers.includes(pw)) this.release(pw);
    return status;
  }
}
