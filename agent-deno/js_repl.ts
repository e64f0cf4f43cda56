// The JavaScript REPL of `sbx exec -t ID -- node` (or deno) in a deno
// sandbox, inside the exec's JS Worker: each line the terminal hands over
// (tty.ts did the editing) is evaluated as a script in the Worker's global
// scope (node:vm's runInThisContext, so `let` and `const` carry over to the
// next line), its value printed as a REPL does. Input that ends inside a
// statement waits for more lines ("... "). No TypeScript, no top-level await.

export interface ReplHost {
  out: (fd: number, s: string) => void;
  /// An error thrown by the input: printed; true when it ended the exec (Deno.exit).
  uncaught: (err: unknown) => boolean;
  finish: (status: number) => void;
}

export interface Repl {
  line: (text: string) => void;
  interrupt: () => void;
  eof: () => void;
  /// The prompt again, after output of the REPL's own (an error from a timer).
  prompt: () => void;
}

// What V8 says when a script stops in the middle of a statement.
const INCOMPLETE = /Unexpected end of input|Unterminated template literal|missing \) after argument list$/;

export async function startRepl(host: ReplHost): Promise<Repl> {
  const vm = await import("node:vm");
  let buf = "";
  let ended = false;
  const prompt = () => void (!ended && host.out(1, buf ? "... " : "> "));
  host.out(1, `Deno ${Deno.version.deno} JavaScript REPL in a deno sandbox (no TypeScript, no top-level await)\n` +
    "exit using Ctrl-D, .exit or Deno.exit()\n");
  prompt();
  const end = (status: number) => {
    ended = true;
    host.finish(status);
  };
  return {
    line(text) {
      if (ended) return;
      if (!buf && text.trim() === ".exit") return end(0);
      buf += text;
      if (!buf.trim()) return void ((buf = ""), prompt());
      let value: unknown;
      try {
        value = vm.runInThisContext(buf, { filename: "REPL" });
      } catch (err) {
        if (err instanceof SyntaxError && INCOMPLETE.test(err.message) && text.trim()) return prompt();
        buf = "";
        if (host.uncaught(err)) return void (ended = true);
        return prompt();
      }
      buf = "";
      host.out(1, Deno.inspect(value, { colors: false, depth: 4 }) + "\n");
      prompt();
    },
    interrupt() {
      buf = "";
      host.out(1, "\n");
      prompt();
    },
    eof() {
      host.out(1, "\n");
      end(0);
    },
    prompt,
  };
}
