// What a deno sandbox lacks, said in one line instead of Deno's permission
// error ("NotCapable: Requires net access to ..., run again with the
// --allow-net flag" and its stack): the user cannot pass Deno flags, so the
// line says what is not available here and which driver has it. Used wherever
// such an error can reach the user: the JS worker's uncaught errors, the
// Python runner's (Pyodide's JS bridge), and the agent's worker error events.

// Deno's wording: `Requires KIND access to "TARGET", run again with the --allow-KIND flag`
// (also for imports, whose error is a TypeError rather than NotCapable).
const DENO_PERMISSION = /Requires (\w+) access(?: to "?([^"]*?)"?)?, (?:run again|specify)/;

export const LISTEN = "deno sandboxes have no listening sockets: nothing inside can serve a port";
export const BACKGROUND = "deno sandboxes run no background processes";

/// "use --driver subprocess (or runsc, microvm)", from the agent's --other-drivers list.
export function useInstead(otherDrivers: string): string {
  const [first, ...rest] = otherDrivers.split(",").map((d) => d.trim()).filter(Boolean);
  if (!first) return "use another driver";
  return `use --driver ${first}${rest.length ? ` (or ${rest.join(", ")})` : ""}`;
}

function lacks(kind: string, target: string, listening: boolean): string {
  const t = target ? ` (${target})` : "";
  switch (kind) {
    case "net":
      return listening ? `${LISTEN}${t}` : `deno sandboxes have no network: nothing inside can open a connection${t}`;
    case "run":
      return `deno sandboxes cannot start processes${t}`;
    case "ffi":
      return `deno sandboxes load no native libraries${t}`;
    case "read":
    case "write":
      return `deno sandboxes have no host file system: ${target || "that path"} cannot be ${kind === "read" ? "read" : "written"} ` +
        `this way (the sandbox's files are reached through Deno.readFile/writeFile and friends, or Python's open)`;
    case "env":
      return `deno sandboxes have no process environment${t}: an exec sees only its own variables (--env)`;
    case "sys":
      return `deno sandboxes expose no system information${t}`;
    case "import":
      return `deno sandboxes import no remote or host modules${t}: put the code in the script itself`;
    default:
      return `deno sandboxes have no ${kind} access${t}`;
  }
}

/// The one line for a Deno permission error, or null when `err` is not one.
/// `stack` tells a listening socket from a connection (same permission, same wording).
export function explainPermission(message: string, stack: string, otherDrivers: string): string | null {
  const own = message.indexOf("deno sandboxes ");
  if (own >= 0 && message.includes("; use ")) return message.slice(own); // already ours (a refused listen)
  const m = DENO_PERMISSION.exec(message);
  if (!m) return null;
  const listening = /\b(listen|serve|createServer)/i.test(stack);
  return `${lacks(m[1], m[2] ?? "", listening)}; ${useInstead(otherDrivers)}`;
}

/// The same for any thrown value (an Error or not).
export function explainError(err: unknown, otherDrivers: string): string | null {
  if (!(err instanceof Error) && typeof err !== "string") return null;
  const message = err instanceof Error ? err.message : err;
  return explainPermission(message, err instanceof Error ? err.stack ?? "" : "", otherDrivers);
}
