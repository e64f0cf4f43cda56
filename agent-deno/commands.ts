// Which commands a deno sandbox runs, and how their arguments map onto the
// interpreters: python3/python (Pyodide) with -c CODE, -m MODULE, FILE or -
// (the script on stdin); node with -e/-p CODE, FILE or -; deno run FILE and
// deno eval CODE. With a terminal (-t), python3 with no script (or -i) is
// the interactive Python console and node/deno with no script (or deno repl)
// a JavaScript REPL. Anything else fails like a missing command, naming the
// drivers that run real programs.
import { cleanPath, type Store } from "./store.ts";

export interface ExecPlan {
  lang: "python" | "js";
  code: string;
  filename: string;
  argv: string[]; // sys.argv / [script, ...Deno.args]
  codeFromStdin: boolean; // the script itself comes on stdin
  needsStdin: boolean; // JS only: stdin is read whole before the run
  console: boolean; // an interactive console (after the code, if any): python3 -i, or a REPL on a terminal
}

export type PlanResult = ExecPlan | { error: string; status: number };

// Interpreter options that change nothing here.
const PY_IGNORED = new Set(["-u", "-B", "-E", "-s", "-S", "-I", "-O", "-OO", "-q", "-b", "-bb", "-d", "-v"]);

export function planExec(argv: string[], cwd: string, store: Store, otherDrivers: string, tty: boolean): PlanResult {
  if (argv.length === 0) return { error: "no command given", status: 127 };
  const prog = argv[0].slice(argv[0].lastIndexOf("/") + 1);
  let plan: PlanResult;
  if (/^python(3(\.\d+)?)?$/.test(prog)) plan = planPython(argv, cwd, store, tty);
  else if (prog === "node" || prog === "nodejs") plan = planNode(argv, cwd, store, tty);
  else if (prog === "deno") plan = planDeno(argv, cwd, store, tty);
  else {
    const onTty = tty ? "; with -t: python3 (the Python console), node or deno (a JavaScript REPL), or a Python/JS script" : "";
    return {
      error: `${argv[0]}: command not found: a deno sandbox runs only python3/python (Pyodide) and node/deno ` +
        `(JavaScript/TypeScript)${onTty}; use --driver ${otherDrivers.split(",")[0].trim()} (drivers that run any program: ${otherDrivers})`,
      status: 127,
    };
  }
  // A terminal never reaches end of input by itself: a JS program gets none.
  if (tty && !("error" in plan) && plan.lang === "js") plan.needsStdin = false;
  return plan;
}

function readScript(path: string, cwd: string, store: Store, prog: string): { code: string } | { error: string; status: number } {
  const p = cleanPath(path, cwd);
  const e = store.get(p);
  if (!e || e.type !== "file") {
    return { error: `${prog}: can't open file '${p}': [Errno 2] No such file or directory`, status: 2 };
  }
  return { code: new TextDecoder().decode(store.read(p)) };
}

function planPython(argv: string[], cwd: string, store: Store, tty: boolean): PlanResult {
  let i = 1, inspect = false;
  for (; i < argv.length && (PY_IGNORED.has(argv[i]) || argv[i] === "-i"); i++) inspect ||= argv[i] === "-i";
  const a = argv[i];
  const base = { lang: "python" as const, needsStdin: false, codeFromStdin: false, console: inspect };
  if (a === "-c") {
    if (i + 1 >= argv.length) return { error: "python3: argument expected for the -c option", status: 2 };
    return { ...base, code: argv[i + 1], filename: "<string>", argv: ["-c", ...argv.slice(i + 2)] };
  }
  if (a === "-m") {
    const mod = argv[i + 1];
    if (!mod) return { error: "python3: argument expected for the -m option", status: 2 };
    return {
      ...base,
      code: `import runpy\nrunpy.run_module(${JSON.stringify(mod)}, run_name="__main__", alter_sys=True)\n`,
      filename: "<runpy>",
      argv: [mod, ...argv.slice(i + 2)],
    };
  }
  if (a === undefined && (tty || inspect)) return { ...base, code: "", filename: "<stdin>", argv: [""], console: true };
  if (a === undefined || a === "-") {
    return { ...base, code: "", filename: "<stdin>", argv: [a ?? "", ...argv.slice(i + 1)], codeFromStdin: true };
  }
  if (a.startsWith("-")) return { error: `python3: option ${a} is not supported in a deno sandbox`, status: 2 };
  const s = readScript(a, cwd, store, "python3");
  if ("error" in s) return s;
  return { ...base, code: s.code, filename: a, argv: argv.slice(i) };
}

function planNode(argv: string[], cwd: string, store: Store, tty: boolean): PlanResult {
  const a = argv[1];
  const base = { lang: "js" as const, needsStdin: true, codeFromStdin: false, console: false };
  if ((a === undefined && tty) || a === "-i" || a === "--interactive") return replPlan(tty, "node");
  if (a === "-e" || a === "--eval" || a === "-p" || a === "--print") {
    const code = argv[2];
    if (code === undefined) return { error: `node: ${a} requires an argument`, status: 9 };
    const body = a === "-p" || a === "--print" ? `console.log(eval(${JSON.stringify(code)}));` : code;
    return { ...base, code: body, filename: "[eval]", argv: ["[eval]", ...argv.slice(3)] };
  }
  if (a === undefined || a === "-") return { ...base, code: "", filename: "[stdin]", argv: ["-", ...argv.slice(2)], codeFromStdin: true, needsStdin: false };
  if (a.startsWith("-")) return { error: `node: option ${a} is not supported in a deno sandbox`, status: 9 };
  const s = readScript(a, cwd, store, "node");
  if ("error" in s) return s;
  return { ...base, code: s.code, filename: a, argv: argv.slice(1) };
}

function planDeno(argv: string[], cwd: string, store: Store, tty: boolean): PlanResult {
  const sub = argv[1];
  const base = { lang: "js" as const, needsStdin: true, codeFromStdin: false, console: false };
  if ((sub === undefined && tty) || sub === "repl") return replPlan(tty, "deno repl");
  if (sub === "eval") {
    const rest = argv.slice(2).filter((x) => !x.startsWith("-"));
    if (!rest.length) return { error: "deno eval: the code to run is missing", status: 1 };
    return { ...base, code: rest[0], filename: "[eval]", argv: ["[eval]", ...rest.slice(1)] };
  }
  if (sub === "run") {
    let i = 2;
    while (i < argv.length && argv[i].startsWith("-") && argv[i] !== "-") i++; // permission flags: the sandbox decides
    const file = argv[i];
    if (!file) return { error: "deno run: the script to run is missing", status: 1 };
    if (file === "-") return { ...base, code: "", filename: "[stdin].ts", argv: ["-", ...argv.slice(i + 1)], codeFromStdin: true, needsStdin: false };
    const s = readScript(file, cwd, store, "deno");
    if ("error" in s) return s;
    return { ...base, code: s.code, filename: file, argv: argv.slice(i) };
  }
  return { error: `deno ${sub ?? ""}: only \`deno run FILE\`, \`deno eval CODE\` and \`deno repl\` (with -t) run in a deno sandbox`, status: 1 };
}

// The JS REPL reads typed lines: it needs the terminal's line editing.
function replPlan(tty: boolean, what: string): PlanResult {
  if (!tty) return { error: `${what}: the JavaScript REPL needs a terminal: use sbx exec -t (or -it)`, status: 2 };
  return { lang: "js", code: "", filename: "[repl]", argv: ["[repl]"], codeFromStdin: false, needsStdin: false, console: true };
}
