// JavaScript/TypeScript execs, each in a Worker with no permissions at all
// (js_worker.ts); a REPL (js_repl.ts) gets the terminal's lines as they come.
import type { ExecPlan } from "./commands.ts";
import type { RunIO } from "./run_io.ts";
import type { Store } from "./store.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();
// How long Ctrl-C waits for the REPL to take it before the exec is ended
// (a statement looping without end never returns to read it).
const INTERRUPT_WAIT_MS = 1000;

function startJsWorker(): Worker {
  return new Worker(new URL("./js_worker.ts", import.meta.url).href, {
    type: "module",
    name: "sbx-js",
    // deno-lint-ignore no-explicit-any
    deno: { permissions: "none" } as any,
  });
}

export class JsPool {
  // A Worker started ahead of time, so an exec does not wait for one to boot;
  // each runs one exec and is replaced once that exec is over (booting beside
  // it would slow it down: they share the CPU cap).
  private spare: Worker | null = null;

  /// `restart`: hand the process back for a fresh one (a Worker stuck in a loop).
  constructor(private store: Store, private restart: () => void) {}

  /// Boots the spare (a few ms of CPU).
  warm() {
    this.spare ??= startJsWorker();
  }

  /// Resolves once the spare has booted (it answers).
  booted(): Promise<void> {
    this.warm();
    const w = this.spare!;
    return new Promise((resolve) => {
      const answered = (e: MessageEvent) => {
        if (e.data?.op !== "alive") return;
        w.removeEventListener("message", answered);
        resolve();
      };
      w.addEventListener("message", answered);
      w.postMessage({ op: "alive?" });
    });
  }

  async run(plan: ExecPlan, env: Record<string, string>, cwd: string, io: RunIO): Promise<number> {
    const w = this.spare ?? startJsWorker();
    this.spare = null;
    try {
      return await this.runIn(w, plan, env, cwd, io);
    } finally {
      setTimeout(() => (this.spare ??= startJsWorker()), 0);
    }
  }

  private async runIn(w: Worker, plan: ExecPlan, env: Record<string, string>, cwd: string, io: RunIO): Promise<number> {
    // [0] output bytes on their way (output_gate.ts), [1] set once the exec is over: drop any more.
    const outflow = new SharedArrayBuffer(8);
    const flow = new Int32Array(outflow);
    let killed = false;
    let answer = (_status: number) => {};
    io.setKiller((sig) => {
      killed = true;
      Atomics.store(flow, 1, 1); // a Worker stuck printing in a loop posts nothing more
      answer(128 + sig);
      // A Worker that still answers messages is in its event loop and stops;
      // one that does not is stuck in a loop, which only a new process ends.
      const stuck = setTimeout(() => {
        w.terminate();
        this.restart();
      }, 300);
      w.onmessage = (e) => {
        if (e.data?.op !== "alive") return;
        clearTimeout(stuck);
        w.terminate();
      };
      w.postMessage({ op: "alive?" });
    });
    // JavaScript reads its stdin whole (it is not blocking like Python's).
    const stdin = plan.needsStdin ? await io.allStdin() : new Uint8Array();
    if (killed) return 137;
    let interrupted: ReturnType<typeof setTimeout> | undefined;
    if (plan.console) this.feedRepl(w, io, (t) => (interrupted = t));
    else io.setInterrupter(() => io.kill(2)); // Ctrl-C: SIGINT, which a program here does not handle
    return await new Promise<number>((resolve) => {
      answer = resolve;
      w.onmessage = (e) => {
        const m = e.data;
        if (m.op === "out") io.out(m.fd, m.data, flow);
        else if (m.op === "interrupted") clearTimeout(interrupted);
        else if (m.op === "done") {
          w.terminate();
          try {
            this.store.apply(m.changes);
          } catch (err) {
            io.out(2, enc.encode(`sbx: the exec's file changes were not saved: ${err}\n`));
            return resolve(1);
          }
          resolve(m.status);
        }
      };
      w.onerror = (e) => {
        e.preventDefault();
        io.out(2, enc.encode(`${e.message}\n`));
        w.terminate();
        resolve(1);
      };
      w.postMessage({
        code: plan.code, filename: plan.filename, argv: plan.argv, env, cwd, stdin, tree: this.store.dump(), outflow,
        console: plan.console, otherDrivers: io.otherDrivers,
      });
    });
  }

  /// The terminal's lines, Ctrl-D and Ctrl-C to the REPL in `w`.
  private feedRepl(w: Worker, io: RunIO, pending: (t: ReturnType<typeof setTimeout>) => void) {
    io.setStdinSink((b) => {
      if (b === null || b.length === 0) w.postMessage({ op: "eof" });
      else w.postMessage({ op: "line", text: dec.decode(b) });
    });
    io.setInterrupter(() => {
      w.postMessage({ op: "interrupt" });
      pending(setTimeout(() => io.kill(2), INTERRUPT_WAIT_MS));
    });
  }
}
